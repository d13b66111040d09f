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
//!   Over UDP the server first answers with a [`Control::ReverseGrant`] carrying a cookie
//!   ([`crate::wire::auth::CookieJar`]) and streams only when the request comes again with that cookie from the
//!   same address: nobody can point a server's stream at an address that did not ask for it.
//! - **Replay** ([`Feature::REPLAY`], servers started with `--allow-replay`): a data message flagged
//!   [`Flags::REPLAY`] asks for an answer of a given size after a given server time ([`ReplayRequest`]).
//! - **Pre-shared key** ([`Feature::PSK`]): a server with a key answers a hello with a [`Control::Challenge`];
//!   the client answers with a [`Control::Auth`] carrying its proof; the server's ack carries the server's proof
//!   ([`crate::wire::auth`]). Until then the server answers nothing else, not even sockperf pings.
//!
//! No answer a server sends before the client proved its address is larger than the request it answers (see
//! [`Control::wire_len`]).
//!
//! Control messages (hello and the ones above) have sequence [`HELLO_SEQ`], a payload starting with
//! [`HELLO_MAGIC`] and a kind byte; a client sends them with `CLIENT | PONG_REQUEST`, so a sockperf server that
//! sees one (it never should: clients only use acknowledged features) merely echoes it.
#![forbid(unsafe_code)]

use crate::wire::auth::{NONCE_LEN, Nonce, PROOF_LEN, Proof};
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
/// Version of roundtrip's extension protocol (2: hellos carry a nonce and, with a key, a proof).
pub const EXTENSION_VERSION: u16 = 2;
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
    /// roundtrip extension: a replay request ([`ReplayRequest`]; only after the hello granted
    /// [`Feature::REPLAY`]).
    pub const REPLAY: Flags = Flags(0x4000);

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
    /// A replay request's fields are out of range.
    #[error("{0}")]
    Replay(String),
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
    /// The server answers replay requests ([`ReplayRequest`]); granted only by a server started with
    /// `--allow-replay`.
    pub const REPLAY: Feature = Feature(0x8);
    /// In a request: the client holds a pre-shared key. In an ack: the server holds one, and the hello's proof
    /// field carries its proof ([`crate::wire::auth::server_proof`]).
    pub const PSK: Feature = Feature(0x10);
    /// Every feature a server may grant (REPLAY only with `--allow-replay`, PSK only with a key).
    pub const ALL: Feature = Feature(0x1f);
    /// What a client asks for when it wants everything that measures (not REPLAY, not PSK).
    pub const MEASURE: Feature = Feature(0x7);

    /// True when every bit of `other` is set.
    pub fn contains(self, other: Feature) -> bool {
        self.0 & other.0 == other.0
    }
    /// The union of two sets.
    pub fn with(self, other: Feature) -> Feature {
        Feature(self.0 | other.0)
    }
    /// This set without the bits of `other`.
    pub fn without(self, other: Feature) -> Feature {
        Feature(self.0 & !other.0)
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

/// The payload of a hello message: magic, kind, extension version, feature bits, a nonce and, in the ack of a
/// server that holds a key, that server's proof.
///
/// Layout (big-endian): header (14), `RTRP` (4), kind (1), version (2), features (4), nonce (16), proof (32),
/// zero padding to [`HELLO_LEN`]. Version 1 hellos were 32 bytes without nonce and proof; they still decode (nonce
/// and proof zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Request or answer.
    pub kind: HelloKind,
    /// Extension protocol version of the writer.
    pub version: u16,
    /// Requested (client) or granted (server) features.
    pub features: Feature,
    /// The client's nonce (a request), echoed in the ack.
    pub nonce: Nonce,
    /// The server's proof of the key (an ack with [`Feature::PSK`]); zeros otherwise.
    pub proof: Proof,
}

/// Total length of a hello message.
pub const HELLO_LEN: usize = 80;
const HELLO_V1_LEN: usize = 25;

impl Hello {
    /// A client's request for `features` with a fresh nonce.
    pub fn request(features: Feature, nonce: Nonce) -> Hello {
        Hello {
            kind: HelloKind::Request,
            version: EXTENSION_VERSION,
            features,
            nonce,
            proof: [0; PROOF_LEN],
        }
    }

