//! TLS trust roots for `rediss://` (feature `tls`): a private CA instead of the system's.
//!
//! fred builds a rustls connector with the system roots for every `rediss://` URL; with a
//! private CA given, that connector is replaced by one that trusts only the CA's
//! certificates. The crypto provider is ring, the backend fred is built with.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use fred::prelude::Config;
use fred::types::config::{TlsConfig, TlsConnector};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

use crate::{Error, Result};

/// Where the certificates of a private CA come from; read and parsed at connect.
#[derive(Clone)]
pub(crate) enum CaSource {
    Pem(Arc<[u8]>),
    File(PathBuf),
}

impl fmt::Debug for CaSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaSource::Pem(pem) => write!(f, "private CA ({} bytes of PEM)", pem.len()),
            CaSource::File(path) => write!(f, "private CA from {}", path.display()),
        }
    }
}

/// `config` with a TLS connector that trusts only the CA in `ca`.
pub(crate) fn with_ca(mut config: Config, ca: &CaSource) -> Result<Config> {
    if config.tls.is_none() {
        return Err(Error::Config(
            "a TLS CA was given but the URL does not use TLS: use rediss://".into(),
        ));
    }
    let (pem, origin) = match ca {
        CaSource::Pem(pem) => (pem.to_vec(), "the PEM given".to_owned()),
        CaSource::File(path) => {
            let origin = path.display().to_string();
            let pem = std::fs::read(path)
                .map_err(|e| Error::Config(format!("cannot read the TLS CA file {origin}: {e}")))?;
            (pem, origin)
        }
    };
    let bad = |why: String| Error::Config(format!("invalid TLS CA in {origin}: {why}"));
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| bad(format!("not valid PEM ({e})")))?;
        roots
            .add(cert)
            .map_err(|e| bad(format!("not a usable certificate ({e})")))?;
    }
    if roots.is_empty() {
        return Err(bad("no `BEGIN CERTIFICATE` section found".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS setup failed: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.tls = Some(TlsConfig::from(TlsConnector::from(client)));
    Ok(config)
}

/// An I/O error of a first connect. A certificate that rustls refused (fred reports it as
/// an I/O error whose text names it) becomes an error that says so and how to fix it.
pub(crate) fn io_error(error: &fred::error::Error) -> Option<Error> {
    let details = error.details();
    let reason = details
        .find("InvalidCertificate(")
        .zip(details.rfind(')'))
        .and_then(|(start, end)| details.get(start..=end));
    reason.map(|reason| {
        Error::Config(format!(
            "the Redis server's TLS certificate is not trusted ({reason}): if a private CA \
             signed it, give the CA with RedisConfig::tls_ca_pem or tls_ca_file"
        ))
    })
}
