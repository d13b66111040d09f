//! A real Samba server for the tests: `smbd` from Debian's `samba` package started in the foreground on a
//! free 127.0.0.1 port with a generated smb.conf, every directory it writes in a temp dir, and one guest
//! share (`share`) the test fills with files. Dropping it stops smbd and removes the directory.
#![allow(dead_code)]

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running smbd with one writable guest share named `share`.
pub struct Samba {
    child: Child,
    dir: tempfile::TempDir,
    /// Where smbd listens (127.0.0.1, a port the OS picked).
    pub addr: SocketAddr,
}

impl Samba {
    /// Starts smbd, or returns None (with the reason printed; a failure under CI) when smbd or smbclient is
    /// missing or the test does not run as root (smbd needs root to switch users).
    pub fn start() -> Option<Samba> {
        if !super::have("smbd") || !super::have("smbclient") {
            return None;
        }
        if !super::require_root("smbd switches users") {
            return None;
        }
        let mut last = String::new();
        // A free port below the kernel's ephemeral range, as a real file server's (445) is: captures without
        // a handshake then tell client from server by the ports as they would in the field (the higher port
        // is the client's). Free when we look; another process may take it before smbd binds it, so a start
        // that does not listen is retried on a new port.
        for attempt in 0..5 {
            let port = server_port(attempt);
            match Samba::start_on(port) {
                Ok(s) => return Some(s),
                Err(e) => last = e,
            }
        }
        panic!("smbd did not start: {last}");
    }

    fn start_on(port: u16) -> Result<Samba, String> {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in ["share", "private", "lock", "state", "cache", "pid", "log"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        let conf = format!(
            "[global]\n  smb ports = {port}\n  interfaces = 127.0.0.1\n  bind interfaces only = yes\n  \
             private dir = {d}/private\n  lock directory = {d}/lock\n  state directory = {d}/state\n  \
             cache directory = {d}/cache\n  pid directory = {d}/pid\n  ncalogin dir = {d}/lock\n  \
             log file = {d}/log/log.%m\n  map to guest = Bad User\n  disable netbios = yes\n  \
             server role = standalone server\n  load printers = no\n  printing = bsd\n  \
             printcap name = /dev/null\n  disable spoolss = yes\n\
             [share]\n  path = {d}/share\n  guest ok = yes\n  read only = no\n  force user = root\n",
            d = d.display()
        );
        std::fs::write(d.join("smb.conf"), conf).unwrap();
        let log = std::fs::File::create(d.join("smbd.out")).unwrap();
        // smbd signals its whole process group when it stops: its own group, so the test process is not in it.
        let mut child = Command::new("smbd")
            .process_group(0)
            .args(["--foreground", "--no-process-group", "--debug-stdout", "-s"])
            .arg(d.join("smb.conf"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("spawning smbd: {e}"))?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
                return Ok(Samba { child, dir, addr });
            }
            if let Ok(Some(status)) = child.try_wait() {
                let out = std::fs::read_to_string(d.join("smbd.out")).unwrap_or_default();
                return Err(format!(
                    "smbd exited ({status}): {}",
                    out.lines().last().unwrap_or("")
                ));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("smbd did not listen on {addr} within 30 s"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The share's directory on disk.
    pub fn share_dir(&self) -> PathBuf {
        self.dir.path().join("share")
    }

    /// Writes a file of `len` pseudo-random (incompressible) bytes into the share.
    pub fn put_file(&self, name: &str, len: usize) -> PathBuf {
        let path = self.share_dir().join(name);
        let mut f = std::fs::File::create(&path).unwrap();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ len as u64;
        let mut buf = vec![0u8; 1 << 16];
        let mut left = len;
        while left > 0 {
            for chunk in buf.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let b = x.to_le_bytes();
                chunk.copy_from_slice(&b[..chunk.len()]);
            }
            let n = left.min(buf.len());
            f.write_all(&buf[..n]).unwrap();
            left -= n;
        }
        path
    }

    /// Runs `smbclient //ADDR/share -p PORT -N -c COMMANDS` against `addr` (smbd itself, or a proxy in front of
    /// it) and returns (success, combined output, wall time).
    pub fn client(addr: SocketAddr, commands: &str) -> (bool, String, Duration) {
        let start = Instant::now();
        let out = Command::new("smbclient")
            .arg(format!("//{}/share", addr.ip()))
            .args(["-p", &addr.port().to_string(), "-N", "-c", commands])
            .output()
            .expect("running smbclient");
        let took = start.elapsed();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text, took)
    }

    /// Where smbd's own log lines go (for a failing test's message).
    pub fn log_path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Samba {
    fn drop(&mut self) {
        // smbd forks a child per client; SIGTERM to the parent stops them all.
        unsafe_free_kill(self.child.id());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unsafe_free_kill(pid: u32) {
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
}

/// A port free on 127.0.0.1 now, below the ephemeral range (`ip_local_port_range`), else one the OS picks.
fn server_port(attempt: u32) -> u16 {
    let low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    let span = low.saturating_sub(10_000).max(1);
    let seed = std::process::id()
        .wrapping_mul(2_654_435_761)
        .wrapping_add(attempt.wrapping_mul(40_503))
        .wrapping_add(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos()),
        );
    for i in 0..200u32 {
        let port = low - 1 - (seed.wrapping_add(i.wrapping_mul(7919)) % span);
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port as u16)) {
            drop(l);
            return port as u16;
        }
    }
    super::free_port()
}
