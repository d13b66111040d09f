//! The only unsafe code of live capture: the AF_PACKET socket's options, the memory-mapped TPACKET_V3 ring,
//! and handing a block that the kernel has passed to user space out as a byte slice.
//!
//! Everything that reads bytes out of a block is safe code in [`super::block`]; this file only decides
//! *when* a block may be read (its status word says `TP_STATUS_USER`) and gives it back (status
//! `TP_STATUS_KERNEL`).
#![allow(unsafe_code)] // the packet socket, the mmap'd TPACKET_V3 ring and its block status words

use crate::sys::Plain;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// `ETH_P_ALL` in network byte order, as `bind()` wants it.
const ETH_P_ALL_BE: u16 = (libc::ETH_P_ALL as u16).to_be();
const SOL_PACKET: libc::c_int = 263;
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_FANOUT: libc::c_int = 18;
/// Fanout by the flow hash (symmetric since Linux 4.x: both directions of a connection land on one socket).
pub const PACKET_FANOUT_HASH: u32 = 0;
/// Reassemble IP fragments before hashing, so every fragment of a datagram lands on one socket.
pub const PACKET_FANOUT_FLAG_DEFRAG: u32 = 0x8000;
/// The kernel picks an unused group id (first socket of a group only).
pub const PACKET_FANOUT_FLAG_UNIQUEID: u32 = 0x2000;
const TPACKET_V3: libc::c_int = 2;
const PACKET_MR_PROMISC: libc::c_ushort = 1;
const SO_LOCK_FILTER: libc::c_int = 44;
/// Block status: owned by user space.
pub const TP_STATUS_USER: u32 = 1;

/// `struct tpacket_req3` (linux/if_packet.h).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TpacketReq3 {
    /// Bytes per block (a multiple of the page size).
    pub block_size: u32,
    /// Blocks in the ring.
    pub block_nr: u32,
    /// Nominal frame size (TPACKET_V3 packs packets of any size into a block).
    pub frame_size: u32,
    /// `block_size / frame_size * block_nr`.
    pub frame_nr: u32,
    /// A block that is not full is handed to user space after this many milliseconds.
    pub retire_blk_tov: u32,
    /// Private bytes per block (none).
    pub sizeof_priv: u32,
    /// Feature request word (none).
    pub feature_req_word: u32,
}

/// `struct tpacket_stats_v3`: reading it resets the kernel's counters.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct TpacketStatsV3 {
    packets: u32,
    drops: u32,
    freeze_q_cnt: u32,
}

/// `struct packet_mreq`.
#[repr(C)]
#[derive(Clone, Copy)]
struct PacketMreq {
    ifindex: libc::c_int,
    kind: libc::c_ushort,
    alen: libc::c_ushort,
    address: [u8; 8],
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

// SAFETY: the three option structs are plain `u32`/`c_int`/`c_ushort` fields and a byte array.
unsafe impl Plain for TpacketReq3 {}
// SAFETY: as above.
unsafe impl Plain for TpacketStatsV3 {}
// SAFETY: as above.
unsafe impl Plain for PacketMreq {}

fn setsockopt<T: Plain>(
    s: &PacketSocket,
    level: libc::c_int,
    name: libc::c_int,
    v: &T,
) -> io::Result<()> {
    crate::sys::setsockopt(&s.fd, level, name, v)
}

/// An AF_PACKET socket: `SOCK_RAW` (link-layer header included) or `SOCK_DGRAM` (cooked, as libpcap's `any`).
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
}

