//! Reading saved results back for reports: `--json` documents (checked for `format`, `format_version` and
//! `kind` before anything else) and `--full-log` CSV files (streamed into [`MinMaxColumns`], so a log of any
//! length is read in constant memory).
#![forbid(unsafe_code)]

use super::csv::FULL_LOG_HEADER;
use super::downsample::MinMaxColumns;
use super::json::{FORMAT, FORMAT_VERSION};
use crate::doc::Environment;
use crate::units::{fmt_bytes, fmt_nanos};
use serde::Deserialize;
use serde_json::Value;
use std::io::Read;
use std::path::Path;
use thiserror::Error;

/// Reading a result or a full log failed; every message names the file and what to do.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The bytes are not JSON.
    #[error("{path} is not JSON ({why}); give a file saved from `roundtrip ... --json`")]
    NotJson {
        /// The file.
        path: String,
        /// The parser's message with line and column.
        why: String,
    },
    /// JSON, but not a roundtrip document.
    #[error(
        "{path} is not a roundtrip result: {what}; give a file saved from `roundtrip ... --json` (other tools' output cannot be drawn)"
    )]
    NotRoundtrip {
        /// The file.
        path: String,
        /// What is missing or different.
        what: String,
    },
    /// A roundtrip document of a layout version this build does not read.
    #[error(
        "{path} has format_version {found}, this roundtrip reads format_version {supported}: draw it with the roundtrip version that wrote it, or measure again"
    )]
    Version {
        /// The file.
        path: String,
        /// Version in the file.
        found: u64,
        /// Version this build reads.
        supported: u32,
    },
    /// A roundtrip document of a command that has no report yet.
    #[error(
        "{path} holds a \"{kind}\" result, which has no report yet (reports exist for: {known})"
    )]
    UnknownKind {
        /// The file.
        path: String,
        /// Its kind.
        kind: String,
        /// Kinds that can be drawn.
        known: String,
    },
    /// A roundtrip document missing a part the report needs.
    #[error(
        "{path}: the \"{kind}\" result is incomplete: {what} (was it edited, or written by another roundtrip version?)"
    )]
    Incomplete {
        /// The file.
        path: String,
        /// Its kind.
        kind: String,
        /// What is missing or malformed.
        what: String,
    },
    /// A full log whose first line is not the full-log header.
    #[error(
        "{path} is not a roundtrip full log: its first line is {found:?}, expected {expected:?}; give a file written by `roundtrip ping --full-log` (or `roundtrip db --full-log` with a db result)"
    )]
    FullLogHeader {
        /// The file.
        path: String,
        /// The first line found (shortened).
        found: String,
        /// The header expected.
        expected: &'static str,
    },
    /// A bad row in a full log.
    #[error(
        "{path} line {line}: {why}; the full log is damaged (rows must be seq,send_ns,recv_ns,rtt_ns,server_ns)"
    )]
    FullLogRow {
        /// The file.
        path: String,
        /// 1-based line number.
        line: u64,
        /// What is wrong.
        why: String,
    },
}

/// One checked `--json` document.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The file it came from (as given), or a name for documents built in memory.
    pub path: String,
    /// Its `kind` (the command that wrote it).
    pub kind: String,
    /// Its `format_version`.
    pub format_version: u64,
    /// Where it was measured.
    pub environment: Environment,
    /// Start of the measurement, Unix seconds, when recorded.
    pub started_unix_s: Option<f64>,
    /// The whole document, for the kind's chart builder to read its own fields.
    pub value: Value,
}

impl Loaded {
    /// Reads the document into a kind's typed input; a missing or malformed field becomes
    /// [`LoadError::Incomplete`] naming it.
    pub fn typed<T: for<'de> Deserialize<'de>>(&self) -> Result<T, LoadError> {
        T::deserialize(&self.value).map_err(|e| LoadError::Incomplete {
            path: self.path.clone(),
            kind: self.kind.clone(),
            what: e.to_string(),
        })
    }

