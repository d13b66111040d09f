//! `roundtrip demo`: no network and no second machine needed.

use super::output::{Exit, out_text};
use anyhow::Context;
use clap::Args;
use roundtrip::model;
use roundtrip::probe::ping::{self, NoObserver, PingConfig, PingResult, Stop, Transport};
use roundtrip::proxy::{self, Impairment, ProxyConfig};
use roundtrip::report::text::Table;
use roundtrip::server::{self, ServerConfig};
use roundtrip::units::{fmt_bytes, fmt_nanos};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// The round trip the embedded proxy adds, as the "move to the cloud" of the blog post "Network latency matters".
const PROXY_RTT: Duration = Duration::from_millis(40);

/// Arguments of `roundtrip demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Measuring time per row.
    #[arg(long, short = 't', default_value = "2s", value_parser = super::args::positive_duration)]
    duration: Duration,
}

fn measure(
    addr: SocketAddr,
    transport: Transport,
    size: usize,
    duration: Duration,
    cancel: &Arc<AtomicBool>,
) -> anyhow::Result<PingResult> {
    let mut c = PingConfig::new(addr);
    c.link.transport = transport;
    c.size = size;
    c.stop = Stop::Duration(duration);
    c.warmup = Duration::from_millis(300);
    c.link.timeout = Duration::from_secs(1);
    c.cancel = cancel.clone();
    ping::run(&c, &mut NoObserver).with_context(|| format!("{transport} ping to {addr}"))
}

/// Round trips per second one session achieved.
fn tps(r: &PingResult) -> f64 {
    if r.elapsed.is_zero() {
        0.0
    } else {
        r.received as f64 / r.elapsed.as_secs_f64()
    }
}

