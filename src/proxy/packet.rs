//! AF_PACKET sockets for the bridge ([`super::bridge`]): every `unsafe` of the bridge is in this file.
//!
//! One socket per interface, `SOCK_RAW` bound to that interface only, with:
//! - promiscuous mode through a socket membership (`PACKET_MR_PROMISC`): the kernel counts it per socket and
//!   takes it back when the socket closes, so a crashed bridge leaves no interface promiscuous;
//! - `PACKET_IGNORE_OUTGOING` (and a check of `sll_pkttype` for older kernels): copies of frames leaving the
//!   interface, ours or the host's, are not read back;
//! - `PACKET_VNET_HDR`: every frame carries a 10-byte virtio-net header, so segmentation-offload aggregates
//!   (TSO/GSO/GRO, up to 64 KiB) and frames whose checksum the sender left to the hardware (veth, most NICs)
//!   are forwarded as they are, and the kernel segments and checksums them on the way out;
//! - `PACKET_QDISC_BYPASS`: frames go straight to the driver, as a wire would take them;
//! - `SO_TIMESTAMPNS`: the kernel's arrival time of each frame, so the delay counts from arrival, not from when
//!   this thread woke up.
//!
//! Receiving is one `recvmmsg` per batch (up to [`BATCH`] frames, waiting for the first only), sending one
//! `sendmmsg` per batch. A TPACKET_V3 ring would save the copy out of the kernel; the batch calls were measured
//! sufficient (docs/proxy-bridge.md, bench/bridge.sh) and keep this file small.
#![allow(unsafe_code)] // the bridge's AF_PACKET socket: socket, bind, recvmmsg/sendmmsg batches

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant, SystemTime};

/// Frames read or written per system call at most.
pub const BATCH: usize = 64;
/// Bytes of the virtio-net header in front of every frame.
pub const VNET_HDR: usize = 10;
/// Room per received frame: the largest offload aggregate (64 KiB) with its link header and virtio-net header.
pub const FRAME_ROOM: usize = 65_536 + 256;

/// Why a packet socket could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// Raw sockets or promiscuous mode are not permitted.
    NotPermitted,
    /// No interface of this name in this network namespace; the names there are listed.
    NoSuchInterface(Vec<String>),
    /// Another failure: the step and the error.
    Io(&'static str, io::Error),
}

/// An AF_PACKET socket bound to one interface.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: i32,
}

/// The index of interface `name` in this thread's network namespace, if there is one.
pub fn ifindex(name: &str) -> Option<i32> {
    crate::sys::if_nametoindex(name).map(|i| i as i32)
}

/// The names of the interfaces in this thread's network namespace.
pub fn interfaces() -> Vec<String> {
    crate::sys::interfaces()
        .into_iter()
        .map(|(_, n)| n)
        .collect()
}

fn permission(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES))
}

