//! Delay samples for `--delay-from`: round-trip times read from a roundtrip result, a CSV or a text file,
//! turned into one-way delays.

use super::MAX_SAMPLES;

/// Reads one-way delay samples for `--delay-from`: from a roundtrip `--json` result (every `rtt_ns` /
/// `*_rtt_ns` number, or the `samples_ns` array, found anywhere in it), from a CSV whose header has an `rtt_ns`
/// column (`roundtrip ping --full-log`), or from a text file of round-trip times, one per line, with a unit (`12.5ms`, `800us`) or in milliseconds without one. Each round trip
/// becomes a one-way delay of half of it.
pub fn delay_samples(text: &str) -> Result<Vec<u64>, String> {
    let mut rtts: Vec<u64> = Vec::new();
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
        fn walk(v: &serde_json::Value, out: &mut Vec<u64>) {
            match v {
                serde_json::Value::Object(m) => {
                    for (k, x) in m {
                        if (k == "rtt_ns" || k.ends_with("_rtt_ns")) && x.is_u64() {
                            out.push(x.as_u64().unwrap_or(0));
                        } else if k == "samples_ns" || k == "rtts_ns" {
                            if let Some(a) = x.as_array() {
                                out.extend(a.iter().filter_map(|s| s.as_u64()));
                            }
                        } else {
                            walk(x, out);
                        }
                    }
                }
                serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
                _ => {}
            }
        }
        walk(&v, &mut rtts);
    } else if let Some(col) = text
        .lines()
        .next()
        .and_then(|h| h.split(',').position(|c| c.trim() == "rtt_ns"))
    {
        // A CSV with an rtt_ns column (`roundtrip ping --full-log`).
        for (i, line) in text.lines().enumerate().skip(1) {
            let Some(v) = line.split(',').nth(col).map(str::trim) else {
                continue;
            };
            if v.is_empty() {
                continue;
            }
            rtts.push(v.parse::<u64>().map_err(|_| {
                format!(
                    "line {}: rtt_ns '{v}' is not a whole number of nanoseconds",
                    i + 1
                )
            })?);
        }
    } else {
        for (i, line) in text.lines().enumerate() {
            let l = line.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let ns = match l.parse::<f64>() {
                Ok(ms) if ms >= 0.0 && ms.is_finite() => (ms * 1e6) as u64,
                _ => crate::units::parse_duration(l)
                    .map_err(|e| format!("line {}: '{l}' is not a round-trip time ({e})", i + 1))?
                    .as_nanos() as u64,
            };
            rtts.push(ns);
        }
    }
    one_way_delays(rtts).ok_or_else(|| {
        "no round-trip times in it (expected a roundtrip --json result or one RTT per line)".into()
    })
}

/// One-way delays (half of each round trip, zeros dropped, evenly thinned to [`MAX_SAMPLES`]) from round-trip
/// times in nanoseconds; `None` when none is left.
pub fn one_way_delays(mut rtts: Vec<u64>) -> Option<Vec<u64>> {
    rtts.retain(|&r| r > 0);
    if rtts.is_empty() {
        return None;
    }
    if rtts.len() > MAX_SAMPLES {
        // An even thinning keeps the distribution.
        let step = rtts.len().div_ceil(MAX_SAMPLES);
        rtts = rtts.into_iter().step_by(step).collect();
    }
    Some(rtts.into_iter().map(|r| r / 2).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_samples_from_json_and_text() {
        let j =
            r#"{"rounds": [{"rtt_ns": 2000000}, {"rtt_ns": 4000000}], "summary": {"p50_ns": 1}}"#;
        assert_eq!(delay_samples(j).unwrap(), vec![1_000_000, 2_000_000]);
        assert_eq!(
            delay_samples("# rtts\n10\n800us\n").unwrap(),
            vec![5_000_000, 400_000]
        );
        assert_eq!(
            delay_samples(
                "seq,send_ns,recv_ns,rtt_ns,server_ns\n1,0,10,4000000,5\n2,5,9,6000000,5\n"
            )
            .unwrap(),
            vec![2_000_000, 3_000_000]
        );
        assert!(delay_samples("seq,rtt_ns\n1,x\n").is_err());
        assert!(delay_samples("nonsense").is_err());
        assert!(delay_samples("{}").is_err());
    }
}
