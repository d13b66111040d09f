//! Code generation: the expression tree to classic BPF for one link type (or the cooked `any` socket), with
//! libpcap's semantics and test order (so a packet cut short is rejected where libpcap's program rejects it).
//!
//! Here: the expression tree to a branch tree of tests. Emitting it as instructions, and the optimiser, are in
//! `emit`.
#![forbid(unsafe_code)]

use super::parse::{ArOp, Arith, Dir, HostProto, LoadBase, NetAddr, Node, PortProto, Proto, RelOp};
use super::vm::{
    Insn, PACKET_OUTGOING, Program, SKF_AD_OFF, SKF_AD_PKTTYPE, SKF_AD_PROTOCOL, op::*,
};
use super::{CompileError, Options, Target};
use crate::capture::read::LinkType;

mod emit;
mod normal;

const ETH_IP: u32 = 0x0800;
const ETH_IP6: u32 = 0x86dd;
const ETH_ARP: u32 = 0x0806;
const ETH_RARP: u32 = 0x8035;
/// BSD values of AF_INET6 (NetBSD/OpenBSD 24, FreeBSD 28, Darwin 30), the ones libpcap accepts on NULL/LOOP.
const BSD_AF_INET6: [u32; 3] = [30, 24, 28];

/// A condition over the packet.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum B {
    Const(bool),
    And(Box<B>, Box<B>),
    Or(Box<B>, Box<B>),
    Not(Box<B>),
    /// Run `stmts` (they set A, maybe X and scratch), then jump: true when `A <code> k` holds.
    Test {
        stmts: Vec<Insn>,
        code: u16,
        k: u32,
    },
}

fn and(a: B, b: B) -> B {
    B::And(Box::new(a), Box::new(b))
}
fn or(a: B, b: B) -> B {
    B::Or(Box::new(a), Box::new(b))
}
fn not(a: B) -> B {
    B::Not(Box::new(a))
}
fn any(v: Vec<B>) -> B {
    v.into_iter().reduce(or).unwrap_or(B::Const(false))
}
fn all(v: Vec<B>) -> B {
    v.into_iter().reduce(and).unwrap_or(B::Const(true))
}

fn fold(b: B) -> B {
    match b {
        B::And(a, c) => match (fold(*a), fold(*c)) {
            (B::Const(false), _) | (_, B::Const(false)) => B::Const(false),
            (B::Const(true), x) | (x, B::Const(true)) => x,
            (x, y) => and(x, y),
        },
        B::Or(a, c) => match (fold(*a), fold(*c)) {
            (B::Const(true), _) | (_, B::Const(true)) => B::Const(true),
            (B::Const(false), x) | (x, B::Const(false)) => x,
            (x, y) => or(x, y),
        },
        B::Not(a) => match fold(*a) {
            B::Const(v) => B::Const(!v),
            x => not(x),
        },
        x => x,
    }
}

/// `ld{size} [off]` then compare.
fn cmp(size: u16, off: u32, mask: Option<u32>, k: u32) -> B {
    let mut stmts = vec![Insn::stmt(LD | size | ABS, off)];
    if let Some(m) = mask {
        stmts.push(Insn::stmt(ALU | AND | K, m));
    }
    B::Test {
        stmts,
        code: JMP | JEQ | K,
        k,
    }
}

struct Gen {
    target: Target,
    /// Offset of the network header.
    nh: u32,
    /// Scratch words in use.
    scratch: u32,
    /// Offset of the Ethernet type field (12, plus 4 for every `vlan` met so far).
    eth_type: u32,
    /// The IPv4 netmask of `ip broadcast`.
    netmask: u32,
}

impl Gen {
    fn new(target: Target, netmask: u32) -> Result<Gen, CompileError> {
        let nh = match target {
            Target::Cooked => 0,
            Target::Link(l) => match l.0 {
                1 => 14,
                113 => 16,
                276 => 20,
                101 | 12 | 14 | 228 | 229 => 0,
                0 | 108 => 4,
                _ => return Err(CompileError::LinkType(l)),
            },
        };
        Ok(Gen {
            target,
            nh,
            scratch: 0,
            eth_type: 12,
            netmask,
        })
    }

