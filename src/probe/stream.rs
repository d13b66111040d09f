//! What the streaming engines ([`throughput`](super::throughput), [`load`](super::load)) share on top of the
//! link ([`super::link`]: connecting, the hello, the error type): message framing on a TCP byte stream, sends
//! that never block past a deadline, message sizes and payloads, and the server's receive counts.

use super::link::{Conn, LinkError, SocketSetup, Transport, io_error, is_timeout};
use crate::wire::sockperf::{
    self, Control, Flags, HEADER_LEN, Header, MAX_MESSAGE_LEN, MAX_UDP_MESSAGE_LEN,
};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A streaming run failed or was cut short: the client link layer's error.
pub type StreamError = LinkError;

/// How a streaming engine sets up its sockets: reads and writes time out after `poll` so loops can check
/// their deadlines; TCP with Nagle off when `nodelay`.
pub(crate) fn socket_setup(nodelay: bool, poll: Duration) -> SocketSetup {
    SocketSetup {
        nodelay,
        read_timeout: poll,
        write_timeout: Some(poll),
        udp_recv_buffer: 4 << 20,
    }
}

/// Splits a TCP byte stream into messages. The payload of a message the caller does not need whole is
/// skipped without being kept, so memory stays at one buffer whatever the peer sends.
pub(crate) struct Framer {
    buf: Vec<u8>,
    start: usize,
    filled: usize,
    /// Messages longer than this are counted from their header and skipped, not returned whole.
    keep_up_to: usize,
    skip: usize,
    /// Data messages and bytes seen (including skipped ones).
    pub messages: u64,
    /// Bytes of those messages.
    pub bytes: u64,
    /// Sequence number of the last data message seen.
    pub last_seq: u64,
    /// Counters to keep up to date as data messages are seen, for a live view from another thread.
    pub live: Option<std::sync::Arc<Counter>>,
}

/// Messages and bytes, updated by a worker and read by the thread that reports intervals.
#[derive(Debug, Default)]
pub(crate) struct Counter {
    pub messages: std::sync::atomic::AtomicU64,
    pub bytes: std::sync::atomic::AtomicU64,
}

impl Counter {
    pub(crate) fn add(&self, bytes: u64) {
        self.messages.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    pub(crate) fn get(&self) -> (u64, u64) {
        (
            self.messages.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

impl Framer {
    /// A framer that returns messages up to `keep_up_to` bytes whole.
    pub(crate) fn new(keep_up_to: usize) -> Self {
        Framer {
            buf: vec![0u8; 256 * 1024],
            start: 0,
            filled: 0,
            keep_up_to: keep_up_to.max(sockperf::MAX_CONTROL_LEN),
            skip: 0,
            messages: 0,
            bytes: 0,
            last_seq: 0,
            live: None,
        }
    }

    /// Returns the next message kept whole (control messages and short ones), reading as needed. Longer
    /// messages are counted and skipped. `Ok(None)` when `deadline` passed or `stop` was set with nothing to
    /// return; errors when the peer closes, sends garbage or stays silent past the deadline.
    pub(crate) fn next_message<'a>(
        &'a mut self,
        s: &mut TcpStream,
        addr: SocketAddr,
        deadline: Instant,
        stop: Option<&AtomicBool>,
    ) -> Result<Option<&'a [u8]>, StreamError> {
        loop {
            // Drop skipped payload first.
            if self.skip > 0 {
                let k = self.skip.min(self.filled - self.start);
                self.start += k;
                self.skip -= k;
            }
            while self.skip == 0 && self.filled - self.start >= HEADER_LEN {
                let h = Header::parse(&self.buf[self.start..self.filled], MAX_MESSAGE_LEN)
                    .map_err(|e| StreamError::Protocol {
                        addr,
                        detail: e.to_string(),
                    })?;
                let len = h.len as usize;
                let have = self.filled - self.start;
                if h.seq != sockperf::HELLO_SEQ && (len > self.keep_up_to || have >= len) {
                    self.messages += 1;
                    self.bytes += len as u64;
                    self.last_seq = h.seq;
                    if let Some(c) = &self.live {
                        c.add(len as u64);
                    }
                }
                if len > self.keep_up_to {
                    if have >= len {
                        self.start += len;
                    } else {
                        self.skip = len - have;
                        self.start = self.filled;
                    }
                    continue;
                }
                if have < len {
                    break;
                }
                let at = self.start;
                self.start += len;
                return Ok(Some(&self.buf[at..at + len]));
            }
            if self.start > 0 {
                self.buf.copy_within(self.start..self.filled, 0);
                self.filled -= self.start;
                self.start = 0;
            }
            if Instant::now() >= deadline || stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                return Ok(None);
            }
            match s.read(&mut self.buf[self.filled..]) {
                Ok(0) => return Err(StreamError::Closed { addr }),
                Ok(n) => self.filled += n,
                Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error("receiving from", Transport::Tcp, addr, e)),
            }
        }
    }
}