    /// Encodes a complete hello message ([`HELLO_LEN`] bytes), header included.
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
        buf[25..41].copy_from_slice(&self.nonce);
        buf[41..73].copy_from_slice(&self.proof);
        buf
    }

    /// Decodes the hello carried by a whole message, or `None` when the message is not a hello.
    pub fn decode(message: &[u8]) -> Option<Hello> {
        if message.len() < HELLO_V1_LEN || message[14..18] != HELLO_MAGIC {
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
        let mut nonce = [0u8; NONCE_LEN];
        let mut proof = [0u8; PROOF_LEN];
        if message.len() >= 73 {
            nonce.copy_from_slice(&message[25..41]);
            proof.copy_from_slice(&message[41..73]);
        }
        Some(Hello {
            kind,
            version: u16::from_be_bytes(message[19..21].try_into().ok()?),
            features: Feature(u32::from_be_bytes(message[21..25].try_into().ok()?)),
            nonce,
            proof,
        })
    }
}

/// Length of the shortest control messages (counts, reverse end, ...); each kind has its own length, see
/// [`Control::wire_len`].
pub const CONTROL_LEN: usize = 48;
/// Length of the longest control message (so a reader can keep any of them whole).
pub const MAX_CONTROL_LEN: usize = 96;
/// Longest reverse stream a server accepts over TCP; longer requests are cut to this. Over UDP the server's
/// `--max-reverse` applies (30 s by default).
pub const MAX_REVERSE_DURATION: std::time::Duration = std::time::Duration::from_secs(3600);

/// Why a server refused a client in a [`Control::Refused`] message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The client's proof of the pre-shared key did not check out (another key, or none).
    BadProof = 1,
    /// The client sent something other than the key exchange before proving the key.
    KeyRequired = 2,
    /// The cookie was stale or made for another address.
    BadCookie = 3,
}

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
    /// Client: send me messages of `size` bytes for `duration`. Over UDP the server streams only when `cookie`
    /// is one it gave this address in a [`Control::ReverseGrant`] less than a minute before.
    ReverseRequest {
        /// Whole message size in bytes, header included.
        size: u32,
        /// How long to send.
        duration: std::time::Duration,
        /// The server's cookie (UDP), or `None` to ask for one.
        cookie: Option<Nonce>,
    },
    /// Server: the reverse stream is over.
    ReverseEnd {
        /// Data messages sent.
        messages: u64,
        /// Bytes of those messages.
        bytes: u64,
    },
    /// Server (UDP): send the reverse request again with this cookie; the stream will last `duration` (the
    /// request's, or less when the server caps it).
    ReverseGrant {
        /// The cookie to send back.
        cookie: Nonce,
        /// How long the server will stream.
        duration: std::time::Duration,
    },
    /// Server (UDP): it already runs as many reverse streams as it allows.
    ReverseBusy {
        /// Streams running.
        running: u32,
        /// The server's limit.
        limit: u32,
    },
    /// Server with a key: prove you hold it, over this nonce ([`crate::wire::auth::client_proof`]).
    Challenge {
        /// The server's nonce (over UDP a cookie for the client's address).
        nonce: Nonce,
    },
    /// Client: the proof of the key.
    Auth {
        /// The server's nonce, from the challenge.
        server_nonce: Nonce,
        /// The client's nonce, from its hello.
        client_nonce: Nonce,
        /// The features the client asks for.
        features: Feature,
        /// HMAC-SHA256 under the key over the nonces and features.
        proof: Proof,
    },
    /// Server: the client is refused, and why.
    Refused {
        /// The reason, or `None` for a code this build does not know.
        reason: Option<Refusal>,
    },
}

impl Control {
    fn kind(&self) -> u8 {
        match self {
            Control::CountsRequest => 3,
            Control::Counts { .. } => 4,
            Control::ReverseRequest { .. } => 5,
            Control::ReverseEnd { .. } => 6,
            Control::Challenge { .. } => 7,
            Control::Auth { .. } => 8,
            Control::ReverseGrant { .. } => 9,
            Control::ReverseBusy { .. } => 10,
            Control::Refused { .. } => 11,
        }
    }

    /// Total length of this message on the wire. A message a server sends before the client proved its address
    /// is never longer than the request it answers: a challenge (80) answers a hello (80), an ack (80) answers
    /// an auth (96), a grant or busy (48) answers a reverse request (64), a refusal (48) the shortest of them.
    pub fn wire_len(&self) -> usize {
        match self {
            Control::ReverseRequest { .. } => 64,
            Control::Challenge { .. } => HELLO_LEN,
            Control::Auth { .. } => MAX_CONTROL_LEN,
            _ => CONTROL_LEN,
        }
    }

