//! `roundtrip proxy --bridge IF_A,IF_B`: the frame-level bridge ([`roundtrip::proxy::bridge`]); its arguments
//! beyond the proxy's, the impairment built from them, the per-interval rows and the summary.

use super::super::args;
use super::super::output::{Exit, note, out, out_text};
use super::{Dir, ProxyArgs};
use clap::Args;
use roundtrip::proxy::bridge::{self, BridgeConfig, BridgeCounters, BridgeImpairment, WayDoc};
use roundtrip::proxy::{GilbertElliott, Impairment};
use roundtrip::report::json;
use roundtrip::report::text::proxy::bridge_counters_text;
use roundtrip::units::{fmt_bytes, fmt_duration};
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Arguments of `roundtrip proxy` that only the bridge uses.
#[derive(Debug, Args)]
pub struct BridgeArgs {
    /// Bridge: one-way delay of frames from the second interface to the first (default: as --delay).
    #[arg(long, value_parser = args::duration, value_name = "DURATION", requires = "bridge")]
    delay_back: Option<Duration>,
    /// Bridge: most frame bytes waiting per direction (64.25 KiB to 1 GiB); frames over it are dropped and
    /// counted.
    #[arg(long, value_parser = args::queue_limit, value_name = "BYTES", requires = "bridge")]
    queue_limit: Option<u64>,
    /// Bridge: replay measured delays: a capture (each connection's handshake RTT), a roundtrip --json result
    /// (its rtt_ns values), a `ping --full-log` CSV, or a file of RTTs one per line (12.5ms, 800us; bare
    /// numbers are ms). Each frame takes half of a random sample each way.
    #[arg(long, value_parser = args::input_file, value_name = "FILE", requires = "bridge", conflicts_with_all = ["delay", "rtt", "delay_back"])]
    delay_from: Option<std::path::PathBuf>,
    /// Bridge: losses come in bursts of this mean length (frames), the long-run loss rate staying --loss
    /// (Gilbert-Elliott: p = loss/(1-loss)/N, r = 1/N, every frame lost in the bad state, none in the good).
    #[arg(long, value_parser = args::positive_f64, value_name = "N", requires = "bridge")]
    loss_burst: Option<f64>,
    /// Bridge: print one row per direction per this period.
    #[arg(long, value_parser = args::positive_duration, default_value = "1s", value_name = "DURATION", requires = "bridge")]
    report_interval: Duration,
}

