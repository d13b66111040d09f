//! SCRAM-SHA-256 (RFC 5802, RFC 7677), client side, as PostgreSQL uses it: no channel binding (`n,,`).
//!
//! The password is used as given (no SASLprep normalisation), which is exact for ASCII passwords.
#![forbid(unsafe_code)]

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use thiserror::Error;

type HmacSha256 = Hmac<Sha256>;

/// Largest iteration count accepted from a server (a hostile one could otherwise make us spin).
pub const MAX_ITERATIONS: u32 = 1_000_000;

/// A SCRAM exchange that went wrong.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ScramError {
    /// The server-first message is not `r=...,s=...,i=...`.
    #[error("malformed SCRAM server-first message ({0})")]
    ServerFirst(&'static str),
    /// The server's nonce does not extend ours.
    #[error("the server's SCRAM nonce does not start with the client nonce")]
    Nonce,
    /// The server-final message is not `v=...` or is `e=...`.
    #[error("SCRAM server-final message: {0}")]
    ServerFinal(String),
    /// The server signature does not match: the server does not know the password.
    #[error("the server's SCRAM signature is wrong (the server does not know this password)")]
    Signature,
}

/// The client side of one SCRAM-SHA-256 exchange.
pub struct ScramClient {
    client_first_bare: String,
    nonce: String,
    server_signature: Option<[u8; 32]>,
}

impl std::fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramClient")
            .field("nonce", &self.nonce)
            .finish_non_exhaustive()
    }
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut m =
        <HmacSha256 as KeyInit>::new_from_slice(key).expect("HMAC takes keys of any length");
    m.update(data);
    let out = m.finalize().into_bytes();
    let mut a = [0u8; 32];
    a.copy_from_slice(&out);
    a
}

/// PBKDF2-HMAC-SHA-256 with one output block: SCRAM's `Hi()`.
pub fn hi(password: &[u8], salt: &[u8], iterations: u32) -> [u8; 32] {
    let mut first = salt.to_vec();
    first.extend_from_slice(&1u32.to_be_bytes());
    let mut u = hmac(password, &first);
    let mut out = u;
    for _ in 1..iterations {
        u = hmac(password, &u);
        for (o, x) in out.iter_mut().zip(u.iter()) {
            *o ^= x;
        }
    }
    out
}

impl ScramClient {
    /// Starts an exchange for `user` (PostgreSQL ignores it and sends an empty name) with a client nonce.
    pub fn new(user: &str, nonce: &str) -> Self {
        let user = user.replace('=', "=3D").replace(',', "=2C");
        ScramClient {
            client_first_bare: format!("n={user},r={nonce}"),
            nonce: nonce.to_string(),
            server_signature: None,
        }
    }

    /// A fresh random printable nonce (24 random bytes, base64).
    pub fn random_nonce() -> String {
        let mut b = [0u8; 24];
        if getrandom::fill(&mut b).is_err() {
            // No randomness source: fall back on the clock and pid, still unique per exchange.
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let h = Sha256::digest(format!("{t}{}", std::process::id()));
            b.copy_from_slice(&h[..24]);
        }
        B64.encode(b)
    }

    /// The client-first message.
    pub fn client_first(&self) -> String {
        format!("n,,{}", self.client_first_bare)
    }

    /// Reads the server-first message and returns the client-final message with the proof.
    pub fn client_final(
        &mut self,
        server_first: &[u8],
        password: &str,
    ) -> Result<String, ScramError> {
        let sf =
            std::str::from_utf8(server_first).map_err(|_| ScramError::ServerFirst("not UTF-8"))?;
        let (mut r, mut s, mut i) = (None, None, None);
        for part in sf.split(',') {
            match part.split_once('=') {
                Some(("r", v)) => r = Some(v),
                Some(("s", v)) => s = Some(v),
                Some(("i", v)) => i = Some(v),
                _ => {}
            }
        }
        let r = r.ok_or(ScramError::ServerFirst("no nonce"))?;
        let salt = B64
            .decode(s.ok_or(ScramError::ServerFirst("no salt"))?)
            .map_err(|_| ScramError::ServerFirst("salt is not base64"))?;
        let iterations: u32 = i
            .ok_or(ScramError::ServerFirst("no iteration count"))?
            .parse()
            .map_err(|_| ScramError::ServerFirst("iteration count is not a number"))?;
        if iterations == 0 || iterations > MAX_ITERATIONS {
            return Err(ScramError::ServerFirst("iteration count out of range"));
        }
        if !r.starts_with(&self.nonce) || r.len() == self.nonce.len() {
            return Err(ScramError::Nonce);
        }
        let without_proof = format!("c=biws,r={r}");
        let salted = hi(password.as_bytes(), &salt, iterations);
        let client_key = hmac(&salted, b"Client Key");
        let stored_key: [u8; 32] = Sha256::digest(client_key).into();
        let auth_message = format!("{},{sf},{without_proof}", self.client_first_bare);
        let client_sig = hmac(&stored_key, auth_message.as_bytes());
        let mut proof = client_key;
        for (p, s) in proof.iter_mut().zip(client_sig.iter()) {
            *p ^= s;
        }
        let server_key = hmac(&salted, b"Server Key");
        self.server_signature = Some(hmac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)))
    }

    /// Checks the server-final message (`v=` signature).
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let s = String::from_utf8_lossy(server_final);
        if let Some(e) = s.strip_prefix("e=") {
            return Err(ScramError::ServerFinal(e.to_string()));
        }
        let v = s
            .split(',')
            .find_map(|p| p.strip_prefix("v="))
            .ok_or_else(|| ScramError::ServerFinal("no verifier".into()))?;
        let got = B64
            .decode(v)
            .map_err(|_| ScramError::ServerFinal("verifier is not base64".into()))?;
        match self.server_signature {
            Some(expected) if got == expected => Ok(()),
            _ => Err(ScramError::Signature),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The example exchange of RFC 7677 section 3.
    const NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
    const SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";

    #[test]
    fn rfc7677_example_exchange() {
        let mut c = ScramClient::new("user", NONCE);
        assert_eq!(c.client_first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let fin = c.client_final(SERVER_FIRST.as_bytes(), "pencil").unwrap();
        assert_eq!(
            fin,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        c.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        assert_eq!(
            c.verify_server_final(b"v=AAAATRBVBX8x7w4AKPhD41ZO39zzcpUaOb1vOW+bCHk="),
            Err(ScramError::Signature)
        );
        assert!(matches!(
            c.verify_server_final(b"e=invalid-proof"),
            Err(ScramError::ServerFinal(_))
        ));
    }

    #[test]
    fn rejects_bad_server_first() {
        let mut c = ScramClient::new("", NONCE);
        assert_eq!(
            c.client_final(b"r=other,s=AAAA,i=1", "x"),
            Err(ScramError::Nonce)
        );
        assert!(
            c.client_final(b"r=rOprNGfwEbeRWgbNEkqOxx,s=AAAA,i=0", "x")
                .is_err()
        );
        assert!(
            c.client_final(b"r=rOprNGfwEbeRWgbNEkqOxx,s=!!,i=1", "x")
                .is_err()
        );
        assert!(c.client_final(b"garbage", "x").is_err());
        assert!(c.client_final(&[0xff, 0xfe], "x").is_err());
    }
}
