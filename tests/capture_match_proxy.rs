//! `capture match` across a TCP-terminating box, for real: `roundtrip server` and `roundtrip proxy --rtt 20ms`
//! on loopback, tcpdump on the proxy's port (the client side) and on the server's port (the server side),
//! `roundtrip ping -c 100` through the proxy. The proxy opens its own connection to the server, so no TCP
//! sequence number is common to the two captures: every request must be paired by its content, and the
//! verdict must put the proxy's delay on the path between the capture points.

mod common;

use common::procs::{Kids, bin, port_in, wait_line};
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

const RTT_MS: f64 = 20.0;

#[test]
fn match_pairs_every_request_through_a_proxy_by_content() {
    if !common::require_root("tcpdump on loopback") {
        return;
    }
    if !common::have("tcpdump") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut kids = Kids(Vec::new());
    let mut server = Command::new(bin())
        .args(["server", "--bind", "127.0.0.1", "-p", "0", "--tcp-only"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = server.stderr.take().unwrap();
    kids.0.push(server);
    let sp = port_in(&wait_line(out, "listening on"));
    let mut proxy = Command::new(bin())
        .args(["proxy", "--listen", "127.0.0.1:0", "--upstream"])
        .arg(format!("127.0.0.1:{sp}"))
        .args(["--rtt", &format!("{RTT_MS}ms")])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = proxy.stdout.take().unwrap();
    kids.0.push(proxy);
    let pp = port_in(&wait_line(out, "listening on"));
    let client_pcap = dir.path().join("client.pcap");
    let server_pcap = dir.path().join("server.pcap");
    let tc = kids.tcpdump(&client_pcap, pp);
    let ts = kids.tcpdump(&server_pcap, sp);
    let ping = Command::new(bin())
        .args(["ping", &format!("127.0.0.1:{pp}"), "-c", "100"])
        .args(["--warmup", "300ms", "--timeout", "30s"])
        .output()
        .unwrap();
    assert!(
        ping.status.success(),
        "ping: {}",
        String::from_utf8_lossy(&ping.stderr)
    );
    // let tcpdump write out what it has before it is stopped
    thread::sleep(Duration::from_millis(500));
    kids.stop(tc);
    kids.stop(ts);

    // Both captures hold the same ping-pong requests, as sockperf transactions.
    let rpc = |f: &Path| -> serde_json::Value {
        let o = Command::new(bin())
            .args(["capture", "rpc"])
            .arg(f)
            .arg("--json")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    for f in [&client_pcap, &server_pcap] {
        let d = rpc(f);
        let ping = d["report"]["ops"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["proto"] == "sockperf" && o["op"] == "ping")
            .unwrap_or_else(|| panic!("no sockperf ping in {}: {d}", f.display()));
        assert!(ping["last_byte"]["count"].as_u64().unwrap() >= 100);
    }

    let o = Command::new(bin())
        .args(["capture", "match"])
        .arg(&client_pcap)
        .arg(&server_pcap)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "capture match: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let n = |v: &serde_json::Value| v.as_u64().unwrap();
    let requests = n(&d["client_requests"]);
    assert!(requests > 100, "{d}");
    assert_eq!(n(&d["server_requests"]), requests, "{d}");
    assert_eq!(n(&d["matched"]), requests, "every request paired: {d}");
    // No TCP sequence number survives the proxy: content (or order) found them all, and each pair says so.
    let by = &d["paired_by"];
    assert_eq!(n(&by["tcp_seq"]) + n(&by["xid"]), 0, "{by}");
    assert_eq!(n(&by["content"]) + n(&by["order"]), requests, "{by}");
    let pairs = d["pairs"].as_array().unwrap();
    assert_eq!(pairs.len() as u64, requests);
    assert!(
        pairs
            .iter()
            .all(|p| p["method"] == "content" || p["method"] == "order")
    );
    // The proxy's configured delay is on the path between the capture points: the client side sees at least
    // the added round trip more than the server side (a floor the proxy guarantees). The median of the 100
    // differences stays below 1.5 times the delay (10 ms for the proxy's own scheduling on a loaded machine):
    // a delay applied twice (40 ms) or a missing one fails.
    let ping = d["ops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["op"] == "ping")
        .unwrap();
    let diff_ms = ping["diff_mean_ns"].as_f64().unwrap() / 1e6;
    assert!(
        diff_ms >= 0.9 * RTT_MS,
        "path adds {diff_ms} ms on average, the proxy adds {RTT_MS} ms: {d}"
    );
    let diff_p50_ms = ping["diff_p50_ns"].as_f64().unwrap() / 1e6;
    assert!(
        (0.9 * RTT_MS..1.5 * RTT_MS).contains(&diff_p50_ms),
        "path adds a median {diff_p50_ms} ms, the proxy adds {RTT_MS} ms: {d}"
    );
    let first_diff_ms = ping["first_byte_diff_mean_ns"].as_f64().unwrap() / 1e6;
    assert!(first_diff_ms >= 0.9 * RTT_MS, "{first_diff_ms} ms");
    let verdict = d["verdict"].as_str().unwrap();
    assert!(
        verdict.contains("the path between the captures adds")
            && verdict.contains("TCP-terminating"),
        "{verdict}"
    );

    // The text says how the requests were paired, and so does the report page.
    let page = dir.path().join("match.html");
    let o = Command::new(bin())
        .args(["capture", "match"])
        .arg(&client_pcap)
        .arg(&server_pcap)
        .arg("--report")
        .arg(&page)
        .output()
        .unwrap();
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains(&format!(
            "by content (leading request bytes) {}",
            n(&by["content"])
        )),
        "the report names the methods"
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(&format!(
            "paired by: 0 xid, 0 tcp seq, {} content",
            n(&by["content"])
        )),
        "{text}"
    );
}
