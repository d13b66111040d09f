//! Oracle TNS (Transparent Network Substrate) packets, as far as a listener ping needs them.
//!
//! Layout from public descriptions (Wireshark's TNS dissector, nmap's `oracle-tns-version` probe): every packet
//! starts with an 8-byte big-endian header: packet length `u16`, packet checksum `u16`, packet type `u8`,
//! reserved `u8`, header checksum `u16`. A CONNECT (type 1) carries 26 bytes of fixed fields after the header
//! (version, compatible version, service options, SDU, TDU, NT protocol characteristics, line turnaround,
//! value of 1 in hardware, connect data length and offset, max receivable connect data, two connect flags,
//! two trace cross-facility items and a trace unique connection id), padding up to the connect-data offset,
//! and the connect data text. `lsnrctl ping` sends `(CONNECT_DATA=(COMMAND=ping))`; a listener that is up
//! answers REFUSE (type 4: user reason `u8`, system reason `u8`, data length `u16`, data) whose text holds
//! `(ERR=0)`.
#![forbid(unsafe_code)]

use thiserror::Error;

/// Length of the packet header.
pub const HEADER_LEN: usize = 8;
/// Offset of the connect data in the CONNECT packets roundtrip sends (as `tnscmd` and nmap).
pub const CONNECT_DATA_OFFSET: u16 = 0x3a;
/// The connect data of a listener ping.
pub const PING_CONNECT_DATA: &str = "(CONNECT_DATA=(COMMAND=ping))";
/// TNS protocol version roundtrip announces (310, as nmap's probe).
pub const VERSION: u16 = 0x0136;
/// Oldest version roundtrip says it is compatible with (300).
pub const VERSION_COMPATIBLE: u16 = 0x012c;

/// TNS packet types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketType(pub u8);

impl PacketType {
    /// CONNECT.
    pub const CONNECT: PacketType = PacketType(1);
    /// ACCEPT.
    pub const ACCEPT: PacketType = PacketType(2);
    /// ACK.
    pub const ACK: PacketType = PacketType(3);
    /// REFUSE.
    pub const REFUSE: PacketType = PacketType(4);
    /// REDIRECT.
    pub const REDIRECT: PacketType = PacketType(5);
    /// DATA.
    pub const DATA: PacketType = PacketType(6);
    /// RESEND.
    pub const RESEND: PacketType = PacketType(11);
    /// MARKER.
    pub const MARKER: PacketType = PacketType(12);

    /// The type's name.
    pub fn name(self) -> &'static str {
        match self.0 {
            1 => "CONNECT",
            2 => "ACCEPT",
            3 => "ACK",
            4 => "REFUSE",
            5 => "REDIRECT",
            6 => "DATA",
            7 => "NULL",
            9 => "ABORT",
            11 => "RESEND",
            12 => "MARKER",
            13 => "ATTENTION",
            14 => "CONTROL",
            _ => "unknown",
        }
    }
}

/// Bytes that are not a TNS packet.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TnsError {
    /// The length field is shorter than the header.
    #[error("TNS packet length {0} is shorter than its 8-byte header")]
    Length(u16),
    /// The type byte is not a TNS packet type (1 to 19).
    #[error("byte 0x{0:02x} is not a TNS packet type")]
    Type(u8),
    /// A REFUSE packet whose fields run past its end.
    #[error("truncated TNS {0} packet")]
    Truncated(&'static str),
}

/// A framed TNS packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// Packet type.
    pub kind: PacketType,
    /// Bytes after the 8-byte header.
    pub body: Vec<u8>,
}

/// Frames one packet from the front of `buf`: `Ok(None)` when more bytes are needed.
pub fn parse_packet(buf: &[u8]) -> Result<Option<(Packet, usize)>, TnsError> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let len = u16::from_be_bytes([buf[0], buf[1]]);
    if usize::from(len) < HEADER_LEN {
        return Err(TnsError::Length(len));
    }
    if buf[4] == 0 || buf[4] > 19 {
        return Err(TnsError::Type(buf[4]));
    }
    let len = usize::from(len);
    if buf.len() < len {
        return Ok(None);
    }
    Ok(Some((
        Packet {
            kind: PacketType(buf[4]),
            body: buf[HEADER_LEN..len].to_vec(),
        },
        len,
    )))
}

