//! Parsing of the `redis://` URLs that [`crate::SyncClient::connect`] accepts.

use std::io;

#[derive(Debug, Default, PartialEq)]
pub(crate) struct UrlTarget {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) user: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: Option<String>,
}

/// Parses `redis://[user[:pass]@]host[:port][/db]` (and the first node of `redis-cluster://`).
pub(crate) fn parse_url(url: &str) -> io::Result<UrlTarget> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{why}: {url}"));
    let rest = url
        .strip_prefix("redis://")
        .or_else(|| url.strip_prefix("redis-cluster://"))
        .ok_or_else(|| bad("only redis:// and redis-cluster:// URLs are supported"))?;
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut target = UrlTarget::default();
    let hostport = match authority.rsplit_once('@') {
        Some((userinfo, hostport)) => {
            let (user, pass) = userinfo.split_once(':').unwrap_or(("", userinfo));
            target.user = (!user.is_empty()).then(|| percent_decode(user));
            target.password = Some(percent_decode(pass));
            hostport
        }
        None => authority,
    };
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) => (h, p.parse().map_err(|_| bad("bad port"))?),
        None => (hostport, 6379),
    };
    target.host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    target.port = port;
    if target.host.is_empty() {
        return Err(bad("missing host"));
    }
    target.db = (!path.is_empty() && path != "0").then(|| path.to_owned());
    Ok(target)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let t = parse_url("redis://u:p%40ss@localhost:6380/2").unwrap();
        assert_eq!(
            t,
            UrlTarget {
                host: "localhost".into(),
                port: 6380,
                user: Some("u".into()),
                password: Some("p@ss".into()),
                db: Some("2".into()),
            }
        );
        let t = parse_url("redis://:secret@127.0.0.1").unwrap();
        assert_eq!(
            (t.user, t.password, t.port),
            (None, Some("secret".into()), 6379)
        );
        let t = parse_url("redis-cluster://127.0.0.1:7000?node=127.0.0.1:7001").unwrap();
        assert_eq!((t.host.as_str(), t.port, t.db), ("127.0.0.1", 7000, None));
        assert!(parse_url("rediss://127.0.0.1").is_err());
        assert!(parse_url("redis://:6379").is_err());
    }
}
