//! `roundtrip proxy --listen ... --upstream ...`: the TCP (or UDP) relay that adds a far-away network, until
//! Ctrl-C, then its counters.

use super::super::output::{Exit, note, out, out_text};
use super::{ProxyArgs, describe, impairment};
use roundtrip::probe::target::{Family, Target};
use roundtrip::proxy::{self, ProxyConfig};
use roundtrip::report::json;
use roundtrip::report::text::proxy::proxy_counters_text;
use roundtrip::units::fmt_duration;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Runs the TCP/UDP relay of `roundtrip proxy` until Ctrl-C.
pub(super) fn run(a: ProxyArgs) -> anyhow::Result<Exit> {
    let (Some(listen), Some(upstream_arg)) = (a.listen, a.upstream.clone()) else {
        return Err(super::super::output::refused(
            "give --listen IP:PORT and --upstream HOST:PORT (or --bridge IF_A,IF_B)",
        ));
    };
    let imp = impairment(&a)?;
    if let Some(n) = imp
        .validate()
        .map_err(|e| super::super::output::refused(format!("checking the impairment: {e}")))?
    {
        note(n);
    }
    let target = Target::parse(&upstream_arg, 0).map_err(super::super::output::refused)?;
    if target.port == 0 {
        return Err(super::super::output::refused(format!(
            "--upstream '{}' needs a port, e.g. {}:11111",
            upstream_arg, upstream_arg
        )));
    }
    let (upstream, _) = target.resolve(Family::Any)?;
    let config = ProxyConfig {
        listen,
        upstream: vec![upstream],
        udp: a.udp,
        control: a.control,
        impairment: imp.clone(),
        connect_timeout: a.connect_timeout,
        cpu_wake: a.cpu_wake,
        max_clients: a.max_clients as usize,
        idle_timeout: (!a.idle_timeout.is_zero()).then_some(a.idle_timeout),
        control_token: match &a.control_token_file {
            Some(f) => Some(proxy::ControlToken::from_file(f)?),
            None => None,
        },
    };
    let cancel = super::super::common::cancel_on_ctrl_c();
    let handle = proxy::start(&config).map_err(|e| match e {
        // The upstream is the proxy itself: a refusal of the arguments (exit 2), nothing was relayed.
        proxy::ProxyError::Loop { .. } => super::super::output::refused(e),
        e => e.into(),
    })?;
    out_text(format!(
        "roundtrip proxy: listening on {} ({}), relaying to {} ({upstream})\n  {}\n",
        handle.listen_addr(),
        if a.udp { "udp" } else { "tcp" },
        upstream_arg,
        describe(&imp)
    ))?;
    if let Some(c) = handle.control_addr() {
        out_text(format!(
            "  control api on http://{c}/impairment and http://{c}/counters ({})\n",
            if config.control_token.is_some() {
                "bearer token required"
            } else {
                "loopback only, no token"
            }
        ))?;
    }
    out_text(format!(
        "  at most {} clients at once, idle connections closed after {}\n  Ctrl-C to stop.\n",
        a.max_clients,
        match config.idle_timeout {
            Some(d) => fmt_duration(d),
            None => "never".into(),
        }
    ))?;
    // Turned-away clients: one line per reason per second at most, with the count since the last line.
    let mut logged = [0u64; 4];
    let mut last_log = std::time::Instant::now();
    while !cancel.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
        if last_log.elapsed() >= Duration::from_secs(1) {
            last_log = std::time::Instant::now();
            let t = handle.shared().totals();
            let now = [
                t.refused.load(Ordering::Relaxed),
                t.idle_closed.load(Ordering::Relaxed),
                t.control_refused.load(Ordering::Relaxed),
                t.relay_loops.load(Ordering::Relaxed),
            ];
            let what = [
                format!("clients refused over --max-clients {}", a.max_clients),
                "idle connections closed".to_string(),
                "control api requests refused (token, or too many at once)".to_string(),
                "connections closed: they came back to this proxy through --upstream (a relay loop: check \
                 --upstream and any port forwarding to it)"
                    .to_string(),
            ];
            for i in 0..4 {
                if now[i] > logged[i] {
                    note(format!(
                        "roundtrip proxy: {} {} in the last second",
                        now[i] - logged[i],
                        what[i]
                    ));
                }
            }
            logged = now;
        }
    }
    let counters = handle.shared().counters();
    handle.shutdown();
    if a.json {
        out(json::to_bytes(&counters))?;
    } else {
        out_text(proxy_counters_text(&counters, a.udp))?;
    }
    Ok(Exit::Ok)
}
