//! `roundtrip model`: latency arithmetic, each formula with its published source.

use super::args;
use super::output::{Exit, out, out_text};
use anyhow::Context;
use clap::{Args, Subcommand};
use roundtrip::model;
use roundtrip::report::json::{self, Header};
use roundtrip::report::text::Table;
use roundtrip::units::{fmt_bytes, fmt_duration, fmt_nanos};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `roundtrip model`.
#[derive(Debug, Args)]
pub struct ModelArgs {
    #[command(subcommand)]
    what: What,
    /// Print one JSON document instead of text.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum What {
    /// Where a measured TPS goes, and the TPS at other RTTs.
    ///
    /// Formula: transit per second = TPS x round trips x RTT; processing per transaction =
    /// (1 s - transit per second) / TPS; predicted TPS at RTT' = 1 / (processing + round trips x RTT');
    /// sessions needed to keep a TPS at RTT' = TPS x (processing + round trips x RTT') (Little's law, L = lambda W).
    /// Source: Frits Hoogland, "Performing in the cloud – network latency" (1000-(0.021*2356) =
    /// 950.524 ms, /2356 = 0.40 ms) and J. D. C. Little, Operations Research 9(3), 1961.
    ///
    /// Example (Hoogland's figures): roundtrip model tps --tps 2356,1567,854 --rtt 0.021ms,0.161ms,0.685ms --at 40ms
    Tps(TpsArgs),
    /// The most a window-limited TCP stream can carry.
    ///
    /// Formula: throughput = window / RTT. Source: RFC 7323 section 1.1; the blog post "Network latency matters" (40 ms took a 1 Gbit/s copy
    /// from 0.95 s to 7.2 s).
    Window(WindowArgs),
    /// The bandwidth-delay product: the window needed to fill a link.
    ///
    /// Formula: BDP = rate x RTT / 8 bytes. Source: RFC 7323 section 1.1.
    Bdp(BdpArgs),
    /// TCP throughput under random loss (Mathis et al.).
    ///
    /// Formula: throughput = MSS / RTT x C / sqrt(p), C = sqrt(3/2). Source: M. Mathis, J. Semke, J. Mahdavi,
    /// T. Ott, "The macroscopic behavior of the TCP congestion avoidance algorithm", ACM SIGCOMM CCR 27(3), 1997.
    Mathis(MathisArgs),
    /// Frames, bytes on the wire and serialisation time of a block, through store-and-forward hops.
    ///
    /// Formula: data per frame (MSS) = MTU - 52 (IPv4 20 + TCP 20 + timestamps 12); frames = ceil(bytes / MSS);
    /// wire bytes per frame = data + 52 + 18 (Ethernet header and FCS) + 20 (preamble and gap), at least
    /// 64 + 20; serialisation = wire bytes x 8 / link rate; each store-and-forward hop forwards a frame only
    /// after receiving all of it. Source: Kyle Hailey, "NFS Performance Issues at TCP level", 2014 (an 8K block is 5.7 -> 6 packets of 1448 bytes;
    /// jumbo frames), IEEE 802.3, RFC 791/793/7323.
    Transfer(TransferArgs),
}

/// Where the RTT comes from.
#[derive(Debug, Args)]
struct RttArg {
    /// The round-trip time (e.g. 40ms, 0.021ms).
    #[arg(long, value_parser = args::duration, value_name = "DURATION", required_unless_present = "from")]
    rtt: Option<Duration>,
    /// Take the RTT (median, summary.rtt.p50_ns) from a result written by `roundtrip ping --json`.
    #[arg(long, value_parser = args::input_file, value_name = "RESULT.json", conflicts_with = "rtt")]
    from: Option<PathBuf>,
}

fn rtt_of(r: &RttArg) -> anyhow::Result<Duration> {
    match (&r.rtt, &r.from) {
        (Some(d), _) => positive_rtt(*d),
        (None, Some(p)) => {
            let text = std::fs::read(p).with_context(|| {
                format!(
                    "cannot read {} (give a file written by --json)",
                    p.display()
                )
            })?;
            Ok(roundtrip::doc::rtt_from_result(
                &p.display().to_string(),
                &text,
            )?)
        }
        (None, None) => Err(super::output::refused(
            "give --rtt DURATION or --from RESULT.json",
        )),
    }
}

fn positive_rtt(d: Duration) -> anyhow::Result<Duration> {
    if d.is_zero() {
        return Err(super::output::refused("the RTT must be more than 0"));
    }
    Ok(d)
}

