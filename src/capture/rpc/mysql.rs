//! MySQL / MariaDB client protocol: a command (a client packet with sequence id 0) and its response: an OK or
//! ERR packet, or a result set (column count, column definitions, rows) up to its final EOF/OK packet, with
//! further result sets when the server flags more results. The login exchange is one CONNECT request. The
//! operation is the first SQL keyword for COM_QUERY, the command name otherwise.
//!
//! MySQL never pipelines: a new command also ends a response the parser could not follow to its end.
#![forbid(unsafe_code)]

use super::{AnomalyKind, Dir, Frame, Out, Pdu, Protocol, Status, Transaction, sql_verb};
use std::time::Duration;

const CLIENT_SSL: u32 = 0x0800;
const CLIENT_DEPRECATE_EOF: u32 = 0x0100_0000;
const MORE_RESULTS: u16 = 0x0008;

const COMMANDS: [&str; 32] = [
    "SLEEP",
    "QUIT",
    "INIT_DB",
    "QUERY",
    "FIELD_LIST",
    "CREATE_DB",
    "DROP_DB",
    "REFRESH",
    "SHUTDOWN",
    "STATISTICS",
    "PROCESS_INFO",
    "CONNECT",
    "PROCESS_KILL",
    "DEBUG",
    "PING",
    "TIME",
    "DELAYED_INSERT",
    "CHANGE_USER",
    "BINLOG_DUMP",
    "TABLE_DUMP",
    "CONNECT_OUT",
    "REGISTER_SLAVE",
    "STMT_PREPARE",
    "STMT_EXECUTE",
    "STMT_SEND_LONG_DATA",
    "STMT_CLOSE",
    "STMT_RESET",
    "SET_OPTION",
    "STMT_FETCH",
    "DAEMON",
    "BINLOG_DUMP_GTID",
    "RESET_CONNECTION",
];

/// One framed MySQL packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MyPacket {
    /// Sequence id.
    pub seq: u8,
    /// Payload length.
    pub plen: u32,
    /// First payload byte, when captured.
    pub first: Option<u8>,
    /// Up to 12 payload bytes after the first (little-endian fields of OK/EOF/prepare-OK packets).
    pub head: [u8; 12],
    /// For COM_QUERY and COM_STMT_PREPARE: the first SQL keyword.
    pub verb: Option<String>,
    /// For the client's login packet: its capability flags.
    pub caps: Option<u32>,
}

