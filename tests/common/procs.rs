//! Child processes for the integration tests: `roundtrip server` / `roundtrip proxy` / tcpdump started on
//! OS-picked ports, waited for by their start lines, and killed when the test ends however it ends.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// The roundtrip binary under test.
pub fn bin() -> String {
    env!("CARGO_BIN_EXE_roundtrip").to_string()
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
        let mut c = Command::new(bin())
            .args(["proxy", "--listen", "127.0.0.1:0", "--upstream"])
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
