//! TLS on a TCP connection: detection (a ClientHello from the first byte, or after a STARTTLS-like exchange
//! such as PostgreSQL's SSLRequest or MySQL's SSL request), record framing, and two ways to time requests:
//!
//! - without keys, turns of TLS records: a request is the client's application-data records until the server
//!   answers, its response the server's records until the client speaks again (operation `tls turn`; the
//!   statements inside cannot be named);
//! - with the session's keys from a key log ([`super::tlskeys`]), the records are decrypted and the plaintext
//!   goes to the matcher of the protocol inside (PostgreSQL statements, HTTP methods, or generic turns).
//!
//! Records whose keys are missing or wrong fall back to turn timing. A clear-text connection whose protocol
//! rules TLS out once it is past its start (PostgreSQL, Redis: a request answered in clear) gets its matcher
//! handed over ([`ConnMatcher::take_plain`]), so the layer costs nothing per segment from there on.
#![forbid(unsafe_code)]

use super::tlskeys::{KeyLog, Negotiated, RecordKey, supported, tls12_keys, tls13_key};
use super::tlsrecord::{ALERT, APP_DATA, CCS, HANDSHAKE};
pub use super::tlsrecord::{MAX_RECORD, is_client_hello, is_server_hello, record_header};
use super::{AnomalyKind, Carrier, ConnMatcher, Dir, Out, Proto, Status, Transaction, be16};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

/// Length of a TLS 1.3 record holding an alert (2 bytes, the inner type, a 16-byte AEAD tag).
const TLS13_ALERT_LEN: usize = 19;
/// Records tried ahead of the expected sequence number after bytes were lost.
const RESYNC_TRIES: u64 = 32;
/// ServerHello.random of a HelloRetryRequest (RFC 8446 4.1.3).
const HRR_RANDOM: [u8; 32] = [
    0xCF, 0x21, 0xAD, 0x74, 0xE5, 0x9A, 0x61, 0x11, 0xBE, 0x1D, 0x8C, 0x02, 0x1E, 0x65, 0xB8, 0x91,
    0xC2, 0xA2, 0x11, 0x16, 0x7A, 0xBB, 0x8C, 0x5E, 0x07, 0x9E, 0x09, 0xE2, 0xC8, 0xA8, 0x33, 0x9C,
];

/// What a TLS matcher saw on its connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TlsStatus {
    /// The connection switched to TLS.
    pub seen: bool,
    /// Its records were decrypted with keys from the key log.
    pub decrypted: bool,
    /// A key log was given, but it had no key for this session, or the keys did not decrypt the records.
    pub no_key: bool,
    /// The cipher suite chosen, when the ServerHello was seen.
    pub suite: Option<u16>,
    /// The protocol found inside the decrypted records.
    pub inner: Option<Proto>,
}

#[derive(Debug, Default)]
struct RecDir {
    hdr: [u8; 5],
    have: usize,
    body: Vec<u8>,
    left: usize,
    /// Every body byte is in the capture.
    complete: bool,
    first_ts: Duration,
    first_seq: u32,
    lost: bool,
}

struct Record {
    hdr: [u8; 5],
    body: Option<Vec<u8>>,
    first_ts: Duration,
    last_ts: Duration,
    seq: u32,
}

#[derive(Debug, Default)]
struct DirKeys {
    epochs: Vec<RecordKey>,
    cur: usize,
    seq: u64,
    /// Records are protected (TLS 1.2: after ChangeCipherSpec; TLS 1.3: after the ServerHello).
    on: bool,
    /// A record was decrypted in this direction.
    ok: bool,
    /// Records failed before the first success (handshake records without their keys).
    early_fail: u32,
    /// Bytes were lost: the sequence number is uncertain.
    resync: bool,
}

impl DirKeys {
    fn open(&mut self, hdr: &[u8; 5], body: &[u8]) -> Option<(u8, Vec<u8>)> {
        let tries = if self.resync { RESYNC_TRIES } else { 1 };
        if let Some(k) = self.epochs.get(self.cur) {
            for i in 0..tries {
                if let Some(r) = k.open(self.seq + i, hdr, body) {
                    self.seq += i + 1;
                    self.resync = false;
                    self.ok = true;
                    return Some(r);
                }
            }
        }
        if let Some(k) = self.epochs.get(self.cur + 1)
            && let Some(r) = k.open(0, hdr, body)
        {
            self.cur += 1;
            self.seq = 1;
            self.resync = false;
            self.ok = true;
            return Some(r);
        }
        None
    }
}