    /// The `settings` object as (name, value) pairs, nested objects flattened as `a b`, names and values as a
    /// person reads them (see `readable`: units in the values, not in the names). Documents without a
    /// `settings` object (connect, icmp, compare, capture ...) give their top-level single values instead, and
    /// the capture file descriptions (`capture`, `client_capture`, `server_capture`).
    pub fn settings(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Some(s) = self.value.get("settings") {
            flatten("", s, &mut out);
            return out;
        }
        const ENVELOPE: [&str; 5] = [
            "format",
            "format_version",
            "kind",
            "environment",
            "started_unix_s",
        ];
        if let Some(m) = self.value.as_object() {
            for (k, v) in m {
                if ENVELOPE.contains(&k.as_str()) {
                    continue;
                }
                match v {
                    Value::Array(_) => {}
                    Value::Object(_) if k.ends_with("capture") => flatten(k, v, &mut out),
                    Value::Object(_) => {}
                    _ => flatten(k, v, &mut out),
                }
            }
        }
        out
    }
}

/// A setting's JSON name as a person reads it: no unit suffix (the value carries its unit), spaces for `_`
/// and `.` (`interval_ns` -> "interval", `stop.count` -> "stop count", `row_bytes` -> "row size").
fn readable(name: &str) -> String {
    let n = if let Some(p) = name.strip_suffix("_bytes") {
        // `file` beside `file_bytes` (a capture's name and size).
        format!("{p} size")
    } else {
        name.strip_suffix("_ns")
            .or_else(|| name.strip_suffix("_s"))
            .unwrap_or(name)
            .to_string()
    };
    n.replace(['_', '.'], " ")
}

fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let name = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&name, v, out);
            }
        }
        Value::String(s) => out.push((readable(prefix), s.clone())),
        Value::Null => out.push((readable(prefix), "-".to_string())),
        Value::Bool(b) => out.push((readable(prefix), if *b { "yes" } else { "no" }.into())),
        Value::Array(a) if a.iter().all(Value::is_string) => out.push((
            readable(prefix),
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", "),
        )),
        Value::Number(n) if prefix.ends_with("_ns") => {
            out.push((readable(prefix), fmt_nanos(n.as_f64().unwrap_or(0.0))))
        }
        Value::Number(n) if prefix.ends_with("_s") => {
            out.push((readable(prefix), fmt_nanos(n.as_f64().unwrap_or(0.0) * 1e9)))
        }
        Value::Number(n) if prefix.ends_with("_bytes") && n.as_u64().is_some() => {
            out.push((readable(prefix), fmt_bytes(n.as_u64().unwrap_or(0))))
        }
        other => out.push((readable(prefix), other.to_string())),
    }
}

/// Reads and checks one `--json` document from a file.
pub fn load(path: &Path) -> Result<Loaded, LoadError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| LoadError::Io {
        path: name.clone(),
        source,
    })?;
    parse(&name, &bytes)
}

/// Checks the envelope of a document: `format` must be "roundtrip", `format_version` one this build reads,
/// and `kind` present. Does not check that the kind can be drawn (see [`crate::report::charts`]).
pub fn parse(name: &str, bytes: &[u8]) -> Result<Loaded, LoadError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| LoadError::NotJson {
        path: name.to_string(),
        why: e.to_string(),
    })?;
    from_value(name, value)
}

