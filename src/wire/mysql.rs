//! The MySQL/MariaDB client/server protocol: packet framing, the v10 handshake, the HandshakeResponse41,
//! password scrambles, the RSA-encrypted password of `caching_sha2_password` and `sha256_password`, and the
//! generic OK/ERR/EOF and text result-set packets.
//!
//! Every packet is a 3-byte little-endian payload length, a sequence number and the payload. Parsers take the
//! payload, never panic on any bytes, and [`parse_packet`] refuses nothing larger than the protocol allows
//! (16 MiB - 1, one packet).
#![forbid(unsafe_code)]

use rsa::traits::{PaddingScheme, PublicKeyParts};
use rsa::{Oaep, RsaPublicKey};
use sha1::Sha1;
use sha2::{Digest, Sha256};
use thiserror::Error;

/// Capability flags roundtrip uses.
pub mod caps {
    /// CLIENT_LONG_PASSWORD.
    pub const LONG_PASSWORD: u32 = 1;
    /// CLIENT_LONG_FLAG.
    pub const LONG_FLAG: u32 = 4;
    /// CLIENT_CONNECT_WITH_DB.
    pub const CONNECT_WITH_DB: u32 = 8;
    /// CLIENT_PROTOCOL_41.
    pub const PROTOCOL_41: u32 = 0x200;
    /// CLIENT_SSL.
    pub const SSL: u32 = 0x800;
    /// CLIENT_TRANSACTIONS.
    pub const TRANSACTIONS: u32 = 0x2000;
    /// CLIENT_SECURE_CONNECTION.
    pub const SECURE_CONNECTION: u32 = 0x8000;
    /// CLIENT_MULTI_RESULTS.
    pub const MULTI_RESULTS: u32 = 0x2_0000;
    /// CLIENT_PLUGIN_AUTH.
    pub const PLUGIN_AUTH: u32 = 0x8_0000;
    /// CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA.
    pub const PLUGIN_AUTH_LENENC: u32 = 0x20_0000;
}

/// COM_QUIT.
pub const COM_QUIT: u8 = 0x01;
/// COM_QUERY.
pub const COM_QUERY: u8 = 0x03;
/// COM_PING.
pub const COM_PING: u8 = 0x0e;
/// Largest payload of one packet.
pub const MAX_PAYLOAD: usize = 0xff_ffff;

/// A packet that cannot be understood.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum MyWireError {
    /// A field runs past the end of the payload.
    #[error("{0} is truncated")]
    Truncated(&'static str),
    /// The handshake is not protocol version 10.
    #[error("unsupported handshake protocol version {0} (expected 10)")]
    Version(u8),
}

/// One framed packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// Sequence number.
    pub seq: u8,
    /// Payload.
    pub payload: Vec<u8>,
}

/// Frames one packet from the front of `buf`: `None` when more bytes are needed, otherwise the packet and
/// the bytes it used.
pub fn parse_packet(buf: &[u8]) -> Option<(Packet, usize)> {
    if buf.len() < 4 {
        return None;
    }
    let len = usize::from(buf[0]) | usize::from(buf[1]) << 8 | usize::from(buf[2]) << 16;
    if buf.len() < 4 + len {
        return None;
    }
    Some((
        Packet {
            seq: buf[3],
            payload: buf[4..4 + len].to_vec(),
        },
        4 + len,
    ))
}

/// Frames a payload with a sequence number (payloads must be under [`MAX_PAYLOAD`]).
pub fn frame(seq: u8, payload: &[u8]) -> Vec<u8> {
    let n = payload.len().min(MAX_PAYLOAD);
    let mut v = Vec::with_capacity(n + 4);
    v.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
    v.push(seq);
    v.extend_from_slice(&payload[..n]);
    v
}

/// A command packet (sequence 0): `COM_QUERY` + SQL, `COM_PING`, `COM_QUIT`.
pub fn command(cmd: u8, arg: &[u8]) -> Vec<u8> {
    let mut p = vec![cmd];
    p.extend_from_slice(arg);
    frame(0, &p)
}

