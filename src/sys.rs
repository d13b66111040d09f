//! The plain system calls the engine makes through `libc`, behind safe, typed functions: socket options,
//! interface lookups, signal handlers, thread scheduling and clocks, resource limits.
//!
//! This is the home of the crate's unsafe code (see ARCHITECTURE.md, "Unsafe code"): the crate denies
//! `unsafe_code`, and only this module and the files listed in tests/house.rs (`unsafe_allow_list_is_documented`)
//! allow it, each for what is genuinely local to it (a memory-mapped ring, `recvmsg` control messages, ...).
//! Every function here checks its result and returns `io::Result`; callers add the operation and address.
#![allow(unsafe_code)] // the one home of the raw system calls: each block below says why it is sound

pub mod at;

use std::ffi::{CStr, CString};
use std::io;
use std::mem::{MaybeUninit, size_of};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, FromRawFd};
use std::time::Duration;

/// A socket option value the kernel may read or fill byte for byte: plain integers and structs of them, for
/// which every bit pattern (all zeroes included) is a valid value, with no pointers.
///
/// # Safety
/// Implement only for `Copy` types without padding-sensitive invariants, references or pointers, for which
/// any bytes the kernel writes are a valid value.
pub unsafe trait Plain: Copy {}

// SAFETY: integers: every bit pattern is valid.
unsafe impl Plain for libc::c_int {}
// SAFETY: as above.
unsafe impl Plain for u32 {}
// SAFETY: as above.
unsafe impl Plain for u64 {}
// SAFETY: plain integers and arrays of them (the kernel's `struct sockaddr_storage`).
unsafe impl Plain for libc::sockaddr_storage {}
// SAFETY: plain integers (`struct packet_mreq`).
unsafe impl Plain for libc::packet_mreq {}
// SAFETY: plain integers (`struct timeval`).
unsafe impl Plain for libc::timeval {}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `setsockopt(fd, level, name, value)`.
pub fn setsockopt<T: Plain>(
    fd: impl AsFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` is a live, initialised `T` for the duration of the call and its exact size is passed;
    // the descriptor is borrowed from an open file.
    check(unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })
}

/// `setsockopt` of an `int` option set to 1 (a boolean option switched on).
pub fn setsockopt_on(fd: impl AsFd, level: libc::c_int, name: libc::c_int) -> io::Result<()> {
    setsockopt(fd, level, name, &(1 as libc::c_int))
}

/// `getsockopt(fd, level, name)` into a `T` (zeroed first): the value and the bytes the kernel wrote.
pub fn getsockopt<T: Plain>(
    fd: impl AsFd,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<(T, usize)> {
    let mut v = MaybeUninit::<T>::zeroed();
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is writable for `len` bytes; the kernel writes at most `len` bytes and stores the count.
    check(unsafe {
        libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            name,
            v.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    // SAFETY: `T: Plain`: all zeroes, and any bytes the kernel wrote over them, are a valid `T`.
    Ok((unsafe { v.assume_init() }, len as usize))
}

/// `getsockopt(fd, level, name)` into a byte buffer; the bytes the kernel wrote.
pub fn getsockopt_bytes(
    fd: impl AsFd,
    level: libc::c_int,
    name: libc::c_int,
    buf: &mut [u8],
) -> io::Result<usize> {
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is writable for `len` bytes; the kernel writes at most `len` and stores the count.
    check(unsafe {
        libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            name,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    Ok((len as usize).min(buf.len()))
}

/// Attaches a classic BPF program (`SO_ATTACH_FILTER`) to a socket.
pub fn attach_filter(fd: impl AsFd, insns: &[libc::sock_filter]) -> io::Result<()> {
    let len = libc::c_ushort::try_from(insns.len()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} instructions: a classic BPF program holds at most 65535",
                insns.len()
            ),
        )
    })?;
    let prog = libc::sock_fprog {
        len,
        filter: insns.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `prog` points at `len` live instructions for the duration of the call (the kernel copies them).
    check(unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&prog as *const libc::sock_fprog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    })
}

/// A socket address the kernel wrote into a `sockaddr_storage` (IPv4 or IPv6, address and port; None for another
/// family).
pub fn socket_addr(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: a storage of family AF_INET holds a sockaddr_in, which is smaller and less aligned.
            let a: libc::sockaddr_in =
                unsafe { std::ptr::read((ss as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::from((
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: a storage of family AF_INET6 holds a sockaddr_in6, which is smaller and less aligned.
            let a: libc::sockaddr_in6 =
                unsafe { std::ptr::read((ss as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::from((
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
            )))
        }
        _ => None,
    }
}

/// The index of interface `name` in this thread's network namespace (None when there is none).
pub fn if_nametoindex(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    // SAFETY: a NUL-terminated string that lives across the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}

/// The interfaces of this thread's network namespace: (index, name), sorted by name.
pub fn interfaces() -> Vec<(u32, String)> {
    let mut out = Vec::new();
    // SAFETY: if_nameindex returns an array ended by a zero entry (or NULL), read before it is freed once.
    unsafe {
        let list = libc::if_nameindex();
        if list.is_null() {
            return out;
        }
        let mut p = list;
        while (*p).if_index != 0 && !(*p).if_name.is_null() {
            let name = CStr::from_ptr((*p).if_name).to_string_lossy().into_owned();
            out.push(((*p).if_index, name));
            p = p.add(1);
        }
        libc::if_freenameindex(list);
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    out
}

/// The hardware type of interface `name` (`ARPHRD_*`: 1 Ethernet, 772 loopback, 65534 none (tun, WireGuard),
/// ...), from `SIOCGIFHWADDR`; None when there is no such interface.
pub fn interface_hwtype(name: &str) -> Option<u16> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return None;
    }
    // SAFETY: plain socket(2); the result is checked before it is owned.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let sock = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain data (a name and a union of plain fields): all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq with a NUL-terminated name (zeroed past it); SIOCGIFHWADDR writes the
    // hardware address into its union, inside the struct.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) }).ok()?;
    // SAFETY: after SIOCGIFHWADDR the union holds `ifru_hwaddr` (a sockaddr; every field plain).
    Some(unsafe { req.ifr_ifru.ifru_hwaddr.sa_family })
}

/// One address of an interface, as `getifaddrs` lists it (IPv4 and IPv6 only).
struct IfAddr {
    /// The interface's name.
    name: String,
    /// The address.
    addr: IpAddr,
    /// For IPv4, the netmask (host order), when the list gives one.
    netmask_v4: Option<u32>,
}

/// Every IPv4 and IPv6 address of this network namespace's interfaces, in `getifaddrs`'s order: the one walk
/// of its list, for [`ipv4_netmask`] and [`interface_addresses`].
fn if_addrs() -> io::Result<Vec<IfAddr>> {
    let mut out = Vec::new();
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list and stores its head in ifap; it is freed below.
    check(unsafe { libc::getifaddrs(&mut ifap) })?;
    let mut p = ifap;
    while !p.is_null() {
        // SAFETY: p is a node of the list returned by getifaddrs, valid until freeifaddrs.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr points at a sockaddr whose family says which struct it is.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        if family == libc::AF_INET {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            let netmask_v4 = (!ifa.ifa_netmask.is_null()).then(|| {
                // SAFETY: the netmask of an AF_INET address is a sockaddr_in.
                let m = unsafe { &*(ifa.ifa_netmask as *const libc::sockaddr_in) };
                u32::from_be(m.sin_addr.s_addr)
            });
            out.push(IfAddr {
                name,
                addr: IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))),
                netmask_v4,
            });
        } else if family == libc::AF_INET6 {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
            out.push(IfAddr {
                name,
                addr: IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)),
                netmask_v4: None,
            });
        }
    }
    // SAFETY: ifap came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(ifap) };
    Ok(out)
}

/// The IPv4 netmask (host order) of the first IPv4 address of `iface`, from getifaddrs (what libpcap's
/// `pcap_lookupnet` reads); 0 when it has none (`any`, an interface without IPv4), as tcpdump then uses.
pub fn ipv4_netmask(iface: &str) -> u32 {
    if_addrs()
        .unwrap_or_default()
        .into_iter()
        .find_map(|a| (a.name == iface).then_some(a.netmask_v4).flatten())
        .unwrap_or(0)
}

/// Every IPv4 and IPv6 address of this network namespace's interfaces (`getifaddrs`), sorted, deduplicated.
pub fn interface_addresses() -> io::Result<Vec<IpAddr>> {
    let mut out: Vec<IpAddr> = if_addrs()?.into_iter().map(|a| a.addr).collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// This host's name (`gethostname`).
pub fn hostname() -> io::Result<String> {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its whole length; gethostname NUL-terminates within it (or truncates).
    check(unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) })?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// Installs `handler` for signal `signal` (`SA_RESTART`, empty mask). The handler must only do what is
/// async-signal-safe (store to an atomic).
pub fn on_signal(signal: libc::c_int, handler: extern "C" fn(libc::c_int)) -> io::Result<()> {
    // SAFETY: the sigaction struct is fully initialised (zeroed, then the handler and an empty mask); the
    // handler is a plain function the caller promises is async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = libc::SA_RESTART;
        check(libc::sigaction(signal, &sa, std::ptr::null_mut()))
    }
}

static HANGUP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_hangup(_: libc::c_int) {
    HANGUP.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Makes SIGHUP set a flag instead of ending the process (installed on the first call; a failure to install
/// leaves the flag false for ever) and returns the flag: take it with `swap(false, ..)`.
pub fn sighup_flag() -> &'static std::sync::atomic::AtomicBool {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let _ = on_signal(libc::SIGHUP, on_hangup);
    });
    &HANGUP
}

/// Sets the calling thread's timer slack (`PR_SET_TIMERSLACK`; at least 1 ns: 0 would mean "the default").
pub fn set_timer_slack(slack: Duration) -> io::Result<()> {
    let ns = slack.as_nanos().clamp(1, u128::from(libc::c_ulong::MAX)) as libc::c_ulong;
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes plain integers and only sets this thread's timer slack.
    check(unsafe {
        libc::prctl(
            libc::PR_SET_TIMERSLACK,
            ns,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    })
}

/// Scheduling of the calling thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sched {
    /// `SCHED_FIFO` real time at this priority (1 is the lowest).
    Fifo(i32),
    /// `SCHED_OTHER`, the normal time sharing.
    Normal,
}

/// Sets the calling thread's scheduling (`pthread_setschedparam`). Fails with EPERM without CAP_SYS_NICE.
pub fn set_thread_sched(s: Sched) -> io::Result<()> {
    let (policy, prio) = match s {
        Sched::Fifo(p) => (libc::SCHED_FIFO, p),
        Sched::Normal => (libc::SCHED_OTHER, 0),
    };
    // SAFETY: sched_param is plain integers (and, on musl, timespecs): all zeroes is a valid value. Built
    // field by field because musl's has more fields than glibc's (static builds, deploy/docker).
    let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
    param.sched_priority = prio;
    // SAFETY: pthread_self() names the calling thread, which is alive; `param` outlives the call.
    let rc = unsafe { libc::pthread_setschedparam(libc::pthread_self(), policy, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// A clock's current value (`clock_gettime`) as a [`Duration`] since the clock's origin.
pub fn clock_now(clock: libc::clockid_t) -> io::Result<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    check(unsafe { libc::clock_gettime(clock, &mut ts) })?;
    Ok(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_time() -> io::Result<Duration> {
    clock_now(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// `at` as an absolute `CLOCK_MONOTONIC` time (the clock [`Instant`](std::time::Instant) reads on Linux), for
/// kernel timers; a time that passed is now (never all zeroes, which would disarm a timerfd).
fn monotonic_timespec(at: std::time::Instant) -> libc::timespec {
    let left = at.saturating_duration_since(std::time::Instant::now());
    let now = clock_now(libc::CLOCK_MONOTONIC).unwrap_or_default();
    let t = (now + left).max(Duration::from_nanos(1));
    libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    }
}

/// Sleeps until `at` on `CLOCK_MONOTONIC` with an absolute deadline (`clock_nanosleep(TIMER_ABSTIME)`: no drift
/// from a relative sleep that starts late); returns early on a signal, which the caller's loop handles.
pub fn sleep_until(at: std::time::Instant) {
    let deadline = monotonic_timespec(at);
    // SAFETY: a valid absolute timespec; no remainder is asked for with TIMER_ABSTIME.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &deadline,
            std::ptr::null_mut(),
        );
    }
}

/// A non-blocking `timerfd` on `CLOCK_MONOTONIC`, armed to absolute deadlines (nanosecond resolution), for an
/// event loop to poll.
#[derive(Debug)]
pub struct TimerFd {
    fd: std::os::fd::OwnedFd,
}

impl TimerFd {
    /// A disarmed timer.
    pub fn new() -> io::Result<TimerFd> {
        // SAFETY: timerfd_create takes no pointers; a negative result is an error, anything else a new fd.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        check(fd)?;
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        Ok(TimerFd {
            fd: unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Fires at `at` (at once if it passed).
    pub fn arm(&self, at: std::time::Instant) -> io::Result<()> {
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: monotonic_timespec(at),
        };
        // SAFETY: the fd is ours and `spec` a valid itimerspec; the old value is not asked for.
        check(unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        })
    }

    /// Consumes a fired timer: the number of expirations (`WouldBlock` when it has not fired).
    pub fn expirations(&self) -> io::Result<u64> {
        let mut n = 0u64;
        // SAFETY: reads at most 8 bytes into a u64 owned by this frame.
        let r = unsafe { libc::read(self.fd.as_raw_fd(), (&raw mut n).cast(), 8) };
        if r == 8 {
            Ok(n)
        } else if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "short read of a timerfd",
            ))
        }
    }
}

impl AsRawFd for TimerFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for TimerFd {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Waits up to `timeout` for `fd` to be readable (`ppoll`, to the nanosecond rather than `poll`'s whole
/// milliseconds, so a paced sender can wait for answers right up to its next send); true when it is, or when a
/// read would return at once with an error or the end (`POLLERR`, `POLLHUP`: an ICMP error on a UDP socket).
pub fn wait_readable(fd: impl AsFd, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    // SAFETY: one valid pollfd and one timespec for the duration of the call; no signal mask.
    let n = unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
    check(n)?;
    Ok(n > 0 && p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0)
}

/// The open-file limit (`RLIMIT_NOFILE`): (soft, hard).
pub fn nofile_limit() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the rlimit we pass.
    check(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    Ok((lim.rlim_cur, lim.rlim_max))
}

/// Sets the open-file limit's soft value (at most the hard one).
pub fn set_nofile_soft(soft: u64, hard: u64) -> io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the rlimit we pass.
    check(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) })
}

/// Discards up to `len` bytes a TCP socket received, copying nothing (`recv(MSG_TRUNC | MSG_DONTWAIT)`,
/// which TCP on Linux treats as "consume and drop"); the bytes dropped.
pub fn tcp_discard(fd: impl AsFd, len: usize) -> io::Result<usize> {
    // SAFETY: with MSG_TRUNC, TCP copies nothing to the buffer; a null pointer with a length is what the
    // kernel documents for this use, and the call touches no memory of ours.
    let n = unsafe {
        libc::recv(
            fd.as_fd().as_raw_fd(),
            std::ptr::null_mut(),
            len,
            libc::MSG_TRUNC | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// What to do about a listening socket that could not be opened on `addr`, from the system's error: a port
/// in use, an address this host does not have, a privileged port. Every command that listens (server, agent,
/// proxy, its control API, the agent's pages) says it the same way.
pub fn bind_hint(addr: SocketAddr, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::AddrInUse => format!(
            "another program is using port {}: give another port, or 0 for any",
            addr.port()
        ),
        io::ErrorKind::AddrNotAvailable => format!(
            "{} is not an address of this host: give one of its addresses, 127.0.0.1, or 0.0.0.0 for all",
            addr.ip()
        ),
        io::ErrorKind::PermissionDenied if addr.port() < 1024 => format!(
            "port {} needs root (or CAP_NET_BIND_SERVICE): give a port above 1023",
            addr.port()
        ),
        _ => "check the address and the port".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_listed_and_found() {
        let lo = if_nametoindex("lo").expect("lo has an index");
        assert!(interfaces().iter().any(|(i, n)| *i == lo && n == "lo"));
        assert_eq!(if_nametoindex("no-such-interface-x"), None);
        assert_eq!(if_nametoindex("bad\0name"), None);
        assert_eq!(interface_hwtype("lo"), Some(772));
        assert_eq!(interface_hwtype("no-such-interface-x"), None);
        assert_eq!(interface_hwtype("x".repeat(40).as_str()), None);
    }

    #[test]
    fn socket_options_round_trip() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        setsockopt(
            &s,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &(65536 as libc::c_int),
        )
        .unwrap();
        let (v, n): (libc::c_int, usize) =
            getsockopt(&s, libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap();
        assert_eq!(n, size_of::<libc::c_int>());
        // The kernel doubles what it is given.
        assert_eq!(v, 131072);
        let e = setsockopt(&s, libc::SOL_SOCKET, 9999, &(1 as libc::c_int)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOPROTOOPT));
    }

    #[test]
    fn a_timer_fires_after_its_deadline() {
        let t = TimerFd::new().unwrap();
        let at = std::time::Instant::now() + Duration::from_millis(20);
        t.arm(at).unwrap();
        assert!(wait_readable(&t, Duration::from_secs(5)).unwrap());
        assert!(std::time::Instant::now() >= at, "fired early");
        assert_eq!(t.expirations().unwrap(), 1);
        assert_eq!(
            t.expirations().unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        // A deadline that passed fires at once.
        t.arm(std::time::Instant::now() - Duration::from_millis(1))
            .unwrap();
        assert!(wait_readable(&t, Duration::from_secs(5)).unwrap());
        let before = std::time::Instant::now();
        sleep_until(before + Duration::from_millis(5));
        assert!(std::time::Instant::now() >= before + Duration::from_millis(5));
    }

    #[test]
    fn clocks_move() {
        let a = thread_cpu_time().unwrap();
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = x.wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        assert!(thread_cpu_time().unwrap() >= a);
    }
}
