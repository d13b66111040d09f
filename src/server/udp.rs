//! The UDP responder: one thread, blocking receives, bounded tables.
//!
//! No answer is larger than the datagram it answers until the sender proved it receives at its address: echoes
//! are the same size; the hello ack is no longer than the hello; a reverse stream starts only when the request
//! comes back with the cookie this server gave that address ([`crate::wire::auth::CookieJar`]). With a key, an
//! address must complete the key exchange (whose server nonce is such a cookie) before anything but the
//! exchange itself is answered.

use super::session::{answer_in_place, realtime_ns};
use super::{DatagramIssue, ServerEvent, Shared, pktinfo};
use crate::wire::auth;
use crate::wire::sockperf::{
    self, Control, Feature, Flags, HEADER_LEN, Header, Hello, HelloKind, MAX_UDP_MESSAGE_LEN,
    Refusal,
};
use socket2::SockRef;
use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Client addresses whose receive counts are kept at once; the oldest is forgotten beyond this.
const MAX_COUNTED: usize = 4096;
/// Addresses that proved the key, kept at once.
const MAX_AUTHENTICATED: usize = 65_536;
/// An authenticated address silent this long must prove the key again.
const AUTH_IDLE: Duration = Duration::from_secs(600);

pub(super) fn spawn(sock: UdpSocket, shared: Arc<Shared>) -> io::Result<JoinHandle<()>> {
    sock.set_read_timeout(Some(Duration::from_millis(200)))?;
    let pktinfo = pktinfo::enable(&sock)?;
    let _ = SockRef::from(&sock).set_recv_buffer_size(4 << 20);
    std::thread::Builder::new()
        .name("server-udp".into())
        .spawn(move || Udp::new(sock, shared, pktinfo).run())
}

/// A bounded map from address to value that forgets the oldest insertion when full.
struct Bounded<V> {
    map: HashMap<SocketAddr, V>,
    order: VecDeque<SocketAddr>,
    cap: usize,
}

impl<V> Bounded<V> {
    fn new(cap: usize) -> Self {
        Bounded {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap,
        }
    }
    fn insert(&mut self, k: SocketAddr, v: V) {
        if self.map.insert(k, v).is_none() {
            self.order.push_back(k);
        }
        while self.map.len() > self.cap {
            match self.order.pop_front() {
                Some(old) => {
                    self.map.remove(&old);
                }
                None => break,
            }
        }
        // Keep the order list from growing with keys removed elsewhere.
        if self.order.len() > 2 * self.cap {
            self.order.retain(|k| self.map.contains_key(k));
        }
    }
}

struct Udp {
    sock: UdpSocket,
    shared: Arc<Shared>,
    /// Data messages and bytes per address that asked for counts in its hello.
    counts: Bounded<(u64, u64)>,
    /// Addresses that proved the key, with when they were last heard.
    authenticated: Bounded<Instant>,
    /// Addresses with a reverse stream running.
    reversing: Arc<Mutex<HashSet<SocketAddr>>>,
    running: Arc<AtomicUsize>,
    threads: Vec<JoinHandle<()>>,
    last_expiry: Instant,
    /// Whether the socket reports each datagram's destination (bound to the unspecified address).
    pktinfo: bool,
    /// The address the datagram being answered was sent to: answers go out from it.
    reply_from: Option<IpAddr>,
}

impl Udp {
    fn new(sock: UdpSocket, shared: Arc<Shared>, pktinfo: bool) -> Self {
        Udp {
            sock,
            shared,
            counts: Bounded::new(MAX_COUNTED),
            authenticated: Bounded::new(MAX_AUTHENTICATED),
            reversing: Arc::default(),
            running: Arc::default(),
            threads: Vec::new(),
            last_expiry: Instant::now(),
            pktinfo,
            reply_from: None,
        }
    }

    fn event(&self, peer: SocketAddr, issue: DatagramIssue, detail: impl Into<String>) {
        (self.shared.events)(ServerEvent::Datagram {
            peer,
            issue,
            detail: detail.into(),
        });
    }

