//! The pcap-filter(7) subset: the grammar (here), the tokens and words it reads (`lex`) and the expression
//! tree it builds (`tree`, re-exported).
//!
//! Grammar as libpcap's: `not` binds tightest, `and` and `or` have the SAME precedence and associate left to
//! right (`a or b and c` is `(a or b) and c`), and a bare value after `and`/`or`/`not` takes the qualifiers of
//! the previous primitive (`port 80 or 443`, `host a and not b`).
//!
//! Bounded: an expression nests at most [`MAX_DEPTH`] levels (parentheses, `not`, alternations of `and` and
//! `or`, arithmetic), checked BEFORE each level is entered, so no input overflows the stack here or in any walk
//! over the tree afterwards (code generation, comparison, drop); a run of one operator (`port 1 or port 2 or
//! ...`) is built as a balanced tree (the same tests in the same order), so a long list is not deep. At most
//! [`MAX_PRIMITIVES`] primitives and words of at most [`MAX_WORD`] characters.
#![forbid(unsafe_code)]

mod lex;
mod tree;

use lex::{
    DEFAULT_Q, Kind, Quals, Tok, constant, ipv4_parts, is_keyword, kind, lex, number, pqual,
    unsupported,
};
use std::net::{Ipv4Addr, Ipv6Addr};
pub use tree::{ArOp, Arith, Dir, HostProto, LoadBase, NetAddr, Node, PortProto, Proto, RelOp};

/// Deepest nesting of an expression: parentheses, `not`/`!`, each switch between `and` and `or` in a chain,
/// unary minus, brackets and operators of arithmetic each count one level. libpcap's parser stops near 10,000
/// levels (bison's stack: "memory exhausted"); 256 is far beyond any filter written by hand and keeps every
/// recursive walk over the tree small on a 2 MiB thread stack.
pub const MAX_DEPTH: usize = 256;

/// Most primitives (`host A`, `port N`, `tcp`, `len > 100`, ...) in one expression: a classic BPF program
/// holds at most 4,096 instructions and every primitive that is not a repetition costs at least one.
pub const MAX_PRIMITIVES: usize = 4096;

/// Longest word (address, number, keyword): the longest IPv6 address is 45 characters, the longest named
/// constant 31.
pub const MAX_WORD: usize = 64;

/// A parse failure: one line naming the part and what to write instead, and the byte of the expression where
/// it was found (when known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// What is wrong and what to write instead.
    pub msg: String,
    /// Byte offset in the expression of the token where the error was found.
    pub at: Option<usize>,
}

impl ParseError {
    fn new(msg: impl Into<String>) -> ParseError {
        ParseError {
            msg: msg.into(),
            at: None,
        }
    }
}

type R<T> = Result<T, ParseError>;

fn err<T>(msg: impl Into<String>) -> R<T> {
    Err(ParseError::new(msg))
}

struct Parser {
    toks: Vec<Tok>,
    /// Byte offset of each token in the text.
    starts: Vec<usize>,
    /// Length of the text (the position of "the end").
    len: usize,
    pos: usize,
    /// Qualifiers of the last primitive (None: the last one takes no value, e.g. `tcp`, so a bare value is an error).
    last: Option<Quals>,
    /// Levels entered now (see [`MAX_DEPTH`]).
    depth: usize,
}

/// The error of an expression nested deeper than [`MAX_DEPTH`].
fn too_deep<T>() -> R<T> {
    err(format!(
        "the expression nests more than {MAX_DEPTH} levels (parentheses, not, and/or alternations, arithmetic): \
         simplify it"
    ))
}

/// Depth of a tree, without recursion.
fn node_depth(n: &Node) -> usize {
    let mut max = 0;
    let mut stack = vec![(n, 1usize)];
    while let Some((n, d)) = stack.pop() {
        max = max.max(d);
        match n {
            Node::And(a, b) | Node::Or(a, b) => {
                stack.push((a, d + 1));
                stack.push((b, d + 1));
            }
            Node::Not(a) => stack.push((a, d + 1)),
            // The comparison and the root of its arithmetic are one level.
            Node::Rel(_, a, b) => max = max.max(d - 1 + arith_depth(a).max(arith_depth(b))),
            _ => {}
        }
    }
    max
}