/// A length-encoded integer at the start of `b` and its size.
fn lenenc(b: &[u8]) -> Option<(u64, usize)> {
    match *b.first()? {
        x @ 0..=0xfa => Some((x as u64, 1)),
        0xfc => Some((u16::from_le_bytes([*b.get(1)?, *b.get(2)?]) as u64, 3)),
        0xfd => Some((
            u32::from_le_bytes([*b.get(1)?, *b.get(2)?, *b.get(3)?, 0]) as u64,
            4,
        )),
        0xfe => {
            let s = b.get(1..9)?;
            Some((u64::from_le_bytes(s.try_into().ok()?), 9))
        }
        _ => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resp {
    /// Waiting for the first packet of the response.
    Start,
    /// Column definitions still to come, then an EOF unless DEPRECATE_EOF.
    Columns(u64),
    /// After the column definitions: an EOF may come (old protocol) before the rows.
    MaybeEof,
    /// Rows until EOF/OK.
    Rows,
    /// Prepare-OK: definitions (params then columns, each group followed by EOF in the old protocol).
    Defs(u64),
    /// Done; anything else before the next command is ignored.
    Done,
}

#[derive(Debug)]
struct Cmd {
    op: String,
    code: u8,
    ts: Duration,
    end_ts: Duration,
    seq: u32,
    resp_first: Option<Duration>,
    resp_last: Duration,
    state: Resp,
    error: bool,
}

impl Cmd {
    /// A command `op` (`code`) whose request came from `ts` to `end_ts` at `seq`, no response yet.
    fn new(op: String, code: u8, ts: Duration, end_ts: Duration, seq: u32) -> Cmd {
        Cmd {
            op,
            code,
            ts,
            end_ts,
            seq,
            resp_first: None,
            resp_last: end_ts,
            state: Resp::Start,
            error: false,
        }
    }
}

/// MySQL pairing for one connection.
#[derive(Debug, Default)]
pub struct Mysql {
    /// Sequence id the next packet should carry (None until the first packet).
    next_seq: Option<u8>,
    greeting_seen: bool,
    deprecate_eof: Option<bool>,
    encrypted: bool,
    login: bool,
    cmd: Option<Cmd>,
    /// The last command's response was complete: stray packets until the next command are ignored.
    after_done: bool,
}

impl Mysql {
    /// A matcher state for one connection.
    pub fn new() -> Self {
        Self::default()
    }

    fn complete(&mut self, out: &mut Out) {
        let Some(c) = self.cmd.take() else {
            return;
        };
        self.after_done = true;
        let Some(first) = c.resp_first else {
            if c.code != 1 && c.code != 0x19 && c.code != 0x18 {
                out.anomaly(c.ts, AnomalyKind::NoResponse);
            }
            return;
        };
        out.push(Transaction::new(
            c.op.into(),
            (c.ts, c.end_ts),
            (first, c.resp_last),
            Some(c.seq),
            if c.error { Status::Error } else { Status::Ok },
        ));
    }
}

fn u16le(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

impl Protocol for Mysql {
    type Info = MyPacket;

    fn frame(&mut self, dir: Dir, buf: &[u8], at_end: bool) -> Frame<MyPacket> {
        if self.encrypted {
            return Frame::Bad;
        }
        if buf.len() < 5 {
            return if at_end { Frame::Bad } else { Frame::Need };
        }
        let plen = u32::from_le_bytes([buf[0], buf[1], buf[2], 0]);
        let seq = buf[3];
        let first = buf[4];
        let total = 4 + plen as usize;
        if plen == 0 {
            return Frame::Bad;
        }
        // Sequence ids must follow on from the previous packet, except a client's new command (seq 0).
        let new_command = dir == Dir::Request && seq == 0;
        if new_command && first as usize >= COMMANDS.len() {
            return Frame::Bad;
        }
        if !new_command
            && self.next_seq.is_none()
            && !(dir == Dir::Response && seq == 0 && first == 0x0a)
        {
            return Frame::Bad;
        }
        if !new_command {
            match self.next_seq {
                Some(n)
                    if n != seq && !(dir == Dir::Response && seq == 0 && !self.greeting_seen) =>
                {
                    return Frame::Bad;
                }
                _ => {}
            }
        }
        let want = match (dir, new_command) {
            (Dir::Request, true) if matches!(first, 0x03 | 0x16) => total.min(5 + 96),
            (Dir::Request, false) => total.min(8),
            _ => total.min(4 + 13),
        };
        if buf.len() < want && !at_end {
            return Frame::Need;
        }
        let avail = &buf[4..buf.len().min(total)];
        let mut head = [0u8; 12];
        let n = avail.len().saturating_sub(1).min(12);
        head[..n].copy_from_slice(&avail[1..1 + n]);
        let verb = (new_command && matches!(first, 0x03 | 0x16))
            .then(|| sql_verb(&avail[1..]).into_owned());
        let caps = (dir == Dir::Request && !new_command && avail.len() >= 4)
            .then(|| u32::from_le_bytes([avail[0], avail[1], avail[2], avail[3]]));
        self.next_seq = Some(seq.wrapping_add(1));
        if dir == Dir::Response && seq == 0 {
            self.greeting_seen = true;
        }
        Frame::Msg {
            len: total as u64,
            info: MyPacket {
                seq,
                plen,
                first: Some(first),
                head,
                verb,
                caps,
            },
        }
    }

    fn looks_like_start(&self, dir: Dir, seg: &[u8]) -> bool {
        if seg.len() < 5 || u32::from_le_bytes([seg[0], seg[1], seg[2], 0]) == 0 {
            return false;
        }
        match dir {
            // A new command is a safe place to start again.
            Dir::Request => seg[3] == 0 && (seg[4] as usize) < COMMANDS.len(),
            // The first packet of the response to a command seen since.
            Dir::Response => self.cmd.is_some() && self.next_seq == Some(seg[3]),
        }
    }

    fn on_pdu(&mut self, pdu: Pdu<MyPacket>, out: &mut Out) {
        let p = pdu.info;
        let first = p.first.unwrap_or(0);
        match pdu.dir {
            Dir::Request => {
                if p.seq == 0 {
                    // A new command ends whatever came before.
                    self.complete(out);
                    let op = match (first, p.verb) {
                        (0x03, Some(v)) => v,
                        (0x16, Some(v)) => format!("PREPARE {v}"),
                        (c, _) => COMMANDS
                            .get(c as usize)
                            .copied()
                            .unwrap_or("UNKNOWN")
                            .to_string(),
                    };
                    self.login = false;
                    self.cmd = Some(Cmd::new(op, first, pdu.first_ts, pdu.last_ts, pdu.seq));
                    return;
                }
                if p.seq == 1 && self.greeting_seen && self.cmd.is_none() {
                    // The login packet answering the greeting.
                    let caps = p.caps.unwrap_or(0);
                    self.deprecate_eof = Some(caps & CLIENT_DEPRECATE_EOF != 0);
                    if caps & CLIENT_SSL != 0 && p.plen == 32 {
                        self.encrypted = true;
                        return;
                    }
                    self.login = true;
                    self.cmd = Some(Cmd::new(
                        "CONNECT".into(),
                        0xff,
                        pdu.first_ts,
                        pdu.last_ts,
                        pdu.seq,
                    ));
                    return;
                }
                // More of the current request (auth continuation, LOAD DATA content).
                if let Some(c) = &mut self.cmd {
                    c.end_ts = pdu.last_ts;
                    if self.login {
                        c.state = Resp::Start;
                    }
                }
            }
            Dir::Response => {
                let deprecate = self.deprecate_eof.unwrap_or(false);
                let Some(c) = &mut self.cmd else {
                    if p.seq == 0 && first == 0x0a {
                        return; // server greeting
                    }
                    if p.seq != 0 && !self.after_done {
                        self.after_done = true;
                        out.anomaly(pdu.first_ts, AnomalyKind::ResponseWithoutRequest);
                    }
                    return;
                };
                if c.state == Resp::Done {
                    return;
                }
                c.resp_first.get_or_insert(pdu.first_ts);
                c.resp_last = pdu.last_ts;
                let small_fe = first == 0xfe && p.plen < 0xff_ffff;
                let eof_status = || -> u16 {
                    // EOF: warnings(2) status(2); OK: affected, insert id (lenenc), status(2)
                    if first == 0xfe && p.plen < 9 {
                        return u16le(&p.head, 2);
                    }
                    let Some((_, a)) = lenenc(&p.head) else {
                        return 0;
                    };
                    let Some((_, b)) = p.head.get(a..).and_then(lenenc) else {
                        return 0;
                    };
                    if a + b + 2 <= p.head.len() {
                        u16le(&p.head, a + b)
                    } else {
                        0
                    }
                };
                let mut done = false;
                match c.state {
                    Resp::Start => match first {
                        0xff => {
                            c.error = true;
                            done = true;
                        }
                        0x00 if c.code == 0x16 => {
                            // prepare OK: stmt id(4) columns(2) params(2)
                            let cols = u16le(&p.head, 4) as u64;
                            let params = u16le(&p.head, 6) as u64;
                            let eofs = if deprecate {
                                0
                            } else {
                                (cols > 0) as u64 + (params > 0) as u64
                            };
                            let n = cols + params + eofs;
                            if n == 0 {
                                done = true;
                            } else {
                                c.state = Resp::Defs(n);
                            }
                        }
                        0x00 => done = eof_status() & MORE_RESULTS == 0,
                        0xfe if self.login => {} // auth switch: the client answers
                        0x01 if self.login => {} // more auth data
                        0xfe if p.plen < 9 => done = eof_status() & MORE_RESULTS == 0,
                        0xfb => {} // LOCAL INFILE request: the client sends the file, then OK/ERR
                        _ if c.code == 0x09 => done = true, // statistics string
                        _ if c.code == 0x04 => c.state = Resp::Rows, // field list: defs until EOF
                        _ => match lenenc(&[first]).or_else(|| lenenc(&p.head)) {
                            Some((n, _)) if n > 0 => c.state = Resp::Columns(n),
                            _ => done = true,
                        },
                    },
                    Resp::Columns(n) => {
                        c.state = if n > 1 {
                            Resp::Columns(n - 1)
                        } else if deprecate {
                            Resp::Rows
                        } else {
                            Resp::MaybeEof
                        };
                    }
                    Resp::MaybeEof => {
                        if small_fe && p.plen < 9 {
                            c.state = Resp::Rows;
                        } else if first == 0xff {
                            c.error = true;
                            done = true;
                        } else {
                            c.state = Resp::Rows;
                        }
                    }
                    Resp::Rows => {
                        if first == 0xff {
                            c.error = true;
                            done = true;
                        } else if small_fe {
                            if eof_status() & MORE_RESULTS != 0 {
                                c.state = Resp::Start;
                            } else {
                                done = true;
                            }
                        }
                    }
                    Resp::Defs(n) => {
                        if n > 1 {
                            c.state = Resp::Defs(n - 1);
                        } else {
                            done = true;
                        }
                    }
                    Resp::Done => {}
                }
                if done {
                    c.state = Resp::Done;
                    self.login = false;
                    self.complete(out);
                }
            }
        }
    }

    fn on_lost(&mut self, _dir: Dir, _ts: Duration, _out: &mut Out) {
        self.next_seq = None;
        if let Some(c) = &mut self.cmd {
            // The end of this response cannot be told any more; the next command ends it.
            c.state = Resp::Rows;
        }
    }

    fn on_close(&mut self, _ts: Duration, out: &mut Out) {
        self.complete(out);
    }
}
