//! tcpdump filter expressions (pcap-filter(7)), compiled to classic BPF by a compiler of our own.
//!
//! One compiled [`Program`] serves both places a filter runs: attached to a live AF_PACKET socket
//! (`SO_ATTACH_FILTER`, the kernel runs it) and on capture files, where [`Program::run`] interprets the same
//! instructions with the kernel's semantics (a load past the captured bytes rejects the packet, division by zero
//! rejects, jumps go forward only). There is no second evaluator: what a file keeps is what the socket keeps.
//!
//! Why hand-written: libpcap's compiler is C, and the project must build on a machine without libpcap's headers
//! (the README's first command is `cargo build`); no crate compiles pcap-filter without it. The subset is small
//! and checked packet by packet against tcpdump itself (tests/capture_filter.rs).
//!
//! # The subset
//! - Protocols: `ip`, `ip6`, `arp`, `rarp`, `tcp`, `udp`, `sctp`, `icmp` (IPv4), `icmp6`; `ip proto N`,
//!   `ip6 proto N`, `proto N`.
//! - `[ip|ip6|arp|rarp] [src|dst|src or dst|src and dst] host ADDR` (IPv4 or IPv6; without a protocol an IPv4
//!   address also matches ARP/RARP sender/target, as libpcap), `net A.B.C.D/LEN`, `net A.B.C.D mask M`,
//!   `net A.B` (short network numbers), `net V6ADDR/LEN`.
//! - `[tcp|udp|sctp] [src|dst|...] port N`, `portrange A-B`: without a transport, TCP, UDP and SCTP.
//! - `less N`, `greater N` (length on the wire), and comparisons of arithmetic over `len`, numbers and
//!   `PROTO[OFFSET]` / `PROTO[OFFSET:SIZE]` loads (`ip`, `ip6`, `tcp`, `udp`, `sctp`, `icmp`, `icmp6`, `ether`),
//!   with the named constants `tcpflags`, `tcp-syn`, `tcp-ack`, ..., `icmptype`, `icmp-echo`, ...:
//!   `tcp[tcpflags] & (tcp-syn|tcp-fin) != 0`, `tcp[13] & 2 != 0`, `ip[2:2] > 576`.
//! - `and`/`&&`, `or`/`||`, `not`/`!`, parentheses. As in libpcap, `and` and `or` have the same precedence and
//!   group left to right; a bare value takes the previous primitive's qualifiers: `port 80 or 443`,
//!   `host 10.0.0.1 and not 10.0.0.2`, `host (10.0.0.1 or 10.0.0.2)`.
//! - Link layer: `ether [src|dst|src or dst|src and dst] [host] MAC`, `ether broadcast`/`broadcast`,
//!   `ether multicast`/`multicast` (Ethernet captures only: refused elsewhere, as tcpdump does),
//!   `ether proto N|\ip|\ip6|\arp|\rarp`; `ip broadcast` (the netmask given to
//!   [`Expr::compile_with_netmask`], 0 on files as `tcpdump -r`), `ip multicast`, `ip6 multicast`.
//! - `vlan [ID]` on Ethernet captures: an 802.1Q/802.1ad/0x9100 tag (with that VLAN ID); as in libpcap, every
//!   primitive AFTER it in the expression reads 4 bytes further (`vlan 100 and port 80`; `port 80 and vlan`
//!   looks for the port in the untagged position). Not on the cooked socket: the kernel removes tags there.
//! - An empty expression accepts every packet.
//!
//! Semantics follow libpcap: ports match only the first fragment of an IPv4 packet; IPv6 ports and `ip6 host`
//! look at the fixed header only (extension headers are not walked, as libpcap does), and `tcp`/`udp`/`icmp6`
//! look through one fragment header; `tcp[...]` loads are IPv4 only.
//!
//! Refused, with one line naming the part and what to write instead: host names and service names (not
//! resolved: write the address or the number), `gateway`, `ip6 broadcast`, `mpls`, `inbound`/`outbound`, `protochain` and the other link-layer protocols.
//!
//! # Targets
//! [`Target::Link`] for files and `SOCK_RAW` sockets: Ethernet (1), Linux SLL (113), SLL2 (276), raw IP
//! (101, 12, 14, 228, 229), NULL (0: the family in either byte order) and LOOP (108).
//! [`Target::Cooked`] for an `AF_PACKET SOCK_DGRAM` socket (`any`): data starts at the network header, the
//! ethertype comes from the ancillary load `SKF_AD_OFF + SKF_AD_PROTOCOL`.
#![forbid(unsafe_code)]

