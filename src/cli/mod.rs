//! Argument types, validation and dispatch; the only place that prints.
//!
//! Each subcommand lives in its own file named after it. Arguments are parsed and validated (units, ranges,
//! conflicts) before any socket is opened.

mod agent;
mod args;
mod capture;
mod capture_live;
mod capture_rpc;
mod capture_whatif;
mod compare;
mod connect;
mod db;
mod demo;
mod icmp;
mod load;
mod mesh;
mod model;
mod output;
mod ping;
mod proxy;
mod replay;
mod report;
mod server;
mod sweep;
mod tcp;
mod throughput;

use clap::{Parser, Subcommand};

/// Measure the round trip an application really pays: application-level ping-pong over TCP and UDP,
/// sockperf-compatible.
#[derive(Debug, Parser)]
#[command(name = "roundtrip", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Answer ping-pong messages on TCP and UDP (sockperf server compatible).
    Server(server::ServerArgs),
    /// Measure application-level round trips to a roundtrip or sockperf server.
    Ping(ping::PingArgs),
    /// Run TCP and UDP ping-pong against an embedded server on 127.0.0.1 and print one comparison table.
    Demo(demo::DemoArgs),
    /// Stream messages one way and report messages/s, MB/s, Mbit/s (and UDP loss) per size.
    #[command(visible_alias = "tp")]
    Throughput(throughput::ThroughputArgs),
    /// Latency under load: send at a fixed rate on an open-loop schedule, the server answers every Nth.
    Load(load::LoadArgs),
    /// Latency percentiles over message size x offered rate.
    Sweep(sweep::SweepArgs),
    /// Time the TCP handshake (SYN -> SYN-ACK) and report the port state: open, closed, filtered, unreachable.
    Connect(connect::ConnectArgs),
    /// ICMP echo round trips (raw socket as root, else the unprivileged ICMP datagram socket).
    Icmp(icmp::IcmpArgs),
    /// ICMP, TCP handshake, application ping and the kernel's RTT to one host, side by side, explained.
    Compare(compare::CompareArgs),
    /// Analyse a tcpdump capture: per-interval stats, one connection's timeline, per-connection TCP behaviour.
    Capture(capture::CaptureArgs),
    /// Put a far-away network between a client and its server: delay, jitter, rate, window, faults, UDP loss.
    Proxy(proxy::ProxyArgs),
    /// Play a capture's request/response structure (sizes, think and server times, order) against a
    /// `roundtrip server --allow-replay`, e.g. through `roundtrip proxy --rtt 40ms`, and time it.
    Replay(replay::ReplayArgs),
    /// The seeds' arithmetic: TPS at another RTT, window and BDP limits, Mathis, frames on the wire.
    Model(model::ModelArgs),
    /// Round trips to PostgreSQL, MySQL/MariaDB, Redis or an Oracle listener, split into network, protocol
    /// and server time.
    Db(db::DbArgs),
    /// The kernel's view of live TCP connections (sock_diag, as ss -ti): RTT, cwnd, windows, in flight,
    /// limited time, and what limits each connection, sampled every interval.
    Tcp(tcp::TcpArgs),
    /// Probe many targets continuously (and answer their probes), for Prometheus: /metrics, /api/results
    /// and an HTML matrix.
    Agent(agent::AgentArgs),
    /// Draw saved --json results (and their full logs) as a self-contained HTML report or an SVG chart.
    Report(report::ReportArgs),
    /// The all-pairs matrix of a fleet: p50 / p99 RTT and loss per source x target, from Prometheus or agents.
    Mesh(mesh::MeshArgs),
}

/// Parses the command line, runs the command and returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    let result = match cli.command {
        Command::Server(a) => server::run(a),
        Command::Ping(a) => ping::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Throughput(a) => throughput::run(a),
        Command::Load(a) => load::run(a),
        Command::Sweep(a) => sweep::run(a),
        Command::Connect(a) => connect::run(a),
        Command::Icmp(a) => icmp::run(a),
        Command::Compare(a) => compare::run(a),
        Command::Capture(a) => capture::run(a),
        Command::Proxy(a) => proxy::run(a),
        Command::Replay(a) => replay::run(a),
        Command::Model(a) => model::run(a),
        Command::Db(a) => db::run(a),
        Command::Tcp(a) => tcp::run(a),
        Command::Report(a) => report::run(a),
        Command::Mesh(a) => mesh::run(a),
        Command::Agent(a) => agent::run(a),
    };
    output::finish(result)
}
