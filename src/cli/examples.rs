//! The examples every `--help` ends with, and the man pages and completions built from the same definitions.
//!
//! The examples are kept here, one table for all commands, rather than in each command's file, so that a test can
//! check that every command has them and that every one of them parses with the real argument definitions
//! (`examples_parse` below; tests/docs.rs checks the documentation's command lines the same way).

use clap::Command;

/// Examples per command path ("ping", "capture rpc"): (command line, what it shows). Every command line must
/// work as written, given what its description says is running.
pub const EXAMPLES: &[(&str, &[(&str, &str)])] = &[
    (
        "",
        &[
            (
                "roundtrip demo",
                "the first minute: TCP and UDP round trips on this machine, then 40 ms away",
            ),
            (
                "roundtrip db postgres://postgres@127.0.0.1/test -c 50",
                "what the application pays to its database",
            ),
            (
                "roundtrip generate man --dir /usr/local/share/man/man1",
                "the man pages (man roundtrip-ping, ...)",
            ),
        ],
    ),
    (
        "server",
        &[
            (
                "roundtrip server",
                "serve TCP and UDP on port 11111, every address, until Ctrl-C",
            ),
            (
                "roundtrip server --bind 127.0.0.1 --port 0 --allow-replay",
                "loopback only, a free port (printed), and answer `roundtrip replay`",
            ),
            (
                "roundtrip server --psk-file /etc/roundtrip.key",
                "answer only clients that prove the key",
            ),
        ],
    ),
    (
        "ping",
        &[
            (
                "roundtrip ping 127.0.0.1 -c 1000",
                "1000 TCP round trips of 64 B to a roundtrip or sockperf server",
            ),
            (
                "roundtrip ping 127.0.0.1 -u -s 1k -t 5s --histogram",
                "UDP, 1 KiB messages, 5 s, with a histogram",
            ),
            (
                "roundtrip ping 127.0.0.1 -c 200 --json > ping.json",
                "save the result for report or model --from",
            ),
        ],
    ),
    (
        "demo",
        &[
            (
                "roundtrip demo",
                "TCP and UDP ping-pong on loopback, then through a 40 ms proxy, one table",
            ),
            ("roundtrip demo --duration 1s", "the same, 1 s per row"),
        ],
    ),
    (
        "throughput",
        &[
            (
                "roundtrip throughput 127.0.0.1 -t 5s",
                "stream 64 B messages over TCP for 5 s",
            ),
            (
                "roundtrip throughput 127.0.0.1 -s 64,1k,64k -t 2s",
                "one row per message size",
            ),
            (
                "roundtrip throughput 127.0.0.1 -u -R -t 3s",
                "UDP from the server to this host, with loss",
            ),
        ],
    ),
    (
        "load",
        &[
            (
                "roundtrip load 127.0.0.1 --rate 10k/s -t 5s",
                "latency at 10,000 messages/s, open loop",
            ),
            (
                "roundtrip load 127.0.0.1 -u --rate 50k/s --reply-every 10",
                "UDP, the server answers every 10th",
            ),
        ],
    ),
    (
        "sweep",
        &[
            (
                "roundtrip sweep 127.0.0.1 --sizes 64,1k --rates 1k/s,10k/s -t 2s",
                "percentiles for each size x rate",
            ),
            (
                "roundtrip sweep 127.0.0.1 --sizes 64 --rates 1k/s,5k/s,20k/s --svg sweep.svg",
                "and draw latency against rate",
            ),
        ],
    ),
    (
        "connect",
        &[
            (
                "roundtrip connect 127.0.0.1:5432 -c 5",
                "five TCP handshakes to PostgreSQL's port",
            ),
            (
                "roundtrip connect 127.0.0.1:1 -c 1",
                "a closed port: the RST's time and the state",
            ),
        ],
    ),
    (
        "icmp",
        &[
            (
                "roundtrip icmp 127.0.0.1 -c 5",
                "five ICMP echoes (raw socket as root, else datagram)",
            ),
            (
                "roundtrip icmp ::1 -c 5 -s 1000 --json",
                "IPv6, 1000-byte payload, as JSON",
            ),
        ],
    ),
    (
        "compare",
        &[
            (
                "roundtrip compare 127.0.0.1 -c 20",
                "ICMP, handshake, application ping and kernel RTT side by side",
            ),
            (
                "roundtrip compare 127.0.0.1:11111 -c 20 --svg compare.svg",
                "and draw them as bars",
            ),
        ],
    ),
    (
        "capture",
        &[
            (
                "roundtrip capture rpc docs/captures/pgbench-select.pcap",
                "per-request latency of a pgbench run",
            ),
            (
                "roundtrip capture flows docs/captures/redis-benchmark.pcap",
                "what TCP did on each connection",
            ),
        ],
    ),
    (
        "capture stats",
        &[
            (
                "roundtrip capture stats docs/captures/roundtrip-ping.pcap",
                "packets, bytes and rates per second",
            ),
            (
                "roundtrip capture stats docs/captures/redis-benchmark.pcap --report-interval 100ms --by-direction",
                "per 100 ms, each direction",
            ),
            (
                "roundtrip capture stats -i any -t 10s port 6379",
                "live (root): a row per second of Redis traffic on every interface, as tcpstat",
            ),
        ],
    ),
    (
        "capture timeline",
        &[
            (
                "roundtrip capture timeline docs/captures/roundtrip-ping.pcap",
                "every packet of the first connection",
            ),
            (
                "roundtrip capture timeline docs/captures/redis-benchmark.pcap -q --svg seq.svg",
                "only its time-sequence graph",
            ),
        ],
    ),
    (
        "capture flows",
        &[
            (
                "roundtrip capture flows docs/captures/pgbench-select.pcap",
                "one row per connection and a diagnosis",
            ),
            (
                "roundtrip capture flows docs/captures/redis-benchmark.pcap --json",
                "every figure, as JSON",
            ),
        ],
    ),
    (
        "capture rpc",
        &[
            (
                "roundtrip capture rpc docs/captures/pgbench-select.pcap --top 3",
                "SELECT latency and the slowest 3",
            ),
            (
                "roundtrip capture rpc docs/captures/redis-benchmark.pcap --by-conn",
                "GET/SET per connection",
            ),
            (
                "roundtrip capture rpc --live lo --filter 'tcp port 5432' --keep-slow 50ms --keep-dir slow",
                "live (root): PostgreSQL requests per second, and the packets of any request over 50 ms kept",
            ),
        ],
    ),
    (
        "capture match",
        &[
            (
                "roundtrip capture match client.pcap server.pcap",
                "the same requests seen at both ends (tcpdump on each host)",
            ),
            (
                "roundtrip capture match docs/captures/pgbench-select.pcap docs/captures/pgbench-select.pcap",
                "a capture against itself: zero difference",
            ),
        ],
    ),
    (
        "capture whatif",
        &[
            (
                "roundtrip capture whatif docs/captures/pgbench-select.pcap --rtt 0.5ms,5ms,40ms",
                "pgbench's run time at three RTTs",
            ),
            (
                "roundtrip capture whatif docs/captures/redis-benchmark.pcap --rtt 10ms --bandwidth 100mbit",
                "at 10 ms over a 100 Mbit/s path",
            ),
        ],
    ),
    (
        "capture bpf",
        &[
            (
                "roundtrip capture bpf 'tcp port 5432 or tcp port 6379'",
                "the classic BPF program of a filter, as tcpdump -d prints it",
            ),
            (
                "roundtrip capture bpf -y any --drop-outgoing 'port 1521'",
                "the program a live capture on the any device attaches in the kernel",
            ),
        ],
    ),
    (
        "proxy",
        &[
            (
                "roundtrip proxy --listen 127.0.0.1:15432 --upstream 127.0.0.1:5432 --rtt 40ms",
                "PostgreSQL 40 ms away: point the client at port 15432",
            ),
            (
                "roundtrip proxy --udp --listen 127.0.0.1:21111 --upstream 127.0.0.1:11111 --loss 1%",
                "UDP with 1% random loss",
            ),
            (
                "roundtrip proxy --bridge veth-a,veth-b --rtt 40ms --loss 1%",
                "frames between two interfaces 40 ms apart (root): TCP itself sees the far network",
            ),
        ],
    ),
    (
        "replay",
        &[
            (
                "roundtrip replay docs/captures/pgbench-select.pcap --to 127.0.0.1",
                "replay pgbench's turns against `roundtrip server --allow-replay`",
            ),
            (
                "roundtrip replay docs/captures/redis-benchmark.pcap --to 127.0.0.1:21111 --expect-rtt 40ms",
                "through `roundtrip proxy --rtt 40ms` on port 21111",
            ),
        ],
    ),
    (
        "model",
        &[
            (
                "roundtrip model tps --tps 2000 --rtt 0.2ms --at 1ms,40ms",
                "2000 TPS at 0.2 ms: what at 1 and 40 ms",
            ),
            (
                "roundtrip model bdp --bandwidth 1gbit --rtt 40ms",
                "the window a 1 Gbit/s, 40 ms path needs",
            ),
        ],
    ),
    (
        "model tps",
        &[
            (
                "roundtrip model tps --tps 2000 --rtt 0.2ms --at 1ms,40ms",
                "2000 TPS at 0.2 ms: what at 1 and 40 ms",
            ),
            (
                "roundtrip model tps --from ping.json --tps 2000 --at 5ms",
                "the RTT from a saved ping result",
            ),
        ],
    ),
    (
        "model window",
        &[
            (
                "roundtrip model window --window 64KiB --rtt 40ms",
                "the most a 64 KiB window carries at 40 ms",
            ),
            (
                "roundtrip model window --window 4MiB --rtt 100ms --json",
                "as JSON",
            ),
        ],
    ),
    (
        "model bdp",
        &[
            (
                "roundtrip model bdp --bandwidth 1gbit --rtt 40ms",
                "the window a 1 Gbit/s, 40 ms path needs",
            ),
            (
                "roundtrip model bdp --bandwidth 10gbit --rtt 0.5ms",
                "a data-centre path",
            ),
        ],
    ),
    (
        "model mathis",
        &[
            (
                "roundtrip model mathis --mss 1448 --loss 0.1% --rtt 40ms",
                "TCP's ceiling at 0.1% loss, 40 ms",
            ),
            (
                "roundtrip model mathis --mss 8948 --loss 0.01% --rtt 2ms",
                "jumbo frames, 2 ms",
            ),
        ],
    ),
    (
        "model transfer",
        &[
            (
                "roundtrip model transfer --bytes 8KiB --bandwidth 1gbit --mtu 1500,9000 --hops 3",
                "an 8 KiB block through 3 switches",
            ),
            (
                "roundtrip model transfer --bytes 1MiB --bandwidth 10gbit",
                "1 MiB on one 10 Gbit/s link",
            ),
        ],
    ),
    (
        "db",
        &[
            (
                "roundtrip db postgres://postgres@127.0.0.1/test -c 50",
                "PostgreSQL: network, protocol, server time",
            ),
            (
                "roundtrip db mysql://root@127.0.0.1/test --connects 5 -c 20",
                "MySQL/MariaDB, with 5 connects (redis://HOST:6379 for Redis)",
            ),
            (
                "roundtrip db postgres://postgres@127.0.0.1/test --link 'host=db2 dbname=app' -c 50",
                "from this database to db2 through dblink, timed inside it (docs/db-link.md)",
            ),
        ],
    ),
    (
        "tcp",
        &[
            (
                "roundtrip tcp --port 5432 -t 10s",
                "every connection to or from port 5432, each second, 10 s",
            ),
            (
                "roundtrip tcp --pid 1234 --report-interval 100ms --svg tcp.svg",
                "one process's connections, drawn",
            ),
        ],
    ),
    (
        "agent",
        &[
            (
                "roundtrip agent --peer 127.0.0.1 --metrics 127.0.0.1:9100",
                "probe one peer every second; curl http://127.0.0.1:9100/metrics",
            ),
            (
                "roundtrip agent --config agent.toml",
                "targets, labels and probes from a file",
            ),
            (
                "roundtrip agent --no-responder --watch eth0 --watch-filter 'tcp port 5432'",
                "the database's real requests as latency metrics, network vs server",
            ),
        ],
    ),
    (
        "report",
        &[
            (
                "roundtrip report ping.json -o ping.html",
                "draw a saved --json result as one HTML page",
            ),
            (
                "roundtrip report a.json b.json --svg compare.svg --chart compare",
                "two ping results side by side",
            ),
        ],
    ),
    (
        "mesh",
        &[
            (
                "roundtrip mesh --prometheus http://127.0.0.1:9090",
                "the fleet's matrix from Prometheus",
            ),
            (
                "roundtrip mesh --agent http://10.0.0.1:9100 --agent http://10.0.0.2:9100 --report mesh.html",
                "straight from two agents, as a heat map",
            ),
        ],
    ),
    (
        "generate",
        &[
            (
                "roundtrip generate man --dir /usr/local/share/man/man1",
                "install the man pages (then: man roundtrip)",
            ),
            (
                "roundtrip generate complete-bash --dir /usr/share/bash-completion/completions",
                "install bash completion",
            ),
            (
                "roundtrip generate complete-zsh > _roundtrip",
                "zsh completion on standard output",
            ),
        ],
    ),
];

