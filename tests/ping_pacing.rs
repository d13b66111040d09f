//! `roundtrip ping -i`: the open-loop schedule (one message every interval whether or not the answers came),
//! against a real `roundtrip server` on loopback, through a real `roundtrip proxy` adding delay, loss or
//! reordering. Bounds are structural (what a closed loop could not do), not timings.

mod common;

use assert_cmd::Command;
use common::procs::{Kids, Kill};
use roundtrip::probe::ping::{self, Observer, PingConfig, Sample, Stop, Transport};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;
use std::time::Duration;

/// Starts `roundtrip server` (TCP and UDP) on an OS-picked port; returns it with its port.
fn server() -> (Kill, u16) {
    let mut child = std::process::Command::new(common::procs::bin())
        .args(["server", "--bind", "127.0.0.1", "--port", "0"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let port = common::procs::port_in(&line);
    std::thread::spawn(move || {
        let mut sink = String::new();
        let _ = err.read_to_string(&mut sink);
    });
    (Kill(child), port)
}

/// `roundtrip ping 127.0.0.1:PORT ARGS... --warmup 0 --json --full-log FILE`: the document and the log's
/// rows (seq, send_ns, recv_ns), whatever the exit status.
fn ping(port: u16, args: &[&str]) -> (Value, Vec<[u64; 3]>) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("rtt.csv");
    let out = Command::new(common::procs::bin())
        .arg("ping")
        .arg(format!("127.0.0.1:{port}"))
        .args(args)
        .args(["--warmup", "0", "--json", "--full-log"])
        .arg(&log)
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
    });
    let csv = std::fs::read_to_string(&log).unwrap_or_default();
    let rows = csv
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<u64> = l.split(',').take(3).map(|x| x.parse().unwrap()).collect();
            [f[0], f[1], f[2]]
        })
        .collect();
    (doc, rows)
}

fn num(doc: &Value, k: &str) -> u64 {
    doc["summary"][k]
        .as_u64()
        .unwrap_or_else(|| panic!("summary.{k} in {doc}"))
}

/// Most messages in flight at once, from the full log: at each send, the sends before it whose answer had not
/// come yet.
fn most_in_flight(rows: &[[u64; 3]]) -> usize {
    rows.iter()
        .map(|r| rows.iter().filter(|o| o[1] <= r[1] && o[2] > r[1]).count())
        .max()
        .unwrap_or(0)
}

#[test]
fn with_an_interval_several_messages_are_in_flight() {
    let mut kids = Kids::default();
    let (_srv, port) = server();
    let tcp = kids.proxy(port, &["--rtt", "40ms"]);
    let udp = kids.proxy(port, &["--udp", "--rtt", "40ms"]);
    for (proxy, extra) in [(tcp, None), (udp, Some("--udp"))] {
        let mut args = vec!["--count", "50", "-i", "10ms"];
        args.extend(extra);
        let (doc, rows) = ping(proxy, &args);
        assert_eq!(doc["settings"]["interval_ns"], 10_000_000, "{doc}");
        assert_eq!(num(&doc, "sent"), 50, "{doc}");
        assert_eq!(num(&doc, "received"), 50, "{doc}");
        assert_eq!(num(&doc, "lost"), 0, "{doc}");
        assert_eq!(rows.len(), 50);
        // Every round trip takes at least the proxy's 40 ms: a closed loop of 50 needs 2 s.
        assert!(rows.iter().all(|r| r[2] - r[1] >= 40_000_000), "{rows:?}");
        // Sends 10 ms apart with 40 ms round trips: more than one answer awaited at once.
        assert!(most_in_flight(&rows) >= 2, "{rows:?}");
        let elapsed = doc["summary"]["elapsed_s"].as_f64().unwrap();
        assert!(elapsed < 50.0 * 0.040 * 0.6, "{elapsed} s: {doc}");
    }
}

