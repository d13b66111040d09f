//! A minimal HTTP/1.1 client for `GET` over [`std::net::TcpStream`]: enough for the Prometheus HTTP API and
//! the agents' `/api/results`. `http://` only (no TLS); one request per connection (`Connection: close`);
//! `Content-Length`, chunked and read-to-close bodies; every step bounded by one deadline and the answer by
//! [`MAX_BODY`].
#![forbid(unsafe_code)]

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The largest answer read (headers and body), 64 MiB.
pub const MAX_BODY: usize = 64 << 20;

/// A parsed `http://HOST[:PORT][/PATH]` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// The URL as the user gave it (for messages).
    pub text: String,
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// Port (80 when not given).
    pub port: u16,
    /// Path prefix without a trailing `/` (empty for the root), e.g. `/prometheus`.
    pub path: String,
}

impl Url {
    /// Parses `http://HOST[:PORT][/PATH]`; `HOST:PORT` without a scheme is taken as `http://`. Refuses https
    /// (this client has no TLS), other schemes, credentials, queries and fragments, with a message that says
    /// what to give instead.
    pub fn parse(text: &str) -> Result<Url, String> {
        let t = text.trim();
        if t.is_empty() {
            return Err("empty URL: give http://HOST:PORT".into());
        }
        let lower = t.to_ascii_lowercase();
        let rest = if lower.starts_with("https://") {
            return Err(format!(
                "{t}: https is not supported (no TLS in this client): give an http:// URL, e.g. through \
                 `kubectl port-forward` or a local proxy"
            ));
        } else if lower.starts_with("http://") {
            &t[7..]
        } else if let Some(i) = t.find("://") {
            return Err(format!(
                "{t}: unsupported scheme '{}': give an http:// URL",
                &t[..i]
            ));
        } else {
            t
        };
        if rest.contains(['?', '#']) {
            return Err(format!(
                "{t}: give the base URL without a query or fragment, e.g. http://HOST:PORT"
            ));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(format!("{t}: credentials in the URL are not supported"));
        }
        if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("{t}: the path has spaces or control characters"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let Some(end) = v6.find(']') else {
                return Err(format!("{t}: unclosed '[' in the host"));
            };
            let after = &v6[end + 1..];
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p),
                None if after.is_empty() => None,
                None => return Err(format!("{t}: unexpected '{after}' after the IPv6 address")),
            };
            (&v6[..end], port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(format!("{t}: no host: give http://HOST:PORT"));
        }
        if host.contains(':') && !authority.starts_with('[') {
            return Err(format!(
                "{t}: write an IPv6 address in brackets, e.g. http://[::1]:9090"
            ));
        }
        let port = match port {
            None => 80,
            Some(p) => match p.parse::<u16>() {
                Ok(0) | Err(_) => return Err(format!("{t}: bad port '{p}' (1-65535)")),
                Ok(n) => n,
            },
        };
        Ok(Url {
            text: t.trim_end_matches('/').to_string(),
            host: host.to_string(),
            port,
            path: path.trim_end_matches('/').to_string(),
        })
    }

    /// The value of the `Host` header.
    fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == 80 {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// An HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// `Content-Type`, lower case, parameters included (empty when absent).
    pub content_type: String,
    /// `Location` (redirects).
    pub location: Option<String>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

/// Percent-encodes a query parameter value (everything but RFC 3986's unreserved characters).
pub fn encode_component(s: &str) -> String {
    let mut o = String::with_capacity(s.len() * 2);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

/// An I/O error in words, without the `(os error N)` suffix.
pub fn describe(e: &io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error ") {
        Some(i) => text[..i].to_lowercase(),
        None => text,
    }
}

/// The [`MeshError`](super::MeshError) of a failed [`get`]: an answer that is not HTTP makes `url` "not
/// `what`", anything else unreachable.
pub fn error(url: &Url, what: &'static str, e: &io::Error) -> super::MeshError {
    if e.kind() == io::ErrorKind::InvalidData {
        super::MeshError::NotService {
            url: url.text.clone(),
            what,
            why: describe(e),
        }
    } else {
        super::MeshError::Unreachable {
            url: url.text.clone(),
            why: describe(e),
        }
    }
}

/// `GET url.path + path_and_query` within `timeout` (connect, send and read together).
pub fn get(url: &Url, path_and_query: &str, timeout: Duration) -> io::Result<Response> {
    let deadline = Instant::now() + timeout;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no answer within {timeout:?}"),
                )
            })
    };
    let addrs: Vec<SocketAddr> = crate::resolve::lookup(&url.host, url.port)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot resolve {}: {e}", url.host)))?;
    let mut last = io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} has no address", url.host),
    );
    let mut stream = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, left()?) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = e,
        }
    }
    let mut stream = stream.ok_or(last)?;
    let request = format!(
        "GET {}{} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nUser-Agent: roundtrip/{}\r\nConnection: close\r\n\r\n",
        url.path,
        path_and_query,
        url.host_header(),
        env!("CARGO_PKG_VERSION")
    );
    stream.set_write_timeout(Some(left()?))?;
    stream.write_all(request.as_bytes())?;
    let mut raw = Vec::with_capacity(16 * 1024);
    let mut buf = [0u8; 16 * 1024];
    loop {
        stream.set_read_timeout(Some(left()?))?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                if raw.len() > MAX_BODY {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("the answer is over {} MiB", MAX_BODY >> 20),
                    ));
                }
                // A complete Content-Length or chunked answer ends the read even if the server keeps the
                // connection open.
                if let Ok(Some(_)) = complete(&raw) {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no complete answer within {}",
                        crate::units::fmt_duration(timeout)
                    ),
                ));
            }
            Err(e) => return Err(e),
        }
    }
    parse_response(&raw).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The length of the full answer in `raw` when it is known to be complete.
