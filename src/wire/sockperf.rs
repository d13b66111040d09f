//! The sockperf 3.x message format and roundtrip's extensions to it.
//!
//! Every message starts with a 14-byte big-endian header: `u64` sequence number, `u16` flags, `u32` total
//! message length including the header. A server answers messages that have both [`Flags::CLIENT`] and
//! [`Flags::PONG_REQUEST`] set, and not [`Flags::WARMUP`], with the same bytes and `CLIENT` cleared. Over TCP, messages are framed by the
//! length field; over UDP, one datagram is one message.
//!
//! Extensions never change what a sockperf peer sees:
//! - **Hello**: the client's first message has sequence [`HELLO_SEQ`] and a payload starting with
//!   [`HELLO_MAGIC`]. A sockperf server echoes it unchanged; a roundtrip server answers with the
//!   [`HelloKind::Ack`] kind and the features it supports. A client only uses features the ack listed.
//! - **Server timestamps** ([`Feature::SERVER_TIMESTAMPS`]): once acknowledged, the client may set
//!   [`Flags::RT_TIMESTAMPS`] on a message of at least [`TIMESTAMPED_MIN_LEN`] bytes; the server then writes its
//!   receive and send times (nanoseconds of its realtime clock) at bytes 14..22 and 22..30 of the answer, so the
//!   client can split the round trip into server turnaround and the rest.
//! - **Receive counts** ([`Feature::COUNTS`]): once acknowledged, the client may send a
//!   [`Control::CountsRequest`]; the server answers with a [`Control::Counts`] holding the data messages and
//!   bytes it received from this client (TCP: this connection; UDP: this address) since the hello. Over TCP the
//!   answer comes after every earlier message was read, so the count is exact; over UDP it tells the loss.
//! - **Reverse streaming** ([`Feature::REVERSE`]): once acknowledged, the client may send a
//!   [`Control::ReverseRequest`]; the server then sends messages of the requested size (flags 0, sequence
//!   numbers from 1) as fast as it can for the requested time, then a [`Control::ReverseEnd`] with what it sent.
//!
//! Control messages (hello and the ones above) have sequence [`HELLO_SEQ`], a payload starting with
//! [`HELLO_MAGIC`] and a kind byte; a client sends them with `CLIENT | PONG_REQUEST`, so a sockperf server that
//! sees one (it never should: clients only use acknowledged features) merely echoes it.
#![forbid(unsafe_code)]

use thiserror::Error;

/// The default port of sockperf and of `roundtrip server`.
pub const DEFAULT_PORT: u16 = 11111;
/// Size of the header in bytes; also the smallest message.
pub const HEADER_LEN: usize = 14;
/// Largest message roundtrip sends or accepts (256 KiB). A peer announcing more is dropped: no buffer is ever
/// allocated beyond this.
pub const MAX_MESSAGE_LEN: usize = 256 * 1024;
/// Largest message that fits in one UDP datagram over IPv4.
pub const MAX_UDP_MESSAGE_LEN: usize = 65_507;
/// Sequence number of the hello message.
pub const HELLO_SEQ: u64 = u64::MAX;
/// First bytes of a hello payload.
pub const HELLO_MAGIC: [u8; 4] = *b"RTRP";
/// Total length of a hello message.
pub const HELLO_LEN: usize = 32;
/// Version of roundtrip's extension protocol.
pub const EXTENSION_VERSION: u16 = 1;
/// Smallest message that can carry server timestamps.
pub const TIMESTAMPED_MIN_LEN: usize = HEADER_LEN + 16;

/// The flags field of the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags(pub u16);

impl Flags {
    /// Set by clients on every message; cleared by the server in its answer.
    pub const CLIENT: Flags = Flags(0x1);
    /// The client wants an answer.
    pub const PONG_REQUEST: Flags = Flags(0x2);
    /// Warm-up traffic, not measured.
    pub const WARMUP: Flags = Flags(0x4);
    /// roundtrip extension: fill in server timestamps (only after the hello acknowledged it).
    pub const RT_TIMESTAMPS: Flags = Flags(0x8000);

    /// True when every bit of `other` is set.
    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
    /// The union of two flag sets.
    pub fn with(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }
    /// These flags without the bits of `other`.
    pub fn without(self, other: Flags) -> Flags {
        Flags(self.0 & !other.0)
    }
}

/// A decoded message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Sequence number chosen by the client.
    pub seq: u64,
    /// Flags.
    pub flags: Flags,
    /// Total message length in bytes, header included.
    pub len: u32,
}