#[test]
fn udp_losses_do_not_stop_the_sending() {
    let mut kids = Kids::default();
    let (_srv, port) = server();
    let lossy = kids.proxy(port, &["--udp", "--rtt", "20ms", "--loss", "20%"]);
    let (doc, rows) = ping(
        lossy,
        &["--udp", "--count", "100", "-i", "10ms", "--timeout", "2s"],
    );
    let (sent, received, lost) = (num(&doc, "sent"), num(&doc, "received"), num(&doc, "lost"));
    assert_eq!(sent, 100, "{doc}");
    assert_eq!(lost, sent - received, "{doc}");
    // 20% each way: about 36 of 100 lost; fewer than 5 has a probability below 1e-9.
    assert!(lost >= 5, "{doc}");
    // Losses are counted by sequence number: the answered ones are distinct messages of 1..=100, one log row
    // each, and the lost ones are the gaps.
    let mut seqs: Vec<u64> = rows.iter().map(|r| r[0]).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len() as u64, received, "{doc}");
    let (lo, hi) = (seqs[0], seqs[seqs.len() - 1]);
    assert!(hi - lo < sent, "{seqs:?}");
    // A closed loop would wait the 2 s timeout for every loss (over 10 s for 5); the open loop takes the
    // schedule (1 s) and at most one timeout after the last send.
    let elapsed = doc["summary"]["elapsed_s"].as_f64().unwrap();
    assert!(elapsed < 1.0 + 2.0 + 5.0, "{elapsed} s: {doc}");
    // No send waited for a lost answer: between two answered messages with lost ones between them, the
    // sends are the schedule's 10 ms apart per message, never a 2 s timeout per loss.
    let mut by_seq = rows.clone();
    by_seq.sort_unstable();
    let gaps: Vec<(u64, u64)> = by_seq
        .windows(2)
        .filter(|w| w[1][0] > w[0][0] + 1)
        .map(|w| (w[1][0] - w[0][0] - 1, w[1][1] - w[0][1]))
        .collect();
    assert!(!gaps.is_empty(), "{seqs:?}");
    for (lost_between, send_gap_ns) in gaps {
        assert!(
            send_gap_ns < 2_000_000_000,
            "{lost_between} lost, the next send {send_gap_ns} ns later"
        );
    }
}

#[test]
fn udp_reordering_is_counted() {
    let mut kids = Kids::default();
    let (_srv, port) = server();
    let reorder = kids.proxy(
        port,
        &["--udp", "--reorder", "20%", "--reorder-delay", "30ms"],
    );
    let (doc, rows) = ping(reorder, &["--udp", "--count", "100", "-i", "5ms"]);
    assert_eq!(num(&doc, "sent"), 100, "{doc}");
    assert_eq!(num(&doc, "received"), 100, "{doc}");
    assert_eq!(num(&doc, "lost"), 0, "{doc}");
    // 20% held back 30 ms while messages leave every 5 ms: later answers overtake them.
    let out_of_order = num(&doc, "out_of_order");
    assert!(out_of_order > 0, "{doc}");
    // The same count from the log: answers (in arrival order) to a lower sequence than one already answered.
    let mut by_arrival = rows.clone();
    by_arrival.sort_by_key(|r| r[2]);
    let mut highest = 0;
    let mut overtaken = 0;
    for r in &by_arrival {
        if r[0] < highest {
            overtaken += 1;
        }
        highest = highest.max(r[0]);
    }
    assert_eq!(overtaken, out_of_order, "{rows:?}");
}

struct Collect(Vec<Sample>);
impl Observer for Collect {
    fn sample(&mut self, s: &Sample) {
        self.0.push(*s);
    }
}

#[test]
fn open_loop_after_a_warm_up_measures_only_its_own_messages() {
    let (_srv, port) = server();
    for transport in [Transport::Tcp, Transport::Udp] {
        let mut c = PingConfig::new(([127, 0, 0, 1], port).into());
        c.link.transport = transport;
        c.stop = Stop::Count(40);
        c.interval = Some(Duration::from_millis(2));
        c.open_loop = true;
        c.warmup = Duration::from_millis(50);
        c.link.timeout = Duration::from_secs(5);
        let mut seen = Collect(Vec::new());
        let r = ping::run(&c, &mut seen).unwrap();
        assert!(r.error.is_none(), "{transport}: {:?}", r.error);
        assert_eq!((r.sent, r.received), (40, 40), "{transport}");
        // 25 warm-up messages (50 ms at 2 ms), then the 40 measured ones, in order.
        let seqs: Vec<u64> = seen.0.iter().map(|s| s.seq).collect();
        let first = seqs.iter().copied().min().unwrap();
        assert_eq!(first, 26, "{transport}: {seqs:?}");
        let mut sorted = seqs.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (26..66).collect::<Vec<_>>(), "{transport}");
        // Sends follow the schedule: message k leaves no earlier than k intervals after the first.
        for s in &seen.0 {
            assert!(
                s.sent >= Duration::from_millis(2) * (s.seq - first) as u32,
                "{transport}: {s:?}"
            );
        }
    }
}
