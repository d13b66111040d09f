//! The client's link to a server, shared by every client engine (ping, throughput, load, sweep): the transport,
//! the one settings group ([`LinkConfig`]: address, key, extensions, timeout) checked once, connecting, the
//! extension hello / pre-shared key exchange ([`super::hello`]), pacing ([`wait_until`]) and the one error
//! type ([`LinkError`]) the engines return.

pub use super::hello::PeerKind;
use super::hello::{self, HandshakeError, Link};
use crate::wire::auth::Psk;
use crate::wire::sockperf::Feature;
use serde::Serialize;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};
use thiserror::Error;

/// TCP or UDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// One TCP connection, messages framed by their length field.
    Tcp,
    /// One UDP socket, one datagram per message.
    Udp,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        })
    }
}

/// A client engine failed or was cut short. Ping, throughput, load and sweep all return this type (as
/// [`super::ping::PingError`] and [`super::stream::StreamError`]); the variants past [`LinkError::Handshake`]
/// are what one engine or another meets mid-run.
#[derive(Debug, Error)]
pub enum LinkError {
    /// Settings are out of range.
    #[error("{0}")]
    Invalid(String),
    /// The connection could not be made.
    #[error("cannot connect to {proto} {addr}: {source}{hint}")]
    Connect {
        /// TCP or UDP.
        proto: Transport,
        /// The server address.
        addr: SocketAddr,
        /// The system's error.
        source: io::Error,
        /// What to try.
        hint: &'static str,
    },
    /// Reading or writing failed.
    #[error("{op} {proto} {addr} failed: {source}{hint}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// TCP or UDP.
        proto: Transport,
        /// The server address.
        addr: SocketAddr,
        /// The system's error.
        source: io::Error,
        /// What to try.
        hint: &'static str,
    },
    /// The hello or the key exchange failed.
    #[error("server {proto} {addr} {source}")]
    Handshake {
        /// TCP or UDP.
        proto: Transport,
        /// The server address.
        addr: SocketAddr,
        /// What went wrong.
        source: HandshakeError,
    },
    /// The server closed the connection in the middle of a stream.
    #[error("server tcp {addr} closed the connection mid-run (did it stop or restart?)")]
    Closed {
        /// The server address.
        addr: SocketAddr,
    },
    /// The server closed the connection between ping-pong answers.
    #[error(
        "server {addr} closed the connection after {answered} answers (did it stop or restart?)"
    )]
    ClosedAfter {
        /// The server address.
        addr: SocketAddr,
        /// Answers received before.
        answered: u64,
    },
    /// A TCP server stopped answering a ping-pong.
    #[error(
        "no answer from tcp {addr} within {timeout:?} (server stalled? try a longer --timeout)"
    )]
    Timeout {
        /// The server address.
        addr: SocketAddr,
        /// The timeout.
        timeout: Duration,
    },
    /// The server stopped sending or answering a stream.
    #[error("no data from {proto} {addr} for {:.1}s (server stalled or gone? try a longer --timeout)", waited.as_secs_f64())]
    Silent {
        /// TCP or UDP.
        proto: Transport,
        /// The server address.
        addr: SocketAddr,
        /// How long it was silent.
        waited: Duration,
    },
    /// The server stopped reading: TCP flow control blocked every send.
    #[error(
        "server tcp {addr} stopped reading: sends made no progress for the last {:.1}s of the run (TCP flow control; the results cover the time before)",
        stalled.as_secs_f64()
    )]
    Stalled {
        /// The server address.
        addr: SocketAddr,
        /// How long sends were blocked when the run ended.
        stalled: Duration,
    },
    /// The server answered a ping-pong message with something that is not its echo.
    #[error("server {addr} sent an invalid answer: {detail} (is it a sockperf-compatible server?)")]
    InvalidAnswer {
        /// The server address.
        addr: SocketAddr,
        /// What was wrong.
        detail: String,
    },
    /// The server sent a stream message that does not fit the protocol.
    #[error(
        "server {addr} sent an invalid message: {detail} (is it a sockperf-compatible server?)"
    )]
    Protocol {
        /// The server address.
        addr: SocketAddr,
        /// What was wrong.
        detail: String,
    },
    /// A feature of roundtrip's extension is needed and the server does not offer it.
    #[error("server {addr} {what} (a sockperf server cannot; run `roundtrip server` there)")]
    Unsupported {
        /// The server address.
        addr: SocketAddr,
        /// What is missing.
        what: &'static str,
    },
    /// The server refused what was asked.
    #[error("server {addr} {what}")]
    Refused {
        /// The server address.
        addr: SocketAddr,
        /// What it refused and what to do.
        what: String,
    },
}

