//! Request/response matching for application protocols seen in a capture.
//!
//! Each protocol has a per-connection matcher driven through [`ConnMatcher`]: the bytes of each direction in
//! TCP order (`on_data`, one call per segment, with its timestamp and the TCP sequence number of its first byte),
//! the bytes that are missing (`on_gap`: cut by the snap length or lost before the capture point), and the end
//! of the connection (`on_close`). A matcher emits [`Transaction`]s and [`Anomaly`]s into an [`Out`]; it never
//! fails: bytes it cannot frame are reported once and skipped until something that looks like the start of a
//! message arrives at a segment boundary.
//!
//! The shared machinery is here: [`Framed`] turns the per-direction byte stream into protocol data units
//! (PDUs: a header the protocol parses, then a body that is skipped, even when it is missing from the capture)
//! and hands them to the protocol's pairing logic. [`driver`] reassembles TCP from decoded packets and routes
//! them to the right matcher; [`stats`] aggregates transactions per operation.
//!
//! Why one file of ~1,000 lines: it is the vocabulary every protocol file shares ([`ConnMatcher`], [`Out`],
//! [`Transaction`], [`Anomaly`], [`Framed`] and its PDU loop), read together; each protocol is a file of its own.
#![forbid(unsafe_code)]

pub mod detect;
pub mod dns;
pub mod driver;
pub mod generic;
pub mod http;
pub mod mysql;
pub mod oncrpc;
pub mod pgsql;
pub mod redis;
pub mod run;
pub mod smb2;
pub mod sockperf;
pub mod stats;
pub mod tls;
pub mod tlskeys;
mod tlsrecord;
pub mod tns;

pub use driver::Driver;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::time::Duration;

/// Receives what the [`Driver`] finds: the transactions, the anomalies, and on a live capture the packets,
/// the ticks of the clock and the statistics' interval rows.
pub trait Sink {
    /// A completed transaction on connection `conn`.
    fn transaction(&mut self, conn: &driver::ConnInfo, t: Transaction);
    /// The transactions one packet completed on connection `conn`, in order: all taken from `ts`, which is
    /// left empty. By default each is handed to [`transaction`](Self::transaction); a sink that keeps none of
    /// them may read them where they are instead, without moving each (~180 bytes) out of the list.
    fn transactions(&mut self, conn: &driver::ConnInfo, ts: &mut Vec<Transaction>) {
        // Usually one transaction: taken off the end, no drain.
        if ts.len() == 1
            && let Some(t) = ts.pop()
        {
            self.transaction(conn, t);
        } else {
            for t in ts.drain(..) {
                self.transaction(conn, t);
            }
        }
    }
    /// An anomaly on connection `conn`.
    fn anomaly(&mut self, conn: &driver::ConnInfo, a: Anomaly);
    /// False for a sink that ignores transactions: a sink passing them on may skip the call.
    fn wants_transactions(&self) -> bool {
        true
    }
    /// Live capture: a packet that passed the filter, before the driver sees it (the flight recorder keeps it).
    fn packet(&mut self, p: &crate::capture::read::Packet<'_>, seg: &driver::Segment<'_>) {
        let _ = (p, seg);
    }
    /// Live capture: time went on (wall clock since the Unix epoch) without a packet; intervals may close.
    fn tick(&mut self, now: Duration) {
        let _ = now;
    }
    /// Live capture: the per-operation rows of the intervals that ended
    /// ([`stats::StatsConfig::live_interval`]), in order, before the transaction or the tick that
    /// ended them.
    fn live_rows(&mut self, rows: stats::LiveRows) {
        let _ = rows;
    }
}

/// Which way bytes travel in a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dir {
    /// From the client (the side that opened the connection or sent the first request) to the server.
    Request,
    /// From the server to the client.
    Response,
}

impl Dir {
    /// Index 0 for requests, 1 for responses.
    pub fn index(self) -> usize {
        match self {
            Dir::Request => 0,
            Dir::Response => 1,
        }
    }
}

/// How the messages of a connection are carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Carrier {
    /// A TCP byte stream.
    Tcp,
    /// UDP datagrams: each `on_data` call is one whole message.
    Udp,
}

/// Outcome of a request as far as the response shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The response says it worked (or the protocol has no status).
    #[default]
    Ok,
    /// The response reports an error (RPC denied/error status, SQL error, Redis error, HTTP >= 400, DNS rcode).
    Error,
}

/// One request and its response.
///
/// Times are capture timestamps. Two latencies are derived: to the response's first byte
/// ([`Transaction::first_byte`], from the packet that completes the request to the first packet of the
/// response, as tshark's `rpc,srt`) and to its last byte ([`Transaction::last_byte`], to the packet that
/// completes the response, which adds the transfer of a long response; tshark's `smb2,srt`, which times a
/// reassembled response at its last packet).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transaction {
    /// Connection number given by the driver (0 when driven by hand).
    pub conn: u64,
    /// Operation name (READ, GETATTR, SELECT, GET, A, ...).
    pub op: Cow<'static, str>,
    /// Time of the request's first byte.
    pub request_ts: Duration,
    /// Time of the packet that completed the request.
    pub request_end_ts: Duration,
    /// Time of the response's first byte.
    pub response_ts: Duration,
    /// Time of the packet that completed the response.
    pub response_end_ts: Duration,
    /// TCP sequence number of the request's first byte (None for UDP).
    pub request_seq: Option<u32>,
    /// Protocol identifier of the request (ONC-RPC XID, DNS ID, the low 32 bits of the SMB2 message id), when it
    /// has one.
    pub xid: Option<u32>,
    /// Hash of the request's leading bytes ([`CONTENT_BYTES`] of the stream from its first byte): what the
    /// request says (SQL text, Redis command and key, sockperf sequence number, XID), the same on both sides of
    /// a proxy. Only computed when asked ([`driver::Driver::with_content`]; TCP only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<u64>,
    /// Payload bytes the operation moved, when the protocol says (SMB2 READ: the response's DataLength;
    /// WRITE: the request's Length).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// The protocol's name for the error the response reported (SMB2: the NT status, such as
    /// `STATUS_OBJECT_NAME_NOT_FOUND`), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Cow<'static, str>>,
    /// What the response said.
    pub status: Status,
}

