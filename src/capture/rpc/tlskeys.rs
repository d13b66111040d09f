//! TLS session keys from a key log file (the SSLKEYLOGFILE format of NSS, OpenSSL, curl, Python and
//! Wireshark's `tls.keylog_file`) and record decryption for TLS 1.2 (AES-GCM, ChaCha20-Poly1305, keys from the
//! master secret by the TLS 1.2 PRF) and TLS 1.3 (AES-128/256-GCM, ChaCha20-Poly1305, keys from the traffic
//! secrets by HKDF-Expand-Label). The primitives are ring's (the crypto provider rustls uses here).
#![forbid(unsafe_code)]

use ring::{aead, hkdf, hmac};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A key log that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyLogError {
    /// The file cannot be read.
    #[error("cannot read TLS key log {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not `LABEL <client random, 64 hex digits> <secret in hex>`.
    #[error(
        "{path}:{line}: not a TLS key log line (expected LABEL CLIENT_RANDOM SECRET, as SSLKEYLOGFILE writes)"
    )]
    Syntax {
        /// The file.
        path: PathBuf,
        /// Line number (from 1).
        line: usize,
    },
    /// No key at all.
    #[error(
        "{path}: no TLS keys in the file (expected SSLKEYLOGFILE lines such as CLIENT_RANDOM or CLIENT_TRAFFIC_SECRET_0)"
    )]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

/// The secrets logged for one TLS session (keyed by the ClientHello random).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Secrets {
    /// TLS 1.2 master secret (`CLIENT_RANDOM`).
    pub master: Option<Vec<u8>>,
    /// TLS 1.3 `CLIENT_HANDSHAKE_TRAFFIC_SECRET`.
    pub client_hs: Option<Vec<u8>>,
    /// TLS 1.3 `SERVER_HANDSHAKE_TRAFFIC_SECRET`.
    pub server_hs: Option<Vec<u8>>,
    /// TLS 1.3 `CLIENT_TRAFFIC_SECRET_0`.
    pub client_app: Option<Vec<u8>>,
    /// TLS 1.3 `SERVER_TRAFFIC_SECRET_0`.
    pub server_app: Option<Vec<u8>>,
}

/// The sessions of a key log file.
#[derive(Debug, Clone, Default)]
pub struct KeyLog {
    /// The file it was read from (for messages).
    pub path: PathBuf,
    sessions: HashMap<[u8; 32], Secrets>,
}

fn hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.is_empty() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl KeyLog {
    /// Reads and parses a key log file.
    pub fn load(path: &Path) -> Result<KeyLog, KeyLogError> {
        let text = std::fs::read(path).map_err(|source| KeyLogError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, &String::from_utf8_lossy(&text))
    }

    /// Parses the text of a key log file (`path` is for messages). Comment lines (`#`), blank lines and
    /// labels this decoder does not use (early data, exporter secrets) are skipped.
    pub fn parse(path: &Path, text: &str) -> Result<KeyLog, KeyLogError> {
        let mut sessions: HashMap<[u8; 32], Secrets> = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let syntax = || KeyLogError::Syntax {
                path: path.to_path_buf(),
                line: i + 1,
            };
            let f: Vec<&str> = line.split_whitespace().collect();
            let [label, random, secret] = f[..] else {
                return Err(syntax());
            };
            let random: [u8; 32] = hex(random)
                .and_then(|r| r.try_into().ok())
                .ok_or_else(syntax)?;
            let secret = hex(secret).ok_or_else(syntax)?;
            if !label
                .bytes()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_')
            {
                return Err(syntax());
            }
            if !matches!(
                label,
                "CLIENT_RANDOM"
                    | "CLIENT_HANDSHAKE_TRAFFIC_SECRET"
                    | "SERVER_HANDSHAKE_TRAFFIC_SECRET"
                    | "CLIENT_TRAFFIC_SECRET_0"
                    | "SERVER_TRAFFIC_SECRET_0"
            ) {
                continue;
            }
            let s = sessions.entry(random).or_default();
            let slot = match label {
                "CLIENT_RANDOM" => &mut s.master,
                "CLIENT_HANDSHAKE_TRAFFIC_SECRET" => &mut s.client_hs,
                "SERVER_HANDSHAKE_TRAFFIC_SECRET" => &mut s.server_hs,
                "CLIENT_TRAFFIC_SECRET_0" => &mut s.client_app,
                _ => &mut s.server_app,
            };
            *slot = Some(secret);
        }
        if sessions.is_empty() {
            return Err(KeyLogError::Empty {
                path: path.to_path_buf(),
            });
        }
        Ok(KeyLog {
            path: path.to_path_buf(),
            sessions,
        })
    }

    /// The secrets of the session whose ClientHello carried `client_random`.
    pub fn get(&self, client_random: &[u8; 32]) -> Option<&Secrets> {
        self.sessions.get(client_random)
    }

    /// Number of sessions in the file.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// True when the file has no session (never after [`KeyLog::load`]).
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

/// What the ServerHello chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// TLS 1.3 (else TLS 1.2 or older).
    pub tls13: bool,
    /// The cipher suite.
    pub suite: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Aead {
    Aes128Gcm,
    Aes256Gcm,
    Chacha,
}