/// TLS handling for one TCP connection, around the matcher of the protocol it carries.
pub struct Tls {
    /// The protocol expected inside (None: recognised from the decrypted bytes).
    inner_proto: Option<Proto>,
    /// The matcher of the clear-text start of the connection (before STARTTLS).
    plain: Option<Box<dyn ConnMatcher + Send>>,
    active: bool,
    seen_data: bool,
    dirs: [RecDir; 2],
    /// Turn in progress: the client's records (first ts, last ts, seq of the first byte).
    req: Option<(Duration, Duration, u32)>,
    /// The server's records answering it (first ts, last ts).
    resp: Option<(Duration, Duration)>,
    client_random: Option<[u8; 32]>,
    keylog: Option<Arc<KeyLog>>,
    keys: Option<[DirKeys; 2]>,
    /// The ServerHello chose TLS 1.3.
    tls13: bool,
    /// TLS 1.3: the client's next application-data record is its Finished (not a request).
    client_finished_next: bool,
    /// Matcher of the decrypted bytes.
    inner: Option<Box<dyn ConnMatcher + Send>>,
    status: TlsStatus,
}

impl Tls {
    /// A connection that starts in clear text with `proto` (`plain` is its matcher) and may switch to TLS.
    pub fn wrap(
        proto: Proto,
        plain: Box<dyn ConnMatcher + Send>,
        keylog: Option<Arc<KeyLog>>,
    ) -> Self {
        Tls {
            inner_proto: (proto != Proto::Generic).then_some(proto),
            plain: Some(plain),
            active: false,
            seen_data: false,
            dirs: Default::default(),
            req: None,
            resp: None,
            client_random: None,
            keylog,
            keys: None,
            tls13: false,
            client_finished_next: false,
            inner: None,
            status: TlsStatus::default(),
        }
    }

    /// A connection that is TLS from its first byte, carrying an unknown protocol.
    pub fn new(keylog: Option<Arc<KeyLog>>) -> Self {
        let mut t = Self::wrap(
            Proto::Generic,
            Box::new(super::generic::Generic::new()),
            keylog,
        );
        t.plain = None;
        t.active = true;
        t.status.seen = true;
        t
    }

    fn lose(&mut self, dir: Dir, ts: Duration, kind: AnomalyKind, out: &mut Out) {
        let st = &mut self.dirs[dir.index()];
        if !st.lost {
            out.anomaly(ts, kind);
        }
        st.lost = true;
        st.have = 0;
        st.left = 0;
        st.body.clear();
        if let Some(k) = &mut self.keys {
            k[dir.index()].resync = true;
        }
    }

    fn finish_record(&mut self, dir: Dir, ts: Duration, out: &mut Out) {
        let st = &mut self.dirs[dir.index()];
        st.have = 0;
        let body = std::mem::take(&mut st.body);
        let r = Record {
            hdr: st.hdr,
            body: st.complete.then_some(body),
            first_ts: st.first_ts,
            last_ts: ts,
            seq: st.first_seq,
        };
        self.on_record(dir, &r, out);
        if let Some(mut b) = r.body {
            // The buffer is used again for the next record.
            b.clear();
            self.dirs[dir.index()].body = b;
        }
    }

