//! Child processes for the integration tests: `roundtrip server` / `roundtrip proxy` / tcpdump started on
//! OS-picked ports, waited for by their start lines, and killed when the test ends however it ends.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// The path of the roundtrip binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_roundtrip");

/// The roundtrip binary under test.
pub fn bin() -> String {
    BIN.to_string()
}

/// Children killed (by their own id) when the test ends, however it ends.
#[derive(Default)]
pub struct Kids(pub Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One child killed and reaped when dropped (by its own id), however the test ends.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (generously) for a line of `r` containing `needle`; returns it. The rest of the stream is drained.
pub fn wait_line(r: impl Read + Send + 'static, needle: &'static str) -> String {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut sent = false;
        for l in BufReader::new(r).lines() {
            let Ok(l) = l else { break };
            if !sent && l.contains(needle) {
                let _ = tx.send(l);
                sent = true;
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("no line with '{needle}' within 60 s"))
}

/// The port after the first "127.0.0.1:" in `line`.
pub fn port_in(line: &str) -> u16 {
    let i = line.find("127.0.0.1:").expect("an address") + "127.0.0.1:".len();
    line[i..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .unwrap()
}

impl Kids {
    /// Starts `roundtrip server --bind 127.0.0.1 -p 0 --tcp-only EXTRA...`; returns its port.
    pub fn server(&mut self, extra: &[&str]) -> u16 {
        let mut c = Command::new(bin())
            .args(["server", "--bind", "127.0.0.1", "-p", "0", "--tcp-only"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("roundtrip server starts");
        let out = c.stderr.take().unwrap();
        self.0.push(c);
        port_in(&wait_line(out, "listening on"))
    }

    /// Starts `roundtrip proxy --listen 127.0.0.1:0 --upstream 127.0.0.1:PORT EXTRA...`; returns its port.
    pub fn proxy(&mut self, upstream: u16, extra: &[&str]) -> u16 {
        self.proxy_at(0, upstream, extra)
    }

    /// [`Kids::proxy`] listening on port `listen` (0: one from the OS); returns its port.
    pub fn proxy_at(&mut self, listen: u16, upstream: u16, extra: &[&str]) -> u16 {
        let mut c = Command::new(bin())
            .args([
                "proxy",
                "--listen",
                &format!("127.0.0.1:{listen}"),
                "--upstream",
            ])
            .arg(format!("127.0.0.1:{upstream}"))
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("roundtrip proxy starts");
        let out = c.stdout.take().unwrap();
        self.0.push(c);
        port_in(&wait_line(out, "listening on"))
    }

    /// Starts tcpdump on loopback writing `file` for TCP `port`; returns its index for [`Kids::stop`].
    pub fn tcpdump(&mut self, file: &Path, port: u16) -> usize {
        let mut c = Command::new("tcpdump")
            // A 64 MiB buffer: loopback segments are up to 64 KiB and a bulk copy fills the default one.
            .args([
                "--immediate-mode",
                "-B",
                "65536",
                "-i",
                "lo",
                "-U",
                "-n",
                "-w",
            ])
            .arg(file)
            .args(["tcp", "port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump starts");
        let err = c.stderr.take().unwrap();
        self.0.push(c);
        wait_line(err, "listening on");
        self.0.len() - 1
    }

    /// Stops child `idx` with SIGINT (tcpdump then flushes its file) and waits for it.
    pub fn stop(&mut self, idx: usize) {
        let c = &mut self.0[idx];
        let st = Command::new("kill")
            .args(["-INT", &c.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let _ = c.wait();
    }
}

// ---------- children in their own process group, with a deadline on every wait ----------

use std::os::unix::process::CommandExt;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Process groups and network namespaces alive now: what the watchdog removes when a test overruns.
static GROUPS: Mutex<Vec<i32>> = Mutex::new(Vec::new());
static NAMESPACES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Remembers a network namespace for the watchdog (the owner deletes it and calls [`forget_netns`]).
pub fn register_netns(name: &str) {
    NAMESPACES.lock().unwrap().push(name.to_string());
}

/// Forgets a namespace registered with [`register_netns`].
pub fn forget_netns(name: &str) {
    NAMESPACES.lock().unwrap().retain(|n| n != name);
}

fn kill_group(pgid: i32, sig: i32) {
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is involved.
    unsafe {
        libc::kill(-pgid, sig);
    }
}

/// A watchdog: if not dropped within `limit`, it prints what overran, kills every process group started by
/// [`Proc`], deletes every registered namespace and exits the test process (status 1), so that a test that
/// would hang fails instead.
pub struct Watchdog(Arc<AtomicBool>);

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Starts a [`Watchdog`] for `what`.
pub fn watchdog(limit: Duration, what: &str) -> Watchdog {
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    let what = what.to_string();
    thread::spawn(move || {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if flag.load(Ordering::SeqCst) {
                return;
            }
            thread::sleep(Duration::from_millis(200));
        }
        if flag.load(Ordering::SeqCst) {
            return;
        }
        eprintln!(
            "WATCHDOG: {what} still running after {limit:?}; killing its children and exiting"
        );
        for g in GROUPS.lock().unwrap().iter() {
            kill_group(*g, libc::SIGKILL);
        }
        for n in NAMESPACES.lock().unwrap().iter() {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
        std::process::exit(1);
    });
    Watchdog(done)
}

/// A child in its own process group, its stdout and stderr lines collected; the whole group is killed when
/// it is dropped.
pub struct Proc {
    /// A name for messages.
    pub name: String,
    child: Child,
    lines: Arc<Mutex<Vec<(bool, String)>>>,
    status: Option<ExitStatus>,
}

/// What [`Proc::finish`] and [`run`] return.
pub struct Finished {
    /// The exit status; None when the process had to be killed at the deadline.
    pub status: Option<ExitStatus>,
    /// Its standard output.
    pub stdout: String,
    /// Both outputs, stderr lines prefixed with `stderr: `, for messages.
    pub output: String,
}

impl Finished {
    /// True when the process ended by itself with status 0.
    pub fn ok(&self) -> bool {
        self.status.map(|s| s.success()).unwrap_or(false)
    }
}

impl Proc {
    /// Starts `cmd` (its stdout and stderr are replaced by pipes) in a new process group.
    pub fn spawn(name: &str, mut cmd: Command) -> Proc {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: cannot start {cmd:?}: {e}"));
        GROUPS.lock().unwrap().push(child.id() as i32);
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        for (r, tag) in [
            (Box::new(out) as Box<dyn Read + Send>, false),
            (Box::new(err), true),
        ] {
            let lines = lines.clone();
            thread::spawn(move || {
                for l in BufReader::new(r).lines() {
                    let Ok(l) = l else { break };
                    lines.lock().unwrap().push((tag, l));
                }
            });
        }
        Proc {
            name: name.to_string(),
            child,
            lines,
            status: None,
        }
    }

    /// The process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every line so far (stderr lines prefixed with `stderr: `).
    pub fn output(&self) -> String {
        let v = self.lines.lock().unwrap();
        let all: Vec<String> = v
            .iter()
            .map(|(e, l)| {
                if *e {
                    format!("stderr: {l}")
                } else {
                    l.clone()
                }
            })
            .collect();
        all.join("\n")
    }

    /// The standard output lines so far.
    pub fn stdout(&self) -> String {
        let v = self.lines.lock().unwrap();
        let out: Vec<&str> = v
            .iter()
            .filter(|(e, _)| !e)
            .map(|(_, l)| l.as_str())
            .collect();
        out.join("\n")
    }

    fn find(&self, needle: &str) -> Option<String> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .find(|(_, l)| l.contains(needle))
            .map(|(_, l)| l.clone())
    }

    /// Waits until a line contains `needle` and returns it; an error (with the output so far) when the
    /// process exits first or `timeout` passes.
    pub fn wait_line(&mut self, needle: &str, timeout: Duration) -> Result<String, String> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(l) = self.find(needle) {
                return Ok(l);
            }
            if let Some(st) = self.try_wait() {
                // the readers may still hold the last lines
                thread::sleep(Duration::from_millis(200));
                if let Some(l) = self.find(needle) {
                    return Ok(l);
                }
                return Err(format!(
                    "{} exited ({st}) before printing '{needle}'; its output:\n{}",
                    self.name,
                    self.output()
                ));
            }
            if Instant::now() >= end {
                return Err(format!(
                    "{}: no line with '{needle}' within {timeout:?}; its output:\n{}",
                    self.name,
                    self.output()
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The exit status if the process has ended.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Sends `sig` to the process (not its group).
    pub fn signal(&self, sig: i32) {
        if self.status.is_none() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(self.child.id() as i32, sig);
            }
        }
    }

    /// Waits up to `timeout` for the process to end; None if it is still running.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(st) = self.try_wait() {
                return Some(st);
            }
            if Instant::now() >= end {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits up to `timeout` for the process to end by itself, killing its group if it does not.
    pub fn finish(mut self, timeout: Duration) -> Finished {
        let st = self.wait_exit(timeout);
        // the pipes close at exit; give the readers a moment to take the last lines
        let end = Instant::now() + Duration::from_secs(2);
        while Arc::strong_count(&self.lines) > 1 && Instant::now() < end {
            thread::sleep(Duration::from_millis(10));
        }
        Finished {
            status: st,
            stdout: self.stdout(),
            output: self.output(),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let pgid = self.child.id() as i32;
        kill_group(pgid, libc::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
        GROUPS.lock().unwrap().retain(|g| *g != pgid);
    }
}

/// Runs `cmd` to its end within `timeout` (its group killed after that).
pub fn run(name: &str, cmd: Command, timeout: Duration) -> Finished {
    Proc::spawn(name, cmd).finish(timeout)
}

/// Runs the binary with `args` and ROUNDTRIP_PARSE_ONLY=1: the command line is parsed and checked, nothing runs.
pub fn parse_only<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .env("ROUNDTRIP_PARSE_ONLY", "1")
        .output()
        .expect("run roundtrip")
}

/// `model bdp` in the decided spelling: the window that fills 1 Gbit/s at 40 ms.
pub const MODEL_BDP: [&str; 6] = ["model", "bdp", "--bandwidth", "1gbit", "--rtt", "40ms"];

/// `model transfer` in the decided spelling: an 8 KiB block over 1 Gbit/s.
pub const MODEL_TRANSFER: [&str; 6] = [
    "model",
    "transfer",
    "--bytes",
    "8KiB",
    "--bandwidth",
    "1gbit",
];

/// `proxy` listening on a free loopback port with an upstream where nothing listens (for parse and refusal runs).
pub const PROXY_TO_NOWHERE: [&str; 5] = [
    "proxy",
    "--listen",
    "127.0.0.1:0",
    "--upstream",
    "127.0.0.1:1",
];
