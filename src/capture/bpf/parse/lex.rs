//! Tokens and words: the lexer, and what each word of the grammar is (protocol and kind qualifiers, numbers,
//! named constants, keywords outside the subset with advice on what to write instead).

use super::{Dir, MAX_WORD, ParseError, Proto, R};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Tok {
    Word(String),
    Sym(&'static str),
}

const SYMS: [&str; 22] = [
    "&&", "||", "!=", "==", "<=", ">=", "<<", ">>", "(", ")", "[", "]", ":", "!", "&", "|", "^",
    "+", "-", "*", "/", "%",
];

/// The tokens of `s` and the byte offset each starts at.
pub(super) fn lex(s: &str) -> R<(Vec<Tok>, Vec<usize>)> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut starts = Vec::new();
    let mut i = 0;
    let mut depth = 0usize;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let word_char = |c: u8, first: bool| {
            c.is_ascii_alphanumeric()
                || c == b'\\'
                || (!first && matches!(c, b'.' | b'_' | b'-'))
                || (depth == 0 && c == b':')
        };
        if word_char(c, true) {
            let st = i;
            while i < b.len() && word_char(b[i], i == st) {
                i += 1;
            }
            // A word never ends with '-' (`5 -1` is arithmetic).
            while i > st + 1 && b[i - 1] == b'-' {
                i -= 1;
            }
            if i - st > MAX_WORD {
                return Err(ParseError {
                    msg: format!(
                        "a word of {} characters: no address, number or keyword is longer than {MAX_WORD}",
                        i - st
                    ),
                    at: Some(st),
                });
            }
            starts.push(st);
            out.push(Tok::Word(s[st..i].to_string()));
            continue;
        }
        if c == b'<' || c == b'>' || c == b'=' {
            let two = b.get(i + 1) == Some(&b'=') || (c != b'=' && b.get(i + 1) == Some(&c));
            let sym: &'static str = match (c, two) {
                (b'<', false) => "<",
                (b'>', false) => ">",
                (b'=', false) => "=",
                (b'<', true) if b[i + 1] == b'=' => "<=",
                (b'>', true) if b[i + 1] == b'=' => ">=",
                (b'<', true) => "<<",
                (b'>', true) => ">>",
                _ => "==",
            };
            starts.push(i);
            out.push(Tok::Sym(sym));
            i += if two { 2 } else { 1 };
            continue;
        }
        let Some(sym) = SYMS.iter().find(|sym| b[i..].starts_with(sym.as_bytes())) else {
            let ch = s[i..].chars().next().unwrap_or('?');
            let shown =
                crate::terminal::escape_for_terminal(ch.encode_utf8(&mut [0; 4])).into_owned();
            return Err(ParseError {
                msg: format!("unexpected character '{shown}'"),
                at: Some(i),
            });
        };
        match *sym {
            "[" => depth += 1,
            "]" => depth = depth.saturating_sub(1),
            _ => {}
        }
        starts.push(i);
        out.push(Tok::Sym(sym));
        i += sym.len();
    }
    Ok((out, starts))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Host,
    Net,
    Port,
    Portrange,
}

/// The qualifiers of a primitive, inherited by a bare value that follows `and`/`or`/`not`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Quals {
    pub(super) proto: Option<Proto>,
    pub(super) dir: Dir,
    pub(super) kind: Option<Kind>,
}

pub(super) const DEFAULT_Q: Quals = Quals {
    proto: None,
    dir: Dir::Either,
    kind: None,
};

pub(super) fn pqual(w: &str) -> Option<Proto> {
    Some(match w {
        "ip" => Proto::Ip,
        "ip6" => Proto::Ip6,
        "arp" => Proto::Arp,
        "rarp" => Proto::Rarp,
        "tcp" => Proto::Tcp,
        "udp" => Proto::Udp,
        "sctp" => Proto::Sctp,
        "icmp" => Proto::Icmp,
        "icmp6" => Proto::Icmp6,
        _ => return None,
    })
}

pub(super) fn kind(w: &str) -> Option<Kind> {
    Some(match w {
        "host" => Kind::Host,
        "net" => Kind::Net,
        "port" => Kind::Port,
        "portrange" => Kind::Portrange,
        _ => return None,
    })
}