impl Transaction {
    /// A transaction of `op` that carries no protocol identifier, content hash, byte count or error name: the
    /// request from its first byte to the packet that completed it (`request`), the response likewise
    /// (`response`), on connection 0 (the driver numbers it).
    #[inline(always)]
    pub fn new(
        op: Cow<'static, str>,
        request: (Duration, Duration),
        response: (Duration, Duration),
        request_seq: Option<u32>,
        status: Status,
    ) -> Transaction {
        Transaction {
            conn: 0,
            op,
            request_ts: request.0,
            request_end_ts: request.1,
            response_ts: response.0,
            response_end_ts: response.1,
            request_seq,
            xid: None,
            content: None,
            bytes: None,
            error: None,
            status,
        }
    }

    /// From the end of the request to the end of the response: the time to the LAST byte of the response
    /// (the server's time, one network round trip and the transfer of the response).
    pub fn latency(&self) -> Duration {
        self.last_byte()
    }

    /// From the end of the request to the end of the response (the time to the last byte).
    pub fn last_byte(&self) -> Duration {
        self.response_end_ts.saturating_sub(self.request_end_ts)
    }

    /// From the end of the request to the packet holding the response's FIRST byte: the server's time plus
    /// one network round trip, without the transfer of the response (tshark's `rpc,srt`).
    pub fn first_byte(&self) -> Duration {
        self.response_ts.saturating_sub(self.request_end_ts)
    }
}

/// How many bytes of the request stream, from a request's first byte, its content hash covers.
pub const CONTENT_BYTES: usize = 64;

/// FNV-1a, 64 bits: a stable hash of a request's leading bytes (the same in every build and run).
pub fn content_hash(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Largest request-stream window a [`Fingerprint`] keeps per connection; requests that started earlier get no
/// content hash.
pub const FINGERPRINT_WINDOW: usize = 256 * 1024;

/// Wraps a connection's matcher to give each transaction the hash of its request's leading bytes
/// ([`Transaction::content`]). The hash covers [`CONTENT_BYTES`] of the request stream from the request's
/// first byte (fewer at the end of the stream), so it is the same in two captures of the same byte stream
/// whatever the segmentation; transactions are held until those bytes have been seen.
pub struct Fingerprint {
    inner: Box<dyn ConnMatcher + Send>,
    /// Request-direction bytes, `buf[0]` at sequence number `buf_seq`.
    buf: std::collections::VecDeque<u8>,
    buf_seq: u32,
    started: bool,
    held: std::collections::VecDeque<Transaction>,
    scratch: Out,
}

impl Fingerprint {
    /// Wraps `inner`.
    pub fn new(inner: Box<dyn ConnMatcher + Send>) -> Self {
        Fingerprint {
            inner,
            buf: std::collections::VecDeque::new(),
            buf_seq: 0,
            started: false,
            held: std::collections::VecDeque::new(),
            scratch: Out::default(),
        }
    }

    fn end_seq(&self) -> u32 {
        self.buf_seq.wrapping_add(self.buf.len() as u32)
    }

    /// Offset of `seq` in `buf`, when it is inside.
    fn offset(&self, seq: u32) -> Option<usize> {
        let off = seq.wrapping_sub(self.buf_seq) as usize;
        (self.started && off <= self.buf.len()).then_some(off)
    }

    fn hash_at(&self, off: usize, n: usize) -> u64 {
        let (a, b) = self.buf.as_slices();
        let mut h = Vec::with_capacity(n);
        for i in off..off + n {
            h.push(if i < a.len() { a[i] } else { b[i - a.len()] });
        }
        content_hash(&h)
    }

    /// Moves what the inner matcher produced into `out`, holding transactions until their bytes are there.
    fn release(&mut self, closing: bool, out: &mut Out) {
        out.anomalies.append(&mut self.scratch.anomalies);
        self.held.extend(self.scratch.transactions.drain(..));
        while let Some(t) = self.held.front() {
            match t.request_seq.and_then(|s| self.offset(s)) {
                Some(off) => {
                    let avail = self.buf.len() - off;
                    if avail < CONTENT_BYTES && !closing {
                        break;
                    }
                    let n = avail.min(CONTENT_BYTES);
                    let h = (n > 0).then(|| self.hash_at(off, n));
                    let mut t = self.held.pop_front().expect("present");
                    t.content = h;
                    out.transactions.push(t);
                }
                None => {
                    let t = self.held.pop_front().expect("present");
                    out.transactions.push(t);
                }
            }
        }
        if self.buf.len() > FINGERPRINT_WINDOW {
            let cut = self.buf.len() - FINGERPRINT_WINDOW;
            self.buf.drain(..cut);
            self.buf_seq = self.buf_seq.wrapping_add(cut as u32);
        }
    }
}

impl ConnMatcher for Fingerprint {
    fn on_data(&mut self, dir: Dir, ts: Duration, seq: u32, data: &[u8], out: &mut Out) {
        if dir == Dir::Request {
            if !self.started || seq != self.end_seq() {
                self.buf.clear();
                self.buf_seq = seq;
                self.started = true;
            }
            self.buf.extend(data.iter().copied());
        }
        self.scratch.conn = out.conn;
        self.inner.on_data(dir, ts, seq, data, &mut self.scratch);
        self.release(false, out);
    }

    fn on_gap(&mut self, dir: Dir, ts: Duration, len: u64, out: &mut Out) {
        if dir == Dir::Request && self.started {
            // Bytes nobody saw: hashes cannot cover them; start again after the hole.
            let end = self.end_seq().wrapping_add(len as u32);
            self.buf.clear();
            self.buf_seq = end;
        }
        self.scratch.conn = out.conn;
        self.inner.on_gap(dir, ts, len, &mut self.scratch);
        self.release(false, out);
    }

    fn on_close(&mut self, ts: Duration, out: &mut Out) {
        self.scratch.conn = out.conn;
        self.inner.on_close(ts, &mut self.scratch);
        self.release(true, out);
    }

    fn take_plain(&mut self) -> Option<Box<dyn ConnMatcher + Send>> {
        // The fingerprints stay: the layer inside them is replaced.
        if let Some(p) = self.inner.take_plain() {
            self.inner = p;
        }
        None
    }
}

/// Something that could not be paired or parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum AnomalyKind {
    /// A response with no request before it (the capture started mid-stream, or the request was lost).
    ResponseWithoutRequest,
    /// A request identifier seen again while the first request was still open (the first one is dropped).
    DuplicateRequest,
    /// A request still waiting for its response when the connection or the capture ended.
    NoResponse,
    /// Bytes that are not this protocol; skipped until a message start is recognised again.
    Unparseable,
    /// Bytes missing from the capture (snap length, loss) where the protocol needed them to frame messages.
    LostFraming,
    /// A response that had started when the connection or the capture ended.
    IncompleteResponse,
    /// SMB3 messages sealed in a transform header (encrypted) or compressed: their commands cannot be seen.
    Encrypted,
}