    /// Encodes a complete control message ([`Control::wire_len`] bytes), header included.
    pub fn encode(&self, flags: Flags) -> Vec<u8> {
        let len = self.wire_len();
        let mut buf = vec![0u8; len];
        Header {
            seq: HELLO_SEQ,
            flags,
            len: len as u32,
        }
        .write(&mut buf);
        buf[14..18].copy_from_slice(&HELLO_MAGIC);
        buf[18] = self.kind();
        let b = &mut buf[19..];
        match *self {
            Control::CountsRequest => {}
            Control::Counts { messages, bytes } | Control::ReverseEnd { messages, bytes } => {
                b[0..8].copy_from_slice(&messages.to_be_bytes());
                b[8..16].copy_from_slice(&bytes.to_be_bytes());
            }
            Control::ReverseRequest {
                size,
                duration,
                cookie,
            } => {
                b[0..8].copy_from_slice(&u64::from(size).to_be_bytes());
                b[8..16].copy_from_slice(&duration_ns(duration).to_be_bytes());
                if let Some(c) = cookie {
                    b[16..32].copy_from_slice(&c);
                }
            }
            Control::ReverseGrant { cookie, duration } => {
                b[0..16].copy_from_slice(&cookie);
                b[16..24].copy_from_slice(&duration_ns(duration).to_be_bytes());
            }
            Control::ReverseBusy { running, limit } => {
                b[0..4].copy_from_slice(&running.to_be_bytes());
                b[4..8].copy_from_slice(&limit.to_be_bytes());
            }
            Control::Challenge { nonce } => b[0..16].copy_from_slice(&nonce),
            Control::Auth {
                server_nonce,
                client_nonce,
                features,
                proof,
            } => {
                b[0..16].copy_from_slice(&server_nonce);
                b[16..32].copy_from_slice(&client_nonce);
                b[32..36].copy_from_slice(&features.0.to_be_bytes());
                b[36..68].copy_from_slice(&proof);
            }
            Control::Refused { reason } => b[0] = reason.map_or(0, |r| r as u8),
        }
        buf
    }

    /// Decodes the control message carried by a whole message, or `None` when it is not one (or is shorter than
    /// its kind's fields).
    pub fn decode(message: &[u8]) -> Option<Control> {
        if message.len() < 19 || message[14..18] != HELLO_MAGIC {
            return None;
        }
        if u64::from_be_bytes(message[0..8].try_into().ok()?) != HELLO_SEQ {
            return None;
        }
        let b = &message[19..];
        let u64_at = |i: usize| -> Option<u64> {
            Some(u64::from_be_bytes(b.get(i..i + 8)?.try_into().ok()?))
        };
        let u32_at = |i: usize| -> Option<u32> {
            Some(u32::from_be_bytes(b.get(i..i + 4)?.try_into().ok()?))
        };
        let nonce_at = |i: usize| -> Option<Nonce> { b.get(i..i + NONCE_LEN)?.try_into().ok() };
        match message[18] {
            3 => Some(Control::CountsRequest),
            4 => Some(Control::Counts {
                messages: u64_at(0)?,
                bytes: u64_at(8)?,
            }),
            5 => Some(Control::ReverseRequest {
                size: u32::try_from(u64_at(0)?).ok()?,
                duration: std::time::Duration::from_nanos(u64_at(8)?),
                // A version 1 request (48 bytes) carries no cookie; all zeros means "none" as well.
                cookie: nonce_at(16).filter(|c| c.iter().any(|&x| x != 0)),
            }),
            6 => Some(Control::ReverseEnd {
                messages: u64_at(0)?,
                bytes: u64_at(8)?,
            }),
            7 => Some(Control::Challenge {
                nonce: nonce_at(0)?,
            }),
            8 => Some(Control::Auth {
                server_nonce: nonce_at(0)?,
                client_nonce: nonce_at(16)?,
                features: Feature(u32_at(32)?),
                proof: b.get(36..36 + PROOF_LEN)?.try_into().ok()?,
            }),
            9 => Some(Control::ReverseGrant {
                cookie: nonce_at(0)?,
                duration: std::time::Duration::from_nanos(u64_at(16)?),
            }),
            10 => Some(Control::ReverseBusy {
                running: u32_at(0)?,
                limit: u32_at(4)?,
            }),
            11 => Some(Control::Refused {
                reason: match *b.first()? {
                    1 => Some(Refusal::BadProof),
                    2 => Some(Refusal::KeyRequired),
                    3 => Some(Refusal::BadCookie),
                    _ => None,
                },
            }),
            _ => None,
        }
    }
}

