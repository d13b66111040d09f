//! Strict parsers for the quantities users type: durations, byte sizes, message rates and bit rates; and
//! [`ser`], the serde helpers that write a duration in the unit its JSON field name carries.
//!
//! Every quantity must carry its unit where a bare number would be ambiguous (`10s`, not `10`), negative
//! values are refused, and the error says which unit spellings are accepted. Byte sizes follow iperf3 and
//! dd: `k`/`K`/`KiB` mean 1024, `kB`/`KB` mean 1000. Bit rates follow tc: `kbit` is 1000 bit/s.
#![forbid(unsafe_code)]

pub mod ser;

use std::time::Duration;
use thiserror::Error;

/// A quantity that could not be parsed, with the text and the accepted spellings.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("invalid {what} '{text}': {why} (accepted: {accepted})")]
pub struct UnitError {
    /// What kind of quantity was expected ("duration", "size", ...).
    pub what: &'static str,
    /// The text the user gave.
    pub text: String,
    /// What was wrong with it.
    pub why: String,
    /// The accepted spellings, for the message.
    pub accepted: &'static str,
}

const DURATION_UNITS: &str = "a number with ns, us, ms, s, m or h, e.g. 500us, 1.5ms, 10s";
const SIZE_UNITS: &str = "bytes as a number, or with B, k/KiB (1024), M/MiB, G/GiB, kB (1000), MB, GB, e.g. 64, 1k, 4MiB";
const RATE_UNITS: &str =
    "messages per second as a number with optional k/M and optional /s, e.g. 1000, 10k/s";
const BITRATE_UNITS: &str = "bit/s with a unit: bit, kbit, Mbit, Gbit, Tbit, optionally with /s (1Gbit/s), or bps, kbps, Mbps, Gbps, or k, M, G, T alone (any case), e.g. 100Mbit/s, 100mbit, 100mbps, 10M, 1Gbit/s";

/// Splits "12.5ms" into (12.5, "ms"); refuses signs, empty numbers and non-finite values.
fn split_number<'a>(
    text: &'a str,
    what: &'static str,
    accepted: &'static str,
) -> Result<(f64, &'a str), UnitError> {
    let err = |why: &str| UnitError {
        what,
        text: text.to_string(),
        why: why.to_string(),
        accepted,
    };
    let t = text.trim();
    if t.is_empty() {
        return Err(err("empty value"));
    }
    if t.starts_with('-') {
        return Err(err("must not be negative"));
    }
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(end);
    let num: String = num.chars().filter(|&c| c != '_').collect();
    if num.is_empty() {
        return Err(err("no number"));
    }
    let value: f64 = num.parse().map_err(|_| err("not a number"))?;
    if !value.is_finite() {
        return Err(err("not a finite number"));
    }
    Ok((value, unit.trim()))
}

/// Parses a duration such as `500us`, `1.5ms`, `10s`, `2m`. A unit is required; `0` alone is accepted.
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let (value, unit) = split_number(text, "duration", DURATION_UNITS)?;
    let scale_ns = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" | "sec" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        "" if value == 0.0 => 1.0,
        "" => {
            return Err(UnitError {
                what: "duration",
                text: text.to_string(),
                why: "a unit is required".into(),
                accepted: DURATION_UNITS,
            });
        }
        _ => {
            return Err(UnitError {
                what: "duration",
                text: text.to_string(),
                why: format!("unknown unit '{unit}'"),
                accepted: DURATION_UNITS,
            });
        }
    };
    let ns = value * scale_ns;
    if ns > 1e18 {
        return Err(UnitError {
            what: "duration",
            text: text.to_string(),
            why: "too large".into(),
            accepted: DURATION_UNITS,
        });
    }
    Ok(Duration::from_nanos(ns.round() as u64))
}

/// Parses a byte count such as `64`, `1k` (1024), `4MiB`, `1kB` (1000).
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    let (value, unit) = split_number(text, "size", SIZE_UNITS)?;
    let scale: f64 = match unit {
        "" | "B" | "b" => 1.0,
        "k" | "K" | "KiB" | "kiB" | "Ki" => 1024.0,
        "M" | "MiB" | "Mi" | "m" => 1024.0 * 1024.0,
        "G" | "GiB" | "Gi" | "g" => 1024.0 * 1024.0 * 1024.0,
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        _ => {
            return Err(UnitError {
                what: "size",
                text: text.to_string(),
                why: format!("unknown unit '{unit}'"),
                accepted: SIZE_UNITS,
            });
        }
    };
    let bytes = value * scale;
    if bytes.fract() != 0.0 {
        return Err(UnitError {
            what: "size",
            text: text.to_string(),
            why: "not a whole number of bytes".into(),
            accepted: SIZE_UNITS,
        });
    }
    if bytes > u64::MAX as f64 / 2.0 {
        return Err(UnitError {
            what: "size",
            text: text.to_string(),
            why: "too large".into(),
            accepted: SIZE_UNITS,
        });
    }
    Ok(bytes as u64)
}

