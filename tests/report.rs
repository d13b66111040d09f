//! Reports: the drawn SVG read back through its labelled axes must give the input values; bad input gives
//! one-line errors; a real report rendered by headless Chromium is not blank.

mod common;

use assert_cmd::Command;
use roundtrip::probe::ping::{self, PingConfig, Stop};
use roundtrip::report::charts::{self, Options, Run, percentile_points};
use roundtrip::report::csv::FullLog;
use roundtrip::report::json::PingDoc;
use roundtrip::report::load;
use roundtrip::server::{self, ServerConfig};
use std::path::Path;
use std::time::Duration;

fn rt() -> Command {
    Command::cargo_bin("roundtrip").unwrap()
}

// ---------------------------------------------------------------------------------------------------------
// Reading an SVG back as a reader of the picture would: tick labels give the axis, paths give the points.

/// The value of attribute `name` in the tag starting at `tag`.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let i = tag.find(&key)? + key.len();
    let end = tag[i..].find('"')?;
    Some(&tag[i..i + end])
}

/// The standalone SVG of one chart of the page.
fn figure_svg(page: &roundtrip::report::html::Page, id: &str) -> String {
    page.sections
        .iter()
        .flat_map(|s| &s.figures)
        .find(|f| f.id == id)
        .unwrap_or_else(|| panic!("no {id} figure"))
        .chart
        .render(true)
}

/// (pixel, label) of every tick on the `x` or `y` axis.
fn ticks(svg: &str, axis: &str) -> Vec<(f64, String)> {
    let marker = format!("<g class=\"tick {axis}\">");
    svg.match_indices(&marker)
        .map(|(i, _)| {
            let g = &svg[i..i + svg[i..].find("</g>").unwrap()];
            let px: f64 = attr(g, if axis == "x" { "x1" } else { "y1" })
                .unwrap()
                .parse()
                .unwrap();
            let t = g.rfind("</text>").unwrap();
            let s = g[..t].rfind('>').unwrap();
            (px, g[s + 1..t].to_string())
        })
        .collect()
}

fn duration_label(l: &str) -> f64 {
    roundtrip::units::parse_duration(l)
        .unwrap_or_else(|e| panic!("tick label {l:?}: {e}"))
        .as_nanos() as f64
}

fn tail_label(l: &str) -> f64 {
    let p: f64 = l.trim_end_matches('%').parse().unwrap();
    1.0 / (1.0 - p / 100.0)
}

fn count_label(l: &str) -> f64 {
    let (num, mult) = match l.strip_suffix('k') {
        Some(n) => (n, 1e3),
        None => match l.strip_suffix('M') {
            Some(n) => (n, 1e6),
            None => (l, 1.0),
        },
    };
    num.trim_end_matches('%').parse::<f64>().unwrap() * mult
}

/// An axis recovered from its ticks: pixel -> value. Checks that every tick sits where the first and last
/// ticks say it should (so the tick placement is tested too).
struct ReadAxis {
    log: bool,
    p0: f64,
    t0: f64,
    slope: f64,
}

impl ReadAxis {
    fn new(ticks: &[(f64, String)], parse: fn(&str) -> f64, log: bool) -> Self {
        assert!(ticks.len() >= 2, "need two ticks, got {ticks:?}");
        let t = |v: f64| if log { v.log10() } else { v };
        let (pa, va) = (ticks[0].0, parse(&ticks[0].1));
        let (pb, vb) = (ticks[ticks.len() - 1].0, parse(&ticks[ticks.len() - 1].1));
        let slope = (t(vb) - t(va)) / (pb - pa);
        let ax = ReadAxis {
            log,
            p0: pa,
            t0: t(va),
            slope,
        };
        for (px, l) in ticks {
            let want = parse(l);
            let got = ax.value(*px);
            assert!(
                (got - want).abs() <= want.abs() * 0.01 + 1e-9,
                "tick {l} at {px} reads {got}"
            );
        }
        ax
    }

    fn value(&self, px: f64) -> f64 {
        let t = self.t0 + (px - self.p0) * self.slope;
        if self.log { 10f64.powf(t) } else { t }
    }

    /// The value span of 0.06 pixel around `px` (the coordinates are written to 0.1 px).
    fn tolerance(&self, px: f64) -> f64 {
        (self.value(px + 0.06) - self.value(px - 0.06)).abs()
    }
}

/// Commands of a path's `d`: (letter, numbers).
fn path_cmds(d: &str) -> Vec<(char, Vec<f64>)> {
    let mut out: Vec<(char, Vec<f64>)> = Vec::new();
    let mut num = String::new();
    let flush = |num: &mut String, out: &mut Vec<(char, Vec<f64>)>| {
        if !num.is_empty() {
            out.last_mut().unwrap().1.push(num.parse().unwrap());
            num.clear();
        }
    };
    for c in d.chars() {
        if c.is_ascii_alphabetic() {
            flush(&mut num, &mut out);
            out.push((c, Vec::new()));
        } else if c == ' ' || c == ',' {
            flush(&mut num, &mut out);
        } else {
            num.push(c);
        }
    }
    flush(&mut num, &mut out);
    out
}

/// The `d` of every path with this class prefix (e.g. "line c0").
fn paths<'a>(svg: &'a str, class: &str) -> Vec<&'a str> {
    let marker = format!("<path class=\"{class}");
    svg.match_indices(&marker)
        .map(|(i, _)| {
            let tag = &svg[i..i + svg[i..].find("/>").unwrap()];
            attr(tag, "d").unwrap()
        })
        .collect()
}

fn is_log(svg: &str, axis_word: &str) -> bool {
    svg.contains(&format!("{axis_word} (log scale)"))
}

// ---------------------------------------------------------------------------------------------------------

/// A hand-written document with round numbers, so every expected value is known exactly.
fn known_doc() -> serde_json::Value {
    let factor = 10f64.powf(1.0 / 20.0);
    // Buckets from 50us up: counts rising then a long tail, and one lonely 20ms bucket.
    let mut hist = Vec::new();
    let mut le = 50_000.0f64;
    for count in [5u64, 40, 300, 1200, 900, 400, 120, 60, 20, 8, 3] {
        hist.push(serde_json::json!({"le_ns": le.ceil() as u64, "count": count}));
        le *= factor;
    }
    hist.push(serde_json::json!({"le_ns": 20_000_000u64, "count": 1}));
    serde_json::json!({
        "format": "roundtrip", "format_version": 1, "kind": "ping",
        "environment": {"roundtrip_version": "0.1.0", "hostname": "known-host", "kernel": "6.1.0-test"},
        "started_unix_s": 1_700_000_000.0,
        "settings": {"target": "10.0.0.1", "address": "10.0.0.1:11111", "transport": "udp", "size_bytes": 64,
                     "stop": {"count": 3017}, "interval_ns": null, "warmup_ns": 1_000_000_000u64,
                     "timeout_ns": 2_000_000_000u64},
        "peer": "roundtrip",
        "summary": {"sent": 3017, "received": 3017, "lost": 0, "duplicated": 0, "out_of_order": 0, "late": 0,
                    "elapsed_s": 3.0,
                    "rtt": {"count": 3017, "min_ns": 47_000, "mean_ns": 81_000.0, "stddev_ns": 9_000.0,
                            "p50_ns": 72_000, "p90_ns": 110_000, "p99_ns": 400_000, "p99_9_ns": 3_000_000,
                            "p99_99_ns": 20_000_000, "max_ns": 20_000_000},
                    "server_turnaround": null},
        "intervals": [
            {"end_s": 1.0, "length_s": 1.0, "round_trips": 1000, "sent": 1000, "mb_per_s": 0.1,
             "p50_ns": 70_000, "p99_ns": 300_000, "max_ns": 2_000_000},
            {"end_s": 2.0, "length_s": 1.0, "round_trips": 1000, "sent": 1000, "mb_per_s": 0.1,
             "p50_ns": 75_000, "p99_ns": 500_000, "max_ns": 20_000_000},
            {"end_s": 3.0, "length_s": 1.0, "round_trips": 1017, "sent": 1017, "mb_per_s": 0.1,
             "p50_ns": 72_000, "p99_ns": 350_000, "max_ns": 900_000}
        ],
        "histogram": hist,
        "percentiles": [
            {"percentile": 0.0, "value_ns": 47_000}, {"percentile": 50.0, "value_ns": 72_000},
            {"percentile": 75.0, "value_ns": 85_000}, {"percentile": 90.0, "value_ns": 110_000},
            {"percentile": 99.0, "value_ns": 400_000}, {"percentile": 99.9, "value_ns": 3_000_000},
            {"percentile": 99.99, "value_ns": 9_000_000}, {"percentile": 100.0, "value_ns": 20_000_000}
        ],
        "error": null, "cancelled": false
    })
}

fn known_run() -> Run {
    Run {
        label: "known".into(),
        doc: load::from_value("known.json", known_doc()).unwrap(),
        full_log: None,
        phase_log: None,
    }
}

#[test]
fn percentile_curve_points_read_back_to_the_input() {
    let page = charts::page("t", &[known_run()], &Options::default()).unwrap();
    let svg = figure_svg(&page, "percentiles");
    let x = ReadAxis::new(&ticks(&svg, "x"), tail_label, true);
    let y = ReadAxis::new(&ticks(&svg, "y"), duration_label, is_log(&svg, "RTT"));
    let d = paths(&svg, "line c0");
    assert_eq!(d.len(), 1);
    let pts: Vec<(f64, f64)> = path_cmds(d[0])
        .into_iter()
        .map(|(_, v)| (v[0], v[1]))
        .collect();
    let doc: roundtrip::doc::ping::PingDoc = serde_json::from_value(known_doc()).unwrap();
    let want = percentile_points(&doc.percentiles);
    assert_eq!(pts.len(), want.len(), "{}", d[0]);
    for ((px, py), (wx, wy)) in pts.iter().zip(&want) {
        let (gx, gy) = (x.value(*px), y.value(*py));
        assert!((gx - wx).abs() <= x.tolerance(*px), "x {gx} vs {wx}");
        assert!((gy - wy).abs() <= y.tolerance(*py), "y {gy} vs {wy}");
    }
    // The curve reaches the maximum (20ms), drawn last.
    assert!((y.value(pts.last().unwrap().1) - 20e6).abs() <= y.tolerance(pts.last().unwrap().1));
}

