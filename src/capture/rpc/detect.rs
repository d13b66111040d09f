//! Protocol detection: by the server's port first, then by the content of the first payload.
#![forbid(unsafe_code)]

use super::{Carrier, Dir, Proto, be16, be32};

/// The protocol usually served on `port`.
pub fn by_port(port: u16, carrier: Carrier) -> Option<Proto> {
    Some(match (port, carrier) {
        (2049 | 111 | 20048, _) => Proto::Nfs,
        (5432, Carrier::Tcp) => Proto::Pgsql,
        (3306, Carrier::Tcp) => Proto::Mysql,
        (6379, Carrier::Tcp) => Proto::Redis,
        (53 | 5353, _) => Proto::Dns,
        (80 | 8080 | 8000 | 3128, Carrier::Tcp) => Proto::Http,
        (1521 | 1522, Carrier::Tcp) => Proto::Tns,
        (445 | 139, Carrier::Tcp) => Proto::Smb2,
        (11111, _) => Proto::Sockperf,
        (443 | 8443, Carrier::Tcp) => Proto::Tls,
        _ => return None,
    })
}

/// True for a port that some known protocol is served on (the server side of a connection caught mid-stream).
pub fn is_service_port(port: u16) -> bool {
    by_port(port, Carrier::Tcp).is_some() || by_port(port, Carrier::Udp).is_some()
}

/// Recognises a protocol from the first payload seen in `dir`.
pub fn by_content(dir: Dir, b: &[u8], carrier: Carrier) -> Option<Proto> {
    let rpc_call = |m: &[u8]| be32(m, 4) == Some(0) && be32(m, 8) == Some(2);
    let rpc_reply = |m: &[u8]| be32(m, 4) == Some(1) && be32(m, 8).is_some_and(|s| s <= 1);
    match carrier {
        Carrier::Udp => {
            if b.len() >= 24 && (rpc_call(b) || (dir == Dir::Response && rpc_reply(b))) {
                return Some(Proto::Nfs);
            }
            if b.len() >= 17 && be16(b, 4) == Some(1) && super::dns::parse_message(b).is_some() {
                return Some(Proto::Dns);
            }
            if dir == Dir::Request && super::sockperf::looks_like_request(b) {
                return Some(Proto::Sockperf);
            }
            None
        }
        Carrier::Tcp => {
            if b.len() >= 16 && be32(b, 0).is_some_and(|m| m & 0x8000_0000 != 0) {
                let body = &b[4..];
                if rpc_call(body) || (dir == Dir::Response && rpc_reply(body)) {
                    return Some(Proto::Nfs);
                }
            }
            if super::smb2::looks_like_start(b) {
                return Some(Proto::Smb2);
            }
            if super::tlsrecord::is_client_hello(b) || super::tlsrecord::is_server_hello(b) {
                return Some(Proto::Tls);
            }
            match dir {
                Dir::Request => {
                    if b.len() >= 8
                        && b[0] == 0
                        && matches!(be32(b, 4), Some(196_608 | 80_877_103 | 80_877_104))
                    {
                        return Some(Proto::Pgsql);
                    }
                    if b.first() == Some(&b'Q')
                        && be32(b, 1).is_some_and(|l| l as usize + 1 == b.len())
                    {
                        return Some(Proto::Pgsql);
                    }
                    if b.len() >= 4
                        && b[0] == b'*'
                        && b[1].is_ascii_digit()
                        && b.windows(3).any(|w| w == b"\r\n$")
                    {
                        return Some(Proto::Redis);
                    }
                    if super::http::Http::new_request_start(b) {
                        return Some(Proto::Http);
                    }
                    if b.len() >= 34
                        && b[4] == 1
                        && be16(b, 0).is_some_and(|l| l as usize >= 34)
                        && be16(b, 8).is_some_and(|v| (300..=400).contains(&v))
                    {
                        return Some(Proto::Tns);
                    }
                    if b.len() >= 14
                        && be16(b, 0).is_some_and(|l| l as usize + 2 == b.len())
                        && be16(b, 6) == Some(1)
                        && super::dns::parse_message(&b[2..]).is_some()
                    {
                        return Some(Proto::Dns);
                    }
                    if super::sockperf::looks_like_request(b) {
                        return Some(Proto::Sockperf);
                    }
                    None
                }
                Dir::Response => {
                    // MySQL server greeting: 3-byte length, seq 0, protocol 10, a version string.
                    if b.len() >= 6
                        && b[3] == 0
                        && b[4] == 0x0a
                        && b[5].is_ascii_digit()
                        && u32::from_le_bytes([b[0], b[1], b[2], 0]) as usize + 4 <= b.len() + 4096
                    {
                        return Some(Proto::Mysql);
                    }
                    None
                }
            }
        }
    }
}