/// Where a client engine connects and how it greets the server: the settings every client engine shares.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// The server.
    pub addr: SocketAddr,
    /// TCP or UDP.
    pub transport: Transport,
    /// Prove this key to the server (and require its proof) before measuring.
    pub psk: Option<Psk>,
    /// Send roundtrip's extension hello. Off: behave exactly as a sockperf client.
    pub extensions: bool,
    /// How long to wait for the connection and for each answer of the hello.
    pub timeout: Duration,
}

/// How the socket of a link is set up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SocketSetup {
    /// TCP: Nagle off.
    pub nodelay: bool,
    /// Reads time out after this long (so loops can check their deadlines).
    pub read_timeout: Duration,
    /// Writes time out after this long too, when set.
    pub write_timeout: Option<Duration>,
    /// UDP: the receive buffer asked for, bytes.
    pub udp_recv_buffer: usize,
}

/// A connected socket.
pub(crate) enum Conn {
    /// A TCP connection.
    Tcp(TcpStream),
    /// A connected UDP socket.
    Udp(UdpSocket),
}

impl LinkConfig {
    /// Defaults: TCP to `addr`, no key, the extension hello on, 2 s timeout.
    pub fn new(addr: SocketAddr) -> Self {
        LinkConfig {
            addr,
            transport: Transport::Tcp,
            psk: None,
            extensions: true,
            timeout: Duration::from_secs(2),
        }
    }

    /// Checks the settings before any I/O.
    pub fn validate(&self) -> Result<(), LinkError> {
        if self.timeout.is_zero() {
            return Err(LinkError::Invalid("timeout must be more than 0".into()));
        }
        if self.psk.is_some() && !self.extensions {
            return Err(LinkError::Invalid(
                "a key (--psk-file) needs roundtrip's extension; drop --no-extensions".into(),
            ));
        }
        Ok(())
    }

    /// Connects with `setup`, then (extensions on) sends the hello asking for `wanted`, proving the key when
    /// there is one. Without extensions the peer is [`PeerKind::Unknown`] and nothing is granted.
    pub(crate) fn open(
        &self,
        setup: SocketSetup,
        wanted: Feature,
    ) -> Result<(Conn, PeerKind, Feature), LinkError> {
        let mut conn = self.connect(setup)?;
        let (peer, features) = if self.extensions {
            self.negotiate(&mut conn, wanted)?
        } else {
            (PeerKind::Unknown, Feature::default())
        };
        Ok((conn, peer, features))
    }

