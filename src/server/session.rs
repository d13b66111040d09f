//! One TCP client's protocol, without I/O: message framing, answers, the key exchange and the extension
//! requests. The event loop ([`super::tcp`]) feeds it the bytes it reads and carries out what it returns.
//!
//! Memory: bytes are processed where they were read; only an incomplete message is kept between reads, and
//! its buffer grows by the bytes that arrived, never by what a header announced. Payloads of messages that
//! need no answer are counted from their header and skipped, never kept.
#![forbid(unsafe_code)]

use crate::wire::auth::{self, CookieJar, Nonce, Psk};
use crate::wire::sockperf::{
    self, Control, Feature, Flags, HEADER_LEN, Header, Hello, HelloKind, MAX_MESSAGE_LEN, Refusal,
    ReplayRequest,
};
use std::net::SocketAddr;
use std::time::Duration;

/// Why the server dropped a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropKind {
    /// Bytes that do not fit the message format.
    Protocol,
    /// A message started and not completed within the deadline (slowloris).
    Deadline,
    /// The client stopped reading its answers or stream.
    StoppedReading,
    /// Nothing received for the idle timeout.
    Idle,
    /// The server holds a key and the client did not start with the key exchange.
    KeyRequired,
    /// The client's proof of the key was wrong.
    BadProof,
    /// The client closed the connection in the middle of a message.
    ClosedMidMessage,
    /// Reading or writing failed.
    Io,
}

impl DropKind {
    /// A short name, e.g. for log lines and counters.
    pub fn name(self) -> &'static str {
        match self {
            DropKind::Protocol => "protocol error",
            DropKind::Deadline => "message deadline",
            DropKind::StoppedReading => "stopped reading",
            DropKind::Idle => "idle",
            DropKind::KeyRequired => "no key",
            DropKind::BadProof => "wrong key",
            DropKind::ClosedMidMessage => "closed mid-message",
            DropKind::Io => "i/o error",
        }
    }
}

/// Why the server dropped a client, with the details.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropReason {
    /// The kind, for counting and rate-limiting.
    pub kind: DropKind,
    /// What exactly happened.
    pub detail: String,
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.detail)
    }
}

impl DropReason {
    pub(crate) fn new(kind: DropKind, detail: impl Into<String>) -> Self {
        DropReason {
            kind,
            detail: detail.into(),
        }
    }
}

/// What the loop must do after a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Go on with the next message.
    Continue,
    /// Stop reading and stream messages of `size` bytes for `duration`, then the end marker.
    Reverse {
        /// Message size.
        size: u32,
        /// How long.
        duration: Duration,
    },
    /// Queue a synthetic answer (after the answers produced so far).
    Replay {
        /// The answer's header.
        header: Header,
        /// When to start it, after reading the request.
        delay: Duration,
    },
    /// Close the connection (after writing the answers produced so far).
    Drop(DropReason),
}

/// Settings and clocks the session needs for one message.
pub(crate) struct Context<'a> {
    /// The server's key, when it has one.
    pub psk: Option<&'a Psk>,
    /// Makes the server nonces.
    pub jar: &'a CookieJar,
    /// The client.
    pub peer: SocketAddr,
    /// Seconds since the server started (cookie clock).
    pub now_s: u32,
    /// When the bytes were read, nanoseconds of the realtime clock (server timestamps).
    pub recv_ns: u64,
    /// Grant [`Feature::REPLAY`].
    pub allow_replay: bool,
}

impl Context<'_> {
    fn supported(&self) -> Feature {
        let mut f = Feature::MEASURE;
        if self.allow_replay {
            f = f.with(Feature::REPLAY);
        }
        f
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No key: everything is answered.
    Open,
    /// The server holds a key and waits for the hello.
    NeedHello,
    /// The challenge went out.
    Challenged {
        server_nonce: Nonce,
        client_nonce: Nonce,
    },
    /// The client proved the key.
    Proven,
}

/// One TCP client.
#[derive(Debug)]
pub(crate) struct Session {
    phase: Phase,
    features: Feature,
    /// Data messages and bytes since the hello (for [`Control::Counts`]).
    counts: (u64, u64),
    /// Messages received in all.
    pub messages: u64,
    /// Bytes received in all.
    pub bytes: u64,
    /// Answers made.
    pub answered: u64,
    /// An incomplete message (never more than one), as it arrived.
    partial: Vec<u8>,
    /// Payload bytes of a message that needs no answer still to be skipped.
    skip: usize,
    /// Length of the last streamed message (one that needs no answer) since the last answered one: a client
    /// streaming large messages is read header by header, and their payloads are discarded uncopied.
    last_streamed: usize,
}