    fn on_record(&mut self, dir: Dir, r: &Record, out: &mut Out) {
        let ty = r.hdr[0];
        let d = dir.index();
        let protected = self.keys.as_ref().is_some_and(|k| k[d].on);
        if ty == HANDSHAKE && !protected {
            if let Some(b) = &r.body {
                self.on_handshake(dir, b);
            }
            return;
        }
        if ty == CCS {
            if let Some(k) = &mut self.keys
                && !self.tls13
            {
                k[d].on = true;
                k[d].seq = 0;
            }
            return;
        }
        if protected {
            let keys = self.keys.as_mut().expect("protected");
            match &r.body {
                Some(body) => {
                    if let Some((inner_ty, pt)) = keys[d].open(&r.hdr, body) {
                        if inner_ty == APP_DATA && !pt.is_empty() {
                            self.plaintext(dir, r, &pt, out);
                        }
                        return;
                    }
                    if !keys[d].ok && keys[d].early_fail < 16 {
                        // Handshake records whose keys were not logged: wait for the application keys.
                        keys[d].early_fail += 1;
                        return;
                    }
                    // Wrong keys: turn timing from here on.
                    self.status.no_key = true;
                    self.status.decrypted = false;
                    self.keys = None;
                    if let Some(mut m) = self.inner.take() {
                        m.on_close(r.last_ts, out);
                    }
                }
                None => {
                    // Part of the record is not in the capture: its plaintext is a gap for the matcher inside.
                    let k = &mut keys[d];
                    k.seq += 1;
                    if let Some(m) = &mut self.inner {
                        let len = (r.hdr[3] as u64) << 8 | r.hdr[4] as u64;
                        m.on_gap(dir, r.last_ts, len.saturating_sub(17), out);
                    }
                    return;
                }
            }
        }
        let len = (r.hdr[3] as usize) << 8 | r.hdr[4] as usize;
        // TLS 1.3 encrypts alerts too: 2 bytes, the inner type and a 16-byte tag make 19.
        if ty == ALERT || (self.tls13 && ty == APP_DATA && len == TLS13_ALERT_LEN) {
            if dir == Dir::Request {
                // The client closes the session (close_notify): what it sent last expected no answer.
                if self.resp.is_some() {
                    self.emit(out);
                }
                self.req = None;
            }
        } else if ty == APP_DATA {
            self.turn(dir, r, out);
        }
    }

    fn plaintext(&mut self, dir: Dir, r: &Record, pt: &[u8], out: &mut Out) {
        if self.inner.is_none() {
            let p = self.inner_proto.unwrap_or_else(|| {
                super::detect::by_content(dir, pt, Carrier::Tcp).unwrap_or(Proto::Generic)
            });
            self.status.inner = Some(p);
            self.inner = Some(p.matcher(Carrier::Tcp));
        }
        let m = self.inner.as_mut().expect("set");
        // The first byte at the record's first packet, the rest at the packet that completed it.
        m.on_data(dir, r.first_ts, r.seq, &pt[..1], out);
        if pt.len() > 1 {
            m.on_data(dir, r.last_ts, r.seq.wrapping_add(1), &pt[1..], out);
        }
    }

    fn turn(&mut self, dir: Dir, r: &Record, out: &mut Out) {
        match dir {
            Dir::Request if self.client_finished_next => {
                // TLS 1.3 hides the client's Finished in an application-data record; the server answers it
                // with session tickets at most: not a request.
                self.client_finished_next = false;
            }
            Dir::Request => {
                if self.resp.is_some() {
                    self.emit(out);
                }
                match &mut self.req {
                    Some(q) => q.1 = r.last_ts,
                    None => self.req = Some((r.first_ts, r.last_ts, r.seq)),
                }
            }
            Dir::Response => {
                if self.req.is_some() {
                    match &mut self.resp {
                        Some(s) => s.1 = r.last_ts,
                        None => self.resp = Some((r.first_ts, r.last_ts)),
                    }
                }
            }
        }
    }

    fn emit(&mut self, out: &mut Out) {
        if let (Some((q0, q1, seq)), Some((s0, s1))) = (self.req.take(), self.resp.take()) {
            out.push(Transaction {
                conn: 0,
                op: "tls turn".into(),
                request_ts: q0,
                request_end_ts: q1,
                response_ts: s0,
                response_end_ts: s1,
                request_seq: Some(seq),
                xid: None,
                status: Status::Ok,
                content: None,
                bytes: None,
                error: None,
            });
        }
    }

    fn on_handshake(&mut self, dir: Dir, b: &[u8]) {
        match (dir, b.first()) {
            (Dir::Request, Some(1)) => {
                self.client_random = b.get(6..38).and_then(|r| r.try_into().ok());
            }
            (Dir::Response, Some(2)) => {
                let Some(random) = b.get(6..38).and_then(|r| <[u8; 32]>::try_from(r).ok()) else {
                    return;
                };
                if random == HRR_RANDOM {
                    return;
                }
                let Some(n) = parse_server_hello(b) else {
                    return;
                };
                self.status.suite = Some(n.suite);
                self.tls13 = n.tls13;
                self.client_finished_next = n.tls13;
                self.setup_keys(n, &random);
            }
            _ => {}
        }
    }

