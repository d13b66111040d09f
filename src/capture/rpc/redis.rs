//! Redis RESP2 and RESP3: commands (arrays of bulk strings, or inline commands) and their replies, paired in
//! order, so pipelined commands each get their own latency. RESP3 attributes are skipped (they precede a
//! reply) and push messages (`>`) are not replies.
//!
//! Each RESP element (a line, or a bulk string's line and body) is one framed unit; a nesting stack per
//! direction tells when a top-level value ends. A whole top-level value in one segment (the common case) is
//! taken at once ([`Protocol::take_complete`]).
#![forbid(unsafe_code)]

use super::{AnomalyKind, Dir, Frame, Out, Pdu, Protocol, Status, Transaction};
use std::borrow::Cow;
use std::collections::VecDeque;
use std::time::Duration;

/// Longest element count or bulk length accepted (larger is taken for garbage).
const MAX_LEN: i64 = 512 * 1024 * 1024;
/// Requests waiting for replies beyond this are dropped (oldest first) and reported.
const MAX_PENDING: usize = 1 << 16;

/// One framed RESP element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RespToken {
    /// This element starts a top-level value.
    pub top_start: bool,
    /// This element ends a top-level value (a command or a reply).
    pub top_end: bool,
    /// Command name, when this element is the first bulk string of a top-level array or an inline command.
    pub command: Option<Cow<'static, str>>,
    /// A top-level error reply (`-`, `!`).
    pub error: bool,
    /// A RESP3 push (`>`): not a reply.
    pub push: bool,
}

#[derive(Debug, Default, Clone)]
struct Nest {
    /// Remaining elements per open aggregate, and whether it is an attribute.
    stack: Vec<(i64, bool)>,
    /// The current top-level value is a push.
    push: bool,
    /// The next element is the first of a top-level array (its command name).
    want_name: bool,
    error: bool,
}

fn find_crlf(b: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(p) = b[from..].iter().position(|&c| c == b'\r') {
        let at = from + p;
        if b.get(at + 1) == Some(&b'\n') {
            return Some(at);
        }
        if at + 1 >= b.len() {
            return None;
        }
        from = at + 1;
    }
    None
}

fn parse_int(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 18 {
        return None;
    }
    let (neg, digits) = match s[0] {
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: i64 = 0;
    for &d in digits {
        v = v * 10 + (d - b'0') as i64;
    }
    Some(if neg { -v } else { v })
}

/// Common command names, so that counting them allocates nothing.
const COMMON: [&str; 24] = [
    "GET", "SET", "PING", "INCR", "DECR", "DEL", "EXISTS", "EXPIRE", "MGET", "MSET", "HGET",
    "HSET", "HGETALL", "LPUSH", "RPUSH", "LPOP", "RPOP", "LRANGE", "SADD", "SPOP", "ZADD",
    "ZRANGE", "AUTH", "HELLO",
];

/// [`COMMON`] as little-endian numbers of their bytes, padded with zeros to 8 (each at most 8 long).
const COMMON_WORDS: [u64; COMMON.len()] = super::words8(COMMON);

/// The upper-cased command name.
fn command_name(raw: &[u8]) -> Cow<'static, str> {
    // A common name (all capitals, at most 8 bytes) is matched as one number: `raw` matches it ignoring
    // ASCII case exactly when `raw` upper-cased is it.
    if raw.len() <= 8 {
        const ONES: u64 = 0x0101_0101_0101_0101;
        let mut b = [0u8; 8];
        b[..raw.len()].copy_from_slice(raw);
        let x = u64::from_le_bytes(b);
        // Bytewise: the ASCII small letters (below 0x80, from 'a' to 'z') lose bit 5; no sum carries over.
        let low = x & (0x7f * ONES);
        let at_least_a = low + (0x80 - b'a' as u64) * ONES;
        let past_z = low + (0x80 - b'z' as u64 - 1) * ONES;
        let small = at_least_a & !past_z & !x & (0x80 * ONES);
        let w = x - (small >> 2);
        if let Some(k) = COMMON_WORDS.iter().position(|&c| c == w)
            && COMMON[k].len() == raw.len()
        {
            return Cow::Borrowed(COMMON[k]);
        }
    }
    Cow::Owned(String::from_utf8_lossy(raw).to_ascii_uppercase())
}