/// Streamed payloads at least this long are discarded in the kernel rather than copied ([`ReadHint`]).
pub(crate) const DISCARD_MIN: usize = 8 * 1024;

/// What the next read from a client should be, so that the payload of streamed messages is never copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadHint {
    /// This many payload bytes of a streamed message are still due and unused: discard them in the kernel
    /// (`recv` with `MSG_TRUNC`), then call [`Session::discarded`].
    Discard(usize),
    /// At a message boundary of a client that streams large messages: read one header's worth only.
    Header,
    /// Read as much as the buffer takes.
    Any,
}

impl Session {
    /// A session for a server with or without a key.
    pub fn new(keyed: bool) -> Self {
        Session {
            phase: if keyed { Phase::NeedHello } else { Phase::Open },
            features: Feature::default(),
            counts: (0, 0),
            messages: 0,
            bytes: 0,
            answered: 0,
            partial: Vec::new(),
            skip: 0,
            last_streamed: 0,
        }
    }

    /// How to read next from this client ([`ReadHint`]).
    pub fn read_hint(&self) -> ReadHint {
        if self.skip >= DISCARD_MIN {
            ReadHint::Discard(self.skip)
        } else if self.skip == 0 && self.partial.is_empty() && self.last_streamed >= DISCARD_MIN {
            ReadHint::Header
        } else {
            ReadHint::Any
        }
    }

    /// `n` payload bytes of the current streamed message were discarded unread (`n` at most the `skip` of
    /// [`ReadHint::Discard`]).
    pub fn discarded(&mut self, n: usize) {
        self.skip -= n.min(self.skip);
    }

    /// True while a message is incomplete (bytes kept, or payload still to skip).
    pub fn pending(&self) -> usize {
        self.partial.len() + self.skip
    }

    /// Bytes kept for an incomplete message (memory held for this client).
    #[cfg(test)]
    pub fn kept(&self) -> usize {
        self.partial.capacity()
    }

    fn proven(&self) -> bool {
        matches!(self.phase, Phase::Open | Phase::Proven)
    }

    /// Processes bytes just read. Answers go to `answers`. Returns how many bytes of `data` were consumed and
    /// the step that stopped processing ([`Step::Continue`] when all were consumed); the caller keeps the rest
    /// and feeds it again once it carried out the step.
    pub fn feed(
        &mut self,
        data: &mut [u8],
        cx: &Context<'_>,
        answers: &mut Vec<u8>,
    ) -> (usize, Step) {
        let mut pos = 0;
        loop {
            if self.skip > 0 {
                let k = self.skip.min(data.len() - pos);
                self.skip -= k;
                pos += k;
                if self.skip > 0 {
                    return (pos, Step::Continue);
                }
            }
            if self.partial.is_empty() {
                break;
            }
            // Complete the kept message with as many bytes as it still needs.
            let need = if self.partial.len() < HEADER_LEN {
                HEADER_LEN - self.partial.len()
            } else {
                header_len(&self.partial) - self.partial.len()
            };
            let take = need.min(data.len() - pos);
            self.partial.extend_from_slice(&data[pos..pos + take]);
            pos += take;
            if self.partial.len() < HEADER_LEN {
                return (pos, Step::Continue);
            }
            let header = match Header::parse(&self.partial, MAX_MESSAGE_LEN) {
                Ok(h) => h,
                Err(e) => return (pos, Step::Drop(protocol(e))),
            };
            if !header.wants_answer() {
                let have = self.partial.len();
                self.partial = Vec::new();
                if let Step::Drop(r) = self.streamed(&header) {
                    return (pos, Step::Drop(r));
                }
                self.skip = header.len as usize - have;
                continue;
            }
            if self.partial.len() < header.len as usize {
                if pos == data.len() {
                    return (pos, Step::Continue);
                }
                // The header just completed: take the rest of the message.
                continue;
            }
            let mut msg = std::mem::take(&mut self.partial);
            let step = self.message(&mut msg, &header, cx, answers);
            if step != Step::Continue {
                return (pos, step);
            }
        }
        while data.len() - pos >= HEADER_LEN {
            let header = match Header::parse(&data[pos..], MAX_MESSAGE_LEN) {
                Ok(h) => h,
                Err(e) => return (pos, Step::Drop(protocol(e))),
            };
            let len = header.len as usize;
            let have = data.len() - pos;
            if !header.wants_answer() {
                if let Step::Drop(r) = self.streamed(&header) {
                    return (pos, Step::Drop(r));
                }
                if have >= len {
                    pos += len;
                } else {
                    self.skip = len - have;
                    return (data.len(), Step::Continue);
                }
                continue;
            }
            if have < len {
                break;
            }
            let step = self.message(&mut data[pos..pos + len], &header, cx, answers);
            pos += len;
            if step != Step::Continue {
                return (pos, step);
            }
        }
        // An incomplete message: keep what arrived of it.
        self.partial.extend_from_slice(&data[pos..]);
        (data.len(), Step::Continue)
    }