fn complete(raw: &[u8]) -> Result<Option<usize>, String> {
    let Some(head_end) = find(raw, b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]);
    let body = &raw[head_end + 4..];
    if header(&head, "transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        return Ok(dechunk(body).ok().map(|(_, used)| head_end + 4 + used));
    }
    if let Some(len) = header(&head, "content-length") {
        let len: usize = len
            .trim()
            .parse()
            .map_err(|_| format!("bad Content-Length '{len}'"))?;
        return Ok((body.len() >= len).then_some(head_end + 4 + len));
    }
    Ok(None)
}

/// Parses a whole HTTP/1.x answer: status line, headers, body (by Content-Length, chunked, or up to the end).
pub fn parse_response(raw: &[u8]) -> Result<Response, String> {
    if raw.is_empty() {
        return Err("the server closed the connection without answering".into());
    }
    let Some(head_end) = find(raw, b"\r\n\r\n") else {
        return Err(if raw.starts_with(b"HTTP/") {
            "the answer's headers are cut short".into()
        } else {
            "the answer is not HTTP".into()
        });
    };
    let head = String::from_utf8_lossy(&raw[..head_end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err("the answer is not HTTP/1.x".into());
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .filter(|s| (100..1000).contains(s))
        .ok_or_else(|| {
            format!(
                "bad HTTP status line '{}'",
                status_line.chars().take(60).collect::<String>()
            )
        })?;
    let body = &raw[head_end + 4..];
    let body = if header(&head, "transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        dechunk(body)?.0
    } else if let Some(len) = header(&head, "content-length") {
        let len: usize = len
            .trim()
            .parse()
            .map_err(|_| format!("bad Content-Length '{len}'"))?;
        if body.len() < len {
            return Err(format!(
                "the answer is cut short: {} of {len} bytes",
                body.len()
            ));
        }
        body[..len].to_vec()
    } else {
        body.to_vec()
    };
    Ok(Response {
        status,
        content_type: header(&head, "content-type")
            .unwrap_or_default()
            .to_ascii_lowercase(),
        location: header(&head, "location"),
        body,
    })
}

/// A header's value (first occurrence, name case-insensitive).
fn header(head: &str, name: &str) -> Option<String> {
    head.split("\r\n").skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_string())
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Decodes a chunked body; returns it and the bytes used (through the final CRLF).
fn dechunk(mut b: &[u8]) -> Result<(Vec<u8>, usize), String> {
    let total = b.len();
    let mut out = Vec::with_capacity(b.len());
    loop {
        let Some(eol) = find(b, b"\r\n") else {
            return Err("the chunked answer is cut short".into());
        };
        let line = String::from_utf8_lossy(&b[..eol]);
        let hex = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(hex, 16).map_err(|_| format!("bad chunk size '{hex}'"))?;
        b = &b[eol + 2..];
        if size == 0 {
            // Trailers, then an empty line.
            loop {
                let Some(eol) = find(b, b"\r\n") else {
                    return Err("the chunked answer is cut short".into());
                };
                b = &b[eol + 2..];
                if eol == 0 {
                    return Ok((out, total - b.len()));
                }
            }
        }
        if size.checked_add(2).is_none_or(|n| b.len() < n) {
            return Err("the chunked answer is cut short".into());
        }
        out.extend_from_slice(&b[..size]);
        if &b[size..size + 2] != b"\r\n" {
            return Err("bad chunk framing".into());
        }
        b = &b[size + 2..];
        if out.len() > MAX_BODY {
            return Err(format!("the answer is over {} MiB", MAX_BODY >> 20));
        }
    }
}

/// A real Prometheus's recorded answers (tests/fixtures/prometheus: matrices, a big one, an HTML page, bad data,
/// the root page), whose every cut the readers are tested on.
#[cfg(test)]
pub(super) fn recorded_answers() -> Vec<Vec<u8>> {
    [
        "p50.http",
        "big.http",
        "html.http",
        "baddata.http",
        "root.http",
    ]
    .iter()
    .map(|name| {
        std::fs::read(format!(
            "{}/tests/fixtures/prometheus/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = Url::parse("http://127.0.0.1:9090/").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("127.0.0.1", 9090, "")
        );
        assert_eq!(u.text, "http://127.0.0.1:9090");
        let u = Url::parse("HTTP://prom.example/prometheus/").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("prom.example", 80, "/prometheus")
        );
        assert_eq!(u.host_header(), "prom.example");
        let u = Url::parse("[::1]:9911").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 9911));
        assert_eq!(u.host_header(), "[::1]:9911");
        let u = Url::parse("10.0.0.1:9911").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("10.0.0.1", 9911));
        for (bad, says) in [
            ("https://prom:9090", "https is not supported"),
            ("ftp://x", "unsupported scheme"),
            ("http://:9090", "no host"),
            ("http://h:0", "bad port"),
            ("http://h:99999", "bad port"),
            ("http://h:x", "bad port"),
            ("http://u:p@h:1", "credentials"),
            ("http://h:1/?q=1", "query"),
            ("http://[::1", "unclosed"),
            ("http://::1:9090", "brackets"),
            ("", "empty"),
        ] {
            let e = Url::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn encoding() {
        assert_eq!(
            encode_component("rate(x{probe=\"tcp\"}[5m]) / y"),
            "rate%28x%7Bprobe%3D%22tcp%22%7D%5B5m%5D%29%20%2F%20y"
        );
    }

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(format!(
            "{}/tests/fixtures/prometheus/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }

    #[test]
    fn recorded_answers() {
        let r = parse_response(&fixture("p50.http")).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.content_type, "application/json");
        assert!(r.body.starts_with(b"{\"status\":\"success\"") && r.body.ends_with(b"}}"));
        assert_eq!(
            complete(&fixture("p50.http")).unwrap(),
            Some(fixture("p50.http").len())
        );
        // Chunked (a large answer) and an HTML page.
        let big = fixture("big.http");
        let r = parse_response(&big).unwrap();
        assert!(r.body.starts_with(b"{\"status\":\"success\"") && r.body.ends_with(b"]}}"));
        serde_json::from_slice::<serde_json::Value>(&r.body).unwrap();
        assert_eq!(complete(&big).unwrap(), Some(big.len()));
        assert_eq!(complete(&big[..big.len() - 3]).unwrap(), None);
        let r = parse_response(&fixture("html.http")).unwrap();
        assert!(r.content_type.starts_with("text/html") && r.body.starts_with(b"<!DOCTYPE html>"));
        let r = parse_response(&fixture("root.http")).unwrap();
        assert_eq!(
            (r.status, r.location.as_deref()),
            (302, Some("/classic/graph"))
        );
        let r = parse_response(&fixture("notfound.http")).unwrap();
        assert_eq!(
            (r.status, r.body.as_slice()),
            (404, &b"404 page not found\n"[..])
        );
    }

    #[test]
    fn every_cut_of_a_recorded_answer_is_handled() {
        for raw in super::recorded_answers() {
            for n in 0..raw.len() {
                let cut = &raw[..n];
                // Never a panic; a cut body is either an error or a shorter (read-to-close) answer. (What the
                // readers make of the cut answers is tested beside them, in prometheus.rs and agents.rs.)
                let _ = parse_response(cut);
                let _ = complete(cut);
            }
        }
    }

    #[test]
    fn bad_answers_are_errors_not_panics() {
        for raw in [
            &b""[..],
            b"SSH-2.0-OpenSSH_9.2\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\nabc",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nab\r\n",
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"HTTP/1.1 200",
            b"\xff\xfe\r\n\r\n",
        ] {
            assert!(
                parse_response(raw).is_err(),
                "{:?}",
                String::from_utf8_lossy(raw)
            );
        }
        // Read-to-close body and chunk extensions/trailers.
        let r = parse_response(b"HTTP/1.0 200 OK\r\n\r\nhello").unwrap();
        assert_eq!(r.body, b"hello");
        let r = parse_response(b"HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n3;x=1\r\nabc\r\n0\r\nT: v\r\n\r\n")
            .unwrap();
        assert_eq!(r.body, b"abc");
    }
}