#[derive(Debug, Args)]
struct TpsArgs {
    /// Measured transactions per second of one session; a list pairs with --rtt.
    #[arg(long, value_delimiter = ',', required = true, value_parser = tps_value, value_name = "TPS[,TPS...]")]
    tps: Vec<f64>,
    /// RTT at which each TPS was measured (as many as --tps).
    #[arg(long, value_delimiter = ',', value_parser = args::duration, value_name = "DURATION[,...]",
          required_unless_present = "from")]
    rtt: Vec<Duration>,
    /// Take the RTT from a `roundtrip ping --json` result (one TPS).
    #[arg(long, value_parser = args::input_file, value_name = "RESULT.json", conflicts_with = "rtt")]
    from: Option<PathBuf>,
    /// Network round trips per transaction.
    #[arg(long, default_value = "1", value_parser = round_trips, value_name = "N")]
    round_trips: f64,
    /// Predict the TPS of the first measurement at these RTTs.
    #[arg(long, value_delimiter = ',', value_parser = args::duration, value_name = "DURATION[,...]")]
    at: Vec<Duration>,
}

fn tps_value(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("TPS '{s}' must be a number more than 0, e.g. 2356")),
    }
}

fn round_trips(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!(
            "round trips '{s}' must be a number more than 0, e.g. 1 or 3"
        )),
    }
}

#[derive(Debug, Args)]
struct WindowArgs {
    /// TCP window (receive window or send buffer), e.g. 64KiB.
    #[arg(long, value_parser = args::positive_size, value_name = "BYTES")]
    window: u64,
    #[command(flatten)]
    rtt: RttArg,
}

#[derive(Debug, Args)]
struct BdpArgs {
    /// Link rate (bandwidth), bit/s, e.g. 1Gbit/s (or 1gbit, 1Gbps, 1G).
    #[arg(long, alias = "rate", value_parser = args::bitrate, value_name = "BITRATE")]
    bandwidth: u64,
    #[command(flatten)]
    rtt: RttArg,
}

#[derive(Debug, Args)]
struct MathisArgs {
    /// Maximum segment size in bytes.
    #[arg(long, default_value = "1448", value_parser = args::positive_size, value_name = "BYTES")]
    mss: u64,
    /// Packet loss probability (1e-4, 0.01%).
    #[arg(long, value_parser = args::probability, value_name = "P")]
    loss: f64,
    #[command(flatten)]
    rtt: RttArg,
}

#[derive(Debug, Args)]
struct TransferArgs {
    /// Application bytes to move, e.g. 8KiB.
    #[arg(long, value_parser = args::positive_size, value_name = "BYTES")]
    bytes: u64,
    /// Link rate (bandwidth), bit/s, e.g. 1Gbit/s or 10gbit (or 10Gbps, 10G); a network link's rate, not a
    /// database link (that is `roundtrip db URL --link TARGET`).
    #[arg(long, alias = "link", value_parser = args::bitrate, value_name = "BITRATE")]
    bandwidth: u64,
    /// MTU(s) to compare, e.g. 1500 or 1500,9000.
    #[arg(long, value_delimiter = ',', default_value = "1500", value_parser = mtu, value_name = "BYTES[,...]")]
    mtu: Vec<u64>,
    /// Store-and-forward links between sender and receiver (1: directly connected).
    #[arg(long, default_value = "1", value_parser = hops, value_name = "N")]
    hops: u32,
}

fn mtu(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(v) if (53..=65535).contains(&v) => Ok(v),
        _ => Err(format!(
            "MTU '{s}' must be a whole number from 53 to 65535, e.g. 1500 or 9000"
        )),
    }
}

fn hops(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(v) if (1..=64).contains(&v) => Ok(v),
        _ => Err(format!("hops '{s}' must be a whole number from 1 to 64")),
    }
}

#[derive(Serialize)]
struct Doc<T: Serialize> {
    #[serde(flatten)]
    header: Header,
    formula: &'static str,
    result: T,
}

fn emit<T: Serialize>(
    json_out: bool,
    kind: &'static str,
    formula: &'static str,
    result: T,
    text: String,
) -> anyhow::Result<Exit> {
    if json_out {
        out(json::to_bytes(&Doc {
            header: Header::new(kind),
            formula,
            result,
        }))?;
    } else {
        out_text(format!("{text}\nformula: {formula}\n"))?;
    }
    Ok(Exit::Ok)
}

fn mbit(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} Gbit/s", bps / 1e9)
    } else {
        format!("{:.2} Mbit/s", bps / 1e6)
    }
}

fn ms3(d: Duration) -> String {
    format!("{:.3}ms", d.as_secs_f64() * 1e3)
}