/// Whether a payload is, by `proto`'s own framing, a request (its sender is the client) or a response; `None`
/// when the framing does not say so unmistakably. For a connection caught mid-stream (no handshake seen).
pub fn direction_of(proto: Proto, b: &[u8], carrier: Carrier) -> Option<Dir> {
    let tcp = carrier == Carrier::Tcp;
    match proto {
        Proto::Http if tcp => http_direction(b),
        Proto::Redis if tcp => redis_direction(b),
        Proto::Pgsql if tcp => pgsql_direction(b),
        Proto::Mysql if tcp => mysql_direction(b),
        Proto::Nfs => {
            let m = if tcp {
                be32(b, 0).filter(|m| m & 0x8000_0000 != 0)?;
                b.get(4..)?
            } else {
                b
            };
            rpc_direction(m)
        }
        Proto::Dns => {
            let m = if tcp {
                let l = be16(b, 0)? as usize;
                (l >= 12 && l + 2 >= b.len()).then_some(())?;
                b.get(2..)?
            } else {
                b
            };
            (be16(m, 4) == Some(1) && super::dns::parse_message(m).is_some()).then(|| {
                if m[2] & 0x80 != 0 {
                    Dir::Response
                } else {
                    Dir::Request
                }
            })
        }
        Proto::Smb2 if tcp => {
            // NetBIOS session header, then an SMB2 header whose Flags say "server to redirector".
            (b.len() >= 24 && b[0] == 0 && &b[4..8] == b"\xfeSMB" && be16(b, 8) == Some(0x4000))
                .then(|| {
                    if b[20] & 1 != 0 {
                        Dir::Response
                    } else {
                        Dir::Request
                    }
                })
        }
        Proto::Tns if tcp => {
            (be16(b, 0).is_some_and(|l| l as usize == b.len()) && b.len() >= 8 && b[5] == 0)
                .then(|| b[4])
                .and_then(|t| match t {
                    1 => Some(Dir::Request),
                    2 | 4 | 5 => Some(Dir::Response),
                    _ => None,
                })
        }
        Proto::Tls if tcp => {
            if super::tlsrecord::is_client_hello(b) {
                Some(Dir::Request)
            } else if super::tlsrecord::is_server_hello(b) {
                Some(Dir::Response)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// [`direction_of`] for a connection whose protocol is not known: the protocols `hints` (by port or as
/// forced) when there are any, else every protocol; an answer only when all the protocols that answer agree
/// (with the first of them).
pub fn direction(b: &[u8], carrier: Carrier, hints: &[Proto]) -> Option<(Dir, Proto)> {
    let all: &[Proto] = if hints.is_empty() { &Proto::ALL } else { hints };
    let mut found: Option<(Dir, Proto)> = None;
    for &p in all {
        match (found, direction_of(p, b, carrier)) {
            (_, None) => {}
            (None, Some(d)) => found = Some((d, p)),
            (Some((a, _)), Some(d)) if a != d => return None,
            _ => {}
        }
    }
    found
}

/// An HTTP/1 request line (a method, a target, `HTTP/1.x`) or a status line.
fn http_direction(b: &[u8]) -> Option<Dir> {
    let line = &b[..b.iter().position(|&c| c == b'\n').unwrap_or(b.len())];
    if line.starts_with(b"HTTP/1.")
        && line.len() >= 12
        && line[8] == b' '
        && line[9..12].iter().all(u8::is_ascii_digit)
    {
        return Some(Dir::Response);
    }
    (super::http::Http::new_request_start(b) && line.windows(7).any(|w| w == b"HTTP/1."))
        .then_some(Dir::Request)
}

/// RESP: a client sends an array of bulk strings whose first is a command name (letters, all of one case);
/// a server's simple string, error, integer or bulk string is a response. (An array is a reply too, but one
/// whose first element is a word of one case is taken for a command.)
fn redis_direction(b: &[u8]) -> Option<Dir> {
    let line_end = |from: usize| {
        b.get(from..)?
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|p| from + p)
    };
    let digits = |s: &[u8]| !s.is_empty() && s.len() <= 10 && s.iter().all(u8::is_ascii_digit);
    match *b.first()? {
        b'*' => {
            let e = line_end(1)?;
            if !digits(&b[1..e]) || b.get(e + 2) != Some(&b'$') {
                return None;
            }
            let e2 = line_end(e + 3)?;
            let len: usize = std::str::from_utf8(&b[e + 3..e2]).ok()?.parse().ok()?;
            let name = b.get(e2 + 2..e2 + 2 + len)?;
            let word = (1..=32).contains(&len)
                && (name.iter().all(u8::is_ascii_uppercase)
                    || name.iter().all(u8::is_ascii_lowercase))
                && b.get(e2 + 2 + len..e2 + 4 + len) == Some(b"\r\n");
            word.then_some(Dir::Request)
        }
        b'+' | b'-' | b':' => {
            let e = line_end(1)?;
            let l = &b[1..e];
            let ok = match b[0] {
                b':' => digits(l.strip_prefix(b"-").unwrap_or(l)),
                _ => !l.is_empty() && l.iter().all(|c| (0x20..0x7f).contains(c)),
            };
            ok.then_some(Dir::Response)
        }
        b'$' => {
            let e = line_end(1)?;
            let l = &b[1..e];
            (l == b"-1" || digits(l)).then_some(Dir::Response)
        }
        _ => None,
    }
}

/// PostgreSQL: a run of whole messages (a tag, a length) whose first tag only a frontend sends (Query, Parse,
/// Bind, FunctionCall, Terminate, password, CopyFail) or only a backend (Authentication, BackendKeyData,
/// ReadyForQuery, RowDescription, ParseComplete, BindComplete, ...).
fn pgsql_direction(b: &[u8]) -> Option<Dir> {
    const FRONT: &[u8] = b"QPBFXpf";
    const BACK: &[u8] = b"RKZTI123nsNAGWtVv";
    const ANY: &[u8] = b"QPBFXpfRKZTI123nsNAGWtVvSDCEHdc";
    let mut i = 0;
    while i < b.len() {
        let t = b[i];
        let l = be32(b, i + 1)? as usize;
        if !ANY.contains(&t) || !(4..1 << 28).contains(&l) || (t == b'Z' && l != 5) {
            return None;
        }
        i += 1 + l;
    }
    let t = *b.first()?;
    if FRONT.contains(&t) {
        Some(Dir::Request)
    } else if BACK.contains(&t) {
        Some(Dir::Response)
    } else {
        None
    }
}

/// MySQL: a command packet (sequence id 0, a command byte) is a request; the server's greeting (sequence 0,
/// protocol 10, a version) and an OK, ERR or EOF packet or a result set's column count (sequence id 1 or
/// more) are responses. The packets must chain with consecutive sequence ids.
fn mysql_direction(b: &[u8]) -> Option<Dir> {
    let head = |i: usize| {
        let h = b.get(i..i + 4)?;
        Some((u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize, h[3]))
    };
    let (len, seq) = head(0)?;
    let mut i = 4 + len;
    let mut s = seq;
    while i < b.len() {
        let (l, q) = head(i)?;
        if q != s.wrapping_add(1) {
            return None;
        }
        s = q;
        i += 4 + l;
    }
    let first = *b.get(4)?;
    if len == 0 {
        return None;
    }
    if seq == 0 {
        if first == 0x0a && b.get(5).is_some_and(u8::is_ascii_digit) {
            return Some(Dir::Response);
        }
        // quit, init_db, query, field_list, ping, change_user, the prepared-statement commands, reset.
        let cmd = matches!(first, 0x01..=0x04 | 0x0e | 0x11 | 0x16..=0x1a | 0x1c | 0x1f);
        return (cmd && (len + 4 == b.len() || (first == 0x03 && len + 4 > b.len())))
            .then_some(Dir::Request);
    }
    let resp = match first {
        0x00 => len >= 7,
        0xff => len >= 3,
        0xfe => len < 9,
        1..=0xfa => len == 1 && head(5).is_some_and(|(_, q)| q == seq.wrapping_add(1)),
        _ => false,
    };
    resp.then_some(Dir::Response)
}

/// ONC-RPC (without TCP's record marker): a call (message type 0, RPC version 2) or a reply (type 1, a reply
/// status of 0 or 1).
fn rpc_direction(m: &[u8]) -> Option<Dir> {
    if m.len() < 24 {
        return None;
    }
    match (be32(m, 4)?, be32(m, 8)?) {
        (0, 2) if m.len() >= 40 => Some(Dir::Request),
        (1, 0 | 1) => Some(Dir::Response),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_by_content() {
        assert_eq!(
            by_content(Dir::Request, b"*1\r\n$4\r\nPING\r\n", Carrier::Tcp),
            Some(Proto::Redis)
        );
        assert_eq!(
            by_content(Dir::Request, b"GET / HTTP/1.1\r\n\r\n", Carrier::Tcp),
            Some(Proto::Http)
        );
        let mut startup = vec![0, 0, 0, 8];
        startup.extend_from_slice(&196_608u32.to_be_bytes());
        assert_eq!(
            by_content(Dir::Request, &startup, Carrier::Tcp),
            Some(Proto::Pgsql)
        );
        let greeting = b"\x4a\x00\x00\x00\x0a8.0.3\x00";
        assert_eq!(
            by_content(Dir::Response, greeting, Carrier::Tcp),
            Some(Proto::Mysql)
        );
        assert_eq!(by_content(Dir::Request, b"hello there", Carrier::Tcp), None);
        assert_eq!(by_port(2049, Carrier::Tcp), Some(Proto::Nfs));
        assert_eq!(by_port(5433, Carrier::Tcp), None);
    }

    /// Every prefix of framings that look right at first (a TNS length, RESP, NetBIOS, RPC record marks) never
    /// panics, for every protocol and carrier: a fuzz input once did (a TNS check indexed a 1-byte payload).
    #[test]
    fn direction_of_short_and_odd_payloads_never_panics() {
        let seeds: [&[u8]; 6] = [
            b"\x00\x2a\x44\xff\x01\x00\x00\x01\x4f",
            b"\x00\x08\x00\x00\x01\x00\x00\x00",
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
            b"\x00\x00\x00\x40\xfeSMB\x40\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00",
            b"\x80\x00\x00\x28\x00\x00\x00\x01\x00\x00\x00\x01",
            b"HTTP/1.1 200 OK\r\n",
        ];
        for seed in seeds {
            for n in 0..=seed.len() {
                for carrier in [Carrier::Tcp, Carrier::Udp] {
                    for p in Proto::ALL {
                        let _ = direction_of(p, &seed[..n], carrier);
                    }
                    let _ = direction(&seed[..n], carrier, &[]);
                }
            }
        }
    }

    #[test]
    fn tells_requests_from_responses_mid_stream() {
        let t = Carrier::Tcp;
        let d = |p, b: &[u8]| direction_of(p, b, t);
        assert_eq!(
            d(Proto::Http, b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n"),
            Some(Dir::Request)
        );
        assert_eq!(
            d(Proto::Http, b"HTTP/1.1 200 OK\r\n\r\n"),
            Some(Dir::Response)
        );
        assert_eq!(d(Proto::Http, b"hello"), None);
        assert_eq!(
            d(Proto::Redis, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"),
            Some(Dir::Request)
        );
        assert_eq!(d(Proto::Redis, b"+OK\r\n"), Some(Dir::Response));
        assert_eq!(d(Proto::Redis, b"$-1\r\n"), Some(Dir::Response));
        assert_eq!(d(Proto::Redis, b":12\r\n"), Some(Dir::Response));
        assert_eq!(d(Proto::Redis, b"*2\r\n$3\r\nfOo\r\n$1\r\nk\r\n"), None);
        let mut q = b"Q".to_vec();
        q.extend_from_slice(&13u32.to_be_bytes());
        q.extend_from_slice(b"SELECT 1\0");
        assert_eq!(d(Proto::Pgsql, &q), Some(Dir::Request));
        let mut r = b"T".to_vec();
        r.extend_from_slice(&6u32.to_be_bytes());
        r.extend_from_slice(&[0, 0]);
        r.extend_from_slice(b"Z\0\0\0\x05I");
        assert_eq!(d(Proto::Pgsql, &r), Some(Dir::Response));
        // A frontend message cut short is still a request; garbage after a message is not.
        assert_eq!(d(Proto::Pgsql, &q[..8]), Some(Dir::Request));
        assert_eq!(d(Proto::Pgsql, b"Q\0\0\0\x05\0zzzzz"), None);
        // MySQL: COM_QUERY (seq 0) and an OK packet (seq 1).
        assert_eq!(
            d(Proto::Mysql, b"\x09\0\0\0\x03SELECT 1"),
            Some(Dir::Request)
        );
        assert_eq!(
            d(Proto::Mysql, b"\x07\0\0\x01\0\0\0\x02\0\0\0"),
            Some(Dir::Response)
        );
        // ONC-RPC over TCP: a call and a reply.
        let mut call = 0x8000_0028u32.to_be_bytes().to_vec();
        for w in [7u32, 0, 2, 100_003, 3, 1, 0, 0, 0, 0] {
            call.extend_from_slice(&w.to_be_bytes());
        }
        assert_eq!(d(Proto::Nfs, &call), Some(Dir::Request));
        let mut reply = 0x8000_0018u32.to_be_bytes().to_vec();
        for w in [7u32, 1, 0, 0, 0, 0] {
            reply.extend_from_slice(&w.to_be_bytes());
        }
        assert_eq!(d(Proto::Nfs, &reply), Some(Dir::Response));
        // Without a hint every protocol is asked; they must agree.
        assert_eq!(
            direction(b"*1\r\n$4\r\nPING\r\n", t, &[]),
            Some((Dir::Request, Proto::Redis))
        );
        assert_eq!(direction(b"hello there", t, &[]), None);
    }
}
