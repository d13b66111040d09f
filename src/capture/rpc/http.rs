//! HTTP/1.0 and HTTP/1.1: requests and responses paired in order, with keep-alive and pipelining. Bodies are
//! framed by Content-Length, chunked transfer coding, or the end of the connection. The operation is the
//! request method.
//!
//! When the snap length cuts a header block, the response is still counted, from the request to the packet
//! that started the response (its end cannot be told).
#![forbid(unsafe_code)]

use super::{AnomalyKind, Dir, Frame, Out, Pdu, Protocol, Status, Transaction};
use std::collections::VecDeque;
use std::time::Duration;

const METHODS: [&str; 9] = [
    "GET", "POST", "PUT", "HEAD", "DELETE", "OPTIONS", "PATCH", "CONNECT", "TRACE",
];

/// One framed HTTP unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpTok {
    /// A request head: method; `complete` when the message (head and body) ends with this unit.
    Request {
        /// Method.
        method: String,
        /// The whole request ends with this unit.
        complete: bool,
    },
    /// A response head with its status code.
    Response {
        /// Status code.
        status: u16,
        /// The whole response ends with this unit.
        complete: bool,
        /// The head was cut: the end of the response cannot be told.
        cut: bool,
    },
    /// A part of a body; `complete` when the message ends with it.
    Body {
        /// The message ends with this unit.
        complete: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Mode {
    #[default]
    Head,
    Chunk,
    UntilClose,
}

fn find_head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

fn starts_with_method(b: &[u8]) -> Option<&'static str> {
    METHODS
        .iter()
        .find(|m| b.len() > m.len() && b.starts_with(m.as_bytes()) && b[m.len()] == b' ')
        .copied()
}

fn header_value<'a>(head: &'a [u8], name: &str) -> Option<&'a [u8]> {
    for line in head.split(|&c| c == b'\n').skip(1) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(colon) = line.iter().position(|&c| c == b':')
            && line[..colon].eq_ignore_ascii_case(name.as_bytes())
        {
            let v = &line[colon + 1..];
            let start = v
                .iter()
                .position(|c| !c.is_ascii_whitespace())
                .unwrap_or(v.len());
            let end = v
                .iter()
                .rposition(|c| !c.is_ascii_whitespace())
                .map_or(start, |e| e + 1);
            return Some(&v[start..end.max(start)]);
        }
    }
    None
}

fn parse_status(b: &[u8]) -> Option<u16> {
    if !b.starts_with(b"HTTP/1.") || b.len() < 12 {
        return None;
    }
    let code = &b[9..12];
    if b[8] != b' ' || !code.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(code.iter().fold(0u16, |a, d| a * 10 + (d - b'0') as u16))
}

/// HTTP pairing for one connection.
#[derive(Debug, Default)]
pub struct Http {
    mode: [Mode; 2],
    /// Methods of requests whose responses the framer has not seen yet (HEAD responses have no body).
    methods: VecDeque<String>,
    /// Requests waiting: method, first ts, end ts, seq.
    queue: VecDeque<(String, Duration, Duration, u32, bool)>,
    /// The response in progress: first ts, status.
    resp: Option<(Duration, u16)>,
    /// Time of the last byte of a response that ends with the connection.
    close_end: Option<Duration>,
}

impl Http {
    /// A matcher state for one connection.
    pub fn new() -> Self {
        Self::default()
    }

    /// True when `b` starts with an HTTP/1 request line (a known method, a space).
    pub fn new_request_start(b: &[u8]) -> bool {
        starts_with_method(b).is_some()
    }

    fn finish(&mut self, end: Duration, out: &mut Out) {
        let Some((first, status)) = self.resp.take() else {
            return;
        };
        if (100..200).contains(&status) && status != 101 {
            return;
        }
        let Some((method, ts, end_ts, seq, _)) = self.queue.pop_front() else {
            out.anomaly(first, AnomalyKind::ResponseWithoutRequest);
            return;
        };
        out.push(Transaction::new(
            method.into(),
            (ts, end_ts),
            (first, end),
            Some(seq),
            if status >= 400 {
                Status::Error
            } else {
                Status::Ok
            },
        ));
    }
}

impl Protocol for Http {
    type Info = HttpTok;