impl AnomalyKind {
    /// Short, stable name for tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            AnomalyKind::ResponseWithoutRequest => "response without request",
            AnomalyKind::DuplicateRequest => "request id seen twice",
            AnomalyKind::NoResponse => "no response",
            AnomalyKind::Unparseable => "unparseable bytes",
            AnomalyKind::LostFraming => "framing lost in a gap",
            AnomalyKind::IncompleteResponse => "response cut by the end",
            AnomalyKind::Encrypted => "encrypted SMB3: commands not visible",
        }
    }
}

/// One anomaly.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Anomaly {
    /// Connection number.
    pub conn: u64,
    /// When it was seen.
    pub ts: Duration,
    /// What it was.
    pub kind: AnomalyKind,
}

/// Where matchers put what they found; the caller drains it.
#[derive(Debug, Default)]
pub struct Out {
    /// Connection number stamped on everything pushed.
    pub conn: u64,
    /// Completed transactions.
    pub transactions: Vec<Transaction>,
    /// Anomalies.
    pub anomalies: Vec<Anomaly>,
}

impl Out {
    /// An empty output for connection `conn`.
    pub fn new(conn: u64) -> Self {
        Out {
            conn,
            ..Default::default()
        }
    }

    /// Adds a transaction (stamps the connection number).
    pub fn push(&mut self, mut t: Transaction) {
        t.conn = self.conn;
        self.transactions.push(t);
    }

    /// Adds the transaction `make` gives (stamps the connection number), written straight into the list: a
    /// transaction is ~180 bytes, which [`push`](Self::push) builds aside and then copies.
    #[inline]
    pub fn push_with(&mut self, make: impl FnOnce() -> Transaction) {
        let conn = self.conn;
        self.transactions.extend(std::iter::once_with(|| {
            let mut t = make();
            t.conn = conn;
            t
        }));
    }

    /// Adds an anomaly.
    pub fn anomaly(&mut self, ts: Duration, kind: AnomalyKind) {
        self.anomalies.push(Anomaly {
            conn: self.conn,
            ts,
            kind,
        });
    }

    /// `n` requests left without a response when the connection closed at `ts`: one
    /// [`AnomalyKind::NoResponse`] each.
    pub fn unanswered(&mut self, ts: Duration, n: usize) {
        for _ in 0..n {
            self.anomaly(ts, AnomalyKind::NoResponse);
        }
    }
}

/// The interface every protocol matcher implements, one instance per connection (or UDP address pair).
pub trait ConnMatcher {
    /// Bytes of one segment (TCP, in sequence order, without duplicates) or one whole datagram (UDP).
    /// `seq` is the TCP sequence number of `data[0]` (0 for UDP).
    fn on_data(&mut self, dir: Dir, ts: Duration, seq: u32, data: &[u8], out: &mut Out);
    /// `len` bytes of the stream that are not in the capture (snap length cut, or lost), right after the
    /// bytes last given to `on_data`. For UDP: the part of the last datagram that the snap length cut.
    fn on_gap(&mut self, dir: Dir, ts: Duration, len: u64, out: &mut Out);
    /// The connection closed or the capture ended: requests still open are reported.
    fn on_close(&mut self, ts: Duration, out: &mut Out);
    /// What the TLS layer saw, for a matcher that handles TLS (None otherwise).
    fn tls(&self) -> Option<tls::TlsStatus> {
        None
    }
    /// For a layer around a clear-text matcher that is no longer needed (a TLS layer once the protocol inside
    /// rules TLS out): that matcher, which the caller then drives in place of this one (this one must not be
    /// driven again). None otherwise (a wrapper may hand over the layer inside it and keep itself).
    fn take_plain(&mut self) -> Option<Box<dyn ConnMatcher + Send>> {
        None
    }
    /// This clear-text matcher's protocol can no longer switch to TLS on its connection (it negotiates TLS
    /// only before the point it has passed), so a TLS layer around it may hand it over
    /// ([`take_plain`](Self::take_plain)).
    fn tls_ruled_out(&self) -> bool {
        false
    }
}

/// The protocols `capture rpc` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Proto {
    /// ONC-RPC (NFS v3/v4, mount, portmap, ...).
    Nfs,
    /// PostgreSQL frontend/backend protocol.
    Pgsql,
    /// MySQL / MariaDB client protocol.
    Mysql,
    /// Redis RESP2 / RESP3.
    Redis,
    /// DNS over UDP and TCP.
    Dns,
    /// HTTP/1.0 and HTTP/1.1.
    Http,
    /// Oracle TNS.
    Tns,
    /// SMB2 / SMB3 over direct TCP (port 445) or NetBIOS session service (139).
    Smb2,
    /// sockperf / `roundtrip ping` ping-pong messages, over TCP and UDP.
    Sockperf,
    /// Any TCP request/response turns.
    Generic,
    /// TLS carrying a protocol not known from the port: turns of TLS records, or the decrypted protocol.
    Tls,
}