/// Starts an embedded server on 127.0.0.1 and compares TCP and UDP ping-pong at 64 B and 1 KiB (and TCP at
/// 64 KiB), then the same probes through an embedded proxy adding 40 ms of RTT, beside the model's prediction.
pub fn run(a: DemoArgs) -> anyhow::Result<Exit> {
    let config = ServerConfig {
        bind: Some(IpAddr::from([127, 0, 0, 1])),
        port: 0,
        tcp: true,
        udp: true,
        ..Default::default()
    };
    let srv = server::start(&config, |_| {}).context("starting the embedded server")?;
    let tcp = srv
        .tcp_addr()
        .context("embedded server has no TCP address")?;
    let udp = srv
        .udp_addr()
        .context("embedded server has no UDP address")?;
    out_text(format!(
        "roundtrip demo: embedded server on {tcp}, ping-pong for {:.1}s per row after a short warm-up.\n\
         Times are round trips (RTT) seen by the application, through both TCP/IP stacks of this machine.\n\n",
        a.duration.as_secs_f64()
    ))?;
    let cancel = super::common::cancel_on_ctrl_c();
    let mut table = Table::new(&[
        "probe",
        "size",
        "round trips",
        "min",
        "p50",
        "p90",
        "p99",
        "p99.9",
        "max",
        "lost",
        "server p50",
    ]);
    let mut direct: Vec<(Transport, usize, PingResult)> = Vec::new();
    let probes = [
        (Transport::Tcp, 64usize),
        (Transport::Tcp, 1024),
        (Transport::Udp, 64),
        (Transport::Udp, 1024),
    ];
    // Measurements planned: the four direct rows, the direct 64 KiB transfer and three rows through the proxy.
    const PLANNED: u64 = 8;
    let mut done = 0u64;
    let mut measuring = Duration::ZERO;
    let interrupted = |done: u64, measuring: Duration| {
        roundtrip::report::json::Interrupted::count(measuring, done, PLANNED, "measurements").line()
    };
    for (transport, size) in probes {
        let r = measure(tcp, transport, size, a.duration, &cancel)?;
        measuring += r.elapsed;
        if r.cancelled && r.rtt.is_empty() {
            // Cut before its first round trip: no row of zeros.
            break;
        }
        done += u64::from(!r.cancelled);
        let s = r.rtt.summary();
        let srv = r.server.summary();
        let f = |v: u64| fmt_nanos(v as f64);
        table.row(vec![
            format!("{transport} ping-pong"),
            fmt_bytes(size as u64),
            s.count.to_string(),
            f(s.min_ns),
            f(s.p50_ns),
            f(s.p90_ns),
            f(s.p99_ns),
            f(s.p99_9_ns),
            f(s.max_ns),
            r.lost().to_string(),
            if srv.count > 0 {
                f(srv.p50_ns)
            } else {
                "-".into()
            },
        ]);
        let cancelled = r.cancelled;
        direct.push((transport, size, r));
        if cancelled {
            break;
        }
    }
    out_text(table.render(0))?;
    out_text(
        "\n\"server p50\" is the time the server itself spent per message (from its timestamps); the rest of the RTT\n\
         is both network stacks and the wire. Try: roundtrip server  (one terminal), roundtrip ping HOST  (another).\n",
    )?;

    // The transfer of "Network latency matters" in 64 KiB requests, measured directly for the comparison below.
    if !cancel.load(std::sync::atomic::Ordering::SeqCst) {
        let r = measure(tcp, Transport::Tcp, 64 * 1024, a.duration, &cancel)?;
        measuring += r.elapsed;
        done += u64::from(!r.cancelled);
        direct.push((Transport::Tcp, 64 * 1024, r));
    }
    if cancel.load(std::sync::atomic::Ordering::SeqCst) {
        // Interrupted: the rows above are all that was measured; no proxy table made of what did not run.
        out_text(format!("\n{}", interrupted(done, measuring)))?;
        srv.shutdown();
        return Ok(Exit::Ok);
    }

    // The same probes 40 ms away ("Network latency matters"), beside Hoogland's TPS arithmetic.
    let imp = Impairment {
        delay_ns: (PROXY_RTT / 2).as_nanos() as u64,
        ..Default::default()
    };
    let loopback: SocketAddr = ([127, 0, 0, 1], 0).into();
    let mut pc = ProxyConfig::new(loopback, tcp);
    pc.impairment = imp.clone();
    let tcp_proxy = proxy::start(&pc).context("starting the embedded TCP proxy")?;
    let mut pc = ProxyConfig::new(loopback, udp);
    pc.impairment = imp;
    pc.udp = true;
    let udp_proxy = proxy::start(&pc).context("starting the embedded UDP proxy")?;
    out_text(format!(
        "\nThe same probes through an embedded proxy that adds {} of RTT (20 ms each way; roundtrip proxy --rtt 40ms),\n\
         beside what roundtrip model tps predicts from the direct row (processing = 1s/TPS - RTT; TPS' = 1/(processing + RTT')):\n\n",
        fmt_nanos(PROXY_RTT.as_nanos() as f64)
    ))?;
    let mut t2 = Table::new(&[
        "probe",
        "size",
        "round trips",
        "p50",
        "p99",
        "model p50",
        "TPS",
        "model TPS",
        "direct TPS",
    ]);
    for (transport, size) in [
        (Transport::Tcp, 64usize),
        (Transport::Tcp, 64 * 1024),
        (Transport::Udp, 64),
    ] {
        let Some((_, _, d)) = direct
            .iter()
            .find(|(t, s, _)| *t == transport && *s == size)
        else {
            continue;
        };
        let addr = match transport {
            Transport::Tcp => tcp_proxy.listen_addr(),
            Transport::Udp => udp_proxy.listen_addr(),
        };
        let r = measure(addr, transport, size, a.duration, &cancel)?;
        measuring += r.elapsed;
        if r.cancelled && r.rtt.is_empty() {
            break;
        }
        done += u64::from(!r.cancelled);
        let s = r.rtt.summary();
        let ds = d.rtt.summary();
        let direct_rtt = Duration::from_nanos(ds.p50_ns);
        let (model_tps, model_p50) = match model::tps_breakdown(tps(d), direct_rtt, 1.0) {
            Ok(b) => (
                format!("{:.1}", model::predict_tps(&b, direct_rtt + PROXY_RTT)),
                fmt_nanos((direct_rtt + PROXY_RTT).as_nanos() as f64),
            ),
            Err(_) => ("-".into(), "-".into()),
        };
        t2.row(vec![
            format!("{transport} via proxy"),
            fmt_bytes(size as u64),
            s.count.to_string(),
            fmt_nanos(s.p50_ns as f64),
            fmt_nanos(s.p99_ns as f64),
            model_p50,
            format!("{:.1}", tps(&r)),
            model_tps,
            format!("{:.0}", tps(d)),
        ]);
        if r.cancelled {
            break;
        }
    }
    out_text(t2.render(0))?;
    if cancel.load(std::sync::atomic::Ordering::SeqCst) {
        out_text(format!("\n{}", interrupted(done, measuring)))?;
        tcp_proxy.shutdown();
        udp_proxy.shutdown();
        srv.shutdown();
        return Ok(Exit::Ok);
    }
    out_text(
        "\nOne session does one transaction per round trip: 40 ms away, thousands of transactions per second become\n\
         about 25 (Frits Hoogland, \"Performing in the cloud – network latency\"), and a transfer in 64 KiB requests\n\
         pays 40 ms per request (the blog post \"Network latency matters\": a copy over a 40 ms link). Try:\n  \
         roundtrip proxy --listen 127.0.0.1:8000 --upstream HOST:PORT --rtt 40ms   and   roundtrip model tps --help\n",
    )?;
    tcp_proxy.shutdown();
    udp_proxy.shutdown();
    srv.shutdown();
    Ok(Exit::Ok)
}