/// How a bounded send ended.
pub(crate) enum Sent {
    /// The whole message went out.
    All,
    /// `stop` was set or the deadline passed before the whole message went out; the stream is no longer
    /// at a message boundary. Holds how long sends had made no progress.
    Cut(Duration),
}

/// Writes all of `msg` unless `stop` is set or `deadline` passes first. The socket must have a write timeout
/// so a peer that stops reading cannot block this past the deadline. `blocked_since` holds when sends
/// stopped making progress (cleared on every accepted byte).
pub(crate) fn send_bounded(
    s: &mut TcpStream,
    msg: &[u8],
    addr: SocketAddr,
    stop: &AtomicBool,
    deadline: Option<Instant>,
    blocked_since: &mut Option<Instant>,
) -> Result<Sent, StreamError> {
    let mut off = 0;
    while off < msg.len() {
        match s.write(&msg[off..]) {
            Ok(0) => return Err(StreamError::Closed { addr }),
            Ok(n) => {
                off += n;
                *blocked_since = None;
            }
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {
                let since = *blocked_since.get_or_insert_with(Instant::now);
                if stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(Sent::Cut(since.elapsed()));
                }
            }
            Err(e) => return Err(io_error("sending to", Transport::Tcp, addr, e)),
        }
    }
    Ok(Sent::All)
}

/// Checks a message size for a transport.
pub(crate) fn check_size(size: usize, transport: Transport) -> Result<(), StreamError> {
    let max = match transport {
        Transport::Tcp => MAX_MESSAGE_LEN,
        Transport::Udp => MAX_UDP_MESSAGE_LEN,
    };
    if size < HEADER_LEN || size > max {
        return Err(StreamError::Invalid(format!(
            "message size {size} is not between {} and {} for {transport} (the size includes the 14-byte sockperf header)",
            crate::units::fmt_bytes_exact(HEADER_LEN as u64),
            crate::units::fmt_bytes_exact(max as u64)
        )));
    }
    Ok(())
}

/// A message of `size` bytes with a recognisable payload (not zeros: compressing links would flatter zeros).
pub(crate) fn payload(size: usize) -> Vec<u8> {
    let mut out = vec![0u8; size];
    for (i, b) in out.iter_mut().enumerate().skip(HEADER_LEN) {
        *b = (i as u8).wrapping_mul(31).wrapping_add(7);
    }
    out
}

/// Asks a roundtrip server what it received from this connection or socket since the hello.
pub(crate) fn request_counts(
    conn: &mut Conn,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<Option<(u64, u64)>, StreamError> {
    let req = Control::CountsRequest.encode(Flags::CLIENT.with(Flags::PONG_REQUEST));
    match conn {
        Conn::Tcp(s) => {
            s.write_all(&req)
                .map_err(|e| io_error("sending to", Transport::Tcp, addr, e))?;
            let mut framer = Framer::new(sockperf::CONTROL_LEN);
            let deadline = Instant::now() + timeout;
            while let Some(m) = framer.next_message(s, addr, deadline, None)? {
                if let Some(Control::Counts { messages, bytes }) = Control::decode(m) {
                    return Ok(Some((messages, bytes)));
                }
            }
            Ok(None)
        }
        Conn::Udp(s) => {
            let mut buf = vec![0u8; MAX_UDP_MESSAGE_LEN + 1];
            // Let datagrams still in flight arrive first.
            std::thread::sleep(Duration::from_millis(50));
            for _ in 0..3 {
                s.send(&req)
                    .map_err(|e| io_error("sending to", Transport::Udp, addr, e))?;
                let deadline = Instant::now() + timeout.min(Duration::from_millis(700));
                while Instant::now() < deadline {
                    match s.recv(&mut buf) {
                        Ok(n) => {
                            if let Some(Control::Counts { messages, bytes }) =
                                Control::decode(&buf[..n])
                            {
                                return Ok(Some((messages, bytes)));
                            }
                        }
                        Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(io_error("receiving from", Transport::Udp, addr, e)),
                    }
                }
            }
            Ok(None)
        }
    }
}