/// Checks the envelope of an already parsed document (see [`parse`]).
pub fn from_value(name: &str, value: Value) -> Result<Loaded, LoadError> {
    let not_ours = |what: String| LoadError::NotRoundtrip {
        path: name.to_string(),
        what,
    };
    let Some(obj) = value.as_object() else {
        return Err(not_ours(format!(
            "it holds a JSON {} instead of an object",
            type_name(&value)
        )));
    };
    match obj.get("format") {
        None => {
            return Err(not_ours(format!(
                "it has no \"format\" field (expected \"format\": \"{FORMAT}\")"
            )));
        }
        Some(Value::String(f)) if f == FORMAT => {}
        Some(other) => {
            return Err(not_ours(format!(
                "its \"format\" is {other}, expected \"{FORMAT}\""
            )));
        }
    }
    let format_version = match obj.get("format_version") {
        Some(v) => v.as_u64().ok_or_else(|| {
            not_ours(format!(
                "its \"format_version\" is {v}, expected a whole number"
            ))
        })?,
        None => return Err(not_ours("it has no \"format_version\" field".to_string())),
    };
    if format_version != u64::from(FORMAT_VERSION) {
        return Err(LoadError::Version {
            path: name.to_string(),
            found: format_version,
            supported: FORMAT_VERSION,
        });
    }
    let kind = match obj.get("kind") {
        Some(Value::String(k)) => k.clone(),
        Some(v) => return Err(not_ours(format!("its \"kind\" is {v}, expected a string"))),
        None => {
            return Err(not_ours(
                "it has no \"kind\" field (the command that wrote it)".to_string(),
            ));
        }
    };
    let environment = obj
        .get("environment")
        .and_then(|e| Environment::deserialize(e).ok())
        .unwrap_or_default();
    let started_unix_s = obj.get("started_unix_s").and_then(Value::as_f64);
    Ok(Loaded {
        path: name.to_string(),
        kind,
        format_version,
        environment,
        started_unix_s,
        value,
    })
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A full log summarised for plotting: RTT (ns) against send time (s), min and max per column.
#[derive(Debug, Clone)]
pub struct FullLogSeries {
    /// The file it came from.
    pub path: String,
    /// Data rows read.
    pub rows: u64,
    /// RTT in nanoseconds per column of send time in seconds.
    pub columns: MinMaxColumns,
}

/// Header of the `roundtrip db --full-log` CSV.
pub const DB_LOG_HEADER: &str = "op,seq,start_s,duration_ns,rows,bytes";
/// Header of the `roundtrip db --link --full-log` CSV: two more columns, the local database's clock before
/// and after each link call (Unix seconds; empty on other rows).
pub const DB_LINK_LOG_HEADER: &str =
    "op,seq,start_s,duration_ns,rows,bytes,db_begin_unix_s,db_end_unix_s";

/// The samples of one operation of a db full log.
#[derive(Debug, Clone)]
pub struct PhaseSamples {
    /// Operation name as in the log (`tcp_handshake`, `ping`, `query`, ...).
    pub op: String,
    /// Duration (ns) against start time (s), min and max per column.
    pub columns: MinMaxColumns,
    /// Every duration.
    pub histogram: crate::stats::LatencyHistogram,
}

/// A `db --full-log` file summarised for plotting: one [`PhaseSamples`] per operation, in order of first
/// appearance.
#[derive(Debug, Clone)]
pub struct PhaseLog {
    /// The file it came from.
    pub path: String,
    /// Data rows read.
    pub rows: u64,
    /// Per operation.
    pub ops: Vec<PhaseSamples>,
}

/// A full log of either layout.
#[derive(Debug, Clone)]
pub enum AnyLog {
    /// `ping --full-log`: one round trip per row.
    Ping(FullLogSeries),
    /// `db --full-log`: one timed operation per row.
    Db(PhaseLog),
}

/// Reads a full log of `ping` or `db`, told apart by the header.
pub fn load_any_log(path: &Path) -> Result<AnyLog, LoadError> {
    let name = path.display().to_string();
    let io = |source| LoadError::Io {
        path: name.clone(),
        source,
    };
    let f = std::fs::File::open(path).map_err(io)?;
    let mut r = std::io::BufReader::new(f);
    let mut first = Vec::new();
    std::io::BufRead::read_until(&mut r, b'\n', &mut first).map_err(io)?;
    if trim_eol(&first) == DB_LOG_HEADER.as_bytes()
        || trim_eol(&first) == DB_LINK_LOG_HEADER.as_bytes()
    {
        return read_phase_log(&name, r).map(AnyLog::Db);
    }
    load_full_log(path).map(AnyLog::Ping)
}

/// Reads the rows (after the header) of a `db --full-log` file.
pub fn read_phase_log(name: &str, r: impl std::io::BufRead) -> Result<PhaseLog, LoadError> {
    let mut log = PhaseLog {
        path: name.to_string(),
        rows: 0,
        ops: Vec::new(),
    };
    for (i, line) in r.split(b'\n').enumerate() {
        let lineno = i as u64 + 2;
        let line = line.map_err(|source| LoadError::Io {
            path: name.to_string(),
            source,
        })?;
        let l = trim_eol(&line);
        if l.is_empty() {
            continue;
        }
        let bad = |why: String| LoadError::FullLogRow {
            path: name.to_string(),
            line: lineno,
            why,
        };
        let f: Vec<&[u8]> = l.split(|&b| b == b',').collect();
        if f.len() != 6 && f.len() != 8 {
            return Err(bad(format!(
                "{} columns instead of 6 ({DB_LOG_HEADER})",
                f.len()
            )));
        }
        let op = String::from_utf8_lossy(f[0]).into_owned();
        let start: f64 = std::str::from_utf8(f[2])
            .ok()
            .and_then(|s| s.parse().ok())
            .filter(|v: &f64| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| {
                bad(format!(
                    "start_s is {:?}, not a time in seconds",
                    String::from_utf8_lossy(f[2])
                ))
            })?;
        let d = parse_u64(f[3]).ok_or_else(|| {
            bad(format!(
                "duration_ns is {:?}, not a whole number",
                String::from_utf8_lossy(f[3])
            ))
        })?;
        let k = match log.ops.iter().position(|o| o.op == op) {
            Some(k) => k,
            None => {
                log.ops.push(PhaseSamples {
                    op,
                    columns: MinMaxColumns::new(1e-6, FULL_LOG_COLUMNS),
                    histogram: crate::stats::LatencyHistogram::new(),
                });
                log.ops.len() - 1
            }
        };
        log.ops[k].columns.add(start, d as f64);
        log.ops[k].histogram.record_ns(d);
        log.rows += 1;
    }
    Ok(log)
}

/// Columns kept while reading a full log: about two per pixel of the widest chart.
pub const FULL_LOG_COLUMNS: usize = 2048;

/// Reads a `--full-log` CSV file.
pub fn load_full_log(path: &Path) -> Result<FullLogSeries, LoadError> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|source| LoadError::Io {
        path: name.clone(),
        source,
    })?;
    read_full_log(&name, f)
}