/// Parses a message rate such as `1000`, `10k`, `10k/s`, `1.5M/s`; returns messages per second.
pub fn parse_rate(text: &str) -> Result<f64, UnitError> {
    let t = text.trim();
    let t = t.strip_suffix("/s").unwrap_or(t);
    let (value, unit) = split_number(t, "rate", RATE_UNITS).map_err(|mut e| {
        e.text = text.to_string();
        e
    })?;
    let scale = match unit {
        "" => 1.0,
        "k" | "K" => 1e3,
        "M" | "m" => 1e6,
        _ => {
            return Err(UnitError {
                what: "rate",
                text: text.to_string(),
                why: format!("unknown unit '{unit}'"),
                accepted: RATE_UNITS,
            });
        }
    };
    Ok(value * scale)
}

/// Parses a bit rate such as `100Mbit/s`, `100mbit`, `100mbps`, `10M` or `1gbit` (any case; decimal
/// prefixes); returns bits per second.
pub fn parse_bitrate(text: &str) -> Result<u64, UnitError> {
    let (value, unit) = split_number(text, "bit rate", BITRATE_UNITS)?;
    let lower = unit.trim().to_ascii_lowercase();
    let u = lower.strip_suffix("/s").unwrap_or(&lower);
    let prefix = u
        .strip_suffix("bits")
        .or_else(|| u.strip_suffix("bit"))
        .or_else(|| u.strip_suffix("bps"))
        .unwrap_or(u);
    // A bare prefix (`10M`) counts bits, as iperf3's -b does; a unit is still required (`100` is refused).
    let scale = match prefix {
        _ if u.is_empty() => None,
        "" => Some(1.0),
        "k" => Some(1e3),
        "m" => Some(1e6),
        "g" => Some(1e9),
        "t" => Some(1e12),
        _ => None,
    };
    let Some(scale) = scale else {
        return Err(UnitError {
            what: "bit rate",
            text: text.to_string(),
            why: if u.is_empty() {
                "a unit is required".into()
            } else {
                format!("unknown unit '{}'", unit.trim())
            },
            accepted: BITRATE_UNITS,
        });
    };
    Ok((value * scale).round() as u64)
}

const PROBABILITY_UNITS: &str = "a probability from 0 to 1 or a percentage, e.g. 0.01, 1e-4, 1%";

/// Parses a probability: `0.01`, `1e-4` or `1%`; must lie in 0..=1 (0..=100%).
pub fn parse_probability(text: &str) -> Result<f64, UnitError> {
    let err = |why: &str| UnitError {
        what: "probability",
        text: text.to_string(),
        why: why.to_string(),
        accepted: PROBABILITY_UNITS,
    };
    let t = text.trim();
    if t.is_empty() {
        return Err(err("empty value"));
    }
    if t.starts_with('-') {
        return Err(err("must not be negative"));
    }
    let (num, scale) = match t.strip_suffix('%') {
        Some(n) => (n.trim(), 0.01),
        None => (t, 1.0),
    };
    if num.is_empty()
        || !num
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-' | '+'))
    {
        return Err(err("not a number"));
    }
    let v: f64 = num.parse().map_err(|_| err("not a number"))?;
    let p = v * scale;
    if !p.is_finite() || !(0.0..=1.0).contains(&p) {
        return Err(err("must be between 0 and 1 (0% and 100%)"));
    }
    Ok(p)
}

/// A quantity that is either a time or a byte count (fault triggers such as `--reset-after 5s|64KiB`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationOrSize {
    /// A duration (had a time unit).
    Duration(Duration),
    /// A byte count (a bare number or a size unit).
    Bytes(u64),
}

/// Parses `5s`, `250ms` (a duration) or `1000`, `64KiB`, `1MB` (bytes). Time units win: `10m` is ten
/// minutes, write `10MiB` for bytes.
pub fn parse_duration_or_size(text: &str) -> Result<DurationOrSize, UnitError> {
    let t = text.trim();
    let unit_start = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let unit = t[unit_start..].trim();
    if matches!(
        unit,
        "ns" | "us" | "µs" | "ms" | "s" | "sec" | "m" | "min" | "h"
    ) {
        return parse_duration(t).map(DurationOrSize::Duration);
    }
    parse_size(t).map(DurationOrSize::Bytes).map_err(|mut e| {
        e.what = "duration or size";
        e.accepted = "a duration (500ms, 5s) or a byte count (1000, 64KiB, 1MB)";
        e
    })
}

/// `d` in whole nanoseconds, `u64::MAX` past it (as `u64::try_from(d.as_nanos())` saturated, without 128-bit
/// arithmetic: the rpc statistics call it per request).
#[inline]
pub fn nanos(d: Duration) -> u64 {
    d.as_secs()
        .checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(u64::from(d.subsec_nanos())))
        .unwrap_or(u64::MAX)
}

/// Formats a duration for humans with three significant digits and a unit: `812ns`, `41.3us`, `1.25ms`, `2.00s`.
pub fn fmt_duration(d: Duration) -> String {
    fmt_nanos(d.as_nanos() as f64)
}