impl Proto {
    /// Every protocol, in the order detection tries them.
    pub const ALL: [Proto; 11] = [
        Proto::Nfs,
        Proto::Pgsql,
        Proto::Mysql,
        Proto::Redis,
        Proto::Dns,
        Proto::Http,
        Proto::Tns,
        Proto::Smb2,
        Proto::Sockperf,
        Proto::Generic,
        Proto::Tls,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Proto::Nfs => "nfs",
            Proto::Pgsql => "pgsql",
            Proto::Mysql => "mysql",
            Proto::Redis => "redis",
            Proto::Dns => "dns",
            Proto::Http => "http",
            Proto::Tns => "tns",
            Proto::Smb2 => "smb2",
            Proto::Sockperf => "sockperf",
            Proto::Generic => "generic",
            Proto::Tls => "tls",
        }
    }

    /// Parses a command-line name.
    pub fn parse(s: &str) -> Option<Proto> {
        Proto::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .or(match s.to_ascii_lowercase().as_str() {
                "rpc" | "oncrpc" | "sunrpc" => Some(Proto::Nfs),
                "postgres" | "postgresql" => Some(Proto::Pgsql),
                "mariadb" => Some(Proto::Mysql),
                "oracle" => Some(Proto::Tns),
                "smb" | "smb3" | "cifs" => Some(Proto::Smb2),
                "ssl" | "https" => Some(Proto::Tls),
                _ => None,
            })
    }

    /// A new matcher for one connection of this protocol.
    pub fn matcher(self, carrier: Carrier) -> Box<dyn ConnMatcher + Send> {
        match self {
            Proto::Nfs => Box::new(Framed::new(oncrpc::OncRpc::new(carrier), carrier)),
            Proto::Pgsql => Box::new(Framed::new(pgsql::Pgsql::new(), carrier)),
            Proto::Mysql => Box::new(Framed::new(mysql::Mysql::new(), carrier)),
            Proto::Redis => Box::new(Framed::new(redis::Redis::new(), carrier)),
            Proto::Dns => Box::new(Framed::new(dns::Dns::new(carrier), carrier)),
            Proto::Http => Box::new(Framed::new(http::Http::new(), carrier)),
            Proto::Tns => Box::new(Framed::new(tns::Tns::new(), carrier)),
            Proto::Smb2 => Box::new(Framed::new(smb2::Smb2::new(), carrier)),
            Proto::Sockperf => Box::new(Framed::new(
                sockperf::Sockperf::new(carrier == Carrier::Udp),
                carrier,
            )),
            Proto::Generic => Box::new(generic::Generic::new()),
            Proto::Tls => Box::new(tls::Tls::new(None)),
        }
    }
}

impl std::fmt::Display for Proto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a protocol's framer says about the bytes at the start of a message.
#[derive(Debug)]
pub enum Frame<I> {
    /// More bytes are needed to tell.
    Need,
    /// These bytes are not the start of a message of this protocol.
    Bad,
    /// A message of `len` bytes in all (header and body) starts here.
    Msg {
        /// Whole length of the message, including the bytes already given.
        len: u64,
        /// What the protocol wants to remember about it.
        info: I,
    },
}

impl<I> Frame<I> {
    /// A message of `len` bytes when its parse gave `info`, else not one of this protocol.
    pub fn msg_or_bad(len: u64, info: Option<I>) -> Frame<I> {
        match info {
            Some(info) => Frame::Msg { len, info },
            None => Frame::Bad,
        }
    }
}

/// One framed message with its timing.
#[derive(Debug, Clone)]
pub struct Pdu<I> {
    /// Direction.
    pub dir: Dir,
    /// Time of the first byte.
    pub first_ts: Duration,
    /// Time of the packet that held the last byte (or the last captured byte, when the end was cut).
    pub last_ts: Duration,
    /// TCP sequence number of the first byte.
    pub seq: u32,
    /// Length of the message.
    pub len: u64,
    /// The protocol's parse of the header.
    pub info: I,
}

/// A protocol plugged into [`Framed`]: how to frame messages and how to pair them.
pub trait Protocol {
    /// What the framer extracts from a message header.
    type Info;
    /// Parses the start of a message from `buf` (which begins at a message boundary). With `at_end`, no more
    /// contiguous bytes will come (a gap or the end of a datagram follows): answer `Msg` if the length can be
    /// told from what is there, otherwise `Bad`.
    fn frame(&mut self, dir: Dir, buf: &[u8], at_end: bool) -> Frame<Self::Info>;
    /// After framing was lost: does this segment, starting at `seg[0]`, look like the start of a message?
    fn looks_like_start(&self, dir: Dir, seg: &[u8]) -> bool;
    /// A complete message.
    fn on_pdu(&mut self, pdu: Pdu<Self::Info>, out: &mut Out);
    /// A fast path for the common case: `data` (all of it arrived at `ts`, its first byte at TCP sequence
    /// number `seq`) begins at a message boundary; the protocol may consume the whole messages at its start
    /// that it would frame as `Msg`, doing for them, into `out`, exactly what `frame` and then
    /// [`on_pdu`](Self::on_pdu) with a PDU of one segment would (PostgreSQL: a simple Query, a response's
    /// RowDescription, DataRow, CommandComplete, ErrorResponse and its ReadyForQuery), without building the
    /// frame and the PDU. Returns the bytes consumed (by default none).
    fn take_complete(
        &mut self,
        dir: Dir,
        ts: Duration,
        seq: u32,
        data: &[u8],
        out: &mut Out,
    ) -> usize {
        let _ = (dir, ts, seq, data, out);
        0
    }
    /// The connection is past the point where this protocol can switch to TLS
    /// ([`ConnMatcher::tls_ruled_out`]); by default never.
    fn tls_ruled_out(&self) -> bool {
        false
    }
    /// Framing was lost in `dir` (garbage or a gap inside a header): drop pairing state that depended on it.
    fn on_lost(&mut self, dir: Dir, ts: Duration, out: &mut Out);
    /// End of the connection.
    fn on_close(&mut self, ts: Duration, out: &mut Out);
}

