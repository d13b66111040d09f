//! The answer a report leads with: what the application pays per round trip, and how much of it is the
//! network and how much the server, in one plain sentence with its figures. Built once here from what `db`,
//! `ping` and `capture rpc` measure; the text ([`text`]) and the HTML report (the section's lead) print the
//! same words. A share got by subtraction that comes out negative is "not measurable (why)", never a negative
//! figure; a share that is not measured at all says why.

use crate::db::Attribution;
use crate::probe::ping::PeerKind;
use crate::stats::Summary;
use crate::units::fmt_nanos;

/// One figure of an answer: a named share of the round trip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// What the share is, e.g. "the network".
    pub what: String,
    /// The share, in nanoseconds; `None` when it is not measurable (see `how`).
    pub ns: Option<u64>,
    /// How it was got (the same words whether or not it is measurable).
    pub how: String,
    /// Why it is not measurable (`ns` is `None`), e.g. "ping - handshake = -24.4us".
    pub why: Option<String>,
}

/// The sentence a report opens with and the figures in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The sentence, without a trailing newline.
    pub sentence: String,
    /// The median round trip the sentence splits, in nanoseconds (`None`: nothing was measured).
    pub total_ns: Option<u64>,
    /// The shares, in the order the sentence names them.
    pub parts: Vec<Part>,
    /// Why a share is "not measurable": printed as `note:` lines right after the sentence.
    pub notes: Vec<String>,
}

/// The answer as the first line of a text result, escaped for the terminal (an operation's name comes from
/// a capture).
pub fn text(a: &Answer) -> String {
    let mut out = format!("{}\n", crate::terminal::escape_for_terminal(&a.sentence));
    for n in &a.notes {
        out.push_str(&format!(
            "note: {}\n",
            crate::terminal::escape_for_terminal(n)
        ));
    }
    out
}

/// The answer as the HTML report's lead: the sentence, then its `note:` lines, each after the result's label
/// when the section compares several results (escaped when the page is rendered).
pub fn lead(label: &str, several: bool, a: &Answer) -> Vec<String> {
    std::iter::once(a.sentence.clone())
        .chain(a.notes.iter().map(|n| format!("note: {n}")))
        .map(|l| if several { format!("{label}: {l}") } else { l })
        .collect()
}

/// A share got by subtraction: `a - b`, or not measurable when negative, saying by how much.
fn difference(what: &str, a: u64, b: u64, how: &str) -> Part {
    Part {
        what: what.into(),
        ns: a.checked_sub(b),
        how: how.into(),
        why: (a < b).then(|| format!("{how} = -{}", fmt_nanos((b - a) as f64))),
    }
}

/// A measured share.
fn measured(what: &str, ns: u64, how: &str) -> Part {
    Part {
        what: what.into(),
        ns: Some(ns),
        how: how.into(),
        why: None,
    }
}

/// "of the X median NAME, A is P1 (how), B P2 (how), ..."; a share not measurable reads "not measurable" in
/// place of its figure (the same words either way), and the note says why.
fn split(total_ns: u64, name: &str, parts: Vec<Part>) -> Answer {
    let shown: Vec<String> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let verb = if i == 0 { " is" } else { "" };
            let figure =
                p.ns.map_or_else(|| "not measurable".to_string(), |ns| fmt_nanos(ns as f64));
            format!("{figure}{verb} {} ({})", p.what, p.how)
        })
        .collect();
    let whys: Vec<&str> = parts.iter().filter_map(|p| p.why.as_deref()).collect();
    let notes = if whys.is_empty() {
        Vec::new()
    } else {
        vec![format!(
            "a part shown as \"not measurable\" came out negative ({}): the two medians it subtracts differ \
             by less than their own variation here, so that part is too small to separate",
            whys.join(", ")
        )]
    };
    Answer {
        sentence: format!(
            "of the {} median {name}, {}",
            fmt_nanos(total_ns as f64),
            shown.join(", ")
        ),
        total_ns: Some(total_ns),
        parts,
        notes,
    }
}

fn nothing(sentence: &str) -> Answer {
    Answer {
        sentence: sentence.into(),
        total_ns: None,
        parts: Vec::new(),
        notes: Vec::new(),
    }
}