    /// A message that needs no answer (streamed data, warm-up): counted from its header.
    fn streamed(&mut self, header: &Header) -> Step {
        if !self.proven() {
            return Step::Drop(DropReason::new(
                DropKind::KeyRequired,
                "sent data before proving the key (this server has --psk-file)",
            ));
        }
        self.messages += 1;
        self.counts.0 += 1;
        self.counts.1 += u64::from(header.len);
        self.last_streamed = header.len as usize;
        Step::Continue
    }

    /// A whole message that wants an answer.
    fn message(
        &mut self,
        msg: &mut [u8],
        header: &Header,
        cx: &Context<'_>,
        answers: &mut Vec<u8>,
    ) -> Step {
        let before = answers.len();
        self.last_streamed = 0;
        let step = self.answer(msg, header, cx, answers);
        if answers.len() > before || matches!(step, Step::Replay { .. }) {
            self.answered += 1;
        }
        step
    }

    fn answer(
        &mut self,
        msg: &mut [u8],
        header: &Header,
        cx: &Context<'_>,
        answers: &mut Vec<u8>,
    ) -> Step {
        self.messages += 1;
        if header.seq == sockperf::HELLO_SEQ {
            if let Some(hello) = Hello::decode(msg).filter(|h| h.kind == HelloKind::Request) {
                return self.hello(msg.len(), &hello, cx, answers);
            }
            if let Some(control) = Control::decode(msg) {
                match (self.phase, control) {
                    (
                        Phase::Challenged {
                            server_nonce,
                            client_nonce,
                        },
                        Control::Auth {
                            server_nonce: sn,
                            client_nonce: cn,
                            features,
                            proof,
                        },
                    ) => {
                        let psk = cx.psk.expect("a challenge is only sent with a key");
                        if sn != server_nonce
                            || cn != client_nonce
                            || !auth::verify_client_proof(psk, &sn, &cn, features.0, &proof)
                        {
                            answers.extend_from_slice(
                                &Control::Refused {
                                    reason: Some(Refusal::BadProof),
                                }
                                .encode(Flags(0)),
                            );
                            return Step::Drop(DropReason::new(
                                DropKind::BadProof,
                                "its proof of the key was wrong (another key on the client?)",
                            ));
                        }
                        self.phase = Phase::Proven;
                        self.features = Feature(features.0 & cx.supported().0).with(Feature::PSK);
                        self.counts = (0, 0);
                        let ack = Hello {
                            kind: HelloKind::Ack,
                            version: sockperf::EXTENSION_VERSION,
                            features: self.features,
                            nonce: cn,
                            proof: auth::server_proof(psk, &cn, &sn, self.features.0),
                        };
                        answers.extend_from_slice(&ack.encode(Flags::PONG_REQUEST));
                        return Step::Continue;
                    }
                    (Phase::NeedHello | Phase::Challenged { .. }, _) => {
                        return self.refuse_unproven(answers);
                    }
                    (_, Control::CountsRequest) => {
                        answers.extend_from_slice(
                            &Control::Counts {
                                messages: self.counts.0,
                                bytes: self.counts.1,
                            }
                            .encode(Flags::PONG_REQUEST),
                        );
                        return Step::Continue;
                    }
                    (_, Control::ReverseRequest { size, duration, .. }) => {
                        return Step::Reverse { size, duration };
                    }
                    // Anything else a client has no reason to send: echoed like any message.
                    _ => {}
                }
            }
        }
        if !self.proven() {
            // Not a word to a peer that did not even try the key exchange (a sockperf client).
            return Step::Drop(DropReason::new(
                DropKind::KeyRequired,
                "sent a message without the key exchange (this server has --psk-file)",
            ));
        }
        if header.seq != sockperf::HELLO_SEQ {
            self.counts.0 += 1;
            self.counts.1 += u64::from(header.len);
        }
        if header.flags.contains(Flags::REPLAY) && self.features.contains(Feature::REPLAY) {
            return match ReplayRequest::decode(msg) {
                Ok(r) => Step::Replay {
                    header: Header {
                        seq: header.seq,
                        flags: header.flags.without(Flags::CLIENT),
                        len: r.answer_len as u32,
                    },
                    delay: r.delay,
                },
                Err(e) => Step::Drop(protocol(e)),
            };
        }
        answer_in_place(msg, header, cx.recv_ns);
        answers.extend_from_slice(msg);
        Step::Continue
    }