struct Cur<'a> {
    b: &'a [u8],
}

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], MyWireError> {
        if self.b.len() < n {
            return Err(MyWireError::Truncated(what));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, MyWireError> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, MyWireError> {
        let s = self.take(2, what)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, MyWireError> {
        let s = self.take(4, what)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn cstr(&mut self, what: &'static str) -> Result<&'a [u8], MyWireError> {
        let end = self
            .b
            .iter()
            .position(|&c| c == 0)
            .ok_or(MyWireError::Truncated(what))?;
        let s = &self.b[..end];
        self.b = &self.b[end + 1..];
        Ok(s)
    }
    /// A length-encoded integer; `None` for the NULL marker 0xfb.
    fn lenenc(&mut self, what: &'static str) -> Result<Option<u64>, MyWireError> {
        let first = self.u8(what)?;
        Ok(match first {
            0xfb => None,
            0xfc => Some(u64::from(self.u16(what)?)),
            0xfd => {
                let s = self.take(3, what)?;
                Some(u64::from(s[0]) | u64::from(s[1]) << 8 | u64::from(s[2]) << 16)
            }
            0xfe => {
                let s = self.take(8, what)?;
                Some(u64::from_le_bytes([
                    s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7],
                ]))
            }
            n => Some(u64::from(n)),
        })
    }
}

/// The server's initial handshake (protocol version 10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    /// Server version string.
    pub server_version: String,
    /// Connection (thread) id.
    pub connection_id: u32,
    /// Capability flags.
    pub capabilities: u32,
    /// The 20-byte scramble (auth plugin data).
    pub scramble: Vec<u8>,
    /// The default authentication plugin.
    pub auth_plugin: String,
}

/// Parses the initial handshake payload. An ERR packet here (0xff) is reported by the caller.
pub fn parse_handshake(p: &[u8]) -> Result<Handshake, MyWireError> {
    let mut c = Cur { b: p };
    let version = c.u8("protocol version")?;
    if version != 10 {
        return Err(MyWireError::Version(version));
    }
    let server_version = String::from_utf8_lossy(c.cstr("server version")?).into_owned();
    let connection_id = c.u32("connection id")?;
    let mut scramble = c.take(8, "auth plugin data part 1")?.to_vec();
    c.u8("filler")?;
    let mut capabilities = u32::from(c.u16("capability flags")?);
    let mut auth_plugin = String::new();
    if !c.b.is_empty() {
        c.u8("character set")?;
        c.u16("status flags")?;
        capabilities |= u32::from(c.u16("capability flags (upper)")?) << 16;
        let data_len = c.u8("auth plugin data length")?;
        c.take(10, "reserved")?;
        if capabilities & caps::SECURE_CONNECTION != 0 {
            let n = usize::from(data_len).saturating_sub(8).max(13);
            let part2 = c.take(n, "auth plugin data part 2")?;
            // The last byte of part 2 is a terminating NUL, not scramble.
            let keep = part2.iter().position(|&b| b == 0).unwrap_or(part2.len());
            scramble.extend_from_slice(&part2[..keep]);
        }
        if capabilities & caps::PLUGIN_AUTH != 0 {
            let name = match c.b.iter().position(|&b| b == 0) {
                Some(_) => c.cstr("auth plugin name")?,
                None => c.b,
            };
            auth_plugin = String::from_utf8_lossy(name).into_owned();
        }
    }
    Ok(Handshake {
        server_version,
        connection_id,
        capabilities,
        scramble,
        auth_plugin,
    })
}

/// The HandshakeResponse41 payload.
pub fn handshake_response(
    capabilities: u32,
    user: &str,
    auth_response: &[u8],
    database: Option<&str>,
    plugin: &str,
) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&capabilities.to_le_bytes());
    p.extend_from_slice(&(MAX_PAYLOAD as u32).to_le_bytes());
    p.push(45); // utf8mb4_general_ci
    p.extend_from_slice(&[0u8; 23]);
    p.extend_from_slice(user.as_bytes());
    p.push(0);
    if capabilities & caps::PLUGIN_AUTH_LENENC != 0 {
        put_lenenc(&mut p, auth_response.len() as u64);
        p.extend_from_slice(auth_response);
    } else {
        // CLIENT_SECURE_CONNECTION: a one-byte length (scrambles are at most 32 bytes).
        let n = auth_response.len().min(255);
        p.push(n as u8);
        p.extend_from_slice(&auth_response[..n]);
    }
    if let Some(db) = database {
        p.extend_from_slice(db.as_bytes());
        p.push(0);
    }
    if capabilities & caps::PLUGIN_AUTH != 0 {
        p.extend_from_slice(plugin.as_bytes());
        p.push(0);
    }
    p
}