mod codegen;
pub mod parse;
pub mod vm;

use crate::capture::read::LinkType;
use thiserror::Error;
pub use vm::{Insn, InvalidProgram, Meta, Program};

/// What a program is compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// Packets starting with the link-layer header of this type (capture files, `SOCK_RAW` sockets).
    Link(LinkType),
    /// `AF_PACKET SOCK_DGRAM`: packets start at the network header; the ethertype is ancillary data.
    Cooked,
}

/// Code generation options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Reject packets this host sends (`PACKET_OUTGOING`), as libpcap does on `lo` so each loopback packet is
    /// seen once. Uses an ancillary load: only for live sockets ([`Program::run`] rejects every packet).
    pub drop_outgoing: bool,
    /// The value an accepted packet returns: the bytes the kernel keeps (snaplen).
    pub snaplen: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            drop_outgoing: false,
            snaplen: 262_144,
        }
    }
}

/// A filter expression that cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CompileError {
    /// The text is not in the supported subset.
    #[error("{0}")]
    Parse(String),
    /// The link type has no code generator.
    #[error(
        "filters cannot be compiled for link type {0} (supported: ethernet, linux-sll, linux-sll2, raw ip, null, loop)"
    )]
    LinkType(LinkType),
    /// A conditional jump would span more than 255 instructions.
    #[error(
        "the expression is too long for classic BPF ({0} instructions, jumps span at most 255): split it"
    )]
    TooLong(usize),
    /// Anything else (division by zero, ...).
    #[error("{0}")]
    Other(String),
    /// The generated program fails the kernel's checks (a bug).
    #[error("generated program is invalid: {0}")]
    Invalid(InvalidProgram),
}

/// A parsed filter expression: checked once, compiled for each link type it meets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expr {
    text: String,
    root: Option<parse::Node>,
}

impl Expr {
    /// Parses `text` (pcap-filter syntax, the subset above). The error is one line naming the part.
    pub fn parse(text: &str) -> Result<Expr, CompileError> {
        let root = parse::parse(text).map_err(|e| {
            // A caller quotes the expression's first EXCERPT_CHARS characters: past them, say where.
            let near = match e.at {
                Some(at) if text.chars().count() > EXCERPT_CHARS => {
                    format!(" (at byte {at}: '{}')", excerpt(text, Some(at)))
                }
                _ => String::new(),
            };
            CompileError::Parse(format!("{}{near}", e.msg))
        })?;
        let e = Expr {
            text: text.split_whitespace().collect::<Vec<_>>().join(" "),
            root,
        };
        // Catch code-generation errors (division by zero, nesting) now, before any I/O.
        e.compile(Target::Link(LinkType::ETHERNET), &Options::default())?;
        Ok(e)
    }

    /// Parses words as tcpdump takes them on its command line (joined with spaces).
    pub fn parse_words<S: AsRef<str>>(words: &[S]) -> Result<Expr, CompileError> {
        let text: Vec<&str> = words.iter().map(|w| w.as_ref()).collect();
        Expr::parse(&text.join(" "))
    }

    /// An expression built as a tree rather than parsed (the live capture's `--host/--port/--flow` terms):
    /// `text` is what is shown for it, `root` what is compiled (None accepts everything).
    pub fn from_tree(text: String, root: Option<parse::Node>) -> Expr {
        Expr { text, root }
    }

    /// The expression as given (whitespace normalised).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The expression as an error line quotes it: [`excerpt`] of its start.
    pub fn excerpt(&self) -> String {
        excerpt(&self.text, None)
    }

