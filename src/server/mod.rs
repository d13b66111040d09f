//! The responder: `roundtrip server`, speaking the sockperf 3.x message format on TCP and UDP.
//!
//! One thread accepts TCP clients and one thread per client answers them; one thread answers UDP. Each TCP
//! client gets a buffer that grows with the largest message it announces, never beyond
//! [`MAX_MESSAGE_LEN`]. A client that sends a malformed header is
//! dropped and the others keep being served. The server never prints: it reports [`ServerEvent`]s.
//!
//! Beyond the sockperf behaviour it serves roundtrip's negotiated extensions (see [`crate::wire::sockperf`]):
//! receive counts, and reverse streams (TCP on the client's connection; UDP from a thread per client, at most
//! 16 at once, each at most an hour).

use crate::wire::sockperf::{
    self, Control, Feature, Flags, HEADER_LEN, Header, Hello, HelloKind, MAX_MESSAGE_LEN,
    MAX_UDP_MESSAGE_LEN,
};
use socket2::{Domain, Protocol, SockRef, Socket, Type};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use thiserror::Error;

/// What the server should listen on.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to bind; `None` binds every address (IPv6 dual-stack, or IPv4 when IPv6 is unavailable).
    pub bind: Option<IpAddr>,
    /// Port for both TCP and UDP; 0 lets the system pick one (the same for both).
    pub port: u16,
    /// Serve TCP.
    pub tcp: bool,
    /// Serve UDP.
    pub udp: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: None,
            port: sockperf::DEFAULT_PORT,
            tcp: true,
            udp: true,
        }
    }
}

/// Something that happened in the server, for the caller to log.
#[derive(Debug, Clone)]
pub enum ServerEvent {
    /// A TCP client connected.
    Connected {
        /// The client's address.
        peer: SocketAddr,
    },
    /// A TCP client went away or was dropped.
    Disconnected {
        /// The client's address.
        peer: SocketAddr,
        /// Messages received from it.
        messages: u64,
        /// Bytes received from it.
        bytes: u64,
        /// Why it was dropped, when it was not a clean close.
        reason: Option<String>,
    },
    /// A UDP datagram was malformed and ignored.
    BadDatagram {
        /// The sender.
        peer: SocketAddr,
        /// What was wrong.
        detail: String,
    },
}

/// A server could not start.
#[derive(Debug, Error)]
pub enum ServerError {
    /// Binding the listening socket failed.
    #[error(
        "cannot listen on {proto} {addr}: {source} (is another server using the port? try --port)"
    )]
    Bind {
        /// "tcp" or "udp".
        proto: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The system's error.
        source: io::Error,
    },
    /// Neither TCP nor UDP was asked for.
    #[error("nothing to serve: enable TCP or UDP")]
    NothingToServe,
}

type EventSink = Arc<dyn Fn(ServerEvent) + Send + Sync>;

/// A running server; dropping it stops it.
pub struct ServerHandle {
    tcp_addr: Option<SocketAddr>,
    udp_addr: Option<SocketAddr>,
    stop: Arc<AtomicBool>,
    clients: Arc<Mutex<HashMap<u64, TcpStream>>>,
    threads: Vec<JoinHandle<()>>,
    answered: Arc<AtomicU64>,
}

impl ServerHandle {
    /// The TCP address actually bound.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp_addr
    }
    /// The UDP address actually bound.
    pub fn udp_addr(&self) -> Option<SocketAddr> {
        self.udp_addr
    }
    /// Messages answered so far, TCP and UDP together.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }
    /// Stops accepting, closes every client and waits for the threads.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        if self.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(addr) = self.tcp_addr {
            // Wake the accept loop.
            let _ = TcpStream::connect_timeout(&wake_addr(addr), Duration::from_millis(200));
        }
        for (_, s) in self.clients.lock().expect("client list").drain() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// The address to reach a socket bound to `addr` from this host (unspecified becomes loopback).
fn wake_addr(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::from([127, 0, 0, 1]),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

fn bind_socket(addr: SocketAddr, ty: Type) -> io::Result<Socket> {
    let proto = if ty == Type::STREAM {
        Protocol::TCP
    } else {
        Protocol::UDP
    };
    let sock = Socket::new(Domain::for_address(addr), ty, Some(proto))?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        sock.set_only_v6(false)?;
    }
    if ty == Type::STREAM {
        sock.set_reuse_address(true)?;
    }
    sock.bind(&addr.into())?;
    Ok(sock)
}

