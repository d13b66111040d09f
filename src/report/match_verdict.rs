//! The words of `capture match`'s verdict: the engine ([`crate::capture::matching`]) returns a
//! [`Verdict`] with the figures it rests on; [`words`] says it in one line, for the terminal, the JSON document
//! and the HTML page.

use crate::capture::matching::{PathTime, ThroughBox, Verdict};
use crate::units::fmt_nanos;

/// The verdict in one line.
pub fn words(v: &Verdict) -> String {
    match v {
        Verdict::NothingToCompare {
            client_requests,
            server_requests,
        } => format!(
            "nothing to compare: {client_requests} requests in the client capture, {server_requests} in the \
             server capture"
        ),
        Verdict::Unrelated {
            matched,
            client_requests,
            server_requests,
        } => format!(
            "the two captures do not show the same traffic: {matched} of {client_requests} client requests have \
             a counterpart (same XID, TCP sequence number or request content at a consistent time) among \
             {server_requests} server requests"
        ),
        Verdict::NoneMatched { through_box } => {
            let mut s = String::from("no request matched");
            push_box(&mut s, through_box);
            s
        }
        Verdict::Matched {
            op,
            op_matched,
            server_mean_ns,
            path,
            clock_offset_ns,
            through_box,
        } => {
            let mut s = format!(
                "server adds {} per {op} (mean, {op_matched} matched); ",
                fmt_nanos(*server_mean_ns)
            );
            match path {
                PathTime::ClientSawLess { ns } => s.push_str(&format!(
                    "the client capture saw {} less per request than the server capture: are the files swapped?",
                    fmt_nanos(*ns)
                )),
                PathTime::Adds { ns } => s.push_str(&format!(
                    "the path between the captures adds {}",
                    fmt_nanos(*ns)
                )),
            }
            if let Some(o) = clock_offset_ns {
                let side = if *o < 0 { "behind" } else { "ahead of" };
                s.push_str(&format!(
                    "; server clock {} {side} the client's",
                    fmt_nanos(o.unsigned_abs() as f64)
                ));
            }
            push_box(&mut s, through_box);
            s
        }
    }
}

/// The clause on a TCP-terminating box between the capture points.
fn push_box(s: &mut String, through_box: &Option<ThroughBox>) {
    if let Some(b) = through_box {
        s.push_str(&format!(
            "; {} of {} pairs found by content or order, not by TCP sequence number or XID: a TCP-terminating \
             box (proxy, load balancer, pooler) sits between the capture points, and its time is in the path's",
            b.by_content_or_order, b.matched
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matched(
        path: PathTime,
        clock_offset_ns: Option<i128>,
        through_box: Option<ThroughBox>,
    ) -> Verdict {
        Verdict::Matched {
            op: "SELECT".into(),
            op_matched: 20,
            server_mean_ns: 5e6,
            path,
            clock_offset_ns,
            through_box,
        }
    }

    #[test]
    fn nothing_to_compare() {
        assert_eq!(
            words(&Verdict::NothingToCompare {
                client_requests: 3,
                server_requests: 0
            }),
            "nothing to compare: 3 requests in the client capture, 0 in the server capture"
        );
    }

    #[test]
    fn unrelated() {
        assert_eq!(
            words(&Verdict::Unrelated {
                matched: 2,
                client_requests: 56,
                server_requests: 40
            }),
            "the two captures do not show the same traffic: 2 of 56 client requests have a counterpart (same \
             XID, TCP sequence number or request content at a consistent time) among 40 server requests"
        );
    }

    #[test]
    fn none_matched_with_and_without_a_box() {
        assert_eq!(
            words(&Verdict::NoneMatched { through_box: None }),
            "no request matched"
        );
        assert_eq!(
            words(&Verdict::NoneMatched {
                through_box: Some(ThroughBox {
                    by_content_or_order: 1,
                    matched: 4
                })
            }),
            "no request matched; 1 of 4 pairs found by content or order, not by TCP sequence number or XID: a \
             TCP-terminating box (proxy, load balancer, pooler) sits between the capture points, and its time is \
             in the path's"
        );
    }

    #[test]
    fn matched_path_adds_server_clock_ahead() {
        assert_eq!(
            words(&matched(
                PathTime::Adds { ns: 20e6 },
                Some(1_000_000_000),
                None
            )),
            "server adds 5.00ms per SELECT (mean, 20 matched); the path between the captures adds 20.0ms; \
             server clock 1.00s ahead of the client's"
        );
        // A zero offset is said as ahead, as before.
        assert!(
            words(&matched(PathTime::Adds { ns: 0.0 }, Some(0), None))
                .ends_with("; server clock 0ns ahead of the client's")
        );
    }

    #[test]
    fn matched_client_saw_less_server_clock_behind_through_a_box() {
        let w = words(&matched(
            PathTime::ClientSawLess { ns: 1e6 },
            Some(-1_500_000),
            Some(ThroughBox {
                by_content_or_order: 19,
                matched: 20,
            }),
        ));
        assert_eq!(
            w,
            "server adds 5.00ms per SELECT (mean, 20 matched); the client capture saw 1.00ms less per request \
             than the server capture: are the files swapped?; server clock 1.50ms behind the client's; 19 of \
             20 pairs found by content or order, not by TCP sequence number or XID: a TCP-terminating box \
             (proxy, load balancer, pooler) sits between the capture points, and its time is in the path's"
        );
        assert!(!w.contains("adds 0") && !w.contains("captures adds"));
    }

    #[test]
    fn matched_without_a_clock_offset() {
        assert_eq!(
            words(&matched(PathTime::Adds { ns: 1500.0 }, None, None)),
            "server adds 5.00ms per SELECT (mean, 20 matched); the path between the captures adds 1.50us"
        );
    }
}