/// A CONNECT packet carrying `connect_data` (at most 65535 - 58 bytes; longer data is cut).
pub fn connect(connect_data: &str) -> Vec<u8> {
    let data = &connect_data.as_bytes()[..connect_data.len().min(usize::from(u16::MAX) - 58)];
    let total = usize::from(CONNECT_DATA_OFFSET) + data.len();
    let mut p = Vec::with_capacity(total);
    p.extend_from_slice(&(total as u16).to_be_bytes()); // packet length
    p.extend_from_slice(&[0, 0]); // packet checksum
    p.push(PacketType::CONNECT.0);
    p.push(0); // reserved
    p.extend_from_slice(&[0, 0]); // header checksum
    p.extend_from_slice(&VERSION.to_be_bytes());
    p.extend_from_slice(&VERSION_COMPATIBLE.to_be_bytes());
    p.extend_from_slice(&[0, 0]); // service options
    p.extend_from_slice(&0x0800u16.to_be_bytes()); // session data unit
    p.extend_from_slice(&0x7fffu16.to_be_bytes()); // maximum transmission data unit
    p.extend_from_slice(&0x7f08u16.to_be_bytes()); // NT protocol characteristics
    p.extend_from_slice(&[0, 0]); // line turnaround value
    p.extend_from_slice(&1u16.to_be_bytes()); // value of 1 in hardware
    p.extend_from_slice(&(data.len() as u16).to_be_bytes()); // length of connect data
    p.extend_from_slice(&CONNECT_DATA_OFFSET.to_be_bytes()); // offset of connect data
    p.extend_from_slice(&[0, 0, 0, 0]); // maximum receivable connect data
    p.extend_from_slice(&[0, 0]); // connect flags 0 and 1
    p.resize(usize::from(CONNECT_DATA_OFFSET), 0); // trace items, unique connection id, padding
    p.extend_from_slice(data);
    p
}

/// The fields of a REFUSE packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refuse {
    /// User reason code.
    pub user_reason: u8,
    /// System reason code.
    pub system_reason: u8,
    /// The refuse data text, e.g. `(DESCRIPTION=(TMP=)(VSNNUM=318767104)(ERR=0)(ALIAS=LISTENER))`.
    pub data: String,
}

impl Refuse {
    /// The value of `(KEY=...)` in the data text, if present.
    pub fn field(&self, key: &str) -> Option<&str> {
        let pat = format!("({key}=");
        let upper = self.data.to_ascii_uppercase();
        let start = upper.find(&pat.to_ascii_uppercase())? + pat.len();
        let end = self.data[start..].find(')')? + start;
        Some(&self.data[start..end])
    }

    /// The `ERR` code: 0 when the listener answered a ping.
    pub fn err(&self) -> Option<u32> {
        self.field("ERR")?.trim().parse().ok()
    }

    /// The listener version decoded from `VSNNUM` (hexadecimal digits a.b.cc.d.ee), e.g. `19.0.0.0.0`.
    pub fn version(&self) -> Option<String> {
        let n: u32 = self.field("VSNNUM")?.trim().parse().ok()?;
        Some(format!(
            "{}.{}.{}.{}.{}",
            n >> 24,
            (n >> 20) & 0xf,
            (n >> 12) & 0xff,
            (n >> 8) & 0xf,
            n & 0xff
        ))
    }
}

/// Parses the body of a REFUSE packet.
pub fn parse_refuse(body: &[u8]) -> Result<Refuse, TnsError> {
    if body.len() < 4 {
        return Err(TnsError::Truncated("REFUSE"));
    }
    let n = usize::from(u16::from_be_bytes([body[2], body[3]]));
    let data = body.get(4..4 + n).unwrap_or(&body[4..]);
    Ok(Refuse {
        user_reason: body[0],
        system_reason: body[1],
        data: String::from_utf8_lossy(data).into_owned(),
    })
}