/// Binds TCP and UDP on one port; with port 0 the UDP socket takes the port TCP was given.
fn bind_pair(
    ip: IpAddr,
    config: &ServerConfig,
) -> Result<(Option<Socket>, Option<Socket>), ServerError> {
    let mut port = config.port;
    let tcp = if config.tcp {
        let addr = SocketAddr::new(ip, port);
        let s = bind_socket(addr, Type::STREAM).map_err(|source| ServerError::Bind {
            proto: "tcp",
            addr,
            source,
        })?;
        s.listen(1024).map_err(|source| ServerError::Bind {
            proto: "tcp",
            addr,
            source,
        })?;
        port = s
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .map_or(port, |a| a.port());
        Some(s)
    } else {
        None
    };
    let udp = if config.udp {
        let addr = SocketAddr::new(ip, port);
        Some(
            bind_socket(addr, Type::DGRAM).map_err(|source| ServerError::Bind {
                proto: "udp",
                addr,
                source,
            })?,
        )
    } else {
        None
    };
    Ok((tcp, udp))
}

/// Starts a server; events are passed to `events` from the server's threads.
pub fn start(
    config: &ServerConfig,
    events: impl Fn(ServerEvent) + Send + Sync + 'static,
) -> Result<ServerHandle, ServerError> {
    if !config.tcp && !config.udp {
        return Err(ServerError::NothingToServe);
    }
    let events: EventSink = Arc::new(events);
    let (tcp, udp) = match config.bind {
        Some(ip) => bind_pair(ip, config)?,
        None => match bind_pair(IpAddr::V6(Ipv6Addr::UNSPECIFIED), config) {
            Ok(pair) => pair,
            Err(ServerError::Bind { source, .. })
                if source.kind() == io::ErrorKind::AddrNotAvailable
                    || source.raw_os_error() == Some(libc::EAFNOSUPPORT) =>
            {
                bind_pair(IpAddr::from([0, 0, 0, 0]), config)?
            }
            Err(e) => return Err(e),
        },
    };
    let stop = Arc::new(AtomicBool::new(false));
    let clients = Arc::new(Mutex::new(HashMap::new()));
    let answered = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    let mut tcp_addr = None;
    let mut udp_addr = None;
    if let Some(sock) = tcp {
        let listener: TcpListener = sock.into();
        tcp_addr = listener.local_addr().ok();
        let (stop, clients, events, answered) = (
            stop.clone(),
            clients.clone(),
            events.clone(),
            answered.clone(),
        );
        threads.push(
            std::thread::Builder::new()
                .name("tcp-accept".into())
                .spawn(move || accept_loop(listener, stop, clients, events, answered))
                .expect("spawn accept thread"),
        );
    }
    if let Some(sock) = udp {
        let udp: UdpSocket = sock.into();
        udp_addr = udp.local_addr().ok();
        let _ = udp.set_read_timeout(Some(Duration::from_millis(200)));
        let (stop, events, answered) = (stop.clone(), events.clone(), answered.clone());
        threads.push(
            std::thread::Builder::new()
                .name("udp".into())
                .spawn(move || udp_loop(udp, stop, events, answered))
                .expect("spawn udp thread"),
        );
    }
    Ok(ServerHandle {
        tcp_addr,
        udp_addr,
        stop,
        clients,
        threads,
        answered,
    })
}