/// Depth of an arithmetic tree, without recursion.
fn arith_depth(a: &Arith) -> usize {
    let mut max = 0;
    let mut stack = vec![(a, 1usize)];
    while let Some((a, d)) = stack.pop() {
        max = max.max(d);
        match a {
            Arith::Bin(_, x, y) => {
                stack.push((x, d + 1));
                stack.push((y, d + 1));
            }
            Arith::Neg(x) | Arith::Load(_, x, _) => stack.push((x, d + 1)),
            Arith::Num(_) | Arith::Len => {}
        }
    }
    max
}

/// Primitives (leaves) of a tree, without recursion.
fn primitives(n: &Node) -> usize {
    let mut count = 0;
    let mut stack = vec![n];
    while let Some(n) = stack.pop() {
        match n {
            Node::And(a, b) | Node::Or(a, b) => {
                stack.push(a);
                stack.push(b);
            }
            Node::Not(a) => stack.push(a),
            _ => count += 1,
        }
    }
    count
}

/// `items` (in order) joined by one operator as a balanced tree: the same tests in the same order as the
/// left-leaning chain the grammar reads (and/or are associative and evaluated left to right), ceil(log2 n)
/// levels instead of n. Built without recursion.
pub(crate) fn balanced(and: bool, mut items: Vec<Node>) -> Node {
    while items.len() > 1 {
        let mut next = Vec::with_capacity(items.len().div_ceil(2));
        let mut it = items.into_iter();
        while let Some(a) = it.next() {
            next.push(match it.next() {
                Some(b) if and => Node::And(Box::new(a), Box::new(b)),
                Some(b) => Node::Or(Box::new(a), Box::new(b)),
                None => a,
            });
        }
        items = next;
    }
    items.pop().unwrap_or(Node::Proto(Proto::Ip))
}

fn desc(t: Option<&Tok>) -> String {
    match t {
        Some(Tok::Word(w)) => format!("'{w}'"),
        Some(Tok::Sym(s)) => format!("'{s}'"),
        None => "the end".to_string(),
    }
}

