//! Name resolution: the one function every command and the agent use to turn a host name into addresses.
//!
//! It is the system resolver (getaddrinfo, through [`ToSocketAddrs`]), except for the names RFC 6761 (section
//! 6.4) reserves as never existing: `invalid` and every name under `.invalid` (any case, with or without a
//! final dot) are answered "not found" here, with the text a failed lookup gives, and no query leaves the
//! machine. Tests and examples use such names for "a host that does not exist"; asking the network's DNS
//! about them would send a packet off this machine for nothing.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};

/// The text a lookup of a name that does not exist gives (glibc's EAI_NONAME through the standard library):
/// also the answer for the reserved names of [`is_reserved_invalid`].
pub const NOT_FOUND: &str = "failed to lookup address information: Name or service not known";

/// True for `invalid` and every name under it (`no-such-host.invalid`, `X.INVALID.`): names that RFC 6761
/// reserves as never resolving.
pub fn is_reserved_invalid(host: &str) -> bool {
    let h = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    h == "invalid" || h.ends_with(".invalid")
}

/// Every address of `host` at `port`, in the resolver's order (an IP literal is parsed, not looked up). A name
/// under `.invalid` fails at once with [`NOT_FOUND`], without asking DNS.
pub fn lookup(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    if is_reserved_invalid(host) {
        return Err(io::Error::other(NOT_FOUND));
    }
    Ok((host, port).to_socket_addrs()?.collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_names_are_answered_here() {
        for h in [
            "invalid",
            "INVALID.",
            "no-such-host.invalid",
            "a.b.Invalid",
            "x.invalid.",
        ] {
            assert!(is_reserved_invalid(h), "{h}");
            let e = lookup(h, 80).unwrap_err();
            assert_eq!(e.to_string(), NOT_FOUND, "{h}");
        }
        for h in [
            "invalid.example",
            "notinvalid",
            "localhost",
            "127.0.0.1",
            "ınvalid",
        ] {
            assert!(!is_reserved_invalid(h), "{h}");
        }
        assert_eq!(
            lookup("127.0.0.1", 5).unwrap(),
            vec!["127.0.0.1:5".parse().unwrap()]
        );
    }
}