/// Appends a length-encoded integer.
fn put_lenenc(p: &mut Vec<u8>, n: u64) {
    match n {
        0..=250 => p.push(n as u8),
        251..=0xffff => {
            p.push(0xfc);
            p.extend_from_slice(&(n as u16).to_le_bytes());
        }
        0x1_0000..=0xff_ffff => {
            p.push(0xfd);
            p.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
        }
        _ => {
            p.push(0xfe);
            p.extend_from_slice(&n.to_le_bytes());
        }
    }
}

/// The SSLRequest payload: the first 32 bytes of a HandshakeResponse41 (capabilities with `CLIENT_SSL`,
/// max packet size, character set, 23 zero bytes). The TLS handshake follows it.
pub fn ssl_request(capabilities: u32) -> Vec<u8> {
    let mut p = Vec::with_capacity(32);
    p.extend_from_slice(&(capabilities | caps::SSL).to_le_bytes());
    p.extend_from_slice(&(MAX_PAYLOAD as u32).to_le_bytes());
    p.push(45);
    p.extend_from_slice(&[0u8; 23]);
    p
}

/// mysql_native_password: SHA1(password) XOR SHA1(scramble + SHA1(SHA1(password))); empty for no password.
pub fn native_password(password: &str, scramble: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let h1 = Sha1::digest(password.as_bytes());
    let h2 = Sha1::digest(h1);
    let mut m = Sha1::new();
    m.update(scramble.get(..20).unwrap_or(scramble));
    m.update(h2);
    let h3 = m.finalize();
    h1.iter().zip(h3.iter()).map(|(a, b)| a ^ b).collect()
}

/// caching_sha2_password: SHA256(password) XOR SHA256(SHA256(SHA256(password)) + scramble); empty for no
/// password.
pub fn caching_sha2_password(password: &str, scramble: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let h1 = Sha256::digest(password.as_bytes());
    let h2 = Sha256::digest(h1);
    let mut m = Sha256::new();
    m.update(h2);
    m.update(scramble.get(..20).unwrap_or(scramble));
    let h3 = m.finalize();
    h1.iter().zip(h3.iter()).map(|(a, b)| a ^ b).collect()
}

/// `caching_sha2_password` AuthMoreData: the server found the password in its cache (an OK follows).
pub const FAST_AUTH_SUCCESS: u8 = 0x03;
/// `caching_sha2_password` AuthMoreData: the password is not cached; the client must send it, over TLS in
/// clear, otherwise encrypted with the server's RSA key.
pub const PERFORM_FULL_AUTHENTICATION: u8 = 0x04;
/// `caching_sha2_password`: the client asks for the server's RSA public key.
pub const CACHING_SHA2_REQUEST_PUBLIC_KEY: u8 = 0x02;
/// `sha256_password`: the client asks for the server's RSA public key.
pub const SHA256_REQUEST_PUBLIC_KEY: u8 = 0x01;
/// The smallest RSA key roundtrip encrypts a password with (MySQL generates 2048-bit keys).
pub const MIN_RSA_BITS: usize = 2048;

/// The password as sent inside TLS (or to `mysql_clear_password`): its bytes and a terminating NUL.
pub fn cleartext_password(password: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(password.len() + 1);
    v.extend_from_slice(password.as_bytes());
    v.push(0);
    v
}

