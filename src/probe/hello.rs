//! The client's side of the extension hello and of the pre-shared key exchange, over TCP or UDP. Every client
//! engine (ping, throughput, load, ...) starts with [`handshake`].
//!
//! Without a key: one hello; a roundtrip server acks it with the features it grants, a sockperf server echoes
//! it, silence over UDP means "unknown" (sockperf drops nothing, but a lost datagram is possible).
//! With a key: hello, challenge, proof, and an ack whose server proof the client checks, so it never measures a
//! peer that does not hold the key either.

use crate::wire::auth::{self, Psk};
use crate::wire::sockperf::{
    self, Control, Feature, Flags, HEADER_LEN, Header, Hello, HelloKind, MAX_CONTROL_LEN, Refusal,
};
use serde::Serialize;
use std::io::{self, Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::time::{Duration, Instant};
use thiserror::Error;

/// What kind of server answered the hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerKind {
    /// A roundtrip server that acknowledged the hello.
    Roundtrip,
    /// A server that echoed the hello unchanged: sockperf or compatible.
    Sockperf,
    /// Extensions were not tried, or the hello got no answer.
    Unknown,
}

/// The handshake failed.
#[derive(Debug, Error)]
pub enum HandshakeError {
    /// Sending or receiving failed.
    #[error("{op} failed: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The system's error.
        source: io::Error,
    },
    /// The server closed the connection during the handshake.
    #[error("closed the connection during the hello{0}")]
    Closed(&'static str),
    /// No answer in time.
    #[error("did not answer the {0} in time{1}")]
    Silent(&'static str, &'static str),
    /// The answer does not fit the protocol.
    #[error(
        "answered the hello with something unexpected: {0} (is it a sockperf-compatible server?)"
    )]
    Protocol(String),
    /// The server holds a key and this client has none.
    #[error("requires a pre-shared key: give --psk-file FILE with the server's key")]
    KeyRequired,
    /// The server refused this client's proof.
    #[error("refused our key: the server holds another key (check --psk-file on both sides)")]
    KeyRefused,
    /// This client has a key and the server does not prove it holds one.
    #[error(
        "{0} holds no key, but this client has one (--psk-file): refusing to measure a peer that cannot prove the key"
    )]
    ServerHasNoKey(&'static str),
    /// The server's proof did not check out.
    #[error(
        "sent a wrong proof of the key: it holds another key, or something in between answers for it"
    )]
    BadServerProof,
}

/// A connected socket to run the handshake over.
pub(crate) enum Link<'a> {
    /// A TCP connection.
    Tcp(&'a mut TcpStream),
    /// A connected UDP socket.
    Udp(&'a UdpSocket),
}

/// What the handshake found out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Negotiated {
    /// Who answered.
    pub peer: PeerKind,
    /// The features the server granted.
    pub features: Feature,
}

/// Asks for `wanted`, proving `psk` when given. `timeout` bounds each wait for an answer (over UDP each of
/// three tries waits at most a second of it).
pub(crate) fn handshake(
    link: &mut Link<'_>,
    wanted: Feature,
    psk: Option<&Psk>,
    timeout: Duration,
) -> Result<Negotiated, HandshakeError> {
    let client_nonce = auth::random_nonce();
    let ask = if psk.is_some() {
        wanted.with(Feature::PSK)
    } else {
        wanted
    };
    let hello = Hello::request(ask, client_nonce).encode(Flags::CLIENT.with(Flags::PONG_REQUEST));
    let Some(answer) = exchange(link, &hello, timeout)? else {
        if psk.is_some() {
            return Err(HandshakeError::Silent(
                "hello",
                " (a roundtrip server with a key answers it; a sockperf server echoes it)",
            ));
        }
        return Ok(Negotiated {
            peer: PeerKind::Unknown,
            features: Feature::default(),
        });
    };
    if let Some(h) = Hello::decode(&answer) {
        return match (h.kind, psk) {
            (HelloKind::Request, None) => Ok(Negotiated {
                peer: PeerKind::Sockperf,
                features: Feature::default(),
            }),
            (HelloKind::Request, Some(_)) => Err(HandshakeError::ServerHasNoKey(
                "the server (a sockperf server: it echoed the hello)",
            )),
            (HelloKind::Ack, None) => Ok(Negotiated {
                peer: PeerKind::Roundtrip,
                features: h.features.without(Feature::PSK),
            }),
            (HelloKind::Ack, Some(_)) => Err(HandshakeError::ServerHasNoKey(
                "the server (started without --psk-file)",
            )),
        };
    }
    match Control::decode(&answer) {
        Some(Control::Challenge {
            nonce: server_nonce,
        }) => {
            let Some(psk) = psk else {
                return Err(HandshakeError::KeyRequired);
            };
            let proof = auth::client_proof(psk, &server_nonce, &client_nonce, wanted.0);
            let msg = Control::Auth {
                server_nonce,
                client_nonce,
                features: wanted,
                proof,
            }
            .encode(Flags::CLIENT.with(Flags::PONG_REQUEST));
            let answer = match exchange(link, &msg, timeout) {
                Err(HandshakeError::Closed(_)) => return Err(HandshakeError::KeyRefused),
                Err(e) => return Err(e),
                Ok(None) => {
                    return Err(HandshakeError::Silent(
                        "proof of the key",
                        " (lost datagrams, or the server dropped it)",
                    ));
                }
                Ok(Some(a)) => a,
            };
            match (Hello::decode(&answer), Control::decode(&answer)) {
                (Some(ack), _)
                    if ack.kind == HelloKind::Ack && ack.features.contains(Feature::PSK) =>
                {
                    if !auth::verify_server_proof(
                        psk,
                        &client_nonce,
                        &server_nonce,
                        ack.features.0,
                        &ack.proof,
                    ) {
                        return Err(HandshakeError::BadServerProof);
                    }
                    Ok(Negotiated {
                        peer: PeerKind::Roundtrip,
                        features: ack.features.without(Feature::PSK),
                    })
                }
                (_, Some(Control::Refused { reason })) => Err(refused(reason)),
                _ => Err(HandshakeError::Protocol(
                    "the answer to the proof of the key was not an ack".into(),
                )),
            }
        }
        Some(Control::Refused { reason }) => Err(refused(reason)),
        _ => Err(HandshakeError::Protocol(
            "the answer to the first message was not its echo".into(),
        )),
    }
}

