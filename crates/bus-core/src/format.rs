//! Body serializers: JSON (default) and MessagePack.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{Error, Result};

/// How a message body (and its envelope) is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Format {
    /// `serde_json`: readable, and the format any language can produce.
    #[default]
    Json,
    /// `rmp-serde`, with field names (maps), so fields can be added compatibly.
    MessagePack,
}

impl Format {
    /// Encodes a body.
    pub fn encode<T: Serialize>(self, message_type: &str, value: &T) -> Result<Vec<u8>> {
        let encoded = match self {
            Format::Json => {
                let mut out = Vec::new();
                crate::json_writer::write(&mut out, value)
                    .map(|()| out)
                    .map_err(Into::into)
            }
            Format::MessagePack => rmp_serde::to_vec_named(value).map_err(Into::into),
        };
        encoded.map_err(|source| Error::Encode {
            message_type: message_type.to_owned(),
            source,
        })
    }

    /// Decodes a body; a body that does not fit `T` is an [`Error::Decode`], never a panic.
    pub fn decode<T: DeserializeOwned>(self, message_type: &str, bytes: &[u8]) -> Result<T> {
        crate::depth::check(self, bytes)
            .map_err(|reason| Error::decode(format!("body of `{message_type}`"), reason))?;
        self.decode_unchecked(message_type, bytes)
    }

    /// Decodes the body of an envelope that [`crate::Envelope::decode`] (or a wire format)
    /// returned, on the host's path. A JSON body needs no separate nesting scan: serde_json
    /// refuses more than 128 levels ([`crate::transport::MAX_NESTING`]) itself; rmp-serde only stops
    /// at 1,024, so a MessagePack body is checked first.
    pub(crate) fn decode_body<T: DeserializeOwned>(
        self,
        message_type: &str,
        bytes: &[u8],
    ) -> Result<T> {
        match self {
            Format::Json => self.decode_unchecked(message_type, bytes),
            _ => self.decode(message_type, bytes),
        }
    }

    fn decode_unchecked<T: DeserializeOwned>(self, message_type: &str, bytes: &[u8]) -> Result<T> {
        let decoded: Result<T, crate::BoxError> = match self {
            Format::Json => serde_json::from_slice(bytes).map_err(Into::into),
            Format::MessagePack => rmp_serde::from_slice(bytes).map_err(Into::into),
        };
        decoded.map_err(|source| Error::Decode {
            what: format!("body of `{message_type}`"),
            reason: source.to_string(),
            source: Some(source),
        })
    }
}