/// The NUL-terminated password XORed with the scramble (repeated), which the RSA exchange encrypts: the
/// server XORs the decrypted bytes with the same scramble, so a replayed ciphertext is useless on another
/// connection.
pub fn xor_password(password: &str, scramble: &[u8]) -> Vec<u8> {
    let s = scramble.get(..20).unwrap_or(scramble);
    let mut v = cleartext_password(password);
    if !s.is_empty() {
        for (i, b) in v.iter_mut().enumerate() {
            *b ^= s[i % s.len()];
        }
    }
    v
}

/// Why a server's RSA public key is not used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// Not a PEM RSA public key.
    #[error("the server's public key is not a PEM RSA public key ({0})")]
    Malformed(String),
    /// Too short to protect a password.
    #[error(
        "the server's RSA public key has {0} bits; roundtrip refuses keys under {MIN_RSA_BITS} bits"
    )]
    TooSmall(usize),
    /// The password does not fit in one RSA-OAEP block.
    #[error(
        "the password ({len} bytes) is too long for the server's {bits}-bit RSA key (at most {max} bytes)"
    )]
    PasswordTooLong {
        /// Password bytes with the NUL.
        len: usize,
        /// Key size.
        bits: usize,
        /// Longest message the key takes.
        max: usize,
    },
    /// The system random source failed.
    #[error("RSA encryption failed: {0}")]
    Encrypt(String),
}

/// A server's RSA public key, checked: the key a MySQL server sends (PEM, `BEGIN PUBLIC KEY` or
/// `BEGIN RSA PUBLIC KEY`) after a request, or the one a user pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerPublicKey {
    key: RsaPublicKey,
}

impl ServerPublicKey {
    /// Parses a PEM public key (trailing NULs and white space allowed) and refuses keys under
    /// [`MIN_RSA_BITS`].
    pub fn from_pem(pem: &[u8]) -> Result<Self, KeyError> {
        use rsa::pkcs1::DecodeRsaPublicKey;
        use rsa::pkcs8::DecodePublicKey;
        let end = pem
            .iter()
            .rposition(|&b| b != 0 && !b.is_ascii_whitespace())
            .map_or(0, |i| i + 1);
        let text =
            std::str::from_utf8(&pem[..end]).map_err(|_| KeyError::Malformed("not text".into()))?;
        let text = text.trim_start();
        let key = if text.starts_with("-----BEGIN RSA PUBLIC KEY-----") {
            RsaPublicKey::from_pkcs1_pem(text).map_err(|e| KeyError::Malformed(e.to_string()))?
        } else if text.starts_with("-----BEGIN PUBLIC KEY-----") {
            RsaPublicKey::from_public_key_pem(text)
                .map_err(|e| KeyError::Malformed(e.to_string()))?
        } else {
            let head: String = text.chars().take(24).collect();
            return Err(KeyError::Malformed(format!(
                "expected -----BEGIN PUBLIC KEY-----, got {head:?}"
            )));
        };
        let bits = key.size() * 8;
        if bits < MIN_RSA_BITS {
            return Err(KeyError::TooSmall(bits));
        }
        Ok(ServerPublicKey { key })
    }

    /// The modulus size in bits.
    pub fn bits(&self) -> usize {
        self.key.size() * 8
    }

    /// The password as `caching_sha2_password` and `sha256_password` send it without TLS: the
    /// NUL-terminated password XORed with the scramble, encrypted with RSA-OAEP (SHA-1 and MGF1-SHA-1, as
    /// the MySQL clients do since 8.0.5).
    pub fn encrypt_password(&self, password: &str, scramble: &[u8]) -> Result<Vec<u8>, KeyError> {
        let msg = xor_password(password, scramble);
        // OAEP with SHA-1 leaves k - 2*20 - 2 bytes for the message.
        let max = self.key.size().saturating_sub(42);
        if msg.len() > max {
            return Err(KeyError::PasswordTooLong {
                len: msg.len(),
                bits: self.bits(),
                max,
            });
        }
        Oaep::<Sha1>::new()
            .encrypt(&mut getrandom::SysRng, &self.key, &msg)
            .map_err(|e| KeyError::Encrypt(e.to_string()))
    }
}

