//! The `roundtrip tcp` report: per connection, the kernel's RTT over time, and cwnd, bytes in flight and
//! the two windows over time with the receive-window-limited and send-buffer-limited intervals shaded.

use super::draw::{Options, Run};
use crate::doc::tcp::TcpDoc;
use crate::report::html::{Figure, Section, Table};
use crate::report::load::LoadError;
use crate::report::svg::{Axis, Chart, Mark, Series, Unit};
use crate::tcpwatch::info::TcpInfo;
use crate::tcpwatch::{ConnId, Sample};
use crate::units::{fmt_bytes, fmt_nanos};
use std::time::Duration;

/// Connections drawn per result (the busiest by bytes acknowledged).
pub const MAX_DRAWN: usize = 6;

fn share(part: Option<Duration>, whole: Option<Duration>) -> f64 {
    match (part, whole) {
        (Some(p), Some(w)) if !w.is_zero() => p.as_nanos() as f64 / w.as_nanos() as f64,
        _ => 0.0,
    }
}

/// Seconds since the watch started, from the whole nanoseconds the document holds.
fn at_s(s: &Sample) -> f64 {
    crate::units::nanos(s.at) as f64 / 1e9
}

/// RTT (and min RTT) over time of one connection.
pub fn rtt_chart(title: &str, samples: &[&Sample], opts: &Options) -> Chart {
    let mut c = Chart::new(
        title,
        Axis::linear("time since the watch started", Unit::Seconds),
        Axis::linear("RTT", Unit::Nanos),
    );
    c.width = opts.width;
    let pts = |f: fn(&TcpInfo) -> Option<Duration>| -> Vec<(f64, f64)> {
        samples
            .iter()
            .filter_map(|s| {
                let v = f(s.socket.info.as_ref()?)?;
                Some((at_s(s), crate::units::nanos(v) as f64))
            })
            .collect()
    };
    c.push(Series::new(
        "smoothed RTT (tcpi_rtt)",
        0,
        Mark::Line(pts(|i| i.rtt)),
    ));
    c.push(Series::new("min RTT", 2, Mark::Line(pts(|i| i.min_rtt))).dashed());
    c
}

/// cwnd, in flight and the windows over time of one connection, limited intervals shaded.
pub fn window_chart(title: &str, samples: &[&Sample], opts: &Options) -> Chart {
    let mut c = Chart::new(
        title,
        Axis::linear("time since the watch started", Unit::Seconds),
        Axis::linear("bytes", Unit::Bytes),
    );
    c.width = opts.width;
    let mut rwnd = Vec::new();
    let mut sndbuf = Vec::new();
    for s in samples {
        if let Some(d) = &s.delta {
            let end = at_s(s);
            let start = end - crate::units::nanos(d.elapsed) as f64 / 1e9;
            if share(d.rwnd_limited, d.busy) >= crate::tcpwatch::LIMIT_SHARE {
                rwnd.push((start, end));
            }
            if share(d.sndbuf_limited, d.busy) >= crate::tcpwatch::LIMIT_SHARE {
                sndbuf.push((start, end));
            }
        }
    }
    if !rwnd.is_empty() {
        c.push(Series::new("receiver window limited", 3, Mark::Spans(rwnd)));
    }
    if !sndbuf.is_empty() {
        c.push(Series::new("send buffer limited", 4, Mark::Spans(sndbuf)));
    }
    let pts = |f: &dyn Fn(&TcpInfo) -> Option<u64>| -> Vec<(f64, f64)> {
        samples
            .iter()
            .filter_map(|s| {
                let v = f(s.socket.info.as_ref()?)?;
                Some((at_s(s), v as f64))
            })
            .collect()
    };
    let mss = |i: &TcpInfo| i.snd_mss.map(u64::from);
    c.push(Series::new(
        "cwnd (x MSS)",
        0,
        Mark::Line(pts(&|i| Some(u64::from(i.cwnd?) * mss(i)?))),
    ));
    c.push(Series::new(
        "in flight (unacked x MSS)",
        1,
        Mark::Line(pts(&|i| Some(u64::from(i.unacked?) * mss(i)?))),
    ));
    c.push(
        Series::new(
            "peer's window (snd_wnd)",
            2,
            Mark::Step(pts(&|i| i.snd_wnd.map(u64::from))),
        )
        .dashed(),
    );
    c.push(
        Series::new(
            "own window (rcv_wnd)",
            5,
            Mark::Step(pts(&|i| i.rcv_wnd.map(u64::from))),
        )
        .dashed(),
    );
    c.note = Some(
        "Shaded: intervals where the kernel counted the connection limited for at least 20% of its busy time."
            .into(),
    );
    c
}

pub(crate) fn tcp(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<TcpDoc> = runs
        .iter()
        .map(|r| r.doc.typed::<TcpDoc>())
        .collect::<Result<_, _>>()?;
    let mut sec = Section {
        heading: "Live TCP connections (the kernel's sock_diag view)".into(),
        ..Default::default()
    };
    let mut t = Table {
        caption: "Connections".into(),
        head: [
            "result", "local", "remote", "samples", "rtt mean", "cwnd max", "verdict",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    for (r, d) in runs.iter().zip(&docs) {
        for c in &d.connections {
            t.rows.push(vec![
                r.label.clone(),
                c.conn.local.to_string(),
                format!(
                    "{}{}",
                    c.conn.remote,
                    if c.closed { " (closed)" } else { "" }
                ),
                c.samples.to_string(),
                c.rtt_mean
                    .map_or("-".into(), |v| fmt_nanos(crate::units::nanos(v) as f64)),
                c.cwnd_max.map_or("-".into(), |v| v.to_string()),
                c.verdict_words.clone(),
            ]);
        }
        // The busiest connections by bytes acknowledged at their last sample.
        let mut conns: Vec<(&ConnId, u64)> = d
            .connections
            .iter()
            .map(|c| {
                let acked = d
                    .samples
                    .iter()
                    .filter(|s| s.conn == c.conn)
                    .filter_map(|s| s.socket.info.as_ref()?.bytes_acked)
                    .max()
                    .unwrap_or(0);
                (&c.conn, acked)
            })
            .collect();
        conns.sort_by_key(|&(_, a)| std::cmp::Reverse(a));
        if conns.len() > MAX_DRAWN {
            sec.notes.push(format!(
                "{}: {} connections; the {MAX_DRAWN} that sent the most are drawn.",
                r.label,
                conns.len()
            ));
        }
        for (conn, acked) in conns.into_iter().take(MAX_DRAWN) {
            let samples: Vec<&Sample> = d.samples.iter().filter(|s| &s.conn == conn).collect();
            let name = format!(
                "{} -> {} ({} acked)",
                conn.local,
                conn.remote,
                fmt_bytes(acked)
            );
            let n = sec.figures.len();
            sec.figures.push(Figure {
                id: if n == 0 {
                    "tcp-rtt".into()
                } else {
                    format!("tcp-rtt-{}", n / 2 + 1)
                },
                chart: rtt_chart(&format!("RTT: {name}"), &samples, opts),
            });
            sec.figures.push(Figure {
                id: if n == 0 {
                    "tcp-window".into()
                } else {
                    format!("tcp-window-{}", n / 2 + 1)
                },
                chart: window_chart(&format!("cwnd, in flight, windows: {name}"), &samples, opts),
            });
        }
    }
    if docs.iter().all(|d| d.connections.is_empty()) {
        sec.notes.push("No matching connection was seen.".into());
    }
    sec.tables.push(t);
    Ok(sec)
}
