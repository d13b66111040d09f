//! Kernel receive timestamps (`SO_TIMESTAMPNS`), as fping uses them: the time a packet reached the socket
//! layer, taken in the kernel, so a round trip does not include the wake-up of the receiving thread.
//!
//! Two `unsafe` calls live here, `setsockopt` and `recvmsg`; the control messages the kernel fills are decoded
//! by offsets with bounds checks. Only 64-bit Linux layouts are decoded; elsewhere no timestamp is returned
//! and callers fall back to their own clock.
#![allow(unsafe_code)] // recvmsg and its control messages (SO_TIMESTAMPNS) are decoded here

use socket2::Socket;
use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, SystemTime};

/// Asks the kernel to stamp every received packet (`SO_TIMESTAMPNS`).
pub fn enable(sock: &Socket) -> io::Result<()> {
    crate::sys::setsockopt_on(sock, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS)
}

/// Receives one packet into `buf`; returns its length and the kernel's receive time when it came with one.
pub fn recv(sock: &Socket, buf: &mut [u8]) -> io::Result<(usize, Option<SystemTime>)> {
    // u64 elements: the control buffer must be aligned for cmsghdr.
    let mut control = [0u64; 16];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is a valid "empty" value; the fields are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: `msg` points at `iov` (which points at `buf`, `buf.len()` writable bytes) and at `control`
    // (`msg_controllen` writable bytes); all outlive the call. The kernel writes within those lengths.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let len = (msg.msg_controllen as usize).min(std::mem::size_of_val(&control));
    let bytes: Vec<u8> = control
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .take(len)
        .collect();
    Ok((n as usize, find_timestampns(&bytes)))
}

/// Finds an `SCM_TIMESTAMPNS` control message in the bytes of a control buffer (64-bit layout:
/// `cmsg_len: usize, cmsg_level: i32, cmsg_type: i32`, data 8-aligned, then `timespec { i64, i64 }`).
pub fn find_timestampns(control: &[u8]) -> Option<SystemTime> {
    if cfg!(not(all(target_os = "linux", target_pointer_width = "64"))) {
        return None;
    }
    const HDR: usize = 16;
    let mut off = 0usize;
    while off + HDR <= control.len() {
        let word = |i: usize, n: usize| control.get(off + i..off + i + n);
        let clen = usize::from_ne_bytes(word(0, 8)?.try_into().ok()?);
        let level = i32::from_ne_bytes(word(8, 4)?.try_into().ok()?);
        let kind = i32::from_ne_bytes(word(12, 4)?.try_into().ok()?);
        if clen < HDR {
            return None;
        }
        if level == libc::SOL_SOCKET && kind == libc::SCM_TIMESTAMPNS && clen >= HDR + 16 {
            let sec = i64::from_ne_bytes(word(HDR, 8)?.try_into().ok()?);
            let nsec = i64::from_ne_bytes(word(HDR + 8, 8)?.try_into().ok()?);
            if sec < 0 || !(0..1_000_000_000).contains(&nsec) {
                return None;
            }
            return Some(SystemTime::UNIX_EPOCH + Duration::new(sec as u64, nsec as u32));
        }
        off += clen.div_ceil(8) * 8;
    }
    None
}

/// The round trip from a send time to a kernel receive time, when it is believable: not negative and not
/// longer than what the caller's own clock measured (a wall-clock step would otherwise show).
pub fn rtt(sent_wall: SystemTime, received: Option<SystemTime>, user_rtt: Duration) -> Duration {
    match received.and_then(|r| r.duration_since(sent_wall).ok()) {
        Some(k) if k <= user_rtt && !k.is_zero() => k,
        _ => user_rtt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmsg(level: i32, kind: i32, data: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&(16 + data.len()).to_ne_bytes());
        v.extend_from_slice(&level.to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(data);
        while v.len() % 8 != 0 {
            v.push(0);
        }
        v
    }

    #[test]
    fn finds_the_timestamp_after_another_message() {
        let mut ts = Vec::new();
        ts.extend_from_slice(&1_700_000_000i64.to_ne_bytes());
        ts.extend_from_slice(&123_456_789i64.to_ne_bytes());
        let mut buf = cmsg(libc::IPPROTO_IP, libc::IP_TTL, &64i32.to_ne_bytes());
        buf.extend(cmsg(libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS, &ts));
        assert_eq!(
            find_timestampns(&buf),
            Some(SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789))
        );
        // Truncated, empty, or a zero length that would loop forever.
        assert_eq!(find_timestampns(&buf[..buf.len() - 4]), None);
        assert_eq!(find_timestampns(&[]), None);
        assert_eq!(find_timestampns(&[0u8; 32]), None);
    }

    #[test]
    fn rtt_falls_back_to_the_callers_clock() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let user = Duration::from_micros(80);
        assert_eq!(
            rtt(t, Some(t + Duration::from_micros(50)), user),
            Duration::from_micros(50)
        );
        assert_eq!(rtt(t, Some(t - Duration::from_micros(50)), user), user);
        assert_eq!(rtt(t, Some(t + Duration::from_secs(1)), user), user);
        assert_eq!(rtt(t, None, user), user);
    }
}
