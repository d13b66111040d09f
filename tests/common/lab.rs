//! The namespace lab of tests that re-execute their own test binary inside network namespaces
//! (tests/tcp_watch.rs, tests/capture_match_netns.rs): the binary runs its `netns_role` test with
//! RT_NETNS_ROLE set, prints "ready" when it serves, and the lab removes processes and namespaces on drop.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;

/// Namespaces, veths and processes, removed on drop (deleting a namespace deletes its veths).
#[derive(Default)]
pub struct Lab {
    /// Namespaces to delete.
    pub ns: Vec<String>,
    /// Children to kill.
    pub children: Vec<Child>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for n in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// Runs `args[0] args[1..]`; panics when it fails.
pub fn sh(args: &[&str]) {
    let st = Command::new(args[0]).args(&args[1..]).status().unwrap();
    assert!(st.success(), "{args:?} failed");
}

/// Runs `args` inside namespace `ns`; panics when it fails.
pub fn ns_exec(ns: &str, args: &[&str]) {
    let mut v = vec!["ip", "netns", "exec", ns];
    v.extend_from_slice(args);
    sh(&v);
}

/// Starts the test binary in `ns` as `role` (with `envs`), waits for its "ready" line when `wait_ready`;
/// returns the child's index in `lab.children` and its further stdout lines.
pub fn spawn_role(
    lab: &mut Lab,
    ns: &str,
    role: &str,
    envs: &[(&str, &str)],
    wait_ready: bool,
) -> (usize, mpsc::Receiver<String>) {
    let exe = std::env::current_exe().unwrap();
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns])
        .arg(&exe)
        .args([
            "--exact",
            "netns_role",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("RT_NETNS_ROLE", role)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in envs {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    let out = child.stdout.take().unwrap();
    lab.children.push(child);
    let mut lines = BufReader::new(out).lines();
    if wait_ready {
        loop {
            let l = lines.next().expect("role exited before ready").unwrap();
            if l.trim_end().ends_with("ready") {
                break;
            }
        }
    }
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    (lab.children.len() - 1, rx)
}