    /// The packet's network protocol is `et` (an ethertype).
    fn linktype(&self, et: u32) -> B {
        let l = match self.target {
            Target::Cooked => {
                return B::Test {
                    stmts: vec![Insn::stmt(LD | W | ABS, SKF_AD_OFF + SKF_AD_PROTOCOL)],
                    code: JMP | JEQ | K,
                    k: et,
                };
            }
            Target::Link(l) => l,
        };
        match l.0 {
            1 => cmp(H, self.eth_type, None, et),
            113 => cmp(H, 14, None, et),
            276 => cmp(H, 0, None, et),
            101 | 12 | 14 => match et {
                ETH_IP => cmp(B, 0, Some(0xf0), 0x40),
                ETH_IP6 => cmp(B, 0, Some(0xf0), 0x60),
                _ => B::Const(false),
            },
            228 => B::Const(et == ETH_IP),
            229 => B::Const(et == ETH_IP6),
            0 | 108 => {
                // NULL: the family in the capturing host's byte order (either, here); LOOP: network order.
                let null = l.0 == 0;
                let fams: Vec<u32> = match et {
                    ETH_IP => vec![2],
                    ETH_IP6 => BSD_AF_INET6.to_vec(),
                    _ => return B::Const(false),
                };
                let mut v = Vec::new();
                for f in fams {
                    v.push(cmp(W, 0, None, f));
                    if null {
                        v.push(cmp(W, 0, None, f.swap_bytes()));
                    }
                }
                any(v)
            }
            _ => B::Const(false),
        }
    }

    fn ip(&self) -> B {
        self.linktype(ETH_IP)
    }
    fn ip6(&self) -> B {
        self.linktype(ETH_IP6)
    }

    fn abs(&self, off: u32) -> Result<u32, CompileError> {
        self.nh
            .checked_add(off)
            .filter(|&o| o < 0x8000_0000)
            .ok_or_else(|| CompileError::Other(format!("offset {off} is too large")))
    }

    /// IPv4 protocol field is `p`.
    fn ip4_proto(&self, p: u32) -> B {
        cmp(B, self.nh + 9, None, p)
    }

    /// IPv6 next header is `p`, directly or after one fragment header (as libpcap's `ip6 proto`).
    fn ip6_proto_frag(&self, p: u32) -> B {
        or(
            cmp(B, self.nh + 6, None, p),
            and(cmp(B, self.nh + 6, None, 44), cmp(B, self.nh + 40, None, p)),
        )
    }

    /// Not a non-first IPv4 fragment.
    fn first_frag(&self) -> B {
        not(B::Test {
            stmts: vec![Insn::stmt(LD | H | ABS, self.nh + 6)],
            code: JMP | JSET | K,
            k: 0x1fff,
        })
    }

    fn proto(&self, p: Proto) -> B {
        let tl = |n: u32| {
            or(
                and(self.ip(), self.ip4_proto(n)),
                and(self.ip6(), self.ip6_proto_frag(n)),
            )
        };
        match p {
            Proto::Ip => self.ip(),
            Proto::Ip6 => self.ip6(),
            Proto::Arp => self.linktype(ETH_ARP),
            Proto::Rarp => self.linktype(ETH_RARP),
            Proto::Tcp => tl(6),
            Proto::Udp => tl(17),
            Proto::Sctp => tl(132),
            Proto::Icmp => and(self.ip(), self.ip4_proto(1)),
            Proto::Icmp6 => and(self.ip6(), self.ip6_proto_frag(58)),
        }
    }

    fn dir(d: Dir, src: B, dst: B) -> B {
        match d {
            Dir::Src => src,
            Dir::Dst => dst,
            Dir::Either => or(src, dst),
            Dir::Both => and(src, dst),
        }
    }