/// Largest header a framer may ask to see at once; beyond that the message is framed as if at a gap.
pub const MAX_HEADER: usize = 64 * 1024;

#[derive(Debug)]
struct InProgress<I> {
    first_ts: Duration,
    seq: u32,
    len: u64,
    info: I,
}

#[derive(Debug)]
struct StreamState<I> {
    /// Header bytes collected so far (empty when the next message starts at the next byte).
    buf: Vec<u8>,
    buf_first_ts: Duration,
    buf_seq: u32,
    /// Body bytes still to skip for the message in progress.
    skip: u64,
    cur: Option<InProgress<I>>,
    /// Framing lost: wait for a segment that looks like a message start.
    lost: bool,
}

impl<I> StreamState<I> {
    fn new() -> Self {
        StreamState {
            buf: Vec::new(),
            buf_first_ts: Duration::ZERO,
            buf_seq: 0,
            skip: 0,
            cur: None,
            lost: false,
        }
    }
}

/// A [`ConnMatcher`] made of a [`Protocol`]: frames both directions, then lets the protocol pair the messages.
pub struct Framed<P: Protocol> {
    proto: P,
    carrier: Carrier,
    dirs: [StreamState<P::Info>; 2],
}

impl<P: Protocol> Framed<P> {
    /// Wraps a protocol.
    pub fn new(proto: P, carrier: Carrier) -> Self {
        Framed {
            proto,
            carrier,
            dirs: [StreamState::new(), StreamState::new()],
        }
    }

    /// The protocol inside (for tests).
    pub fn protocol(&self) -> &P {
        &self.proto
    }

    fn lose(&mut self, dir: Dir, ts: Duration, kind: AnomalyKind, out: &mut Out) {
        let st = &mut self.dirs[dir.index()];
        let report = !st.lost;
        st.lost = true;
        st.buf.clear();
        st.skip = 0;
        st.cur = None;
        if report {
            out.anomaly(ts, kind);
        }
        self.proto.on_lost(dir, ts, out);
    }

    fn finish_cur(&mut self, dir: Dir, ts: Duration, out: &mut Out) {
        if let Some(c) = self.dirs[dir.index()].cur.take() {
            self.proto.on_pdu(
                Pdu {
                    dir,
                    first_ts: c.first_ts,
                    last_ts: ts,
                    seq: c.seq,
                    len: c.len,
                    info: c.info,
                },
                out,
            );
        }
    }

    fn udp(&mut self, dir: Dir, ts: Duration, data: &[u8], out: &mut Out) {
        match self.proto.frame(dir, data, true) {
            Frame::Msg { len, info } => self.proto.on_pdu(
                Pdu {
                    dir,
                    first_ts: ts,
                    last_ts: ts,
                    seq: 0,
                    len,
                    info,
                },
                out,
            ),
            _ => out.anomaly(ts, AnomalyKind::Unparseable),
        }
    }
}

impl<P: Protocol> Framed<P> {
    /// [`ConnMatcher::on_data`] past its fast path: UDP, lost framing, a message in progress or buffered, and
    /// what the protocol's [`Protocol::take_complete`] left.
    #[inline(never)]
    fn on_data_slow(&mut self, dir: Dir, ts: Duration, seq: u32, mut data: &[u8], out: &mut Out) {
        if self.carrier == Carrier::Udp {
            return self.udp(dir, ts, data, out);
        }
        let d = dir.index();
        if self.dirs[d].lost {
            if data.is_empty() || !self.proto.looks_like_start(dir, data) {
                return;
            }
            self.dirs[d].lost = false;
        }
        let mut seq = seq;
        while !data.is_empty() {
            let st = &mut self.dirs[d];
            if st.skip > 0 {
                let n = (st.skip.min(data.len() as u64)) as usize;
                st.skip -= n as u64;
                data = &data[n..];
                seq = seq.wrapping_add(n as u32);
                if st.skip == 0 {
                    self.finish_cur(dir, ts, out);
                }
                continue;
            }
            // At a message boundary, possibly with header bytes buffered.
            if st.buf.is_empty() {
                let n = self.proto.take_complete(dir, ts, seq, data, out);
                if n > 0 {
                    data = &data[n.min(data.len())..];
                    seq = seq.wrapping_add(n as u32);
                    continue;
                }
            }
            let st = &mut self.dirs[d];
            // `appended`: how many bytes of `data` went into the header buffer.
            let (verdict, used_buf, appended) = if st.buf.is_empty() {
                (self.proto.frame(dir, data, false), false, 0)
            } else {
                let old = st.buf.len();
                let take = data.len().min(MAX_HEADER.saturating_sub(old).max(1));
                st.buf.extend_from_slice(&data[..take]);
                let v = self.proto.frame(dir, &st.buf, st.buf.len() >= MAX_HEADER);
                (v, true, take)
            };
            let st = &mut self.dirs[d];
            match verdict {
                Frame::Need => {
                    if !used_buf {
                        if data.len() >= MAX_HEADER {
                            self.lose(dir, ts, AnomalyKind::Unparseable, out);
                            return;
                        }
                        st.buf.extend_from_slice(data);
                        st.buf_first_ts = ts;
                        st.buf_seq = seq;
                    }
                    return;
                }
                Frame::Bad => {
                    self.lose(dir, ts, AnomalyKind::Unparseable, out);
                    return;
                }
                Frame::Msg { len, info } => {
                    let len = len.max(1);
                    if !used_buf && len <= data.len() as u64 {
                        // The whole message is in this segment (the common case): handed over at once,
                        // as the body-skipping below would after one more turn of the loop.
                        let n = len as usize;
                        self.proto.on_pdu(
                            Pdu {
                                dir,
                                first_ts: ts,
                                last_ts: ts,
                                seq,
                                len,
                                info,
                            },
                            out,
                        );
                        data = &data[n..];
                        seq = seq.wrapping_add(n as u32);
                        continue;
                    }
                    // Bytes of the message that came before `data[0]` (buffered from earlier segments).
                    let (first_ts, first_seq, prev) = if used_buf {
                        let prev = (st.buf.len() - appended) as u64;
                        st.buf.clear();
                        (st.buf_first_ts, st.buf_seq, prev)
                    } else {
                        (ts, seq, 0)
                    };
                    st.cur = Some(InProgress {
                        first_ts,
                        seq: first_seq,
                        len,
                        info,
                    });
                    st.skip = len.saturating_sub(prev);
                    if st.skip == 0 {
                        self.finish_cur(dir, ts, out);
                    }
                }
            }
        }
    }
}

