//! The connection the protocols share: a plain or TLS byte stream with timeouts, buffering and error
//! mapping, and the timed TCP connect.

use super::{DbError, SslMode, tls};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A buffered blocking connection with timeouts and error mapping shared by the protocols.
/// A plain or TLS byte stream.
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
    /// Only while switching to TLS.
    Switching,
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(b),
            Stream::Tls(s) => s.read(b),
            Stream::Switching => Err(io::ErrorKind::NotConnected.into()),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(b),
            Stream::Tls(s) => s.write(b),
            Stream::Switching => Err(io::ErrorKind::NotConnected.into()),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
            Stream::Switching => Ok(()),
        }
    }
}

pub(crate) struct Conn {
    stream: Stream,
    /// Protocol version, cipher suite and verification, once TLS is on.
    pub tls_info: Option<String>,
    buf: Vec<u8>,
    pos: usize,
    /// Protocol name for errors.
    pub proto: &'static str,
    /// Peer address.
    pub addr: SocketAddr,
    pub(crate) timeout: Duration,
}

impl Conn {
    fn new(
        stream: TcpStream,
        proto: &'static str,
        addr: SocketAddr,
        timeout: Duration,
    ) -> io::Result<Conn> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Conn {
            stream: Stream::Plain(stream),
            tls_info: None,
            buf: Vec::with_capacity(64 * 1024),
            pos: 0,
            proto,
            addr,
            timeout,
        })
    }

    fn io_error(&self, e: &io::Error, during: &str) -> DbError {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => DbError::Timeout {
                proto: self.proto,
                addr: self.addr,
                during: during.to_string(),
                timeout_ms: self.timeout.as_millis(),
            },
            io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof => self.closed(during, ""),
            _ => DbError::Protocol {
                proto: self.proto,
                addr: self.addr,
                during: during.to_string(),
                detail: e.to_string(),
            },
        }
    }

    /// Runs a TLS handshake on the connection (host names the server for SNI and verification) and returns
    /// how long it took.
    pub fn start_tls(&mut self, host: &str, mode: SslMode) -> Result<Duration, DbError> {
        let t0 = Instant::now();
        let tls_err = |detail: String| DbError::Tls {
            proto: self.proto,
            addr: self.addr,
            detail,
        };
        if self.pos < self.buf.len() {
            // Bytes that arrived before the handshake could have been injected by someone in the middle.
            return Err(tls_err(
                "the server sent unencrypted data before the TLS handshake".into(),
            ));
        }
        let config = tls::client_config(mode).map_err(tls_err)?;
        let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|_| {
            DbError::Tls {
                proto: self.proto,
                addr: self.addr,
                detail: format!("'{host}' is not a valid server name"),
            }
        })?;
        let mut client = rustls::ClientConnection::new(config, name).map_err(|e| DbError::Tls {
            proto: self.proto,
            addr: self.addr,
            detail: e.to_string(),
        })?;
        let Stream::Plain(mut tcp) = std::mem::replace(&mut self.stream, Stream::Switching) else {
            return Err(DbError::Tls {
                proto: self.proto,
                addr: self.addr,
                detail: "TLS is already on".into(),
            });
        };
        while client.is_handshaking() {
            if let Err(e) = client.complete_io(&mut tcp) {
                let is_tls = e
                    .get_ref()
                    .is_some_and(|i| i.downcast_ref::<rustls::Error>().is_some());
                return Err(if is_tls || e.kind() == io::ErrorKind::InvalidData {
                    DbError::Tls {
                        proto: self.proto,
                        addr: self.addr,
                        detail: e.to_string(),
                    }
                } else {
                    self.io_error(&e, "the TLS handshake")
                });
            }
        }
        let took = t0.elapsed();
        self.tls_info = Some(format!(
            "TLS {} {}, certificate {}",
            client
                .protocol_version()
                .map(|v| format!("{v:?}"))
                .unwrap_or_default(),
            client
                .negotiated_cipher_suite()
                .map(|c| format!("{:?}", c.suite()))
                .unwrap_or_default(),
            if mode == SslMode::Verify {
                "verified (platform roots, host name)"
            } else {
                "not verified (only verify-full, VERIFY_IDENTITY and rediss:// verify)"
            }
        ));
        self.stream = Stream::Tls(Box::new(rustls::StreamOwned::new(client, tcp)));
        Ok(took)
    }

    /// A [`DbError::Closed`] with the server's last words.
    pub fn closed(&self, during: &str, detail: &str) -> DbError {
        DbError::Closed {
            proto: self.proto,
            addr: self.addr,
            during: during.to_string(),
            detail: if detail.is_empty() {
                String::new()
            } else {
                format!(": {detail}")
            },
        }
    }

    /// A [`DbError::Protocol`].
    pub fn protocol(&self, during: &str, detail: impl std::fmt::Display) -> DbError {
        DbError::Protocol {
            proto: self.proto,
            addr: self.addr,
            during: during.to_string(),
            detail: detail.to_string(),
        }
    }

    /// A [`DbError::Server`].
    pub fn server(&self, during: &str, message: impl Into<String>) -> DbError {
        DbError::Server {
            proto: self.proto,
            addr: self.addr,
            during: during.to_string(),
            message: message.into(),
        }
    }

    /// How long one read may wait from now on (errors ignored: the old timeout stays).
    pub fn set_read_timeout(&mut self, d: Duration) {
        let s = match &self.stream {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref(),
            Stream::Switching => return,
        };
        let _ = s.set_read_timeout(Some(d.max(Duration::from_millis(1))));
    }

    /// Sends bytes.
    pub fn send(&mut self, b: &[u8], during: &str) -> Result<(), DbError> {
        self.stream
            .write_all(b)
            .map_err(|e| self.io_error(&e, during))
    }

    /// Reads more bytes into the buffer.
    fn fill(&mut self, during: &str) -> Result<(), DbError> {
        if self.pos > 0 && self.pos * 2 >= self.buf.len() {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        let old = self.buf.len();
        self.buf.resize(old + 64 * 1024, 0);
        let r = loop {
            match self.stream.read(&mut self.buf[old..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r,
            }
        };
        match r {
            Ok(0) => {
                self.buf.truncate(old);
                Err(self.closed(during, ""))
            }
            Ok(n) => {
                self.buf.truncate(old + n);
                Ok(())
            }
            Err(e) => {
                self.buf.truncate(old);
                Err(self.io_error(&e, during))
            }
        }
    }

    /// Reads one message with `parse` (None: need more bytes; Err: not this protocol).
    pub fn next<T, E: std::fmt::Display>(
        &mut self,
        during: &str,
        parse: impl Fn(&[u8]) -> Result<Option<(T, usize)>, E>,
    ) -> Result<T, DbError> {
        loop {
            match parse(&self.buf[self.pos..]) {
                Ok(Some((v, used))) => {
                    self.pos += used;
                    return Ok(v);
                }
                Ok(None) => self.fill(during)?,
                Err(e) => return Err(self.protocol(during, e)),
            }
        }
    }
}

/// A short random hex string for names of temporary keys.
pub(crate) fn random_tag() -> String {
    let mut b = [0u8; 6];
    let _ = getrandom::fill(&mut b);
    crate::wire::pg::hex(&b)
}

/// Opens a TCP connection, timing the handshake.
pub(crate) fn tcp_connect(
    addr: SocketAddr,
    proto: &'static str,
    timeout: Duration,
) -> Result<(Conn, Duration), DbError> {
    let t0 = Instant::now();
    let s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => DbError::Timeout {
            proto,
            addr,
            during: "the TCP handshake".into(),
            timeout_ms: timeout.as_millis(),
        },
        _ => DbError::Connect {
            proto,
            addr,
            detail: e.to_string(),
        },
    })?;
    let hs = t0.elapsed();
    let c = Conn::new(s, proto, addr, timeout).map_err(|e| DbError::Connect {
        proto,
        addr,
        detail: e.to_string(),
    })?;
    Ok((c, hs))
}
