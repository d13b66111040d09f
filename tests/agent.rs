//! `roundtrip agent` from the outside: the real binary probing real `roundtrip server`s and other agents on
//! loopback, its pages read over HTTP, its files changed under it, its signals.
//!
//! No test can hang: every child runs in its own process group and is killed when the test ends however it
//! ends; every wait has a deadline; every socket read has a timeout; and a watchdog per test kills the
//! children after [`WATCHDOG`] (and aborts the test binary if the test is still stuck a minute later).
//! Nothing asserts a duration: the tests wait (generously) for a state, never for a time.

mod common;

use common::procs::bin;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// How long one test may run before its children are killed.
const WATCHDOG: Duration = Duration::from_secs(150);
/// How long any one wait may take (the machine may be a loaded 2-core VM).
const WAIT: Duration = Duration::from_secs(60);

/// One test at a time: they start several processes each and the machine is small.
static SERIAL: Mutex<()> = Mutex::new(());

/// Lines a child printed, filled by a reader thread.
type Lines = Arc<Mutex<Vec<String>>>;

fn read_lines(r: impl Read + Send + 'static) -> Lines {
    let lines: Lines = Arc::default();
    let l = lines.clone();
    thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            l.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        }
    });
    lines
}

fn snapshot(lines: &Lines) -> Vec<String> {
    lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// A running agent.
struct Agent {
    idx: usize,
    out: Lines,
    err: Lines,
    /// The responder's port (None with --no-responder).
    port: Option<u16>,
    /// Where its pages are.
    metrics: SocketAddr,
}

/// A test's processes, files and watchdog.
struct T {
    _serial: MutexGuard<'static, ()>,
    children: Vec<Option<Child>>,
    pids: Arc<Mutex<Vec<u32>>>,
    dog: Option<Sender<()>>,
    dir: tempfile::TempDir,
    stops: Vec<Arc<AtomicBool>>,
}

impl Drop for T {
    fn drop(&mut self) {
        if let Some(d) = self.dog.take() {
            let _ = d.send(());
        }
        for s in &self.stops {
            s.store(true, Ordering::SeqCst);
        }
        for c in self.children.iter_mut().flatten() {
            // The whole group (the child leads it), then the child itself.
            let _ = Command::new("kill")
                .args(["-s", "KILL", "--", &format!("-{}", c.id())])
                .stderr(Stdio::null())
                .status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn kill_pid(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([signal, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

impl T {
    fn new() -> T {
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let pids: Arc<Mutex<Vec<u32>>> = Arc::default();
        let (tx, rx) = mpsc::channel::<()>();
        let p = pids.clone();
        thread::spawn(move || {
            if let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(WATCHDOG) {
                eprintln!("watchdog: the test ran over {WATCHDOG:?}; killing its children");
                for pid in p.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                    kill_pid(*pid, "-KILL");
                }
                if let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(Duration::from_secs(60)) {
                    eprintln!("watchdog: the test is still stuck; aborting the test binary");
                    std::process::abort();
                }
            }
        });
        T {
            _serial: serial,
            children: Vec::new(),
            pids,
            dog: Some(tx),
            dir: tempfile::tempdir().expect("a temp dir"),
            stops: Vec::new(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        // Write then rename, so the agent never reads half a file.
        let tmp = self.path(&format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &p).unwrap();
        p
    }

    fn spawn(&mut self, cmd: &mut Command) -> (usize, Lines, Lines) {
        self.spawn_with_input(cmd, None)
    }

    /// Starts `cmd` (own process group, killed with the test), writing `input` to its stdin.
    fn spawn_with_input(
        &mut self,
        cmd: &mut Command,
        input: Option<String>,
    ) -> (usize, Lines, Lines) {
        let mut c = cmd
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("the roundtrip binary starts");
        self.pids.lock().unwrap().push(c.id());
        let out = read_lines(c.stdout.take().unwrap());
        let err = read_lines(c.stderr.take().unwrap());
        if let (Some(text), Some(mut stdin)) = (input, c.stdin.take()) {
            // A writer thread: a child that does not read cannot block the test.
            thread::spawn(move || {
                let _ = stdin.write_all(text.as_bytes());
            });
        }
        self.children.push(Some(c));
        (self.children.len() - 1, out, err)
    }

    fn child(&mut self, idx: usize) -> &mut Child {
        self.children[idx].as_mut().expect("a running child")
    }

    /// Waits (with a deadline) for child `idx` to exit; returns its code (None: killed by a signal).
    fn wait_exit(&mut self, idx: usize) -> Option<i32> {
        let deadline = Instant::now() + WAIT;
        loop {
            let c = self.child(idx);
            if let Some(st) = c.try_wait().expect("try_wait") {
                let pid = c.id();
                self.pids.lock().unwrap().retain(|p| *p != pid);
                self.children[idx] = None;
                return st.code();
            }
            assert!(
                Instant::now() < deadline,
                "child {idx} did not exit within {WAIT:?}"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs `roundtrip agent ARGS` expecting it to stop by itself; returns (code, stdout, stderr).
    fn run_agent(&mut self, args: &[&str]) -> (Option<i32>, String, String) {
        let (idx, out, err) = self.spawn(Command::new(bin()).arg("agent").args(args));
        let code = self.wait_exit(idx);
        // The readers finish at EOF, right after the exit.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Arc::strong_count(&out) + Arc::strong_count(&err) > 2 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        (code, snapshot(&out).join("\n"), snapshot(&err).join("\n"))
    }

    /// Starts `roundtrip server --bind 127.0.0.1 -p PORT --tcp-only EXTRA`; returns its child index and port.
    fn server(&mut self, port: u16, extra: &[&str]) -> (usize, u16) {
        let (idx, _out, err) = self.spawn(
            Command::new(bin())
                .args([
                    "server",
                    "--bind",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                    "--tcp-only",
                ])
                .args(extra),
        );
        let line = self.wait_for(idx, &err, "listening on", "the server's start line");
        (idx, port_after(&line, "127.0.0.1:"))
    }

    /// Waits for a line containing `needle` in `lines` of child `idx`; fails if the child exits first.
    fn wait_for(&mut self, idx: usize, lines: &Lines, needle: &str, what: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(l) = snapshot(lines).into_iter().find(|l| l.contains(needle)) {
                return l;
            }
            if let Some(st) = self.child(idx).try_wait().expect("try_wait") {
                thread::sleep(Duration::from_millis(200));
                panic!(
                    "the process exited ({st}) before {what}: {:?}",
                    snapshot(lines)
                );
            }
            assert!(
                Instant::now() < deadline,
                "no {what} ('{needle}') within {WAIT:?}: {:?}",
                snapshot(lines)
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts `roundtrip agent --bind 127.0.0.1 --port 0 --metrics 127.0.0.1:0 ARGS` with `env` and waits for
    /// its start-up lines.
    fn agent(&mut self, args: &[&str], env: &[(&str, &str)]) -> Agent {
        let mut cmd = Command::new(bin());
        cmd.args([
            "agent",
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--metrics",
            "127.0.0.1:0",
        ])
        .args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let (idx, out, err) = self.spawn(&mut cmd);
        self.wait_for(
            idx,
            &out,
            "roundtrip agent: source ",
            "the agent's start-up lines",
        );
        let lines = snapshot(&out);
        let responder = lines
            .iter()
            .find(|l| l.starts_with("roundtrip agent: responder on tcp+udp "))
            .map(|l| port_after(l, "127.0.0.1:"));
        let metrics = lines
            .iter()
            .find(|l| l.starts_with("roundtrip agent: metrics on http://"))
            .map(|l| port_after(l, "http://127.0.0.1:"))
            .expect("a metrics line");
        Agent {
            idx,
            out,
            err,
            port: responder,
            metrics: SocketAddr::from(([127, 0, 0, 1], metrics)),
        }
    }

    /// Polls `path` of `a` until `ok` holds for the body; returns it.
    fn until(&mut self, a: &Agent, path: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        let mut last = String::new();
        loop {
            if let Ok((200, _, body)) = get(a.metrics, path, None) {
                if ok(&body) {
                    return body;
                }
                last = body;
            }
            if let Some(st) = self.child(a.idx).try_wait().expect("try_wait") {
                thread::sleep(Duration::from_millis(200));
                panic!(
                    "the agent exited ({st}) while waiting for {what}: {:?}",
                    snapshot(&a.err)
                );
            }
            if Instant::now() >= deadline {
                let tail: String = last
                    .lines()
                    .filter(|l| !l.starts_with('#'))
                    .take(60)
                    .collect::<Vec<_>>()
                    .join("\n");
                panic!(
                    "no {what} within {WAIT:?}; stderr: {:?}\nlast {path}:\n{tail}",
                    snapshot(&a.err)
                );
            }
            thread::sleep(Duration::from_millis(200));
        }
    }

    fn signal(&mut self, a: &Agent, signal: &str) -> Option<i32> {
        let pid = self.child(a.idx).id();
        kill_pid(pid, signal);
        self.wait_exit(a.idx)
    }

    /// A TCP listener on loopback that answers every connection with bytes that are no protocol; stops with
    /// the test.
    fn garbage_peer(&mut self) -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        l.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        self.stops.push(stop.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match l.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                        let _ = s.write_all(&[0xde; 200]);
                    }
                    Err(_) => thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        port
    }
}

/// The port number right after `prefix` in `line`.
fn port_after(line: &str, prefix: &str) -> u16 {
    let i = line
        .find(prefix)
        .unwrap_or_else(|| panic!("'{prefix}' in {line}"))
        + prefix.len();
    line[i..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("a port in {line}"))
}

/// GET `path` with a deadline on everything; returns (status, head, body).
fn get(
    addr: SocketAddr,
    path: &str,
    accept: Option<&str>,
) -> std::io::Result<(u16, String, String)> {
    request(addr, "GET", path, accept)
}

fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    accept: Option<&str>,
) -> std::io::Result<(u16, String, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    if let Some(a) = accept {
        req.push_str(&format!("Accept: {a}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, head.to_string(), body.to_string()))
}

/// The value of the first sample of `name` whose labels contain every one of `having`.
fn sample(text: &str, name: &str, having: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
        .find(|l| having.iter().all(|h| l.contains(h)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn target_label(port: u16) -> String {
    format!("target=\"127.0.0.1:{port}\"")
}

#[test]
fn config_errors_exit_2_naming_file_line_and_key() {
    let mut t = T::new();
    let bad = t.write(
        "agent.toml",
        "interval = \"1s\"\n[[target]]\naddress = \"127.0.0.1\"\nport = 5\n",
    );
    let (code, _, err) = t.run_agent(&[
        "--no-responder",
        "--metrics",
        "127.0.0.1:0",
        "--config",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    let want = format!(
        "roundtrip: error: config {}:4: key `target.port`: unknown key",
        bad.display()
    );
    assert!(err.contains(&want), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    let bad = t.write("syntax.toml", "probe = \"tcp\"\ntimeout = \"1s\n");
    let (code, _, err) = t.run_agent(&[
        "--no-responder",
        "--metrics",
        "127.0.0.1:0",
        "--config",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("config {}:2: key `timeout`", bad.display())),
        "{err}"
    );

    let bad = t.write("value.toml", "\n\ninterval = \"fast\"\n");
    let (code, _, err) = t.run_agent(&[
        "--no-responder",
        "--metrics",
        "127.0.0.1:0",
        "--config",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "config {}:3: key `interval`: invalid duration",
            bad.display()
        )),
        "{err}"
    );

    // A bad peers file at start is refused the same way.
    let peers = t.write("peers", "127.0.0.1:9\nnot:a:host\n");
    let (code, _, err) = t.run_agent(&[
        "--no-responder",
        "--metrics",
        "127.0.0.1:0",
        "--peers-file",
        peers.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("peers file {}:2:", peers.display())),
        "{err}"
    );
}

#[test]
fn over_max_series_is_refused_at_start() {
    let mut t = T::new();
    let peers: String = (1..=30).map(|i| format!("10.255.0.{i}\n")).collect();
    let f = t.write("peers", &peers);
    let (code, out, err) = t.run_agent(&[
        "--no-responder",
        "--metrics",
        "127.0.0.1:0",
        "--peers-file",
        f.to_str().unwrap(),
        "--max-series",
        "1000",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(
            "roundtrip: error: 30 targets x 38 series = 1140 series, over --max-series 1000"
        ),
        "{err}"
    );
    assert!(!out.contains("metrics on"), "nothing was started: {out}");

    // A change that goes over is refused too, and the agent keeps its targets.
    let f = t.write("peers", "10.255.0.1\n");
    let a = t.agent(
        &[
            "--peers-file",
            f.to_str().unwrap(),
            "--max-series",
            "50",
            "--interval",
            "1s",
        ],
        &[],
    );
    t.write("peers", "10.255.0.1\n10.255.0.2\n");
    let idx = a.idx;
    let line = t.wait_for(idx, &a.err, "over --max-series", "the refusal");
    assert!(
        line.contains("2 targets x 38 series = 76 series (max 50, --buckets 1)"),
        "{line}"
    );
    assert!(line.ends_with("keeping the previous 1 targets"), "{line}");
    let m = t.until(&a, "/metrics", "one target", |m| {
        sample(m, "roundtrip_agent_targets", &[]) == Some(1.0)
    });
    assert!(sample(&m, "roundtrip_up", &["target=\"10.255.0.2\""]).is_none());
}

/// The `le` values of one target's `roundtrip_rtt_seconds` in a scrape, in order (`+Inf` left out).
fn rtt_bounds(text: &str, target: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with("roundtrip_rtt_seconds_bucket{") && l.contains(target))
        .filter_map(|l| l.split("le=\"").nth(1)?.split('"').next().map(String::from))
        .filter(|le| le != "+Inf")
        .collect()
}

#[test]
fn buckets_default_to_four_per_doubling_and_one_is_the_old_layout() {
    use roundtrip::agent::BUCKET_BOUNDS;
    use roundtrip::agent::metrics::fmt_float;
    let old: Vec<String> = BUCKET_BOUNDS.iter().map(|b| fmt_float(*b)).collect();
    // A refused value: one line, the valid choices, exit 2, nothing started.
    let (code, out, err) = t_run(&["--buckets", "3"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("1, 2, 4 or 8"), "{err}");
    assert!(!out.contains("metrics on"), "{out}");

    let mut t = T::new();
    let (_, port) = t.server(0, &[]);
    let peer = format!("127.0.0.1:{port}");
    let tl = target_label(port);
    let mut seen = Vec::new();
    for extra in [&[][..], &["--buckets", "1"][..]] {
        let mut args = vec!["--peer", &peer, "--interval", "100ms"];
        args.extend_from_slice(extra);
        let a = t.agent(&args, &[]);
        let text = t.until(&a, "/metrics", "an answered probe", |m| {
            sample(m, "roundtrip_rtt_seconds_count", &[&tl]).is_some_and(|n| n >= 1.0)
        });
        seen.push(rtt_bounds(&text, &tl));
        t.signal(&a, "-TERM");
    }
    let (fine, coarse) = (&seen[0], &seen[1]);
    // --buckets 1: exactly the bounds of older agents, same text.
    assert_eq!(coarse, &old);
    // The default: every old bound is one of the new ones (same text), and at least 4 per doubling.
    for le in &old {
        assert!(fine.contains(le), "{le} missing from {fine:?}");
    }
    let v: Vec<f64> = fine.iter().map(|s| s.parse().unwrap()).collect();
    assert!(v.windows(2).all(|w| w[0] < w[1]), "{fine:?}");
    let doublings = (v[v.len() - 1] / v[0]).log2();
    assert!(
        (v.len() - 1) as f64 / doublings >= 4.0,
        "{} bounds",
        v.len()
    );
}

/// Runs an agent that must refuse its arguments (no responder, no port).
fn t_run(args: &[&str]) -> (Option<i32>, String, String) {
    let mut t = T::new();
    let mut all = vec!["--no-responder", "--metrics", "127.0.0.1:0"];
    all.extend_from_slice(args);
    t.run_agent(&all)
}

#[test]
fn over_max_series_at_four_buckets_adapts_down_instead_of_refusing() {
    let mut t = T::new();
    // A closed loopback port: the target's series exist whether it answers or not.
    let a = t.agent(&["--peer", "127.0.0.1:9", "--max-series", "50"], &[]);
    let line = t.wait_for(a.idx, &a.err, "using --buckets", "the adaptation");
    assert!(
        line.contains("--buckets 4 would give 1 targets x 110 series")
            && line.ends_with("past --max-series: using --buckets 1"),
        "{line}"
    );
    let out = snapshot(&a.out);
    assert!(
        out.iter()
            .any(|l| l.ends_with("1 targets x 38 series = 38 series (max 50, --buckets 1)")),
        "{out:?}"
    );
}

#[test]
fn metrics_api_and_page_of_an_agent_probing_a_server() {
    let mut t = T::new();
    let (_, port) = t.server(0, &[]);
    let peer = format!("127.0.0.1:{port}");
    let a = t.agent(
        &[
            "--peer",
            &peer,
            "--interval",
            "100ms",
            "--label",
            "zone=a",
            "--source",
            "agent-a",
        ],
        &[],
    );
    let out = snapshot(&a.out);
    assert!(
        out.iter()
            .any(|l| l.starts_with("roundtrip agent: responder on tcp+udp 127.0.0.1:")),
        "{out:?}"
    );
    assert!(
        out.iter().any(|l| l.contains("/metrics (loopback only")),
        "{out:?}"
    );
    assert!(
        out.iter().any(|l| l
            == "roundtrip agent: source agent-a, 1 targets x 110 series = 110 series (max 50000, --buckets 4)"),
        "{out:?}"
    );
    let tl = target_label(port);
    let labels = format!("source=\"agent-a\",{tl},probe=\"tcp\",size=\"64\",zone=\"a\"");
    let text = t.until(&a, "/metrics", "3 answered probes", |m| {
        sample(m, "roundtrip_rtt_seconds_count", &[&labels]).is_some_and(|n| n >= 3.0)
            && sample(m, "roundtrip_up", &[&labels]) == Some(1.0)
    });
    for want in [
        "# TYPE roundtrip_rtt_seconds histogram".to_string(),
        format!("roundtrip_rtt_seconds_bucket{{{labels},le=\"1e-05\"}} "),
        format!("roundtrip_rtt_seconds_bucket{{{labels},le=\"0.0001\"}} "),
        format!("roundtrip_rtt_seconds_bucket{{{labels},le=\"10\"}} "),
        format!("roundtrip_rtt_seconds_bucket{{{labels},le=\"+Inf\"}} "),
        format!("roundtrip_rtt_seconds_sum{{{labels}}} "),
        "# TYPE roundtrip_probes_total counter".to_string(),
        format!("roundtrip_probes_total{{{labels}}} "),
        format!("roundtrip_probe_errors_total{{{labels},reason=\"timeout\"}} "),
        format!("roundtrip_probe_errors_total{{{labels},reason=\"refused\"}} "),
        format!("roundtrip_probe_errors_total{{{labels},reason=\"auth\"}} "),
        format!("roundtrip_up{{{labels}}} 1"),
        "roundtrip_agent_schedule_lag_seconds_bucket{source=\"agent-a\",le=\"+Inf\"} ".to_string(),
        "roundtrip_agent_schedule_lag_seconds_count{source=\"agent-a\"} ".to_string(),
        "roundtrip_agent_targets{source=\"agent-a\"} 1".to_string(),
        format!(
            "roundtrip_agent_info{{source=\"agent-a\",address=\"127.0.0.1:{}\",version=",
            a.port.unwrap()
        ),
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(&want)),
            "missing {want}\n{text}"
        );
    }
    let buckets = text
        .lines()
        .filter(|l| l.starts_with("roundtrip_rtt_seconds_bucket{") && l.contains(&tl))
        .count();
    assert_eq!(buckets, 98);
    let (status, head, _) = get(a.metrics, "/metrics", None).unwrap();
    assert_eq!(status, 200);
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    // Prometheus's own linter finds nothing to say.
    if common::have("promtool") {
        let (idx, out, err) = t.spawn_with_input(
            Command::new("promtool").args(["check", "metrics"]),
            Some(text.clone()),
        );
        let code = t.wait_exit(idx);
        thread::sleep(Duration::from_millis(100));
        assert_eq!(
            code,
            Some(0),
            "promtool: {:?} {:?}",
            snapshot(&out),
            snapshot(&err)
        );
        assert!(
            snapshot(&err).is_empty() && snapshot(&out).is_empty(),
            "promtool: {:?} {:?}",
            snapshot(&out),
            snapshot(&err)
        );
    }

    // OpenMetrics when asked.
    let (status, head, om) = get(
        a.metrics,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    )
    .unwrap();
    assert_eq!(status, 200);
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(om.contains("# TYPE roundtrip_probes counter\n"), "{om}");
    assert!(om.contains(&format!("roundtrip_probes_total{{{labels}}} ")));
    assert!(om.ends_with("# EOF\n"));

    // The JSON.
    let (status, head, body) = get(a.metrics, "/api/results", None).unwrap();
    assert_eq!(status, 200);
    assert!(head.contains("application/json"), "{head}");
    let v: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(v["source"], "agent-a");
    assert_eq!(v["address"], format!("127.0.0.1:{}", a.port.unwrap()));
    assert!(
        v["version"].is_string()
            && v["window_s"] == 60.0
            && v["at_unix_s"].as_f64().unwrap() > 1.6e9
    );
    let tj = &v["targets"][0];
    assert_eq!(tj["target"], peer);
    assert_eq!(tj["probe"], "tcp");
    assert_eq!(tj["size"], 64);
    assert_eq!(tj["labels"]["zone"], "a");
    assert_eq!(tj["up"], true);
    assert!(tj["probes"].as_u64().unwrap() >= 3);
    assert_eq!(tj["errors"].as_object().unwrap().len(), 8);
    assert!(tj["errors"]["timeout"].is_u64());
    assert!(tj["last_rtt_s"].as_f64().unwrap() > 0.0);
    let w = &tj["window"];
    for k in [
        "span_s", "sent", "lost", "loss", "p50_s", "p90_s", "p99_s", "max_s",
    ] {
        assert!(w.get(k).is_some(), "window.{k} in {w}");
    }
    assert!(w["p50_s"].as_f64().unwrap() > 0.0);
    assert!(w["p50_s"].as_f64() <= w["p99_s"].as_f64());

    // The page.
    let (status, head, html) = get(a.metrics, "/", None).unwrap();
    assert_eq!(status, 200, "{head}\n{html}");
    assert!(head.contains("text/html"), "{head}");
    assert!(html.to_ascii_lowercase().contains("<html"), "{html}");
    assert!(html.contains("agent-a") && html.contains(&peer), "{html}");

    // Elsewhere: 404 and 405.
    assert_eq!(get(a.metrics, "/nothing", None).unwrap().0, 404);
    assert_eq!(request(a.metrics, "POST", "/metrics", None).unwrap().0, 405);

    // Ctrl-C: a clean stop.
    assert_eq!(t.signal(&a, "-INT"), Some(0), "{:?}", snapshot(&a.err));
}

#[test]
fn peers_file_change_is_picked_up() {
    let mut t = T::new();
    let (_, p1) = t.server(0, &[]);
    let (_, p2) = t.server(0, &[]);
    let f = t.write("peers", &format!("# the fleet\n127.0.0.1:{p1}\n"));
    let a = t.agent(
        &["--peers-file", f.to_str().unwrap(), "--interval", "100ms"],
        &[],
    );
    let l1 = target_label(p1);
    let l2 = target_label(p2);
    t.until(&a, "/metrics", "the first peer up", |m| {
        sample(m, "roundtrip_up", &[&l1]) == Some(1.0)
    });
    t.write(
        "peers",
        &format!("# the fleet\n127.0.0.1:{p1}\n\n127.0.0.1:{p2}  # new\n"),
    );
    let idx = a.idx;
    t.wait_for(
        idx,
        &a.out,
        "roundtrip agent: targets: +1 -0 (now 2)",
        "the change line",
    );
    t.until(&a, "/metrics", "the second peer up", |m| {
        sample(m, "roundtrip_up", &[&l2]) == Some(1.0)
            && sample(m, "roundtrip_agent_targets", &[]) == Some(2.0)
    });
    t.write("peers", &format!("127.0.0.1:{p2}\n"));
    t.wait_for(
        idx,
        &a.out,
        "roundtrip agent: targets: +0 -1 (now 1)",
        "the removal line",
    );
    t.until(&a, "/metrics", "the first peer gone", |m| {
        sample(m, "roundtrip_up", &[&l1]).is_none() && sample(m, "roundtrip_up", &[&l2]).is_some()
    });
}

#[test]
fn config_span_sets_the_span_and_a_reload_keeps_the_running_one() {
    let mut t = T::new();
    let (_, p1) = t.server(0, &[]);
    let f = t.write(
        "agent.toml",
        &format!("span = \"90s\"\npeers = [\"127.0.0.1:{p1}\"]\n"),
    );
    let a = t.agent(&["--config", f.to_str().unwrap()], &[]);
    let line = t.wait_for(a.idx, &a.err, "own schedule (span ", "the schedule line");
    assert!(line.contains("(span 90"), "{line}");
    // A changed span in the file: the running one stays, said once per reload.
    t.write(
        "agent.toml",
        &format!("span = \"300s\"\npeers = [\"127.0.0.1:{p1}\"]\n"),
    );
    let line = t.wait_for(a.idx, &a.err, "the span stays", "the span note");
    assert!(line.contains("the span stays 90"), "{line}");
    // --span wins over the file.
    let b = t.agent(&["--config", f.to_str().unwrap(), "--span", "20s"], &[]);
    let line = t.wait_for(b.idx, &b.err, "own schedule (span ", "the schedule line");
    assert!(line.contains("(span 20"), "{line}");
}

#[test]
fn config_reload_with_an_error_keeps_the_old_targets() {
    let mut t = T::new();
    let (_, p1) = t.server(0, &[]);
    let (_, p2) = t.server(0, &[]);
    let good =
        format!("interval = \"100ms\"\npeers = [\"127.0.0.1:{p1}\"]\n[labels]\nzone = \"a\"\n");
    let f = t.write("agent.toml", &good);
    let a = t.agent(&["--config", f.to_str().unwrap()], &[]);
    let l1 = target_label(p1);
    let first = t.until(&a, "/metrics", "the configured peer up", |m| {
        sample(m, "roundtrip_up", &[&l1, "zone=\"a\""]) == Some(1.0)
    });
    let before = sample(&first, "roundtrip_probes_total", &[&l1]).unwrap();

    t.write(
        "agent.toml",
        &format!("interval = \"100ms\"\nbogus = 1\npeers = [\"127.0.0.1:{p2}\"]\n"),
    );
    let idx = a.idx;
    let line = t.wait_for(
        idx,
        &a.err,
        "keeping the previous configuration",
        "the reload error",
    );
    assert!(
        line.starts_with(&format!(
            "roundtrip agent: config {}:2: key `bogus`: unknown key",
            f.display()
        )),
        "{line}"
    );
    // Still probing the old target, not the new one.
    t.until(&a, "/metrics", "the old target still probed", |m| {
        sample(m, "roundtrip_probes_total", &[&l1]).is_some_and(|n| n > before + 3.0)
    });
    assert!(
        !snapshot(&a.out).iter().any(|l| l.contains("targets: +")),
        "{:?}",
        snapshot(&a.out)
    );

    // A good file again: the new target replaces the old.
    t.write(
        "agent.toml",
        &format!("interval = \"100ms\"\npeers = [\"127.0.0.1:{p2}\"]\n[labels]\nzone = \"b\"\n"),
    );
    t.wait_for(
        idx,
        &a.out,
        "roundtrip agent: targets: +1 -1 (now 1)",
        "the change line",
    );
    let l2 = target_label(p2);
    t.until(&a, "/metrics", "the new peer up", |m| {
        sample(m, "roundtrip_up", &[&l2, "zone=\"b\""]) == Some(1.0)
    });

    // SIGHUP reloads (it does not stop the agent).
    let reloads = |a: &Agent| {
        snapshot(&a.err)
            .iter()
            .filter(|l| l.contains("reloaded"))
            .count()
    };
    let before = reloads(&a);
    let pid = t.child(idx).id();
    kill_pid(pid, "-HUP");
    let deadline = Instant::now() + WAIT;
    while reloads(&a) == before {
        assert!(
            Instant::now() < deadline,
            "no reload after SIGHUP: {:?}",
            snapshot(&a.err)
        );
        assert!(
            t.child(idx).try_wait().unwrap().is_none(),
            "SIGHUP stopped the agent"
        );
        thread::sleep(Duration::from_millis(50));
    }
    assert!(
        t.child(idx).try_wait().unwrap().is_none(),
        "SIGHUP stopped the agent"
    );
}

#[test]
fn a_down_peer_counts_refused_and_comes_back() {
    let mut t = T::new();
    let down = common::free_port();
    let junk = t.garbage_peer();
    let a = t.agent(
        &[
            "--peer",
            &format!("127.0.0.1:{down}"),
            "--peer",
            &format!("127.0.0.1:{junk}"),
            "--interval",
            "100ms",
            "--timeout",
            "500ms",
        ],
        &[],
    );
    let ld = target_label(down);
    let lj = target_label(junk);
    t.until(&a, "/metrics", "refused probes to the down peer", |m| {
        sample(
            m,
            "roundtrip_probe_errors_total",
            &[&ld, "reason=\"refused\""],
        )
        .is_some_and(|n| n >= 2.0)
            && sample(m, "roundtrip_up", &[&ld]) == Some(0.0)
    });
    // The garbage peer: errors, never up, no crash.
    t.until(&a, "/metrics", "errors from the garbage peer", |m| {
        let errs: f64 = m
            .lines()
            .filter(|l| l.starts_with("roundtrip_probe_errors_total{") && l.contains(&lj))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        errs >= 2.0 && sample(m, "roundtrip_up", &[&lj]) == Some(0.0)
    });
    // It comes back.
    t.server(down, &[]);
    t.until(&a, "/metrics", "the peer up again", |m| {
        sample(m, "roundtrip_up", &[&ld]) == Some(1.0)
    });
    let v: Value = serde_json::from_str(&get(a.metrics, "/api/results", None).unwrap().2).unwrap();
    let d = v["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["target"] == format!("127.0.0.1:{down}"))
        .expect("the peer in the JSON");
    assert!(d["errors"]["refused"].as_u64().unwrap() >= 2);
    assert!(
        t.child(a.idx).try_wait().unwrap().is_none(),
        "the agent is still running"
    );
}

#[test]
fn psk_agents_measure_each_other_and_not_one_without_the_key() {
    let mut t = T::new();
    let key = t.write("key", "0123456789abcdef-fleet-test-key\n");
    let mut perms = std::fs::metadata(&key).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o600);
    std::fs::set_permissions(&key, perms).unwrap();
    let k = key.to_str().unwrap();
    let fa = t.write("peers-a", "");
    let fb = t.write("peers-b", "");
    let fc = t.write("peers-c", "");
    let common = ["--interval", "100ms", "--timeout", "500ms"];
    let a = t.agent(
        &[
            &common[..],
            &[
                "--psk-file",
                k,
                "--peers-file",
                fa.to_str().unwrap(),
                "--source",
                "a",
            ],
        ]
        .concat(),
        &[],
    );
    let b = t.agent(
        &[
            &common[..],
            &[
                "--psk-file",
                k,
                "--peers-file",
                fb.to_str().unwrap(),
                "--source",
                "b",
            ],
        ]
        .concat(),
        &[],
    );
    let c = t.agent(
        &[
            &common[..],
            &["--peers-file", fc.to_str().unwrap(), "--source", "c"],
        ]
        .concat(),
        &[],
    );
    let (pa, pb, pc) = (a.port.unwrap(), b.port.unwrap(), c.port.unwrap());
    t.write("peers-a", &format!("127.0.0.1:{pb}\n127.0.0.1:{pc}\n"));
    t.write("peers-b", &format!("127.0.0.1:{pa}\n"));
    t.write("peers-c", &format!("127.0.0.1:{pa}\n"));
    let (la, lb, lc) = (target_label(pa), target_label(pb), target_label(pc));
    // Keyed agents measure each other.
    t.until(&a, "/metrics", "a -> b answered", |m| {
        sample(m, "roundtrip_up", &[&lb]) == Some(1.0)
            && sample(m, "roundtrip_rtt_seconds_count", &[&lb]).is_some_and(|n| n >= 2.0)
    });
    t.until(&b, "/metrics", "b -> a answered", |m| {
        sample(m, "roundtrip_up", &[&la]) == Some(1.0)
    });
    // The keyed agent and the one without do not, and say it is the key.
    let m = t.until(&a, "/metrics", "a -> c failing on auth", |m| {
        sample(m, "roundtrip_probe_errors_total", &[&lc, "reason=\"auth\""])
            .is_some_and(|n| n >= 1.0)
    });
    assert_eq!(sample(&m, "roundtrip_up", &[&lc]), Some(0.0));
    assert_eq!(sample(&m, "roundtrip_rtt_seconds_count", &[&lc]), Some(0.0));
    let m = t.until(&c, "/metrics", "c -> a failing on auth", |m| {
        sample(m, "roundtrip_probe_errors_total", &[&la, "reason=\"auth\""])
            .is_some_and(|n| n >= 1.0)
    });
    assert_eq!(sample(&m, "roundtrip_rtt_seconds_count", &[&la]), Some(0.0));
    let v: Value = serde_json::from_str(&get(c.metrics, "/api/results", None).unwrap().2).unwrap();
    let e = v["targets"][0]["last_error"]
        .as_str()
        .unwrap_or("")
        .to_ascii_lowercase();
    assert!(e.contains("key"), "the error names the key: {e}");
}

#[test]
fn a_database_password_never_appears() {
    let mut t = T::new();
    let (_, sp) = t.server(0, &[]);
    let closed = common::free_port();
    let cfg = t.write(
        "agent.toml",
        &format!(
            "interval = \"200ms\"\ntimeout = \"500ms\"\n\
             [[target]]\nprobe = \"db\"\nurl = \"postgres://app:S3cretPw42@127.0.0.1:{sp}/app\"\n\
             [[target]]\nprobe = \"db\"\nurl = \"postgres://app@127.0.0.1:{closed}/app\"\n"
        ),
    );
    let a = t.agent(
        &["--config", cfg.to_str().unwrap(), "--source", "dbcheck"],
        &[("PGPASSWORD", "EnvPw9876")],
    );
    let (l1, l2) = (target_label(sp), target_label(closed));
    let m = t.until(&a, "/metrics", "both db targets probed", |m| {
        sample(m, "roundtrip_probes_total", &[&l1, "probe=\"db\""]).is_some_and(|n| n >= 2.0)
            && sample(m, "roundtrip_probes_total", &[&l2, "probe=\"db\""]).is_some_and(|n| n >= 2.0)
    });
    let om = get(a.metrics, "/metrics", Some("application/openmetrics-text"))
        .unwrap()
        .2;
    let api = get(a.metrics, "/api/results", None).unwrap().2;
    let page = get(a.metrics, "/", None).unwrap().2;
    // A bad reload logs too: the password must not be in that line either.
    t.write(
        "agent.toml",
        &format!("[[target]]\nprobe = \"db\"\nurl = \"postgres://app:S3cretPw42@127.0.0.1:{sp}/app?bogus=1\"\n"),
    );
    let idx = a.idx;
    t.wait_for(
        idx,
        &a.err,
        "keeping the previous configuration",
        "the reload error",
    );
    assert_eq!(t.signal(&a, "-TERM"), Some(0));
    let logs = format!(
        "{}\n{}",
        snapshot(&a.out).join("\n"),
        snapshot(&a.err).join("\n")
    );
    for (what, text) in [
        ("/metrics", &m),
        ("OpenMetrics", &om),
        ("/api/results", &api),
        ("/", &page),
        ("logs", &logs),
    ] {
        for pw in ["S3cretPw42", "EnvPw9876"] {
            assert!(!text.contains(pw), "{pw} appears in {what}:\n{text}");
        }
    }
    assert!(api.contains(&format!("127.0.0.1:{sp}")), "{api}");
}

#[test]
fn sigterm_is_a_clean_exit() {
    let mut t = T::new();
    let (_, port) = t.server(0, &[]);
    let a = t.agent(
        &[
            "--peer",
            &format!("127.0.0.1:{port}"),
            "--interval",
            "100ms",
        ],
        &[],
    );
    let l = target_label(port);
    t.until(&a, "/metrics", "a probe answered", |m| {
        sample(m, "roundtrip_up", &[&l]) == Some(1.0)
    });
    let metrics = a.metrics;
    assert_eq!(t.signal(&a, "-TERM"), Some(0), "{:?}", snapshot(&a.err));
    assert!(
        snapshot(&a.err)
            .iter()
            .any(|l| l.contains("roundtrip agent: stopped"))
    );
    assert!(
        TcpStream::connect_timeout(&metrics, Duration::from_secs(2)).is_err(),
        "pages stopped"
    );
}

#[test]
fn exposed_metrics_are_announced() {
    let mut t = T::new();
    let (idx, out, err) =
        t.spawn(Command::new(bin()).args(["agent", "--no-responder", "--metrics", "0.0.0.0:0"]));
    let line = t.wait_for(
        idx,
        &out,
        "roundtrip agent: metrics on http://",
        "the metrics line",
    );
    assert!(line.contains("(exposed"), "{line}");
    t.wait_for(idx, &err, "warning: --metrics", "the warning");
    assert!(
        snapshot(&out)
            .iter()
            .any(|l| l == "roundtrip agent: no responder")
    );
    let pid = t.child(idx).id();
    kill_pid(pid, "-TERM");
    assert_eq!(t.wait_exit(idx), Some(0));
}

#[test]
fn ports_in_use_are_one_line_and_exit_1() {
    let mut t = T::new();
    let (_, port) = t.server(0, &[]);
    let p = port.to_string();
    let (code, _, err) = t.run_agent(&[
        "--bind",
        "127.0.0.1",
        "--port",
        &p,
        "--metrics",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with("roundtrip: error: starting the responder"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let m = busy.local_addr().unwrap().to_string();
    let (code, _, err) = t.run_agent(&["--no-responder", "--metrics", &m]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with(&format!("roundtrip: error: cannot serve --metrics on {m}")),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn a_thousand_idle_connections_leave_a_scrape_answered() {
    // This test holds 1,000 sockets: lift the soft limit on open files to the hard one.
    let limit = roundtrip::server::raise_fd_limit().unwrap_or(0);
    if limit < 1_200 && !common::skip(&format!("the open-files limit is {limit}, under 1,200")) {
        return;
    }
    let mut t = T::new();
    let (_, port) = t.server(0, &[]);
    let peer = format!("127.0.0.1:{port}");
    let a = t.agent(&["--peer", &peer, "--interval", "100ms"], &[]);
    let tl = target_label(port);
    t.until(&a, "/metrics", "an answered probe", |m| {
        sample(m, "roundtrip_up", &[&tl]) == Some(1.0)
    });
    // 1,000 clients that connect and then say nothing, or only part of a request head.
    let mut idle = Vec::new();
    for i in 0..1_000 {
        let mut c = TcpStream::connect_timeout(&a.metrics, Duration::from_secs(10))
            .expect("an idle connection to the metrics port");
        if i % 3 == 0 {
            let _ = c.write_all(b"GET /metrics HTTP/1.1\r\nHost: slow");
        }
        idle.push(c);
    }
    // Every page still answers, whole, while they stay open (request() reads with a 20 s timeout).
    for path in ["/metrics", "/api/results", "/"] {
        let (status, head, body) = get(a.metrics, path, None).expect(path);
        assert_eq!(status, 200, "{path}: {head}");
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .and_then(|v| v.trim().parse().ok())
            .expect("a Content-Length");
        assert_eq!(body.len(), len, "{path}: the whole body");
    }
    let (_, _, m) = get(a.metrics, "/metrics", None).unwrap();
    assert_eq!(sample(&m, "roundtrip_up", &[&tl]), Some(1.0), "{m}");
    drop(idle);
    assert_eq!(t.signal(&a, "-TERM"), Some(0), "{:?}", snapshot(&a.err));
}