    fn setup_keys(&mut self, n: Negotiated, server_random: &[u8; 32]) {
        let Some(kl) = &self.keylog else {
            return;
        };
        let secrets = self.client_random.as_ref().and_then(|cr| kl.get(cr));
        let Some(s) = secrets.filter(|_| supported(n)) else {
            self.status.no_key = true;
            return;
        };
        let mut dirs: [DirKeys; 2] = Default::default();
        if n.tls13 {
            for (k, secs) in dirs
                .iter_mut()
                .zip([[&s.client_hs, &s.client_app], [&s.server_hs, &s.server_app]])
            {
                k.epochs = secs
                    .into_iter()
                    .flatten()
                    .filter_map(|sec| tls13_key(n, sec))
                    .collect();
                k.on = true;
            }
        } else if let (Some(m), Some(cr)) = (&s.master, &self.client_random)
            && let Some((c, srv)) = tls12_keys(n, m, cr, server_random)
        {
            dirs[0].epochs.push(c);
            dirs[1].epochs.push(srv);
        }
        if dirs.iter().any(|k| k.epochs.is_empty()) {
            self.status.no_key = true;
            return;
        }
        self.status.decrypted = true;
        self.keys = Some(dirs);
    }

    fn tls_data(&mut self, dir: Dir, ts: Duration, seq: u32, mut data: &[u8], out: &mut Out) {
        let d = dir.index();
        if self.dirs[d].lost {
            if record_header(data).is_none() {
                return;
            }
            self.dirs[d].lost = false;
        }
        let mut seq = seq;
        while !data.is_empty() {
            // Record bodies are kept for the hellos and for decryption only.
            let keep = self.keys.is_some();
            let st = &mut self.dirs[d];
            if st.have < 5 {
                if st.have == 0 {
                    st.first_ts = ts;
                    st.first_seq = seq;
                }
                let n = (5 - st.have).min(data.len());
                st.hdr[st.have..st.have + n].copy_from_slice(&data[..n]);
                st.have += n;
                data = &data[n..];
                seq = seq.wrapping_add(n as u32);
                if st.have == 5 {
                    let Some((ty, len)) = record_header(&st.hdr) else {
                        self.lose(dir, ts, AnomalyKind::Unparseable, out);
                        return;
                    };
                    st.left = len;
                    st.body.clear();
                    st.complete = keep || ty == HANDSHAKE;
                    if len == 0 {
                        self.finish_record(dir, ts, out);
                    }
                }
                continue;
            }
            let n = st.left.min(data.len());
            if st.complete {
                st.body.extend_from_slice(&data[..n]);
            }
            st.left -= n;
            data = &data[n..];
            seq = seq.wrapping_add(n as u32);
            if st.left == 0 {
                self.finish_record(dir, ts, out);
            }
        }
    }
}

/// The version and suite a ServerHello chose (TLS 1.3 by its supported_versions extension).
fn parse_server_hello(b: &[u8]) -> Option<Negotiated> {
    let sid = *b.get(38)? as usize;
    let mut at = 39 + sid;
    let suite = be16(b, at)?;
    at += 3; // suite, compression method
    let mut tls13 = false;
    if let Some(ext_len) = be16(b, at) {
        let end = (at + 2 + ext_len as usize).min(b.len());
        at += 2;
        while at + 4 <= end {
            let (ty, len) = (be16(b, at)?, be16(b, at + 2)? as usize);
            if ty == 0x002b && len == 2 && be16(b, at + 4) == Some(0x0304) {
                tls13 = true;
            }
            at += 4 + len;
        }
    }
    Some(Negotiated { tls13, suite })
}

impl Tls {
    /// [`ConnMatcher::on_data`] past its fast path: the first segment, a segment that may start a TLS
    /// handshake, and every segment once TLS is on.
    #[inline(never)]
    fn on_data_tls(&mut self, dir: Dir, ts: Duration, seq: u32, data: &[u8], out: &mut Out) {
        if data.is_empty() {
            return;
        }
        if !self.active {
            let first = !self.seen_data;
            self.seen_data = true;
            let starts = match dir {
                Dir::Request => is_client_hello(data),
                Dir::Response => is_server_hello(data),
            } || (first && record_header(data).is_some_and(|(t, _)| t == APP_DATA));
            if !starts {
                if let Some(p) = &mut self.plain {
                    p.on_data(dir, ts, seq, data, out);
                }
                return;
            }
            // STARTTLS: what the clear-text matcher still waits for is encrypted from here on.
            self.plain = None;
            self.active = true;
            self.status.seen = true;
        }
        self.tls_data(dir, ts, seq, data, out);
    }
}