fn duration_ns(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Shortest replay request: the header and the two fields of [`ReplayRequest`].
pub const REPLAY_MIN_LEN: usize = 30;
/// Largest answer a server sends to one replay request (16 MiB); a client splits larger captured responses
/// into several requests.
pub const MAX_REPLAY_ANSWER: u64 = 16 * 1024 * 1024;
/// Longest server delay a replay request may ask for.
pub const MAX_REPLAY_DELAY: std::time::Duration = std::time::Duration::from_secs(10);

/// The payload of a replay request: a data message (flags `CLIENT | PONG_REQUEST | REPLAY`, at least
/// [`REPLAY_MIN_LEN`] bytes) asking the server to answer, after `delay`, with a message of `answer_len` bytes
/// (header included, same sequence number, flags without `CLIENT`, filler payload). Bytes 14..22 hold
/// `answer_len`, bytes 22..30 the delay in nanoseconds, both big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayRequest {
    /// Total length of the wanted answer, header included.
    pub answer_len: u64,
    /// How long the server waits, from having read the whole request, before it starts the answer.
    pub delay: std::time::Duration,
}

impl ReplayRequest {
    /// Writes the fields into a message of at least [`REPLAY_MIN_LEN`] bytes whose header is already written.
    pub fn write(&self, message: &mut [u8]) {
        message[14..22].copy_from_slice(&self.answer_len.to_be_bytes());
        message[22..30].copy_from_slice(&duration_ns(self.delay).to_be_bytes());
    }

