//! Golden documents: real `--json` documents of every kind `roundtrip report` reads, recorded by
//! `tests/fixtures/golden/record.sh`, still load (through `roundtrip report` and the library's reader) and
//! serialise back unchanged.

use assert_cmd::Command;
use roundtrip::report::{charts, load};
use std::path::{Path, PathBuf};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden")
}

/// Every golden document (the current layout), sorted by name; `old-*` files are documents of older versions.
fn golden(old: bool) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(golden_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with("old-") == old
        })
        .collect();
    v.sort();
    v
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn there_is_a_golden_document_of_every_kind_report_draws() {
    let kinds: Vec<String> = golden(false)
        .iter()
        .map(|p| {
            let v: serde_json::Value = serde_json::from_str(&read(p)).unwrap();
            v["kind"].as_str().unwrap().to_string()
        })
        .collect();
    for k in charts::KINDS {
        assert!(
            kinds.iter().any(|x| x == k.kind),
            "no golden document of kind {}",
            k.kind
        );
    }
}

#[test]
fn report_draws_every_golden_document() {
    let dir = tempfile::tempdir().unwrap();
    for p in golden(false).iter().chain(golden(true).iter()) {
        let out = dir.path().join("r.html");
        let o = Command::cargo_bin("roundtrip")
            .unwrap()
            .arg("report")
            .arg(p)
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}: {o:?}", p.display());
        assert!(std::fs::metadata(&out).unwrap().len() > 1000);
    }
}

#[test]
fn the_reader_loads_every_golden_document_field_for_field() {
    for p in golden(false).iter().chain(golden(true).iter()) {
        let text = read(p);
        let doc = load::parse(&p.display().to_string(), text.as_bytes()).unwrap();
        charts::check_kind(&doc).unwrap();
        let want: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc.value, want, "{}", p.display());
    }
}

/// Reads `p` into `T` and writes it back the way the commands do: the same bytes.
fn round_trips_byte_for_byte<T: serde::de::DeserializeOwned + serde::Serialize>(p: &Path) {
    let text = read(p);
    let doc: T = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let back = String::from_utf8(roundtrip::doc::to_bytes(&doc)).unwrap();
    same_but_float_digits(p, &text, &back);
}

/// `back` is `text` byte for byte, except that a float may differ in its last digit: serde_json parses
/// floats to the nearest double only with its `float_roundtrip` feature, which this crate does not enable.
fn same_but_float_digits(p: &Path, text: &str, back: &str) {
    let (a, b): (Vec<&str>, Vec<&str>) = (text.lines().collect(), back.lines().collect());
    assert_eq!(a.len(), b.len(), "{}: line count", p.display());
    for (x, y) in a.iter().zip(&b) {
        if x == y {
            continue;
        }
        let num = |l: &str| -> Option<(String, f64)> {
            let (key, v) = l.rsplit_once(": ").unwrap_or(("", l));
            let v = v.trim_end_matches(',');
            Some((key.to_string(), v.parse::<f64>().ok()?))
        };
        match (num(x), num(y)) {
            (Some((kx, vx)), Some((ky, vy))) if kx == ky && (vx - vy).abs() <= vx.abs() * 1e-15 => {
            }
            _ => panic!("{}: {x:?} reads back as {y:?}", p.display()),
        }
    }
    assert!(
        text.ends_with('\n') && back.ends_with('\n'),
        "{}",
        p.display()
    );
}