/// The bridge impairment the arguments ask for; refused combinations are errors naming the option.
fn impairment(a: &ProxyArgs) -> anyhow::Result<BridgeImpairment> {
    let b = &a.bridge_args;
    if let Some(name) = super::tcp_only_given(a, true) {
        return Err(super::super::output::refused(format!(
            "{name} applies to the TCP proxy, not to --bridge (frames pass as they are; the endpoints' own TCP \
             does windows and closes); leave out {name}"
        )));
    }
    if a.reorder != 0.0 && a.reorder != 1.0 {
        return Err(super::super::output::refused(
            "with --bridge, --reorder is a flag (jitter may reorder frames) and takes no probability",
        ));
    }
    if b.loss_burst.is_some() && a.ge_p.is_some() {
        return Err(super::super::output::refused(
            "give either --loss-burst or --ge-p/--ge-r, not both",
        ));
    }
    if let Some(n) = b.loss_burst {
        if n < 1.0 {
            return Err(super::super::output::refused(format!(
                "--loss-burst {n}: a burst is at least 1 frame"
            )));
        }
        if a.loss <= 0.0 || a.loss >= 1.0 {
            return Err(super::super::output::refused(
                "--loss-burst needs --loss P between 0 and 1 (the long-run loss rate)",
            ));
        }
    }
    let (fwd, back) = match (a.delay, a.rtt) {
        (Some(d), _) => (d, b.delay_back.unwrap_or(d)),
        (None, Some(r)) => {
            if b.delay_back.is_some() {
                return Err(super::super::output::refused(
                    "--rtt splits the round trip in two; give --delay and --delay-back instead",
                ));
            }
            (r / 2, r - r / 2)
        }
        (None, None) => (Duration::ZERO, b.delay_back.unwrap_or_default()),
    };
    let way = |d: Duration, on: bool| {
        if !on {
            return Impairment::default();
        }
        let (loss, gilbert_elliott) = match b.loss_burst {
            Some(n) => (
                0.0,
                Some(GilbertElliott {
                    p: a.loss / (1.0 - a.loss) / n,
                    r: 1.0 / n,
                    loss_good: 0.0,
                    loss_bad: 1.0,
                }),
            ),
            None => (a.loss, a.gilbert_elliott()),
        };
        Impairment {
            delay_ns: d.as_nanos() as u64,
            jitter_ns: a.jitter.as_nanos() as u64,
            jitter_dist: a.jitter_dist.into(),
            rate_bps: a.bandwidth,
            loss,
            gilbert_elliott,
            duplicate: a.duplicate,
            ..Impairment::default()
        }
    };
    let samples = match &b.delay_from {
        Some(p) => {
            let bytes = std::fs::read(p).map_err(|e| {
                anyhow::anyhow!("--delay-from {}: cannot read it: {e}", p.display())
            })?;
            // A capture itself (pcap either byte order or resolution, pcapng): the handshake RTT of every
            // connection in it whose handshake was captured (what `capture flows` reports), one sample each.
            const CAPTURE_MAGIC: [[u8; 4]; 5] = [
                [0xd4, 0xc3, 0xb2, 0xa1],
                [0xa1, 0xb2, 0xc3, 0xd4],
                [0x4d, 0x3c, 0xb2, 0xa1],
                [0xa1, 0xb2, 0x3c, 0x4d],
                [0x0a, 0x0d, 0x0d, 0x0a],
            ];
            if bytes.len() >= 4 && CAPTURE_MAGIC.iter().any(|m| bytes[..4] == m[..]) {
                drop(bytes);
                let flows = roundtrip::capture::run_flows(
                    p,
                    &roundtrip::capture::Filter::default(),
                    roundtrip::capture::flows::TrackerConfig::default(),
                    None,
                )
                .map_err(|e| anyhow::anyhow!("--delay-from {}: {e}", p.display()))?;
                let rtts: Vec<u64> = flows
                    .flows
                    .iter()
                    .filter_map(|f| f.handshake.map(|h| h.rtt_ns))
                    .collect();
                bridge::one_way_delays(rtts).ok_or_else(|| {
                    anyhow::anyhow!(
                        "--delay-from {}: a capture with no TCP handshake in it ({} connections, none seen from its SYN); capture the connections' start, or give RTTs measured another way (a --json result, one RTT per line)",
                        p.display(),
                        flows.flows.len()
                    )
                })?
            } else {
                let text = String::from_utf8(bytes).map_err(|_| {
                anyhow::anyhow!(
                    "--delay-from {}: not text (a --json result, a --full-log CSV or one RTT per line)",
                    p.display()
                )
            })?;
                bridge::delay_samples(&text)
                    .map_err(|e| anyhow::anyhow!("--delay-from {}: {e}", p.display()))?
            }
        }
        None => Vec::new(),
    };
    Ok(BridgeImpairment {
        a_to_b: way(fwd, !matches!(a.direction, Dir::Down)),
        b_to_a: way(back, !matches!(a.direction, Dir::Up)),
        jitter_reorders: a.reorder == 1.0,
        queue_limit_bytes: b.queue_limit.unwrap_or(bridge::DEFAULT_QUEUE_LIMIT),
        delay_samples_ns: samples,
    })
}