/// A REFUSE packet with this data (what a listener sends; used by test listeners).
pub fn refuse(data: &str) -> Vec<u8> {
    let d = data.as_bytes();
    let total = HEADER_LEN + 4 + d.len();
    let mut p = Vec::with_capacity(total);
    p.extend_from_slice(&(total as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0, PacketType::REFUSE.0, 0, 0, 0]);
    p.extend_from_slice(&[0x22, 0x00]);
    p.extend_from_slice(&(d.len() as u16).to_be_bytes());
    p.extend_from_slice(d);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_packet_has_the_public_layout() {
        let p = connect(PING_CONNECT_DATA);
        assert_eq!(p.len(), 58 + 29);
        assert_eq!(&p[0..8], &[0x00, 0x57, 0, 0, 0x01, 0, 0, 0]);
        assert_eq!(&p[8..10], &[0x01, 0x36]); // version 310
        assert_eq!(&p[10..12], &[0x01, 0x2c]); // compatible 300
        assert_eq!(&p[14..16], &[0x08, 0x00]); // SDU
        assert_eq!(&p[16..18], &[0x7f, 0xff]); // TDU
        assert_eq!(&p[22..24], &[0x00, 0x01]); // value of 1 in hardware
        assert_eq!(&p[24..26], &[0x00, 29]); // connect data length
        assert_eq!(&p[26..28], &[0x00, 0x3a]); // connect data offset
        assert_eq!(&p[58..], PING_CONNECT_DATA.as_bytes());
        let (pk, used) = parse_packet(&p).unwrap().unwrap();
        assert_eq!((pk.kind, used), (PacketType::CONNECT, 87));
    }

    #[test]
    fn decodes_a_listener_refuse() {
        let text = "(DESCRIPTION=(TMP=)(VSNNUM=318767104)(ERR=0)(ALIAS=LISTENER))";
        let raw = refuse(text);
        assert_eq!(
            &raw[..8],
            &[0, (8 + 4 + text.len()) as u8, 0, 0, 4, 0, 0, 0]
        );
        let (p, _) = parse_packet(&raw).unwrap().unwrap();
        assert_eq!(p.kind, PacketType::REFUSE);
        let r = parse_refuse(&p.body).unwrap();
        assert_eq!(r.data, text);
        assert_eq!(r.err(), Some(0));
        // 318767104 = 0x13000000: 19.0.0.0.0.
        assert_eq!(r.version().as_deref(), Some("19.0.0.0.0"));
        assert_eq!(r.field("alias"), Some("LISTENER"));
        let bad = Refuse {
            user_reason: 0,
            system_reason: 0,
            data: "(ERR=12514)".into(),
        };
        assert_eq!(bad.err(), Some(12514));
        // 11.2.0.2.0 as nmap decodes it: 0x0B200200.
        let v = Refuse {
            user_reason: 0,
            system_reason: 0,
            data: "(VSNNUM=186647040)".into(),
        };
        assert_eq!(v.version().as_deref(), Some("11.2.0.2.0"));
    }

    #[test]
    fn rejects_short_lengths_and_waits_for_more() {
        assert_eq!(
            parse_packet(&[0, 4, 0, 0, 4, 0, 0, 0]),
            Err(TnsError::Length(4))
        );
        assert_eq!(parse_packet(&[0, 20, 0, 0, 4, 0, 0, 0]), Ok(None));
        assert_eq!(parse_packet(b"HTTP/1.1 400"), Err(TnsError::Type(b'/')));
        assert!(parse_refuse(&[1, 2]).is_err());
        let r = parse_refuse(&[0, 0, 0xff, 0xff, b'x']).unwrap();
        assert_eq!(r.data, "x");
    }
}
