//! A tiny blocking RESP2 client over `std::net::TcpStream`.
//!
//! Enough for test assertions and cleanup; no pipelining, no cluster
//! redirection (a `MOVED` reply is returned as [`Resp::Error`]).

use std::io::{self, BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::url::parse_url;

/// Every socket operation is bounded, so a wedged server fails a test instead of hanging it.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// One RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resp {
    /// `+OK`
    Simple(String),
    /// `-ERR ...`: a command error, returned as a value rather than an `io::Error`.
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$n` bulk string; `None` is the nil reply.
    Bulk(Option<Vec<u8>>),
    /// `*n` array; `None` is the nil array.
    Array(Option<Vec<Resp>>),
}

impl Resp {
    /// The bytes of a bulk or simple string.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Resp::Bulk(Some(b)) => Some(b),
            Resp::Simple(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    /// A bulk or simple string as UTF-8 text.
    pub fn as_str(&self) -> Option<&str> {
        self.as_bytes().and_then(|b| std::str::from_utf8(b).ok())
    }

    /// The value of an integer reply.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Resp::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// The elements of a non-nil array reply.
    pub fn as_array(&self) -> Option<&[Resp]> {
        match self {
            Resp::Array(Some(items)) => Some(items),
            _ => None,
        }
    }

    /// True for `+OK`.
    pub fn is_ok(&self) -> bool {
        matches!(self, Resp::Simple(s) if s == "OK")
    }

    /// True for a nil bulk string or nil array.
    pub fn is_nil(&self) -> bool {
        matches!(self, Resp::Bulk(None) | Resp::Array(None))
    }
}

/// Where [`SyncClient::connect`] connects: a loopback port or a `redis://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `127.0.0.1:port`
    Port(u16),
    /// `redis://[user:pass@]host[:port][/db]`; `redis-cluster://` connects to its first node.
    Url(String),
}

impl From<u16> for Endpoint {
    fn from(port: u16) -> Self {
        Endpoint::Port(port)
    }
}

impl From<&str> for Endpoint {
    fn from(url: &str) -> Self {
        Endpoint::Url(url.to_owned())
    }
}

impl From<String> for Endpoint {
    fn from(url: String) -> Self {
        Endpoint::Url(url)
    }
}

impl From<&String> for Endpoint {
    fn from(url: &String) -> Self {
        Endpoint::Url(url.clone())
    }
}

/// A blocking RESP2 connection; every read and write has a 10 s timeout.
#[derive(Debug)]
pub struct SyncClient {
    reader: BufReader<TcpStream>,
}

impl SyncClient {
    /// Connects to a port on 127.0.0.1 or to a `redis://` URL (AUTH and SELECT applied).
    pub fn connect(endpoint: impl Into<Endpoint>) -> io::Result<SyncClient> {
        match endpoint.into() {
            Endpoint::Port(port) => Self::connect_addr(("127.0.0.1", port)),
            Endpoint::Url(url) => {
                let target = parse_url(&url)?;
                let mut client = Self::connect_addr((target.host.as_str(), target.port))?;
                if let Some(password) = &target.password {
                    let reply = match &target.user {
                        Some(user) => client.cmd(&["AUTH", user.as_str(), password.as_str()])?,
                        None => client.cmd(&["AUTH", password.as_str()])?,
                    };
                    expect_ok(reply, "AUTH")?;
                }
                if let Some(db) = &target.db {
                    let reply = client.cmd(&["SELECT", db.as_str()])?;
                    expect_ok(reply, "SELECT")?;
                }
                Ok(client)
            }
        }
    }