/// `roundtrip db`: the median query round trip (the ping's, when no query ran) split by the attribution into
/// the network (TCP handshake), the protocol and server (ping - handshake) and the statement (query - ping).
/// With a database link, the round trip through the link and the client's own leg.
pub fn db(
    attribution: Option<&Attribution>,
    ping: &Summary,
    query: &Summary,
    link_round_trip: Option<&Summary>,
) -> Answer {
    if let Some(l) = link_round_trip {
        if l.count == 0 {
            return nothing(
                "no call through the link was timed, so there is no round trip to split",
            );
        }
        let mut parts = vec![measured(
            "the link",
            l.p50_ns,
            "round trip from the local database to the remote one, timed inside it",
        )];
        let mut sentence = format!(
            "the median round trip through the link is {}, timed inside the local database",
            fmt_nanos(l.p50_ns as f64)
        );
        if ping.count > 0 {
            sentence.push_str(&format!(
                "; the client's own leg to the local database is {} (ping)",
                fmt_nanos(ping.p50_ns as f64)
            ));
            parts.push(measured("the client's leg", ping.p50_ns, "ping"));
        }
        return Answer {
            sentence,
            total_ns: Some(l.p50_ns),
            parts,
            notes: Vec::new(),
        };
    }
    let (name, total) = if query.count > 0 {
        ("query round trip", query.p50_ns)
    } else if ping.count > 0 {
        ("ping round trip", ping.p50_ns)
    } else {
        return nothing("no ping or query was timed, so there is no round trip to split");
    };
    let Some(a) = attribution else {
        return Answer {
            sentence: format!(
                "the median {name} is {}; the network's share is not measured: no TCP handshake was timed",
                fmt_nanos(total as f64)
            ),
            total_ns: Some(total),
            parts: Vec::new(),
            notes: Vec::new(),
        };
    };
    let hs = a.network_ns;
    let ping_ns = (hs as i64 + a.protocol_server_ns).max(0) as u64;
    // On loopback a fresh connection's handshake can take longer than a warm connection's ping: the
    // protocol and server's share is then "not measurable", and the note says by how much.
    let mut parts = vec![
        measured("the network", hs, "TCP handshake"),
        difference("the protocol and server", ping_ns, hs, "ping - handshake"),
    ];
    if let Some(s) = a.statement_ns {
        let query_ns = (ping_ns as i64 + s).max(0) as u64;
        parts.push(difference(
            "the statement",
            query_ns,
            ping_ns,
            "query - ping",
        ));
    }
    split(total, name, parts)
}

/// `roundtrip ping`: the median round trip split into the server's turnaround (its own timestamps) and the
/// rest (the network and both TCP/IP stacks); when the server reports no time, what is known and why.
pub fn ping(rtt: &Summary, server: Option<&Summary>, peer: PeerKind) -> Answer {
    if rtt.count == 0 {
        return nothing("no round trip was answered, so there is no round trip to split");
    }
    let total = rtt.p50_ns;
    match server.filter(|s| s.count > 0) {
        Some(s) => split(
            total,
            "round trip",
            vec![
                difference(
                    "the network and both TCP/IP stacks",
                    total,
                    s.p50_ns,
                    "round trip - server",
                ),
                measured("the server", s.p50_ns, "its own timestamps"),
            ],
        ),
        None => {
            let why = match peer {
                PeerKind::Sockperf => "sockperf does not report it",
                PeerKind::Unknown => "this server does not report it (a roundtrip server does)",
                PeerKind::Roundtrip => "the server sent no timestamps",
            };
            Answer {
                sentence: format!(
                    "the median round trip is {}; the server's share is not measured: {why}",
                    fmt_nanos(total as f64)
                ),
                total_ns: Some(total),
                parts: Vec::new(),
                notes: Vec::new(),
            }
        }
    }
}

/// One operation of `capture rpc`: its name, its time to the first response byte and to the last.
#[derive(Debug, Clone, Copy)]
pub struct RpcOp<'a> {
    /// The operation's name.
    pub op: &'a str,
    /// Request end to the first response packet; `None` when not known.
    pub first_byte: Option<&'a Summary>,
    /// Request end to the last response packet.
    pub last_byte: &'a Summary,
}