    fn hello(
        &mut self,
        len: usize,
        hello: &Hello,
        cx: &Context<'_>,
        answers: &mut Vec<u8>,
    ) -> Step {
        self.counts = (0, 0);
        if self.phase == Phase::Open {
            self.features = Feature(hello.features.0 & cx.supported().0);
            let ack = Hello {
                kind: HelloKind::Ack,
                version: sockperf::EXTENSION_VERSION,
                features: self.features,
                nonce: hello.nonce,
                proof: [0; auth::PROOF_LEN],
            }
            .encode(Flags::PONG_REQUEST);
            // As long as the request: a version 1 client reads 32 bytes.
            answers.extend_from_slice(&ack[..len.min(ack.len())]);
            return Step::Continue;
        }
        if len < sockperf::HELLO_LEN {
            // A version 1 client cannot do the key exchange.
            return self.refuse_unproven(answers);
        }
        let server_nonce = cx.jar.make(cx.peer, cx.now_s);
        self.phase = Phase::Challenged {
            server_nonce,
            client_nonce: hello.nonce,
        };
        answers.extend_from_slice(
            &Control::Challenge {
                nonce: server_nonce,
            }
            .encode(Flags::PONG_REQUEST),
        );
        Step::Continue
    }

    fn refuse_unproven(&mut self, answers: &mut Vec<u8>) -> Step {
        answers.extend_from_slice(
            &Control::Refused {
                reason: Some(Refusal::KeyRequired),
            }
            .encode(Flags(0)),
        );
        Step::Drop(DropReason::new(
            DropKind::KeyRequired,
            "did not prove the key before sending (this server has --psk-file)",
        ))
    }
}

/// Feeds `data` to a fresh session in pieces of `cut` bytes, as the event loop does, carrying out each step's
/// effect on the input; checks that no more than one message is ever kept. For fuzzing.
#[doc(hidden)]
pub fn fuzz_feed(data: &[u8], keyed: bool, cut: usize) {
    let jar = CookieJar::new();
    let psk = Psk::from_bytes(b"a key for fuzzing, long enough").expect("a valid key");
    let cx = Context {
        psk: keyed.then_some(&psk),
        jar: &jar,
        peer: SocketAddr::from(([192, 0, 2, 1], 9)),
        now_s: 5,
        recv_ns: 0,
        allow_replay: true,
    };
    let mut s = Session::new(keyed);
    let mut answers = Vec::new();
    for chunk in data.chunks(cut.max(1)) {
        let mut chunk = chunk.to_vec();
        let mut off = 0;
        while off < chunk.len() {
            let (used, step) = s.feed(&mut chunk[off..], &cx, &mut answers);
            off += used;
            assert!(s.partial.len() <= MAX_MESSAGE_LEN);
            if let Step::Drop(_) = step {
                return;
            }
            if step == Step::Continue {
                assert_eq!(off, chunk.len());
            }
        }
        answers.clear();
    }
}

fn header_len(partial: &[u8]) -> usize {
    u32::from_be_bytes(partial[10..14].try_into().expect("4 bytes")) as usize
}

fn protocol(e: impl std::fmt::Display) -> DropReason {
    DropReason::new(DropKind::Protocol, format!("protocol error: {e}"))
}

/// Nanoseconds of the realtime clock (server timestamps are wall-clock times).
pub(crate) fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Rewrites a request in place into its answer: `CLIENT` cleared, server timestamps filled in when asked.
pub(crate) fn answer_in_place(msg: &mut [u8], header: &Header, recv_ns: u64) {
    let flags = header.flags.without(Flags::CLIENT);
    msg[8..10].copy_from_slice(&flags.0.to_be_bytes());
    if header.flags.contains(Flags::RT_TIMESTAMPS) {
        sockperf::write_server_timestamps(msg, recv_ns, realtime_ns());
    }
}

#[cfg(test)]
mod tests;
