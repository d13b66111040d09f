//! Oracle TNS: request/response turns of TNS packets. A request is the client's packets since the server last
//! spoke; its response is the server's packets up to the client's next packet (or the end of the connection).
//! The operation is CONNECT for the connect exchange, else named after the TTC function of the first DATA
//! packet of the turn.
//!
//! TNS packets: length (2 bytes, or 4 once a version >= 315 was accepted), checksum, type, flags, header
//! checksum.
#![forbid(unsafe_code)]

use super::{AnomalyKind, Dir, Frame, Out, Pdu, Protocol, Status, Transaction, be16, be32};
use std::time::Duration;

const CONNECT: u8 = 1;
const ACCEPT: u8 = 2;
const REFUSE: u8 = 4;
const DATA: u8 = 6;
const MAX_PACKET: u32 = 4 << 20;

/// One framed TNS packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TnsPacket {
    /// Packet type (1 CONNECT, 2 ACCEPT, 4 REFUSE, 5 REDIRECT, 6 DATA, 11 RESEND, 12 MARKER, ...).
    pub kind: u8,
    /// For DATA packets: TTC function code and sub-code, when captured.
    pub function: Option<(u8, u8)>,
}

/// The name of a turn's operation.
pub fn op_name(p: &TnsPacket) -> String {
    match (p.kind, p.function) {
        (CONNECT, _) => "CONNECT".into(),
        (DATA, Some((0x03, sub))) => match sub {
            0x5e => "EXECUTE (OALL8)".into(),
            0x05 => "FETCH".into(),
            0x0e => "COMMIT".into(),
            0x0f => "ROLLBACK".into(),
            0x09 => "LOGOFF".into(),
            0x73 | 0x76 => "AUTH".into(),
            s => format!("CALL 0x{s:02x}"),
        },
        (DATA, Some((0x11, _))) => "PIGGYBACK CALL".into(),
        (DATA, Some((0x01, _))) => "SET PROTOCOL".into(),
        (DATA, Some((0x02, _))) => "SET DATATYPES".into(),
        (DATA, Some((f, _))) => format!("DATA 0x{f:02x}"),
        (DATA, None) => "DATA".into(),
        (k, _) => format!("TNS type {k}"),
    }
}

/// TNS turn tracking for one connection.
#[derive(Debug, Default)]
pub struct Tns {
    large_length: bool,
    /// The client's turn: first ts, last ts, seq, first packet.
    req: Option<(Duration, Duration, u32, TnsPacket)>,
    /// The server's answer so far: first ts, last ts, refused.
    resp: Option<(Duration, Duration, bool)>,
    orphan_reported: bool,
}

impl Tns {
    /// A matcher state for one connection.
    pub fn new() -> Self {
        Self::default()
    }

    fn emit(&mut self, out: &mut Out) {
        if let (Some((ts, end_ts, seq, p)), Some((first, last, refused))) =
            (self.req.take(), self.resp.take())
        {
            out.push(Transaction::new(
                op_name(&p).into(),
                (ts, end_ts),
                (first, last),
                Some(seq),
                if refused { Status::Error } else { Status::Ok },
            ));
        }
    }
}

impl Protocol for Tns {
    type Info = TnsPacket;

    fn frame(&mut self, _dir: Dir, buf: &[u8], at_end: bool) -> Frame<TnsPacket> {
        if buf.len() < 8 {
            return if at_end { Frame::Bad } else { Frame::Need };
        }
        let short = be16(buf, 0).unwrap_or(0) as u32;
        let len = if self.large_length || short == 0 {
            be32(buf, 0).unwrap_or(0)
        } else {
            short
        };
        let kind = buf[4];
        if !(8..=MAX_PACKET).contains(&len) || !(1..=15).contains(&kind) || kind == 3 {
            return Frame::Bad;
        }
        if kind == DATA && buf.len() < (len as usize).min(12) && !at_end {
            return Frame::Need;
        }
        if kind == ACCEPT
            && let Some(v) = be16(buf, 8)
        {
            self.large_length = v >= 315;
        }
        let function = if kind == DATA && len >= 12 && buf.len() >= 12 {
            Some((buf[10], buf[11]))
        } else {
            None
        };
        Frame::Msg {
            len: len as u64,
            info: TnsPacket { kind, function },
        }
    }

    fn looks_like_start(&self, _dir: Dir, seg: &[u8]) -> bool {
        seg.len() >= 8 && (1..=15).contains(&seg[4]) && seg[4] != 3 && be16(seg, 6) == Some(0)
    }

    fn on_pdu(&mut self, pdu: Pdu<TnsPacket>, out: &mut Out) {
        match pdu.dir {
            Dir::Request => {
                if self.resp.is_some() {
                    self.emit(out);
                }
                match &mut self.req {
                    Some(r) => r.1 = pdu.last_ts,
                    None => self.req = Some((pdu.first_ts, pdu.last_ts, pdu.seq, pdu.info)),
                }
            }
            Dir::Response => {
                if self.req.is_none() {
                    if !self.orphan_reported {
                        self.orphan_reported = true;
                        out.anomaly(pdu.first_ts, AnomalyKind::ResponseWithoutRequest);
                    }
                    return;
                }
                let refused = pdu.info.kind == REFUSE;
                match &mut self.resp {
                    Some(r) => {
                        r.1 = pdu.last_ts;
                        r.2 |= refused;
                    }
                    None => self.resp = Some((pdu.first_ts, pdu.last_ts, refused)),
                }
            }
        }
    }

    fn on_lost(&mut self, _dir: Dir, _ts: Duration, _out: &mut Out) {}

    fn on_close(&mut self, ts: Duration, out: &mut Out) {
        if self.resp.is_some() {
            self.emit(out);
        } else if self.req.take().is_some() {
            out.anomaly(ts, AnomalyKind::NoResponse);
        }
    }
}
