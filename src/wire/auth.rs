//! Who may talk to a server: the pre-shared key and the return-routability cookie.
//!
//! - [`Psk`]: a key both ends read from a file (`--psk-file`). With a key, a client proves it holds the key by
//!   an HMAC-SHA256 over a server nonce and its own nonce ([`client_proof`]); the server proves it back over the
//!   same nonces in the other order ([`server_proof`]), so neither side measures or answers a peer without it.
//! - [`CookieJar`]: a server secret drawn at start. A cookie is a coarse timestamp and a MAC over the client's
//!   address, port and that timestamp. A UDP client that sends a cookie back proves it receives datagrams at
//!   its address, so a forged source address cannot make the server send anything larger than the request.
//!
//! The message formats that carry these values are in [`super::sockperf`].
#![forbid(unsafe_code)]

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use thiserror::Error;

type HmacSha256 = Hmac<Sha256>;

/// Length of a nonce (client nonce, server nonce) and of a cookie.
pub const NONCE_LEN: usize = 16;
/// Length of a proof (HMAC-SHA256).
pub const PROOF_LEN: usize = 32;
/// Shortest key accepted, in bytes.
pub const MIN_KEY_LEN: usize = 16;
/// Longest key file read.
pub const MAX_KEY_LEN: usize = 4096;
/// How long a cookie stays valid, in seconds.
pub const COOKIE_LIFETIME_S: u32 = 60;

/// A nonce or a cookie.
pub type Nonce = [u8; NONCE_LEN];
/// An HMAC-SHA256 proof.
pub type Proof = [u8; PROOF_LEN];

/// A key file could not be used.
#[derive(Debug, Error)]
pub enum KeyError {
    /// The file could not be read.
    #[error("cannot read the key file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// The key is too short to be a secret.
    #[error(
        "the key in {path} is {len} bytes; use at least {MIN_KEY_LEN} (e.g. `head -c 32 /dev/urandom | base64 > {path}`)"
    )]
    TooShort {
        /// The file.
        path: PathBuf,
        /// Its length after trimming.
        len: usize,
    },
    /// The file is larger than any key.
    #[error("{path} is larger than {MAX_KEY_LEN} bytes: is it really a key file?")]
    TooLong {
        /// The file.
        path: PathBuf,
    },
}

/// A pre-shared key. Its bytes never appear in `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct Psk {
    key: Vec<u8>,
    /// True when the file it came from can be read by other users (worth a warning).
    pub readable_by_others: bool,
}

impl std::fmt::Debug for Psk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Psk({} bytes)", self.key.len())
    }
}

impl Psk {
    /// A key from its bytes (leading and trailing whitespace removed, so a key file may end in a newline).
    pub fn from_bytes(bytes: &[u8]) -> Option<Psk> {
        let key = bytes.trim_ascii();
        (key.len() >= MIN_KEY_LEN && key.len() <= MAX_KEY_LEN).then(|| Psk {
            key: key.to_vec(),
            readable_by_others: false,
        })
    }