    /// Reads and checks the fields of a replay request message.
    pub fn decode(message: &[u8]) -> Result<ReplayRequest, WireError> {
        if message.len() < REPLAY_MIN_LEN {
            return Err(WireError::Replay(format!(
                "replay request of {} bytes is shorter than {REPLAY_MIN_LEN}",
                message.len()
            )));
        }
        let answer_len = u64::from_be_bytes(message[14..22].try_into().expect("8 bytes"));
        let delay_ns = u64::from_be_bytes(message[22..30].try_into().expect("8 bytes"));
        if answer_len < HEADER_LEN as u64 || answer_len > MAX_REPLAY_ANSWER {
            return Err(WireError::Replay(format!(
                "replay answer of {answer_len} bytes is outside {HEADER_LEN}..={MAX_REPLAY_ANSWER}"
            )));
        }
        let delay = std::time::Duration::from_nanos(delay_ns);
        if delay > MAX_REPLAY_DELAY {
            return Err(WireError::Replay(format!(
                "replay delay of {delay:?} is longer than {MAX_REPLAY_DELAY:?}"
            )));
        }
        Ok(ReplayRequest { answer_len, delay })
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
        let h = Hello::request(Feature::ALL, [9; 16]);
        let msg = h.encode(Flags::CLIENT.with(Flags::PONG_REQUEST));
        assert_eq!(msg.len(), HELLO_LEN);
        assert_eq!(Hello::decode(&msg), Some(h));
        assert_eq!(Hello::decode(&msg[..20]), None);
        let mut other = msg;
        other[7] = 0;
        assert_eq!(Hello::decode(&other), None);
        let ack = Hello {
            kind: HelloKind::Ack,
            proof: [7; 32],
            ..h
        };
        assert_eq!(Hello::decode(&ack.encode(Flags(0))), Some(ack));
        // A version 1 hello (32 bytes, no nonce or proof) still decodes.
        let mut v1 = [0u8; 32];
        v1[..25].copy_from_slice(&msg[..25]);
        v1[13] = 32;
        v1[19..21].copy_from_slice(&1u16.to_be_bytes());
        let d = Hello::decode(&v1).unwrap();
        assert_eq!((d.version, d.nonce, d.features), (1, [0; 16], Feature::ALL));
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
                cookie: None,
            },
            Control::ReverseRequest {
                size: 60000,
                duration: std::time::Duration::from_secs(2),
                cookie: Some([3; 16]),
            },
            Control::ReverseEnd {
                messages: u64::MAX - 3,
                bytes: 1,
            },
            Control::ReverseGrant {
                cookie: [1; 16],
                duration: std::time::Duration::from_secs(30),
            },
            Control::ReverseBusy {
                running: 4,
                limit: 4,
            },
            Control::Challenge { nonce: [5; 16] },
            Control::Auth {
                server_nonce: [1; 16],
                client_nonce: [2; 16],
                features: Feature::MEASURE,
                proof: [4; 32],
            },
            Control::Refused {
                reason: Some(Refusal::BadProof),
            },
            Control::Refused { reason: None },
        ];
        for c in all {
            let m = c.encode(Flags::CLIENT.with(Flags::PONG_REQUEST));
            assert_eq!(m.len(), c.wire_len());
            assert!(m.len() <= MAX_CONTROL_LEN);
            let h = Header::parse(&m, MAX_MESSAGE_LEN).unwrap();
            assert_eq!((h.seq, h.len as usize), (HELLO_SEQ, c.wire_len()));
            assert_eq!(Control::decode(&m), Some(c));
            // A control message is not a hello, and a hello is not a control message.
            assert_eq!(Hello::decode(&m), None);
            // Cut to its kind byte, only the field-less counts request still decodes.
            assert_eq!(
                Control::decode(&m[..19]).is_some(),
                c == Control::CountsRequest
            );
        }
        // What a server sends before the client proved its address is never longer than what it answers.
        let hello = HELLO_LEN;
        assert!(Control::Challenge { nonce: [0; 16] }.wire_len() <= hello);
        let auth = Control::Auth {
            server_nonce: [0; 16],
            client_nonce: [0; 16],
            features: Feature(0),
            proof: [0; 32],
        }
        .wire_len();
        assert!(HELLO_LEN <= auth);
        let reverse = Control::ReverseRequest {
            size: 0,
            duration: std::time::Duration::ZERO,
            cookie: None,
        }
        .wire_len();
        assert!(CONTROL_LEN <= reverse);
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
            .encode(Flags(0)),
            want
        );
        // The attack of issue 12: a 35-byte version 1 reverse request (kind 5, 60000 bytes, 2 s) decodes as a
        // request without a cookie, which a server answers with a 48-byte grant at most.
        let mut old = vec![0xff; 8];
        old.extend_from_slice(&[0, 3, 0, 0, 0, 35]);
        old.extend_from_slice(b"RTRP");
        old.push(5);
        old.extend_from_slice(&60000u64.to_be_bytes());
        old.extend_from_slice(&2_000_000_000u64.to_be_bytes());
        assert_eq!(
            Control::decode(&old),
            Some(Control::ReverseRequest {
                size: 60000,
                duration: std::time::Duration::from_secs(2),
                cookie: None
            })
        );
        let hello = Hello::request(Feature::ALL, [0; 16]).encode(Flags::CLIENT);
        assert_eq!(Control::decode(&hello), None);
        let mut unknown = Control::CountsRequest.encode(Flags(0));
        unknown[18] = 99;
        assert_eq!(Control::decode(&unknown), None);
        // Arbitrary bytes behind a control header never panic, and what decodes re-encodes the same.
        let mut x: u32 = 99;
        for n in 0..4000usize {
            let mut m = Control::CountsRequest.encode(Flags(0));
            m.resize(n % 100, 0);
            for b in m.iter_mut().skip(18) {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                *b = (x >> 16) as u8 % 12;
            }
            if let Some(c) = Control::decode(&m) {
                assert_eq!(Control::decode(&c.encode(Flags(0))), Some(c));
            }
        }
    }

    #[test]
    fn replay_requests_are_checked() {
        let mut m = vec![0u8; REPLAY_MIN_LEN];
        Header {
            seq: 4,
            flags: Flags::CLIENT.with(Flags::PONG_REQUEST).with(Flags::REPLAY),
            len: REPLAY_MIN_LEN as u32,
        }
        .write(&mut m);
        let r = ReplayRequest {
            answer_len: 32768,
            delay: std::time::Duration::from_micros(250),
        };
        r.write(&mut m);
        assert_eq!(&m[14..22], &32768u64.to_be_bytes());
        assert_eq!(&m[22..30], &250_000u64.to_be_bytes());
        assert_eq!(ReplayRequest::decode(&m), Ok(r));
        assert!(ReplayRequest::decode(&m[..29]).is_err());
        for bad in [
            ReplayRequest {
                answer_len: 13,
                ..r
            },
            ReplayRequest {
                answer_len: MAX_REPLAY_ANSWER + 1,
                ..r
            },
            ReplayRequest {
                delay: MAX_REPLAY_DELAY + std::time::Duration::from_nanos(1),
                ..r
            },
        ] {
            bad.write(&mut m);
            assert!(ReplayRequest::decode(&m).is_err(), "{bad:?}");
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
