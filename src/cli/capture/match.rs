//! `roundtrip capture match`: the same requests seen in a client-side and a server-side capture, paired, and
//! the verdict: network or server.

use super::super::output::{Exit, error_line, note, out_text};
use super::rpc::{parse_proto, warn_exit};
use anyhow::Context;
use clap::Args;
use roundtrip::capture::Filter;
use roundtrip::capture::matching;
use roundtrip::capture::rpc::driver::ProtoChoice;
use roundtrip::capture::rpc::run::{self};
use roundtrip::report::match_verdict;
use std::path::PathBuf;

/// Help shown after `capture match --help`.
pub const MATCH_HELP: &str = "Requests are paired by ONC-RPC XID / DNS ID, else by the TCP sequence number of the \
request's first byte (NAT is fine). Through a box that terminates TCP (proxy, load balancer, pooler), what is \
left is paired by content (a hash of the request's first 64 bytes: SQL text, Redis command and key, sockperf \
sequence number) within the connection pair that shares the most contents, then by order; the text counts each \
method ('paired by:'), --json lists every pair with its method. Times to the response's first and last byte \
are compared at both ends; their difference is the path between the capture points.";

/// Arguments of `roundtrip capture match`.
#[derive(Debug, Args)]
pub struct MatchArgs {
    /// Capture taken on (or near) the client.
    #[arg(value_name = "CLIENT_FILE")]
    client: PathBuf,
    /// Capture taken on (or near) the server, at the same time.
    #[arg(value_name = "SERVER_FILE")]
    server: PathBuf,
    /// Protocol: auto, nfs, pgsql, mysql, redis, dns, http, tns, smb2, sockperf, tls or generic.
    #[arg(long, default_value = "auto", value_parser = parse_proto)]
    proto: ProtoChoice,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    expr: super::ExprArgs,
    #[command(flatten)]
    pictures: super::super::report::PictureArgs,
}

/// Runs `roundtrip capture match`.
pub fn run_match(a: MatchArgs) -> anyhow::Result<Exit> {
    let filter = Filter {
        expr: a.expr.expr()?,
        ..Filter::default()
    };
    a.pictures
        .validate()
        .map_err(super::super::output::refused)?;
    let (ci, c) = run::collect(&a.client, &filter, a.proto)
        .with_context(|| format!("cannot analyse the client capture {}", a.client.display()))?;
    let (si, s) = run::collect(&a.server, &filter, a.proto)
        .with_context(|| format!("cannot analyse the server capture {}", a.server.display()))?;
    let (r, verdict) = matching::match_captures(&c.transactions, &s.transactions);
    let label = format!("{} vs {}", a.client.display(), a.server.display());
    if a.pictures.wanted() || a.json {
        let doc = roundtrip::doc::capture_match::MatchDoc::new(
            ci.clone(),
            si.clone(),
            r.clone(),
            match_verdict::words(&verdict),
        );
        super::super::report::draw_and_print_doc(&a.pictures, a.json, &doc, &label)?;
    }
    if !a.json {
        out_text(roundtrip::report::text::matching::match_text(
            &ci, &si, &r, &verdict,
        ))?;
    }
    let e1 = warn_exit(&ci);
    let e2 = warn_exit(&si);
    if r.unrelated && (e1 == Exit::Failed || e2 == Exit::Failed) {
        // The damage already is the error (one line); nothing to compare follows from it.
        note("note: no request of the damaged capture's readable part is in the other capture");
        return Ok(Exit::Failed);
    }
    if r.unrelated {
        error_line(format!(
            "{} and {} do not show the same requests: nothing to compare (were they taken at the same time, on \
             both ends of the same traffic?)",
            a.client.display(),
            a.server.display()
        ));
        return Ok(Exit::Failed);
    }
    if !a.json
        && r.matched > 0
        && (r.matched as f64) < 0.5 * (r.client_requests.min(r.server_requests) as f64)
    {
        note("note: fewer than half of the requests matched; see 'unmatched' for why");
    }
    Ok(if e1 == Exit::Ok && e2 == Exit::Ok {
        Exit::Ok
    } else {
        Exit::Failed
    })
}
