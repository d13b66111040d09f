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
}