impl ConnMatcher for Tls {
    fn on_data(&mut self, dir: Dir, ts: Duration, seq: u32, data: &[u8], out: &mut Out) {
        // A clear-text connection (the common case): past its first segment only a handshake record (its
        // first byte 22) can switch it to TLS; anything else goes straight to the clear-text matcher.
        if !self.active && self.seen_data && data.first().is_some_and(|&b| b != HANDSHAKE) {
            if let Some(p) = &mut self.plain {
                p.on_data(dir, ts, seq, data, out);
            }
            return;
        }
        self.on_data_tls(dir, ts, seq, data, out);
    }

    fn on_gap(&mut self, dir: Dir, ts: Duration, len: u64, out: &mut Out) {
        if !self.active {
            if let Some(p) = &mut self.plain {
                p.on_gap(dir, ts, len, out);
            }
            return;
        }
        if len == 0 {
            return;
        }
        let d = dir.index();
        let st = &mut self.dirs[d];
        if st.lost {
            return;
        }
        if st.have == 5 {
            if (len as usize) < st.left {
                st.left -= len as usize;
                st.complete = false;
                st.body.clear();
                return;
            }
            let rest = len - st.left as u64;
            st.left = 0;
            st.complete = false;
            self.finish_record(dir, ts, out);
            if rest > 0 {
                self.lose(dir, ts, AnomalyKind::LostFraming, out);
            }
            return;
        }
        self.lose(dir, ts, AnomalyKind::LostFraming, out);
    }

    fn on_close(&mut self, ts: Duration, out: &mut Out) {
        if let Some(p) = &mut self.plain {
            p.on_close(ts, out);
        }
        if let Some(m) = &mut self.inner {
            m.on_close(ts, out);
        }
        if self.resp.is_some() {
            self.emit(out);
        } else if self.req.take().is_some() {
            out.anomaly(ts, AnomalyKind::NoResponse);
        }
    }

    fn tls(&self) -> Option<TlsStatus> {
        Some(self.status)
    }