/// A server answer to a command or to authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// OK packet.
    Ok,
    /// ERR packet: error code, SQLSTATE and message.
    Err {
        /// Error number, e.g. 1045.
        code: u16,
        /// SQLSTATE, e.g. `28000`.
        state: String,
        /// Message.
        message: String,
    },
    /// EOF packet (0xfe, under 9 bytes).
    Eof,
    /// AuthSwitchRequest: plugin name and new scramble.
    AuthSwitch {
        /// Plugin the server wants.
        plugin: String,
        /// Its scramble.
        data: Vec<u8>,
    },
    /// AuthMoreData (0x01) and its data.
    AuthMore(Vec<u8>),
    /// A result set header: the number of columns.
    ResultSet(u64),
}

/// Parses an ERR packet payload (starting with 0xff).
fn parse_err(p: &[u8]) -> Result<Reply, MyWireError> {
    let mut c = Cur { b: p };
    c.u8("ERR header")?;
    let code = c.u16("error code")?;
    let mut state = String::new();
    if c.b.first() == Some(&b'#') {
        c.u8("sqlstate marker")?;
        state = String::from_utf8_lossy(c.take(5, "sqlstate")?).into_owned();
    }
    Ok(Reply::Err {
        code,
        state,
        message: String::from_utf8_lossy(c.b).into_owned(),
    })
}

/// Classifies a reply payload. `in_auth` tells 0xfe (AuthSwitchRequest during authentication, EOF after) and
/// 0x01 (AuthMoreData during authentication, a 1-column result set after) apart.
pub fn parse_reply(p: &[u8], in_auth: bool) -> Result<Reply, MyWireError> {
    match p.first() {
        None => Err(MyWireError::Truncated("reply")),
        Some(0x00) => Ok(Reply::Ok),
        Some(0xff) => parse_err(p),
        Some(0xfe) if in_auth => {
            let mut c = Cur { b: &p[1..] };
            if c.b.is_empty() {
                return Ok(Reply::AuthSwitch {
                    plugin: "mysql_old_password".into(),
                    data: Vec::new(),
                });
            }
            let plugin = String::from_utf8_lossy(c.cstr("auth switch plugin name")?).into_owned();
            let data = c.b.strip_suffix(&[0]).unwrap_or(c.b).to_vec();
            Ok(Reply::AuthSwitch { plugin, data })
        }
        Some(0xfe) if p.len() < 9 => Ok(Reply::Eof),
        Some(0x01) if in_auth => Ok(Reply::AuthMore(p[1..].to_vec())),
        Some(_) => {
            let mut c = Cur { b: p };
            match c.lenenc("column count")? {
                Some(n) => Ok(Reply::ResultSet(n)),
                None => Err(MyWireError::Truncated("column count")),
            }
        }
    }
}

/// SERVER_MORE_RESULTS_EXISTS in the status flags of an OK (0x00) or EOF (0xfe, under 9 bytes) payload:
/// another result set follows. False for anything else or a truncated packet.
pub fn more_results(p: &[u8]) -> bool {
    const MORE: u16 = 0x0008;
    let mut c = Cur { b: p };
    let status = match c.u8("header") {
        Ok(0xfe) if p.len() < 9 => c.u16("warnings").and_then(|_| c.u16("status")),
        Ok(0x00) => c
            .lenenc("affected rows")
            .and_then(|_| c.lenenc("last insert id"))
            .and_then(|_| c.u16("status")),
        _ => return false,
    };
    status.is_ok_and(|s| s & MORE != 0)
}