/// The examples of one command path, as they end its `--help`.
fn render(examples: &[(&str, &str)]) -> String {
    let mut s = String::from("Examples:");
    for (line, what) in examples {
        s.push_str("\n  # ");
        s.push_str(what);
        s.push_str("\n  ");
        s.push_str(line);
    }
    s
}

/// Appends each command's examples to its help (after what its own file already says there).
pub fn attach(cmd: Command) -> Command {
    let mut cmd = cmd;
    for (path, examples) in EXAMPLES {
        let names: Vec<&str> = path.split(' ').filter(|n| !n.is_empty()).collect();
        cmd = with_examples(cmd, &names, &render(examples));
    }
    cmd
}

fn with_examples(cmd: Command, path: &[&str], text: &str) -> Command {
    match path.split_first() {
        None => {
            let short = match cmd.get_after_help() {
                Some(h) => format!("{h}\n\n{text}"),
                None => text.to_string(),
            };
            let long = cmd.get_after_long_help().map(|h| format!("{h}\n\n{text}"));
            let cmd = cmd.after_help(short);
            match long {
                Some(l) => cmd.after_long_help(l),
                None => cmd,
            }
        }
        Some((first, rest)) => {
            let rest = rest.to_vec();
            let text = text.to_string();
            // A path naming no command is a mistake in the table; the test below catches it.
            if cmd.find_subcommand(first).is_none() {
                return cmd;
            }
            cmd.mut_subcommand(first, move |c| with_examples(c, &rest, &text))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn paths(cmd: &Command, prefix: &str, out: &mut Vec<String>) {
        for sub in cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        {
            let path = if prefix.is_empty() {
                sub.get_name().to_string()
            } else {
                format!("{prefix} {}", sub.get_name())
            };
            paths(sub, &path, out);
            out.push(path);
        }
    }

    #[test]
    fn every_command_has_examples() {
        let mut all = Vec::new();
        paths(&super::super::Cli::command(), "", &mut all);
        assert!(all.len() > 20, "{all:?}");
        let missing: Vec<_> = all
            .iter()
            .filter(|p| {
                !EXAMPLES
                    .iter()
                    .any(|(q, ex)| q == p && (2..=3).contains(&ex.len()))
            })
            .collect();
        assert!(
            missing.is_empty(),
            "commands without two or three examples in src/cli/examples.rs: {missing:?}"
        );
        assert!(
            EXAMPLES
                .iter()
                .any(|(q, ex)| q.is_empty() && (2..=3).contains(&ex.len())),
            "roundtrip --help has no examples"
        );
        let unknown: Vec<_> = EXAMPLES
            .iter()
            .filter(|(q, _)| !q.is_empty() && !all.iter().any(|p| p == q))
            .collect();
        assert!(
            unknown.is_empty(),
            "examples for commands that do not exist: {unknown:?}"
        );
    }

    /// `line` split as a shell would: blanks separate words, single or double quotes keep a word whole.
    fn shell_words(line: &str) -> Vec<String> {
        let (mut words, mut cur, mut quote, mut any) = (Vec::new(), String::new(), None, false);
        for c in line.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), c) => cur.push(c),
                (None, '\'' | '"') => {
                    quote = Some(c);
                    any = true;
                }
                (None, c) if c.is_whitespace() => {
                    if any || !cur.is_empty() {
                        words.push(std::mem::take(&mut cur));
                    }
                    any = false;
                }
                (None, c) => cur.push(c),
            }
        }
        if any || !cur.is_empty() {
            words.push(cur);
        }
        words
    }

    #[test]
    fn examples_parse() {
        let cmd = attach(super::super::Cli::command());
        for (path, examples) in EXAMPLES {
            for (line, _) in *examples {
                let owned = shell_words(line.split(" > ").next().unwrap());
                let words: Vec<&str> = owned.iter().map(String::as_str).collect();
                assert_eq!(words.first(), Some(&"roundtrip"), "{line}");
                let depth = path.split(' ').filter(|n| !n.is_empty()).count();
                if depth > 0 {
                    assert_eq!(
                        words[1..=depth].join(" "),
                        *path,
                        "{line} is not an example of {path}"
                    );
                }
                super::super::args::SYNTAX_ONLY.store(true, std::sync::atomic::Ordering::Relaxed);
                if let Err(e) = cmd.clone().try_get_matches_from(&words) {
                    panic!("example of {path} does not parse: {line}\n{e}");
                }
            }
        }
    }

    #[test]
    fn help_ends_with_examples() {
        let mut cmd = attach(super::super::Cli::command());
        let ping = cmd.find_subcommand_mut("ping").unwrap();
        let help = ping.render_long_help().to_string();
        assert!(
            help.trim_end()
                .ends_with("roundtrip ping 127.0.0.1 -c 200 --json > ping.json"),
            "{help}"
        );
        let rpc = cmd
            .find_subcommand_mut("capture")
            .unwrap()
            .find_subcommand_mut("rpc")
            .unwrap();
        let help = rpc.render_long_help().to_string();
        assert!(
            help.contains("Requests are paired with their responses"),
            "{help}"
        );
        // The command's own after-help text stays, the examples follow it.
        assert!(
            help.contains("Examples:") && help.contains("--top 3"),
            "{help}"
        );
    }
}
