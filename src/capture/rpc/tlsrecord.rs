//! TLS record framing and hello recognition, shared by content detection ([`super::detect`]) and the TLS
//! matcher ([`super::tls`]) without either importing the other.

use super::be16;

/// Largest record body accepted: 2^14 plus the expansion TLS allows (larger is taken for garbage).
pub const MAX_RECORD: usize = 16384 + 2048;
pub(super) const CCS: u8 = 20;
pub(super) const ALERT: u8 = 21;
pub(super) const HANDSHAKE: u8 = 22;
pub(super) const APP_DATA: u8 = 23;

/// A TLS record header: type, version 3.x, length within bounds.
pub fn record_header(b: &[u8]) -> Option<(u8, usize)> {
    let h = b.get(..5)?;
    let len = be16(h, 3)? as usize;
    ((CCS..=24).contains(&h[0]) && h[1] == 3 && h[2] <= 4 && len <= MAX_RECORD)
        .then_some((h[0], len))
}

/// A handshake record that starts with a handshake message of type `hs` whose length fits the record.
fn hello(b: &[u8], hs: u8) -> bool {
    match record_header(b) {
        Some((HANDSHAKE, len)) if len >= 38 => {
            b.get(5) == Some(&hs)
                && b.get(6..9)
                    .is_some_and(|l| u32::from_be_bytes([0, l[0], l[1], l[2]]) as usize >= 34)
                && b.get(9) == Some(&3)
        }
        _ => false,
    }
}

/// A segment that starts with a TLS ClientHello record.
pub fn is_client_hello(b: &[u8]) -> bool {
    hello(b, 1)
}

/// A segment that starts with a TLS ServerHello record.
pub fn is_server_hello(b: &[u8]) -> bool {
    hello(b, 2)
}