    /// Reads a key file: its whole content, whitespace at both ends removed, at least [`MIN_KEY_LEN`] bytes.
    pub fn from_file(path: &Path) -> Result<Psk, KeyError> {
        let meta = std::fs::metadata(path).map_err(|source| KeyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        if meta.len() > MAX_KEY_LEN as u64 {
            return Err(KeyError::TooLong {
                path: path.to_path_buf(),
            });
        }
        let bytes = std::fs::read(path).map_err(|source| KeyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let len = bytes.trim_ascii().len();
        let mut psk = Psk::from_bytes(&bytes).ok_or_else(|| KeyError::TooShort {
            path: path.to_path_buf(),
            len,
        })?;
        use std::os::unix::fs::PermissionsExt;
        psk.readable_by_others = meta.permissions().mode() & 0o044 != 0;
        Ok(psk)
    }

    fn mac(&self, label: &[u8], parts: &[&[u8]]) -> HmacSha256 {
        let mut m = <HmacSha256 as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC takes keys of any length");
        m.update(label);
        for p in parts {
            m.update(p);
        }
        m
    }
}

const CLIENT_LABEL: &[u8] = b"roundtrip psk v2 client";
const SERVER_LABEL: &[u8] = b"roundtrip psk v2 server";

/// The client's proof: HMAC-SHA256 under the key over the server nonce, the client nonce and the features it
/// asks for.
pub fn client_proof(psk: &Psk, server_nonce: &Nonce, client_nonce: &Nonce, features: u32) -> Proof {
    psk.mac(
        CLIENT_LABEL,
        &[server_nonce, client_nonce, &features.to_be_bytes()],
    )
    .finalize()
    .into_bytes()
    .into()
}

/// Checks a client's proof in constant time.
pub fn verify_client_proof(
    psk: &Psk,
    server_nonce: &Nonce,
    client_nonce: &Nonce,
    features: u32,
    proof: &Proof,
) -> bool {
    psk.mac(
        CLIENT_LABEL,
        &[server_nonce, client_nonce, &features.to_be_bytes()],
    )
    .verify_slice(proof)
    .is_ok()
}

/// The server's proof: HMAC-SHA256 under the key over the client nonce, the server nonce and the features it
/// grants (a different label and order than the client's, so one cannot stand for the other).
pub fn server_proof(psk: &Psk, client_nonce: &Nonce, server_nonce: &Nonce, features: u32) -> Proof {
    psk.mac(
        SERVER_LABEL,
        &[client_nonce, server_nonce, &features.to_be_bytes()],
    )
    .finalize()
    .into_bytes()
    .into()
}

/// Checks a server's proof in constant time.
pub fn verify_server_proof(
    psk: &Psk,
    client_nonce: &Nonce,
    server_nonce: &Nonce,
    features: u32,
    proof: &Proof,
) -> bool {
    psk.mac(
        SERVER_LABEL,
        &[client_nonce, server_nonce, &features.to_be_bytes()],
    )
    .verify_slice(proof)
    .is_ok()
}

/// A fresh random nonce (from the operating system's generator).
pub fn random_nonce() -> Nonce {
    let mut n = [0u8; NONCE_LEN];
    getrandom::fill(&mut n).expect("the operating system's random generator failed");
    n
}

/// Makes and checks return-routability cookies under a secret drawn at start.
///
/// A cookie is 4 bytes of timestamp (seconds, big-endian, of the clock given to [`CookieJar::make`]) and the first
/// 12 bytes of HMAC-SHA256(secret, ip || port || timestamp). It is valid for [`COOKIE_LIFETIME_S`] seconds, and only
/// from the address it was made for.
pub struct CookieJar {
    secret: [u8; 32],
}

impl std::fmt::Debug for CookieJar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CookieJar")
    }
}

impl Default for CookieJar {
    fn default() -> Self {
        Self::new()
    }
}