/// `capture rpc`: the busiest operation's median time to the last byte split into the time to the first
/// response byte (server and network together: one capture point cannot separate them; `capture match`
/// does) and the transfer of the rest.
pub fn rpc(ops: &[RpcOp]) -> Answer {
    let total_count: u64 = ops.iter().map(|o| o.last_byte.count).sum();
    // The busiest; of equally busy ones, the first listed.
    let Some(o) = ops
        .iter()
        .rev()
        .filter(|o| o.last_byte.count > 0)
        .max_by_key(|o| o.last_byte.count)
    else {
        return nothing("no request was answered, so there is no round trip to split");
    };
    let total = o.last_byte.p50_ns;
    let name = format!(
        "time to the last byte of {} ({} of {} requests)",
        o.op, o.last_byte.count, total_count
    );
    match o.first_byte.filter(|f| f.count > 0) {
        Some(f) => split(
            total,
            &name,
            vec![
                measured(
                    "the server and the network together",
                    f.p50_ns.min(total),
                    "to the first response byte; one capture point cannot split them",
                ),
                difference("the transfer of the rest", total, f.p50_ns, "last - first"),
            ],
        ),
        None => Answer {
            sentence: format!(
                "the median {name} is {}; the server's share is not measured: the time to the first \
                 response byte is not known",
                fmt_nanos(total as f64)
            ),
            total_ns: Some(total),
            parts: Vec::new(),
            notes: Vec::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(p50_ns: u64, count: u64) -> Summary {
        Summary {
            count,
            p50_ns,
            ..Default::default()
        }
    }

    #[test]
    fn db_splits_the_query_median() {
        let a = Attribution {
            network_ns: 850_000,
            protocol_server_ns: 300_000,
            statement_ns: Some(50_000),
        };
        let r = db(Some(&a), &s(1_150_000, 10), &s(1_200_000, 10), None);
        assert_eq!(
            text(&r),
            "of the 1.20ms median query round trip, 850us is the network (TCP handshake), 300us the protocol \
             and server (ping - handshake), 50.0us the statement (query - ping)\n"
        );
        assert_eq!(r.total_ns, Some(1_200_000));
        assert_eq!(r.parts[2].ns, Some(50_000));
    }

    #[test]
    fn db_negative_share_is_not_measurable() {
        // Loopback: the fresh connection's handshake took longer than the warm connection's ping.
        let a = Attribution {
            network_ns: 100_000,
            protocol_server_ns: -20_000,
            statement_ns: Some(40_000),
        };
        let r = db(Some(&a), &s(80_000, 10), &s(120_000, 10), None);
        assert_eq!(
            text(&r),
            "of the 120us median query round trip, 100us is the network (TCP handshake), not measurable the \
             protocol and server (ping - handshake), 40.0us the statement (query - ping)\n\
             note: a part shown as \"not measurable\" came out negative (ping - handshake = -20.0us): the two \
             medians it subtracts differ by less than their own variation here, so that part is too small to \
             separate\n"
        );
        assert_eq!(r.parts[1].ns, None);
        assert!(!r.sentence.contains("-20"));
        let a = Attribution {
            network_ns: 50_000,
            protocol_server_ns: 30_000,
            statement_ns: Some(-2_000),
        };
        let r = db(Some(&a), &s(80_000, 10), &s(78_000, 10), None);
        assert_eq!(
            r.sentence,
            "of the 78.0us median query round trip, 50.0us is the network (TCP handshake), 30.0us the protocol \
             and server (ping - handshake), not measurable the statement (query - ping)"
        );
        assert_eq!(r.parts[2].ns, None);
        assert_eq!(r.parts[2].why.as_deref(), Some("query - ping = -2.00us"));
        assert_eq!(
            lead("a.json", true, &r)[1],
            "a.json: note: a part shown as \"not measurable\" came out negative (query - ping = -2.00us): the two \
             medians it subtracts differ by less than their own variation here, so that part is too small to \
             separate"
        );
    }

    #[test]
    fn db_without_handshake_or_query() {
        let r = db(None, &s(300_000, 5), &s(0, 0), None);
        assert_eq!(
            r.sentence,
            "the median ping round trip is 300us; the network's share is not measured: no TCP handshake was timed"
        );
        let r = db(None, &s(0, 0), &s(0, 0), None);
        assert_eq!(r.total_ns, None);
        let r = db(None, &s(200_000, 5), &s(0, 0), Some(&s(1_500_000, 9)));
        assert_eq!(
            r.sentence,
            "the median round trip through the link is 1.50ms, timed inside the local database; the client's \
             own leg to the local database is 200us (ping)"
        );
    }

    #[test]
    fn ping_splits_with_server_time() {
        let r = ping(&s(1_200_000, 9), Some(&s(300_000, 9)), PeerKind::Roundtrip);
        assert_eq!(
            text(&r),
            "of the 1.20ms median round trip, 900us is the network and both TCP/IP stacks (round trip - \
             server), 300us the server (its own timestamps)\n"
        );
    }

    #[test]
    fn ping_negative_and_unmeasured() {
        let r = ping(&s(100, 9), Some(&s(150, 9)), PeerKind::Roundtrip);
        assert_eq!(
            r.sentence,
            "of the 100ns median round trip, not measurable is the network and both TCP/IP stacks (round trip - \
             server), 150ns the server (its own timestamps)"
        );
        assert_eq!(r.notes.len(), 1);
        assert!(
            r.notes[0].contains("(round trip - server = -50ns)"),
            "{:?}",
            r.notes
        );
        let r = ping(&s(1_200_000, 9), None, PeerKind::Sockperf);
        assert_eq!(
            r.sentence,
            "the median round trip is 1.20ms; the server's share is not measured: sockperf does not report it"
        );
        assert_eq!(ping(&s(0, 0), None, PeerKind::Unknown).total_ns, None);
    }

    #[test]
    fn rpc_takes_the_busiest_operation() {
        let (f1, l1, l2) = (s(150_000, 90), s(200_000, 90), s(900_000, 10));
        let ops = [
            RpcOp {
                op: "INSERT",
                first_byte: None,
                last_byte: &l2,
            },
            RpcOp {
                op: "SELECT",
                first_byte: Some(&f1),
                last_byte: &l1,
            },
        ];
        assert_eq!(
            rpc(&ops).sentence,
            "of the 200us median time to the last byte of SELECT (90 of 100 requests), 150us is the server and \
             the network together (to the first response byte; one capture point cannot split them), 50.0us the \
             transfer of the rest (last - first)"
        );
        assert_eq!(
            rpc(&ops[..1]).sentence,
            "the median time to the last byte of INSERT (10 of 10 requests) is 900us; the server's share is not \
             measured: the time to the first response byte is not known"
        );
        assert_eq!(rpc(&[]).total_ns, None);
    }
}