    fn frame(&mut self, dir: Dir, buf: &[u8], at_end: bool) -> Frame<HttpTok> {
        let d = dir.index();
        match self.mode[d] {
            Mode::UntilClose => {
                return Frame::Msg {
                    len: buf.len() as u64,
                    info: HttpTok::Body { complete: false },
                };
            }
            Mode::Chunk => {
                let Some(nl) = buf.windows(2).position(|w| w == b"\r\n") else {
                    return if at_end || buf.len() > 1024 {
                        Frame::Bad
                    } else {
                        Frame::Need
                    };
                };
                let hex = buf[..nl].split(|&c| c == b';').next().unwrap_or(b"");
                let hex = std::str::from_utf8(hex).ok().map(str::trim);
                let Some(size) = hex.and_then(|h| u64::from_str_radix(h, 16).ok()) else {
                    return Frame::Bad;
                };
                if size > 0 {
                    return Frame::Msg {
                        len: (nl + 2) as u64 + size + 2,
                        info: HttpTok::Body { complete: false },
                    };
                }
                // Last chunk, then optional trailers, then an empty line.
                let rest = &buf[nl + 2..];
                let len = if rest.starts_with(b"\r\n") {
                    nl + 4
                } else if let Some(e) = find_head_end(rest) {
                    nl + 2 + e
                } else if at_end || rest.len() > 16384 {
                    buf.len()
                } else {
                    return Frame::Need;
                };
                self.mode[d] = Mode::Head;
                return Frame::Msg {
                    len: len as u64,
                    info: HttpTok::Body { complete: true },
                };
            }
            Mode::Head => {}
        }
        // A message head.
        let is_request = dir == Dir::Request;
        let method = if is_request {
            match starts_with_method(buf) {
                Some(m) => Some(m),
                None if buf.len() < 8
                    && !at_end
                    && METHODS.iter().any(|m| m.as_bytes().starts_with(buf)) =>
                {
                    return Frame::Need;
                }
                None => return Frame::Bad,
            }
        } else {
            if buf.len() < 12 {
                return if at_end || !b"HTTP/1.".starts_with(&buf[..buf.len().min(7)]) {
                    Frame::Bad
                } else {
                    Frame::Need
                };
            }
            if parse_status(buf).is_none() {
                return Frame::Bad;
            }
            None
        };
        let Some(head_len) = find_head_end(buf) else {
            if buf.len() >= super::MAX_HEADER || at_end {
                // Cut by the snap length (or absurdly long): count it, stop framing this direction.
                return match (method, parse_status(buf)) {
                    (Some(m), _) => {
                        self.methods.push_back(m.to_string());
                        Frame::Msg {
                            len: buf.len() as u64,
                            info: HttpTok::Request {
                                method: m.to_string(),
                                complete: true,
                            },
                        }
                    }
                    (None, Some(status)) => {
                        self.methods.pop_front();
                        Frame::Msg {
                            len: buf.len() as u64,
                            info: HttpTok::Response {
                                status,
                                complete: true,
                                cut: true,
                            },
                        }
                    }
                    _ => Frame::Bad,
                };
            }
            return Frame::Need;
        };
        let head = &buf[..head_len];
        let chunked = header_value(head, "transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().windows(7).any(|w| w == b"chunked"));
        let clen = header_value(head, "content-length")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(m) = method {
            self.methods.push_back(m.to_string());
            let (len, complete) = if chunked {
                self.mode[d] = Mode::Chunk;
                (head_len as u64, false)
            } else {
                (head_len as u64 + clen.unwrap_or(0), true)
            };
            return Frame::Msg {
                len,
                info: HttpTok::Request {
                    method: m.to_string(),
                    complete,
                },
            };
        }
        let status = parse_status(buf).unwrap_or(0);
        let interim = (100..200).contains(&status);
        let head_method = if interim {
            None
        } else {
            self.methods.pop_front()
        };
        let no_body =
            interim || status == 204 || status == 304 || head_method.as_deref() == Some("HEAD");
        let (len, complete) = if no_body {
            (head_len as u64, true)
        } else if chunked {
            self.mode[d] = Mode::Chunk;
            (head_len as u64, false)
        } else if let Some(n) = clen {
            (head_len as u64 + n, true)
        } else {
            self.mode[d] = Mode::UntilClose;
            (head_len as u64, false)
        };
        Frame::Msg {
            len,
            info: HttpTok::Response {
                status,
                complete,
                cut: false,
            },
        }
    }

    fn looks_like_start(&self, dir: Dir, seg: &[u8]) -> bool {
        match dir {
            Dir::Request => starts_with_method(seg).is_some(),
            Dir::Response => parse_status(seg).is_some(),
        }
    }

    fn on_pdu(&mut self, pdu: Pdu<HttpTok>, out: &mut Out) {
        match pdu.info {
            HttpTok::Request { method, complete } => {
                if pdu.dir != Dir::Request {
                    return;
                }
                if self.queue.len() >= 1 << 16 {
                    self.queue.pop_front();
                    self.methods.pop_front();
                    out.anomaly(pdu.first_ts, AnomalyKind::NoResponse);
                }
                self.queue
                    .push_back((method, pdu.first_ts, pdu.last_ts, pdu.seq, complete));
            }
            HttpTok::Response {
                status,
                complete,
                cut,
            } => {
                if pdu.dir != Dir::Response {
                    return;
                }
                self.resp = Some((pdu.first_ts, status));
                self.close_end = Some(pdu.last_ts);
                if complete {
                    let end = if cut { pdu.first_ts } else { pdu.last_ts };
                    self.finish(end, out);
                }
            }
            HttpTok::Body { complete } => match pdu.dir {
                Dir::Request => {
                    if let Some(last) = self.queue.back_mut() {
                        last.2 = pdu.last_ts;
                        last.4 |= complete;
                    }
                }
                Dir::Response => {
                    if complete {
                        self.finish(pdu.last_ts, out);
                    } else if self.mode[1] == Mode::UntilClose {
                        // the response ends when the connection does: remember its latest byte
                        self.close_end = Some(pdu.last_ts);
                    }
                }
            },
        }
    }

    fn on_lost(&mut self, dir: Dir, ts: Duration, out: &mut Out) {
        self.mode[dir.index()] = Mode::Head;
        if dir == Dir::Response {
            if self.resp.is_some() {
                // the response started; its end is unknown: count it to its first byte
                let first = self.resp.map(|r| r.0).unwrap_or(ts);
                self.finish(first, out);
            }
        } else {
            self.methods.clear();
        }
    }

    fn on_close(&mut self, ts: Duration, out: &mut Out) {
        if self.mode[1] == Mode::UntilClose || self.resp.is_some() {
            let end = self.close_end.take().unwrap_or(ts);
            self.finish(end, out);
        }
        out.unanswered(ts, self.queue.drain(..).count());
    }
}