fn refused(reason: Option<Refusal>) -> HandshakeError {
    match reason {
        Some(Refusal::KeyRequired) => HandshakeError::KeyRequired,
        Some(Refusal::BadProof) => HandshakeError::KeyRefused,
        Some(Refusal::BadCookie) => HandshakeError::Protocol(
            "the server found its challenge stale: the exchange took over a minute".into(),
        ),
        None => HandshakeError::Protocol("a refusal this version does not know".into()),
    }
}

/// Sends `msg` and returns the next extension message the server answers with (sequence [`sockperf::HELLO_SEQ`]).
/// `None`: no answer over UDP after three tries.
fn exchange(
    link: &mut Link<'_>,
    msg: &[u8],
    timeout: Duration,
) -> Result<Option<Vec<u8>>, HandshakeError> {
    let io = |op| move |source| HandshakeError::Io { op, source };
    match link {
        Link::Tcp(s) => {
            s.write_all(msg).map_err(io("sending to"))?;
            let deadline = Instant::now() + timeout;
            let mut head = [0u8; HEADER_LEN];
            read_until(s, &mut head, deadline)?;
            let h = Header::parse(&head, MAX_CONTROL_LEN)
                .map_err(|e| HandshakeError::Protocol(e.to_string()))?;
            let mut whole = vec![0u8; h.len as usize];
            whole[..HEADER_LEN].copy_from_slice(&head);
            read_until(s, &mut whole[HEADER_LEN..], deadline)?;
            Ok(Some(whole))
        }
        Link::Udp(s) => {
            let before = s.read_timeout().ok().flatten();
            let answer = udp_exchange(s, msg, timeout);
            let _ = s.set_read_timeout(before);
            answer
        }
    }
}

fn udp_exchange(
    s: &UdpSocket,
    msg: &[u8],
    timeout: Duration,
) -> Result<Option<Vec<u8>>, HandshakeError> {
    let mut buf = [0u8; MAX_CONTROL_LEN + 1];
    for _ in 0..3 {
        s.send(msg).map_err(|source| HandshakeError::Io {
            op: "sending to",
            source,
        })?;
        let deadline = Instant::now() + timeout.min(Duration::from_secs(1));
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            let _ = s.set_read_timeout(Some(left.max(Duration::from_millis(1))));
            match s.recv(&mut buf) {
                Ok(n) => {
                    let is_control = Header::parse(&buf[..n], MAX_CONTROL_LEN)
                        .is_ok_and(|h| h.seq == sockperf::HELLO_SEQ && h.len as usize == n);
                    if is_control {
                        return Ok(Some(buf[..n].to_vec()));
                    }
                }
                Err(e) if is_wait(&e) => {}
                Err(source) => {
                    return Err(HandshakeError::Io {
                        op: "receiving from",
                        source,
                    });
                }
            }
        }
    }
    Ok(None)
}

fn is_wait(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Fills `buf` from a TCP stream (whose read timeout may be short) before `deadline`.
fn read_until(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), HandshakeError> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(HandshakeError::Closed("")),
            Ok(n) => got += n,
            Err(e) if is_wait(&e) => {
                if Instant::now() >= deadline {
                    return Err(HandshakeError::Silent("hello", ""));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                return Err(HandshakeError::Closed(" (reset)"));
            }
            Err(e) => {
                return Err(HandshakeError::Io {
                    op: "receiving from",
                    source: e,
                });
            }
        }
    }
    Ok(())
}