/// What is wrong with bytes that should have been a message.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes than a header.
    #[error("message of {0} bytes is shorter than the 14-byte header")]
    Short(usize),
    /// The length field is below the header size.
    #[error("length field {0} is smaller than the 14-byte header")]
    LengthTooSmall(u32),
    /// The length field is above the maximum this side accepts.
    #[error("length field {len} exceeds the maximum message size of {max} bytes")]
    LengthTooLarge {
        /// The announced length.
        len: u32,
        /// The maximum accepted.
        max: usize,
    },
    /// A datagram whose size differs from its length field.
    #[error("datagram of {got} bytes announces {len} bytes")]
    LengthMismatch {
        /// Bytes received.
        got: usize,
        /// Length field.
        len: u32,
    },
}

impl Header {
    /// Writes the header into the first 14 bytes of `buf`.
    ///
    /// # Panics
    /// If `buf` is shorter than [`HEADER_LEN`]; callers size their buffers from the message length.
    pub fn write(&self, buf: &mut [u8]) {
        buf[0..8].copy_from_slice(&self.seq.to_be_bytes());
        buf[8..10].copy_from_slice(&self.flags.0.to_be_bytes());
        buf[10..14].copy_from_slice(&self.len.to_be_bytes());
    }

    /// Reads a header from the start of `buf` and checks its length field against `max_len`.
    pub fn parse(buf: &[u8], max_len: usize) -> Result<Header, WireError> {
        if buf.len() < HEADER_LEN {
            return Err(WireError::Short(buf.len()));
        }
        let seq = u64::from_be_bytes(buf[0..8].try_into().expect("8 bytes"));
        let flags = Flags(u16::from_be_bytes(buf[8..10].try_into().expect("2 bytes")));
        let len = u32::from_be_bytes(buf[10..14].try_into().expect("4 bytes"));
        if (len as usize) < HEADER_LEN {
            return Err(WireError::LengthTooSmall(len));
        }
        if len as usize > max_len {
            return Err(WireError::LengthTooLarge { len, max: max_len });
        }
        Ok(Header { seq, flags, len })
    }

    /// True for a message a server must answer: CLIENT and PONG_REQUEST both set and WARMUP not set.
    ///
    /// sockperf 3.7's server does not answer warm-up messages (checked against the Debian package), and
    /// sockperf clients do not expect those answers, so neither does roundtrip's.
    pub fn wants_answer(&self) -> bool {
        self.flags.contains(Flags::CLIENT.with(Flags::PONG_REQUEST))
            && !self.flags.contains(Flags::WARMUP)
    }
}

/// Features of roundtrip's extension protocol, as a bit set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Feature(pub u32);

impl Feature {
    /// The server fills in receive/send timestamps on request.
    pub const SERVER_TIMESTAMPS: Feature = Feature(0x1);
    /// The server reports what it received on request ([`Control::CountsRequest`]).
    pub const COUNTS: Feature = Feature(0x2);
    /// The server streams to the client on request ([`Control::ReverseRequest`]).
    pub const REVERSE: Feature = Feature(0x4);
    /// Everything this build supports.
    pub const ALL: Feature = Feature(0x7);

    /// True when every bit of `other` is set.
    pub fn contains(self, other: Feature) -> bool {
        self.0 & other.0 == other.0
    }
}

/// Which side wrote a hello payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelloKind {
    /// Sent by a client.
    Request = 1,
    /// Sent by a roundtrip server in answer.
    Ack = 2,
}

/// The payload of a hello message: magic, kind, extension version, feature bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Request or answer.
    pub kind: HelloKind,
    /// Extension protocol version of the writer.
    pub version: u16,
    /// Requested (client) or granted (server) features.
    pub features: Feature,
}

impl Hello {
    /// Encodes a complete hello message ([`HELLO_LEN`] bytes), header included, as a client sends it.
    pub fn encode(&self, flags: Flags) -> [u8; HELLO_LEN] {
        let mut buf = [0u8; HELLO_LEN];
        Header {
            seq: HELLO_SEQ,
            flags,
            len: HELLO_LEN as u32,
        }
        .write(&mut buf);
        buf[14..18].copy_from_slice(&HELLO_MAGIC);
        buf[18] = self.kind as u8;
        buf[19..21].copy_from_slice(&self.version.to_be_bytes());
        buf[21..25].copy_from_slice(&self.features.0.to_be_bytes());
        buf
    }

    /// Decodes the hello carried by a whole message, or `None` when the message is not a hello.
    pub fn decode(message: &[u8]) -> Option<Hello> {
        if message.len() < 25 || message[14..18] != HELLO_MAGIC {
            return None;
        }
        let seq = u64::from_be_bytes(message[0..8].try_into().ok()?);
        if seq != HELLO_SEQ {
            return None;
        }
        let kind = match message[18] {
            1 => HelloKind::Request,
            2 => HelloKind::Ack,
            _ => return None,
        };
        Some(Hello {
            kind,
            version: u16::from_be_bytes(message[19..21].try_into().ok()?),
            features: Feature(u32::from_be_bytes(message[21..25].try_into().ok()?)),
        })
    }
}