impl Parser {
    /// Runs `f` one level deeper, refused before entering when that passes [`MAX_DEPTH`].
    fn nested<T>(&mut self, f: impl FnOnce(&mut Parser) -> R<T>) -> R<T> {
        if self.depth >= MAX_DEPTH {
            return too_deep();
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }

    /// Refused when a tree `tree_depth` deep (a leaf is 1), built at the current level, passes [`MAX_DEPTH`].
    fn check_depth(&self, tree_depth: usize) -> R<()> {
        if tree_depth.saturating_sub(1) + self.depth > MAX_DEPTH {
            return too_deep();
        }
        Ok(())
    }

    /// Byte offset of the current token (the text's length at the end).
    fn offset(&self) -> usize {
        self.starts.get(self.pos).copied().unwrap_or(self.len)
    }

    /// A chain `first (and|or) x (and|or) y ...`, each operand read by `operand`: runs of one operator become
    /// balanced trees; left to right, as libpcap groups them. Refused past [`MAX_DEPTH`] levels.
    fn chain(&mut self, first: Node, operand: fn(&mut Parser) -> R<Node>) -> R<Node> {
        let mut run = vec![first];
        // Depth of the deepest operand of the run.
        let mut deepest = node_depth(&run[0]);
        let mut op: Option<bool> = None;
        let depth_of =
            |n: usize, deepest: usize| deepest + (usize::BITS - (n - 1).leading_zeros()) as usize;
        loop {
            let and = if self.is_and() {
                true
            } else if self.is_or() {
                false
            } else {
                break;
            };
            if op.is_some_and(|o| o != and) {
                // An alternation: the run so far becomes the left operand of the next run.
                let d = depth_of(run.len(), deepest);
                let joined = balanced(op == Some(true), std::mem::take(&mut run));
                run.push(joined);
                deepest = d;
            }
            op = Some(and);
            self.pos += 1;
            let right = operand(self)?;
            deepest = deepest.max(node_depth(&right));
            run.push(right);
            self.check_depth(depth_of(run.len(), deepest))?;
        }
        self.check_depth(depth_of(run.len(), deepest))?;
        Ok(balanced(op == Some(true), run))
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }
    fn peek_at(&self, n: usize) -> Option<&Tok> {
        self.toks.get(self.pos + n)
    }
    fn word(&self) -> Option<&str> {
        match self.peek() {
            Some(Tok::Word(w)) => Some(w.as_str()),
            _ => None,
        }
    }
    fn word_at(&self, n: usize) -> Option<&str> {
        match self.peek_at(n) {
            Some(Tok::Word(w)) => Some(w.as_str()),
            _ => None,
        }
    }
    fn sym(&self, s: &str) -> bool {
        matches!(self.peek(), Some(Tok::Sym(x)) if *x == s)
    }
    fn eat_sym(&mut self, s: &str) -> bool {
        let yes = self.sym(s);
        if yes {
            self.pos += 1;
        }
        yes
    }
    fn is_and(&self) -> bool {
        self.sym("&&") || self.word() == Some("and")
    }
    fn is_or(&self) -> bool {
        self.sym("||") || self.word() == Some("or")
    }
    fn is_not(&self) -> bool {
        self.sym("!") || self.word() == Some("not")
    }
    /// A value word (address, number, name): not a keyword.
    fn at_value(&self) -> bool {
        matches!(self.word(), Some(w) if !is_keyword(w) && constant(w).is_none())
    }
    fn at_relop(&self) -> bool {
        matches!(self.peek(), Some(Tok::Sym(s)) if matches!(*s, "=" | "==" | "!=" | "<" | "<=" | ">" | ">="))
    }
    fn at_arith_op(&self) -> bool {
        matches!(self.peek(), Some(Tok::Sym(s)) if matches!(*s, "+" | "-" | "*" | "/" | "%" | "&" | "|" | "^" | "<<" | ">>"))
    }

    fn expr(&mut self) -> R<Node> {
        let first = self.term()?;
        self.chain(first, |p| {
            if p.at_value() && !p.value_starts_relation() {
                p.id()
            } else {
                p.term()
            }
        })
    }

    fn value_starts_relation(&self) -> bool {
        matches!(self.peek_at(1), Some(Tok::Sym(s)) if matches!(*s, "=" | "==" | "!=" | "<" | "<=" | ">" | ">=" | "+" | "*" | "%" | "&" | "|" | "^" | "<<" | ">>"))
    }

    fn term(&mut self) -> R<Node> {
        if self.is_not() {
            self.pos += 1;
            let inner = self.nested(|p| {
                if p.at_value() && !p.value_starts_relation() {
                    p.id()
                } else {
                    p.term()
                }
            })?;
            return Ok(Node::Not(Box::new(inner)));
        }
        if self.sym("(") {
            let save = (self.pos, self.last);
            self.pos += 1;
            let first = match self.nested(Parser::expr) {
                Ok(e) if self.eat_sym(")") && !self.at_relop() && !self.at_arith_op() => {
                    self.last = save.1;
                    return Ok(e);
                }
                Ok(_) => ParseError {
                    msg: format!("expected ')' at {}", desc(self.peek())),
                    at: Some(self.offset()),
                },
                Err(mut e) => {
                    e.at.get_or_insert(self.offset());
                    e
                }
            };
            if first.msg.starts_with("the expression nests more than") {
                return Err(first);
            }
            (self.pos, self.last) = save;
            // Not a parenthesised expression: an arithmetic comparison such as `(tcp[13] & 2) != 0`.
            return self.relation().map_err(|_| first);
        }
        let Some(w) = self.word().map(str::to_string) else {
            if self.sym("-") {
                return self.relation();
            }
            return err(format!(
                "expected a primitive (host, net, port, tcp, ...) at {}",
                desc(self.peek())
            ));
        };
        let w = w.as_str();
        if let Some(n) = self.link_primitive(w)? {
            self.last = None;
            return Ok(n);
        }
        if let Some(msg) = unsupported(w) {
            // `ether[...]` and `link[...]` are loads, supported.
            if !(matches!(w, "ether" | "link") && matches!(self.peek_at(1), Some(Tok::Sym("[")))) {
                return err(msg);
            }
            return self.relation();
        }
        if w == "vlan" {
            self.pos += 1;
            let id = match self.word().and_then(number) {
                Some(n) if n < 4096 => {
                    self.pos += 1;
                    Some(n as u16)
                }
                Some(n) => return err(format!("vlan {n}: a VLAN ID is 0-4095")),
                None => None,
            };
            self.last = None;
            return Ok(Node::Vlan(id));
        }
        if w == "less" || w == "greater" {
            self.pos += 1;
            let n = self.num_arg(w)?;
            self.last = None;
            let op = if w == "less" { RelOp::Le } else { RelOp::Ge };
            return Ok(Node::Rel(op, Arith::Len, Arith::Num(n)));
        }
        if w == "len"
            || constant(w).is_some()
            || number(w).is_some() && self.value_starts_relation()
        {
            return self.relation();
        }
        if pqual(w).is_some() && matches!(self.peek_at(1), Some(Tok::Sym("["))) {
            return self.relation();
        }
        if pqual(w).is_some() || kind(w).is_some() || w == "src" || w == "dst" || w == "proto" {
            return self.primitive();
        }
        if self.at_value() {
            return self.id();
        }
        err(format!(
            "unexpected {} (expected a primitive: host, net, port, tcp, ...)",
            desc(self.peek())
        ))
    }

    /// `ether ...`, `broadcast`, `multicast`, `ip broadcast`, `ip multicast`, `ip6 multicast` (None: not one
    /// of them; the position is unchanged).
    fn link_primitive(&mut self, w: &str) -> R<Option<Node>> {
        let next = self.word_at(1).map(str::to_string);
        let node = match (w, next.as_deref()) {
            ("broadcast", _) => {
                self.pos += 1;
                Node::EtherBroadcast
            }
            ("multicast", _) => {
                self.pos += 1;
                Node::EtherMulticast
            }
            ("ip", Some("broadcast")) => {
                self.pos += 2;
                Node::IpBroadcast
            }
            ("ip", Some("multicast")) => {
                self.pos += 2;
                Node::IpMulticast(false)
            }
            ("ip6", Some("multicast")) => {
                self.pos += 2;
                Node::IpMulticast(true)
            }
            ("ip6", Some("broadcast")) => {
                return err(
                    "'ip6 broadcast' does not exist (IPv6 has no broadcast): write ip6 multicast or ether broadcast",
                );
            }
            ("ether", Some("broadcast")) => {
                self.pos += 2;
                Node::EtherBroadcast
            }
            ("ether", Some("multicast")) => {
                self.pos += 2;
                Node::EtherMulticast
            }
            ("ether", Some("proto")) => {
                self.pos += 2;
                let Some(v) = self.word().map(str::to_string) else {
                    return err(format!(
                        "'ether proto' takes an ethertype (a number, \\ip, \\ip6, \\arp, \\rarp), found {}",
                        desc(self.peek())
                    ));
                };
                let et = match v.trim_start_matches('\\') {
                    "ip" => 0x0800,
                    "ip6" => 0x86dd,
                    "arp" => 0x0806,
                    "rarp" => 0x8035,
                    x => match number(x) {
                        Some(n) if (1501..=0xffff).contains(&n) => n,
                        Some(n) if n <= 1500 => {
                            return err(format!(
                                "ether proto {n}: values up to 1500 are 802.3 lengths (LLC frames are not decoded): write ether[14] = {n}"
                            ));
                        }
                        _ => {
                            return err(format!(
                                "ether proto {v}: write an ethertype number (0x0600-0xffff) or \\ip, \\ip6, \\arp, \\rarp"
                            ));
                        }
                    },
                };
                self.pos += 1;
                Node::EtherProto(et as u16)
            }
            ("ether", Some(n)) if n == "host" || n == "src" || n == "dst" => {
                self.pos += 1;
                let mut dir = Dir::Either;
                if let Some(d) = self.word().filter(|w| *w == "src" || *w == "dst") {
                    let src = d == "src";
                    self.pos += 1;
                    dir = if src { Dir::Src } else { Dir::Dst };
                    let other = if src { "dst" } else { "src" };
                    if (self.is_or() || self.is_and()) && self.word_at(1) == Some(other) {
                        dir = if self.is_or() { Dir::Either } else { Dir::Both };
                        self.pos += 2;
                    }
                }
                if self.word() == Some("host") {
                    self.pos += 1;
                }
                let Some(a) = self.word().map(str::to_string) else {
                    return err(format!(
                        "'ether host' takes an address (01:02:03:04:05:06), found {}",
                        desc(self.peek())
                    ));
                };
                let Some(mac) = mac(&a) else {
                    return err(format!(
                        "'{a}' is not an Ethernet address: write six hex bytes, 01:02:03:04:05:06 (names are not resolved)"
                    ));
                };
                self.pos += 1;
                Node::EtherHost(dir, mac)
            }
            _ => return Ok(None),
        };
        Ok(Some(node))
    }

    fn num_arg(&mut self, what: &str) -> R<u32> {
        match self.word().and_then(number) {
            Some(n) => {
                self.pos += 1;
                Ok(n)
            }
            None => err(format!(
                "'{what}' takes a number (bytes), found {}",
                desc(self.peek())
            )),
        }
    }

    /// `[proto] [dir] [kind] ID`, or a protocol alone.
    fn primitive(&mut self) -> R<Node> {
        let mut q = DEFAULT_Q;
        if let Some(p) = self.word().and_then(pqual) {
            q.proto = Some(p);
            self.pos += 1;
            let next = self.word();
            if next == Some("proto") {
                self.pos += 1;
                return self.ip_proto(Some(p));
            }
            let qualified =
                matches!(next, Some(w) if w == "src" || w == "dst" || kind(w).is_some());
            if !qualified {
                self.last = None;
                return Ok(Node::Proto(p));
            }
        }
        if self.word() == Some("proto") {
            self.pos += 1;
            return self.ip_proto(None);
        }
        if let Some(d) = self.word().filter(|w| *w == "src" || *w == "dst") {
            let src = d == "src";
            self.pos += 1;
            q.dir = if src { Dir::Src } else { Dir::Dst };
            // `src or dst` / `src and dst`
            let other = if src { "dst" } else { "src" };
            if (self.is_or() || self.is_and()) && self.word_at(1) == Some(other) {
                q.dir = if self.is_or() { Dir::Either } else { Dir::Both };
                self.pos += 2;
            }
        }
        if let Some(k) = self.word().and_then(kind) {
            q.kind = Some(k);
            self.pos += 1;
        }
        self.last = Some(q);
        if self.sym("(") {
            // `host (a or b)`: a list of values sharing the qualifiers.
            self.pos += 1;
            let e = self.nested(Parser::id_list)?;
            if !self.eat_sym(")") {
                return err(format!("expected ')' at {}", desc(self.peek())));
            }
            return Ok(e);
        }
        self.value(q)
    }

    fn id_list(&mut self) -> R<Node> {
        let first = self.id()?;
        self.chain(first, Parser::id)
    }

    fn ip_proto(&mut self, p: Option<Proto>) -> R<Node> {
        let v = match p {
            None => None,
            Some(Proto::Ip) => Some(true),
            Some(Proto::Ip6) => Some(false),
            Some(_) => return err("'proto' applies to ip or ip6: write ip proto N or ip6 proto N"),
        };
        let Some(w) = self.word() else {
            return err(format!(
                "'proto' takes a protocol number, found {}",
                desc(self.peek())
            ));
        };
        let n = match number(w) {
            Some(n) => n,
            None => match w.trim_start_matches('\\') {
                "tcp" => 6,
                "udp" => 17,
                "icmp" => 1,
                "icmp6" => 58,
                "sctp" => 132,
                "igmp" => 2,
                "gre" => 47,
                "esp" => 50,
                "ah" => 51,
                _ => {
                    return err(format!(
                        "protocol '{w}' is not known here: write its number, e.g. ip proto 47"
                    ));
                }
            },
        };
        let Ok(n) = u8::try_from(n) else {
            return err(format!("protocol {n} is out of range (0-255)"));
        };
        self.pos += 1;
        self.last = None;
        Ok(Node::IpProto(v, n))
    }

    /// A bare value, with the previous primitive's qualifiers.
    fn id(&mut self) -> R<Node> {
        if self.is_not() {
            self.pos += 1;
            let inner = self.nested(Parser::id)?;
            return Ok(Node::Not(Box::new(inner)));
        }
        if self.sym("(") {
            self.pos += 1;
            let e = self.nested(Parser::id_list)?;
            if !self.eat_sym(")") {
                return err(format!("expected ')' at {}", desc(self.peek())));
            }
            return Ok(e);
        }
        let Some(q) = self.last else {
            return err(format!(
                "{} needs a qualifier here: write host {0}, net {0} or port {0}",
                desc(self.peek())
            ));
        };
        self.value(q)
    }

    fn value(&mut self, q: Quals) -> R<Node> {
        let Some(w) = self.word().map(str::to_string) else {
            return err(format!(
                "expected an address or a number at {}",
                desc(self.peek())
            ));
        };
        if is_keyword(&w) {
            if let Some(msg) = unsupported(&w) {
                return err(msg);
            }
            return err(format!("expected an address or a number, found '{w}'"));
        }
        self.pos += 1;
        match q.kind {
            Some(Kind::Port) => {
                let p = self.port_number(&w)?;
                self.port_node(q, p, p)
            }
            Some(Kind::Portrange) => {
                let (a, b) = w.split_once('-').ok_or_else(|| {
                    ParseError::new(format!("portrange '{w}' is not a range: write portrange LOW-HIGH, e.g. portrange 6000-6010"))
                })?;
                let a = self.port_number(a)?;
                let b = self.port_number(b)?;
                self.port_node(q, a.min(b), a.max(b))
            }
            k => self.address(q, k, &w),
        }
    }

    fn port_number(&self, w: &str) -> R<u16> {
        match number(w) {
            Some(n) if n <= 65535 => Ok(n as u16),
            Some(n) => err(format!("port {n} is out of range (0-65535)")),
            None => err(format!(
                "port '{w}': service names are not looked up: write the number, e.g. port 5432"
            )),
        }
    }

    fn port_node(&self, q: Quals, lo: u16, hi: u16) -> R<Node> {
        let proto = match q.proto {
            None => PortProto::Any,
            Some(Proto::Tcp) => PortProto::Tcp,
            Some(Proto::Udp) => PortProto::Udp,
            Some(Proto::Sctp) => PortProto::Sctp,
            Some(_) => {
                return err(
                    "ports belong to tcp, udp or sctp: write tcp port N (or port N for all three)",
                );
            }
        };
        Ok(Node::Port(proto, q.dir, lo, hi))
    }

    fn address(&mut self, q: Quals, k: Option<Kind>, w: &str) -> R<Node> {
        let proto = match q.proto {
            None => HostProto::Any,
            Some(Proto::Ip) => HostProto::Ip,
            Some(Proto::Ip6) => HostProto::Ip6,
            Some(Proto::Arp) => HostProto::Arp,
            Some(Proto::Rarp) => HostProto::Rarp,
            Some(p) => {
                let name = format!("{p:?}").to_lowercase();
                return err(format!(
                    "'{name}' does not qualify a host or net: write {name} and host ADDR"
                ));
            }
        };
        let is_net = k == Some(Kind::Net);
        let node = |n: NetAddr| -> R<Node> {
            match (proto, n) {
                (HostProto::Ip6, NetAddr::V4(..)) => err(format!(
                    "'{w}' is an IPv4 address: write ip host/net (or drop ip6)"
                )),
                (HostProto::Ip | HostProto::Arp | HostProto::Rarp, NetAddr::V6(..)) => {
                    err(format!("'{w}' is an IPv6 address: write ip6 host/net"))
                }
                _ => Ok(Node::Net(proto, q.dir, n)),
            }
        };
        if w.contains(':') {
            let Ok(a) = w.parse::<Ipv6Addr>() else {
                return err(format!("'{w}' is not an IPv6 address"));
            };
            let a = u128::from(a);
            let len = if self.eat_sym("/") {
                match self.word().and_then(number) {
                    Some(n) if n <= 128 => {
                        self.pos += 1;
                        n as u8
                    }
                    _ => {
                        return err(format!(
                            "'{w}/': expected a prefix length 0-128 at {}",
                            desc(self.peek())
                        ));
                    }
                }
            } else {
                128
            };
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(len))
            };
            if a & !mask != 0 {
                return err(format!(
                    "'{w}/{len}' has host bits set: write the network address"
                ));
            }
            if k == Some(Kind::Host) && len != 128 {
                return err(format!("host takes one address: write net {w}/{len}"));
            }
            return node(NetAddr::V6(a, len));
        }
        let Some((v, parts)) = ipv4_parts(w) else {
            if w.bytes().all(|c| c.is_ascii_digit()) {
                return err(format!(
                    "'{w}' is not an address: write port {w} for a port, or a dotted address"
                ));
            }
            return err(format!(
                "'{w}': host names are not resolved: write the IP address (getent hosts {w} gives it)"
            ));
        };
        let mut v = v;
        let mut mask = if parts == 4 {
            u32::MAX
        } else {
            u32::MAX << (32 - 8 * parts)
        };
        let has_mask = self.sym("/") || self.word() == Some("mask");
        if self.eat_sym("/") {
            match self.word().and_then(number) {
                Some(n) if n <= 32 => {
                    self.pos += 1;
                    mask = if n == 0 { 0 } else { u32::MAX << (32 - n) };
                }
                _ => {
                    return err(format!(
                        "'{w}/': expected a prefix length 0-32 at {}",
                        desc(self.peek())
                    ));
                }
            }
        } else if self.word() == Some("mask") {
            self.pos += 1;
            let m = self.word().and_then(ipv4_parts);
            match m {
                Some((m, 4)) => {
                    self.pos += 1;
                    mask = m;
                }
                _ => {
                    return err(format!(
                        "'mask' takes a dotted mask like 255.255.0.0, found {}",
                        desc(self.peek())
                    ));
                }
            }
        } else if parts == 1 && is_net {
            // `net 10` is 10.0.0.0/8, as libpcap promotes a short network number.
            v >>= 24;
            mask = u32::MAX;
            while v != 0 && v & 0xff00_0000 == 0 {
                v <<= 8;
                mask <<= 8;
            }
        }
        if has_mask && !is_net && k.is_some() {
            return err(format!(
                "host takes one address: write net {w} with the mask"
            ));
        }
        if !has_mask && parts != 4 && !is_net {
            return err(format!(
                "'{w}' is not a whole address: write all four parts, or net {w}"
            ));
        }
        if v & !mask != 0 {
            return err(format!(
                "'{w}' has bits set outside the mask {}: write the network address",
                Ipv4Addr::from(mask)
            ));
        }
        node(NetAddr::V4(v, mask))
    }

    // ---- arithmetic relations ----

    fn relation(&mut self) -> R<Node> {
        let a = self.arith(0)?;
        let op = match self.peek() {
            Some(Tok::Sym("=")) | Some(Tok::Sym("==")) => RelOp::Eq,
            Some(Tok::Sym("!=")) => RelOp::Ne,
            Some(Tok::Sym(">")) => RelOp::Gt,
            Some(Tok::Sym(">=")) => RelOp::Ge,
            Some(Tok::Sym("<")) => RelOp::Lt,
            Some(Tok::Sym("<=")) => RelOp::Le,
            t => {
                return err(format!(
                    "expected a comparison (=, !=, <, >, <=, >=) at {}",
                    desc(t)
                ));
            }
        };
        self.pos += 1;
        let b = self.arith(0)?;
        self.last = None;
        Ok(Node::Rel(op, a, b))
    }

    /// Precedence climbing: | ^ (0) < & (1) < << >> (2) < + - (3) < * / % (4).
    fn arith(&mut self, min: u8) -> R<Arith> {
        let mut left = self.arith_unary()?;
        let mut depth = arith_depth(&left);
        loop {
            let (op, prec) = match self.peek() {
                Some(Tok::Sym("|")) => (ArOp::Or, 0),
                Some(Tok::Sym("^")) => (ArOp::Xor, 0),
                Some(Tok::Sym("&")) => (ArOp::And, 1),
                Some(Tok::Sym("<<")) => (ArOp::Lsh, 2),
                Some(Tok::Sym(">>")) => (ArOp::Rsh, 2),
                Some(Tok::Sym("+")) => (ArOp::Add, 3),
                Some(Tok::Sym("-")) => (ArOp::Sub, 3),
                Some(Tok::Sym("*")) => (ArOp::Mul, 4),
                Some(Tok::Sym("/")) => (ArOp::Div, 4),
                Some(Tok::Sym("%")) => (ArOp::Mod, 4),
                _ => return Ok(left),
            };
            if prec < min {
                return Ok(left);
            }
            self.pos += 1;
            let right = self.nested(|p| p.arith(prec + 1))?;
            depth = 1 + depth.max(arith_depth(&right));
            self.check_depth(depth)?;
            left = Arith::Bin(op, Box::new(left), Box::new(right));
        }
    }

    fn arith_unary(&mut self) -> R<Arith> {
        if self.eat_sym("-") {
            return Ok(Arith::Neg(Box::new(self.nested(Parser::arith_unary)?)));
        }
        if self.eat_sym("(") {
            let e = self.nested(|p| p.arith(0))?;
            if !self.eat_sym(")") {
                return err(format!("expected ')' at {}", desc(self.peek())));
            }
            return Ok(e);
        }
        let Some(w) = self.word().map(str::to_string) else {
            return err(format!(
                "expected a number, len or proto[offset] at {}",
                desc(self.peek())
            ));
        };
        self.pos += 1;
        if w == "len" {
            return Ok(Arith::Len);
        }
        if let Some(n) = number(&w).or_else(|| constant(&w)) {
            return Ok(Arith::Num(n));
        }
        let base = match w.as_str() {
            "ether" | "link" => LoadBase::Link,
            "ip" => LoadBase::Ip,
            "ip6" => LoadBase::Ip6,
            "tcp" => LoadBase::Tcp,
            "udp" => LoadBase::Udp,
            "icmp" => LoadBase::Icmp,
            "sctp" => LoadBase::Sctp,
            "icmp6" => LoadBase::Icmp6,
            _ => {
                if let Some(msg) = unsupported(&w) {
                    return err(msg);
                }
                return err(format!(
                    "'{w}' is not a number, len or proto[offset] (ip, ip6, tcp, udp, icmp, icmp6, sctp, ether)"
                ));
            }
        };
        if !self.eat_sym("[") {
            return err(format!(
                "'{w}' in a comparison needs an offset: write {w}[OFFSET] or {w}[OFFSET:SIZE]"
            ));
        }
        let off = self.nested(|p| p.arith(0))?;
        let mut size = 1u8;
        if self.eat_sym(":") {
            size = match self.word().and_then(number) {
                Some(n @ (1 | 2 | 4)) => n as u8,
                _ => {
                    return err(format!(
                        "{w}[...:SIZE]: size is 1, 2 or 4, found {}",
                        desc(self.peek())
                    ));
                }
            };
            self.pos += 1;
        }
        if !self.eat_sym("]") {
            return err(format!("expected ']' at {}", desc(self.peek())));
        }
        Ok(Arith::Load(base, Box::new(off), size))
    }
}