/// Bytes of all non-NULL values of a text-protocol row, or an error if the row is malformed.
pub fn row_value_bytes(p: &[u8]) -> Result<u64, MyWireError> {
    let mut c = Cur { b: p };
    let mut total = 0u64;
    while !c.b.is_empty() {
        if let Some(n) = c.lenenc("row value length")? {
            let n = usize::try_from(n).map_err(|_| MyWireError::Truncated("row value"))?;
            c.take(n, "row value")?;
            total += n as u64;
        }
    }
    Ok(total)
}

/// The values of a text-protocol row: text per column, `None` for NULL (non-UTF-8 bytes replaced).
pub fn row_values(p: &[u8]) -> Result<Vec<Option<String>>, MyWireError> {
    let mut c = Cur { b: p };
    let mut out = Vec::new();
    while !c.b.is_empty() {
        match c.lenenc("row value length")? {
            Some(n) => {
                let n = usize::try_from(n).map_err(|_| MyWireError::Truncated("row value"))?;
                out.push(Some(
                    String::from_utf8_lossy(c.take(n, "row value")?).into_owned(),
                ));
            }
            None => out.push(None),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handshake as MariaDB 10.11 sends it (scramble "abcdefgh" + "ijklmnopqrst").
    pub(crate) fn sample_handshake(plugin: &str) -> Vec<u8> {
        let mut p = vec![10];
        p.extend_from_slice(b"5.5.5-10.11.19-MariaDB\0");
        p.extend_from_slice(&42u32.to_le_bytes());
        p.extend_from_slice(b"abcdefgh");
        p.push(0);
        let c =
            caps::PROTOCOL_41 | caps::SECURE_CONNECTION | caps::PLUGIN_AUTH | caps::CONNECT_WITH_DB;
        p.extend_from_slice(&((c & 0xffff) as u16).to_le_bytes());
        p.push(45);
        p.extend_from_slice(&2u16.to_le_bytes());
        p.extend_from_slice(&((c >> 16) as u16).to_le_bytes());
        p.push(21);
        p.extend_from_slice(&[0u8; 10]);
        p.extend_from_slice(b"ijklmnopqrst\0");
        p.extend_from_slice(plugin.as_bytes());
        p.push(0);
        p
    }

    #[test]
    fn parses_a_v10_handshake() {
        let h = parse_handshake(&sample_handshake("mysql_native_password")).unwrap();
        assert_eq!(h.server_version, "5.5.5-10.11.19-MariaDB");
        assert_eq!(h.connection_id, 42);
        assert_eq!(h.scramble, b"abcdefghijklmnopqrst");
        assert_eq!(h.auth_plugin, "mysql_native_password");
        assert_eq!(parse_handshake(&[9]).unwrap_err(), MyWireError::Version(9));
        let full = sample_handshake("x");
        for n in 0..full.len() - 3 {
            let _ = parse_handshake(&full[..n]);
        }
    }

    #[test]
    fn ssl_request_is_32_bytes_with_client_ssl() {
        let p = ssl_request(caps::PROTOCOL_41);
        assert_eq!(p.len(), 32);
        assert_eq!(
            u32::from_le_bytes([p[0], p[1], p[2], p[3]]),
            caps::PROTOCOL_41 | caps::SSL
        );
        assert!(p[9..].iter().all(|&b| b == 0));
    }

    #[test]
    fn frames_packets() {
        let f = frame(3, b"abc");
        assert_eq!(f, vec![3, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(
            parse_packet(&f),
            Some((
                Packet {
                    seq: 3,
                    payload: b"abc".to_vec()
                },
                7
            ))
        );
        assert_eq!(parse_packet(&f[..6]), None);
        assert_eq!(command(COM_PING, &[]), vec![1, 0, 0, 0, 0x0e]);
    }

    #[test]
    fn native_password_known_answer() {
        // Independent recomputation of the documented formula.
        let scramble = b"abcdefghijklmnopqrst";
        let got = native_password("secret", scramble);
        let h1 = Sha1::digest(b"secret");
        let h2 = Sha1::digest(h1);
        let h3 = Sha1::digest([&scramble[..], &h2[..]].concat());
        let want: Vec<u8> = h1.iter().zip(h3.iter()).map(|(a, b)| a ^ b).collect();
        assert_eq!(got, want);
        assert_eq!(got.len(), 20);
        assert!(native_password("", scramble).is_empty());
        // The server's check: SHA1(scramble + stored) XOR response == SHA1(password), and SHA1 of that == stored.
        let stored = h2;
        let x = Sha1::digest([&scramble[..], &stored[..]].concat());
        let candidate: Vec<u8> = got.iter().zip(x.iter()).map(|(a, b)| a ^ b).collect();
        assert_eq!(Sha1::digest(&candidate).to_vec(), stored.to_vec());
        assert_eq!(caching_sha2_password("secret", scramble).len(), 32);
    }

    const KEY_2048_PRIVATE: &str = include_str!("../../tests/fixtures/rsa2048_test_key.pem");
    const KEY_2048_SPKI: &str = include_str!("../../tests/fixtures/rsa2048_test_key.pub");
    const KEY_2048_PKCS1: &str = include_str!("../../tests/fixtures/rsa2048_test_key.rsapub");
    const KEY_1024_SPKI: &str = include_str!("../../tests/fixtures/rsa1024_test_key.pub");

    #[test]
    fn password_xor_with_the_scramble_repeats_it_and_keeps_the_nul() {
        let scramble = b"abcdefghijklmnopqrst";
        assert_eq!(cleartext_password("pw"), b"pw\0");
        let x = xor_password("pw", scramble);
        assert_eq!(x, vec![b'p' ^ b'a', b'w' ^ b'b', b'c']);
        // Longer than the scramble: it wraps around after 20 bytes.
        let long = "x".repeat(25);
        let x = xor_password(&long, scramble);
        assert_eq!(x.len(), 26);
        assert_eq!(x[20], b'x' ^ b'a');
        assert_eq!(x[25], scramble[5]);
        // A 21-byte scramble with its NUL (as some servers send it) uses the first 20 bytes.
        assert_eq!(
            xor_password("p", b"abcdefghijklmnopqrst\0"),
            xor_password("p", scramble)
        );
    }

    #[test]
    fn rsa_oaep_sha1_password_decrypts_with_the_private_key() {
        use rsa::RsaPrivateKey;
        use rsa::pkcs8::DecodePrivateKey;
        let private = RsaPrivateKey::from_pkcs8_pem(KEY_2048_PRIVATE).unwrap();
        let scramble = b"0123456789ABCDEFGHIJ";
        for pem in [KEY_2048_SPKI, KEY_2048_PKCS1] {
            // As a server sends it: trailing newline and NUL.
            let mut sent = pem.as_bytes().to_vec();
            sent.extend_from_slice(b"\n\0");
            let key = ServerPublicKey::from_pem(&sent).unwrap();
            assert_eq!(key.bits(), 2048);
            let ct = key.encrypt_password("s3cret pw", scramble).unwrap();
            assert_eq!(ct.len(), 256);
            let plain = private.decrypt(Oaep::<Sha1>::new(), &ct).unwrap();
            assert_eq!(plain, xor_password("s3cret pw", scramble));
            let back: Vec<u8> = plain
                .iter()
                .enumerate()
                .map(|(i, b)| b ^ scramble[i % 20])
                .collect();
            assert_eq!(back, b"s3cret pw\0");
            // Randomised padding: the same password encrypts differently each time.
            assert_ne!(ct, key.encrypt_password("s3cret pw", scramble).unwrap());
            // 256 - 42 = 214 bytes fit, NUL included.
            assert!(key.encrypt_password(&"p".repeat(213), scramble).is_ok());
            assert_eq!(
                key.encrypt_password(&"p".repeat(214), scramble),
                Err(KeyError::PasswordTooLong {
                    len: 215,
                    bits: 2048,
                    max: 214
                })
            );
        }
    }

    #[test]
    fn refuses_small_and_malformed_keys() {
        assert_eq!(
            ServerPublicKey::from_pem(KEY_1024_SPKI.as_bytes()),
            Err(KeyError::TooSmall(1024))
        );
        for bad in [
            &b""[..],
            b"\0",
            b"hello",
            b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
            b"\xff\xfe-----BEGIN",
        ] {
            assert!(
                matches!(ServerPublicKey::from_pem(bad), Err(KeyError::Malformed(_))),
                "{bad:?}"
            );
        }
        let cut = &KEY_2048_SPKI.as_bytes()[..200];
        assert!(ServerPublicKey::from_pem(cut).is_err());
    }

    #[test]
    fn handshake_response_uses_lenenc_auth_data_when_allowed() {
        let long = vec![7u8; 256];
        let p = handshake_response(
            caps::PROTOCOL_41 | caps::PLUGIN_AUTH | caps::PLUGIN_AUTH_LENENC,
            "u",
            &long,
            None,
            "sha256_password",
        );
        assert_eq!(&p[32..34], b"u\0");
        assert_eq!(&p[34..37], &[0xfc, 0x00, 0x01]);
        assert_eq!(&p[37..37 + 256], &long[..]);
        assert_eq!(&p[37 + 256..], b"sha256_password\0");
        let p = handshake_response(caps::PROTOCOL_41, "u", &[1, 2], Some("d"), "");
        assert_eq!(&p[34..], &[2, 1, 2, b'd', 0]);
    }

    #[test]
    fn classifies_replies() {
        assert_eq!(
            parse_reply(&[0, 0, 0, 2, 0, 0, 0], false).unwrap(),
            Reply::Ok
        );
        let err = b"\xff\x15\x04#28000Access denied for user 'x'@'localhost'";
        assert_eq!(
            parse_reply(err, true).unwrap(),
            Reply::Err {
                code: 1045,
                state: "28000".into(),
                message: "Access denied for user 'x'@'localhost'".into()
            }
        );
        assert_eq!(parse_reply(&[0xfe, 0, 0, 2, 0], false).unwrap(), Reply::Eof);
        assert_eq!(
            parse_reply(b"\xfecaching_sha2_password\0abc\0", true).unwrap(),
            Reply::AuthSwitch {
                plugin: "caching_sha2_password".into(),
                data: b"abc".to_vec()
            }
        );
        assert_eq!(
            parse_reply(&[0x01, 0x03], true).unwrap(),
            Reply::AuthMore(vec![3])
        );
        assert_eq!(parse_reply(&[0x01], false).unwrap(), Reply::ResultSet(1));
        assert_eq!(
            parse_reply(&[0xfc, 0x00, 0x01], false).unwrap(),
            Reply::ResultSet(256)
        );
        assert!(parse_reply(&[], false).is_err());
        assert!(parse_reply(&[0xfc], false).is_err());
    }

    #[test]
    fn more_results_flag() {
        assert!(mysql_more(&[0xfe, 0, 0, 0x08, 0]));
        assert!(!mysql_more(&[0xfe, 0, 0, 0x02, 0]));
        assert!(mysql_more(&[0x00, 0, 0, 0x0a, 0, 0, 0]));
        assert!(!mysql_more(&[0x00, 0xfc]));
        assert!(!mysql_more(&[]));
    }

    fn mysql_more(p: &[u8]) -> bool {
        more_results(p)
    }

    #[test]
    fn row_values_handle_null_and_truncation() {
        assert_eq!(
            row_values(&[3, b'a', b'b', b'c', 0xfb, 1, b'x']).unwrap(),
            vec![Some("abc".into()), None, Some("x".into())]
        );
        assert!(row_values(&[5, b'a']).is_err());
        assert!(row_values(&[0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn row_bytes_handle_null_and_truncation() {
        assert_eq!(
            row_value_bytes(&[3, b'a', b'b', b'c', 0xfb, 1, b'x']).unwrap(),
            4
        );
        assert!(row_value_bytes(&[5, b'a']).is_err());
        assert!(row_value_bytes(&[0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