    /// True for the empty expression (accepts everything).
    pub fn is_empty(&self) -> bool {
        self.root.is_none()
    }

    /// The parsed tree (None when empty).
    pub fn tree(&self) -> Option<&parse::Node> {
        self.root.as_ref()
    }

    /// Compiles for `target`. `ip broadcast` uses the netmask 0.0.0.0, as `tcpdump -r` does on files: only
    /// 255.255.255.255 and 0.0.0.0 are broadcasts.
    pub fn compile(&self, target: Target, opts: &Options) -> Result<Program, CompileError> {
        codegen::compile(self.root.as_ref(), target, opts, 0)
    }

    /// [`compile`](Self::compile) for a live socket whose interface has the IPv4 netmask `netmask` (host
    /// order): `ip broadcast` is then a destination whose host part is all ones or all zeros, as libpcap
    /// compiles it for that interface.
    pub fn compile_with_netmask(
        &self,
        target: Target,
        opts: &Options,
        netmask: u32,
    ) -> Result<Program, CompileError> {
        codegen::compile(self.root.as_ref(), target, opts, netmask)
    }
}

/// Most characters of an expression an error quotes ([`excerpt`]).
pub const EXCERPT_CHARS: usize = 60;

/// `text` (an expression, from the command line or a file) as an error line quotes it: whole when it has at
/// most [`EXCERPT_CHARS`] characters, else [`EXCERPT_CHARS`] characters around byte `at` (from the start when
/// `None`) with `…` where it was cut; blanks (tab, line breaks) shown as spaces and every other control or
/// bidirectional character escaped ([`crate::terminal::escape_for_terminal`]), so the line stays one line and
/// shows what the text holds.
pub fn excerpt(text: &str, at: Option<usize>) -> String {
    let n = text.chars().count();
    let (from, to) = if n <= EXCERPT_CHARS {
        (0, n)
    } else {
        let at_char = at.map_or(0, |b| {
            text.get(..b.min(text.len()))
                .map_or(0, |head| head.chars().count())
        });
        let from = at_char
            .saturating_sub(EXCERPT_CHARS / 3)
            .min(n - EXCERPT_CHARS);
        (from, from + EXCERPT_CHARS)
    };
    let body: String = text
        .chars()
        .skip(from)
        .take(to - from)
        .map(|c| if c.is_ascii_whitespace() { ' ' } else { c })
        .collect();
    format!(
        "{}{}{}",
        if from > 0 { "…" } else { "" },
        crate::terminal::escape_for_terminal(&body),
        if to < n { "…" } else { "" }
    )
}

/// Parses and compiles in one step.
pub fn compile(text: &str, target: Target, opts: &Options) -> Result<Program, CompileError> {
    Expr::parse(text)?.compile(target, opts)
}

/// Runs one expression on the packets of a file whose interfaces may have different link types: compiles
/// once per link type met, then interprets.
#[derive(Debug, Clone)]
pub struct LinkPrograms {
    expr: Expr,
    progs: Vec<(LinkType, Result<Program, CompileError>)>,
}

impl LinkPrograms {
    /// For `expr`.
    pub fn new(expr: Expr) -> Self {
        LinkPrograms {
            expr,
            progs: Vec::new(),
        }
    }

    /// The expression.
    pub fn expr(&self) -> &Expr {
        &self.expr
    }

    /// True when the packet (captured bytes from the link header, length on the wire) passes. `Err` when the
    /// expression cannot be compiled for this link type (the packet does not pass).
    #[inline]
    pub fn matches(
        &mut self,
        link: LinkType,
        data: &[u8],
        wire_len: u32,
    ) -> Result<bool, &CompileError> {
        let i = match self.progs.iter().position(|(l, _)| *l == link) {
            Some(i) => i,
            None => {
                let p = self.expr.compile(Target::Link(link), &Options::default());
                self.progs.push((link, p));
                self.progs.len() - 1
            }
        };
        match &self.progs[i].1 {
            Ok(p) => Ok(p.run(data, wire_len) != 0),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests;