impl Aead {
    fn alg(self) -> &'static aead::Algorithm {
        match self {
            Aead::Aes128Gcm => &aead::AES_128_GCM,
            Aead::Aes256Gcm => &aead::AES_256_GCM,
            Aead::Chacha => &aead::CHACHA20_POLY1305,
        }
    }
    fn key_len(self) -> usize {
        self.alg().key_len()
    }
}

/// (AEAD, SHA-384 hash) of a supported suite.
fn suite_params(n: Negotiated) -> Option<(Aead, bool)> {
    Some(match (n.tls13, n.suite) {
        (true, 0x1301) => (Aead::Aes128Gcm, false),
        (true, 0x1302) => (Aead::Aes256Gcm, true),
        (true, 0x1303) => (Aead::Chacha, false),
        // TLS 1.2 AEAD suites: (EC)DHE and RSA key exchange with AES-GCM, ChaCha20-Poly1305.
        (false, 0xC02F | 0xC02B | 0x009C | 0x009E) => (Aead::Aes128Gcm, false),
        (false, 0xC030 | 0xC02C | 0x009D | 0x009F) => (Aead::Aes256Gcm, true),
        (false, 0xCCA8..=0xCCAA) => (Aead::Chacha, false),
        _ => return None,
    })
}

/// True when records of this suite can be decrypted (given the keys).
pub fn supported(n: Negotiated) -> bool {
    suite_params(n).is_some()
}

/// One direction's record protection keys.
pub struct RecordKey {
    key: aead::LessSafeKey,
    iv: [u8; 12],
    /// TLS 1.2 AES-GCM: the 4-byte salt is `iv[..4]` and the record carries an 8-byte explicit nonce.
    explicit_nonce: bool,
    tls13: bool,
}

impl std::fmt::Debug for RecordKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordKey")
            .field("tls13", &self.tls13)
            .finish_non_exhaustive()
    }
}

struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// TLS 1.3 HKDF-Expand-Label(secret, label, "", len).
fn expand_label(sha384: bool, secret: &[u8], label: &[u8], len: usize) -> Option<Vec<u8>> {
    let alg = if sha384 {
        hkdf::HKDF_SHA384
    } else {
        hkdf::HKDF_SHA256
    };
    let prk = hkdf::Prk::new_less_safe(alg, secret);
    let out_len = (len as u16).to_be_bytes();
    let label_len = [(6 + label.len()) as u8];
    let info: [&[u8]; 5] = [&out_len, &label_len, b"tls13 ", label, &[0u8]];
    let okm = prk.expand(&info, Len(len)).ok()?;
    let mut out = vec![0u8; len];
    okm.fill(&mut out).ok()?;
    Some(out)
}

/// TLS 1.2 PRF: P_hash(secret, label + seed), `len` bytes.
fn prf12(sha384: bool, secret: &[u8], label: &[u8], seed: &[u8], len: usize) -> Vec<u8> {
    let alg = if sha384 {
        hmac::HMAC_SHA384
    } else {
        hmac::HMAC_SHA256
    };
    let key = hmac::Key::new(alg, secret);
    let mut ls = label.to_vec();
    ls.extend_from_slice(seed);
    let mut a = hmac::sign(&key, &ls).as_ref().to_vec();
    let mut out = Vec::with_capacity(len + 48);
    while out.len() < len {
        let mut ctx = hmac::Context::with_key(&key);
        ctx.update(&a);
        ctx.update(&ls);
        out.extend_from_slice(ctx.sign().as_ref());
        a = hmac::sign(&key, &a).as_ref().to_vec();
    }
    out.truncate(len);
    out
}

fn make_key(
    aead_alg: Aead,
    key: &[u8],
    iv: [u8; 12],
    explicit: bool,
    tls13: bool,
) -> Option<RecordKey> {
    let k = aead::UnboundKey::new(aead_alg.alg(), key).ok()?;
    Some(RecordKey {
        key: aead::LessSafeKey::new(k),
        iv,
        explicit_nonce: explicit,
        tls13,
    })
}

/// TLS 1.3 record key from a traffic secret.
pub fn tls13_key(n: Negotiated, secret: &[u8]) -> Option<RecordKey> {
    let (a, sha384) = suite_params(n)?;
    if !n.tls13 {
        return None;
    }
    let key = expand_label(sha384, secret, b"key", a.key_len())?;
    let iv: [u8; 12] = expand_label(sha384, secret, b"iv", 12)?.try_into().ok()?;
    make_key(a, &key, iv, false, true)
}