/// Total length of every control message other than the hello.
pub const CONTROL_LEN: usize = 48;
/// Longest reverse stream a server accepts; longer requests are cut to this.
pub const MAX_REVERSE_DURATION: std::time::Duration = std::time::Duration::from_secs(3600);

/// A control message of the extension protocol other than the hello (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Client: how many data messages and bytes did you receive from me since my hello?
    CountsRequest,
    /// Server: the answer to [`Control::CountsRequest`].
    Counts {
        /// Data messages received (control messages not included).
        messages: u64,
        /// Bytes of those messages.
        bytes: u64,
    },
    /// Client: send me messages of `size` bytes for `duration`.
    ReverseRequest {
        /// Whole message size in bytes, header included.
        size: u32,
        /// How long to send.
        duration: std::time::Duration,
    },
    /// Server: the reverse stream is over.
    ReverseEnd {
        /// Data messages sent.
        messages: u64,
        /// Bytes of those messages.
        bytes: u64,
    },
}

impl Control {
    fn kind(&self) -> u8 {
        match self {
            Control::CountsRequest => 3,
            Control::Counts { .. } => 4,
            Control::ReverseRequest { .. } => 5,
            Control::ReverseEnd { .. } => 6,
        }
    }

    /// Encodes a complete control message ([`CONTROL_LEN`] bytes), header included.
    pub fn encode(&self, flags: Flags) -> [u8; CONTROL_LEN] {
        let mut buf = [0u8; CONTROL_LEN];
        Header {
            seq: HELLO_SEQ,
            flags,
            len: CONTROL_LEN as u32,
        }
        .write(&mut buf);
        buf[14..18].copy_from_slice(&HELLO_MAGIC);
        buf[18] = self.kind();
        let (a, b) = match *self {
            Control::CountsRequest => (0, 0),
            Control::Counts { messages, bytes } | Control::ReverseEnd { messages, bytes } => {
                (messages, bytes)
            }
            Control::ReverseRequest { size, duration } => (
                u64::from(size),
                u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX),
            ),
        };
        buf[19..27].copy_from_slice(&a.to_be_bytes());
        buf[27..35].copy_from_slice(&b.to_be_bytes());
        buf
    }

    /// Decodes the control message carried by a whole message, or `None` when it is not one.
    pub fn decode(message: &[u8]) -> Option<Control> {
        if message.len() < 35 || message[14..18] != HELLO_MAGIC {
            return None;
        }
        if u64::from_be_bytes(message[0..8].try_into().ok()?) != HELLO_SEQ {
            return None;
        }
        let a = u64::from_be_bytes(message[19..27].try_into().ok()?);
        let b = u64::from_be_bytes(message[27..35].try_into().ok()?);
        match message[18] {
            3 => Some(Control::CountsRequest),
            4 => Some(Control::Counts {
                messages: a,
                bytes: b,
            }),
            5 => Some(Control::ReverseRequest {
                size: u32::try_from(a).ok()?,
                duration: std::time::Duration::from_nanos(b),
            }),
            6 => Some(Control::ReverseEnd {
                messages: a,
                bytes: b,
            }),
            _ => None,
        }
    }
}

/// Writes the server's receive and send timestamps into an answer (see [`Feature::SERVER_TIMESTAMPS`]).
pub fn write_server_timestamps(message: &mut [u8], recv_ns: u64, send_ns: u64) {
    if message.len() >= TIMESTAMPED_MIN_LEN {
        message[14..22].copy_from_slice(&recv_ns.to_be_bytes());
        message[22..30].copy_from_slice(&send_ns.to_be_bytes());
    }
}