/// Reads a full log (header `seq,send_ns,recv_ns,rtt_ns,server_ns`, one row per round trip) from any reader.
pub fn read_full_log(name: &str, mut r: impl Read) -> Result<FullLogSeries, LoadError> {
    let io = |source| LoadError::Io {
        path: name.to_string(),
        source,
    };
    let mut cols = MinMaxColumns::new(1e-6, FULL_LOG_COLUMNS);
    let mut rows = 0u64;
    let mut lineno = 0u64;
    // Whole lines are parsed straight from a large buffer; a partial last line moves to its front.
    let mut buf = vec![0u8; 1 << 20];
    let (mut start, mut end) = (0usize, 0usize);
    let mut eof = false;
    loop {
        while let Some(nl) = buf[start..end].iter().position(|&b| b == b'\n') {
            lineno += 1;
            let line = &buf[start..start + nl];
            start += nl + 1;
            full_log_line(name, lineno, line, &mut cols, &mut rows)?;
        }
        if eof {
            if start < end {
                lineno += 1;
                full_log_line(name, lineno, &buf[start..end], &mut cols, &mut rows)?;
            }
            break;
        }
        buf.copy_within(start..end, 0);
        end -= start;
        start = 0;
        if end == buf.len() {
            return Err(LoadError::FullLogRow {
                path: name.to_string(),
                line: lineno + 1,
                why: format!("the line is longer than {} bytes", buf.len()),
            });
        }
        let n = loop {
            match r.read(&mut buf[end..]) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => break other.map_err(io)?,
            }
        };
        eof = n == 0;
        end += n;
    }
    if lineno == 0 {
        return Err(LoadError::FullLogHeader {
            path: name.to_string(),
            found: String::new(),
            expected: FULL_LOG_HEADER.trim_end(),
        });
    }
    Ok(FullLogSeries {
        path: name.to_string(),
        rows,
        columns: cols,
    })
}