/// Keywords of pcap-filter outside the subset, with what to write instead.
pub(super) fn unsupported(w: &str) -> Option<String> {
    let advice = match w {
        "gateway" => "write host ADDR with the gateway's IP address",
        "ether" => {
            "write ether host|src|dst MAC, ether broadcast|multicast, ether proto N or ether[OFFSET]"
        }
        "fddi" | "tr" | "wlan" => "filter on IP addresses: host ADDR / net NET",
        "mpls" | "pppoes" | "pppoed" | "geneve" | "vxlan" => {
            "encapsulations are not decoded (vlan is); write ether[OFFSET] comparisons on a file"
        }
        "inbound" | "outbound" | "ifname" | "on" | "rnr" | "rulenum" | "reason" | "rset"
        | "srnr" | "subrulenum" | "action" => {
            "no replacement (link-layer metadata is not filtered)"
        }
        "protochain" => "write ip6 proto N (extension headers are not walked)",
        "atalk" | "aarp" | "decnet" | "iso" | "stp" | "ipx" | "netbeui" | "lat" | "sca"
        | "moprc" | "mopdl" | "esis" | "isis" | "clnp" | "llc" | "radio" | "ah" | "esp" | "pim"
        | "vrrp" | "carp" | "igmp" | "igrp" | "ipv6" => {
            "write ip proto N or ip6 proto N with its protocol number"
        }
        "type" | "subtype" | "dir" | "addr1" | "addr2" | "addr3" | "addr4" | "ta" | "ra" => {
            "802.11 fields are not filtered"
        }
        "gre" | "atm" | "lane" | "oam" | "oamf4" | "oamf4ec" | "oamf4sc" | "metac" | "bcc"
        | "sc" | "ilmic" | "connectmsg" | "metaconnect" | "vpi" | "vci" | "fisu" | "lssu"
        | "msu" | "hfisu" | "hlssu" | "hmsu" | "sio" | "opc" | "dpc" | "sls" | "hsio" | "hopc"
        | "hdpc" | "hsls" | "slip" | "link" => "no replacement in this subset",
        _ => return None,
    };
    Some(format!("'{w}' is not supported: {advice}"))
}

pub(super) fn number(w: &str) -> Option<u32> {
    if let Some(h) = w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
        return u32::from_str_radix(h, 16).ok();
    }
    if w.len() > 1 && w.starts_with('0') && w.bytes().all(|c| c.is_ascii_digit()) {
        return u32::from_str_radix(&w[1..], 8).ok();
    }
    w.parse().ok()
}

/// Named constants of pcap-filter (offsets and values for `tcp[]`/`icmp[]`/`icmp6[]`).
pub(super) fn constant(w: &str) -> Option<u32> {
    Some(match w {
        "tcpflags" => 13,
        "tcp-fin" => 0x01,
        "tcp-syn" => 0x02,
        "tcp-rst" => 0x04,
        "tcp-push" => 0x08,
        "tcp-ack" => 0x10,
        "tcp-urg" => 0x20,
        "tcp-ece" => 0x40,
        "tcp-cwr" => 0x80,
        "icmptype" | "icmp6type" => 0,
        "icmpcode" | "icmp6code" => 1,
        "icmp-echoreply" => 0,
        "icmp-unreach" => 3,
        "icmp-sourcequench" => 4,
        "icmp-redirect" => 5,
        "icmp-echo" => 8,
        "icmp-routeradvert" => 9,
        "icmp-routersolicit" => 10,
        "icmp-timxceed" => 11,
        "icmp-paramprob" => 12,
        "icmp-tstamp" => 13,
        "icmp-tstampreply" => 14,
        "icmp-ireq" => 15,
        "icmp-ireqreply" => 16,
        "icmp-maskreq" => 17,
        "icmp-maskreply" => 18,
        "icmp6-destinationunreach" => 1,
        "icmp6-packettoobig" => 2,
        "icmp6-timeexceeded" => 3,
        "icmp6-parameterproblem" => 4,
        "icmp6-echo" => 128,
        "icmp6-echoreply" => 129,
        "icmp6-multicastlistenerquery" => 130,
        "icmp6-multicastlistenerreportv1" => 131,
        "icmp6-multicastlistenerdone" => 132,
        "icmp6-routersolicit" => 133,
        "icmp6-routeradvert" => 134,
        "icmp6-neighborsolicit" => 135,
        "icmp6-neighboradvert" => 136,
        "icmp6-redirect" => 137,
        _ => return None,
    })
}

pub(super) fn is_keyword(w: &str) -> bool {
    pqual(w).is_some()
        || kind(w).is_some()
        || matches!(
            w,
            "src"
                | "dst"
                | "and"
                | "or"
                | "not"
                | "less"
                | "greater"
                | "len"
                | "proto"
                | "mask"
                | "vlan"
                | "broadcast"
                | "multicast"
        )
        || unsupported(w).is_some()
}

pub(super) fn ipv4_parts(w: &str) -> Option<(u32, u32)> {
    // 1 to 4 dotted decimal parts: (value left-aligned, number of parts).
    let parts: Vec<&str> = w.split('.').collect();
    if parts.len() > 4
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.bytes().all(|c| c.is_ascii_digit()))
    {
        return None;
    }
    let mut v = 0u32;
    for p in &parts {
        let n: u8 = p.parse().ok()?;
        v = (v << 8) | u32::from(n);
    }
    Some((v << (8 * (4 - parts.len())), parts.len() as u32))
}