/// TLS 1.2 (client, server) record keys from the master secret and the two hello randoms.
pub fn tls12_keys(
    n: Negotiated,
    master: &[u8],
    client_random: &[u8; 32],
    server_random: &[u8; 32],
) -> Option<(RecordKey, RecordKey)> {
    let (a, sha384) = suite_params(n)?;
    if n.tls13 {
        return None;
    }
    let kl = a.key_len();
    let ivl = if a == Aead::Chacha { 12 } else { 4 };
    let mut seed = server_random.to_vec();
    seed.extend_from_slice(client_random);
    let kb = prf12(sha384, master, b"key expansion", &seed, 2 * kl + 2 * ivl);
    let (ck, rest) = kb.split_at(kl);
    let (sk, rest) = rest.split_at(kl);
    let (civ, siv) = rest.split_at(ivl);
    let pad = |v: &[u8]| {
        let mut iv = [0u8; 12];
        iv[..v.len()].copy_from_slice(v);
        iv
    };
    let explicit = a != Aead::Chacha;
    Some((
        make_key(a, ck, pad(civ), explicit, false)?,
        make_key(a, sk, pad(&siv[..ivl]), explicit, false)?,
    ))
}

impl RecordKey {
    /// Decrypts one record (`header`: its 5 header bytes; `body`: the protected fragment) with sequence number
    /// `seq`. Returns the inner content type and the plaintext, or None when the key or the number is wrong.
    pub fn open(&self, seq: u64, header: &[u8; 5], body: &[u8]) -> Option<(u8, Vec<u8>)> {
        let tag = self.key.algorithm().tag_len();
        let mut nonce = self.iv;
        let (ct, aad): (&[u8], Vec<u8>) = if self.explicit_nonce {
            // TLS 1.2 GCM: salt(4) || explicit nonce(8) carried in the record.
            let explicit = body.get(..8)?;
            nonce[4..].copy_from_slice(explicit);
            let ct = &body[8..];
            let plen = ct.len().checked_sub(tag)?;
            let mut aad = seq.to_be_bytes().to_vec();
            aad.extend_from_slice(&header[..3]);
            aad.extend_from_slice(&(plen as u16).to_be_bytes());
            (ct, aad)
        } else {
            for (n, s) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
                *n ^= s;
            }
            if self.tls13 {
                (body, header.to_vec())
            } else {
                let plen = body.len().checked_sub(tag)?;
                let mut aad = seq.to_be_bytes().to_vec();
                aad.extend_from_slice(&header[..3]);
                aad.extend_from_slice(&(plen as u16).to_be_bytes());
                (body, aad)
            }
        };
        if ct.len() < tag {
            return None;
        }
        let mut buf = ct.to_vec();
        let pt = self
            .key
            .open_in_place(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(aad),
                &mut buf,
            )
            .ok()?;
        let len = pt.len();
        buf.truncate(len);
        if self.tls13 {
            // TLSInnerPlaintext: content, the real type, zero padding.
            let end = buf.iter().rposition(|&b| b != 0)?;
            let ty = buf[end];
            buf.truncate(end);
            Some((ty, buf))
        } else {
            Some((header[0], buf))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_log_lines() {
        let r = "ab".repeat(32);
        let text = format!(
            "# comment\n\nCLIENT_RANDOM {r} {m}\nEXPORTER_SECRET {r} 00\nCLIENT_TRAFFIC_SECRET_0 {r} 0102\n",
            m = "11".repeat(48)
        );
        let k = KeyLog::parse(Path::new("k.log"), &text).unwrap();
        let s = k.get(&[0xab; 32]).unwrap();
        assert_eq!(s.master.as_deref(), Some(&[0x11; 48][..]));
        assert_eq!(s.client_app.as_deref(), Some(&[1, 2][..]));
        assert!(s.server_app.is_none());
        let e = KeyLog::parse(Path::new("k.log"), "hello world\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "k.log:1: not a TLS key log line (expected LABEL CLIENT_RANDOM SECRET, as SSLKEYLOGFILE writes)"
        );
        assert!(matches!(
            KeyLog::parse(Path::new("k.log"), "# nothing\n"),
            Err(KeyLogError::Empty { .. })
        ));
        assert!(KeyLog::parse(Path::new("k"), &format!("CLIENT_RANDOM {r} 1")).is_err());
    }

    /// RFC 8448 (TLS 1.3 traces), "Simple 1-RTT Handshake": the server handshake traffic secret gives the
    /// write key and IV printed there.
    #[test]
    fn rfc8448_server_handshake_key() {
        let secret =
            hex("b67b7d690cc16c4e75e54213cb2d37b4e9c912bcded9105d42befd59d391ad38").unwrap();
        assert_eq!(
            expand_label(false, &secret, b"key", 16).unwrap(),
            hex("3fce516009c21727d0f2e4e86ee403bc").unwrap()
        );
        assert_eq!(
            expand_label(false, &secret, b"iv", 12).unwrap(),
            hex("5d313eb2671276ee13000b30").unwrap()
        );
    }

    /// The TLS 1.2 PRF (SHA-256) test vector widely used by implementations (from the IETF TLS list).
    #[test]
    fn tls12_prf_vector() {
        let secret = hex("9bbe436ba940f017b17652849a71db35").unwrap();
        let seed = hex("a0ba9f936cda311827a6f796ffd5198c").unwrap();
        let out = prf12(false, &secret, b"test label", &seed, 100);
        assert_eq!(
            out[..32],
            hex("e3f229ba727be17b8d122620557cd453c2aab21d07c3d495329b52d4e61edb5a").unwrap()[..]
        );
    }
}
