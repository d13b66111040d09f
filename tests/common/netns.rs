//! A small LAN of network namespaces for the fleet tests: N member namespaces, each with one veth whose peer
//! sits on a bridge in a namespace of its own, so that nothing touches the host's interfaces. Members get
//! 10.X.Y.1 .. 10.X.Y.N/24 (a subnet unique to the LAN). Everything is removed on drop, the processes started
//! in the namespaces first.
#![allow(dead_code)]

use super::procs::{self, Proc};
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::Duration;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// True when namespace tests can run here (root and `ip`); otherwise prints why the test is skipped, or fails
/// under CI (ROUNDTRIP_REQUIRE_SERVICES=1).
pub fn available() -> bool {
    if !super::require_root("network namespaces") {
        return false;
    }
    super::have("ip")
}

/// Runs `args[0] args[1..]`; Err names the command and its stderr when it fails.
pub fn sh(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{args:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// One network namespace (a stale one of the same name is deleted first), known to the watchdog, deleted
/// on drop.
pub struct Ns(pub String);

impl Ns {
    /// Adds namespace `name`; panics with ip's message when it cannot.
    pub fn new(name: &str) -> Ns {
        let _ = Command::new("ip").args(["netns", "del", name]).output();
        sh(&["ip", "netns", "add", name]).unwrap_or_else(|e| panic!("{e}"));
        procs::register_netns(name);
        Ns(name.to_string())
    }

    /// Runs `args` inside the namespace.
    pub fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("ip")
            .args(["netns", "exec", &self.0])
            .args(args)
            .output()
            .unwrap()
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
        procs::forget_netns(&self.0);
    }
}

/// A bridge namespace and N member namespaces on it.
pub struct Lan {
    /// The namespace holding the bridge.
    pub bridge: String,
    /// The member namespaces, in address order.
    pub ns: Vec<String>,
    /// The members' addresses (`ns[i]` has `addrs[i]`).
    pub addrs: Vec<Ipv4Addr>,
}

impl Lan {
    /// Creates the LAN of `n` members (at most 250). Panics (after removing what was made) on failure.
    pub fn new(n: usize) -> Lan {
        assert!((1..=250).contains(&n));
        let pid = std::process::id();
        let k = COUNTER.fetch_add(1, Ordering::SeqCst);
        let tag = format!("rt{pid}l{k}");
        // a subnet per LAN: 10.X.Y.0/24 from the pid and the counter
        let u = pid.wrapping_mul(16).wrapping_add(k);
        let (x, y) = (100 + (u / 256) % 100, u % 256);
        let mut lan = Lan {
            bridge: format!("{tag}br"),
            ns: Vec::new(),
            addrs: (1..=n)
                .map(|i| Ipv4Addr::new(10, x as u8, y as u8, i as u8))
                .collect(),
        };
        if let Err(e) = lan.build(&tag, n) {
            drop(lan);
            panic!("cannot build the namespace LAN: {e}");
        }
        lan
    }

    fn add_ns(&mut self, name: &str, bridge: bool) -> Result<(), String> {
        sh(&["ip", "netns", "add", name])?;
        procs::register_netns(name);
        if bridge {
            self.bridge = name.to_string();
        } else {
            self.ns.push(name.to_string());
        }
        sh(&["ip", "-n", name, "link", "set", "lo", "up"])
    }

    fn build(&mut self, tag: &str, n: usize) -> Result<(), String> {
        let br = self.bridge.clone();
        // the bridge's name is kept in self.bridge before it exists: Drop deletes what exists
        self.bridge.clear();
        self.add_ns(&br, true)?;
        sh(&["ip", "-n", &br, "link", "add", "br0", "type", "bridge"])?;
        sh(&[
            "ip",
            "-n",
            &br,
            "link",
            "set",
            "br0",
            "type",
            "bridge",
            "forward_delay",
            "0",
            "stp_state",
            "0",
        ])?;
        sh(&["ip", "-n", &br, "link", "set", "br0", "up"])?;
        for i in 0..n {
            let ns = format!("{tag}m{i}");
            self.add_ns(&ns, false)?;
            let port = format!("p{i}");
            sh(&[
                "ip", "link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", &port,
                "netns", &br,
            ])?;
            sh(&["ip", "-n", &br, "link", "set", &port, "master", "br0"])?;
            sh(&["ip", "-n", &br, "link", "set", &port, "up"])?;
            let a = format!("{}/24", self.addrs[i]);
            sh(&["ip", "-n", &ns, "addr", "add", &a, "dev", "eth0"])?;
            sh(&["ip", "-n", &ns, "link", "set", "eth0", "up"])?;
        }
        Ok(())
    }

    /// Starts `program ARGS` in member `i`'s namespace (`ip netns exec`, which execs the program: the child's
    /// pid is the program's), in its own process group, killed on drop.
    pub fn spawn(&self, i: usize, name: &str, program: &str, args: &[&str]) -> Proc {
        Proc::spawn(name, self.command(i, program, args))
    }

    /// The `ip netns exec` command running `program ARGS` in member `i`'s namespace.
    pub fn command(&self, i: usize, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[i], program]).args(args);
        c
    }

    /// Runs `program ARGS` to its end in member `i`'s namespace, within `timeout`.
    pub fn run(
        &self,
        i: usize,
        name: &str,
        program: &str,
        args: &[&str],
        timeout: Duration,
    ) -> procs::Finished {
        procs::run(name, self.command(i, program, args), timeout)
    }

    /// Kills every process in the namespaces (SIGKILL) and waits briefly for them to go.
    pub fn kill_all(&self) {
        for n in self.ns.iter().chain(std::iter::once(&self.bridge)) {
            if n.is_empty() {
                continue;
            }
            for _ in 0..50 {
                let pids = pids_in(n);
                if pids.is_empty() {
                    break;
                }
                for p in pids {
                    // SAFETY: kill(2) with a pid read from `ip netns pids`.
                    unsafe {
                        libc::kill(p, libc::SIGKILL);
                    }
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The processes in namespace `ns`.
pub fn pids_in(ns: &str) -> Vec<i32> {
    Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

impl Drop for Lan {
    fn drop(&mut self) {
        self.kill_all();
        // members first: their veths go with them, then the bridge
        for n in self.ns.iter().chain(std::iter::once(&self.bridge)) {
            if n.is_empty() {
                continue;
            }
            let _ = Command::new("ip").args(["netns", "del", n]).output();
            procs::forget_netns(n);
        }
    }
}

/// Runs `f` on a thread that has entered network namespace `ns` (None: the test's own namespace). Sockets
/// made by `f` stay in that namespace wherever they are used afterwards.
pub fn in_netns<T: Send + 'static>(
    ns: Option<&str>,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let Some(ns) = ns else { return Ok(f()) };
    let path = format!("/run/netns/{ns}");
    thread::spawn(move || {
        let file = File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        // SAFETY: setns(2) on an open namespace file; it changes only this thread's network namespace.
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        if r != 0 {
            return Err(format!("setns {path}: {}", std::io::Error::last_os_error()));
        }
        Ok(f())
    })
    .join()
    .map_err(|_| "thread in netns panicked".to_string())?
}

/// A TCP connection to `addr` made from namespace `ns`, within `timeout`.
pub fn connect(ns: Option<&str>, addr: SocketAddr, timeout: Duration) -> Result<TcpStream, String> {
    in_netns(ns, move || TcpStream::connect_timeout(&addr, timeout))?
        .map_err(|e| format!("connect {addr}: {e}"))
}

/// A TCP port free now on `ip` in namespace `ns` (bind to port 0, read it, close).
pub fn free_port(ns: Option<&str>, ip: Ipv4Addr) -> Result<u16, String> {
    in_netns(ns, move || {
        TcpListener::bind((ip, 0)).and_then(|l| l.local_addr().map(|a| a.port()))
    })?
    .map_err(|e| format!("bind {ip}:0: {e}"))
}
