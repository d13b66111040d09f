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