/// One line of a full log: the header on line 1, else a row added to `cols`.
#[inline]
fn full_log_line(
    name: &str,
    lineno: u64,
    line: &[u8],
    cols: &mut MinMaxColumns,
    rows: &mut u64,
) -> Result<(), LoadError> {
    let l = trim_eol(line);
    if lineno == 1 {
        let expected = FULL_LOG_HEADER.trim_end();
        if l != expected.as_bytes() {
            let found: String = String::from_utf8_lossy(l).chars().take(60).collect();
            return Err(LoadError::FullLogHeader {
                path: name.to_string(),
                found,
                expected,
            });
        }
        return Ok(());
    }
    if l.is_empty() {
        return Ok(());
    }
    let (send, rtt) = match fast_row(l) {
        Some(v) => v,
        None => slow_row(name, lineno, l)?,
    };
    cols.add(send as f64 / 1e9, rtt as f64);
    *rows += 1;
    Ok(())
}

/// (send_ns, rtt_ns) of a well-formed row, in one pass over its bytes; None for anything unusual.
#[inline]
fn fast_row(l: &[u8]) -> Option<(u64, u64)> {
    let mut vals = [0u64; 4];
    let mut field = 0;
    let mut digits = 0;
    for &b in l {
        if b == b',' {
            if digits == 0 {
                return None;
            }
            field += 1;
            digits = 0;
            if field == 4 {
                return Some((vals[1], vals[3]));
            }
            continue;
        }
        let d = b.wrapping_sub(b'0');
        digits += 1;
        if d > 9 || digits > 19 {
            return None;
        }
        vals[field] = vals[field] * 10 + u64::from(d);
    }
    None
}

/// Parses a row the slow way, to say exactly what is wrong with it.
fn slow_row(name: &str, lineno: u64, l: &[u8]) -> Result<(u64, u64), LoadError> {
    let bad = |why: String| LoadError::FullLogRow {
        path: name.to_string(),
        line: lineno,
        why,
    };
    let mut fields = l.split(|&b| b == b',');
    let mut next = |what: &str| -> Result<u64, LoadError> {
        let f = fields
            .next()
            .ok_or_else(|| bad(format!("the {what} column is missing")))?;
        parse_u64(f).ok_or_else(|| {
            bad(format!(
                "{what} is {:?}, not a whole number",
                String::from_utf8_lossy(f)
                    .chars()
                    .take(30)
                    .collect::<String>()
            ))
        })
    };
    let _seq = next("seq")?;
    let send = next("send_ns")?;
    let _recv = next("recv_ns")?;
    let rtt = next("rtt_ns")?;
    if fields.next().is_none() {
        return Err(bad("the server_ns column is missing".to_string()));
    }
    Ok((send, rtt))
}

fn trim_eol(l: &[u8]) -> &[u8] {
    let mut l = l;
    while let [rest @ .., b'\n' | b'\r'] = l {
        l = rest;
    }
    l
}