impl<P: Protocol> ConnMatcher for Framed<P> {
    fn on_data(&mut self, dir: Dir, ts: Duration, seq: u32, data: &[u8], out: &mut Out) {
        // The common case, kept small: a TCP segment at a message boundary (nothing buffered or being
        // skipped) whose messages the protocol takes whole. The slow path starts at what it left (where it
        // would ask take_complete again, which takes nothing more there).
        let st = &self.dirs[dir.index()];
        if self.carrier == Carrier::Tcp && !st.lost && st.skip == 0 && st.buf.is_empty() {
            if data.is_empty() {
                return;
            }
            let n = self.proto.take_complete(dir, ts, seq, data, out);
            if n >= data.len() {
                return;
            }
            return self.on_data_slow(dir, ts, seq.wrapping_add(n as u32), &data[n..], out);
        }
        self.on_data_slow(dir, ts, seq, data, out)
    }

    fn tls_ruled_out(&self) -> bool {
        self.proto.tls_ruled_out()
    }

    fn on_gap(&mut self, dir: Dir, ts: Duration, len: u64, out: &mut Out) {
        if self.carrier == Carrier::Udp || len == 0 {
            return;
        }
        let d = dir.index();
        if self.dirs[d].lost {
            return;
        }
        let st = &mut self.dirs[d];
        if st.skip > 0 {
            if len < st.skip {
                st.skip -= len;
                return;
            }
            let rest = len - st.skip;
            st.skip = 0;
            self.finish_cur(dir, ts, out);
            if rest > 0 {
                self.lose(dir, ts, AnomalyKind::LostFraming, out);
            }
            return;
        }
        if st.buf.is_empty() {
            // The gap starts at a message boundary: nothing to frame it with.
            self.lose(dir, ts, AnomalyKind::LostFraming, out);
            return;
        }
        // A header cut short: frame it with what is there.
        let buf = std::mem::take(&mut st.buf);
        match self.proto.frame(dir, &buf, true) {
            Frame::Msg { len: mlen, info } => {
                let st = &mut self.dirs[d];
                let have = buf.len() as u64 + len;
                st.cur = Some(InProgress {
                    first_ts: st.buf_first_ts,
                    seq: st.buf_seq,
                    len: mlen,
                    info,
                });
                if have < mlen {
                    st.skip = mlen - have;
                } else if have == mlen {
                    self.finish_cur(dir, ts, out);
                } else {
                    self.finish_cur(dir, ts, out);
                    self.lose(dir, ts, AnomalyKind::LostFraming, out);
                }
            }
            _ => self.lose(dir, ts, AnomalyKind::LostFraming, out),
        }
    }

    fn on_close(&mut self, ts: Duration, out: &mut Out) {
        let before = out.anomalies.len();
        self.proto.on_close(ts, out);
        if self.dirs[Dir::Response.index()].cur.take().is_some() {
            // The request the protocol reports unanswered was being answered when the capture ended.
            match out.anomalies[before..]
                .iter_mut()
                .find(|a| a.kind == AnomalyKind::NoResponse)
            {
                Some(a) => a.kind = AnomalyKind::IncompleteResponse,
                None => out.anomaly(ts, AnomalyKind::IncompleteResponse),
            }
        }
    }
}

/// A fast non-cryptographic hasher (the Fx hash of rustc) for the per-packet and per-request maps; the keys
/// come from captures, but the maps are bounded, so hash flooding only costs time.
#[derive(Debug, Default, Clone, Copy)]
pub struct FxHasher {
    hash: u64,
}

