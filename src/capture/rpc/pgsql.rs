//! PostgreSQL frontend/backend protocol v3: a simple query (`Q`), an extended-query batch (Parse/Bind/
//! Describe/Execute up to Sync), a function call or the startup exchange is one request; its response runs
//! to the next ReadyForQuery (`Z`). Pipelined Syncs each wait for their own ReadyForQuery. The operation is
//! the first SQL keyword (SELECT, INSERT, ...), EXECUTE for a Bind/Execute of an already prepared statement.
#![forbid(unsafe_code)]

use super::{
    AnomalyKind, Dir, Frame, Out, Pdu, Protocol, Status, Transaction, be32, sql_verb, sql_verb8,
};
use std::borrow::Cow;
use std::collections::VecDeque;
use std::time::Duration;

/// Largest message accepted (larger is taken for garbage).
const MAX_MSG: u32 = 1 << 30;
const PROTO_V3: u32 = 196_608;
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
const CANCEL_REQUEST: u32 = 80_877_102;
/// Bytes of a query examined for its first keyword.
const SQL_PEEK: usize = 96;

/// One framed PostgreSQL message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgMsg {
    /// Message type byte (0 for the untyped startup-phase messages).
    pub kind: u8,
    /// For a startup-phase message: its code (protocol version, SSLRequest, CancelRequest).
    pub code: u32,
    /// For Query and Parse: the first keyword of the SQL.
    pub verb: Option<Cow<'static, str>>,
}

fn frontend_type(t: u8) -> bool {
    matches!(
        t,
        b'Q' | b'P'
            | b'B'
            | b'E'
            | b'D'
            | b'C'
            | b'H'
            | b'S'
            | b'X'
            | b'F'
            | b'p'
            | b'd'
            | b'c'
            | b'f'
    )
}

/// [`backend_type`] of every byte value: one load per message on the response fast path.
const BACKEND_TYPES: [bool; 256] = {
    let mut m = [false; 256];
    let mut t = 0;
    while t < 256 {
        m[t] = backend_type(t as u8);
        t += 1;
    }
    m
};

const fn backend_type(t: u8) -> bool {
    matches!(
        t,
        b'R' | b'K'
            | b'S'
            | b'Z'
            | b'T'
            | b'D'
            | b'C'
            | b'E'
            | b'N'
            | b'A'
            | b'1'
            | b'2'
            | b'3'
            | b'I'
            | b'n'
            | b's'
            | b't'
            | b'G'
            | b'H'
            | b'W'
            | b'd'
            | b'c'
            | b'V'
            | b'v'
    )
}