#[test]
fn histogram_bars_read_back_to_the_counts() {
    for log_counts in [false, true] {
        let opts = Options {
            log_counts,
            ..Options::default()
        };
        let page = charts::page("t", &[known_run()], &opts).unwrap();
        let svg = figure_svg(&page, "distribution");
        let x = ReadAxis::new(&ticks(&svg, "x"), duration_label, true);
        let y = ReadAxis::new(&ticks(&svg, "y"), count_label, log_counts);
        assert_eq!(svg.contains("round trips (count, log scale)"), log_counts);
        let d = paths(&svg, "hist c0");
        assert_eq!(d.len(), 1);
        // Each bar is "V top H right"; its right edge is the bucket's upper bound.
        let cmds = path_cmds(d[0]);
        let mut bars = Vec::new();
        for w in cmds.windows(2) {
            if let (('V', top), ('H', right)) = (&w[0], &w[1]) {
                bars.push((y.value(top[0]), x.value(right[0]), top[0], right[0]));
            }
        }
        let doc: roundtrip::doc::ping::PingDoc = serde_json::from_value(known_doc()).unwrap();
        assert_eq!(bars.len(), doc.histogram.len());
        for ((count, le, py, px), b) in bars.iter().zip(&doc.histogram) {
            assert!(
                (count - b.count as f64).abs() <= y.tolerance(*py).max(1e-6),
                "count {count} vs {}",
                b.count
            );
            assert!(
                (le - b.le_ns as f64).abs() <= x.tolerance(*px),
                "le {le} vs {}",
                b.le_ns
            );
        }
    }
}

#[test]
fn interval_bands_read_back_to_the_interval_rows() {
    let page = charts::page("t", &[known_run()], &Options::default()).unwrap();
    let svg = figure_svg(&page, "rtt-time");
    let x = ReadAxis::new(&ticks(&svg, "x"), duration_label, false);
    let y = ReadAxis::new(&ticks(&svg, "y"), duration_label, is_log(&svg, "RTT"));
    // The max line: a staircase M x y (H x V y)*.
    let d = paths(&svg, "step c0 dash");
    assert_eq!(d.len(), 1);
    let cmds = path_cmds(d[0]);
    let mut levels = vec![y.value(cmds[0].1[1])];
    for c in &cmds {
        if c.0 == 'V' {
            levels.push(y.value(c.1[0]));
        }
    }
    // Start level, then one V per change (the last closes the final interval).
    let want = [2e6, 20e6, 0.9e6, 0.9e6];
    assert_eq!(levels.len(), want.len(), "{}", d[0]);
    for (g, w) in levels.iter().zip(want) {
        assert!((g - w).abs() / w < 0.01, "{g} vs {w}");
    }
    // The staircase spans 0 to 3 s.
    assert!(x.value(cmds[0].1[0]).abs() < 0.01e9);
    let last_h = cmds.iter().rev().find(|c| c.0 == 'H').unwrap().1[0];
    assert!((x.value(last_h) - 3e9).abs() < 0.01e9);
}

/// A real run against the embedded server; its full log written to `log` as `ping --full-log` writes it.
/// Returns the document and every RTT in nanoseconds.
fn real_run(count: u64, log: &Path) -> (PingDoc, Vec<u64>) {
    let srv = server::start(
        &ServerConfig {
            bind: Some([127, 0, 0, 1].into()),
            port: 0,
            tcp: true,
            udp: true,
            ..Default::default()
        },
        |_| {},
    )
    .unwrap();
    let mut c = PingConfig::new(srv.tcp_addr().unwrap());
    c.stop = Stop::Count(count);
    c.warmup = Duration::from_millis(20);
    c.link.timeout = Duration::from_secs(10);
    c.report_interval = Duration::from_millis(50);
    struct Both(FullLog<std::io::BufWriter<std::fs::File>>, Vec<u64>);
    impl ping::Observer for Both {
        fn sample(&mut self, s: &ping::Sample) {
            self.0.write_sample(s);
            self.1.push(s.rtt().as_nanos() as u64);
        }
    }
    let file = std::io::BufWriter::new(std::fs::File::create(log).unwrap());
    let mut obs = Both(FullLog::new(file).unwrap(), Vec::new());
    let r = ping::run(&c, &mut obs).unwrap();
    assert_eq!(r.received, count);
    let Both(full, rtts) = obs;
    assert_eq!(full.finish().unwrap(), count);
    srv.shutdown();
    (
        PingDoc::new("local", &r, c.stop, None, c.warmup, c.link.timeout),
        rtts,
    )
}

#[test]
fn full_log_columns_keep_every_extreme_of_a_real_run() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.csv");
    let (doc, rtts) = real_run(5000, &log);
    let run = Run {
        label: "real".into(),
        doc: load::from_value("real", serde_json::to_value(&doc).unwrap()).unwrap(),
        full_log: Some(load::load_full_log(&log).unwrap()),
        phase_log: None,
    };
    assert_eq!(run.full_log.as_ref().unwrap().rows, 5000);
    let page = charts::page("t", &[run], &Options::default()).unwrap();
    let svg = figure_svg(&page, "rtt-time");
    let y = ReadAxis::new(&ticks(&svg, "y"), duration_label, is_log(&svg, "RTT"));
    let d = paths(&svg, "cols c0");
    assert_eq!(d.len(), 1);
    let cmds = path_cmds(d[0]);
    // Strokes: M x lo V hi, at most one per pixel column.
    let mut xs = Vec::new();
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    let (mut lo_px, mut hi_px) = (0.0, 0.0);
    for c in &cmds {
        match c.0 {
            'M' => {
                xs.push(c.1[0].floor() as i64);
                let v = y.value(c.1[1]);
                if v < lo {
                    (lo, lo_px) = (v, c.1[1]);
                }
            }
            'V' => {
                let v = y.value(c.1[0]);
                if v > hi {
                    (hi, hi_px) = (v, c.1[0]);
                }
            }
            _ => {}
        }
    }
    let mut dedup = xs.clone();
    dedup.dedup();
    assert_eq!(dedup.len(), xs.len(), "two strokes in one pixel column");
    let want_lo = *rtts.iter().min().unwrap() as f64;
    let want_hi = *rtts.iter().max().unwrap() as f64;
    assert!(
        (lo - want_lo).abs() <= y.tolerance(lo_px),
        "min {lo} vs {want_lo}"
    );
    assert!(
        (hi - want_hi).abs() <= y.tolerance(hi_px),
        "max {hi} vs {want_hi}"
    );
}

#[test]
fn saved_document_round_trips_through_the_reader() {
    let dir = tempfile::tempdir().unwrap();
    let (doc, _) = real_run(300, &dir.path().join("l.csv"));
    let bytes = roundtrip::report::json::to_bytes(&doc);
    let l = load::parse("saved.json", &bytes).unwrap();
    assert_eq!(l.kind, "ping");
    let p: roundtrip::doc::ping::PingDoc = l.typed().unwrap();
    assert_eq!(p.summary.rtt.count, 300);
    assert_eq!(p.summary.rtt.max_ns, doc.summary.rtt.max_ns);
    assert_eq!(p.percentiles.len(), doc.percentiles.len());
    assert_eq!(l.environment.kernel, doc.header.environment.kernel);
}

// ---------------------------------------------------------------------------------------------------------
// The command line.

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn report_err(args: &[&std::ffi::OsStr]) -> String {
    report_exit(args, 1)
}

/// `report` with `args` ends with exit `code` and one error line, returned.
fn report_exit(args: &[&std::ffi::OsStr], code: i32) -> String {
    let out = rt().arg("report").args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(code), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("roundtrip: error: "), "{err}");
    err
}

#[test]
fn bad_inputs_give_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = d.join("r.html");
    let o = out.as_os_str();
    // hyperfine --export-json
    let hf = write(
        d,
        "hf.json",
        r#"{"results":[{"command":"sleep 0.1","mean":0.1,"times":[0.1]}]}"#,
    );
    let e = report_err(&[hf.as_os_str(), "-o".as_ref(), o]);
    assert!(
        e.contains("hf.json is not a roundtrip result: it has no \"format\" field"),
        "{e}"
    );
    // iperf3 -J
    let ip = write(
        d,
        "ip.json",
        r#"{"start":{"version":"iperf 3.12"},"intervals":[],"end":{}}"#,
    );
    let e = report_err(&[ip.as_os_str(), "-o".as_ref(), o]);
    assert!(e.contains("no \"format\" field"), "{e}");
    let mut v2 = known_doc();
    v2["format_version"] = 2.into();
    let v2 = write(d, "v2.json", &v2.to_string());
    let e = report_err(&[v2.as_os_str(), "-o".as_ref(), o]);
    assert!(
        e.contains("v2.json has format_version 2, this roundtrip reads format_version 1"),
        "{e}"
    );
    let mut nop = known_doc();
    nop.as_object_mut().unwrap().remove("percentiles");
    let nop = write(d, "nop.json", &nop.to_string());
    let e = report_err(&[nop.as_os_str(), "-o".as_ref(), o]);
    assert!(
        e.contains("nop.json: the \"ping\" result is incomplete: missing field `percentiles`"),
        "{e}"
    );
    // A ping document relabelled as db: the db report names the part it lacks.
    let mut db = known_doc();
    db["kind"] = "db".into();
    let db = write(d, "db.json", &db.to_string());
    let e = report_err(&[db.as_os_str(), "-o".as_ref(), o]);
    assert!(
        e.contains("db.json: the \"db\" result is incomplete: missing field `phases`"),
        "{e}"
    );
    let mut tl = known_doc();
    tl["kind"] = "model-tps".into();
    let tl = write(d, "tl.json", &tl.to_string());
    let e = report_err(&[tl.as_os_str(), "-o".as_ref(), o]);
    assert!(
        e.contains("holds a \"model-tps\" result, which has no report yet"),
        "{e}"
    );
    let mut sweep = known_doc();
    sweep["kind"] = "sweep".into();
    let sweep = write(d, "sweep.json", &sweep.to_string());
    let e = report_err(&[sweep.as_os_str(), "-o".as_ref(), o]);
    assert!(
        e.contains("sweep.json: the \"sweep\" result is incomplete: missing field `cells`"),
        "{e}"
    );
    let garbage = d.join("g.json");
    std::fs::write(&garbage, b"\xff\x00{{{").unwrap();
    let e = report_err(&[garbage.as_os_str(), "-o".as_ref(), o]);
    assert!(e.contains("g.json is not JSON"), "{e}");
    let e = report_err(&[d.join("missing.json").as_os_str(), "-o".as_ref(), o]);
    assert!(
        e.contains("cannot read") && e.contains("missing.json"),
        "{e}"
    );
    let good = write(d, "good.json", &known_doc().to_string());
    // Refused before any I/O (exit 2).
    let e = report_exit(&[good.as_os_str()], 2);
    assert!(e.contains("nothing to write"), "{e}");
    let badlog = write(
        d,
        "bad.csv",
        "seq,send_ns,recv_ns,rtt_ns,server_ns\n1,2,3,4,\n2,3,oops,5,\n",
    );
    let e = report_err(&[
        good.as_os_str(),
        "--full-log".as_ref(),
        badlog.as_os_str(),
        "-o".as_ref(),
        o,
    ]);
    assert!(e.contains("bad.csv line 3: recv_ns is \"oops\""), "{e}");
    let e = report_exit(
        &[
            good.as_os_str(),
            "--full-log".as_ref(),
            badlog.as_os_str(),
            "--full-log".as_ref(),
            badlog.as_os_str(),
            "-o".as_ref(),
            o,
        ],
        2,
    );
    assert!(e.contains("2 --full-log files for 1 results"), "{e}");
    // An output path that cannot be written is refused before anything is read (exit 2).
    let out2 = rt()
        .arg("report")
        .arg(&good)
        .arg("-o")
        .arg(d.join("no/such/dir/r.html"))
        .output()
        .unwrap();
    assert_eq!(out2.status.code(), Some(2), "{out2:?}");
    let e = String::from_utf8(out2.stderr).unwrap();
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("does not exist"), "{e}");
    let e = report_err(&[
        good.as_os_str(),
        "-o".as_ref(),
        o,
        "--svg".as_ref(),
        "x.svg".as_ref(),
        "--chart".as_ref(),
        "compare".as_ref(),
    ]);
    assert!(e.contains("no compare chart for these results"), "{e}");
    assert!(!out.exists(), "no report written for bad input");
}