/// An Ethernet address as libpcap reads it: `1:2:3:4:5:6` (also with `-` or `.` between hex groups of one or
/// two digits), `0102.0304.0506`, or twelve hex digits.
fn mac(w: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let parts: Vec<&str> = w.split([':', '-']).collect();
    if parts.len() == 6 {
        for (o, p) in out.iter_mut().zip(&parts) {
            if p.is_empty() || p.len() > 2 {
                return None;
            }
            *o = u8::from_str_radix(p, 16).ok()?;
        }
        return Some(out);
    }
    let hex: String = if w.split('.').count() == 3 && w.split('.').all(|p| p.len() == 4) {
        w.replace('.', "")
    } else if parts.len() == 1 && !w.contains('.') {
        w.to_string()
    } else {
        return None;
    };
    if hex.len() != 12 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Parses an expression; `None` for an empty one (accept everything). Linear in the text's length; bounded
/// by [`MAX_DEPTH`], [`MAX_PRIMITIVES`] and [`MAX_WORD`].
pub fn parse(text: &str) -> Result<Option<Node>, ParseError> {
    let (toks, starts) = lex(text)?;
    if toks.is_empty() {
        return Ok(None);
    }
    let mut p = Parser {
        toks,
        starts,
        len: text.len(),
        pos: 0,
        last: Some(DEFAULT_Q),
        depth: 0,
    };
    let e = p.expr().map_err(|mut e| {
        e.at.get_or_insert(p.offset());
        e
    })?;
    if p.pos != p.toks.len() {
        let t = desc(p.peek());
        return Err(ParseError {
            msg: format!("unexpected {t} (join primitives with and / or)"),
            at: Some(p.offset()),
        });
    }
    let n = primitives(&e);
    if n > MAX_PRIMITIVES {
        return err(format!(
            "the expression has {n} primitives, more than the {MAX_PRIMITIVES} a classic BPF program can test: \
             split it or use net/portrange"
        ));
    }
    Ok(Some(e))
}

#[cfg(test)]
mod tests;