    fn take_plain(&mut self) -> Option<Box<dyn ConnMatcher + Send>> {
        // Still clear text past the first segment, and the protocol inside can no longer start TLS: this layer
        // would only pass segments on (and has nothing to report: TLS was not seen).
        if !self.active && self.seen_data && self.plain.as_ref().is_some_and(|p| p.tls_ruled_out())
        {
            return self.plain.take();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ty: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![ty, 3, 3];
        v.extend_from_slice(&(body.len() as u16).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    fn client_hello() -> Vec<u8> {
        let mut hs = vec![1, 0, 0, 40, 3, 3];
        hs.extend_from_slice(&[7u8; 32]);
        hs.extend_from_slice(&[0, 0, 0, 0]);
        let mut r = rec(HANDSHAKE, &hs);
        r[2] = 1;
        r
    }

    #[test]
    fn pgsql_ssl_request_then_turns() {
        let mut m = Tls::wrap(Proto::Pgsql, Proto::Pgsql.matcher(Carrier::Tcp), None);
        let mut out = Out::default();
        let t = |us| Duration::from_micros(us);
        m.on_data(
            Dir::Request,
            t(1),
            0,
            &[0, 0, 0, 8, 4, 0xd2, 0x16, 0x2f],
            &mut out,
        );
        m.on_data(Dir::Response, t(2), 0, b"S", &mut out);
        let ch = client_hello();
        m.on_data(Dir::Request, t(3), 8, &ch, &mut out);
        let mut seq = 8 + ch.len() as u32;
        for i in 0..3u64 {
            let q = rec(APP_DATA, &[1; 40]);
            // a record split over two segments
            m.on_data(Dir::Request, t(10 + 10 * i), seq, &q[..7], &mut out);
            m.on_data(Dir::Request, t(11 + 10 * i), seq + 7, &q[7..], &mut out);
            seq += q.len() as u32;
            let a = [rec(APP_DATA, &[2; 30]), rec(APP_DATA, &[3; 20])].concat();
            m.on_data(Dir::Response, t(15 + 10 * i), 0, &a, &mut out);
        }
        m.on_close(t(100), &mut out);
        assert_eq!(out.anomalies, vec![]);
        assert_eq!(out.transactions.len(), 3);
        let x = &out.transactions[1];
        assert_eq!(x.op, "tls turn");
        assert_eq!(
            (x.request_ts, x.request_end_ts, x.response_end_ts),
            (t(20), t(21), t(25))
        );
        assert!(m.tls().unwrap().seen);
    }

    /// MySQL: greeting, the client's SSL request packet, then TLS: turns, nothing unparseable.
    #[test]
    fn mysql_ssl_request_then_turns() {
        let mut m = Tls::wrap(Proto::Mysql, Proto::Mysql.matcher(Carrier::Tcp), None);
        let mut out = Out::default();
        let t = Duration::from_micros;
        let mut greeting = vec![0x4a, 0, 0, 0, 0x0a];
        greeting.extend_from_slice(b"8.0.3\0");
        greeting.resize(0x4a + 4, 0);
        m.on_data(Dir::Response, t(1), 0, &greeting, &mut out);
        let mut ssl_req = vec![0x20, 0, 0, 1, 0x00, 0x0a, 0xa8, 0x01];
        ssl_req.resize(36, 0);
        m.on_data(Dir::Request, t(2), 0, &ssl_req, &mut out);
        m.on_data(Dir::Request, t(3), 36, &client_hello(), &mut out);
        for i in 0..4 {
            m.on_data(
                Dir::Request,
                t(10 + 10 * i),
                0,
                &rec(APP_DATA, &[1; 30]),
                &mut out,
            );
            m.on_data(
                Dir::Response,
                t(15 + 10 * i),
                0,
                &rec(APP_DATA, &[2; 30]),
                &mut out,
            );
        }
        m.on_close(t(100), &mut out);
        assert_eq!(out.transactions.len(), 4);
        assert!(out.transactions.iter().all(|x| x.op == "tls turn"));
        assert!(
            out.anomalies
                .iter()
                .all(|a| a.kind != AnomalyKind::Unparseable),
            "{:?}",
            out.anomalies
        );
    }

    #[test]
    fn garbage_is_reported_once() {
        let mut m = Tls::new(None);
        let mut out = Out::default();
        m.on_data(Dir::Request, Duration::ZERO, 0, &[0x99; 50], &mut out);
        m.on_data(Dir::Request, Duration::ZERO, 50, &[0x99; 50], &mut out);
        assert_eq!(out.anomalies.len(), 1);
        assert!(is_client_hello(&client_hello()));
        assert!(!is_server_hello(&client_hello()));
    }

    /// What the fuzz target does, on pseudo-random scripts around a ClientHello whose random has keys.
    #[test]
    fn random_scripts_never_panic() {
        let random = "07".repeat(32);
        let text = format!(
            "CLIENT_RANDOM {random} {}\nCLIENT_TRAFFIC_SECRET_0 {random} {}\nSERVER_TRAFFIC_SECRET_0 {random} {}\n",
            "01".repeat(48),
            "04".repeat(32),
            "05".repeat(32)
        );
        let keys = Arc::new(KeyLog::parse(std::path::Path::new("k"), &text).unwrap());
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..3000 {
            let mut script = vec![0u8];
            // A ClientHello, a ServerHello choosing a suite, then random records and bytes.
            let ch = client_hello();
            script.push(ch.len() as u8 & 0x3f);
            script.extend_from_slice(&ch[..(ch.len() & 0x3f)]);
            for _ in 0..40 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let len = (x % 48) as usize;
                let ctl = (x >> 8) as u8 & 0xc0 | len as u8;
                script.push(ctl);
                let ty = [HANDSHAKE, APP_DATA, CCS, 2][(x >> 20) as usize % 4];
                let mut body = rec(ty, &vec![(x >> 30) as u8; len.saturating_sub(5)]);
                if ty == 2 {
                    body = rec(HANDSHAKE, &[2, 0, 0, 40, 3, 3]);
                }
                if round % 3 == 0 {
                    body.iter_mut().for_each(|b| *b ^= (x >> 40) as u8);
                }
                body.resize(len, 0x13);
                script.extend_from_slice(&body);
            }
            let k = keys.clone();
            let out = super::super::replay_into(
                |c| Box::new(Tls::wrap(Proto::Pgsql, Proto::Pgsql.matcher(c), Some(k))),
                &script,
            );
            for t in &out.transactions {
                assert!(t.response_end_ts >= t.response_ts);
            }
            let _ = super::super::replay(Proto::Tls, &script);
        }
    }
}