impl CookieJar {
    /// A jar with a fresh random secret.
    pub fn new() -> Self {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).expect("the operating system's random generator failed");
        CookieJar { secret }
    }

    fn tag(&self, peer: SocketAddr, ts: u32) -> [u8; 12] {
        let mut m = <HmacSha256 as KeyInit>::new_from_slice(&self.secret)
            .expect("HMAC takes keys of any length");
        match peer.ip() {
            IpAddr::V4(v4) => m.update(&v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => m.update(&v6.octets()),
        }
        m.update(&peer.port().to_be_bytes());
        m.update(&ts.to_be_bytes());
        let full: [u8; 32] = m.finalize().into_bytes().into();
        full[..12].try_into().expect("12 bytes")
    }

    /// The cookie for `peer` at time `now_s` (seconds of any clock that only moves forward).
    pub fn make(&self, peer: SocketAddr, now_s: u32) -> Nonce {
        let mut c = [0u8; NONCE_LEN];
        c[..4].copy_from_slice(&now_s.to_be_bytes());
        c[4..].copy_from_slice(&self.tag(peer, now_s));
        c
    }

    /// True when `cookie` was made for `peer` by this jar less than [`COOKIE_LIFETIME_S`] seconds before `now_s`.
    pub fn check(&self, peer: SocketAddr, cookie: &Nonce, now_s: u32) -> bool {
        let ts = u32::from_be_bytes(cookie[..4].try_into().expect("4 bytes"));
        if ts > now_s || now_s - ts >= COOKIE_LIFETIME_S {
            return false;
        }
        // Constant time: compare every byte.
        let want = self.tag(peer, ts);
        want.iter()
            .zip(&cookie[4..])
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Psk {
        Psk::from_bytes(b"0123456789abcdef-secret\n").unwrap()
    }

    #[test]
    fn keys_are_trimmed_and_must_be_long_enough() {
        assert_eq!(
            Psk::from_bytes(b"  0123456789abcdef-secret \n"),
            Some(key())
        );
        assert!(Psk::from_bytes(b"short\n").is_none());
        assert!(!format!("{:?}", key()).contains("secret"));
    }

    #[test]
    fn key_files_are_read_and_checked() {
        let dir = std::env::temp_dir().join(format!("rt-psk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("k");
        std::fs::write(&f, "0123456789abcdef-secret\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let k = Psk::from_file(&f).unwrap();
        assert_eq!(k, key());
        assert!(!k.readable_by_others);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(Psk::from_file(&f).unwrap().readable_by_others);
        std::fs::write(&f, "abc\n").unwrap();
        let e = Psk::from_file(&f).unwrap_err().to_string();
        assert!(e.contains("3 bytes") && e.contains("at least 16"), "{e}");
        let e = Psk::from_file(&dir.join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot read the key file"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn proofs_check_both_ways_and_differ_by_direction() {
        let (k, sn, cn) = (key(), [1u8; 16], [2u8; 16]);
        let c = client_proof(&k, &sn, &cn, 7);
        assert!(verify_client_proof(&k, &sn, &cn, 7, &c));
        assert!(!verify_client_proof(&k, &sn, &cn, 6, &c));
        assert!(!verify_client_proof(&k, &cn, &sn, 7, &c));
        let other = Psk::from_bytes(b"another key of 16+ bytes").unwrap();
        assert!(!verify_client_proof(&other, &sn, &cn, 7, &c));
        let s = server_proof(&k, &cn, &sn, 7);
        assert_ne!(s, c, "a client proof cannot stand for a server proof");
        assert!(verify_server_proof(&k, &cn, &sn, 7, &s));
        assert!(!verify_server_proof(&k, &cn, &sn, 7, &c));
    }

    #[test]
    fn cookies_are_bound_to_address_port_and_time() {
        let jar = CookieJar::new();
        let a: SocketAddr = "192.0.2.1:4000".parse().unwrap();
        let c = jar.make(a, 1000);
        assert!(jar.check(a, &c, 1000));
        assert!(jar.check(a, &c, 1000 + COOKIE_LIFETIME_S - 1));
        assert!(!jar.check(a, &c, 1000 + COOKIE_LIFETIME_S), "stale");
        assert!(!jar.check(a, &c, 999), "from the future");
        assert!(!jar.check("192.0.2.1:4001".parse().unwrap(), &c, 1000));
        assert!(!jar.check("192.0.2.2:4000".parse().unwrap(), &c, 1000));
        let mut forged = c;
        forged[15] ^= 1;
        assert!(!jar.check(a, &forged, 1000));
        // Another server's jar does not accept it.
        assert!(!CookieJar::new().check(a, &c, 1000));
        // IPv4 and its IPv6-mapped form are the same client (a dual-stack socket sees the latter).
        let mapped: SocketAddr = "[::ffff:192.0.2.1]:4000".parse().unwrap();
        assert!(jar.check(mapped, &c, 1000));
    }
}