    fn send(&self, msg: &[u8], peer: SocketAddr) {
        if pktinfo::send(&self.sock, msg, peer, self.reply_from).is_ok() {
            self.shared.answered.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn run(&mut self) {
        let mut buf = vec![0u8; MAX_UDP_MESSAGE_LEN + 1];
        while !self.shared.stopping() {
            let received = if self.pktinfo {
                pktinfo::recv(&self.sock, &mut buf)
            } else {
                self.sock
                    .recv_from(&mut buf)
                    .map(|(n, peer)| (n, peer, None))
            };
            let Ok((n, peer, to)) = received else {
                continue;
            };
            self.reply_from = to;
            let recv_ns = realtime_ns();
            self.datagram(&mut buf[..n], peer, recv_ns);
            if self.last_expiry.elapsed() > Duration::from_secs(10) {
                self.expire();
            }
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    fn expire(&mut self) {
        let now = Instant::now();
        self.last_expiry = now;
        self.authenticated
            .map
            .retain(|_, seen| now.duration_since(*seen) < AUTH_IDLE);
        self.threads.retain(|t| !t.is_finished());
    }

    fn datagram(&mut self, msg: &mut [u8], peer: SocketAddr, recv_ns: u64) {
        let n = msg.len();
        let header = match Header::parse(msg, MAX_UDP_MESSAGE_LEN) {
            Ok(h) => h,
            Err(e) => return self.event(peer, DatagramIssue::Malformed, e.to_string()),
        };
        if header.len as usize != n {
            let e = sockperf::WireError::LengthMismatch {
                got: n,
                len: header.len,
            };
            return self.event(peer, DatagramIssue::Malformed, e.to_string());
        }
        let keyed = self.shared.psk.is_some();
        if header.seq == sockperf::HELLO_SEQ && header.wants_answer() {
            if let Some(hello) = Hello::decode(msg).filter(|h| h.kind == HelloKind::Request) {
                return self.hello(n, &hello, peer);
            }
            if let Some(control) = Control::decode(msg) {
                match control {
                    Control::Auth { .. } => return self.auth(n, control, peer),
                    _ if keyed && !self.proven(peer) => {
                        return self.event(
                            peer,
                            DatagramIssue::Unauthenticated,
                            "a control message before proving the key",
                        );
                    }
                    Control::CountsRequest => {
                        if let Some(&(messages, bytes)) = self.counts.map.get(&peer) {
                            self.send(
                                &Control::Counts { messages, bytes }.encode(Flags::PONG_REQUEST),
                                peer,
                            );
                        }
                        return;
                    }
                    Control::ReverseRequest {
                        size,
                        duration,
                        cookie,
                    } => return self.reverse(n, size, duration, cookie, peer),
                    // Anything else a client has no reason to send: echoed like any message.
                    _ => {}
                }
            }
        }
        if keyed && !self.proven(peer) {
            return self.event(
                peer,
                DatagramIssue::Unauthenticated,
                "a message before proving the key (this server has --psk-file)",
            );
        }
        if header.seq != sockperf::HELLO_SEQ
            && let Some(c) = self.counts.map.get_mut(&peer)
        {
            c.0 += 1;
            c.1 += n as u64;
        }
        if header.wants_answer() {
            answer_in_place(msg, &header, recv_ns);
            self.send(msg, peer);
        }
    }

    /// True when `peer` proved the key recently; refreshes its time.
    fn proven(&mut self, peer: SocketAddr) -> bool {
        match self.authenticated.map.get_mut(&peer) {
            Some(seen) => {
                *seen = Instant::now();
                true
            }
            None => false,
        }
    }

    fn hello(&mut self, n: usize, hello: &Hello, peer: SocketAddr) {
        if self.shared.psk.is_some() {
            if n < sockperf::HELLO_LEN {
                // A challenge would be larger than this request.
                return self.event(
                    peer,
                    DatagramIssue::TooShort,
                    "a version 1 hello cannot do the key exchange",
                );
            }
            let nonce = self.shared.jar.make(peer, self.shared.now_s());
            return self.send(
                &Control::Challenge { nonce }.encode(Flags::PONG_REQUEST),
                peer,
            );
        }
        let features = Feature(hello.features.0 & self.supported().0);
        if features.contains(Feature::COUNTS) {
            self.counts.insert(peer, (0, 0));
        }
        let ack = Hello {
            kind: HelloKind::Ack,
            version: sockperf::EXTENSION_VERSION,
            features,
            nonce: hello.nonce,
            proof: [0; auth::PROOF_LEN],
        }
        .encode(Flags::PONG_REQUEST);
        self.send(&ack[..n.min(ack.len())], peer);
    }

    fn supported(&self) -> Feature {
        // Replay is a TCP extension.
        Feature::MEASURE
    }

    fn auth(&mut self, n: usize, control: Control, peer: SocketAddr) {
        let Control::Auth {
            server_nonce,
            client_nonce,
            features,
            proof,
        } = control
        else {
            return;
        };
        let Some(psk) = self.shared.psk.clone() else {
            // No key here: nothing to prove; the client learns it from the ack of its hello.
            return;
        };
        let refuse = |this: &Self, reason, issue, detail: &str| {
            let m = Control::Refused {
                reason: Some(reason),
            }
            .encode(Flags(0));
            if m.len() <= n {
                this.send(&m, peer);
            }
            this.event(peer, issue, detail);
        };
        if !self
            .shared
            .jar
            .check(peer, &server_nonce, self.shared.now_s())
        {
            return refuse(
                self,
                Refusal::BadCookie,
                DatagramIssue::BadCookie,
                "its challenge was stale or made for another address",
            );
        }
        if !auth::verify_client_proof(&psk, &server_nonce, &client_nonce, features.0, &proof) {
            return refuse(
                self,
                Refusal::BadProof,
                DatagramIssue::BadProof,
                "its proof of the key was wrong (another key on the client?)",
            );
        }
        if self.authenticated.map.len() >= MAX_AUTHENTICATED
            && !self.authenticated.map.contains_key(&peer)
        {
            self.expire();
        }
        self.authenticated.insert(peer, Instant::now());
        let granted = Feature(features.0 & self.supported().0).with(Feature::PSK);
        if granted.contains(Feature::COUNTS) {
            self.counts.insert(peer, (0, 0));
        }
        let ack = Hello {
            kind: HelloKind::Ack,
            version: sockperf::EXTENSION_VERSION,
            features: granted,
            nonce: client_nonce,
            proof: auth::server_proof(&psk, &client_nonce, &server_nonce, granted.0),
        }
        .encode(Flags::PONG_REQUEST);
        debug_assert!(ack.len() <= n);
        self.send(&ack, peer);
    }

    fn reverse(
        &mut self,
        n: usize,
        size: u32,
        duration: Duration,
        cookie: Option<auth::Nonce>,
        peer: SocketAddr,
    ) {
        let limits = &self.shared.limits;
        let granted = duration.min(limits.max_reverse);
        let valid = cookie.is_some_and(|c| self.shared.jar.check(peer, &c, self.shared.now_s()));
        if !valid {
            let grant = Control::ReverseGrant {
                cookie: self.shared.jar.make(peer, self.shared.now_s()),
                duration: granted,
            }
            .encode(Flags::PONG_REQUEST);
            if grant.len() > n {
                return self.event(
                    peer,
                    DatagramIssue::TooShort,
                    format!(
                        "a {n}-byte reverse request (the cookie answer takes {} bytes)",
                        grant.len()
                    ),
                );
            }
            if cookie.is_some() {
                self.event(
                    peer,
                    DatagramIssue::BadCookie,
                    "a reverse request with a stale or foreign cookie",
                );
            }
            return self.send(&grant, peer);
        }
        let mut active = self.reversing.lock().expect("reverse list");
        if active.contains(&peer) {
            // Already streaming to it (a repeated request).
            return;
        }
        let limit = limits.max_reverse_streams;
        if active.len() >= limit {
            drop(active);
            let busy = Control::ReverseBusy {
                running: self.running.load(Ordering::Relaxed) as u32,
                limit: limit as u32,
            }
            .encode(Flags::PONG_REQUEST);
            if busy.len() <= n {
                self.send(&busy, peer);
            }
            return self.event(
                peer,
                DatagramIssue::ReverseBusy,
                format!("{limit} reverse streams already running (--max-reverse-streams)"),
            );
        }
        let Ok(sock) = self.sock.try_clone() else {
            return;
        };
        active.insert(peer);
        drop(active);
        let from = self.reply_from;
        let size = size.clamp(HEADER_LEN as u32, MAX_UDP_MESSAGE_LEN as u32);
        (self.shared.events)(ServerEvent::ReverseStarted {
            peer,
            transport: "udp",
            size,
            duration: granted,
        });
        let (shared, reversing, running) = (
            self.shared.clone(),
            self.reversing.clone(),
            self.running.clone(),
        );
        running.fetch_add(1, Ordering::SeqCst);
        match std::thread::Builder::new()
            .name("server-udp-reverse".into())
            .spawn(move || {
                stream(&sock, peer, from, size, granted, &shared);
                reversing.lock().expect("reverse list").remove(&peer);
                running.fetch_sub(1, Ordering::SeqCst);
            }) {
            Ok(t) => self.threads.push(t),
            Err(_) => {
                self.reversing.lock().expect("reverse list").remove(&peer);
                self.running.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

/// Streams datagrams of `size` bytes to `peer` for `duration`, then sends the end marker three times, 10 ms
/// apart.
fn stream(
    sock: &UdpSocket,
    peer: SocketAddr,
    from: Option<IpAddr>,
    size: u32,
    duration: Duration,
    shared: &Shared,
) {
    let mut m = vec![0u8; size as usize];
    for (i, b) in m.iter_mut().enumerate().skip(HEADER_LEN) {
        *b = (i as u8).wrapping_mul(31).wrapping_add(7);
    }
    let end = Instant::now() + duration;
    let (mut messages, mut seq) = (0u64, 0u64);
    while Instant::now() < end && !shared.stopping() {
        seq += 1;
        Header {
            seq,
            flags: Flags(0),
            len: size,
        }
        .write(&mut m);
        match pktinfo::send(sock, &m, peer, from) {
            Ok(_) => messages += 1,
            // The buffer was full: the datagram was not sent, which is not loss on the path; try again.
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => seq -= 1,
            Err(_) => break,
        }
    }
    let bytes = messages * u64::from(size);
    let end_msg = Control::ReverseEnd { messages, bytes }.encode(Flags(0));
    for _ in 0..3 {
        let _ = pktinfo::send(sock, &end_msg, peer, from);
        std::thread::sleep(Duration::from_millis(10));
    }
}