#[derive(Serialize)]
struct TpsRow {
    rtt_ns: u64,
    tps: f64,
    transit_per_s_ns: u64,
    processing_ns: u64,
}

#[derive(Serialize)]
struct PredictRow {
    rtt_ns: u64,
    predicted_tps: f64,
    time_per_transaction_ns: u64,
    sessions_to_keep_tps: f64,
}

#[derive(Serialize)]
struct TpsResult {
    round_trips: f64,
    measured: Vec<TpsRow>,
    predicted: Vec<PredictRow>,
}

fn tps(a: TpsArgs, json_out: bool) -> anyhow::Result<Exit> {
    let rtts = match &a.from {
        Some(_) => vec![rtt_of(&RttArg {
            rtt: None,
            from: a.from.clone(),
        })?],
        None => a.rtt.clone(),
    };
    if rtts.len() != a.tps.len() {
        return Err(super::output::refused(format!(
            "--tps has {} value(s) but there are {} RTT(s): give one RTT per TPS measurement",
            a.tps.len(),
            rtts.len()
        )));
    }
    let mut measured = Vec::new();
    for (&t, &r) in a.tps.iter().zip(&rtts) {
        measured.push(model::tps_breakdown(t, r, a.round_trips).map_err(super::output::refused)?);
    }
    let base = measured[0];
    let mut t1 = Table::new(&[
        "RTT",
        "TPS",
        "in transit per second",
        "processing per transaction",
    ]);
    for b in &measured {
        t1.row(vec![
            ms3(b.rtt),
            format!("{}", b.tps),
            ms3(b.transit_per_s),
            format!("{:.2}ms", b.processing.as_secs_f64() * 1e3),
        ]);
    }
    let mut text = format!(
        "Measured (one session, {} round trip(s) per transaction):\n{}",
        a.round_trips,
        t1.render(2)
    );
    let mut predicted = Vec::new();
    if !a.at.is_empty() {
        let mut t2 = Table::new(&[
            "RTT",
            "predicted TPS",
            "time per transaction",
            "sessions to keep TPS",
        ]);
        for &r in &a.at {
            let p = model::predict_tps(&base, r);
            let per = Duration::from_secs_f64(1.0 / p);
            let sessions = model::concurrency_needed(&base, base.tps, r);
            t2.row(vec![
                ms3(r),
                format!("{p:.0}"),
                ms3(per),
                format!("{sessions:.2}"),
            ]);
            predicted.push(PredictRow {
                rtt_ns: r.as_nanos() as u64,
                predicted_tps: p,
                time_per_transaction_ns: per.as_nanos() as u64,
                sessions_to_keep_tps: sessions,
            });
        }
        text.push_str(&format!(
            "\nPredicted from {} TPS at {} (processing {:.3}ms per transaction):\n{}",
            base.tps,
            ms3(base.rtt),
            base.processing.as_secs_f64() * 1e3,
            t2.render(2)
        ));
    }
    let result = TpsResult {
        round_trips: a.round_trips,
        measured: measured
            .iter()
            .map(|b| TpsRow {
                rtt_ns: b.rtt.as_nanos() as u64,
                tps: b.tps,
                transit_per_s_ns: b.transit_per_s.as_nanos() as u64,
                processing_ns: b.processing.as_nanos() as u64,
            })
            .collect(),
        predicted,
    };
    emit(
        json_out,
        "model-tps",
        "processing = (1s - TPS x round_trips x RTT) / TPS; TPS' = 1 / (processing + round_trips x RTT'); sessions = TPS x (processing + round_trips x RTT') [Hoogland, \"Performing in the cloud – network latency\"; Little 1961]",
        result,
        text,
    )
}