/// The integer of a RESP line starting at `buf[0]` (optional minus sign, then digits) when it ends with CRLF
/// right after its digits, and the offset past that CRLF. The same as [`find_crlf`] then [`parse_int`] when
/// they succeed; when this answers None, they answer None too (the line holds a byte that is not a digit, or
/// is empty, longer than 18 bytes or not ended yet).
#[inline]
fn int_line(buf: &[u8]) -> Option<(i64, usize)> {
    let neg = buf.first() == Some(&b'-');
    let mut i = neg as usize;
    let mut v: i64 = 0;
    while let Some(&c) = buf.get(i) {
        if !c.is_ascii_digit() {
            break;
        }
        v = v.wrapping_mul(10).wrapping_add((c - b'0') as i64);
        i += 1;
    }
    if i == neg as usize || i > 18 || buf.get(i..i + 2) != Some(b"\r\n") {
        return None;
    }
    Some((if neg { -v } else { v }, i + 2))
}

/// Fast path: a whole top-level value present in `buf`. Returns its length, the command name (first bulk string
/// of a top-level array, when `want_name`) and its type byte; None when it is incomplete or unusual (the
/// element-by-element path then decides).
fn whole_value(buf: &[u8], want_name: bool) -> Option<(usize, Option<Cow<'static, str>>, u8)> {
    let top = *buf.first()?;
    let mut pos = 0usize;
    let mut pending: i64 = 1;
    let mut index = 0u32;
    let mut name = None;
    while pending > 0 {
        let t = *buf.get(pos)?;
        // Lengths and integers: read as the digits go (what the line search and parse_int below conclude).
        if matches!(t, b':' | b'$' | b'*') {
            let (n, used) = int_line(&buf[pos + 1..])?;
            let after = pos + 1 + used;
            pending -= 1;
            match t {
                b':' => pos = after,
                b'$' => {
                    if n == -1 {
                        pos = after;
                    } else if (0..=MAX_LEN).contains(&n) {
                        let end = after + n as usize;
                        if end + 2 > buf.len() {
                            return None;
                        }
                        if want_name && index == 1 && top == b'*' {
                            name = Some(command_name(&buf[after..end]));
                        }
                        pos = end + 2;
                    } else {
                        return None;
                    }
                }
                _ => {
                    if n > 0 {
                        if n > MAX_LEN {
                            return None;
                        }
                        pending += n;
                    } else if n < -1 {
                        return None;
                    }
                    pos = after;
                }
            }
            index += 1;
            continue;
        }
        let window = &buf[pos..buf.len().min(pos + 4096)];
        let rel = find_crlf(window)?;
        if rel == 0 {
            return None;
        }
        let line = &window[1..rel];
        let after = pos + rel + 2;
        pending -= 1;
        match t {
            b'+' | b'-' | b',' | b'#' | b'(' => pos = after,
            b':' => {
                parse_int(line)?;
                pos = after;
            }
            b'$' | b'!' | b'=' => {
                let n = parse_int(line)?;
                if n == -1 && t == b'$' {
                    pos = after;
                } else if (0..=MAX_LEN).contains(&n) {
                    let end = after + n as usize;
                    if end + 2 > buf.len() {
                        return None;
                    }
                    if want_name && index == 1 && top == b'*' && t == b'$' {
                        name = Some(command_name(&buf[after..end]));
                    }
                    pos = end + 2;
                } else {
                    return None;
                }
            }
            b'*' | b'~' | b'>' | b'%' => {
                let n = parse_int(line)?;
                if n > 0 {
                    if n > MAX_LEN {
                        return None;
                    }
                    pending += if t == b'%' { 2 * n } else { n };
                } else if n < -1 || (n == -1 && t != b'*') {
                    return None;
                }
                pos = after;
            }
            _ => return None,
        }
        index += 1;
    }
    Some((pos, name, top))
}

fn is_inline_start(b: &[u8]) -> bool {
    b.first().is_some_and(|c| c.is_ascii_alphabetic())
}

/// Redis pairing for one connection.
#[derive(Debug, Default)]
pub struct Redis {
    nest: [Nest; 2],
    queue: VecDeque<(Duration, Duration, u32, Cow<'static, str>)>,
    reply_first: Option<Duration>,
    /// A command was answered in clear text (Redis has no STARTTLS: TLS starts at the first byte or never).
    answered: bool,
}

impl Redis {
    /// A matcher state for one connection.
    pub fn new() -> Self {
        Self::default()
    }

    /// Commands waiting for a reply.
    pub fn open_requests(&self) -> usize {
        self.queue.len()
    }

