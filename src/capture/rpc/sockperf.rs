//! sockperf 3.x (and `roundtrip ping` / `roundtrip server`) ping-pong messages: the 14-byte header of
//! [`crate::wire::sockperf`] frames each message (over UDP one datagram is one message). A request is a message
//! with the client flag that asks for an answer (not warm-up); its response is the server's message with the
//! same sequence number. Warm-up messages and messages that ask for no answer are not requests. The operation is
//! `ping` for data messages, `replay` for replay requests and `control` for roundtrip's hello and control
//! messages (sequence number 2^64-1).
#![forbid(unsafe_code)]

use super::{AnomalyKind, Dir, Frame, Out, Pdu, Protocol, Status, Transaction};
use crate::wire::sockperf::{Flags, HEADER_LEN, HELLO_SEQ, Header, MAX_MESSAGE_LEN};
use std::collections::VecDeque;
use std::time::Duration;

/// Requests waiting for their answer, at most; the oldest is reported unanswered beyond.
pub const MAX_PENDING: usize = 4096;

/// Flag bits a sockperf or roundtrip peer sets.
const KNOWN_FLAGS: u16 = 0x1 | 0x2 | 0x4 | 0x4000 | 0x8000;

/// One framed message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Msg {
    /// Sequence number.
    pub seq: u64,
    /// Flags.
    pub flags: u16,
}

/// True when `b` starts like a client's sockperf message: a valid header with the client flag and only known
/// flags, whose length is at most what the segment holds (or the segment is a full one of a long message).
pub fn looks_like_request(b: &[u8]) -> bool {
    let Ok(h) = Header::parse(b, MAX_MESSAGE_LEN) else {
        return false;
    };
    h.flags.0 & !KNOWN_FLAGS == 0
        && h.flags.contains(Flags::CLIENT)
        && (h.len as usize <= b.len() || b.len() >= 1000)
}

fn op(m: &Msg) -> &'static str {
    if m.seq == HELLO_SEQ {
        "control"
    } else if m.flags & Flags::REPLAY.0 != 0 {
        "replay"
    } else {
        "ping"
    }
}

#[derive(Debug)]
struct Pending {
    msg: Msg,
    first_ts: Duration,
    last_ts: Duration,
    seq: u32,
}

/// sockperf pairing state for one connection (or UDP address pair).
#[derive(Debug, Default)]
pub struct Sockperf {
    pending: VecDeque<Pending>,
    /// TCP (request_seq is kept) or UDP.
    udp: bool,
}

impl Sockperf {
    /// A matcher state for one connection; `udp` when each datagram is one message.
    pub fn new(udp: bool) -> Self {
        Sockperf {
            pending: VecDeque::new(),
            udp,
        }
    }
}

impl Protocol for Sockperf {
    type Info = Msg;

    fn frame(&mut self, _dir: Dir, buf: &[u8], at_end: bool) -> Frame<Msg> {
        if buf.len() < HEADER_LEN {
            return if at_end { Frame::Bad } else { Frame::Need };
        }
        match Header::parse(buf, MAX_MESSAGE_LEN) {
            Ok(h) if h.flags.0 & !KNOWN_FLAGS == 0 => Frame::Msg {
                len: h.len as u64,
                info: Msg {
                    seq: h.seq,
                    flags: h.flags.0,
                },
            },
            _ => Frame::Bad,
        }
    }

    fn looks_like_start(&self, _dir: Dir, seg: &[u8]) -> bool {
        Header::parse(seg, MAX_MESSAGE_LEN).is_ok_and(|h| h.flags.0 & !KNOWN_FLAGS == 0)
    }

    fn on_pdu(&mut self, pdu: Pdu<Msg>, out: &mut Out) {
        let f = Flags(pdu.info.flags);
        match pdu.dir {
            Dir::Request => {
                if !f.contains(Flags::CLIENT)
                    || !f.contains(Flags::PONG_REQUEST)
                    || f.contains(Flags::WARMUP)
                {
                    return;
                }
                if self.pending.len() >= MAX_PENDING {
                    self.pending.pop_front();
                    out.anomaly(pdu.first_ts, AnomalyKind::NoResponse);
                }
                self.pending.push_back(Pending {
                    msg: pdu.info,
                    first_ts: pdu.first_ts,
                    last_ts: pdu.last_ts,
                    seq: pdu.seq,
                });
            }
            Dir::Response => {
                // An answer to a warm-up message (a sockperf server echoes its flags) is no response.
                if f.contains(Flags::CLIENT) || f.contains(Flags::WARMUP) {
                    return;
                }
                let Some(i) = self.pending.iter().position(|p| p.msg.seq == pdu.info.seq) else {
                    out.anomaly(pdu.first_ts, AnomalyKind::ResponseWithoutRequest);
                    return;
                };
                // Over TCP answers come in order: requests skipped were not answered.
                if !self.udp {
                    for _ in 0..i {
                        self.pending.pop_front();
                        out.anomaly(pdu.first_ts, AnomalyKind::NoResponse);
                    }
                }
                let Some(p) = self.pending.remove(if self.udp { i } else { 0 }) else {
                    return;
                };
                out.push(Transaction::new(
                    op(&p.msg).into(),
                    (p.first_ts, p.last_ts),
                    (pdu.first_ts, pdu.last_ts),
                    (!self.udp).then_some(p.seq),
                    Status::Ok,
                ));
            }
        }
    }

    fn on_lost(&mut self, _dir: Dir, _ts: Duration, _out: &mut Out) {}

    fn on_close(&mut self, ts: Duration, out: &mut Out) {
        out.unanswered(ts, self.pending.drain(..).count());
    }
}