#[test]
fn report_command_compares_results() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a = write(d, "direct.json", &known_doc().to_string());
    let mut slower = known_doc();
    for p in slower["percentiles"].as_array_mut().unwrap() {
        let v = p["value_ns"].as_u64().unwrap();
        p["value_ns"] = (v * 3).into();
    }
    let b = write(d, "proxy.json", &slower.to_string());
    let html = d.join("cmp.html");
    let svg = d.join("cmp.svg");
    rt().arg("report")
        .args([&a, &b])
        .args(["--name", "direct", "--name", "through proxy", "-o"])
        .arg(&html)
        .arg("--svg")
        .arg(&svg)
        .args(["--chart", "compare"])
        .assert()
        .success();
    let page = std::fs::read_to_string(&html).unwrap();
    for want in [
        "direct",
        "through proxy",
        "known-host",
        "6.1.0-test",
        "2023-11-14 22:13:20",
        "<svg",
        "RTT by percentile",
        "RTT percentiles side by side",
    ] {
        assert!(page.contains(want), "page lacks {want}");
    }
    assert!(!page.contains("<script") && !page.contains("http://") && !page.contains("https://"));
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg.starts_with("<svg")
            && svg.contains("xmlns=\"http://www.w3.org/2000/svg\"")
            && svg.contains("<style>")
    );
    assert_eq!(svg.matches("<rect class=\"bar c0").count(), 6);
    assert_eq!(svg.matches("<rect class=\"bar c1").count(), 6);
}

#[test]
fn ping_writes_report_and_svg() {
    let srv = server::start(
        &ServerConfig {
            bind: Some([127, 0, 0, 1].into()),
            port: 0,
            tcp: true,
            udp: true,
            ..Default::default()
        },
        |_| {},
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("p.html");
    let svg = dir.path().join("p.svg");
    let log = dir.path().join("p.csv");
    rt().args([
        "ping",
        &srv.udp_addr().unwrap().to_string(),
        "-u",
        "-c",
        "2000",
        "--warmup",
        "50ms",
        "-q",
        "--report",
    ])
    .arg(&html)
    .arg("--svg")
    .arg(&svg)
    .args(["--chart", "rtt-time", "--full-log"])
    .arg(&log)
    .timeout(Duration::from_secs(120))
    .assert()
    .success();
    let page = std::fs::read_to_string(&html).unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert!(page.contains(host.trim()) && page.contains(kernel.trim()));
    assert!(
        page.contains("full log") && page.contains("(2000 rows)"),
        "the full log is drawn"
    );
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("<path class=\"cols c0"));

    // Output checked before any I/O: nothing measured, nothing printed to stdout.
    let out = rt()
        .args([
            "ping",
            &srv.udp_addr().unwrap().to_string(),
            "-u",
            "-c",
            "10",
            "--report",
        ])
        .arg(dir.path().join("nope/r.html"))
        .output()
        .unwrap();
    // Refused before measuring: exit 2.
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
}

// ---------------------------------------------------------------------------------------------------------
// Headless Chromium: the page renders to something that is not blank.

/// Decodes an 8-bit RGB or RGBA PNG (what Chromium writes) into RGB pixels.
fn decode_png(bytes: &[u8]) -> (usize, usize, Vec<[u8; 3]>) {
    use std::io::Read;
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let mut i = 8;
    let (mut w, mut h, mut ctype) = (0usize, 0usize, 0u8);
    let mut idat = Vec::new();
    while i + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap()) as usize;
        let kind = &bytes[i + 4..i + 8];
        let data = &bytes[i + 8..i + 8 + len];
        match kind {
            b"IHDR" => {
                w = u32::from_be_bytes(data[0..4].try_into().unwrap()) as usize;
                h = u32::from_be_bytes(data[4..8].try_into().unwrap()) as usize;
                assert_eq!(data[8], 8, "bit depth");
                ctype = data[9];
                assert_eq!(data[12], 0, "interlaced");
            }
            b"IDAT" => idat.extend_from_slice(data),
            _ => {}
        }
        i += 12 + len;
    }
    let bpp = match ctype {
        2 => 3,
        6 => 4,
        other => panic!("colour type {other}"),
    };
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..])
        .read_to_end(&mut raw)
        .unwrap();
    let stride = w * bpp;
    let mut prev = vec![0u8; stride];
    let mut px = Vec::with_capacity(w * h);
    for row in 0..h {
        let f = raw[row * (stride + 1)];
        let mut cur = raw[row * (stride + 1) + 1..(row + 1) * (stride + 1)].to_vec();
        for x in 0..stride {
            let a = if x >= bpp { cur[x - bpp] as i32 } else { 0 };
            let b = prev[x] as i32;
            let c = if x >= bpp { prev[x - bpp] as i32 } else { 0 };
            let add = match f {
                0 => 0,
                1 => a,
                2 => b,
                3 => (a + b) / 2,
                4 => {
                    let p = a + b - c;
                    let (pa, pb, pc) = ((p - a).abs(), (p - b).abs(), (p - c).abs());
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                other => panic!("filter {other}"),
            };
            cur[x] = cur[x].wrapping_add(add as u8);
        }
        for x in 0..w {
            px.push([cur[x * bpp], cur[x * bpp + 1], cur[x * bpp + 2]]);
        }
        prev = cur;
    }
    (w, h, px)
}

