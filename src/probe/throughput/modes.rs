//! What one stream's thread does in each mode: send without answers ([`send_async`]), one message per round
//! trip over TCP or UDP ([`sync_tcp`], [`sync_udp`]), or count what a server streams ([`receive_reverse`]).

use super::super::link::{Conn, Transport, io_error, is_timeout};
use super::super::stream::{self, Counter, Framer, Sent, StreamError};
use super::{Outcome, POLL};
use crate::wire::sockperf::{self, Control, Flags, Header, MAX_UDP_MESSAGE_LEN};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Makes `msg` the request after number `seq`, with `flags`: returns its number.
fn next_request(msg: &mut [u8], seq: u64, flags: Flags) -> u64 {
    let seq = seq + 1;
    Header {
        seq,
        flags,
        len: msg.len() as u32,
    }
    .write(msg);
    seq
}

/// Sends `size`-byte messages, no answer requested, until `stop`; then asks a roundtrip server for counts.
#[allow(clippy::too_many_arguments)]
pub(super) fn send_async(
    conn: &mut Conn,
    addr: SocketAddr,
    size: usize,
    timeout: Duration,
    counts: bool,
    counter: &Counter,
    stop: &AtomicBool,
    out: &mut Outcome,
) -> Result<(), StreamError> {
    let mut msg = stream::payload(size);
    let mut seq = 0u64;
    match conn {
        Conn::Tcp(s) => {
            let mut blocked = None;
            while !stop.load(Ordering::Relaxed) {
                seq = next_request(&mut msg, seq, Flags::CLIENT);
                match stream::send_bounded(s, &msg, addr, stop, None, &mut blocked)? {
                    Sent::All => counter.add(size as u64),
                    Sent::Cut(stalled) => {
                        if stalled >= Duration::from_millis(500) {
                            return Err(StreamError::Stalled { addr, stalled });
                        }
                        // Stopped mid-message: the stream is not at a message boundary any more.
                        return Ok(());
                    }
                }
            }
        }
        Conn::Udp(s) => {
            while !stop.load(Ordering::Relaxed) {
                seq = next_request(&mut msg, seq, Flags::CLIENT);
                match s.send(&msg) {
                    Ok(_) => counter.add(size as u64),
                    Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => seq -= 1,
                    Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => seq -= 1,
                    Err(e) => return Err(io_error("sending to", Transport::Udp, addr, e)),
                }
            }
        }
    }
    if counts {
        out.received = stream::request_counts(conn, addr, timeout.max(Duration::from_secs(5)))?;
    }
    Ok(())
}

/// Sync mode over TCP: one message, wait for its echo, repeat.
pub(super) fn sync_tcp(
    s: &mut std::net::TcpStream,
    addr: SocketAddr,
    size: usize,
    timeout: Duration,
    counter: &Counter,
    stop: &AtomicBool,
    out: &mut Outcome,
) -> Result<(), StreamError> {
    let mut msg = stream::payload(size);
    let mut framer = Framer::new(size);
    let mut blocked = None;
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        seq = next_request(&mut msg, seq, Flags::CLIENT.with(Flags::PONG_REQUEST));
        let sent_at = Instant::now();
        match stream::send_bounded(s, &msg, addr, stop, None, &mut blocked)? {
            Sent::All => out.sync_sent += 1,
            Sent::Cut(stalled) if stalled >= Duration::from_millis(500) => {
                return Err(StreamError::Stalled { addr, stalled });
            }
            Sent::Cut(_) => return Ok(()),
        }
        let deadline = sent_at + timeout;
        match framer.next_message(s, addr, deadline, None)? {
            Some(answer) => {
                let h = Header::parse(answer, sockperf::MAX_MESSAGE_LEN).map_err(|e| {
                    StreamError::Protocol {
                        addr,
                        detail: e.to_string(),
                    }
                })?;
                if h.seq != seq {
                    return Err(StreamError::Protocol {
                        addr,
                        detail: format!(
                            "expected the echo of message {seq}, got sequence {}",
                            h.seq
                        ),
                    });
                }
                out.rtt.record(sent_at.elapsed());
                counter.add(size as u64);
            }
            None => {
                return Err(StreamError::Silent {
                    proto: Transport::Tcp,
                    addr,
                    waited: timeout,
                });
            }
        }
    }
    Ok(())
}

/// Sync mode over UDP: one datagram, wait for its echo (or the timeout: lost), repeat.
pub(super) fn sync_udp(
    s: &std::net::UdpSocket,
    addr: SocketAddr,
    size: usize,
    timeout: Duration,
    counter: &Counter,
    stop: &AtomicBool,
    out: &mut Outcome,
) -> Result<(), StreamError> {
    let mut msg = stream::payload(size);
    let mut inbuf = vec![0u8; MAX_UDP_MESSAGE_LEN + 1];
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        seq = next_request(&mut msg, seq, Flags::CLIENT.with(Flags::PONG_REQUEST));
        let sent_at = Instant::now();
        match s.send(&msg) {
            Ok(_) => out.sync_sent += 1,
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_error("sending to", Transport::Udp, addr, e)),
        }
        let deadline = sent_at + timeout;
        while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
            match s.recv(&mut inbuf) {
                Ok(n) => {
                    if let Ok(h) = Header::parse(&inbuf[..n], MAX_UDP_MESSAGE_LEN)
                        && h.seq == seq
                        && n == size
                    {
                        out.rtt.record(sent_at.elapsed());
                        counter.add(size as u64);
                        break;
                    }
                }
                Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error("receiving from", Transport::Udp, addr, e)),
            }
        }
    }
    Ok(())
}