fn accept_loop(
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    clients: Arc<Mutex<HashMap<u64, TcpStream>>>,
    events: EventSink,
    answered: Arc<AtomicU64>,
) {
    let mut next_id = 0u64;
    let mut workers: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let (stream, peer) = match listener.accept() {
            Ok(pair) => pair,
            Err(_) => {
                // EMFILE and friends: back off instead of spinning.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let _ = stream.set_nodelay(true);
        next_id += 1;
        let id = next_id;
        if let Ok(clone) = stream.try_clone() {
            clients.lock().expect("client list").insert(id, clone);
        }
        events(ServerEvent::Connected { peer });
        let (clients, events, answered, stop) = (
            clients.clone(),
            events.clone(),
            answered.clone(),
            stop.clone(),
        );
        workers.retain(|w| !w.is_finished());
        workers.push(
            std::thread::Builder::new()
                .name(format!("tcp-{peer}"))
                .spawn(move || {
                    let (messages, bytes, reason) = serve_tcp(stream, &answered, &stop);
                    clients.lock().expect("client list").remove(&id);
                    events(ServerEvent::Disconnected {
                        peer,
                        messages,
                        bytes,
                        reason,
                    });
                })
                .expect("spawn client thread"),
        );
    }
    for w in workers {
        let _ = w.join();
    }
}

fn realtime_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Rewrites a request in place into its answer; returns false when it needs no answer.
fn make_answer(msg: &mut [u8], header: &Header, recv_ns: u64) -> bool {
    if !header.wants_answer() {
        return false;
    }
    if header.seq == sockperf::HELLO_SEQ
        && let Some(hello) = Hello::decode(msg)
        && hello.kind == HelloKind::Request
    {
        let ack = Hello {
            kind: HelloKind::Ack,
            version: sockperf::EXTENSION_VERSION,
            features: Feature(hello.features.0 & Feature::ALL.0),
        }
        .encode(Flags::PONG_REQUEST);
        let n = ack.len().min(msg.len());
        msg[..n].copy_from_slice(&ack[..n]);
        return true;
    }
    let flags = header.flags.without(Flags::CLIENT);
    msg[8..10].copy_from_slice(&flags.0.to_be_bytes());
    if header.flags.contains(Flags::RT_TIMESTAMPS) {
        sockperf::write_server_timestamps(msg, recv_ns, realtime_ns());
    }
    true
}

/// The extension control message a client sent, when it is one this server acts on.
fn control_of(msg: &[u8], header: &Header) -> Option<Control> {
    if header.seq != sockperf::HELLO_SEQ || !header.wants_answer() {
        return None;
    }
    match Control::decode(msg)? {
        c @ (Control::CountsRequest | Control::ReverseRequest { .. }) => Some(c),
        _ => None,
    }
}

/// Messages and bytes received from one client since its hello (for [`Control::Counts`]).
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    messages: u64,
    bytes: u64,
}

/// The message a reverse stream repeats: a recognisable payload, flags 0.
fn reverse_message(size: u32) -> Vec<u8> {
    let size = (size as usize).clamp(HEADER_LEN, MAX_MESSAGE_LEN);
    let mut m = vec![0u8; size];
    for (i, b) in m.iter_mut().enumerate().skip(HEADER_LEN) {
        *b = (i as u8).wrapping_mul(31).wrapping_add(7);
    }
    m
}

/// Streams messages to a TCP client for `duration` (bounded by [`sockperf::MAX_REVERSE_DURATION`]), then
/// sends the end marker. A client that stops reading for 2 s ends the stream with an error.
fn reverse_tcp(
    stream: &mut TcpStream,
    size: u32,
    duration: Duration,
    stop: &AtomicBool,
) -> io::Result<()> {
    let mut m = reverse_message(size);
    let len = m.len() as u32;
    let end = std::time::Instant::now() + duration.min(sockperf::MAX_REVERSE_DURATION);
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    let (mut messages, mut seq) = (0u64, 0u64);
    while std::time::Instant::now() < end && !stop.load(Ordering::Relaxed) {
        seq += 1;
        Header {
            seq,
            flags: Flags(0),
            len,
        }
        .write(&mut m);
        stream.write_all(&m)?;
        messages += 1;
    }
    let bytes = messages * u64::from(len);
    stream.write_all(&Control::ReverseEnd { messages, bytes }.encode(Flags(0)))?;
    stream.set_write_timeout(None)
}