    /// Connects, with the socket set up as `setup` says.
    pub(crate) fn connect(&self, setup: SocketSetup) -> Result<Conn, LinkError> {
        let (addr, transport) = (self.addr, self.transport);
        let fail = |source: io::Error| LinkError::Connect {
            proto: transport,
            hint: connect_hint(&source),
            addr,
            source,
        };
        match transport {
            Transport::Tcp => {
                let s = TcpStream::connect_timeout(&addr, self.timeout.max(Duration::from_secs(3)))
                    .map_err(fail)?;
                s.set_nodelay(setup.nodelay).map_err(fail)?;
                s.set_read_timeout(Some(setup.read_timeout)).map_err(fail)?;
                if let Some(w) = setup.write_timeout {
                    s.set_write_timeout(Some(w)).map_err(fail)?;
                }
                Ok(Conn::Tcp(s))
            }
            Transport::Udp => {
                let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
                    .map_err(fail)?;
                let _ = sock.set_recv_buffer_size(setup.udp_recv_buffer);
                let any: SocketAddr = if addr.is_ipv4() {
                    "0.0.0.0:0".parse().expect("literal")
                } else {
                    "[::]:0".parse().expect("literal")
                };
                sock.bind(&any.into()).map_err(fail)?;
                sock.connect(&addr.into()).map_err(fail)?;
                let s: UdpSocket = sock.into();
                s.set_read_timeout(Some(setup.read_timeout)).map_err(fail)?;
                if let Some(w) = setup.write_timeout {
                    s.set_write_timeout(Some(w)).map_err(fail)?;
                }
                Ok(Conn::Udp(s))
            }
        }
    }

    /// Sends the hello asking for `wanted` (proving the key when there is one) and classifies the server. A
    /// missing answer over UDP is not an error without a key.
    pub(crate) fn negotiate(
        &self,
        conn: &mut Conn,
        wanted: Feature,
    ) -> Result<(PeerKind, Feature), LinkError> {
        let mut link = match conn {
            Conn::Tcp(s) => Link::Tcp(s),
            Conn::Udp(s) => Link::Udp(s),
        };
        match hello::handshake(&mut link, wanted, self.psk.as_ref(), self.timeout) {
            Ok(n) => Ok((n.peer, n.features)),
            Err(HandshakeError::Io { op, source }) => {
                Err(io_error_unanswered(op, self.transport, self.addr, source))
            }
            Err(source) => Err(LinkError::Handshake {
                proto: self.transport,
                addr: self.addr,
                source,
            }),
        }
    }
}

/// What to try when connecting failed this way.
pub(crate) fn connect_hint(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => {
            " (nothing listens there: start `roundtrip server` or `sockperf server`, or check the port)"
        }
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
            " (no answer: host down or a firewall drops the traffic)"
        }
        _ if e.raw_os_error() == Some(libc::ENETUNREACH)
            || e.raw_os_error() == Some(libc::EHOSTUNREACH) =>
        {
            " (no route to the host: check the address and your routes)"
        }
        _ => "",
    }
}

/// A send or receive failed after the server had answered: a refusal means it went away.
pub(crate) fn io_error(
    op: &'static str,
    proto: Transport,
    addr: SocketAddr,
    source: io::Error,
) -> LinkError {
    io_error_with(
        op,
        proto,
        addr,
        source,
        " (the server is gone: nothing listens on that port any more)",
    )
}

/// A send or receive failed where the server may never have answered (the hello, a UDP ping-pong): a
/// refusal means nothing listens there.
pub(crate) fn io_error_unanswered(
    op: &'static str,
    proto: Transport,
    addr: SocketAddr,
    source: io::Error,
) -> LinkError {
    io_error_with(
        op,
        proto,
        addr,
        source,
        " (no server on that port: start `roundtrip server`)",
    )
}

fn io_error_with(
    op: &'static str,
    proto: Transport,
    addr: SocketAddr,
    source: io::Error,
    refused: &'static str,
) -> LinkError {
    let hint = match source.kind() {
        io::ErrorKind::ConnectionRefused => refused,
        io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => " (the server went away)",
        _ => "",
    };
    LinkError::Io {
        op,
        proto,
        addr,
        source,
        hint,
    }
}

/// True for the errors a read or write timeout gives.
pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Waits until `deadline`: sleeps while more than 200 us remain, then spins.
pub(crate) fn wait_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        if left > Duration::from_micros(200) {
            std::thread::sleep(left - Duration::from_micros(100));
        } else {
            std::hint::spin_loop();
        }
    }
}
