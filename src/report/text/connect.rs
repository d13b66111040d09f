//! The text of `connect` (and the DNS line `icmp` and `compare` share): one line per attempt and the DNS words.

use crate::probe::connect::{Attempt, PortState};
use crate::units::fmt_duration;
use std::time::Duration;

/// DNS time for humans: "(literal address)" when no lookup was done.
pub fn dns_words(host: &str, dns: Duration) -> String {
    if host.parse::<std::net::IpAddr>().is_ok() {
        "literal address, no DNS lookup".into()
    } else {
        format!("DNS lookup of {host} took {}", fmt_duration(dns))
    }
}

/// One attempt as a line: `seq=1    open         handshake 80us`, with the error of a filtered or unreachable
/// port after it.
pub fn attempt_line(a: &Attempt) -> String {
    let what = match (a.state, a.time) {
        (PortState::Open, Some(t)) => format!("handshake {}", fmt_duration(t)),
        (PortState::Closed, Some(t)) => format!("RST after {}", fmt_duration(t)),
        (PortState::Unreachable, Some(t)) => format!("error after {}", fmt_duration(t)),
        _ => String::new(),
    };
    let detail = match (&a.detail, a.state) {
        (Some(d), PortState::Filtered | PortState::Unreachable) => format!("  {d}"),
        _ => String::new(),
    };
    format!(
        "seq={:<4} {:<12} {what}{detail}\n",
        a.seq,
        a.state.to_string()
    )
}
