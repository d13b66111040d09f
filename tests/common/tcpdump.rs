//! tcpdump for the integration tests: started (optionally inside a network namespace), waited for until it
//! says "listening on", and stopped with SIGINT (so it writes out what it has) by `stop` or when dropped.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long buffered (not `--immediate-mode`) captures wait before SIGINT: libpcap hands packets over in
/// blocks retired after its 1 s timeout, and a block still in the kernel when tcpdump stops is lost.
const SETTLE: Duration = Duration::from_millis(2500);

/// A running tcpdump; stopped (SIGINT, so it flushes) by [`Tcpdump::stop`] or on drop.
pub struct Tcpdump {
    child: Option<Child>,
    log: Arc<Mutex<String>>,
    reader: Option<JoinHandle<()>>,
    settle: Duration,
}

impl Tcpdump {
    /// `tcpdump ARGS...` (buffered: stopping waits for libpcap's last block first).
    pub fn start(args: &[&str]) -> Tcpdump {
        Self::start_in(None, args)
    }

    /// tcpdump inside network namespace `ns` (`ip netns exec` execs it, so the pid is tcpdump's).
    pub fn start_in(ns: Option<&str>, args: &[&str]) -> Tcpdump {
        Self::spawn(ns, args, SETTLE)
    }

    /// `tcpdump -i lo -U -w FILE FILTER` (buffered).
    pub fn on_lo(file: &Path, filter: &str) -> Tcpdump {
        Self::start(&["-i", "lo", "-U", "-w", file.to_str().unwrap(), filter])
    }

    /// `tcpdump --immediate-mode -i lo -U -n -B 16384 -w FILE tcp port PORT`: stopped at once.
    pub fn port(file: &Path, port: u16) -> Tcpdump {
        let filter = format!("tcp port {port}");
        let args = [
            "--immediate-mode",
            "-i",
            "lo",
            "-U",
            "-n",
            "-B",
            "16384",
            "-w",
            file.to_str().unwrap(),
            &filter,
        ];
        Self::spawn(None, &args, Duration::ZERO)
    }

    fn spawn(ns: Option<&str>, args: &[&str], settle: Duration) -> Tcpdump {
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "tcpdump"]);
                c
            }
            None => Command::new("tcpdump"),
        };
        let mut child = cmd
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let log = Arc::new(Mutex::new(String::new()));
        let log2 = log.clone();
        let reader = thread::spawn(move || {
            let mut r = BufReader::new(stderr);
            let mut line = String::new();
            let mut sent = false;
            while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                if !sent && line.contains("listening on") {
                    let _ = tx.send(());
                    sent = true;
                }
                log2.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        // Built before waiting, so that a tcpdump that never listens is still stopped (on drop).
        let t = Tcpdump {
            child: Some(child),
            log,
            reader: Some(reader),
            settle,
        };
        rx.recv_timeout(Duration::from_secs(60))
            .expect("tcpdump says 'listening on' within 60 s");
        t
    }

    /// Stops the capture; returns how many packets the kernel dropped (tcpdump's own count; u64::MAX when
    /// it did not say).
    pub fn stop(mut self) -> u64 {
        self.stop_inner();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let log = self.log.lock().unwrap().clone();
        log.lines()
            .find(|l| l.contains("dropped by kernel"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(u64::MAX)
    }

    fn stop_inner(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            thread::sleep(self.settle);
            let _ = Command::new("kill")
                .args(["-INT", &c.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        self.stop_inner();
    }
}