/// Reverse mode: asks the server to stream for `duration` and counts what arrives until its end marker.
#[allow(clippy::too_many_arguments)]
pub(super) fn receive_reverse(
    conn: &mut Conn,
    addr: SocketAddr,
    size: usize,
    duration: Duration,
    timeout: Duration,
    counter: &Arc<Counter>,
    stop: &AtomicBool,
    out: &mut Outcome,
) -> Result<(), StreamError> {
    let request = |cookie| {
        Control::ReverseRequest {
            size: size as u32,
            duration,
            cookie,
        }
        .encode(Flags::CLIENT.with(Flags::PONG_REQUEST))
    };
    let req = request(None);
    let mut stopped_at: Option<Instant> = None;
    let mut last_data = Instant::now();
    match conn {
        Conn::Tcp(s) => {
            use std::io::Write;
            s.write_all(&req)
                .map_err(|e| io_error("sending to", Transport::Tcp, addr, e))?;
            let mut framer = Framer::new(sockperf::CONTROL_LEN);
            framer.live = Some(counter.clone());
            loop {
                let before = framer.bytes;
                let got = framer.next_message(s, addr, Instant::now() + POLL, None)?;
                if let Some(m) = got
                    && let Some(Control::ReverseEnd { messages, .. }) = Control::decode(m)
                {
                    out.sent_by_server = Some(messages);
                    out.received = Some((framer.messages, framer.bytes));
                    return Ok(());
                }
                if framer.bytes != before {
                    last_data = Instant::now();
                }
                if stop.load(Ordering::Relaxed) {
                    let at = *stopped_at.get_or_insert_with(Instant::now);
                    if at.elapsed() > timeout {
                        // Cancelled, or the end marker is late: keep what arrived, without the server's total.
                        out.received = Some((framer.messages, framer.bytes));
                        return Ok(());
                    }
                } else if last_data.elapsed() > timeout {
                    return Err(StreamError::Silent {
                        proto: Transport::Tcp,
                        addr,
                        waited: last_data.elapsed(),
                    });
                }
            }
        }
        Conn::Udp(s) => {
            let mut buf = vec![0u8; MAX_UDP_MESSAGE_LEN + 1];
            let (mut messages, mut bytes) = (0u64, 0u64);
            // First a request without a cookie, answered with a grant carrying one; then the request again
            // with the cookie, which starts the stream (the server checks that we receive at our address).
            let mut cookie = None;
            let mut requests = 0;
            let mut last_request = Instant::now() - Duration::from_secs(10);
            loop {
                if messages == 0 && requests < 3 && last_request.elapsed() >= Duration::from_secs(1)
                {
                    s.send(&request(cookie))
                        .map_err(|e| io_error("sending to", Transport::Udp, addr, e))?;
                    requests += 1;
                    last_request = Instant::now();
                }
                match s.recv(&mut buf) {
                    Ok(n) => {
                        let Ok(h) = Header::parse(&buf[..n], MAX_UDP_MESSAGE_LEN) else {
                            continue;
                        };
                        if h.seq == sockperf::HELLO_SEQ {
                            match Control::decode(&buf[..n]) {
                                Some(Control::ReverseEnd { messages: sent, .. }) => {
                                    out.sent_by_server = Some(sent);
                                    out.received = Some((messages, bytes));
                                    return Ok(());
                                }
                                Some(Control::ReverseGrant {
                                    cookie: c,
                                    duration: granted,
                                }) if messages == 0 => {
                                    if granted < duration {
                                        return Err(StreamError::Refused {
                                            addr,
                                            what: format!(
                                                "streams UDP for at most {:.1}s (its --max-reverse): ask for --duration {:.0}s or less",
                                                granted.as_secs_f64(),
                                                granted.as_secs_f64().floor()
                                            ),
                                        });
                                    }
                                    if cookie != Some(c) {
                                        cookie = Some(c);
                                        requests = 0;
                                        last_request = Instant::now() - Duration::from_secs(10);
                                    }
                                }
                                Some(Control::ReverseBusy { running, limit }) if messages == 0 => {
                                    return Err(StreamError::Refused {
                                        addr,
                                        what: format!(
                                            "already runs {running} of its {limit} UDP reverse streams (--max-reverse-streams): try again later"
                                        ),
                                    });
                                }
                                _ => {}
                            }
                            continue;
                        }
                        messages += 1;
                        bytes += n as u64;
                        counter.add(n as u64);
                        last_data = Instant::now();
                    }
                    Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(io_error("receiving from", Transport::Udp, addr, e)),
                }
                let silent_for = last_data.elapsed();
                if stop.load(Ordering::Relaxed) {
                    let at = *stopped_at.get_or_insert_with(Instant::now);
                    if at.elapsed() > timeout {
                        out.received = Some((messages, bytes));
                        return Ok(());
                    }
                } else if silent_for > timeout && (messages > 0 || requests >= 3) {
                    out.received = Some((messages, bytes));
                    return Err(StreamError::Silent {
                        proto: Transport::Udp,
                        addr,
                        waited: silent_for,
                    });
                }
            }
        }
    }
}
