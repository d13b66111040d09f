//! A path through `roundtrip proxy --bridge`: three network namespaces
//!
//! ```text
//!   client ns            bridge ns                 server ns
//!   eth0 10.X.Y.1  <-veth->  ba  [roundtrip]  bb  <-veth->  eth0 10.X.Y.2
//! ```
//!
//! The two endpoints share one subnet (the bridge is a bump in the wire, not a router); the bridge namespace
//! has no address and IPv6 off, so only the endpoints' frames cross it. Names are unique per test (pid and a
//! counter), the subnet is 10.X.Y.0/24 inside our own namespaces, and everything is removed on drop (the
//! processes first), also when the test panics; a hung test is cleaned up by the watchdog
//! ([`super::procs::watchdog`]) because the namespaces are registered with it.
//!
//! Use: `let mut net = BridgeNet::new();` then `net.start_bridge(&["--rtt", "40ms"])` (starts
//! `roundtrip proxy --bridge ba,bb ARGS` in the middle and waits for its start line),
//! `net.spawn(Side::Server, ...)` / `net.run(Side::Client, ...)` for programs at the ends,
//! `net.stop_bridge()` (Ctrl-C: the bridge prints its summary) for its output. `BridgeNet::without_offloads()`
//! turns segmentation offloads off at the endpoints, so every frame the bridge sees is one packet (loss and
//! duplication per packet, as on a wire).
#![allow(dead_code)]

use super::netns::sh;
use super::procs::{self, Finished, Proc};
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// One end of the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client namespace (10.X.Y.1).
    Client,
    /// The middle namespace, where the bridge runs.
    Bridge,
    /// The server namespace (10.X.Y.2).
    Server,
}

/// The bridge's interface towards the client.
pub const IF_A: &str = "ba";
/// The bridge's interface towards the server.
pub const IF_B: &str = "bb";

/// Three namespaces and the bridge between them.
pub struct BridgeNet {
    /// Namespace names: client, bridge, server.
    pub ns: [String; 3],
    /// The client's address.
    pub client_ip: Ipv4Addr,
    /// The server's address.
    pub server_ip: Ipv4Addr,
    made: Vec<String>,
    bridge: Option<Proc>,
}

impl BridgeNet {
    /// Builds the three namespaces and the two veth pairs (no bridge running yet: nothing crosses).
    pub fn new() -> BridgeNet {
        Self::build(true)
    }

    /// As [`BridgeNet::new`], with TSO/GSO/GRO off at both endpoints (needs `ethtool`).
    pub fn without_offloads() -> BridgeNet {
        Self::build(false)
    }

    fn build(offloads: bool) -> BridgeNet {
        let pid = std::process::id();
        let k = COUNTER.fetch_add(1, Ordering::SeqCst);
        let tag = format!("bridge{pid}n{k}");
        let u = pid.wrapping_mul(16).wrapping_add(k);
        let (x, y) = (20 + (u / 256) % 80, u % 256);
        let mut net = BridgeNet {
            ns: [format!("{tag}c"), format!("{tag}b"), format!("{tag}s")],
            client_ip: Ipv4Addr::new(10, x as u8, y as u8, 1),
            server_ip: Ipv4Addr::new(10, x as u8, y as u8, 2),
            made: Vec::new(),
            bridge: None,
        };
        if let Err(e) = net.make(offloads) {
            drop(net);
            panic!("cannot build the bridge namespaces: {e}");
        }
        net
    }

    fn make(&mut self, offloads: bool) -> Result<(), String> {
        for n in self.ns.clone() {
            sh(&["ip", "netns", "add", &n])?;
            procs::register_netns(&n);
            self.made.push(n.clone());
            sh(&["ip", "-n", &n, "link", "set", "lo", "up"])?;
        }
        let [c, b, s] = self.ns.clone();
        sh(&[
            "ip",
            "netns",
            "exec",
            &b,
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
        ])?;
        sh(&[
            "ip",
            "netns",
            "exec",
            &b,
            "sysctl",
            "-qw",
            "net.ipv6.conf.default.disable_ipv6=1",
        ])?;
        for (end, port, ip) in [(&c, IF_A, self.client_ip), (&s, IF_B, self.server_ip)] {
            sh(&[
                "ip", "link", "add", "eth0", "netns", end, "type", "veth", "peer", "name", port,
                "netns", &b,
            ])?;
            sh(&["ip", "-n", &b, "link", "set", port, "up"])?;
            sh(&[
                "ip",
                "-n",
                end,
                "addr",
                "add",
                &format!("{ip}/24"),
                "dev",
                "eth0",
            ])?;
            sh(&["ip", "-n", end, "link", "set", "eth0", "up"])?;
            if !offloads {
                sh(&[
                    "ip", "netns", "exec", end, "ethtool", "-K", "eth0", "tso", "off", "gso",
                    "off", "gro", "off",
                ])?;
            }
        }
        Ok(())
    }

    /// The namespace of `side`.
    pub fn netns(&self, side: Side) -> &str {
        &self.ns[match side {
            Side::Client => 0,
            Side::Bridge => 1,
            Side::Server => 2,
        }]
    }