#[test]
fn typed_documents_read_back_byte_for_byte() {
    let mut typed = 0;
    for p in golden(false) {
        let v: serde_json::Value = serde_json::from_str(&read(&p)).unwrap();
        let env: roundtrip::doc::Environment =
            serde_json::from_value(v["environment"].clone()).unwrap();
        assert!(!env.roundtrip_version.is_empty(), "{}", p.display());
        if v["kind"] == roundtrip::doc::kind::PING {
            round_trips_byte_for_byte::<roundtrip::doc::ping::PingDoc>(&p);
            typed += 1;
        } else if v["kind"] == roundtrip::doc::kind::CONNECT {
            round_trips_byte_for_byte::<roundtrip::doc::connect::ConnectDoc>(&p);
            typed += 1;
        } else if v["kind"] == roundtrip::doc::kind::ICMP {
            round_trips_byte_for_byte::<roundtrip::doc::icmp::IcmpDoc>(&p);
            typed += 1;
        } else if v["kind"] == roundtrip::doc::kind::COMPARE {
            round_trips_byte_for_byte::<roundtrip::doc::compare::CompareDoc>(&p);
            typed += 1;
        } else if v["kind"] == roundtrip::doc::kind::LOAD {
            round_trips_byte_for_byte::<roundtrip::doc::load::LoadDoc>(&p);
            typed += 1;
        } else if v["kind"] == roundtrip::doc::kind::SWEEP {
            round_trips_byte_for_byte::<roundtrip::doc::sweep::SweepDoc>(&p);
            typed += 1;
        } else if v["kind"] == roundtrip::doc::kind::CAPTURE_RPC {
            round_trips_byte_for_byte::<roundtrip::doc::rpc::RpcDoc>(&p);
            typed += 1;
        } else if v["kind"] == roundtrip::doc::kind::DB {
            round_trips_byte_for_byte::<roundtrip::doc::db::DbDoc>(&p);
            typed += 1;
        } else if v["kind"] == roundtrip::doc::kind::THROUGHPUT {
            round_trips_byte_for_byte::<roundtrip::doc::throughput::ThroughputDoc>(&p);
            typed += 1;
        } else if v["kind"] == roundtrip::doc::kind::CAPTURE_MATCH {
            round_trips_byte_for_byte::<roundtrip::doc::capture_match::MatchDoc>(&p);
            typed += 1;
        } else if v["kind"] == roundtrip::doc::kind::CAPTURE_STATS {
            round_trips_byte_for_byte::<roundtrip::doc::capture_stats::StatsDoc>(&p);
            typed += 1;
        } else if v["kind"] == roundtrip::doc::kind::CAPTURE_FLOWS {
            round_trips_byte_for_byte::<roundtrip::doc::capture_flows::FlowsDoc>(&p);
            typed += 1;
        } else if v["kind"] == roundtrip::doc::kind::CAPTURE_TIMELINE {
            round_trips_byte_for_byte::<roundtrip::doc::capture_timeline::TimelineDoc>(&p);
            typed += 1;
        } else if v["kind"] == roundtrip::doc::kind::TCP {
            round_trips_byte_for_byte::<roundtrip::doc::tcp::TcpDoc>(&p);
            typed += 1;
        }
    }
    assert!(
        typed >= 25,
        "every current golden document of a typed kind was read through its type ({typed})"
    );
}

/// A `capture rpc` document of an older version reads through today's type: an operation's `latency` is its
/// `last_byte`, a slow request's `latency_ns` its `last_byte_ns`, and the missing first-byte times are unknown.
#[test]
fn old_capture_rpc_documents_read_latency_as_last_byte() {
    let p = golden_dir().join("old-capture-rpc-latency.json");
    let v: serde_json::Value = serde_json::from_str(&read(&p)).unwrap();
    let doc: roundtrip::doc::rpc::RpcDoc = serde_json::from_value(v.clone()).unwrap();
    assert!(!doc.report.ops.is_empty());
    for (o, want) in doc
        .report
        .ops
        .iter()
        .zip(v["report"]["ops"].as_array().unwrap())
    {
        let latency: roundtrip::stats::Summary =
            serde_json::from_value(want["latency"].clone()).unwrap();
        assert_eq!(o.last_byte, latency);
        assert!(o.first_byte_known().is_none());
    }
    for (s, want) in doc
        .report
        .slowest
        .iter()
        .zip(v["report"]["slowest"].as_array().unwrap())
    {
        assert_eq!(Some(s.last_byte_ns), want["latency_ns"].as_u64());
    }
}

/// docs/json-format.md lists, per kind, the fields after the envelope: they are the golden documents' fields,
/// in order.
#[test]
fn the_format_page_lists_the_fields_of_every_kind() {
    let md =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/json-format.md"))
            .unwrap();
    for p in golden(false) {
        let v: serde_json::Value = serde_json::from_str(&read(&p)).unwrap();
        let kind = v["kind"].as_str().unwrap();
        let row = md
            .lines()
            .find(|l| l.starts_with(&format!("| `{kind}` |")))
            .unwrap_or_else(|| panic!("docs/json-format.md has no row for kind {kind}"));
        let fields = row.rsplit(" | ").next().unwrap().trim_end_matches(" |");
        // Top-level names only: drop the parenthesised sub-fields, then the backquotes.
        let mut top = String::new();
        let mut depth = 0;
        for c in fields.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                '`' => {}
                c if depth == 0 => top.push(c),
                _ => {}
            }
        }
        let listed: Vec<&str> = top
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        let keys: Keys = serde_json::from_str(&read(&p)).unwrap();
        let have: Vec<&str> = keys.0.iter().skip(4).map(String::as_str).collect();
        assert_eq!(listed, have, "{} (kind {kind})", p.display());
    }
}

/// The top-level field names of a document, in the order written.
struct Keys(Vec<String>);

impl<'de> serde::Deserialize<'de> for Keys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Keys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Keys, A::Error> {
                let mut out = Vec::new();
                while let Some((k, _)) = m.next_entry::<String, serde::de::IgnoredAny>()? {
                    out.push(k);
                }
                Ok(Keys(out))
            }
        }
        d.deserialize_map(V)
    }
}