impl PacketSocket {
    /// Opens a socket on interface `name`, promiscuous, ignoring outgoing copies.
    pub fn open(name: &str) -> Result<PacketSocket, OpenError> {
        // Protocol 0: the socket receives nothing until `bind` names the protocol and the interface, so no
        // frame of another interface reaches it in between (and the bridge never forwards one), as libpcap.
        // SAFETY: plain socket(2) call; the result is checked before use.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(if permission(&e) {
                OpenError::NotPermitted
            } else {
                OpenError::Io("opening a packet socket", e)
            });
        }
        // SAFETY: fd was just returned by socket(2) and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let Some(ifindex) = ifindex(name) else {
            return Err(OpenError::NoSuchInterface(interfaces()));
        };
        let raw = fd.as_raw_fd();
        let io = |what| move |e| OpenError::Io(what, e);
        let one: libc::c_int = 1;
        // Older kernels lack it: the pkttype check in recv() covers them.
        let _ = crate::sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one);
        crate::sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &one)
            .map_err(io("asking for virtio-net headers (PACKET_VNET_HDR)"))?;
        let _ = crate::sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &one);
        crate::sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &one)
            .map_err(io("asking for receive timestamps"))?;
        let buf: libc::c_int = 8 << 20;
        // Larger buffers than the default when permitted (FORCE needs CAP_NET_ADMIN).
        if crate::sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &buf).is_err() {
            let _ = crate::sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &buf);
        }
        if crate::sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &buf).is_err() {
            let _ = crate::sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &buf);
        }
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        crate::sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv)
            .map_err(io("setting the receive timeout"))?;
        // SAFETY: sockaddr_ll is plain data; all zeroes is a valid value, filled in below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex;
        // SAFETY: bind with a valid sockaddr_ll and its size.
        let r = unsafe {
            libc::bind(
                raw,
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(OpenError::Io(
                "binding to the interface",
                io::Error::last_os_error(),
            ));
        }
        let mreq = libc::packet_mreq {
            mr_ifindex: ifindex,
            mr_type: libc::PACKET_MR_PROMISC as u16,
            mr_alen: 0,
            mr_address: [0; 8],
        };
        crate::sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq).map_err(
            |e| {
                if permission(&e) {
                    OpenError::NotPermitted
                } else {
                    OpenError::Io("making the interface promiscuous", e)
                }
            },
        )?;
        Ok(PacketSocket { fd, ifindex })
    }

    /// The interface index the socket is bound to.
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// Waits up to the socket's receive timeout (100 ms) for frames and reads up to [`BATCH`] of them into
    /// `batch`; returns how many. Copies of outgoing frames are left out. A timeout returns 0.
    pub fn recv(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        let n = batch.bufs.len().min(BATCH);
        let mut iov: [libc::iovec; BATCH] = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; BATCH];
        // SAFETY: mmsghdr and sockaddr_ll are plain data; all zeroes is valid, filled in below.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut names: [libc::sockaddr_ll; BATCH] = unsafe { std::mem::zeroed() };
        let mut ctrl = [[0u64; 8]; BATCH];
        for i in 0..n {
            iov[i].iov_base = batch.bufs[i].as_mut_ptr() as *mut libc::c_void;
            iov[i].iov_len = batch.bufs[i].len();
            let h = &mut msgs[i].msg_hdr;
            h.msg_iov = &mut iov[i];
            h.msg_iovlen = 1;
            h.msg_name = &mut names[i] as *mut libc::sockaddr_ll as *mut libc::c_void;
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            h.msg_control = ctrl[i].as_mut_ptr() as *mut libc::c_void;
            h.msg_controllen = std::mem::size_of_val(&ctrl[i]) as _;
        }
        // SAFETY: every mmsghdr points at an iovec over a live buffer of the stated length, a sockaddr_ll and a
        // control buffer, all living until the call returns; n <= BATCH entries.
        let r = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                n as _,
                libc::MSG_WAITFORONE as _,
                std::ptr::null_mut(),
            )
        };
        let (now, wall) = (Instant::now(), SystemTime::now());
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock
                | io::ErrorKind::TimedOut
                | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let mut kept = 0;
        for i in 0..r as usize {
            if names[i].sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            let mut arrival = now;
            let h = &msgs[i].msg_hdr;
            // SAFETY: the CMSG macros walk the control buffer the kernel filled, within msg_controllen.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(h);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SO_TIMESTAMPNS
                    {
                        let ts =
                            std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                        let stamp = std::time::UNIX_EPOCH
                            + Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
                        // Only a plausible stamp is trusted (a clock step would make it nonsense).
                        if let Ok(ago) = wall.duration_since(stamp)
                            && ago < Duration::from_millis(100)
                        {
                            arrival = now.checked_sub(ago).unwrap_or(now);
                        }
                    }
                    c = libc::CMSG_NXTHDR(h, c);
                }
            }
            batch.frames[kept] = (i, msgs[i].msg_len as usize, arrival);
            kept += 1;
        }
        batch.len = kept;
        Ok(kept)
    }

    /// Sends `frames` (each starting with its virtio-net header) out of the interface, in order, with as few
    /// system calls as the kernel allows (one per [`BATCH`] normally). Returns how many were sent; frames the
    /// driver refused (e.g. larger than the MTU without offload information) are skipped and counted in the
    /// returned error count.
    pub fn send<'a>(
        &self,
        frames: impl IntoIterator<Item = &'a [u8]>,
    ) -> (usize, usize, Option<io::Error>) {
        let mut sent = 0;
        let mut failed = 0;
        let mut last_err = None;
        let mut iov: [libc::iovec; BATCH] = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; BATCH];
        let mut retries = 0;
        let mut it = frames.into_iter().peekable();
        while it.peek().is_some() {
            let mut n = 0;
            for f in it.by_ref().take(BATCH) {
                iov[n].iov_base = f.as_ptr() as *mut libc::c_void;
                iov[n].iov_len = f.len();
                n += 1;
            }
            let mut start = 0;
            while start < n {
                // SAFETY: mmsghdr is plain data; all zeroes is valid, filled in below.
                let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
                for (m, v) in msgs.iter_mut().zip(&mut iov[start..n]) {
                    m.msg_hdr.msg_iov = v;
                    m.msg_hdr.msg_iovlen = 1;
                }
                // SAFETY: each mmsghdr points at one iovec over a frame borrowed for 'a (alive during the call);
                // n - start <= BATCH entries. The socket is bound, so no destination address is needed.
                let r = unsafe {
                    libc::sendmmsg(self.fd.as_raw_fd(), msgs.as_mut_ptr(), (n - start) as _, 0)
                };
                if r > 0 {
                    sent += r as usize;
                    start += r as usize;
                    retries = 0;
                    continue;
                }
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if matches!(e.raw_os_error(), Some(libc::ENOBUFS) | Some(libc::EAGAIN))
                    && retries < 20
                {
                    // The driver's queue is full: give it a moment, as a full link would.
                    retries += 1;
                    std::thread::sleep(Duration::from_micros(50));
                    continue;
                }
                // This frame is refused (too large, device gone, queue full for 1 ms): skip it.
                failed += 1;
                start += 1;
                retries = 0;
                last_err = Some(e);
            }
        }
        (sent, failed, last_err)
    }
}

/// Buffers for one [`PacketSocket::recv`].
#[derive(Debug)]
pub struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    /// (buffer index, length, arrival) of each frame kept.
    frames: Vec<(usize, usize, Instant)>,
    len: usize,
}

impl Default for RecvBatch {
    fn default() -> Self {
        RecvBatch {
            bufs: (0..BATCH).map(|_| vec![0u8; FRAME_ROOM]).collect(),
            frames: vec![(0, 0, Instant::now()); BATCH],
            len: 0,
        }
    }
}

impl RecvBatch {
    /// The frames read by the last receive: bytes (virtio-net header first) and arrival time.
    pub fn frames(&self) -> impl Iterator<Item = (&[u8], Instant)> {
        self.frames[..self.len]
            .iter()
            .map(|&(i, n, t)| (&self.bufs[i][..n.min(FRAME_ROOM)], t))
    }
}