    /// The `ip netns exec` command running `program ARGS` in `side`'s namespace.
    pub fn command(&self, side: Side, program: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.netns(side), program])
            .args(args);
        cmd
    }

    /// Starts `program ARGS` in `side`'s namespace (own process group, killed on drop).
    pub fn spawn(&self, side: Side, name: &str, program: &str, args: &[&str]) -> Proc {
        Proc::spawn(name, self.command(side, program, args))
    }

    /// Runs `program ARGS` to its end in `side`'s namespace, within `timeout`.
    pub fn run(
        &self,
        side: Side,
        name: &str,
        program: &str,
        args: &[&str],
        timeout: Duration,
    ) -> Finished {
        procs::run(name, self.command(side, program, args), timeout)
    }

    /// Starts `roundtrip proxy --bridge ba,bb ARGS` in the middle namespace and waits for its start line
    /// (with `--json`, which prints nothing at start, it waits until both interfaces are promiscuous).
    /// Panics with the bridge's output if it does not start.
    pub fn start_bridge(&mut self, args: &[&str]) {
        assert!(self.bridge.is_none(), "a bridge is running already");
        let mut a = vec!["proxy", "--bridge", "ba,bb"];
        a.extend_from_slice(args);
        let mut p = self.spawn(Side::Bridge, "bridge", &procs::bin(), &a);
        if args.contains(&"--json") {
            let end = std::time::Instant::now() + Duration::from_secs(30);
            while !self.promiscuous() {
                if let Some(st) = p.try_wait() {
                    panic!("the bridge exited ({st}): {}", p.output());
                }
                assert!(
                    std::time::Instant::now() < end,
                    "the bridge did not start: {}",
                    p.output()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        } else {
            p.wait_line("Ctrl-C to stop", Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        self.bridge = Some(p);
    }

    /// True when both bridge interfaces are promiscuous (the bridge has opened them).
    pub fn promiscuous(&self) -> bool {
        [IF_A, IF_B].iter().all(|i| {
            Command::new("ip")
                .args(["-n", self.netns(Side::Bridge), "-d", "link", "show", i])
                .output()
                .map(|o| {
                    let s = String::from_utf8_lossy(&o.stdout).into_owned();
                    s.contains("PROMISC")
                        || (s.contains("promiscuity ") && !s.contains("promiscuity 0"))
                })
                .unwrap_or(false)
        })
    }

    /// The running bridge process.
    pub fn bridge(&mut self) -> &mut Proc {
        self.bridge.as_mut().expect("no bridge running")
    }

    /// Stops the bridge with Ctrl-C (SIGINT) and returns its whole output (the summary is printed at exit).
    pub fn stop_bridge(&mut self) -> Finished {
        let p = self.bridge.take().expect("no bridge running");
        p.signal(libc::SIGINT);
        p.finish(Duration::from_secs(20))
    }

    /// Waits for the bridge to exit by itself (e.g. an interface went away) and returns its output.
    pub fn bridge_exits(&mut self, timeout: Duration) -> Finished {
        self.bridge
            .take()
            .expect("no bridge running")
            .finish(timeout)
    }

    /// Sends `n` UDP datagrams (an 8-byte sequence number each, one every `gap`) from the client to the
    /// server and returns the sequence numbers the server got, in arrival order (real sockets in the two
    /// namespaces; the receiver stops after 2 s of silence).
    pub fn udp_stream(&self, n: u64, gap: Duration) -> Vec<u64> {
        use std::net::UdpSocket;
        let (cns, sns) = (
            self.netns(Side::Client).to_string(),
            self.netns(Side::Server).to_string(),
        );
        let sip = self.server_ip;
        let rx = super::netns::in_netns(Some(&sns), move || UdpSocket::bind((sip, 0)))
            .unwrap()
            .expect("udp receiver");
        let to = rx.local_addr().unwrap();
        // Room for every datagram (a burst released behind a long delay sample must not overflow it).
        let big: libc::c_int = 64 << 20;
        // SAFETY: setsockopt on an open socket with an int value and its size.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&rx),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                &big as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        let tx = super::netns::in_netns(Some(&cns), || UdpSocket::bind("0.0.0.0:0"))
            .unwrap()
            .expect("udp sender");
        // One datagram first so that ARP is done before the counted ones.
        tx.send_to(&u64::MAX.to_be_bytes(), to).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut b = [0u8; 64];
        let _ = rx.recv(&mut b);
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut b = [0u8; 64];
            while let Ok(k) = rx.recv(&mut b) {
                if k == 8 {
                    let s = u64::from_be_bytes(b[..8].try_into().unwrap());
                    if s != u64::MAX {
                        got.push(s);
                    }
                }
            }
            got
        });
        let t0 = std::time::Instant::now();
        for i in 0..n {
            let due = t0 + gap * i as u32;
            while std::time::Instant::now() < due {
                std::thread::yield_now();
            }
            tx.send_to(&i.to_be_bytes(), to).unwrap();
        }
        reader.join().unwrap()
    }

    /// Kills every process in the namespaces.
    pub fn kill_all(&self) {
        for n in &self.made {
            for _ in 0..50 {
                let pids = super::netns::pids_in(n);
                if pids.is_empty() {
                    break;
                }
                for p in pids {
                    // SAFETY: kill(2) with a pid read from `ip netns pids`.
                    unsafe {
                        libc::kill(p, libc::SIGKILL);
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Drop for BridgeNet {
    fn drop(&mut self) {
        self.bridge.take();
        self.kill_all();
        for n in &self.made {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
            procs::forget_netns(n);
        }
    }
}