    fn connect_addr(addr: impl ToSocketAddrs) -> io::Result<SyncClient> {
        let mut last = None;
        for sa in addr.to_socket_addrs()? {
            match TcpStream::connect_timeout(&sa, CONNECT_TIMEOUT) {
                Ok(stream) => {
                    stream.set_read_timeout(Some(IO_TIMEOUT))?;
                    stream.set_write_timeout(Some(IO_TIMEOUT))?;
                    stream.set_nodelay(true)?;
                    return Ok(SyncClient {
                        reader: BufReader::new(stream),
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address")))
    }

    /// Replaces the 10 s read/write timeout (e.g. shorter for readiness probes).
    pub fn set_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        let stream = self.reader.get_ref();
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))
    }

    /// Sends one command and reads its reply. Takes `&[&str]`, `&[&[u8]]`, `&[String]`, ...
    ///
    /// A Redis error reply is `Ok(Resp::Error(..))`; `Err` means the connection failed.
    pub fn cmd<A: AsRef<[u8]>>(&mut self, args: &[A]) -> io::Result<Resp> {
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for arg in args {
            let arg = arg.as_ref();
            buf.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            buf.extend_from_slice(arg);
            buf.extend_from_slice(b"\r\n");
        }
        let stream = self.reader.get_mut();
        stream.write_all(&buf)?;
        stream.flush()?;
        read_reply(&mut self.reader)
    }

    /// `GET key`: the value, or `None` when the key does not exist.
    pub fn get(&mut self, key: &str) -> io::Result<Option<Vec<u8>>> {
        match self.cmd(&[b"GET", key.as_bytes()])? {
            Resp::Bulk(v) => Ok(v),
            other => Err(unexpected("GET", &other)),
        }
    }

    /// `SET key value`.
    pub fn set(&mut self, key: &str, value: impl AsRef<[u8]>) -> io::Result<()> {
        let reply = self.cmd(&[b"SET", key.as_bytes(), value.as_ref()])?;
        expect_ok(reply, "SET")
    }

    /// All keys matching a glob, via `SCAN MATCH pattern COUNT 1000` (never `KEYS`); sorted, deduplicated.
    pub fn scan_match(&mut self, pattern: &str) -> io::Result<Vec<String>> {
        let mut keys = Vec::new();
        let mut cursor = "0".to_owned();
        loop {
            let reply = self.cmd(&["SCAN", cursor.as_str(), "MATCH", pattern, "COUNT", "1000"])?;
            let parts = reply.as_array().filter(|p| p.len() == 2);
            let (next, batch) = match parts {
                Some([next, Resp::Array(Some(batch))]) => (next, batch),
                _ => return Err(unexpected("SCAN", &reply)),
            };
            keys.extend(
                batch
                    .iter()
                    .filter_map(|k| k.as_bytes())
                    .map(|k| String::from_utf8_lossy(k).into_owned()),
            );
            cursor = next
                .as_str()
                .ok_or_else(|| unexpected("SCAN", &reply))?
                .to_owned();
            if cursor == "0" {
                break;
            }
        }
        // SCAN may return a key more than once.
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// An integer reply, or a bulk string holding one (`GET` of a counter); a nil reply
    /// (a missing key) is 0. For `LLEN`, `ZCARD`, `HLEN`, `GET`, ... in assertions.
    pub fn int<A: AsRef<[u8]>>(&mut self, args: &[A]) -> io::Result<i64> {
        let reply = self.cmd(args)?;
        if reply.is_nil() {
            return Ok(0);
        }
        reply
            .as_int()
            .or_else(|| reply.as_str().and_then(|s| s.parse().ok()))
            .ok_or_else(|| unexpected("an integer", &reply))
    }

    /// A key's size by its type: `LLEN`, `ZCARD`, `HLEN`, `SCARD`; 0 when it is missing.
    pub fn len(&mut self, key: &str) -> io::Result<i64> {
        let kind = self.cmd(&["TYPE", key])?;
        let cmd = match kind.as_str() {
            Some("list") => "LLEN",
            Some("zset") => "ZCARD",
            Some("hash") => "HLEN",
            Some("set") => "SCARD",
            Some("none") => return Ok(0),
            _ => return Err(unexpected("TYPE", &kind)),
        };
        self.int(&[cmd, key])
    }

    /// A list's elements (`LRANGE key 0 -1`); empty when the key is missing.
    pub fn list(&mut self, key: &str) -> io::Result<Vec<Vec<u8>>> {
        let reply = self.cmd(&["LRANGE", key, "0", "-1"])?;
        let items = reply
            .as_array()
            .ok_or_else(|| unexpected("LRANGE", &reply))?;
        items
            .iter()
            .map(|item| {
                item.as_bytes()
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| unexpected("LRANGE", &reply))
            })
            .collect()
    }

    /// `INFO section` as text (e.g. `"server"`, `"cluster"`).
    pub fn info(&mut self, section: &str) -> io::Result<String> {
        let reply = self.cmd(&["INFO", section])?;
        reply
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| unexpected("INFO", &reply))
    }
}

/// Reads a field such as `process_id` from `INFO` or `CLUSTER INFO` text.
pub fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k == field).then(|| v.trim())
    })
}