/// Runs `roundtrip model`.
pub fn run(a: ModelArgs) -> anyhow::Result<Exit> {
    match a.what {
        What::Tps(t) => tps(t, a.json),
        What::Window(w) => {
            let rtt = rtt_of(&w.rtt)?;
            let bps = model::window_bps(w.window, rtt).map_err(super::output::refused)?;
            #[derive(Serialize)]
            struct R {
                window_bytes: u64,
                rtt_ns: u64,
                throughput_bps: f64,
            }
            let text = format!(
                "A window of {} at {} RTT carries at most {} ({}/s).\n",
                fmt_bytes(w.window),
                fmt_duration(rtt),
                mbit(bps),
                fmt_bytes((bps / 8.0) as u64)
            );
            emit(
                a.json,
                "model-window",
                "throughput = window / RTT [RFC 7323 1.1]",
                R {
                    window_bytes: w.window,
                    rtt_ns: rtt.as_nanos() as u64,
                    throughput_bps: bps,
                },
                text,
            )
        }
        What::Bdp(b) => {
            let rtt = rtt_of(&b.rtt)?;
            let bytes = model::bdp_bytes(b.bandwidth, rtt);
            #[derive(Serialize)]
            struct R {
                rate_bps: u64,
                rtt_ns: u64,
                bdp_bytes: f64,
            }
            let text = format!(
                "Filling {} at {} RTT needs a window of {} bytes ({}).\n",
                mbit(b.bandwidth as f64),
                fmt_duration(rtt),
                bytes.round(),
                fmt_bytes(bytes.ceil() as u64)
            );
            emit(
                a.json,
                "model-bdp",
                "BDP = rate x RTT / 8 [RFC 7323 1.1]",
                R {
                    rate_bps: b.bandwidth,
                    rtt_ns: rtt.as_nanos() as u64,
                    bdp_bytes: bytes,
                },
                text,
            )
        }
        What::Mathis(m) => {
            let rtt = rtt_of(&m.rtt)?;
            let bps = model::mathis_bps(m.mss, rtt, m.loss).map_err(super::output::refused)?;
            #[derive(Serialize)]
            struct R {
                mss_bytes: u64,
                rtt_ns: u64,
                loss: f64,
                throughput_bps: f64,
            }
            let text = format!(
                "MSS {} B, RTT {}, loss {}: at most {} per TCP stream.\n",
                m.mss,
                fmt_duration(rtt),
                m.loss,
                mbit(bps)
            );
            emit(
                a.json,
                "model-mathis",
                "throughput = MSS / RTT x sqrt(3/2) / sqrt(p) [Mathis et al. 1997]",
                R {
                    mss_bytes: m.mss,
                    rtt_ns: rtt.as_nanos() as u64,
                    loss: m.loss,
                    throughput_bps: bps,
                },
                text,
            )
        }
        What::Transfer(t) => {
            let mut rows = Vec::new();
            for &mtu in &t.mtu {
                rows.push(
                    model::transfer(t.bytes, t.bandwidth, mtu, t.hops)
                        .map_err(super::output::refused)?,
                );
            }
            let mut table = Table::new(&[
                "MTU",
                "data/frame",
                "frames",
                "last frame",
                "bytes on wire",
                "serialisation",
                "per full frame",
                "with hops",
            ]);
            #[derive(Serialize)]
            struct R {
                mtu_bytes: u64,
                mss_bytes: u64,
                frames: u64,
                last_frame_bytes: u64,
                wire_bytes: u64,
                serialisation_ns: u64,
                hops: u32,
                total_ns: u64,
            }
            let mut res = Vec::new();
            for r in &rows {
                let full = roundtrip::proxy::rate::serialisation(
                    (r.mss + model::TCPIP_OVERHEAD + model::ETHERNET_FRAMING + model::ETHERNET_GAP)
                        .min(
                            r.bytes
                                + model::TCPIP_OVERHEAD
                                + model::ETHERNET_FRAMING
                                + model::ETHERNET_GAP,
                        ),
                    t.bandwidth,
                );
                table.row(vec![
                    r.mtu.to_string(),
                    format!("{} B", r.mss),
                    r.frames.to_string(),
                    format!("{} B", r.last_frame_bytes),
                    r.wire_bytes.to_string(),
                    fmt_nanos(r.serialisation.as_nanos() as f64),
                    fmt_duration(full),
                    fmt_nanos(r.total.as_nanos() as f64),
                ]);
                res.push(R {
                    mtu_bytes: r.mtu,
                    mss_bytes: r.mss,
                    frames: r.frames,
                    last_frame_bytes: r.last_frame_bytes,
                    wire_bytes: r.wire_bytes,
                    serialisation_ns: r.serialisation.as_nanos() as u64,
                    hops: r.hops,
                    total_ns: r.total.as_nanos() as u64,
                });
            }
            let text = format!(
                "{} over {} links of {} (store-and-forward, propagation not included):\n{}",
                fmt_bytes(t.bytes),
                t.hops,
                mbit(t.bandwidth as f64),
                table.render(2)
            );
            emit(
                a.json,
                "model-transfer",
                "frames = ceil(bytes / (MTU - 52)); wire = data + 52 + 18 + 20 per frame; time = wire x 8 / rate, per store-and-forward hop [Hailey, \"NFS Performance Issues at TCP level\" 2014; IEEE 802.3]",
                res,
                text,
            )
        }
    }
}
