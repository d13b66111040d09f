//! `roundtrip server`: answer ping-pong on TCP and UDP until Ctrl-C.

use super::output::{Exit, note};
use anyhow::Context;
use clap::Args;
use roundtrip::server::{self, ServerConfig, ServerEvent};
use roundtrip::wire::sockperf::DEFAULT_PORT;
use std::net::IpAddr;
use std::sync::mpsc;

/// Arguments of `roundtrip server`.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Address to listen on (default: every address, IPv6 and IPv4).
    #[arg(long, value_name = "ADDR")]
    bind: Option<IpAddr>,
    /// TCP and UDP port (sockperf's default is 11111; 0 picks a free one).
    #[arg(long, short = 'p', default_value_t = DEFAULT_PORT)]
    port: u16,
    /// Serve TCP only.
    #[arg(long, conflicts_with = "udp_only")]
    tcp_only: bool,
    /// Serve UDP only.
    #[arg(long)]
    udp_only: bool,
}

/// Runs the server until Ctrl-C, logging one line per TCP client connect and disconnect to stderr.
pub fn run(a: ServerArgs) -> anyhow::Result<Exit> {
    let config = ServerConfig {
        bind: a.bind,
        port: a.port,
        tcp: !a.udp_only,
        udp: !a.tcp_only,
    };
    let handle = server::start(&config, |ev| match ev {
        ServerEvent::Connected { peer } => note(format!("tcp client {peer} connected")),
        ServerEvent::Disconnected {
            peer,
            messages,
            bytes,
            reason,
        } => note(format!(
            "tcp client {peer} disconnected after {messages} messages, {bytes} bytes{}",
            reason.map_or(String::new(), |r| format!(": dropped, {r}"))
        )),
        ServerEvent::BadDatagram { peer, detail } => note(format!(
            "udp {peer}: ignored a malformed datagram: {detail}"
        )),
    })
    .context("starting the server")?;
    let (tx, rx) = mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .context("installing the Ctrl-C handler")?;
    let mut parts = Vec::new();
    if let Some(a) = handle.tcp_addr() {
        parts.push(format!("tcp {a}"));
    }
    if let Some(a) = handle.udp_addr() {
        parts.push(format!("udp {a}"));
    }
    note(format!(
        "roundtrip server listening on {} (sockperf 3.x message format); Ctrl-C to stop",
        parts.join(" and ")
    ));
    let _ = rx.recv();
    let answered = handle.answered();
    handle.shutdown();
    note(format!("stopped after answering {answered} messages"));
    Ok(Exit::Ok)
}
