//! What every capture command shares (`capture`, its `rpc`, `match` and `whatif`, and `replay`): the filter
//! expression's arguments, the refusal of a bad argument, and the error for a capture read short. Kept apart
//! from `capture.rs`, which dispatches to those commands, so that they need not import their dispatcher.

use super::output::{Exit, error_line};
use clap::Args;
use roundtrip::capture::CaptureInfo;

/// `--filter EXPR` or the expression as trailing words (tcpdump's way).
#[derive(Debug, Args)]
pub(super) struct ExprArgs {
    /// tcpdump filter expression (pcap-filter subset: host, net, port, portrange, src/dst, tcp, udp, icmp,
    /// icmp6, ip, ip6, arp, less, greater, and/or/not, tcp[tcpflags] ...), compiled to classic BPF and run on
    /// every packet; words after the file are taken the same way.
    #[arg(long = "filter", value_name = "EXPR", allow_hyphen_values = true)]
    filter: Option<String>,
    /// The filter expression as words after the file (as `tcpdump -r FILE port 5432`).
    #[arg(value_name = "EXPRESSION")]
    words: Vec<String>,
}

impl ExprArgs {
    /// The parsed expression (None when none was given). A bad expression exits 2 with one line, before any
    /// I/O.
    pub(super) fn expr(&self) -> Option<roundtrip::capture::bpf::Expr> {
        self.expr_after(None)
    }

    /// Like [`expr`](Self::expr), with `lead` as the expression's first word: live (`--live lo port 5432`) the
    /// first word after the options is not a file.
    pub(super) fn expr_after(
        &self,
        lead: Option<&std::path::Path>,
    ) -> Option<roundtrip::capture::bpf::Expr> {
        use roundtrip::capture::bpf::Expr;
        let mut words = self.words.clone();
        if let Some(l) = lead {
            words.insert(0, l.display().to_string());
        }
        let (text, r) = match (&self.filter, words.is_empty()) {
            (None, true) => return None,
            (Some(_), false) => refuse(format!(
                "the filter expression is given twice (--filter and words after the file '{}'): give one",
                roundtrip::capture::bpf::excerpt(&words.join(" "), None)
            )),
            (Some(f), true) => (f.clone(), Expr::parse(f)),
            (None, false) => (words.join(" "), Expr::parse_words(&words)),
        };
        match r {
            Ok(e) if e.is_empty() => None,
            Ok(e) => Some(e),
            Err(e) => refuse(format!(
                "--filter '{}': {e}",
                roundtrip::capture::bpf::excerpt(text.trim(), None)
            )),
        }
    }
}

/// Exits with 2 after a one-line error: an argument is wrong and nothing was read yet.
pub(super) fn refuse(msg: impl std::fmt::Display) -> ! {
    error_line(msg);
    std::process::exit(2)
}

/// Reading that stopped before the end of the file (truncated, damaged, still being written) is an error for
/// every reader of a capture (stats, timeline, flows, rpc, match, whatif, replay), said the same way: one line
/// with the file, the reason and its byte offset, exit 1; the results of the packets before it are still
/// printed.
pub(super) fn damage(info: &CaptureInfo) -> Exit {
    match &info.warning {
        Some(w) => {
            error_line(format!(
                "{}: {w}; results cover the {} packets before it (the file is damaged or was still being written)",
                info.file, info.packets_read
            ));
            Exit::Failed
        }
        None => Exit::Ok,
    }
}