/// Reads the server's receive and send timestamps from an answer.
pub fn read_server_timestamps(message: &[u8]) -> Option<(u64, u64)> {
    if message.len() < TIMESTAMPED_MIN_LEN {
        return None;
    }
    let recv = u64::from_be_bytes(message[14..22].try_into().ok()?);
    let send = u64::from_be_bytes(message[22..30].try_into().ok()?);
    Some((recv, send))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_bytes_match_sockperf_layout() {
        // A sockperf ping-pong request seq 7, flags CLIENT|PONG_REQUEST, 14 bytes.
        let bytes = [0, 0, 0, 0, 0, 0, 0, 7, 0, 3, 0, 0, 0, 14];
        let h = Header::parse(&bytes, MAX_MESSAGE_LEN).unwrap();
        assert_eq!(
            h,
            Header {
                seq: 7,
                flags: Flags(3),
                len: 14
            }
        );
        assert!(h.wants_answer());
        let warm = Header {
            flags: Flags(7),
            ..h
        };
        assert!(!warm.wants_answer());
        let mut out = [0u8; 14];
        h.write(&mut out);
        assert_eq!(out, bytes);
    }

    #[test]
    fn bad_lengths_are_refused() {
        let mut b = [0u8; 14];
        Header {
            seq: 1,
            flags: Flags(3),
            len: 13,
        }
        .write(&mut b);
        assert_eq!(
            Header::parse(&b, MAX_MESSAGE_LEN),
            Err(WireError::LengthTooSmall(13))
        );
        Header {
            seq: 1,
            flags: Flags(3),
            len: u32::MAX,
        }
        .write(&mut b);
        assert!(matches!(
            Header::parse(&b, MAX_MESSAGE_LEN),
            Err(WireError::LengthTooLarge { .. })
        ));
        assert_eq!(Header::parse(&b[..5], 100), Err(WireError::Short(5)));
    }

    #[test]
    fn hello_round_trip() {
        let h = Hello {
            kind: HelloKind::Request,
            version: EXTENSION_VERSION,
            features: Feature::ALL,
        };
        let msg = h.encode(Flags::CLIENT.with(Flags::PONG_REQUEST));
        assert_eq!(Hello::decode(&msg), Some(h));
        assert_eq!(Hello::decode(&msg[..20]), None);
        let mut other = msg;
        other[7] = 0;
        assert_eq!(Hello::decode(&other), None);
    }

    #[test]
    fn control_messages_round_trip() {
        let all = [
            Control::CountsRequest,
            Control::Counts {
                messages: 7,
                bytes: 448,
            },
            Control::ReverseRequest {
                size: 1024,
                duration: std::time::Duration::from_millis(1500),
            },
            Control::ReverseEnd {
                messages: u64::MAX - 3,
                bytes: 1,
            },
        ];
        for c in all {
            let m = c.encode(Flags::CLIENT.with(Flags::PONG_REQUEST));
            assert_eq!(m.len(), CONTROL_LEN);
            let h = Header::parse(&m, MAX_MESSAGE_LEN).unwrap();
            assert_eq!((h.seq, h.len as usize), (HELLO_SEQ, CONTROL_LEN));
            assert_eq!(Control::decode(&m), Some(c));
            // A control message is not a hello, and a hello is not a control message.
            assert_eq!(Hello::decode(&m), None);
        }
        // Byte-level fixture of a counts answer: seq all ones, flags 0, length 48, magic, kind 4, 2 x u64.
        let mut want = vec![0xff; 8];
        want.extend_from_slice(&[0, 0, 0, 0, 0, 48]);
        want.extend_from_slice(b"RTRP");
        want.push(4);
        want.extend_from_slice(&5u64.to_be_bytes());
        want.extend_from_slice(&320u64.to_be_bytes());
        want.resize(48, 0);
        assert_eq!(
            Control::Counts {
                messages: 5,
                bytes: 320
            }
            .encode(Flags(0))
            .to_vec(),
            want
        );
        let hello = Hello {
            kind: HelloKind::Request,
            version: 1,
            features: Feature::ALL,
        }
        .encode(Flags::CLIENT);
        assert_eq!(Control::decode(&hello), None);
        let mut unknown = Control::CountsRequest.encode(Flags(0));
        unknown[18] = 99;
        assert_eq!(Control::decode(&unknown), None);
        assert_eq!(Control::decode(&unknown[..30]), None);
        // Arbitrary bytes behind a control header never panic, and what decodes re-encodes the same.
        let mut x: u32 = 99;
        for n in 0..2000usize {
            let mut m = Control::CountsRequest.encode(Flags(0)).to_vec();
            m.truncate(n % 60);
            for b in m.iter_mut().skip(18) {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                *b = (x >> 16) as u8 % 8;
            }
            if let Some(c) = Control::decode(&m) {
                assert_eq!(Control::decode(&c.encode(Flags(0))), Some(c));
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut x: u32 = 12345;
        for n in 0..2000usize {
            let len = n % 64;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (x >> 16) as u8
                })
                .collect();
            if let Ok(h) = Header::parse(&bytes, MAX_MESSAGE_LEN) {
                assert!(h.len as usize >= HEADER_LEN);
            }
            let _ = Hello::decode(&bytes);
            let _ = read_server_timestamps(&bytes);
        }
    }

    #[test]
    fn timestamps_round_trip() {
        let mut m = [0u8; 30];
        write_server_timestamps(&mut m, 5, 9);
        assert_eq!(read_server_timestamps(&m), Some((5, 9)));
        assert_eq!(read_server_timestamps(&m[..29]), None);
    }
}