/// Answers one TCP client until it leaves; returns messages, bytes and the reason it was dropped.
///
/// Messages that need no answer are counted from their header and their payload is skipped without being
/// copied, so a streaming client costs one read per buffer. The answers to the messages of one read are
/// written together.
fn serve_tcp(
    mut stream: TcpStream,
    answered: &AtomicU64,
    stop: &AtomicBool,
) -> (u64, u64, Option<String>) {
    let mut buf = vec![0u8; 256 * 1024];
    let mut answers: Vec<u8> = Vec::new();
    let mut filled = 0usize;
    // Payload bytes of the current unanswered message still to be read and dropped.
    let mut skip = 0usize;
    let (mut messages, mut bytes) = (0u64, 0u64);
    let mut counts = Counts::default();
    loop {
        let n = match stream.read(&mut buf[filled..]) {
            Ok(0) => {
                let pending = filled + skip;
                let reason =
                    (pending > 0).then(|| format!("closed mid-message ({pending} bytes pending)"));
                return (messages, bytes, reason);
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // sockperf clients end with a reset: that is a normal end, not a fault.
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset && filled == 0 => {
                return (messages, bytes, None);
            }
            Err(e) => return (messages, bytes, Some(format!("read failed: {e}"))),
        };
        let recv_ns = realtime_ns();
        bytes += n as u64;
        filled += n;
        let mut start = skip.min(filled);
        skip -= start;
        let mut reverse = None;
        while filled - start >= HEADER_LEN {
            let header = match Header::parse(&buf[start..filled], MAX_MESSAGE_LEN) {
                Ok(h) => h,
                Err(e) => return (messages, bytes, Some(format!("protocol error: {e}"))),
            };
            let len = header.len as usize;
            if !header.wants_answer() {
                // Streamed data: count it, drop it.
                messages += 1;
                counts.messages += 1;
                counts.bytes += len as u64;
                let have = filled - start;
                if have >= len {
                    start += len;
                } else {
                    skip = len - have;
                    start = filled;
                }
                continue;
            }
            if filled - start < len {
                if len > buf.len() {
                    buf.resize(len, 0);
                }
                break;
            }
            messages += 1;
            let msg = &mut buf[start..start + len];
            match control_of(msg, &header) {
                Some(Control::CountsRequest) => {
                    answers.extend_from_slice(
                        &Control::Counts {
                            messages: counts.messages,
                            bytes: counts.bytes,
                        }
                        .encode(Flags::PONG_REQUEST),
                    );
                    answered.fetch_add(1, Ordering::Relaxed);
                }
                Some(Control::ReverseRequest { size, duration }) => {
                    reverse = Some((size, duration));
                }
                _ => {
                    if Hello::decode(msg).is_some_and(|h| h.kind == HelloKind::Request) {
                        counts = Counts::default();
                    } else if header.seq != sockperf::HELLO_SEQ {
                        counts.messages += 1;
                        counts.bytes += len as u64;
                    }
                    if make_answer(msg, &header, recv_ns) {
                        answers.extend_from_slice(msg);
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            start += len;
            if reverse.is_some() {
                break;
            }
        }
        if start > 0 {
            buf.copy_within(start..filled, 0);
            filled -= start;
        }
        if !answers.is_empty() {
            if let Err(e) = stream.write_all(&answers) {
                return (messages, bytes, Some(format!("write failed: {e}")));
            }
            answers.clear();
        }
        if let Some((size, duration)) = reverse
            && let Err(e) = reverse_tcp(&mut stream, size, duration, stop)
        {
            return (messages, bytes, Some(format!("reverse stream failed: {e}")));
        }
    }
}

/// Most UDP clients whose counts are kept at once; the oldest entry is forgotten beyond this.
const MAX_UDP_COUNTED: usize = 4096;
/// Most reverse UDP streams running at once.
const MAX_UDP_REVERSE: usize = 16;

/// Streams datagrams to `peer` for `duration`, then sends the end marker three times, 10 ms apart.
fn reverse_udp(
    sock: &UdpSocket,
    peer: SocketAddr,
    size: u32,
    duration: Duration,
    stop: &AtomicBool,
) {
    let size = size.min(MAX_UDP_MESSAGE_LEN as u32);
    let mut m = reverse_message(size);
    let len = m.len() as u32;
    let end = std::time::Instant::now() + duration.min(sockperf::MAX_REVERSE_DURATION);
    let (mut messages, mut seq) = (0u64, 0u64);
    while std::time::Instant::now() < end && !stop.load(Ordering::Relaxed) {
        seq += 1;
        Header {
            seq,
            flags: Flags(0),
            len,
        }
        .write(&mut m);
        match sock.send_to(&m, peer) {
            Ok(_) => messages += 1,
            // The buffer was full: the datagram was not sent, which is not loss on the path; try again.
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => seq -= 1,
            Err(_) => break,
        }
    }
    let bytes = messages * u64::from(len);
    let end_msg = Control::ReverseEnd { messages, bytes }.encode(Flags(0));
    for _ in 0..3 {
        let _ = sock.send_to(&end_msg, peer);
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn udp_loop(sock: UdpSocket, stop: Arc<AtomicBool>, events: EventSink, answered: Arc<AtomicU64>) {
    let mut buf = vec![0u8; MAX_UDP_MESSAGE_LEN + 1];
    let mut bad_reported = 0u64;
    let _ = SockRef::from(&sock).set_recv_buffer_size(4 << 20);
    // Counts per client address that asked for them in its hello, with the order they came in.
    let mut counts: HashMap<SocketAddr, Counts> = HashMap::new();
    let mut counted_order: std::collections::VecDeque<SocketAddr> =
        std::collections::VecDeque::new();
    let reversing: Arc<Mutex<std::collections::HashSet<SocketAddr>>> = Arc::default();
    let mut reverse_threads: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let (n, peer) = match sock.recv_from(&mut buf) {
            Ok(pair) => pair,
            Err(_) => continue,
        };
        let recv_ns = realtime_ns();
        let bad = |detail: String, bad_reported: &mut u64| {
            // Report the first few, then one in a thousand, so a flood cannot flood the log.
            *bad_reported += 1;
            if *bad_reported <= 10 || (*bad_reported).is_multiple_of(1000) {
                events(ServerEvent::BadDatagram { peer, detail });
            }
        };
        let header = match Header::parse(&buf[..n], MAX_UDP_MESSAGE_LEN) {
            Ok(h) => h,
            Err(e) => {
                bad(e.to_string(), &mut bad_reported);
                continue;
            }
        };
        if header.len as usize != n {
            bad(
                sockperf::WireError::LengthMismatch {
                    got: n,
                    len: header.len,
                }
                .to_string(),
                &mut bad_reported,
            );
            continue;
        }
        let msg = &mut buf[..n];
        if header.seq != sockperf::HELLO_SEQ {
            if !counts.is_empty()
                && let Some(c) = counts.get_mut(&peer)
            {
                c.messages += 1;
                c.bytes += n as u64;
            }
        } else {
            match control_of(msg, &header) {
                Some(Control::CountsRequest) => {
                    if let Some(c) = counts.get(&peer) {
                        let m = Control::Counts {
                            messages: c.messages,
                            bytes: c.bytes,
                        }
                        .encode(Flags::PONG_REQUEST);
                        if sock.send_to(&m, peer).is_ok() {
                            answered.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    continue;
                }
                Some(Control::ReverseRequest { size, duration }) => {
                    reverse_threads.retain(|t| !t.is_finished());
                    let mut active = reversing.lock().expect("reverse list");
                    if active.contains(&peer) || active.len() >= MAX_UDP_REVERSE {
                        continue;
                    }
                    let Ok(clone) = sock.try_clone() else {
                        continue;
                    };
                    active.insert(peer);
                    drop(active);
                    let (stop, reversing) = (stop.clone(), reversing.clone());
                    if let Ok(t) = std::thread::Builder::new()
                        .name(format!("udp-reverse-{peer}"))
                        .spawn(move || {
                            reverse_udp(&clone, peer, size, duration, &stop);
                            reversing.lock().expect("reverse list").remove(&peer);
                        })
                    {
                        reverse_threads.push(t);
                    }
                    continue;
                }
                _ => {
                    if let Some(hello) = Hello::decode(msg)
                        && hello.kind == HelloKind::Request
                        && hello.features.contains(Feature::COUNTS)
                    {
                        if counts.insert(peer, Counts::default()).is_none() {
                            counted_order.push_back(peer);
                        }
                        while counts.len() > MAX_UDP_COUNTED {
                            match counted_order.pop_front() {
                                Some(old) => {
                                    counts.remove(&old);
                                }
                                None => break,
                            }
                        }
                    }
                }
            }
        }
        if make_answer(msg, &header, recv_ns) && sock.send_to(msg, peer).is_ok() {
            answered.fetch_add(1, Ordering::Relaxed);
        }
    }
    for t in reverse_threads {
        let _ = t.join();
    }
}