    /// A top-level reply that began at `first` ended at `end`: it answers the front command waiting, or is
    /// reported as a reply without a request (`take_complete` and `on_pdu` alike).
    #[inline]
    fn answer(&mut self, first: Duration, end: Duration, error: bool, out: &mut Out) {
        let Some((req_ts, end_ts, req_seq, op)) = self.queue.pop_front() else {
            out.anomaly(first, AnomalyKind::ResponseWithoutRequest);
            return;
        };
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

impl Protocol for Redis {
    type Info = RespToken;

    fn frame(&mut self, dir: Dir, buf: &[u8], at_end: bool) -> Frame<RespToken> {
        let d = dir.index();
        let top = self.nest[d].stack.is_empty();
        let Some(&t) = buf.first() else {
            return Frame::Need;
        };
        // Inline command (requests only, at top level).
        if top && dir == Dir::Request && t != b'*' {
            if !is_inline_start(buf) {
                return Frame::Bad;
            }
            let Some(end) = find_crlf(buf).or_else(|| buf.iter().position(|&c| c == b'\n')) else {
                if buf.len() > 4096
                    || !buf
                        .iter()
                        .take(64)
                        .all(|c| c.is_ascii_graphic() || *c == b' ')
                {
                    return Frame::Bad;
                }
                return if at_end { Frame::Bad } else { Frame::Need };
            };
            let line = &buf[..end];
            if !line
                .iter()
                .all(|c| c.is_ascii_graphic() || *c == b' ' || *c == b'\t')
            {
                return Frame::Bad;
            }
            let name = line.split(|&c| c == b' ').next().unwrap_or(b"");
            let len = if buf.get(end) == Some(&b'\r') {
                end + 2
            } else {
                end + 1
            };
            return Frame::Msg {
                len: len as u64,
                info: RespToken {
                    top_start: true,
                    top_end: true,
                    command: Some(command_name(name)),
                    error: false,
                    push: false,
                },
            };
        }
        // The common case: the whole command or reply is in the buffer.
        if top
            && (t == b'*' || (dir == Dir::Response && t != b'|' && t != b'_'))
            && let Some((len, command, ty)) = whole_value(buf, dir == Dir::Request)
        {
            return Frame::Msg {
                len: len as u64,
                info: RespToken {
                    top_start: true,
                    top_end: true,
                    command,
                    error: matches!(ty, b'-' | b'!'),
                    push: ty == b'>',
                },
            };
        }
        let Some(end) = find_crlf(&buf[..buf.len().min(1 << 16)]) else {
            if buf.len() >= 1 << 16 || (buf.len() > 24 && !matches!(t, b'+' | b'-' | b'!' | b'=')) {
                return Frame::Bad;
            }
            return if at_end { Frame::Bad } else { Frame::Need };
        };
        if end == 0 {
            return Frame::Bad; // an empty line where a type byte should be
        }
        let line = &buf[1..end];
        let line_len = end + 2;
        let nest = &self.nest[d];
        // (length of this element, aggregate count pushed)
        let (len, agg, attr): (u64, Option<i64>, bool) = match t {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {
                if t == b':' && parse_int(line).is_none() {
                    return Frame::Bad;
                }
                if t == b'_' && !line.is_empty() {
                    return Frame::Bad;
                }
                (line_len as u64, None, false)
            }
            b'$' | b'!' | b'=' => {
                let Some(n) = parse_int(line) else {
                    return Frame::Bad;
                };
                if n == -1 && t == b'$' {
                    (line_len as u64, None, false)
                } else if (0..=MAX_LEN).contains(&n) {
                    let total = line_len as u64 + n as u64 + 2;
                    if nest.want_name && n <= 64 && (buf.len() as u64) < total && !at_end {
                        return Frame::Need;
                    }
                    (total, None, false)
                } else {
                    return Frame::Bad;
                }
            }
            b'*' | b'~' | b'>' | b'%' | b'|' => {
                let Some(n) = parse_int(line) else {
                    return Frame::Bad;
                };
                if n == -1 && t == b'*' {
                    (line_len as u64, None, false)
                } else if (0..=MAX_LEN).contains(&n) {
                    let n = if matches!(t, b'%' | b'|') { n * 2 } else { n };
                    (line_len as u64, Some(n), t == b'|')
                } else {
                    return Frame::Bad;
                }
            }
            _ => return Frame::Bad,
        };
        if dir == Dir::Request && top && t != b'*' {
            return Frame::Bad;
        }
        // Update the nesting state now that the element is accepted.
        let nest = &mut self.nest[d];
        let mut token = RespToken {
            top_start: top,
            top_end: false,
            command: None,
            error: false,
            push: false,
        };
        if top {
            nest.push = t == b'>';
            nest.error = matches!(t, b'-' | b'!');
            nest.want_name = t == b'*' && dir == Dir::Request;
        } else if nest.want_name {
            nest.want_name = false;
            if t == b'$' {
                let start = line_len.min(buf.len());
                let stop = (len as usize - 2).min(buf.len()).max(start);
                token.command = Some(command_name(&buf[start..stop]));
            }
        }
        match agg {
            Some(n) if n > 0 => nest.stack.push((n, attr)),
            _ => {
                // A complete element: close every aggregate it completes.
                let mut ended_attr = false;
                loop {
                    match nest.stack.last_mut() {
                        None => {
                            if !ended_attr {
                                token.top_end = true;
                            }
                            break;
                        }
                        Some((rem, is_attr)) => {
                            *rem -= 1;
                            if *rem > 0 {
                                break;
                            }
                            let was_attr = *is_attr;
                            nest.stack.pop();
                            if was_attr && nest.stack.is_empty() {
                                ended_attr = true;
                            }
                        }
                    }
                }
                if token.top_end {
                    token.error = nest.error;
                    token.push = nest.push;
                }
            }
        }
        if attr && top {
            // An attribute precedes the reply: the reply starts with the next element.
            token.top_start = false;
        }
        Frame::Msg { len, info: token }
    }

    fn looks_like_start(&self, dir: Dir, seg: &[u8]) -> bool {
        match dir {
            Dir::Request => {
                (seg.first() == Some(&b'*') && seg.get(1).is_some_and(u8::is_ascii_digit))
                    || (is_inline_start(seg) && find_crlf(&seg[..seg.len().min(256)]).is_some())
            }
            Dir::Response => {
                matches!(
                    seg.first(),
                    Some(
                        b'+' | b'-'
                            | b':'
                            | b'$'
                            | b'*'
                            | b'_'
                            | b','
                            | b'#'
                            | b'!'
                            | b'='
                            | b'('
                            | b'%'
                            | b'~'
                            | b'|'
                    )
                ) && find_crlf(&seg[..seg.len().min(256)]).is_some()
            }
        }
    }

    // Inlined into `Framed::on_data`'s fast path: one stack frame per segment, not two (-44 instructions per
    // request on a redis-benchmark capture).
    #[inline(always)]
    fn take_complete(
        &mut self,
        dir: Dir,
        ts: Duration,
        seq: u32,
        data: &[u8],
        out: &mut Out,
    ) -> usize {
        // Whole top-level values at a top-level boundary: what `frame` answers from `whole_value` (commands
        // are arrays; an inline command, a reply's attribute or a RESP3 null go the element way), each taken
        // as on_pdu takes a one-segment PDU of it, without the token round trip through Frame and Pdu.
        if !self.nest[dir.index()].stack.is_empty() {
            return 0;
        }
        let mut at = 0;
        while let Some(&t) = data.get(at) {
            let whole = match dir {
                Dir::Request => t == b'*',
                Dir::Response => t != b'|' && t != b'_',
            };
            if !whole {
                break;
            }
            let Some((len, command, ty)) = whole_value(&data[at..], dir == Dir::Request) else {
                break;
            };
            let s = seq.wrapping_add(at as u32);
            at += len;
            // What on_pdu does with a whole value (top_start and top_end), without building the PDU.
            match dir {
                Dir::Request => {
                    let op = command.unwrap_or(Cow::Borrowed("UNKNOWN"));
                    self.queue.push_back((ts, ts, s, op));
                    if self.queue.len() > MAX_PENDING {
                        self.queue.pop_front();
                        out.anomaly(ts, AnomalyKind::NoResponse);
                    }
                }
                Dir::Response => {
                    let first = self.reply_first.take().unwrap_or(ts);
                    if ty == b'>' {
                        continue;
                    }
                    self.answer(first, ts, matches!(ty, b'-' | b'!'), out);
                }
            }
        }
        at
    }

    fn on_pdu(&mut self, pdu: Pdu<RespToken>, out: &mut Out) {
        let t = pdu.info;
        match pdu.dir {
            Dir::Request => {
                if let Some(name) = t.command {
                    if let Some(last) = self.queue.back_mut().filter(|_| !t.top_start) {
                        last.3 = name;
                    } else if t.top_start {
                        self.queue
                            .push_back((pdu.first_ts, pdu.last_ts, pdu.seq, name));
                    }
                } else if t.top_start {
                    self.queue.push_back((
                        pdu.first_ts,
                        pdu.last_ts,
                        pdu.seq,
                        Cow::Borrowed("UNKNOWN"),
                    ));
                }
                if t.top_end
                    && let Some(last) = self.queue.back_mut()
                {
                    last.1 = pdu.last_ts;
                }
                if self.queue.len() > MAX_PENDING {
                    self.queue.pop_front();
                    out.anomaly(pdu.first_ts, AnomalyKind::NoResponse);
                }
            }
            Dir::Response => {
                if t.top_start && self.reply_first.is_none() {
                    self.reply_first = Some(pdu.first_ts);
                }
                if !t.top_end {
                    return;
                }
                let first = self.reply_first.take().unwrap_or(pdu.first_ts);
                if t.push {
                    return;
                }
                self.answer(first, pdu.last_ts, t.error, out);
            }
        }
    }

    fn tls_ruled_out(&self) -> bool {
        self.answered
    }

    fn on_lost(&mut self, dir: Dir, ts: Duration, out: &mut Out) {
        self.nest[dir.index()] = Nest::default();
        // Order is all that pairs Redis replies: after a loss, the open requests cannot be paired.
        out.unanswered(ts, self.queue.drain(..).count());
        self.reply_first = None;
    }

    fn on_close(&mut self, ts: Duration, out: &mut Out) {
        out.unanswered(ts, self.queue.drain(..).count());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The name as the loop over [`COMMON`] gives it.
    fn command_name_by_loop(raw: &[u8]) -> Cow<'static, str> {
        for c in COMMON {
            if raw.eq_ignore_ascii_case(c.as_bytes()) {
                return Cow::Borrowed(c);
            }
        }
        Cow::Owned(String::from_utf8_lossy(raw).to_ascii_uppercase())
    }

    #[test]
    fn command_name_is_the_loop() {
        let mut cases: Vec<Vec<u8>> = vec![b"GET\0".to_vec(), b"".to_vec(), b"getx".to_vec()];
        for c in COMMON {
            for cut in 0..=c.len() {
                for b in 0..=255u8 {
                    let mut v = c.as_bytes()[..cut].to_vec();
                    v.push(b);
                    cases.push(v.clone());
                    cases.push(v.to_ascii_lowercase());
                    let mut w = c.as_bytes().to_vec();
                    if cut < w.len() {
                        w[cut] = b;
                        cases.push(w);
                    }
                }
            }
        }
        for c in cases {
            let (a, b) = (command_name(&c), command_name_by_loop(&c));
            assert_eq!(a, b, "{c:?}");
            assert_eq!(matches!(a, Cow::Borrowed(_)), matches!(b, Cow::Borrowed(_)));
        }
    }

    #[test]
    fn int_line_is_find_crlf_then_parse_int() {
        let mut cases: Vec<Vec<u8>> = Vec::new();
        let alphabet = [b'0', b'7', b'9', b'-', b'\r', b'\n', b'a', b' ', b'+', 0];
        // Every string of up to 4 bytes of the alphabet, then with CRLF and more after.
        let mut stack: Vec<Vec<u8>> = vec![vec![]];
        while let Some(v) = stack.pop() {
            cases.push(v.clone());
            cases.push([&v[..], b"\r\n"].concat());
            cases.push([&v[..], b"\r\nxx\r\n"].concat());
            if v.len() < 4 {
                for &b in &alphabet {
                    let mut w = v.clone();
                    w.push(b);
                    stack.push(w);
                }
            }
        }
        for n in [17, 18, 19, 20] {
            cases.push([&vec![b'9'; n][..], b"\r\n"].concat());
            cases.push([b"-", &vec![b'9'; n][..], b"\r\n"].concat());
        }
        for c in cases {
            let want = find_crlf(&c).and_then(|e| Some((parse_int(&c[..e])?, e + 2)));
            match int_line(&c) {
                Some(got) => assert_eq!(Some(got), want, "{c:?}"),
                None => assert_eq!(want, None, "{c:?}"),
            }
        }
        assert_eq!(int_line(b"-1\r\n"), Some((-1, 4)));
        assert_eq!(int_line(b"123\r\n$"), Some((123, 5)));
    }
}