/// One line describing one direction.
fn describe_way(i: &Impairment, imp: &BridgeImpairment) -> String {
    let mut parts = Vec::new();
    if imp.delay_samples_ns.is_empty() {
        parts.push(format!(
            "delay {}",
            fmt_duration(Duration::from_nanos(i.delay_ns))
        ));
        if i.jitter_ns > 0 {
            parts.push(format!(
                "jitter {} {}",
                fmt_duration(Duration::from_nanos(i.jitter_ns)),
                bridge::dist_name(i.jitter_dist)
            ));
        }
    } else {
        let mut s = imp.delay_samples_ns.clone();
        s.sort_unstable();
        parts.push(format!(
            "delay replayed from {} samples (median {})",
            s.len(),
            fmt_duration(Duration::from_nanos(s[s.len() / 2]))
        ));
    }
    if let Some(r) = i.rate_bps {
        parts.push(format!("bandwidth {} Mbit/s", r as f64 / 1e6));
    }
    if i.loss > 0.0 {
        parts.push(format!("loss {}%", i.loss * 100.0));
    }
    if let Some(g) = &i.gilbert_elliott {
        let share = g.p / (g.p + g.r);
        parts.push(format!(
            "bursty loss {:.4}% (Gilbert-Elliott p={:.6} r={:.4}: mean burst {:.1} frames)",
            100.0 * (share * g.loss_bad + (1.0 - share) * g.loss_good),
            g.p,
            g.r,
            1.0 / g.r
        ));
    }
    if i.duplicate > 0.0 {
        parts.push(format!("duplicate {}%", i.duplicate * 100.0));
    }
    parts.join(", ")
}

/// One interval of the JSON document.
#[derive(Debug, Serialize)]
struct Interval {
    /// End of the interval since start.
    t_ns: u64,
    /// Changes over the interval (queued_*, max_late_ns: the values at its end).
    a_to_b: WayDoc,
    /// The same for the other direction.
    b_to_a: WayDoc,
}

/// The `--json` document.
#[derive(Debug, Serialize)]
struct Doc {
    interfaces: [String; 2],
    impairment: BridgeImpairment,
    elapsed_ns: u64,
    ended: Option<String>,
    late_after_ns: u64,
    intervals: Vec<Interval>,
    total: BridgeCounters,
}

fn delta(now: &WayDoc, before: &WayDoc) -> WayDoc {
    WayDoc {
        frames_in: now.frames_in - before.frames_in,
        bytes_in: now.bytes_in - before.bytes_in,
        frames_out: now.frames_out - before.frames_out,
        bytes_out: now.bytes_out - before.bytes_out,
        lost: now.lost - before.lost,
        queue_full: now.queue_full - before.queue_full,
        duplicated: now.duplicated - before.duplicated,
        queued_frames: now.queued_frames,
        queued_bytes: now.queued_bytes,
        late: now.late - before.late,
        max_late_ns: now.max_late_ns,
        send_errors: now.send_errors - before.send_errors,
    }
}

fn row(t: Duration, dir: &str, d: &WayDoc, secs: f64) -> String {
    format!(
        "{:>7} {:<22} {:>9} {:>9.2} {:>7} {:>7} {:>8} {:>6}\n",
        format!("{:.1}s", t.as_secs_f64()),
        dir,
        d.frames_out,
        d.bytes_out as f64 * 8.0 / secs / 1e6,
        d.lost,
        d.queue_full,
        d.queued_frames,
        d.late
    )
}