fn expect_ok(reply: Resp, what: &str) -> io::Result<()> {
    if reply.is_ok() {
        Ok(())
    } else {
        Err(unexpected(what, &reply))
    }
}

fn unexpected(what: &str, reply: &Resp) -> io::Error {
    io::Error::other(format!("{what}: unexpected reply {reply:?}"))
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

fn read_line(r: &mut impl BufRead) -> io::Result<String> {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    if !line.ends_with(b"\r\n") {
        return Err(invalid("RESP line without CRLF".into()));
    }
    line.truncate(line.len() - 2);
    String::from_utf8(line).map_err(|e| invalid(format!("RESP line not UTF-8: {e}")))
}

fn parse_len(s: &str) -> io::Result<i64> {
    s.parse()
        .map_err(|_| invalid(format!("bad RESP length/integer {s:?}")))
}

/// Reads one RESP2 reply (recursively for arrays).
pub(crate) fn read_reply(r: &mut impl BufRead) -> io::Result<Resp> {
    let line = read_line(r)?;
    let (kind, rest) = line.split_at(line.len().min(1));
    match kind {
        "+" => Ok(Resp::Simple(rest.to_owned())),
        "-" => Ok(Resp::Error(rest.to_owned())),
        ":" => Ok(Resp::Integer(parse_len(rest)?)),
        "$" => {
            let len = parse_len(rest)?;
            if len < 0 {
                return Ok(Resp::Bulk(None));
            }
            let mut data = vec![0; len as usize + 2];
            r.read_exact(&mut data)?;
            if !data.ends_with(b"\r\n") {
                return Err(invalid("bulk string without CRLF".into()));
            }
            data.truncate(len as usize);
            Ok(Resp::Bulk(Some(data)))
        }
        "*" => {
            let len = parse_len(rest)?;
            if len < 0 {
                return Ok(Resp::Array(None));
            }
            (0..len)
                .map(|_| read_reply(r))
                .collect::<io::Result<Vec<_>>>()
                .map(|items| Resp::Array(Some(items)))
        }
        _ => Err(invalid(format!("unknown RESP2 reply {line:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> io::Result<Resp> {
        read_reply(&mut &bytes[..])
    }

    #[test]
    fn parses_resp2_replies() {
        assert_eq!(parse(b"+OK\r\n").unwrap(), Resp::Simple("OK".into()));
        assert_eq!(parse(b"-ERR x\r\n").unwrap(), Resp::Error("ERR x".into()));
        assert_eq!(parse(b":-7\r\n").unwrap(), Resp::Integer(-7));
        assert_eq!(parse(b"$-1\r\n").unwrap(), Resp::Bulk(None));
        assert_eq!(
            parse(b"$4\r\na\r\nb\r\n").unwrap(),
            Resp::Bulk(Some(b"a\r\nb".to_vec()))
        );
        assert_eq!(
            parse(b"*2\r\n$1\r\nk\r\n*-1\r\n").unwrap(),
            Resp::Array(Some(vec![
                Resp::Bulk(Some(b"k".to_vec())),
                Resp::Array(None)
            ]))
        );
        assert!(parse(b"$3\r\nab").is_err());
        assert!(parse(b"").is_err());
        assert!(parse(b"%1\r\n").is_err());
    }

    #[test]
    fn reads_info_fields() {
        let info = "# Server\r\nredis_version:7.0.15\r\nprocess_id:42\r\n";
        assert_eq!(info_field(info, "process_id"), Some("42"));
        assert_eq!(info_field(info, "nope"), None);
    }
}