/// PostgreSQL pairing for one connection.
#[derive(Debug, Default)]
pub struct Pgsql {
    /// The client asked for TLS/GSS encryption: the server answers with one byte.
    await_ssl_answer: bool,
    /// The rest of the connection is encrypted.
    encrypted: bool,
    /// Extended-query batch being built: first ts, first seq, verb.
    batch: Option<(Duration, u32, Option<Cow<'static, str>>)>,
    /// Requests sent, waiting for ReadyForQuery: op, first ts, end ts, seq.
    queue: VecDeque<(Cow<'static, str>, Duration, Duration, u32)>,
    /// The response to the front request: first ts, error seen.
    resp: Option<(Duration, bool)>,
    /// A request was answered: the session is past its startup, where encryption is negotiated.
    answered: bool,
    /// The first 8 bytes of the last simple Query and its verb, when those bytes decide it ([`sql_verb8`]):
    /// a connection repeats a handful of statements.
    last_verb: Option<(u64, &'static str)>,
}

impl Pgsql {
    /// A matcher state for one connection.
    pub fn new() -> Self {
        Self::default()
    }

    /// [`Protocol::take_complete`] of the request direction: the whole simple Query messages at the start of
    /// `data`, queued as `frame` and `on_pdu` would (a Query is queued the same inside an extended-query
    /// batch, which it leaves as it is).
    // Inlined into `Framed::on_data`'s fast path: one stack frame per segment, not two (-61 instructions
    // per request with take_responses, on a pgbench -S capture).
    #[inline(always)]
    fn take_queries(&mut self, ts: Duration, seq: u32, data: &[u8]) -> usize {
        let mut at = 0;
        while self.queue.len() < 1 << 16
            && let Some(&[b'Q', a, b, c, d]) = data.get(at..at + 5)
        {
            let len = u32::from_be_bytes([a, b, c, d]);
            if !(4..=MAX_MSG).contains(&len) {
                break;
            }
            let end = at + 1 + len as usize;
            let Some(body) = data.get(at + 5..end) else {
                break;
            };
            let verb = self.query_verb(body);
            self.queue
                .push_back((verb, ts, ts, seq.wrapping_add(at as u32)));
            at = end;
        }
        at
    }

    /// [`sql_verb`] of a Query's text, from [`Self::last_verb`] when its first 8 bytes are the last one's.
    #[inline(always)]
    fn query_verb(&mut self, body: &[u8]) -> Cow<'static, str> {
        if let (Some((key, verb)), Some(b)) = (self.last_verb, body.get(..8))
            && u64::from_le_bytes(b.try_into().expect("8 bytes")) == key
        {
            return Cow::Borrowed(verb);
        }
        match sql_verb8(body) {
            Some((key, verb)) => {
                self.last_verb = Some((key, verb));
                Cow::Borrowed(verb)
            }
            None => sql_verb(&body[..body.len().min(SQL_PEEK)]),
        }
    }

    /// A ReadyForQuery at `end` ends the response that began at `first`: it answers the front request waiting,
    /// if any (`take_responses` and `on_pdu` alike).
    #[inline]
    fn answer(&mut self, first: Duration, end: Duration, error: bool, out: &mut Out) {
        if let Some((op, req_ts, end_ts, req_seq)) = self.queue.pop_front() {
            self.answered = true;
            out.push_with(|| {
                Transaction::new(
                    op,
                    (req_ts, end_ts),
                    (first, end),
                    Some(req_seq),
                    if error { Status::Error } else { Status::Ok },
                )
            });
        }
    }

    /// [`Protocol::take_complete`] of the response direction, with a request waiting: the whole backend
    /// messages at the start of `data`, up to the ReadyForQuery that answers the last request waiting, as
    /// `on_pdu` takes them (the response to the front request starts at its first message, an ErrorResponse
    /// marks it failed, a ReadyForQuery ends it).
    // Inlined into `Framed::on_data`'s fast path: one stack frame per segment, not two (-61 instructions
    // per request with take_responses, on a pgbench -S capture).
    #[inline(always)]
    fn take_responses(&mut self, ts: Duration, data: &[u8], out: &mut Out) -> usize {
        let mut at = 0;
        // The response in progress, in locals: written back once.
        let mut open = self.resp.is_some();
        let (mut first, mut error) = self.resp.unwrap_or((ts, false));
        while let Some(&[t, a, b, c, d]) = data.get(at..at + 5) {
            let len = u32::from_be_bytes([a, b, c, d]);
            if !BACKEND_TYPES[t as usize] || !(4..=MAX_MSG).contains(&len) {
                break;
            }
            let end = at + 1 + len as usize;
            if end > data.len() {
                break;
            }
            at = end;
            open = true;
            if t == b'E' {
                error = true;
            } else if t == b'Z' {
                self.answer(first, ts, error, out);
                (open, first, error) = (false, ts, false);
                if self.queue.is_empty() {
                    break;
                }
            }
        }
        self.resp = open.then_some((first, error));
        at
    }
}

impl Protocol for Pgsql {
    type Info = PgMsg;

    fn frame(&mut self, dir: Dir, buf: &[u8], at_end: bool) -> Frame<PgMsg> {
        if self.encrypted {
            return Frame::Bad;
        }
        let Some(&t) = buf.first() else {
            return Frame::Need;
        };
        if dir == Dir::Response && self.await_ssl_answer && matches!(t, b'S' | b'N' | b'G') {
            self.await_ssl_answer = false;
            if t != b'N' {
                self.encrypted = true;
            }
            return Frame::Msg {
                len: 1,
                info: PgMsg {
                    kind: t,
                    code: 0,
                    verb: None,
                },
            };
        }
        if dir == Dir::Request && t == 0 {
            // Untyped startup-phase message: length, code.
            let (Some(len), Some(code)) = (be32(buf, 0), be32(buf, 4)) else {
                return if at_end { Frame::Bad } else { Frame::Need };
            };
            if !(8..=10_000).contains(&len)
                || !matches!(
                    code,
                    PROTO_V3 | SSL_REQUEST | GSSENC_REQUEST | CANCEL_REQUEST
                ) && code >> 16 != 3
            {
                return Frame::Bad;
            }
            if matches!(code, SSL_REQUEST | GSSENC_REQUEST) {
                self.await_ssl_answer = true;
            }
            return Frame::Msg {
                len: len as u64,
                info: PgMsg {
                    kind: 0,
                    code,
                    verb: None,
                },
            };
        }
        let ok_type = match dir {
            Dir::Request => frontend_type(t),
            Dir::Response => backend_type(t),
        };
        if !ok_type {
            return Frame::Bad;
        }
        let Some(len) = be32(buf, 1) else {
            return if at_end { Frame::Bad } else { Frame::Need };
        };
        if !(4..=MAX_MSG).contains(&len) {
            return Frame::Bad;
        }
        let total = 1 + len as usize;
        let verb = if dir == Dir::Request && matches!(t, b'Q' | b'P') {
            let want = total.min(5 + SQL_PEEK + 64);
            if buf.len() < want && !at_end {
                return Frame::Need;
            }
            let body = &buf[5..buf.len().min(total)];
            let sql = if t == b'P' {
                // statement name (C string), then the query
                match body.iter().position(|&c| c == 0) {
                    Some(z) => &body[z + 1..],
                    None => &[][..],
                }
            } else {
                body
            };
            Some(sql_verb(&sql[..sql.len().min(SQL_PEEK)]))
        } else {
            None
        };
        Frame::Msg {
            len: total as u64,
            info: PgMsg {
                kind: t,
                code: 0,
                verb,
            },
        }
    }

    fn looks_like_start(&self, dir: Dir, seg: &[u8]) -> bool {
        let Some(&t) = seg.first() else {
            return false;
        };
        let ok_type = match dir {
            Dir::Request => frontend_type(t),
            Dir::Response => backend_type(t),
        };
        ok_type && be32(seg, 1).is_some_and(|l| (4..=MAX_MSG).contains(&l))
    }

    #[inline(always)]
    fn take_complete(
        &mut self,
        dir: Dir,
        ts: Duration,
        seq: u32,
        data: &[u8],
        out: &mut Out,
    ) -> usize {
        // Outside the startup and TLS-negotiation phases, and not when on_pdu would first trim a full queue.
        if self.encrypted || self.await_ssl_answer || self.queue.len() >= 1 << 16 {
            return 0;
        }
        if dir == Dir::Request {
            return self.take_queries(ts, seq, data);
        }
        // Without a request waiting, on_pdu reports a ReadyForQuery as unpaired: left to it.
        if self.queue.is_empty() {
            return 0;
        }
        self.take_responses(ts, data, out)
    }

    fn tls_ruled_out(&self) -> bool {
        self.answered
    }

    fn on_pdu(&mut self, pdu: Pdu<PgMsg>, out: &mut Out) {
        let m = pdu.info;
        if self.queue.len() >= 1 << 16 {
            // A one-sided capture: keep memory bounded.
            self.queue.pop_front();
            out.anomaly(pdu.first_ts, AnomalyKind::NoResponse);
        }
        match pdu.dir {
            Dir::Request => match m.kind {
                0 if m.code == PROTO_V3 || m.code >> 16 == 3 => {
                    self.queue
                        .push_back(("STARTUP".into(), pdu.first_ts, pdu.last_ts, pdu.seq));
                }
                b'Q' => self.queue.push_back((
                    m.verb.unwrap_or_else(|| "QUERY".into()),
                    pdu.first_ts,
                    pdu.last_ts,
                    pdu.seq,
                )),
                b'F' => self.queue.push_back((
                    "FUNCTION CALL".into(),
                    pdu.first_ts,
                    pdu.last_ts,
                    pdu.seq,
                )),
                b'P' | b'B' | b'D' | b'E' | b'C' | b'H' => {
                    let b = self.batch.get_or_insert((pdu.first_ts, pdu.seq, None));
                    if b.2.is_none() {
                        b.2 = m.verb;
                    }
                }
                b'S' => {
                    let (ts, seq, verb) =
                        self.batch.take().unwrap_or((pdu.first_ts, pdu.seq, None));
                    self.queue.push_back((
                        verb.unwrap_or_else(|| "EXECUTE".into()),
                        ts,
                        pdu.last_ts,
                        seq,
                    ));
                }
                _ => {}
            },
            Dir::Response => {
                if self.queue.is_empty() {
                    if m.kind == b'Z' {
                        out.anomaly(pdu.first_ts, AnomalyKind::ResponseWithoutRequest);
                    }
                    return;
                }
                let r = self.resp.get_or_insert((pdu.first_ts, false));
                if m.kind == b'E' {
                    r.1 = true;
                }
                if m.kind != b'Z' {
                    return;
                }
                let (first, error) = self.resp.take().unwrap_or((pdu.first_ts, false));
                self.answer(first, pdu.last_ts, error, out);
            }
        }
    }

    fn on_lost(&mut self, _dir: Dir, ts: Duration, out: &mut Out) {
        // Requests and ReadyForQuery pair by order: after a loss they cannot be paired.
        out.unanswered(ts, self.queue.drain(..).count());
        self.batch = None;
        self.resp = None;
    }

    fn on_close(&mut self, ts: Duration, out: &mut Out) {
        out.unanswered(ts, self.queue.drain(..).count());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_type_table_is_backend_type() {
        for t in 0..=255u8 {
            assert_eq!(BACKEND_TYPES[t as usize], backend_type(t), "{t}");
        }
    }
}