    fn net(&self, proto: HostProto, d: Dir, n: NetAddr) -> B {
        match n {
            NetAddr::V4(v, mask) => {
                let m = (mask != u32::MAX).then_some(mask);
                let protos: &[(u32, u32, u32)] = match proto {
                    HostProto::Any => &[(ETH_IP, 12, 16), (ETH_ARP, 14, 24), (ETH_RARP, 14, 24)],
                    HostProto::Ip => &[(ETH_IP, 12, 16)],
                    HostProto::Arp => &[(ETH_ARP, 14, 24)],
                    HostProto::Rarp => &[(ETH_RARP, 14, 24)],
                    HostProto::Ip6 => &[],
                };
                any(protos
                    .iter()
                    .map(|&(et, s, t)| {
                        and(
                            self.linktype(et),
                            Self::dir(d, cmp(W, self.nh + s, m, v), cmp(W, self.nh + t, m, v)),
                        )
                    })
                    .collect())
            }
            NetAddr::V6(a, len) => {
                let mask = if len == 0 {
                    0
                } else {
                    u128::MAX << (128 - u32::from(len))
                };
                // Words outside the prefix are not loaded at all (what libpcap's optimiser leaves of its
                // `and #0; jeq #0`, so a packet cut inside them gets tcpdump's verdict).
                let words = |off: u32| {
                    all((0..4)
                        .filter(|i| (mask >> (96 - 32 * i)) as u32 != 0)
                        .map(|i| {
                            let sh = 96 - 32 * i;
                            let w = (a >> sh) as u32;
                            let m = (mask >> sh) as u32;
                            cmp(
                                W,
                                self.nh + off + 4 * i as u32,
                                (m != u32::MAX).then_some(m),
                                w,
                            )
                        })
                        .collect())
                };
                and(self.ip6(), Self::dir(d, words(8), words(24)))
            }
        }
    }

    fn port(&self, proto: PortProto, d: Dir, lo: u16, hi: u16) -> B {
        let ps: &[u32] = match proto {
            PortProto::Any => &[132, 6, 17],
            PortProto::Tcp => &[6],
            PortProto::Udp => &[17],
            PortProto::Sctp => &[132],
        };
        let (lo, hi) = (u32::from(lo), u32::from(hi));
        let test = |stmts: Vec<Insn>| -> B {
            if lo == hi {
                B::Test {
                    stmts,
                    code: JMP | JEQ | K,
                    k: lo,
                }
            } else {
                and(
                    B::Test {
                        stmts: stmts.clone(),
                        code: JMP | JGE | K,
                        k: lo,
                    },
                    not(B::Test {
                        stmts,
                        code: JMP | JGT | K,
                        k: hi,
                    }),
                )
            }
        };
        let nh = self.nh;
        // The ports sit at the same place for TCP, UDP and SCTP: one test of the protocol (any of them), then
        // the ports once (libpcap's optimiser reaches the same shape).
        let six = and(
            any(ps.iter().map(|&p| cmp(B, nh + 6, None, p)).collect()),
            Self::dir(
                d,
                test(vec![Insn::stmt(LD | H | ABS, nh + 40)]),
                test(vec![Insn::stmt(LD | H | ABS, nh + 42)]),
            ),
        );
        let ind = |o: u32| {
            vec![
                Insn::stmt(LDX | B | MSH, nh),
                Insn::stmt(LD | H | IND, nh + o),
            ]
        };
        let four = all(vec![
            any(ps.iter().map(|&p| self.ip4_proto(p)).collect()),
            self.first_frag(),
            Self::dir(d, test(ind(0)), test(ind(2))),
        ]);
        or(and(self.ip6(), six), and(self.ip(), four))
    }