#[test]
fn chromium_renders_a_report_that_is_not_blank() {
    if !common::have("chromium") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.csv");
    let (doc, _) = real_run(3000, &log);
    let json = dir.path().join("run.json");
    std::fs::write(&json, roundtrip::report::json::to_bytes(&doc)).unwrap();
    let html = dir.path().join("run.html");
    rt().arg("report")
        .arg(&json)
        .arg("--full-log")
        .arg(&log)
        .arg("-o")
        .arg(&html)
        .assert()
        .success();
    let png = dir.path().join("shot.png");
    let profile = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("timeout")
        .args([
            "120",
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg("--window-size=1200,2000")
        .arg(format!("file://{}", html.display()))
        .output()
        .unwrap();
    assert!(
        png.exists(),
        "chromium wrote no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (w, h, px) = decode_png(&std::fs::read(&png).unwrap());
    assert_eq!((w, h), (1200, 2000));
    let bg = px[0];
    let differ = px.iter().filter(|p| **p != bg).count();
    assert!(
        differ > w * h / 50,
        "only {differ} pixels differ from the background {bg:?}"
    );
    // The first series colour (#1f77b4 light, #5eaaf0 dark) is on the page: the data was drawn.
    let near = |p: &[u8; 3], c: [u8; 3]| {
        p.iter()
            .zip(c)
            .all(|(a, b)| (*a as i32 - b as i32).abs() < 40)
    };
    let series = px
        .iter()
        .filter(|p| near(p, [0x1f, 0x77, 0xb4]) || near(p, [0x5e, 0xaa, 0xf0]))
        .count();
    assert!(series > 2000, "only {series} pixels in the series colour");
    // Text was drawn: many distinct grey levels from anti-aliased glyphs.
    let mut colours: Vec<[u8; 3]> = px.clone();
    colours.sort_unstable();
    colours.dedup();
    assert!(colours.len() > 50, "only {} colours", colours.len());
}

#[test]
fn a_result_with_no_samples_still_draws() {
    let mut d = known_doc();
    d["intervals"] = serde_json::json!([]);
    d["histogram"] = serde_json::json!([]);
    d["percentiles"] = serde_json::json!([]);
    let run = Run {
        label: "empty".into(),
        doc: load::from_value("empty.json", d).unwrap(),
        full_log: None,
        phase_log: None,
    };
    let page = charts::page("t", &[run], &Options::default()).unwrap();
    for id in ["rtt-time", "distribution", "percentiles"] {
        let svg = figure_svg(&page, id);
        assert!(svg.ends_with("</svg>") && !svg.contains("NaN") && !svg.contains("inf"));
    }
}

#[test]
fn a_real_sweep_is_drawn_as_latency_against_rate() {
    let srv = server::start(
        &ServerConfig {
            bind: Some([127, 0, 0, 1].into()),
            port: 0,
            tcp: true,
            udp: true,
            ..Default::default()
        },
        |_| {},
    )
    .unwrap();
    let out = rt()
        .args([
            "sweep",
            &srv.tcp_addr().unwrap().to_string(),
            "--sizes",
            "64",
            "--rates",
            "500,1000,2000",
        ])
        .args(["-t", "300ms", "--warmup", "50ms", "--json"])
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = load::parse("sweep.json", &out.stdout).unwrap();
    let cells: roundtrip::doc::sweep::SweepDoc = doc.typed().unwrap();
    let run = Run {
        label: "sweep".into(),
        doc,
        full_log: None,
        phase_log: None,
    };
    let page = charts::page("t", &[run], &Options::default()).unwrap();
    let svg = figure_svg(&page, "sweep");
    let x = ReadAxis::new(&ticks(&svg, "x"), count_label, true);
    let y = ReadAxis::new(
        &ticks(&svg, "y"),
        duration_label,
        is_log(&svg, "latency from scheduled send"),
    );
    let d = paths(&svg, "line c0\"");
    assert_eq!(d.len(), 1, "one p50 line for the one size");
    let pts: Vec<(f64, f64)> = path_cmds(d[0])
        .into_iter()
        .map(|(_, v)| (v[0], v[1]))
        .collect();
    let mut want: Vec<(f64, f64)> = cells
        .cells
        .iter()
        .filter(|c| c.latency_from_scheduled.count > 0)
        .map(|c| (c.rate_per_s, c.latency_from_scheduled.p50_ns as f64))
        .collect();
    want.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(pts.len(), want.len());
    for ((px, py), (wx, wy)) in pts.iter().zip(&want) {
        assert!(
            (x.value(*px) - wx).abs() <= x.tolerance(*px),
            "rate {} vs {wx}",
            x.value(*px)
        );
        assert!(
            (y.value(*py) - wy).abs() <= y.tolerance(*py),
            "p50 {} vs {wy}",
            y.value(*py)
        );
    }
}

// ---------------------------------------------------------------------------------------------------------
// The other kinds: each chart read back through its labelled axes gives the document's values.

fn envelope(kind: &str, body: serde_json::Value) -> serde_json::Value {
    let mut v = serde_json::json!({
        "format": "roundtrip", "format_version": 1, "kind": kind,
        "environment": {"roundtrip_version": "0.1.0", "hostname": "known-host", "kernel": "6.1.0-test"},
        "started_unix_s": 1_700_000_000.0,
    });
    for (k, x) in body.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

fn page_of(name: &str, doc: serde_json::Value) -> roundtrip::report::html::Page {
    let run = Run {
        label: name.into(),
        doc: load::from_value(&format!("{name}.json"), doc).unwrap(),
        full_log: None,
        phase_log: None,
    };
    charts::page("t", &[run], &Options::default()).unwrap()
}

/// A latency summary whose percentiles are the given values (count 100).
fn summary(min: u64, p50: u64, p99: u64, max: u64) -> serde_json::Value {
    serde_json::json!({"count": 100, "min_ns": min, "mean_ns": p50 as f64, "stddev_ns": 1.0, "p50_ns": p50,
        "p90_ns": (p50 + p99) / 2, "p99_ns": p99, "p99_9_ns": max, "p99_99_ns": max, "max_ns": max})
}

fn empty_summary() -> serde_json::Value {
    serde_json::json!({"count": 0, "min_ns": 0, "mean_ns": 0.0, "stddev_ns": 0.0, "p50_ns": 0, "p90_ns": 0,
        "p99_ns": 0, "p99_9_ns": 0, "p99_99_ns": 0, "max_ns": 0})
}

/// Every bar: (series name, x, y, width, height).
fn bar_rects(svg: &str) -> Vec<(String, f64, f64, f64, f64)> {
    svg.match_indices("<rect class=\"bar ")
        .map(|(i, _)| {
            let tag = &svg[i..i + svg[i..].find('>').unwrap()];
            let f = |n: &str| attr(tag, n).unwrap().parse::<f64>().unwrap();
            (
                attr(tag, "data-name").unwrap().to_string(),
                f("x"),
                f("y"),
                f("width"),
                f("height"),
            )
        })
        .collect()
}

/// Category labels down the left of a horizontal bar chart, top to bottom.
fn hbar_categories(svg: &str) -> Vec<String> {
    svg.match_indices("<g class=\"tick y cat\">")
        .map(|(i, _)| {
            let g = &svg[i..i + svg[i..].find("</g>").unwrap()];
            let t = g.rfind("</text>").unwrap();
            g[g[..t].rfind('>').unwrap() + 1..t].to_string()
        })
        .collect()
}

/// Checks a horizontal bar chart: categories top to bottom as `cats`, and for each series name the bar ends
/// read back through the value axis to `want[series][category]` (None: no bar).
fn check_hbars(svg: &str, log_word: &str, cats: &[&str], want: &[(&str, Vec<Option<f64>>)]) {
    assert_eq!(hbar_categories(svg), cats);
    let x = ReadAxis::new(&ticks(svg, "x"), duration_label, is_log(svg, log_word));
    let rects = bar_rects(svg);
    let (_, (pt, pb)) = ((), plot_y_of(svg));
    let step = (pb - pt) / cats.len() as f64;
    for (name, values) in want {
        let mine: Vec<_> = rects.iter().filter(|r| r.0 == *name).collect();
        assert_eq!(
            mine.len(),
            values.iter().filter(|v| v.is_some()).count(),
            "{name}"
        );
        let mut k = 0;
        for (ci, v) in values.iter().enumerate() {
            let Some(v) = v else { continue };
            let r = mine[k];
            k += 1;
            // The bar sits in its category's row.
            let row = ((r.2 - pt) / step).floor() as usize;
            assert_eq!(row, ci, "{name} bar of {} in row {row}", cats[ci]);
            let end = r.1 + r.3;
            let got = x.value(end);
            let tol = (x.value(end + 0.12) - x.value(end - 0.12)).abs();
            assert!((got - v).abs() <= tol, "{name} {}: {got} vs {v}", cats[ci]);
        }
    }
}

/// Top and bottom of the plot area, from the axis line `M left top V bottom H right`.
fn plot_y_of(svg: &str) -> (f64, f64) {
    let d = paths(svg, "axis\"")[0];
    let c = path_cmds(d);
    (c[0].1[1], c[1].1[0])
}

fn compare_doc() -> serde_json::Value {
    let row = |label: &str, s: serde_json::Value| {
        serde_json::json!({"kind": "icmp", "label": label, "size_bytes": null, "attempts": 100, "summary": s,
            "error": null, "interpretation": "x"})
    };
    envelope(
        "compare",
        serde_json::json!({
            "target": null, "address": "127.0.0.1:1", "embedded_server": true, "dns_ns": null, "count": 100,
            "interval_ns": 20_000_000u64, "timeout_ns": 1_000_000_000u64, "size_bytes": 250,
            "rows": [
                row("ICMP echo", summary(23_000, 31_000, 270_000, 400_000)),
                row("TCP handshake", summary(41_000, 57_000, 730_000, 900_000)),
                row("roundtrip ping 250 B", summary(37_000, 66_000, 3_300_000, 4_000_000)),
                row("kernel srtt (TCP_INFO)", empty_summary()),
            ],
            "tcp_info": null, "conclusion": "known", "cancelled": false
        }),
    )
}

#[test]
fn compare_bars_read_back_to_the_rows() {
    let page = page_of("cmp", compare_doc());
    let svg = figure_svg(&page, "bars");
    let cats = [
        "ICMP echo",
        "TCP handshake",
        "roundtrip ping 250 B",
        "kernel srtt (TCP_INFO)",
    ];
    check_hbars(
        &svg,
        "latency",
        &cats,
        &[
            ("min", vec![Some(23e3), Some(41e3), Some(37e3), None]),
            ("p50", vec![Some(31e3), Some(57e3), Some(66e3), None]),
            ("p99", vec![Some(270e3), Some(730e3), Some(3.3e6), None]),
        ],
    );
    // Values spanning two decades get a log axis, so the 23us bar and the 3.3ms bar both show.
    assert!(is_log(&svg, "latency"));
}

fn db_doc() -> serde_json::Value {
    envelope(
        "db",
        serde_json::json!({
            "elapsed_s": 1.0,
            "settings": {"target": "redis://127.0.0.1:6379", "scheme": "redis", "address": "127.0.0.1:6379",
                "connects": 3, "count": 100, "interval_ns": null, "query": "PING", "rows": 0, "row_bytes": 0,
                "timeout_ns": 1_000_000_000u64, "ssl_mode": "disable"},
            "server_version": "7", "connects_ok": 3,
            "phases": {"dns": empty_summary(), "tcp_handshake": summary(31_000, 45_000, 120_000, 130_000),
                "tls": empty_summary(), "startup": summary(52_000, 70_000, 90_000, 95_000),
                "first_query": summary(61_000, 75_000, 150_000, 160_000)},
            "ping": summary(27_000, 33_000, 71_000, 80_000),
            "query": summary(28_000, 36_000, 88_000, 99_000),
            "fetch": {"summary": empty_summary(), "rows": 0, "bytes_total": 0, "per_row_ns": null,
                "throughput_bytes_per_s": null},
            "attribution": null, "notes": [], "error": null, "cancelled": false
        }),
    )
}

#[test]
fn db_phase_bars_read_back_to_the_phases() {
    let page = page_of("db", db_doc());
    let svg = figure_svg(&page, "bars");
    // Phases nothing was measured in (dns of a literal address, tls off, no fetch) are left out.
    let cats = ["tcp handshake", "startup", "first query", "ping", "query"];
    check_hbars(
        &svg,
        "latency",
        &cats,
        &[
            (
                "min",
                vec![Some(31e3), Some(52e3), Some(61e3), Some(27e3), Some(28e3)],
            ),
            (
                "p50",
                vec![Some(45e3), Some(70e3), Some(75e3), Some(33e3), Some(36e3)],
            ),
            (
                "p99",
                vec![Some(120e3), Some(90e3), Some(150e3), Some(71e3), Some(88e3)],
            ),
        ],
    );
    // The page carries the run's settings.
    let html = roundtrip::report::html::render(&page);
    assert!(html.contains("redis://127.0.0.1:6379") && html.contains("PING"));
}

fn rpc_doc() -> serde_json::Value {
    let op = |op: &str, s: serde_json::Value| serde_json::json!({"proto": "nfs", "op": op, "errors": 0, "latency": s});
    envelope(
        "capture-rpc",
        serde_json::json!({
            "capture": {"file": "known.pcap", "format": "pcap", "gzip": false, "file_bytes": 1000,
                "packets_read": 10, "packets_matched": 10, "packets_not_ip": 0, "not_ip_example": null,
                "link_types": ["ethernet"], "warning": null, "warning_offset": null},
            "forced_proto": null, "counts": {},
            "report": {"ops": [
                op("GETATTR", serde_json::json!({"count": 900, "min_ns": 90_000, "mean_ns": 1.0e5,
                    "stddev_ns": 1.0, "p50_ns": 110_000, "p90_ns": 130_000, "p99_ns": 470_000,
                    "p99_9_ns": 9_000_000, "p99_99_ns": 9_000_000, "max_ns": 23_000_000})),
                op("WRITE", summary(300_000, 650_000, 2_900_000, 7_100_000)),
                op("READDIRPLUS", serde_json::json!({"count": 3, "min_ns": 170_000, "mean_ns": 1.0e5,
                    "stddev_ns": 1.0, "p50_ns": 170_000, "p90_ns": 180_000, "p99_ns": 180_000,
                    "p99_9_ns": 180_000, "p99_99_ns": 180_000, "max_ns": 180_000})),
            ], "slowest": [], "anomalies": [], "intervals": [], "connections": [], "transactions": 1003}
        }),
    )
}

#[test]
fn rpc_operation_bars_read_back_to_the_operations() {
    let page = page_of("rpc", rpc_doc());
    let svg = figure_svg(&page, "ops");
    // Busiest first; log axis so the 23 ms slowest GETATTR shows beside 110 us medians. The document is an
    // older version's ("latency", no first-byte times): it still draws, without the first-byte bars.
    check_hbars(
        &svg,
        "latency",
        &["GETATTR", "WRITE", "READDIRPLUS"],
        &[
            ("last p50", vec![Some(110e3), Some(650e3), Some(170e3)]),
            ("last p99", vec![Some(470e3), Some(2.9e6), Some(180e3)]),
            ("last max", vec![Some(23e6), Some(7.1e6), Some(180e3)]),
        ],
    );
    assert!(is_log(&svg, "latency"));
}

fn bytes_label(l: &str) -> f64 {
    let (num, mult) = if let Some(n) = l.strip_suffix("GB") {
        (n, 1e9)
    } else if let Some(n) = l.strip_suffix("MB") {
        (n, 1e6)
    } else if let Some(n) = l.strip_suffix("kB") {
        (n, 1e3)
    } else {
        (l.strip_suffix('B').unwrap_or(l), 1.0)
    };
    num.parse::<f64>().unwrap() * mult
}

fn rate_label(l: &str) -> f64 {
    let n = l.strip_suffix("bit/s").unwrap_or_else(|| panic!("{l}"));
    let (num, mult) = match n.chars().last() {
        Some('G') => (&n[..n.len() - 1], 1e9),
        Some('M') => (&n[..n.len() - 1], 1e6),
        Some('k') => (&n[..n.len() - 1], 1e3),
        _ => (n, 1.0),
    };
    num.parse::<f64>().unwrap() * mult
}

fn flows_doc() -> serde_json::Value {
    let dir = |payload: u64| {
        serde_json::json!({"packets": 10, "wire_bytes": 1, "payload_bytes": payload, "data_segments": 1,
            "retransmissions": 0, "retransmitted_bytes": 0, "out_of_order": 0, "dup_acks": 0, "zero_windows": 0,
            "acks": 1, "segments_per_ack": null, "rtt": empty_summary(), "in_flight_max_bytes": 37_000,
            "in_flight_p50_bytes": 1, "window_min_bytes": 1, "window_max_bytes": 131_000, "mss": null,
            "wscale": null, "receiver_limited_segments": 0, "sender_limited_segments": 0,
            "app_limited_segments": 0})
    };
    envelope(
        "capture-flows",
        serde_json::json!({
            "capture": {"file": "known.pcap"},
            "counters": {"tcp_packets": 20, "max_open_flows": 1, "idle_evictions": 0},
            "flows": [{"id": 1, "client": "10.0.0.1:40000", "server": "10.0.0.2:5201", "handshake_seen": true,
                "first_ts_ns": 0, "last_ts_ns": 3_000_000_000i64, "duration_s": 3.0, "handshake": null,
                "state": "closed", "client_to_server": dir(9_000_000), "server_to_client": dir(10),
                "diagnosis": "known"}],
            "window_series": {"flow_id": 1, "client": "10.0.0.1:40000", "server": "10.0.0.2:5201",
                "direction": "client_to_server", "chosen": "only", "bucket_s": 0.5, "buckets": [
                {"start_s": 0.0, "in_flight_min_bytes": 1_400, "in_flight_max_bytes": 13_000,
                 "window_min_bytes": 29_000, "window_max_bytes": 64_000},
                {"start_s": 0.5, "in_flight_min_bytes": null, "in_flight_max_bytes": null,
                 "window_min_bytes": 64_000, "window_max_bytes": 64_000},
                {"start_s": 1.5, "in_flight_min_bytes": 0, "in_flight_max_bytes": 37_000,
                 "window_min_bytes": 17_000, "window_max_bytes": 131_000},
                {"start_s": 2.5, "in_flight_min_bytes": 2_900, "in_flight_max_bytes": 2_900,
                 "window_min_bytes": null, "window_max_bytes": null}
            ]}
        }),
    )
}

#[test]
fn flow_in_flight_and_window_read_back_to_the_series() {
    let page = page_of("flows", flows_doc());
    let svg = figure_svg(&page, "flow");
    let x = ReadAxis::new(&ticks(&svg, "x"), duration_label, false);
    let y = ReadAxis::new(&ticks(&svg, "y"), bytes_label, false);
    let close = |got: f64, want: f64, tol: f64, what: &str| {
        assert!((got - want).abs() <= tol, "{what}: {got} vs {want}")
    };
    // In flight: one stroke per bucket with data, from its min to its max, at the bucket's middle.
    let d = paths(&svg, "cols c0");
    assert_eq!(d.len(), 1);
    let cmds = path_cmds(d[0]);
    let want = [
        (0.25, 1_400.0, 13_000.0),
        (1.75, 0.0, 37_000.0),
        (2.75, 2_900.0, 2_900.0),
    ];
    assert_eq!(cmds.len(), 2 * want.len(), "{}", d[0]);
    for (k, (t, lo, hi)) in want.iter().enumerate() {
        let (m, v) = (&cmds[2 * k], &cmds[2 * k + 1]);
        assert_eq!((m.0, v.0), ('M', 'V'));
        close(x.value(m.1[0]) / 1e9, *t, x.tolerance(m.1[0]) / 1e9, "time");
        close(y.value(m.1[1]), *lo, y.tolerance(m.1[1]), "in flight min");
        close(y.value(v.1[0]), *hi, y.tolerance(v.1[0]), "in flight max");
    }
    // The window: a band from min to max (max forward, then min backward), each bucket's range held until
    // the next bucket with a reading (the window only changes when a packet says so), the last one to the
    // end of the series.
    let d = paths(&svg, "band c1");
    let pts: Vec<(f64, f64)> = path_cmds(d[0])
        .into_iter()
        .filter(|c| c.0 != 'Z')
        .map(|(_, v)| (v[0], v[1]))
        .collect();
    let want = [
        (0.0, 64_000.0),
        (0.5, 64_000.0),
        (0.5, 64_000.0),
        (1.5, 64_000.0),
        (1.5, 131_000.0),
        (3.0, 131_000.0),
        (3.0, 17_000.0),
        (1.5, 17_000.0),
        (1.5, 64_000.0),
        (0.5, 64_000.0),
        (0.5, 29_000.0),
        (0.0, 29_000.0),
    ];
    assert_eq!(pts.len(), want.len());
    for ((px, py), (t, v)) in pts.iter().zip(want) {
        close(x.value(*px) / 1e9, t, x.tolerance(*px) / 1e9, "window time");
        close(y.value(*py), v, y.tolerance(*py), "window");
    }
}

fn throughput_doc() -> serde_json::Value {
    let rate = |end: f64, len: f64, mbit: f64| {
        serde_json::json!({"end_s": end, "length_s": len, "messages": 1000, "bytes": 1,
            "messages_per_s": 1.0, "mb_per_s": mbit / 8.0, "mbit_per_s": mbit})
    };
    let run = |size: u64, total: f64, iv: Vec<serde_json::Value>| {
        serde_json::json!({"size_bytes": size, "total": rate(2.0, 2.0, total), "intervals": iv,
            "streams": [], "received_messages": null, "received_bytes": null, "loss": null,
            "receiver_note": null, "rtt": null, "error": null})
    };
    envelope(
        "throughput",
        serde_json::json!({
            "settings": {"target": "h", "address": "10.0.0.1:11111", "transport": "tcp",
                "sizes_bytes": [64, 8000], "streams": 1, "duration_s": 2.0, "direction": "client_to_server", "sync": false},
            "peer": "roundtrip", "cancelled": false,
            "runs": [
                run(64, 230.0, vec![rate(1.0, 1.0, 210.0), rate(2.0, 1.0, 250.0)]),
                run(8000, 7300.0, vec![rate(1.0, 1.0, 7100.0), rate(2.0, 1.0, 7500.0)]),
            ]
        }),
    )
}

#[test]
fn throughput_levels_and_sizes_read_back() {
    let page = page_of("tp", throughput_doc());
    let svg = figure_svg(&page, "throughput-time");
    let y = ReadAxis::new(&ticks(&svg, "y"), rate_label, false);
    for (class, want) in [("step c0", [210e6, 250e6]), ("step c1", [7100e6, 7500e6])] {
        let d = paths(&svg, class);
        let cmds = path_cmds(d[0]);
        let mut levels = vec![cmds[0].1[1]];
        levels.extend(cmds.iter().filter(|c| c.0 == 'V').map(|c| c.1[0]));
        // Start level, change to the second, and the closing level.
        assert_eq!(levels.len(), 3, "{}", d[0]);
        for (px, w) in levels.iter().zip([want[0], want[1], want[1]]) {
            assert!((y.value(*px) - w).abs() <= y.tolerance(*px), "{class}");
        }
    }
    let svg = figure_svg(&page, "throughput-size");
    let x = ReadAxis::new(&ticks(&svg, "x"), bytes_label, true);
    let y = ReadAxis::new(&ticks(&svg, "y"), rate_label, false);
    let d = paths(&svg, "line c0");
    let pts: Vec<(f64, f64)> = path_cmds(d[0])
        .into_iter()
        .map(|(_, v)| (v[0], v[1]))
        .collect();
    for ((px, py), (s, r)) in pts.iter().zip([(64.0, 230e6), (8000.0, 7300e6)]) {
        assert!((x.value(*px) - s).abs() <= x.tolerance(*px));
        assert!((y.value(*py) - r).abs() <= y.tolerance(*py));
    }
}

#[test]
fn connect_samples_read_back_over_time_and_by_percentile() {
    // 40 handshakes, one slow one; a closed attempt and a timeout are not handshake samples.
    let mut attempts = Vec::new();
    let mut rtts = Vec::new();
    for i in 0..40u64 {
        let t = if i == 17 {
            9_700_000
        } else {
            41_000 + i * 1_300
        };
        rtts.push(t);
        attempts.push(
            serde_json::json!({"seq": i + 1, "state": "open", "time_ns": t,
            "at_ns": i * 50_000_000, "detail": null}),
        );
    }
    attempts.push(
        serde_json::json!({"seq": 41, "state": "closed", "time_ns": 20_000,
        "at_ns": 2_000_000_000u64, "detail": "RST"}),
    );
    attempts.push(
        serde_json::json!({"seq": 42, "state": "filtered", "time_ns": null,
        "at_ns": 2_050_000_000u64, "detail": null}),
    );
    let doc = envelope(
        "connect",
        serde_json::json!({"target": "h:1", "address": "10.0.0.1:1", "mode": "kernel", "count": 42,
            "interval_ns": 50_000_000u64, "timeout_ns": 1_000_000_000u64, "dns_ns": null, "verdict": "open",
            "counts": {"open": 40, "closed": 1, "filtered": 1, "unreachable": 0},
            "handshake": summary(41_000, 66_000, 9_700_000, 9_700_000),
            "refused": summary(20_000, 20_000, 20_000, 20_000),
            "attempts": attempts, "error": null, "cancelled": false}),
    );
    let page = page_of("connect", doc);
    let svg = figure_svg(&page, "rtt-time");
    let y = ReadAxis::new(
        &ticks(&svg, "y"),
        duration_label,
        is_log(&svg, "handshake time"),
    );
    let x = ReadAxis::new(&ticks(&svg, "x"), duration_label, false);
    let d = paths(&svg, "cols c0");
    let cmds = path_cmds(d[0]);
    // One stroke per sample here (they are 50 ms apart), each a dot at its value.
    assert_eq!(cmds.len(), 2 * rtts.len());
    for (k, want) in rtts.iter().enumerate() {
        let (m, v) = (&cmds[2 * k], &cmds[2 * k + 1]);
        assert!((y.value(m.1[1]) - *want as f64).abs() <= y.tolerance(m.1[1]));
        assert!((y.value(v.1[0]) - *want as f64).abs() <= y.tolerance(v.1[0]));
        let t = k as f64 * 0.05e9;
        assert!(
            (x.value(m.1[0]) - t).abs() <= 0.01e9,
            "sample {k} at {}",
            x.value(m.1[0])
        );
    }
    // The percentile curve ends at the slowest handshake.
    let svg = figure_svg(&page, "percentiles");
    let y = ReadAxis::new(
        &ticks(&svg, "y"),
        duration_label,
        is_log(&svg, "handshake time"),
    );
    let d = paths(&svg, "line c0");
    let last = path_cmds(d[0]).last().unwrap().1[1];
    assert!((y.value(last) - 9.7e6).abs() <= y.tolerance(last));
    // The distribution counts every handshake once.
    let svg = figure_svg(&page, "distribution");
    let y = ReadAxis::new(&ticks(&svg, "y"), count_label, false);
    let total: f64 = path_cmds(paths(&svg, "hist c0")[0])
        .windows(2)
        .filter_map(|w| match (&w[0], &w[1]) {
            (('V', top), ('H', _)) => Some(y.value(top[0]).round()),
            _ => None,
        })
        .sum();
    assert_eq!(total, 40.0);
}

#[test]
fn load_bars_read_back_to_the_summaries() {
    let doc = envelope(
        "load",
        serde_json::json!({
            "settings": {"target": "h", "address": "10.0.0.1:11111", "transport": "udp", "reply_every": 100,
                "duration_s": 10.0, "warmup_s": 1.0},
            "peer": "roundtrip",
            "summary": {"size_bytes": 64, "rate_per_s": 10000.0, "scheduled": 100000, "sent": 100000,
                "achieved_rate_per_s": 10000.0, "rate_held": true, "requested": 1000, "answered": 1000,
                "unanswered": 0, "elapsed_s": 10.0,
                "latency_from_scheduled": summary(33_000, 61_000, 2_700_000, 8_300_000),
                "latency_from_sent": summary(31_000, 52_000, 330_000, 1_900_000),
                "schedule_lag": summary(1_000, 3_000, 2_400_000, 8_000_000), "error": null},
            "cancelled": false
        }),
    );
    let page = page_of("load", doc);
    // An older document without histograms still gets the bars, and says what it lacks.
    assert!(
        page.sections[0]
            .notes
            .iter()
            .any(|n| n.contains("no latency histogram"))
    );
    let svg = figure_svg(&page, "bars");
    let y = ReadAxis::new(&ticks(&svg, "y"), duration_label, is_log(&svg, "latency"));
    let rects = bar_rects(&svg);
    for (name, want) in [
        (
            "from scheduled send",
            [33e3, 61e3, 1_380_500.0, 2.7e6, 8.3e6, 8.3e6],
        ),
        (
            "from actual send",
            [31e3, 52e3, 191_000.0, 330e3, 1.9e6, 1.9e6],
        ),
    ] {
        let mine: Vec<_> = rects.iter().filter(|r| r.0 == name).collect();
        assert_eq!(mine.len(), 6);
        for (r, w) in mine.iter().zip(want) {
            // Vertical bars grow up from the axis: their top is the value.
            let top = r.2;
            let tol = (y.value(top + 0.12) - y.value(top - 0.12)).abs();
            assert!(
                (y.value(top) - w).abs() <= tol.max(w * 1e-3),
                "{name}: {} vs {w}",
                y.value(top)
            );
        }
    }
}

#[test]
fn capture_stats_levels_read_back() {
    let row = |start: f64, bps: f64| {
        serde_json::json!({"start_s": start, "direction": "all", "packets": 10, "bytes": 1,
            "packets_per_s": 10.0, "bits_per_s": bps, "size_min": 60, "size_mean": 60.0, "size_max": 60,
            "size_stddev": 0.0})
    };
    let doc = envelope(
        "capture-stats",
        serde_json::json!({"capture": {"file": "k.pcap"}, "interval_s": 0.5, "first_ts_ns": 0,
            "last_ts_ns": 1_500_000_000i64,
            "rows": [row(0.0, 45_300.0), row(0.5, 2_100_000.0), row(1.0, 730_000.0)],
            "total": row(0.0, 900_000.0)}),
    );
    let page = page_of("stats", doc);
    let svg = figure_svg(&page, "traffic");
    let y = ReadAxis::new(&ticks(&svg, "y"), rate_label, false);
    let x = ReadAxis::new(&ticks(&svg, "x"), duration_label, false);
    let cmds = path_cmds(paths(&svg, "step c0")[0]);
    let mut levels = vec![cmds[0].1[1]];
    levels.extend(cmds.iter().filter(|c| c.0 == 'V').map(|c| c.1[0]));
    for (px, w) in levels
        .iter()
        .zip([45_300.0, 2_100_000.0, 730_000.0, 730_000.0])
    {
        assert!(
            (y.value(*px) - w).abs() <= y.tolerance(*px),
            "{} vs {w}",
            y.value(*px)
        );
    }
    let last_h = cmds.iter().rev().find(|c| c.0 == 'H').unwrap().1[0];
    assert!((x.value(last_h) - 1.5e9).abs() <= x.tolerance(last_h));
}

// ---------------------------------------------------------------------------------------------------------
// --report on the other commands.

/// Runs `roundtrip ARGS... --report R.html --svg R.svg [--chart CHART]` and returns (page, svg).
fn run_with_report(args: &[&str], chart: Option<&str>) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r.html");
    let svg = dir.path().join("r.svg");
    let mut cmd = rt();
    cmd.args(args)
        .arg("--report")
        .arg(&html)
        .arg("--svg")
        .arg(&svg);
    if let Some(c) = chart {
        cmd.args(["--chart", c]);
    }
    let out = cmd.timeout(Duration::from_secs(180)).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(!page.contains("<script") && page.contains("prefers-color-scheme: dark"));
    (page, std::fs::read_to_string(&svg).unwrap())
}

#[test]
fn compare_writes_a_report_of_bars() {
    let (page, svg) = run_with_report(&["compare", "-c", "10", "-i", "5ms", "--no-raw"], None);
    assert!(page.contains("Round trip per probe") && page.contains("TCP handshake"));
    // --svg defaults to the first chart of a result without a percentile curve.
    assert!(svg.contains("Round trip per probe") && svg.contains("<rect class=\"bar c0"));
    let cats = hbar_categories(&svg);
    assert!(cats.iter().any(|c| c == "TCP handshake"), "{cats:?}");
}

#[test]
fn db_writes_a_report_of_phases() {
    if !common::service_up(6379, "Redis") {
        return;
    }
    let (page, svg) = run_with_report(&["db", "redis://127.0.0.1:6379", "-c", "50"], None);
    assert!(page.contains("Time per phase") && page.contains("127.0.0.1:6379"));
    let cats = hbar_categories(&svg);
    for want in ["tcp handshake", "startup", "ping"] {
        assert!(cats.iter().any(|c| c == want), "{cats:?}");
    }
    // With --full-log every timed operation is drawn too, and the slowest ping in the log ends its curve.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("db.csv");
    let (page, svg) = run_with_report(
        &[
            "db",
            "redis://127.0.0.1:6379",
            "-c",
            "50",
            "--full-log",
            log.to_str().unwrap(),
        ],
        Some("percentiles"),
    );
    assert!(page.contains("Every operation over time") && page.contains("db.csv"));
    let text = std::fs::read_to_string(&log).unwrap();
    let slowest_ping = text
        .lines()
        .filter(|l| l.starts_with("ping,"))
        .map(|l| l.split(',').nth(3).unwrap().parse::<f64>().unwrap())
        .fold(0.0, f64::max);
    let y = ReadAxis::new(&ticks(&svg, "y"), duration_label, is_log(&svg, "duration"));
    let names: Vec<&str> = svg
        .match_indices("<path class=\"line ")
        .map(|(i, _)| attr(&svg[i..], "data-name").unwrap())
        .collect();
    let k = names.iter().position(|n| *n == "ping").unwrap();
    let end = path_cmds(paths(&svg, "line ")[k]).last().unwrap().1[1];
    assert!(
        (y.value(end) - slowest_ping).abs() <= y.tolerance(end),
        "{} vs {slowest_ping}",
        y.value(end)
    );
}

#[test]
fn capture_rpc_writes_a_report_of_operations() {
    let Some(dir) = common::captures_dir() else {
        return;
    };
    let file = dir.join("zeek/nfs_nfs_write.pcap");
    let f = file.to_str().unwrap();
    let (page, svg) = run_with_report(&["capture", "rpc", f], Some("ops"));
    assert!(page.contains("Latency per operation") && page.contains("nfs_nfs_write.pcap"));
    // The bars are the JSON document's numbers.
    let out = rt().args(["capture", "rpc", f, "--json"]).output().unwrap();
    let doc = load::parse("rpc.json", &out.stdout).unwrap();
    let ops: roundtrip::doc::rpc::RpcDoc = doc.typed().unwrap();
    let chosen = roundtrip::report::charts::rpc::chart_ops(std::slice::from_ref(&ops));
    let cats: Vec<&str> = chosen.iter().map(|(_, _, n)| n.as_str()).collect();
    let pick = |f: fn(&roundtrip::capture::rpc::stats::OpRow) -> f64| -> Vec<Option<f64>> {
        chosen
            .iter()
            .map(|(p, o, _)| {
                ops.report
                    .ops
                    .iter()
                    .find(|x| x.proto.name() == p && &x.op == o)
                    .map(f)
            })
            .collect()
    };
    let last = pick(|x| x.last_byte.p50_ns as f64);
    let first = pick(|x| x.first_byte.p50_ns as f64);
    assert!(!cats.is_empty());
    check_hbars(
        &svg,
        "latency",
        &cats,
        &[("first p50", first), ("last p50", last)],
    );
}

#[test]
fn capture_flows_writes_in_flight_against_the_window() {
    let Some(dir) = common::captures_dir() else {
        return;
    };
    let file = dir.join("zeek/nfs_nfs_write.pcap");
    let f = file.to_str().unwrap();
    let (page, svg) = run_with_report(&["capture", "flows", f], Some("flow"));
    assert!(page.contains("Bytes in flight vs advertised window"));
    // The series in the JSON document is what is drawn.
    let out = rt()
        .args(["capture", "flows", f, "--json"])
        .output()
        .unwrap();
    let doc = load::parse("flows.json", &out.stdout).unwrap();
    let flows: roundtrip::doc::capture_flows::FlowsDoc = doc.typed().unwrap();
    let s = flows.window_series.expect("a series");
    assert!(s.buckets.len() <= roundtrip::capture::FLOW_SERIES_BUCKETS);
    // The largest connection is drawn.
    let biggest = flows
        .flows
        .iter()
        .max_by_key(|f| f.client_to_server.payload_bytes + f.server_to_client.payload_bytes)
        .unwrap();
    assert_eq!(s.flow_id, biggest.id);
    let y = ReadAxis::new(&ticks(&svg, "y"), bytes_label, false);
    let cmds = path_cmds(paths(&svg, "cols c0")[0]);
    let want: Vec<(f64, f64)> = s
        .buckets
        .iter()
        .filter_map(|b| Some((b.in_flight_min_bytes? as f64, b.in_flight_max_bytes? as f64)))
        .collect();
    assert!(!want.is_empty());
    assert_eq!(cmds.len(), 2 * want.len());
    for (k, (lo, hi)) in want.iter().enumerate() {
        let (m, v) = (&cmds[2 * k], &cmds[2 * k + 1]);
        assert!(
            (y.value(m.1[1]) - lo).abs() <= y.tolerance(m.1[1]),
            "min {k}"
        );
        assert!(
            (y.value(v.1[0]) - hi).abs() <= y.tolerance(v.1[0]),
            "max {k}"
        );
    }
    // The largest in-flight drawn is the connection's own maximum.
    let (_, bulk_max) = want.iter().fold((0.0, 0.0f64), |a, b| (0.0, a.1.max(b.1)));
    let dir_max = biggest
        .client_to_server
        .in_flight_max_bytes
        .max(biggest.server_to_client.in_flight_max_bytes) as f64;
    assert_eq!(bulk_max, dir_max);
}

#[test]
fn every_measuring_command_writes_a_report() {
    let srv = server::start(
        &ServerConfig {
            bind: Some([127, 0, 0, 1].into()),
            port: 0,
            tcp: true,
            udp: true,
            ..Default::default()
        },
        |_| {},
    )
    .unwrap();
    let tcp = srv.tcp_addr().unwrap().to_string();
    let udp = srv.udp_addr().unwrap().to_string();
    for (args, want) in [
        (
            vec![
                "throughput",
                tcp.as_str(),
                "-s",
                "64,1k",
                "-t",
                "300ms",
                "-q",
            ],
            "Throughput vs message size",
        ),
        (
            vec![
                "load",
                udp.as_str(),
                "-u",
                "-r",
                "2000",
                "-t",
                "300ms",
                "--warmup",
                "50ms",
            ],
            "Latency by percentile",
        ),
        (
            vec![
                "sweep",
                tcp.as_str(),
                "--sizes",
                "64",
                "--rates",
                "500,1000",
                "-t",
                "200ms",
                "--warmup",
                "50ms",
            ],
            "Latency vs offered rate",
        ),
        (
            vec!["connect", tcp.as_str(), "-c", "5", "-i", "10ms"],
            "Handshake time by percentile",
        ),
    ] {
        let (page, svg) = run_with_report(&args, None);
        assert!(page.contains(want), "{args:?}: no {want}");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
    }
    if common::require_root("the icmp charts use a raw socket") {
        // Every echo reply is a sample of the ICMP charts.
        let (page, svg) = run_with_report(
            &["icmp", "127.0.0.1", "-c", "20", "-i", "5ms"],
            Some("rtt-time"),
        );
        assert!(page.contains("RTT by percentile"));
        assert!(svg.contains("every sample"), "{svg}");
    }
    if let Some(dir) = common::captures_dir() {
        let f = dir.join("zeek/http_get.pcap");
        let (page, _) = run_with_report(&["capture", "stats", f.to_str().unwrap()], None);
        assert!(page.contains("On-wire rate per interval"));
    }
    srv.shutdown();
}

#[test]
fn documents_of_other_commands_name_what_they_lack() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = d.join("r.html");
    // A flows document whose flows were removed, an rpc document without its report.
    let mut fl = flows_doc();
    fl.as_object_mut().unwrap().remove("flows");
    let fl = write(d, "fl.json", &fl.to_string());
    let e = report_err(&[fl.as_os_str(), "-o".as_ref(), o.as_os_str()]);
    assert!(
        e.contains("fl.json: the \"capture-flows\" result is incomplete: missing field `flows`"),
        "{e}"
    );
    let mut rpc = rpc_doc();
    rpc.as_object_mut().unwrap().remove("report");
    let rpc = write(d, "rpc.json", &rpc.to_string());
    let e = report_err(&[rpc.as_os_str(), "-o".as_ref(), o.as_os_str()]);
    assert!(e.contains("missing field `report`"), "{e}");
    // sockperf's own --full-log is CSV, not a result; Wireshark's JSON export is an array.
    let ws = write(d, "ws.json", r#"[{"_source":{"layers":{}}}]"#);
    let e = report_err(&[ws.as_os_str(), "-o".as_ref(), o.as_os_str()]);
    assert!(
        e.contains("ws.json is not a roundtrip result: it holds a JSON array"),
        "{e}"
    );
    // A capture without TCP: the page says so, and --svg has nothing to write.
    let mut none = flows_doc();
    none["flows"] = serde_json::json!([]);
    none["window_series"] = serde_json::Value::Null;
    let none = write(d, "none.json", &none.to_string());
    let e = report_err(&[
        none.as_os_str(),
        "-o".as_ref(),
        o.as_os_str(),
        "--svg".as_ref(),
        d.join("n.svg").as_os_str(),
    ]);
    assert!(
        e.contains("no chart can be drawn from these results") && e.contains("no TCP connection"),
        "{e}"
    );
    // Several kinds on one page: each gets its section.
    let a = write(d, "cmp.json", &compare_doc().to_string());
    let b = write(d, "db.json", &db_doc().to_string());
    rt().arg("report")
        .args([&a, &b])
        .arg("-o")
        .arg(&o)
        .assert()
        .success();
    let page = std::fs::read_to_string(&o).unwrap();
    assert!(page.contains("Round trip per probe") && page.contains("Time per phase"));
}

#[test]
fn match_bars_read_back_to_both_ends() {
    let op = |name: &str, server: serde_json::Value, client: serde_json::Value| {
        serde_json::json!({"proto": "pgsql", "op": name, "client_count": 10, "server_count": 10, "matched": 10,
            "server": server, "client": client, "diff_mean_ns": 1.0, "diff_p50_ns": 1})
    };
    let doc = envelope(
        "capture-match",
        serde_json::json!({
            "client_capture": {"file": "c.pcap"}, "server_capture": {"file": "s.pcap"},
            "client_requests": 20, "server_requests": 20, "matched": 20,
            "ops": [
                op("SELECT", summary(50_000, 130_000, 900_000, 1_000_000),
                   summary(250_000, 330_000, 1_700_000, 2_000_000)),
                op("COMMIT", summary(20_000, 40_000, 60_000, 70_000),
                   summary(220_000, 240_000, 410_000, 500_000)),
            ],
            "unmatched": [], "clock_offset_ns": 12, "unrelated": false, "verdict": "the network adds 200us"
        }),
    );
    let page = page_of("match", doc);
    let svg = figure_svg(&page, "bars");
    check_hbars(
        &svg,
        "latency",
        &["SELECT", "COMMIT"],
        &[
            ("server p50", vec![Some(130e3), Some(40e3)]),
            ("client p50", vec![Some(330e3), Some(240e3)]),
            ("server p99", vec![Some(900e3), Some(60e3)]),
            ("client p99", vec![Some(1.7e6), Some(410e3)]),
        ],
    );
    let html = roundtrip::report::html::render(&page);
    assert!(html.contains("the network adds 200us") && html.contains("c.pcap"));
}

#[test]
fn db_full_log_samples_read_back_per_operation() {
    let dir = tempfile::tempdir().unwrap();
    let mut csv = String::from("op,seq,start_s,duration_ns,rows,bytes\n");
    let mut pings = Vec::new();
    for i in 0..200u64 {
        let t = i as f64 * 0.01;
        let ping = if i == 123 {
            7_300_000
        } else {
            30_000 + (i * 37) % 9_000
        };
        pings.push((t, ping));
        csv.push_str(&format!("ping,{i},{t:.9},{ping},0,0\n"));
        csv.push_str(&format!("query,{i},{:.9},{},1,8\n", t + 0.001, 45_000 + i));
    }
    let log = write(dir.path(), "db.csv", &csv);
    let phase_log = match load::load_any_log(&log).unwrap() {
        load::AnyLog::Db(l) => l,
        load::AnyLog::Ping(_) => panic!("read as a ping log"),
    };
    assert_eq!(phase_log.rows, 400);
    let run = Run {
        label: "db".into(),
        doc: load::from_value("db.json", db_doc()).unwrap(),
        full_log: None,
        phase_log: Some(phase_log),
    };
    let page = charts::page("t", &[run], &Options::default()).unwrap();
    let svg = figure_svg(&page, "rtt-time");
    let y = ReadAxis::new(&ticks(&svg, "y"), duration_label, is_log(&svg, "duration"));
    let x = ReadAxis::new(&ticks(&svg, "x"), duration_label, false);
    // The ping strokes: every sample 10 ms apart, so one dot per sample at its own value and time.
    let cmds = path_cmds(paths(&svg, "cols c0")[0]);
    assert_eq!(cmds.len(), 2 * pings.len());
    for (k, (t, v)) in pings.iter().enumerate() {
        let (m, top) = (&cmds[2 * k], &cmds[2 * k + 1]);
        assert!(
            (y.value(m.1[1]) - *v as f64).abs() <= y.tolerance(m.1[1]),
            "ping {k}"
        );
        assert!((y.value(top.1[0]) - *v as f64).abs() <= y.tolerance(top.1[0]));
        assert!(
            (x.value(m.1[0]) - t * 1e9).abs() <= 0.006e9,
            "time of ping {k}"
        );
    }
    // A bad row names its line.
    let bad = write(
        dir.path(),
        "bad.csv",
        "op,seq,start_s,duration_ns,rows,bytes\nping,0,0.1,500,0,0\nping,1,0.2,x,0,0\n",
    );
    let e = load::load_any_log(&bad).unwrap_err().to_string();
    assert!(e.contains("bad.csv line 3: duration_ns is \"x\""), "{e}");
}

#[test]
fn rpc_intervals_read_back_and_gaps_stay_empty() {
    let mut doc = rpc_doc();
    let row = |start: f64, count: u64, p50: u64, p99: u64, max: u64| {
        serde_json::json!({"start_s": start, "count": count, "mean_ns": 1.0, "p50_ns": p50, "p99_ns": p99,
            "max_ns": max})
    };
    // 0-1 s and 1-2 s, nothing from 2 to 4 s, then 4-5 s.
    doc["report"]["intervals"] = serde_json::json!([
        row(0.0, 10, 110_000, 470_000, 2_300_000),
        row(1.0, 12, 130_000, 650_000, 900_000),
        row(4.0, 3, 170_000, 180_000, 23_000_000),
    ]);
    doc["report"]["interval_s"] = 1.0.into();
    let page = page_of("rpc", doc);
    let svg = figure_svg(&page, "rtt-time");
    let y = ReadAxis::new(&ticks(&svg, "y"), duration_label, is_log(&svg, "latency"));
    let x = ReadAxis::new(&ticks(&svg, "x"), duration_label, false);
    let maxes = paths(&svg, "step c0 dash");
    assert_eq!(maxes.len(), 2, "one staircase per stretch without a gap");
    let levels = |d: &str| {
        let c = path_cmds(d);
        let mut v = vec![(x.value(c[0].1[0]), y.value(c[0].1[1]), c[0].1[1])];
        for k in c.iter().filter(|k| k.0 == 'V') {
            v.push((f64::NAN, y.value(k.1[0]), k.1[0]));
        }
        let end = c.iter().rev().find(|k| k.0 == 'H').unwrap().1[0];
        (v, x.value(end))
    };
    let (a, a_end) = levels(maxes[0]);
    assert!(a[0].0.abs() < 0.01e9 && (a_end - 2e9).abs() < 0.01e9);
    for ((_, got, px), want) in a.iter().zip([2.3e6, 0.9e6, 0.9e6]) {
        assert!((got - want).abs() <= y.tolerance(*px), "{got} vs {want}");
    }
    let (b, b_end) = levels(maxes[1]);
    assert!((b[0].0 - 4e9).abs() < 0.01e9 && (b_end - 5e9).abs() < 0.01e9);
    assert!((b[0].1 - 23e6).abs() <= y.tolerance(b[0].2));
}

// ---------------------------------------------------------------------------------------------------------
// capture timeline: the time-sequence graph.

fn timeline_doc() -> serde_json::Value {
    envelope(
        "capture-timeline",
        serde_json::json!({
            "capture": {"file": "known.pcap"},
            "seq_graph": {"flow_id": 1, "sender": "10.0.0.1:40000", "receiver": "10.0.0.2:5201",
                "direction": "client_to_server", "chosen": "busier", "start_ns": 0, "duration_s": 4.0,
                "column_s": 0.001, "window_scale": 7, "data_segments": 5, "retransmitted_segments": 2,
                "keep_alives": 0, "acks": 4, "sack_packets": 1, "zero_window_packets": 1, "highest_seq": 60_000,
                "segments": [
                    {"first_s": 0.5, "last_s": 0.5, "seq_lo": 0, "seq_hi": 10_000, "segments": 1},
                    {"first_s": 1.0, "last_s": 1.0005, "seq_lo": 10_000, "seq_hi": 30_000, "segments": 2}],
                "retransmissions": [{"t_s": 2.0, "seq": 10_000, "end": 20_000},
                                    {"t_s": 2.0, "seq": 40_000, "end": 50_000}],
                "ack": [{"t_s": 0.7, "value": 10_000}, {"t_s": 1.5, "value": 10_000},
                        {"t_s": 2.5, "value": 50_000}],
                "window_edge": [{"t_s": 0.7, "value": 40_000}, {"t_s": 1.5, "value": 10_000},
                                {"t_s": 2.5, "value": 60_000}],
                "sack": [{"t_s": 1.5, "left": 20_000, "right": 30_000}],
                "zero_windows": [{"start_s": 1.5, "end_s": 2.5}]}
        }),
    )
}

#[test]
fn time_sequence_graph_reads_back_to_the_series() {
    let page = page_of("timeline", timeline_doc());
    let svg = figure_svg(&page, "time-sequence");
    let x = ReadAxis::new(&ticks(&svg, "x"), duration_label, false);
    let y = ReadAxis::new(&ticks(&svg, "y"), bytes_label, false);
    let close = |got: f64, want: f64, tol: f64, what: &str| {
        assert!((got - want).abs() <= tol + 1e-9, "{what}: {got} vs {want}")
    };
    // Strokes (M x lo V hi) of a columns series.
    let strokes = |class: &str| -> Vec<(f64, f64, f64)> {
        let d = paths(&svg, class);
        assert_eq!(d.len(), 1, "{class}");
        path_cmds(d[0])
            .chunks(2)
            .map(|c| {
                assert_eq!((c[0].0, c[1].0), ('M', 'V'));
                (c[0].1[0], c[0].1[1], c[1].1[0])
            })
            .collect()
    };
    let check = |class: &str, want: &[(f64, f64, f64)]| {
        let got = strokes(class);
        assert_eq!(got.len(), want.len(), "{class}");
        for (&(px, lo, hi), &(t, a, b)) in got.iter().zip(want) {
            close(x.value(px) / 1e9, t, x.tolerance(px) / 1e9, class);
            close(y.value(lo), a, y.tolerance(lo), class);
            close(y.value(hi), b, y.tolerance(hi), class);
        }
    };
    check(
        "cols c0",
        &[(0.5, 0.0, 10_000.0), (1.0, 10_000.0, 30_000.0)],
    );
    check(
        "cols c1",
        &[(2.0, 10_000.0, 20_000.0), (2.0, 40_000.0, 50_000.0)],
    );
    check("cols c4", &[(1.5, 20_000.0, 30_000.0)]);
    // Steps through the samples, holding the last one to the end of the connection.
    let step = |class: &str, want: &[(f64, f64)]| {
        let d = paths(&svg, class);
        let cmds = path_cmds(d[0]);
        let (mut px, mut py) = (cmds[0].1[0], cmds[0].1[1]);
        close(x.value(px) / 1e9, want[0].0, x.tolerance(px) / 1e9, class);
        close(y.value(py), want[0].1, y.tolerance(py), class);
        let mut k = 1;
        for c in cmds[1..].iter() {
            match c.0 {
                'H' => px = c.1[0],
                'V' => {
                    py = c.1[0];
                    close(x.value(px) / 1e9, want[k].0, x.tolerance(px) / 1e9, class);
                    close(y.value(py), want[k].1, y.tolerance(py), class);
                    k += 1;
                }
                other => panic!("{other}"),
            }
        }
        assert_eq!(k, want.len(), "{class}");
    };
    step(
        "step c3",
        &[
            (0.7, 10_000.0),
            (1.5, 10_000.0),
            (2.5, 50_000.0),
            (4.0, 50_000.0),
        ],
    );
    step(
        "step c2",
        &[
            (0.7, 40_000.0),
            (1.5, 10_000.0),
            (2.5, 60_000.0),
            (4.0, 60_000.0),
        ],
    );
    // The zero-window period: a shaded rectangle from its start to its end.
    let d = paths(&svg, "spans c7");
    let cmds = path_cmds(d[0]);
    assert_eq!(cmds.iter().map(|c| c.0).collect::<String>(), "MHVHZ");
    close(
        x.value(cmds[0].1[0]) / 1e9,
        1.5,
        x.tolerance(cmds[0].1[0]) / 1e9,
        "zero window start",
    );
    close(
        x.value(cmds[1].1[0]) / 1e9,
        2.5,
        x.tolerance(cmds[1].1[0]) / 1e9,
        "zero window end",
    );
    assert!(svg.contains("window scale 7 (x128)"), "{svg}");
}

#[test]
fn capture_timeline_writes_the_time_sequence_graph_of_its_json() {
    let Some(dir) = common::captures_dir() else {
        return;
    };
    let file = dir.join("chrissanders/tcp_dupack.pcapng");
    let f = file.to_str().unwrap();
    let (page, svg) = run_with_report(&["capture", "timeline", f, "-q"], Some("time-sequence"));
    assert!(page.contains("TCP time-sequence graph") && page.contains("What the graph shows"));
    let out = rt()
        .args(["capture", "timeline", f, "--json"])
        .output()
        .unwrap();
    let doc = load::parse("timeline.json", &out.stdout).unwrap();
    let tl: roundtrip::doc::capture_timeline::TimelineDoc = doc.typed().unwrap();
    let g = tl.seq_graph.expect("a graph");
    let x = ReadAxis::new(&ticks(&svg, "x"), duration_label, false);
    let y = ReadAxis::new(&ticks(&svg, "y"), bytes_label, false);
    // Every segment, retransmission and SACK range of the JSON is a stroke where the axes say.
    for (class, want) in [
        (
            "cols c0",
            g.segments
                .iter()
                .map(|s| (s.first_s, s.seq_lo as f64, s.seq_hi as f64))
                .collect::<Vec<_>>(),
        ),
        (
            "cols c1",
            g.retransmissions
                .iter()
                .map(|r| (r.t_s, r.seq as f64, r.end as f64))
                .collect(),
        ),
        (
            "cols c4",
            g.sack
                .iter()
                .map(|s| (s.t_s, s.left as f64, s.right as f64))
                .collect(),
        ),
    ] {
        assert!(!want.is_empty(), "{class}");
        let cmds = path_cmds(paths(&svg, class)[0]);
        assert_eq!(cmds.len(), 2 * want.len(), "{class}");
        for (k, (t, lo, hi)) in want.iter().enumerate() {
            let (m, v) = (&cmds[2 * k], &cmds[2 * k + 1]);
            assert!(
                (x.value(m.1[0]) / 1e9 - t).abs() <= x.tolerance(m.1[0]) / 1e9,
                "{class} {k} time"
            );
            assert!(
                (y.value(m.1[1]) - lo).abs() <= y.tolerance(m.1[1]),
                "{class} {k} lo"
            );
            assert!(
                (y.value(v.1[0]) - hi).abs() <= y.tolerance(v.1[0]),
                "{class} {k} hi"
            );
        }
    }
}