#[inline]
fn parse_u64(f: &[u8]) -> Option<u64> {
    if f.is_empty() || f.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in f {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(bytes: &[u8]) -> String {
        parse("x.json", bytes).unwrap_err().to_string()
    }

    #[test]
    fn envelope_errors_name_what_is_missing() {
        assert!(err(b"not json").contains("x.json is not JSON"));
        assert!(err(b"[1,2]").contains("JSON array instead of an object"));
        // hyperfine's --export-json
        let e = err(br#"{"results":[{"command":"sleep 1","mean":1.0}]}"#);
        assert!(e.contains("no \"format\" field"), "{e}");
        let e = err(br#"{"format":"sockperf","format_version":1,"kind":"ping"}"#);
        assert!(e.contains("\"format\" is \"sockperf\""), "{e}");
        let e = err(br#"{"format":"roundtrip","kind":"ping"}"#);
        assert!(e.contains("no \"format_version\""), "{e}");
        let e = err(br#"{"format":"roundtrip","format_version":7,"kind":"ping"}"#);
        assert!(
            e.contains("format_version 7") && e.contains("reads format_version 1"),
            "{e}"
        );
        let e = err(br#"{"format":"roundtrip","format_version":1}"#);
        assert!(e.contains("no \"kind\""), "{e}");
        for e in [err(b"not json"), err(b"{}")] {
            assert!(!e.contains('\n'));
        }
    }

    #[test]
    fn incomplete_documents_name_the_field() {
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct Need {
            percentiles: Vec<u64>,
        }
        let l = parse(
            "p.json",
            br#"{"format":"roundtrip","format_version":1,"kind":"ping"}"#,
        )
        .unwrap();
        let e = l.typed::<Need>().err().unwrap().to_string();
        assert!(e.contains("missing field `percentiles`"), "{e}");
        assert!(
            e.starts_with("p.json: the \"ping\" result is incomplete"),
            "{e}"
        );
    }

    #[test]
    fn full_log_rows_are_read_and_checked() {
        let good =
            b"seq,send_ns,recv_ns,rtt_ns,server_ns\r\n1,1000,3000,2000,7\n2,5000,5500,500,\n\n";
        let s = read_full_log("l.csv", &good[..]).unwrap();
        assert_eq!(s.rows, 2);
        assert_eq!(s.columns.extremes(), Some((500.0, 2000.0)));

        let e = read_full_log("l.csv", &b"a,b,c\n1,2,3\n"[..])
            .unwrap_err()
            .to_string();
        assert!(e.contains("l.csv is not a roundtrip full log"), "{e}");
        let e = read_full_log(
            "l.csv",
            &b"seq,send_ns,recv_ns,rtt_ns,server_ns\n1,2,3,4,\n5,x7,8,9,\n"[..],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("l.csv line 3: send_ns is \"x7\""), "{e}");
        let e = read_full_log("l.csv", &b"seq,send_ns,recv_ns,rtt_ns,server_ns\n1,2\n"[..])
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2: the recv_ns column is missing"), "{e}");
        let e = read_full_log(
            "l.csv",
            &b"seq,send_ns,recv_ns,rtt_ns,server_ns\n1,2,3,99999999999999999999999,\n"[..],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("rtt_ns is"), "{e}");
        let e = read_full_log("l.csv", &b""[..]).unwrap_err().to_string();
        assert!(e.contains("first line is \"\""), "{e}");
        // Many rows across buffer refills, the last without a newline.
        let mut big = FULL_LOG_HEADER.as_bytes().to_vec();
        for i in 0..100_000u64 {
            big.extend_from_slice(
                format!("{i},{},{},{},1\n", i * 10, i * 10 + i % 977, i % 977).as_bytes(),
            );
        }
        big.extend_from_slice(b"100000,1000000,1001000,1000,");
        let s = read_full_log("big.csv", &big[..]).unwrap();
        assert_eq!(s.rows, 100_001);
        assert_eq!(s.columns.extremes(), Some((0.0, 1000.0)));
        // Invalid UTF-8 and binary garbage: an error, never a panic.
        assert!(read_full_log("l.csv", &b"\xff\xfe\x00\x01"[..]).is_err());
    }
}