    fn node(&mut self, n: &Node) -> Result<B, CompileError> {
        Ok(match n {
            Node::And(a, b) => and(self.node(a)?, self.node(b)?),
            Node::Or(a, b) => or(self.node(a)?, self.node(b)?),
            Node::Not(a) => not(self.node(a)?),
            Node::Proto(p) => self.proto(*p),
            Node::IpProto(v, p) => {
                let p = u32::from(*p);
                let four = and(self.ip(), self.ip4_proto(p));
                let six = and(self.ip6(), self.ip6_proto_frag(p));
                match v {
                    Some(true) => four,
                    Some(false) => six,
                    None => or(four, six),
                }
            }
            Node::Net(p, d, a) => self.net(*p, *d, *a),
            Node::Port(p, d, lo, hi) => self.port(*p, *d, *lo, *hi),
            Node::Rel(op, a, b) => self.relation(*op, a, b)?,
            Node::EtherHost(d, mac) => {
                self.ethernet_only("ether host/src/dst")?;
                let w = u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]);
                let h = u32::from(u16::from_be_bytes([mac[0], mac[1]]));
                // libpcap's order: the last four bytes, then the first two.
                let at = |off: u32| and(cmp(W, off + 2, None, w), cmp(H, off, None, h));
                Self::dir(*d, at(6), at(0))
            }
            Node::EtherBroadcast => {
                self.ethernet_only("ether broadcast")?;
                and(cmp(W, 2, None, u32::MAX), cmp(H, 0, None, 0xffff))
            }
            Node::EtherMulticast => {
                self.ethernet_only("ether multicast")?;
                B::Test {
                    stmts: vec![Insn::stmt(LD | B | ABS, 0)],
                    code: JMP | JSET | K,
                    k: 1,
                }
            }
            Node::EtherProto(et) => self.linktype(u32::from(*et)),
            Node::IpBroadcast => {
                // The host part (outside the netmask) all ones or all zeros; a netmask of 0 (files, as
                // `tcpdump -r`) leaves 255.255.255.255 and 0.0.0.0.
                let host = !self.netmask;
                let m = (host != u32::MAX).then_some(host);
                and(
                    self.ip(),
                    or(cmp(W, self.nh + 16, m, 0), cmp(W, self.nh + 16, m, host)),
                )
            }
            Node::IpMulticast(false) => and(
                self.ip(),
                B::Test {
                    stmts: vec![Insn::stmt(LD | B | ABS, self.nh + 16)],
                    code: JMP | JGE | K,
                    k: 0xe0,
                },
            ),
            Node::IpMulticast(true) => and(self.ip6(), cmp(B, self.nh + 24, None, 0xff)),
            Node::Vlan(id) => {
                if self.target != Target::Link(LinkType::ETHERNET) {
                    let on = match self.target {
                        Target::Cooked => {
                            "the any device (a live socket sees frames with the tag removed)"
                                .to_string()
                        }
                        Target::Link(l) => format!("link type {l}"),
                    };
                    return Err(CompileError::Other(format!(
                        "vlan is matched on Ethernet captures only, not on {on}"
                    )));
                }
                let tpid = any([0x8100, 0x88a8, 0x9100]
                    .iter()
                    .map(|&t| cmp(H, self.eth_type, None, t))
                    .collect());
                let b = match id {
                    Some(id) => and(tpid, cmp(H, self.nh, Some(0xfff), u32::from(*id))),
                    None => tpid,
                };
                // As libpcap: everything after `vlan` in the expression is read past the tag.
                self.eth_type += 4;
                self.nh += 4;
                b
            }
        })
    }

    /// Ethernet addresses exist on Ethernet captures only: refused elsewhere, as tcpdump refuses them.
    fn ethernet_only(&self, what: &str) -> Result<(), CompileError> {
        match self.target {
            Target::Link(LinkType::ETHERNET) => Ok(()),
            Target::Cooked => Err(CompileError::Other(format!(
                "{what} needs Ethernet headers: the any device has none (capture on an Ethernet interface)"
            ))),
            Target::Link(l) => Err(CompileError::Other(format!(
                "{what} needs Ethernet headers: link type {l} has no Ethernet addresses"
            ))),
        }
    }

    fn slot(&mut self) -> Result<u32, CompileError> {
        if self.scratch as usize >= super::vm::MEMWORDS {
            return Err(CompileError::Other(
                "the arithmetic is nested too deeply (16 scratch words): simplify it".into(),
            ));
        }
        self.scratch += 1;
        Ok(self.scratch - 1)
    }

    fn relation(&mut self, op: RelOp, a: &Arith, b: &Arith) -> Result<B, CompileError> {
        let mut guards = Vec::new();
        let (code, negate) = match op {
            RelOp::Eq => (JEQ, false),
            RelOp::Ne => (JEQ, true),
            RelOp::Gt => (JGT, false),
            RelOp::Le => (JGT, true),
            RelOp::Ge => (JGE, false),
            RelOp::Lt => (JGE, true),
        };
        let (a, b) = (&fold_arith(a), &fold_arith(b));
        let mut stmts = Vec::new();
        // `x & k != 0` / `x & k = 0`: one `jset #k`, as libpcap's optimiser makes it.
        if let (Arith::Bin(ArOp::And, x, m), Arith::Num(0), JEQ) = (a, b, code)
            && let Arith::Num(m) = **m
        {
            self.arith(x, &mut stmts, &mut guards)?;
            let t = B::Test {
                stmts,
                code: JMP | JSET | K,
                k: m,
            };
            let mut uniq: Vec<B> = Vec::new();
            for g in guards {
                if !uniq.contains(&g) {
                    uniq.push(g);
                }
            }
            uniq.push(if negate { t } else { not(t) });
            return Ok(all(uniq));
        }
        let test = if let Arith::Num(k) = b {
            self.arith(a, &mut stmts, &mut guards)?;
            B::Test {
                stmts,
                code: JMP | code | K,
                k: *k,
            }
        } else {
            self.arith(b, &mut stmts, &mut guards)?;
            let s = self.slot()?;
            stmts.push(Insn::stmt(ST, s));
            self.arith(a, &mut stmts, &mut guards)?;
            stmts.push(Insn::stmt(LDX | MEM, s));
            self.scratch -= 1;
            B::Test {
                stmts,
                code: JMP | code | X,
                k: 0,
            }
        };
        let test = if negate { not(test) } else { test };
        let mut uniq: Vec<B> = Vec::new();
        for g in guards {
            if !uniq.contains(&g) {
                uniq.push(g);
            }
        }
        uniq.push(test);
        Ok(all(uniq))
    }

    /// Appends code leaving the value of `e` in A; loads add their protocol checks to `guards`.
    fn arith(
        &mut self,
        e: &Arith,
        out: &mut Vec<Insn>,
        guards: &mut Vec<B>,
    ) -> Result<(), CompileError> {
        match e {
            Arith::Num(n) => out.push(Insn::stmt(LD | IMM, *n)),
            Arith::Len => out.push(Insn::stmt(LD | W | LEN, 0)),
            Arith::Neg(a) => {
                self.arith(a, out, guards)?;
                out.push(Insn::stmt(ALU | NEG, 0));
            }
            Arith::Bin(o, a, b) => {
                let alu = match o {
                    ArOp::Add => ADD,
                    ArOp::Sub => SUB,
                    ArOp::Mul => MUL,
                    ArOp::Div => DIV,
                    ArOp::Mod => MOD,
                    ArOp::And => AND,
                    ArOp::Or => OR,
                    ArOp::Xor => XOR,
                    ArOp::Lsh => LSH,
                    ArOp::Rsh => RSH,
                };
                if let Arith::Num(k) = **b {
                    if matches!(alu, DIV | MOD) && k == 0 {
                        return Err(CompileError::Other("division by zero".into()));
                    }
                    if matches!(alu, LSH | RSH) && k >= 32 {
                        return Err(CompileError::Other(format!("shift by {k}: shift by 0-31")));
                    }
                    self.arith(a, out, guards)?;
                    out.push(Insn::stmt(ALU | alu | K, k));
                } else {
                    self.arith(b, out, guards)?;
                    let s = self.slot()?;
                    out.push(Insn::stmt(ST, s));
                    self.arith(a, out, guards)?;
                    out.push(Insn::stmt(LDX | MEM, s));
                    out.push(Insn::stmt(ALU | alu | X, 0));
                    self.scratch -= 1;
                }
            }
            Arith::Load(base, off, size) => {
                let sz = match size {
                    4 => W,
                    2 => H,
                    _ => B,
                };
                let nh = self.nh;
                // (guard, offset of the field's header from the packet start; None: after the IPv4 header)
                let (guard, fixed): (Option<B>, Option<u32>) = match base {
                    LoadBase::Link => {
                        if self.target == Target::Cooked {
                            return Err(CompileError::Other(
                                "ether[]/link[] is not available on a cooked socket (the any device): use ip[] or ip6[]"
                                    .into(),
                            ));
                        }
                        (None, Some(0))
                    }
                    LoadBase::Ip => (Some(self.ip()), Some(nh)),
                    LoadBase::Ip6 => (Some(self.ip6()), Some(nh)),
                    LoadBase::Icmp6 => (
                        Some(and(self.ip6(), cmp(B, nh + 6, None, 58))),
                        Some(nh + 40),
                    ),
                    LoadBase::Tcp | LoadBase::Udp | LoadBase::Icmp | LoadBase::Sctp => {
                        let p = match base {
                            LoadBase::Tcp => 6,
                            LoadBase::Udp => 17,
                            LoadBase::Icmp => 1,
                            _ => 132,
                        };
                        (
                            Some(all(vec![self.ip(), self.ip4_proto(p), self.first_frag()])),
                            None,
                        )
                    }
                };
                if let Some(g) = guard {
                    guards.push(g);
                }
                match (fixed, &**off) {
                    (Some(base), Arith::Num(k)) => {
                        let o = base
                            .checked_add(*k)
                            .filter(|&o| o < 0x8000_0000)
                            .ok_or_else(|| {
                                CompileError::Other(format!("offset {k} is too large"))
                            })?;
                        out.push(Insn::stmt(LD | sz | ABS, o));
                    }
                    (Some(base), o) => {
                        self.arith(o, out, guards)?;
                        out.push(Insn::stmt(MISC | TAX, 0));
                        out.push(Insn::stmt(LD | sz | IND, base));
                    }
                    (None, Arith::Num(k)) => {
                        let o = self.abs(*k)?;
                        out.push(Insn::stmt(LDX | B | MSH, nh));
                        out.push(Insn::stmt(LD | sz | IND, o));
                    }
                    (None, o) => {
                        self.arith(o, out, guards)?;
                        let s = self.slot()?;
                        out.push(Insn::stmt(ST, s));
                        out.push(Insn::stmt(LDX | B | MSH, nh));
                        out.push(Insn::stmt(LD | MEM, s));
                        out.push(Insn::stmt(ALU | ADD | X, 0));
                        out.push(Insn::stmt(MISC | TAX, 0));
                        out.push(Insn::stmt(LD | sz | IND, nh));
                        self.scratch -= 1;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Arithmetic with its constant parts computed (`tcp-syn|tcp-fin` is 3), with BPF's 32-bit wrapping; division
/// by zero and shifts of 32 or more stay as they are (code generation refuses them).
fn fold_arith(e: &Arith) -> Arith {
    match e {
        Arith::Bin(o, a, b) => {
            let (a, b) = (fold_arith(a), fold_arith(b));
            if let (Arith::Num(x), Arith::Num(y)) = (&a, &b) {
                let (x, y) = (*x, *y);
                let v = match o {
                    ArOp::Add => Some(x.wrapping_add(y)),
                    ArOp::Sub => Some(x.wrapping_sub(y)),
                    ArOp::Mul => Some(x.wrapping_mul(y)),
                    ArOp::Div => x.checked_div(y),
                    ArOp::Mod => x.checked_rem(y),
                    ArOp::And => Some(x & y),
                    ArOp::Or => Some(x | y),
                    ArOp::Xor => Some(x ^ y),
                    ArOp::Lsh => (y < 32).then(|| x << y),
                    ArOp::Rsh => (y < 32).then(|| x >> y),
                };
                if let Some(v) = v {
                    return Arith::Num(v);
                }
            }
            Arith::Bin(*o, Box::new(a), Box::new(b))
        }
        Arith::Neg(a) => match fold_arith(a) {
            Arith::Num(x) => Arith::Num(x.wrapping_neg()),
            a => Arith::Neg(Box::new(a)),
        },
        Arith::Load(base, off, size) => Arith::Load(*base, Box::new(fold_arith(off)), *size),
        x => x.clone(),
    }
}

pub(super) fn compile(
    root: Option<&Node>,
    target: Target,
    opts: &Options,
    netmask: u32,
) -> Result<Program, CompileError> {
    compile_with(root, target, opts, netmask, true)
}

/// [`compile`], with the optimiser (jump threading, merging, dead code) on or off: off only to check that it
/// changes no verdict.
pub(super) fn compile_with(
    root: Option<&Node>,
    target: Target,
    opts: &Options,
    netmask: u32,
    optimise: bool,
) -> Result<Program, CompileError> {
    let mut g = Gen::new(target, netmask)?;
    let mut b = match root {
        Some(n) => g.node(n)?,
        None => B::Const(true),
    };
    if opts.drop_outgoing {
        let outgoing = B::Test {
            stmts: vec![Insn::stmt(LD | W | ABS, SKF_AD_OFF + SKF_AD_PKTTYPE)],
            code: JMP | JEQ | K,
            k: PACKET_OUTGOING,
        };
        b = and(not(outgoing), b);
    }
    let accept = opts.snaplen.max(1);
    let mut b = fold(b);
    if optimise {
        b = normal::normalise(b);
    }
    let insns = match b {
        B::Const(v) => vec![Insn::stmt(RET | K, if v { accept } else { 0 })],
        b => emit::emit(&b, accept, optimise)?,
    };
    Program::new(insns).map_err(CompileError::Invalid)
}