impl PacketSocket {
    /// Opens the socket hooked to no protocol: it receives nothing until [`bind`](Self::bind) names `ETH_P_ALL`
    /// and the interface, so no packet of another interface lands in the ring while it is set up (libpcap's
    /// order). Fails with EPERM without CAP_NET_RAW.
    pub fn open(cooked: bool) -> io::Result<Self> {
        let kind = if cooked {
            libc::SOCK_DGRAM
        } else {
            libc::SOCK_RAW
        };
        // SAFETY: plain system call; the result is checked before it is used as a descriptor.
        let fd = unsafe { libc::socket(libc::AF_PACKET, kind | libc::SOCK_CLOEXEC, 0) };
        check(fd)?;
        // SAFETY: `fd` is a fresh descriptor we own and nothing else closes.
        Ok(PacketSocket {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// The descriptor.
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Asks for TPACKET_V3 (must come before the ring).
    pub fn set_v3(&self) -> io::Result<()> {
        setsockopt(self, SOL_PACKET, PACKET_VERSION, &TPACKET_V3)
    }

    /// Attaches a classic BPF program (instructions in `struct sock_filter` layout) and, when `lock`, locks
    /// it so it cannot be replaced.
    pub fn attach_filter(&self, insns: &[libc::sock_filter], lock: bool) -> io::Result<()> {
        crate::sys::attach_filter(&self.fd, insns)?;
        if lock {
            setsockopt(self, libc::SOL_SOCKET, SO_LOCK_FILTER, &1 as &libc::c_int)?;
        }
        Ok(())
    }

    /// Binds to one interface (index > 0) or to all (0).
    pub fn bind(&self, ifindex: i32) -> io::Result<()> {
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_protocol = ETH_P_ALL_BE;
        sa.sll_ifindex = ifindex;
        // SAFETY: `sa` is a valid sockaddr_ll and the length is its size.
        check(unsafe {
            libc::bind(
                self.raw(),
                (&sa as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })
    }

    /// Joins fanout group `id` with `mode` (type and flags; `id` 0 with [`PACKET_FANOUT_FLAG_UNIQUEID`] makes
    /// a new group) and returns the group's id. The socket must be bound.
    pub fn join_fanout(&self, id: u16, mode: u32) -> io::Result<u16> {
        let v: libc::c_int = (u32::from(id) | (mode << 16)) as libc::c_int;
        setsockopt(self, SOL_PACKET, PACKET_FANOUT, &v)?;
        let (out, _): (libc::c_int, _) =
            crate::sys::getsockopt(&self.fd, SOL_PACKET, PACKET_FANOUT)?;
        Ok((out as u32 & 0xffff) as u16)
    }

    /// Puts the interface in promiscuous mode for as long as the socket is open.
    pub fn promisc(&self, ifindex: i32) -> io::Result<()> {
        let m = PacketMreq {
            ifindex,
            kind: PACKET_MR_PROMISC,
            alen: 0,
            address: [0; 8],
        };
        setsockopt(self, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &m)
    }

    /// Kernel counters since the previous call: (packets passed to the socket, packets dropped).
    pub fn stats(&self) -> io::Result<(u64, u64)> {
        let (s, _): (TpacketStatsV3, _) =
            crate::sys::getsockopt(&self.fd, SOL_PACKET, PACKET_STATISTICS)?;
        Ok((u64::from(s.packets), u64::from(s.drops)))
    }

    /// The pending socket error (e.g. ENETDOWN when the interface went down), if any.
    pub fn take_error(&self) -> Option<io::Error> {
        let (e, _): (libc::c_int, _) =
            crate::sys::getsockopt(&self.fd, libc::SOL_SOCKET, libc::SO_ERROR).ok()?;
        (e != 0).then(|| io::Error::from_raw_os_error(e))
    }

    /// Waits up to `timeout_ms` for a block (or an error). Returns (readable, error/hang-up).
    pub fn poll(&self, timeout_ms: i32) -> io::Result<(bool, bool)> {
        let mut p = libc::pollfd {
            fd: self.raw(),
            events: libc::POLLIN | libc::POLLERR,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok((false, false));
            }
            return Err(e);
        }
        Ok((
            p.revents & libc::POLLIN != 0,
            p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0,
        ))
    }
}

/// The memory-mapped receive ring: `block_nr` blocks of `block_size` bytes shared with the kernel.
#[derive(Debug)]
pub struct Ring {
    base: *mut u8,
    len: usize,
    block_size: usize,
    block_nr: usize,
}

// SAFETY: the mapping is owned by this value alone; moving it to another thread moves the only access path.
unsafe impl Send for Ring {}

impl Ring {
    /// Sets up the ring on `sock` (after [`PacketSocket::set_v3`], before bind) and maps it.
    pub fn new(sock: &PacketSocket, req: TpacketReq3) -> io::Result<Self> {
        setsockopt(sock, SOL_PACKET, PACKET_RX_RING, &req)?;
        let len = req.block_size as usize * req.block_nr as usize;
        // SAFETY: mapping the ring the kernel just allocated for this socket, shared, at a kernel-chosen
        // address; the result is checked against MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED,
                sock.raw(),
                0,
            )
        };
        let base = if base == libc::MAP_FAILED {
            // MAP_LOCKED needs RLIMIT_MEMLOCK room; fall back to an ordinary mapping.
            // SAFETY: as above.
            let b = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    sock.raw(),
                    0,
                )
            };
            if b == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            b
        } else {
            base
        };
        Ok(Ring {
            base: base.cast(),
            len,
            block_size: req.block_size as usize,
            block_nr: req.block_nr as usize,
        })
    }

    /// Blocks in the ring.
    pub fn blocks(&self) -> usize {
        self.block_nr
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        assert!(i < self.block_nr);
        // SAFETY: block `i` starts inside the mapping (checked above); its first 12 bytes are
        // `tpacket_block_desc { version, offset_to_priv, hdr.block_status }` and the status word at offset 8 is
        // 4-byte aligned (blocks are page aligned). The kernel writes it concurrently, hence the atomic view.
        unsafe { &*(self.base.add(i * self.block_size + 8) as *const AtomicU32) }
    }

    /// Block `i` as bytes when the kernel has handed it to user space, else `None`.
    pub fn user_block(&self, i: usize) -> Option<&[u8]> {
        if self.status(i).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
            return None;
        }
        // SAFETY: the block lies inside the mapping; while its status says TP_STATUS_USER the kernel does not
        // write to it (it moves on to other blocks or drops packets), so reading it as a shared slice is sound
        // until `release(i)`, which needs `&mut self` and so ends this borrow first.
        Some(unsafe {
            std::slice::from_raw_parts(self.base.add(i * self.block_size), self.block_size)
        })
    }

    /// Gives block `i` back to the kernel.
    pub fn release(&mut self, i: usize) {
        self.status(i).store(0, Ordering::Release);
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `new`; no borrow of it can outlive `self`.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}