/// Formats a nanosecond value (possibly fractional, e.g. a mean) like [`fmt_duration`].
pub fn fmt_nanos(ns: f64) -> String {
    let (v, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "us")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    if unit == "ns" || v >= 100.0 {
        format!("{v:.0}{unit}")
    } else if v >= 10.0 {
        format!("{v:.1}{unit}")
    } else {
        format!("{v:.2}{unit}")
    }
}

/// Formats a byte count with a binary unit: `64 B`, `1.0 KiB`, `12.5 MiB`.
pub fn fmt_bytes(bytes: u64) -> String {
    let b = bytes as f64;
    if bytes < 1024 {
        format!("{bytes} B")
    } else if b < 1024.0 * 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else if b < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.1} MiB", b / 1024.0 / 1024.0)
    } else {
        format!("{:.2} GiB", b / 1024.0 / 1024.0 / 1024.0)
    }
}

/// Formats a byte count exactly, for limits in messages: `14 bytes`, `256 KiB`, `65507 bytes`.
pub fn fmt_bytes_exact(bytes: u64) -> String {
    match bytes {
        0 => "0 bytes".into(),
        b if b % (1024 * 1024) == 0 => format!("{} MiB", b / 1024 / 1024),
        b if b % 1024 == 0 => format!("{} KiB", b / 1024),
        1 => "1 byte".into(),
        b => format!("{b} bytes"),
    }
}

/// The civil (proleptic Gregorian) date `(year, month, day)` of a day counted from 1970-01-01, by Howard
/// Hinnant's `civil_from_days` algorithm; used to print UTC times without a date library.
pub fn civil_date(days_since_epoch: i64) -> (i64, i64, i64) {
    let z = days_since_epoch + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(
            parse_duration("1.5ms").unwrap(),
            Duration::from_micros(1500)
        );
        assert_eq!(parse_duration("500us").unwrap(), Duration::from_micros(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("10").unwrap_err().why.contains("unit"));
        assert!(parse_duration("-1s").unwrap_err().why.contains("negative"));
        assert!(parse_duration("1parsec").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("ms").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64").unwrap(), 64);
        assert_eq!(parse_size("1k").unwrap(), 1024);
        assert_eq!(parse_size("4MiB").unwrap(), 4 << 20);
        assert_eq!(parse_size("1kB").unwrap(), 1000);
        assert_eq!(parse_size("1.5k").unwrap(), 1536);
        assert!(parse_size("1.5").is_err());
        assert!(parse_size("-5").is_err());
        assert!(parse_size("5 parsecs").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("1000").unwrap(), 1000.0);
        assert_eq!(parse_rate("10k/s").unwrap(), 10_000.0);
        assert!(parse_rate("-3").is_err());
        assert_eq!(parse_bitrate("100mbit").unwrap(), 100_000_000);
        // Every common spelling of the same rates.
        for (text, bps) in [
            ("1Gbit/s", 1_000_000_000u64),
            ("1gbit", 1_000_000_000),
            ("1 Gbit/s", 1_000_000_000),
            ("1Gbps", 1_000_000_000),
            ("1G", 1_000_000_000),
            ("100Mbit/s", 100_000_000),
            ("100mbps", 100_000_000),
            ("100M", 100_000_000),
            ("10M", 10_000_000),
            ("2.5Gbit/s", 2_500_000_000),
            ("64kbit/s", 64_000),
            ("64k", 64_000),
            ("9600bit/s", 9_600),
            ("9600bps", 9_600),
            ("9600bits/s", 9_600),
            ("1Tbit/s", 1_000_000_000_000),
        ] {
            assert_eq!(parse_bitrate(text).unwrap(), bps, "{text}");
        }
        for bad in ["100", "100/s", "1GB/s", "1x", "1 gbytes"] {
            assert!(parse_bitrate(bad).is_err(), "{bad}");
        }
        assert!(parse_bitrate("100").is_err());
    }

    #[test]
    fn probabilities_and_triggers() {
        assert_eq!(parse_probability("0.01").unwrap(), 0.01);
        assert_eq!(parse_probability("1%").unwrap(), 0.01);
        assert_eq!(parse_probability("1e-4").unwrap(), 1e-4);
        assert!(parse_probability("1.5").is_err());
        assert!(parse_probability("-0.1").is_err());
        assert!(parse_probability("ten").is_err());
        assert!(parse_probability("200%").is_err());
        assert_eq!(
            parse_duration_or_size("5s").unwrap(),
            DurationOrSize::Duration(Duration::from_secs(5))
        );
        assert_eq!(
            parse_duration_or_size("64KiB").unwrap(),
            DurationOrSize::Bytes(65536)
        );
        assert_eq!(
            parse_duration_or_size("1000").unwrap(),
            DurationOrSize::Bytes(1000)
        );
        assert!(parse_duration_or_size("5 furlongs").is_err());
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_nanos(812.0), "812ns");
        assert_eq!(fmt_nanos(41_300.0), "41.3us");
        assert_eq!(fmt_nanos(1_250_000.0), "1.25ms");
        assert_eq!(fmt_bytes(1024), "1.0 KiB");
    }
}