/// Runs the bridge until Ctrl-C or until an interface goes away.
pub fn run(a: ProxyArgs) -> anyhow::Result<Exit> {
    let spec = a.bridge.clone().unwrap_or_default();
    let names: Vec<&str> = spec.split(',').map(str::trim).collect();
    let [ia, ib] = names[..] else {
        return Err(super::super::output::refused(format!(
            "--bridge '{spec}': give two interface names separated by a comma, e.g. veth0,veth1"
        )));
    };
    if ia.is_empty() || ib.is_empty() {
        return Err(super::super::output::refused(format!(
            "--bridge '{spec}': an interface name is empty"
        )));
    }
    // The names are checked (they differ, both exist) before any I/O: a typo is refused, exit 2.
    bridge::check_interfaces(ia, ib)
        .map_err(|e| super::super::output::refused(format!("--bridge: {e}")))?;
    let imp = impairment(&a)?;
    if let Some(n) = imp.validate().map_err(super::super::output::refused)? {
        note(n);
    }
    let config = BridgeConfig {
        a: ia.to_string(),
        b: ib.to_string(),
        impairment: imp.clone(),
        control: a.control,
        control_token: match &a.control_token_file {
            Some(f) => Some(roundtrip::proxy::ControlToken::from_file(f)?),
            None => None,
        },
    };
    roundtrip::proxy::delay::set_cpu_wake(a.cpu_wake);
    let cancel = super::super::common::cancel_on_ctrl_c();
    let handle = match bridge::start(&config) {
        Ok(h) => h,
        Err(e) => return Err(anyhow::anyhow!("roundtrip proxy --bridge: {e}")),
    };
    let started = Instant::now();
    let (ab, ba) = (format!("{ia}->{ib}"), format!("{ib}->{ia}"));
    if !a.json {
        let mut head = format!(
            "roundtrip proxy: bridging {ia} <-> {ib} (every frame forwarded, nothing terminated)\n  {ab}: {}\n  {ba}: {}\n  queue limit {} per direction{}\n",
            describe_way(&imp.a_to_b, &imp),
            describe_way(&imp.b_to_a, &imp),
            fmt_bytes(imp.queue_limit_bytes),
            if imp.jitter_reorders {
                "; jitter may reorder"
            } else {
                "; order kept"
            }
        );
        if let Some(c) = handle.control_addr() {
            head += &format!("  control api on http://{c}/impairment and http://{c}/counters\n");
        }
        head += &format!(
            "  Ctrl-C to stop.\n{:>7} {:<22} {:>9} {:>9} {:>7} {:>7} {:>8} {:>6}\n",
            "time", "direction", "frames", "Mbit/s", "lost", "q-full", "queued", "late"
        );
        out_text(head)?;
    }
    let shared = handle.shared().clone();
    let mut intervals = Vec::new();
    let mut before = BridgeCounters::default();
    let mut next = started + a.bridge_args.report_interval;
    let mut last = started;
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let stop = cancel.load(Ordering::SeqCst) || shared.ended().is_some();
        let now = Instant::now();
        // On stop, a last partial interval only when it is more than a blink.
        if now >= next || (stop && now - last >= Duration::from_millis(50)) {
            let c = shared.counters();
            let secs = (now - last).as_secs_f64().max(1e-9);
            let iv = Interval {
                t_ns: (now - started).as_nanos() as u64,
                a_to_b: delta(&c.a_to_b, &before.a_to_b),
                b_to_a: delta(&c.b_to_a, &before.b_to_a),
            };
            if !a.json {
                out_text(format!(
                    "{}{}",
                    row(now - started, &ab, &iv.a_to_b, secs),
                    row(now - started, &ba, &iv.b_to_a, secs)
                ))?;
            }
            intervals.push(iv);
            before = c;
            last = now;
            while next <= now {
                next += a.bridge_args.report_interval;
            }
        }
        if stop {
            break;
        }
    }
    let ended = shared.ended();
    let total = handle.shutdown();
    if let Some(why) = &ended {
        note(format!("roundtrip proxy --bridge: stopped: {why}"));
    }
    if a.json {
        out(json::to_bytes(&Doc {
            interfaces: [ia.to_string(), ib.to_string()],
            impairment: imp,
            elapsed_ns: started.elapsed().as_nanos() as u64,
            ended: ended.clone(),
            late_after_ns: bridge::LATE_AFTER.as_nanos() as u64,
            intervals,
            total,
        }))?;
    } else {
        out_text(bridge_counters_text(&total, &ab, &ba))?;
    }
    Ok(if ended.is_some() {
        Exit::Failed
    } else {
        Exit::Ok
    })
}