impl std::hash::Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut v = [0u8; 8];
            v[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(v));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.hash = (self.hash.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn write_u128(&mut self, i: u128) {
        self.write_u64(i as u64);
        self.write_u64((i >> 64) as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// A HashMap with [`FxHasher`].
pub type FxHashMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<FxHasher>>;

/// Reads a big-endian u32 at `at`, if the bytes are there.
#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// Reads a big-endian u16 at `at`, if the bytes are there.
#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at + 2).map(|s| u16::from_be_bytes([s[0], s[1]]))
}

/// Keywords [`sql_verb`] gives without allocating.
const SQL_VERBS: [&str; 24] = [
    "SELECT", "INSERT", "UPDATE", "DELETE", "BEGIN", "COMMIT", "ROLLBACK", "SET", "SHOW", "WITH",
    "CALL", "EXECUTE", "START", "END", "VALUES", "COPY", "EXPLAIN", "CREATE", "DROP", "ALTER",
    "TRUNCATE", "LOCK", "DECLARE", "FETCH",
];

/// The first SQL keyword of a statement, upper-cased (skipping spaces, comments and parentheses); a common
/// keyword is a static string (no allocation per request).
pub(crate) fn sql_verb(text: &[u8]) -> Cow<'static, str> {
    let mut i = 0;
    // A statement that starts with its keyword (the common case) has nothing to skip.
    if !text.first().is_some_and(u8::is_ascii_alphabetic) {
        loop {
            while i < text.len()
                && (text[i].is_ascii_whitespace() || text[i] == b'(' || text[i] == b';')
            {
                i += 1;
            }
            if text[i..].starts_with(b"--") {
                while i < text.len() && text[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            if text[i..].starts_with(b"/*") {
                match text[i + 2..].windows(2).position(|w| w == b"*/") {
                    Some(p) => i += p + 4,
                    None => i = text.len(),
                }
                continue;
            }
            break;
        }
    }
    let t = &text[i..];
    // Eight bytes at once: a keyword of the list (at most 8 letters) followed by a byte that ends it.
    let (n, w) = keyword8(t);
    if n < 8 {
        if n == 0 {
            return Cow::Borrowed("OTHER");
        }
        if let Some(k) = SQL_VERB_WORDS.iter().position(|&v| v == w) {
            return Cow::Borrowed(SQL_VERBS[k]);
        }
        return Cow::Owned(String::from_utf8_lossy(&t[..n].to_ascii_uppercase()).into_owned());
    }
    // The keyword (at most 24 letters or underscores), upper-cased as it is read.
    let mut up = [0u8; 24];
    let mut n = 0;
    for &c in t.iter().take(up.len()) {
        if !(c.is_ascii_alphabetic() || c == b'_') {
            break;
        }
        up[n] = c.to_ascii_uppercase();
        n += 1;
    }
    let word = &up[..n];
    match SQL_VERBS.iter().find(|v| v.as_bytes() == word) {
        Some(v) => Cow::Borrowed(v),
        None => Cow::Owned(String::from_utf8_lossy(word).into_owned()),
    }
}

/// [`sql_verb`] of a statement when its first 8 bytes alone decide it (the statement starts with a listed
/// keyword of fewer than 8 letters: SELECT, INSERT, ...), with those 8 bytes as a little-endian number: a
/// statement with the same first 8 bytes has the same verb, so a caller may keep the pair and compare 8 bytes
/// the next time. None for a statement shorter than 8 bytes or one that needs [`sql_verb`].
#[inline]
pub(crate) fn sql_verb8(text: &[u8]) -> Option<(u64, &'static str)> {
    let b: [u8; 8] = text.get(..8)?.try_into().ok()?;
    if !b[0].is_ascii_alphabetic() {
        return None;
    }
    let (n, w) = keyword8(&b);
    if n >= 8 {
        return None;
    }
    let k = SQL_VERB_WORDS.iter().position(|&v| v == w)?;
    Some((u64::from_le_bytes(b), SQL_VERBS[k]))
}

/// How many of the first 8 bytes of `t` are ASCII letters or underscores before the first that is not (8: all
/// of them), and those bytes upper-cased as a little-endian number (the others zero). Bytewise arithmetic on
/// one u64 (no byte's sum carries into the next).
#[inline]
fn keyword8(t: &[u8]) -> (usize, u64) {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const ONES: u64 = 0x0101_0101_0101_0101;
    let x = match t.get(..8) {
        Some(b) => u64::from_le_bytes(b.try_into().expect("8 bytes")),
        None => {
            let mut b = [0u8; 8];
            b[..t.len()].copy_from_slice(t);
            u64::from_le_bytes(b)
        }
    };
    // ASCII letters differ from their capitals in bit 5 only.
    let up = x & !(0x20 * ONES);
    let low = up & LOW7;
    let at_least_a = (low + (0x80 - b'A' as u64) * ONES) & HIGH;
    let past_z = (low + (0x80 - b'Z' as u64 - 1) * ONES) & HIGH;
    let letter = at_least_a & !past_z & !x;
    // Underscores: the bytes equal to '_' are the zero bytes of x ^ '_'.
    let y = x ^ (b'_' as u64 * ONES);
    let underscore = !(((y & LOW7) + LOW7) | y) & HIGH;
    let ok = letter | underscore;
    let n = ((!ok & HIGH).trailing_zeros() / 8) as usize;
    let w = if n >= 8 {
        up
    } else {
        up & ((1u64 << (8 * n)) - 1)
    };
    (n.min(8), w)
}

/// [`SQL_VERBS`] as the little-endian numbers of their bytes padded with zeros to 8 (each at most 8 long).
const SQL_VERB_WORDS: [u64; SQL_VERBS.len()] = words8(SQL_VERBS);

/// `names` as the little-endian numbers of their bytes, padded with zeros to 8 (each at most 8 long): a name
/// read 8 bytes at once is then compared as one number.
pub(crate) const fn words8<const N: usize>(names: [&str; N]) -> [u64; N] {
    let mut w = [0u64; N];
    let mut k = 0;
    while k < N {
        let b = names[k].as_bytes();
        assert!(b.len() <= 8);
        let mut j = 0;
        while j < b.len() {
            w[k] |= (b[j] as u64) << (8 * j);
            j += 1;
        }
        k += 1;
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_verbs() {
        assert_eq!(sql_verb(b"  select 1"), "SELECT");
        assert_eq!(sql_verb(b"/* hi */ INSERT into t"), "INSERT");
        assert_eq!(sql_verb(b"-- c\nupdate x"), "UPDATE");
        assert_eq!(sql_verb(b"(select 1)"), "SELECT");
        assert_eq!(sql_verb(b""), "OTHER");
        assert_eq!(sql_verb(b"/* unterminated"), "OTHER");
        assert_eq!(sql_verb(b"123"), "OTHER");
        // Every listed keyword is the list's own string; longer words and near misses are spelled out.
        for v in SQL_VERBS {
            let got = sql_verb(v.to_ascii_lowercase().as_bytes());
            assert!(matches!(got, Cow::Borrowed(s) if s == v), "{v}");
        }
        assert_eq!(sql_verb(b"selects x"), "SELECTS");
        assert_eq!(sql_verb(b"truncated"), "TRUNCATED");
        assert_eq!(sql_verb(b"sel"), "SEL");
        assert_eq!(
            sql_verb(b"vacuum_full_analyze_everything_now"),
            "VACUUM_FULL_ANALYZE_EVER"
        );
    }

    #[test]
    fn sql_verb8_agrees_with_sql_verb() {
        let mut cases: Vec<Vec<u8>> = vec![b"SELECT abalance FROM x".to_vec(), b"select".to_vec()];
        for v in SQL_VERBS {
            for tail in [
                &b" x = 1"[..],
                b"_x y z w",
                b"s abc de",
                b"(1,2,3)",
                b"\0\0\0\0\0\0\0",
            ] {
                let mut c = v.to_ascii_lowercase().into_bytes();
                c.extend_from_slice(tail);
                cases.push(c.clone());
                cases.push(c.to_ascii_uppercase());
                cases.push([b" ", &c[..]].concat());
            }
        }
        for pos in 0..8 {
            for b in 0..=255u8 {
                let mut c = b"select x".to_vec();
                c[pos] = b;
                cases.push(c);
            }
        }
        let mut hits = 0;
        for c in &cases {
            if let Some((key, v)) = sql_verb8(c) {
                hits += 1;
                assert_eq!(key.to_le_bytes(), c[..8], "{c:?}");
                assert!(matches!(sql_verb(c), Cow::Borrowed(s) if s == v), "{c:?}");
                // Whatever follows the 8 bytes, the verb is the same.
                let mut longer = c[..8].to_vec();
                longer.extend_from_slice(b"zzzz_y(");
                assert_eq!(sql_verb(&longer), v, "{c:?}");
            }
        }
        assert!(hits > 100, "{hits}");
        assert_eq!(
            sql_verb8(b"SELECT 1"),
            Some((u64::from_le_bytes(*b"SELECT 1"), "SELECT"))
        );
        assert_eq!(sql_verb8(b"SELECT"), None);
        assert_eq!(sql_verb8(b" SELECT 1"), None);
        assert_eq!(sql_verb8(b"ROLLBACK"), None);
        assert_eq!(sql_verb8(b"SELECTED x"), None);
    }

    /// The keyword as a byte loop reads it: at most 24 letters or underscores, upper-cased.
    fn keyword_by_loop(t: &[u8]) -> String {
        t.iter()
            .take(24)
            .take_while(|c| c.is_ascii_alphabetic() || **c == b'_')
            .map(|c| c.to_ascii_uppercase() as char)
            .collect()
    }

    #[test]
    fn sql_verb_reads_the_keyword_as_a_byte_loop_does() {
        let alphabet = [
            b'a', b'Z', b'_', b' ', b'@', b'[', b'`', b'{', b'0', 0x7f, 0xc1, 0xe1, 0xdf, 0x5f,
            0x00,
        ];
        let mut cases: Vec<Vec<u8>> = Vec::new();
        for v in SQL_VERBS {
            for cut in 1..=v.len() {
                for &next in &alphabet {
                    let mut c = v.as_bytes()[..cut].to_vec();
                    c.push(next);
                    cases.push(c.clone());
                    cases.push(c.to_ascii_lowercase());
                }
            }
        }
        // Every byte at every place of a short word.
        for pos in 0..10 {
            for b in 0..=255u8 {
                let mut c = b"selectfrom".to_vec();
                c[pos] = b;
                cases.push(c.clone());
                cases.push(c[..pos + 1].to_vec());
            }
        }
        cases.push(b"abcdefghijklmnopqrstuvwxyzabc".to_vec());
        for c in cases {
            if !c.first().is_some_and(u8::is_ascii_alphabetic) {
                continue;
            }
            let want = keyword_by_loop(&c);
            let got = sql_verb(&c);
            assert_eq!(got, want, "{c:?}");
            if let Some(v) = SQL_VERBS.iter().find(|v| **v == want) {
                assert!(matches!(got, Cow::Borrowed(s) if s == *v));
            }
        }
    }

    #[test]
    fn proto_names_round_trip() {
        for p in Proto::ALL {
            assert_eq!(Proto::parse(p.name()), Some(p));
        }
        assert_eq!(Proto::parse("postgresql"), Some(Proto::Pgsql));
        assert_eq!(Proto::parse("smtp"), None);
    }
}

#[cfg(test)]
mod tests_fixtures;

/// Drives a fresh matcher of `proto` from a byte script, for fuzzing and randomised tests: the first byte picks
/// TCP or UDP (bit 0) and, for TCP, whether the matcher is wrapped in a [`Fingerprint`] (bit 1); then each step is a control byte (bit 7: direction, bit 6: a gap instead of data, bits 0-5:
/// length) followed by that many data bytes. Never panics, whatever the bytes.
pub fn replay(proto: Proto, script: &[u8]) -> Out {
    replay_into(|carrier| proto.matcher(carrier), script)
}

/// [`replay`] into the matcher `make` gives for the carrier the script picks.
pub fn replay_into(
    make: impl FnOnce(Carrier) -> Box<dyn ConnMatcher + Send>,
    script: &[u8],
) -> Out {
    let Some((&first, mut rest)) = script.split_first() else {
        return Out::default();
    };
    let carrier = if first & 1 == 0 {
        Carrier::Tcp
    } else {
        Carrier::Udp
    };
    let mut m = make(carrier);
    if carrier == Carrier::Tcp && first & 2 != 0 {
        m = Box::new(Fingerprint::new(m));
    }
    let mut out = Out::default();
    let mut seq = [0u32; 2];
    let mut t = 0u64;
    while let Some((&ctl, tail)) = rest.split_first() {
        t += 1;
        let ts = Duration::from_micros(t);
        let dir = if ctl & 0x80 == 0 {
            Dir::Request
        } else {
            Dir::Response
        };
        let len = (ctl & 0x3f) as usize;
        if ctl & 0x40 != 0 {
            let gap = len as u64 * 97;
            m.on_gap(dir, ts, gap, &mut out);
            seq[dir.index()] = seq[dir.index()].wrapping_add(gap as u32);
            rest = tail;
            continue;
        }
        let n = len.min(tail.len());
        m.on_data(dir, ts, seq[dir.index()], &tail[..n], &mut out);
        seq[dir.index()] = seq[dir.index()].wrapping_add(n as u32);
        rest = &tail[n..];
    }
    m.on_close(Duration::from_micros(t + 1), &mut out);
    out
}
