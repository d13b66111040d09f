//! Value parsers shared by the subcommands, so clap rejects bad units before anything runs.

use roundtrip::probe::target::Family;
use roundtrip::units;
use std::time::Duration;

/// A duration with a unit (`10s`, `500us`).
pub fn duration(s: &str) -> Result<Duration, String> {
    units::parse_duration(s).map_err(|e| e.to_string())
}

/// A duration that must be more than zero.
pub fn positive_duration(s: &str) -> Result<Duration, String> {
    match duration(s)? {
        d if d.is_zero() => Err(format!("'{s}' must be more than 0")),
        d => Ok(d),
    }
}

/// A byte count (`64`, `1k`, `4MiB`).
pub fn size(s: &str) -> Result<u64, String> {
    units::parse_size(s).map_err(|e| e.to_string())
}

/// A message rate that must be more than zero (`1000`, `10k/s`).
pub fn rate(s: &str) -> Result<f64, String> {
    match units::parse_rate(s).map_err(|e| e.to_string())? {
        r if r <= 0.0 => Err(format!("rate '{s}' must be more than 0")),
        r => Ok(r),
    }
}

/// A count that must be at least 1.
pub fn count(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("count must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) if s.starts_with('-') => Err(format!("count '{s}' must not be negative")),
        Err(_) => Err(format!("count '{s}' is not a whole number")),
    }
}

/// A snapshot length: bytes kept of each packet, between 64 bytes and 256 KiB (tcpdump's `-s`).
pub fn snaplen(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if (64..=262_144).contains(&n) => Ok(n),
        Ok(n) => Err(format!(
            "snaplen {n} is not between 64 bytes and 256 KiB (262144)"
        )),
        Err(_) if s.starts_with('-') => Err(format!("snaplen '{s}' must not be negative")),
        Err(_) => Err(format!("snaplen '{s}' is not a whole number of bytes")),
    }
}

/// A file the command reads (a key, a configuration, a list, a result): refused before anything runs when it
/// cannot be opened for reading, with the OS's reason.
pub fn input_file(s: &str) -> Result<std::path::PathBuf, String> {
    let path = std::path::PathBuf::from(s);
    // A parse-only run (ROUNDTRIP_PARSE_ONLY=1, what the docs test uses on the pages' examples; or
    // [`SYNTAX_ONLY`], what the examples' own unit test sets) checks the command line's syntax, not the files
    // it names.
    if SYNTAX_ONLY.load(std::sync::atomic::Ordering::Relaxed)
        || std::env::var_os("ROUNDTRIP_PARSE_ONLY").is_some_and(|v| v == "1")
    {
        return Ok(path);
    }
    let why = match std::fs::File::open(&path).and_then(|f| f.metadata()) {
        Ok(m) if m.is_dir() => "it is a directory, not a file".to_string(),
        Ok(_) => return Ok(path),
        Err(e) => format!("cannot read it: {e}"),
    };
    Err(why)
}

/// When set, [`input_file`] checks no file: the examples' unit test parses command lines that name files of
/// a user's machine.
pub static SYNTAX_ONLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A TCP/UDP port, 0 to 65535 (0 where a port is opened: a free one).
pub fn port(s: &str) -> Result<u16, String> {
    match s.trim().parse::<u64>() {
        Ok(n) => u16::try_from(n).map_err(|_| format!("port {n} is not between 0 and 65535")),
        Err(_) if s.trim().starts_with('-') => Err(format!("port '{s}' must not be negative")),
        Err(_) => Err(format!(
            "port '{s}' is not a whole number between 0 and 65535"
        )),
    }
}

/// A bit rate that must be more than zero (`100Mbit/s`, `100mbit`, `100mbps`, `10M`, `1Gbit/s`).
pub fn bitrate(s: &str) -> Result<u64, String> {
    match units::parse_bitrate(s).map_err(|e| e.to_string())? {
        0 => Err(format!("bit rate '{s}' must be more than 0")),
        r => Ok(r),
    }
}

/// A byte count that must be more than zero.
pub fn positive_size(s: &str) -> Result<u64, String> {
    match size(s)? {
        0 => Err(format!("'{s}' must be more than 0 bytes")),
        n => Ok(n),
    }
}

/// An emulated TCP window (`--window`): a byte count in
/// [`WINDOW_BYTES`](roundtrip::proxy::impairment::WINDOW_BYTES), the range the control API's `window_bytes`
/// has too.
pub fn window_size(s: &str) -> Result<u64, String> {
    use roundtrip::proxy::impairment::{WINDOW_BYTES, check_bytes};
    check_bytes("--window", size(s)?, &WINDOW_BYTES)
}

/// The bridge's queue bound per direction (`--queue-limit`): a byte count in
/// [`QUEUE_LIMIT_BYTES`](roundtrip::proxy::bridge::QUEUE_LIMIT_BYTES), the range the control API's
/// `queue_limit_bytes` has too.
pub fn queue_limit(s: &str) -> Result<u64, String> {
    use roundtrip::proxy::{bridge::QUEUE_LIMIT_BYTES, impairment::check_bytes};
    check_bytes("--queue-limit", size(s)?, &QUEUE_LIMIT_BYTES)
}

/// A probability (`0.01`, `1e-4`, `1%`).
pub fn probability(s: &str) -> Result<f64, String> {
    units::parse_probability(s).map_err(|e| e.to_string())
}

/// A duration or a byte count, more than zero (`5s`, `64KiB`).
pub fn duration_or_size(s: &str) -> Result<units::DurationOrSize, String> {
    match units::parse_duration_or_size(s).map_err(|e| e.to_string())? {
        units::DurationOrSize::Duration(d) if d.is_zero() => {
            Err(format!("'{s}' must be more than 0"))
        }
        units::DurationOrSize::Bytes(0) => Err(format!("'{s}' must be more than 0 bytes")),
        v => Ok(v),
    }
}

/// A local socket address to listen on (`127.0.0.1:8000`, `[::1]:8000`, `0.0.0.0:0`).
pub fn listen_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    s.parse().map_err(|_| {
        format!("'{s}' is not an address to listen on: give IP:PORT, e.g. 127.0.0.1:8000 or [::]:8000 (port 0: any)")
    })
}

/// The address family chosen by the `-4` / `-6` flags every network command takes.
pub fn family(ipv4: bool, ipv6: bool) -> Family {
    match (ipv4, ipv6) {
        (true, _) => Family::V4,
        (_, true) => Family::V6,
        _ => Family::Any,
    }
}

/// A number more than zero (`2`, `4.5`).
pub fn positive_f64(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("'{s}' is not a number more than 0")),
    }
}
