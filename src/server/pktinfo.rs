//! Answering a datagram from the address it was sent to.
//!
//! A UDP socket bound to the unspecified address (`0.0.0.0` or `::`) answers with `send_to` from whatever
//! source address the kernel's routing picks, which is not the address the client sent to when the host has
//! several (127.0.0.2 on loopback, a second interface, a service address): a client with a connected socket,
//! as every roundtrip client and agent uses, drops such answers. So the responder asks for each datagram's
//! destination (`IP_PKTINFO`, `IPV6_RECVPKTINFO`; on a dual-stack socket IPv4 arrives as v4-mapped) and
//! answers with it as the source (`IP_PKTINFO` / `IPV6_PKTINFO` on `sendmsg`). A socket bound to one address
//! needs none of this and uses plain `recv_from` / `send_to`.
#![allow(unsafe_code)] // recvmsg/sendmsg with IP_PKTINFO control messages

use socket2::SockAddr;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

/// Room for one `in6_pktinfo` or `in_pktinfo` control message.
const CONTROL_LEN: usize = 64;

/// Asks the kernel for each datagram's destination address when `sock` is bound to the unspecified address.
/// Returns whether it did (then use [`recv`] and [`send`] with the destination).
pub(super) fn enable(sock: &UdpSocket) -> io::Result<bool> {
    let local = sock.local_addr()?;
    if !local.ip().is_unspecified() {
        return Ok(false);
    }
    let (level, name) = match local {
        SocketAddr::V4(_) => (libc::IPPROTO_IP, libc::IP_PKTINFO),
        SocketAddr::V6(_) => (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO),
    };
    crate::sys::setsockopt_on(sock, level, name)?;
    Ok(true)
}

/// Receives one datagram: its length, its sender and the address it was sent to (when the kernel said).
pub(super) fn recv(
    sock: &UdpSocket,
    buf: &mut [u8],
) -> io::Result<(usize, SocketAddr, Option<IpAddr>)> {
    // SAFETY: all-zero bytes are a valid sockaddr_storage, msghdr and control buffer.
    let mut from: libc::sockaddr_storage = unsafe { zeroed() };
    let mut control = [0u64; CONTROL_LEN / 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = (&mut from as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = CONTROL_LEN as _;
    // SAFETY: every pointer in msg points at live buffers of the lengths given.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let peer = socket_addr(&from).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidData, "datagram from a non-IP address")
    })?;
    let mut dst = None;
    // SAFETY: walking the control messages the kernel wrote, with the libc macros, within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let (level, kind) = ((*c).cmsg_level, (*c).cmsg_type);
            if level == libc::IPPROTO_IP && kind == libc::IP_PKTINFO {
                let info: libc::in_pktinfo = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                dst = Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    info.ipi_addr.s_addr,
                ))));
            } else if level == libc::IPPROTO_IPV6 && kind == libc::IPV6_PKTINFO {
                let info: libc::in6_pktinfo = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                dst = Some(IpAddr::V6(Ipv6Addr::from(info.ipi6_addr.s6_addr)));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, peer, dst))
}

/// Sends `data` to `peer` from the address `from` (the destination [`recv`] reported), or as `send_to` when
/// `from` is None.
pub(super) fn send(
    sock: &UdpSocket,
    data: &[u8],
    peer: SocketAddr,
    from: Option<IpAddr>,
) -> io::Result<usize> {
    let Some(from) = from else {
        return sock.send_to(data, peer);
    };
    let to = SockAddr::from(peer);
    let mut control = [0u64; CONTROL_LEN / 8];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut _,
        iov_len: data.len(),
    };
    // SAFETY: all-zero bytes are a valid msghdr.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = to.as_ptr() as *mut _;
    msg.msg_namelen = to.len();
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: one control message written inside `control` (CMSG_SPACE of its payload fits CONTROL_LEN).
    unsafe {
        let (level, kind, len) = match from {
            IpAddr::V4(_) => (
                libc::IPPROTO_IP,
                libc::IP_PKTINFO,
                size_of::<libc::in_pktinfo>(),
            ),
            IpAddr::V6(_) => (
                libc::IPPROTO_IPV6,
                libc::IPV6_PKTINFO,
                size_of::<libc::in6_pktinfo>(),
            ),
        };
        msg.msg_controllen = libc::CMSG_SPACE(len as u32) as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = level;
        (*c).cmsg_type = kind;
        (*c).cmsg_len = libc::CMSG_LEN(len as u32) as _;
        match from {
            IpAddr::V4(a) => {
                let mut info: libc::in_pktinfo = zeroed();
                info.ipi_spec_dst.s_addr = u32::from(a).to_be();
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast(), info);
            }
            IpAddr::V6(a) => {
                let mut info: libc::in6_pktinfo = zeroed();
                info.ipi6_addr.s6_addr = a.octets();
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast(), info);
            }
        }
    }
    // SAFETY: every pointer in msg points at live buffers of the lengths given.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// The IPv4 or IPv6 address in `ss`, if it holds one.
fn socket_addr(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which it is large and aligned enough for.
            let a: &libc::sockaddr_in = unsafe { &*(ss as *const libc::sockaddr_storage).cast() };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(a.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let a: &libc::sockaddr_in6 = unsafe { &*(ss as *const libc::sockaddr_storage).cast() };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                ip,
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}
