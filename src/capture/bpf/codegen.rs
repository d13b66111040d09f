//! Code generation: the expression tree to classic BPF for one link type (or the cooked `any` socket), with
//! libpcap's semantics and test order (so a packet cut short is rejected where libpcap's program rejects it).
#![forbid(unsafe_code)]

use super::parse::{ArOp, Arith, Dir, HostProto, LoadBase, NetAddr, Node, PortProto, Proto, RelOp};
use super::vm::{
    Insn, PACKET_OUTGOING, Program, SKF_AD_OFF, SKF_AD_PKTTYPE, SKF_AD_PROTOCOL, op::*,
};
use super::{CompileError, Options, Target};
use crate::capture::read::LinkType;

const ETH_IP: u32 = 0x0800;
const ETH_IP6: u32 = 0x86dd;
const ETH_ARP: u32 = 0x0806;
const ETH_RARP: u32 = 0x8035;
/// BSD values of AF_INET6 (NetBSD/OpenBSD 24, FreeBSD 28, Darwin 30), the ones libpcap accepts on NULL/LOOP.
const BSD_AF_INET6: [u32; 3] = [30, 24, 28];

/// A condition over the packet.
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

impl Gen {
    fn new(target: Target) -> Result<Gen, CompileError> {
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
                let words = |off: u32| {
                    all((0..4)
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
            Node::Vlan(id) => {
                if self.target != Target::Link(LinkType::ETHERNET) {
                    return Err(CompileError::Other(
                        "vlan is matched on Ethernet captures only (a live socket sees frames with the tag removed)".into(),
                    ));
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
        let mut stmts = Vec::new();
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

/// Emits a condition as straight-line code with forward jumps to labels.
struct Emit {
    code: Vec<Item>,
    labels: Vec<Option<usize>>,
}

enum Item {
    Insn(Insn),
    Jump {
        code: u16,
        k: u32,
        t: usize,
        f: usize,
    },
    /// `ja` to a label: a trampoline for a conditional jump whose target is more than 255 instructions away.
    Ja(usize),
}

impl Emit {
    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }
    fn place(&mut self, l: usize) {
        self.labels[l] = Some(self.code.len());
    }
    /// Removes a load into A when A already holds that load on every path reaching it (the `ldh [12]` each
    /// protocol test repeats, the `ldb [23]` of each transport): the same bytes give the same value and the
    /// load already succeeded, so the packets kept do not change, only the instructions run.
    fn drop_redundant_loads(&mut self) {
        /// What A and X hold: the load that set them, when the same on every path.
        type Regs = (Option<Insn>, Option<Insn>);
        #[derive(Clone, Copy, PartialEq)]
        enum St {
            Unreached,
            Holds(Regs),
        }
        let n = self.code.len();
        let mut at_entry = vec![St::Unreached; n + 1];
        at_entry[0] = St::Holds((None, None));
        let mut remove = vec![false; n];
        let meet = |slot: &mut St, v: Regs| {
            *slot = match *slot {
                St::Unreached => St::Holds(v),
                St::Holds(w) => St::Holds((
                    if w.0 == v.0 { v.0 } else { None },
                    if w.1 == v.1 { v.1 } else { None },
                )),
            }
        };
        for i in 0..n {
            let St::Holds((a, x)) = at_entry[i] else {
                continue;
            };
            let pos = |l: usize| self.labels[l].unwrap_or(n).min(n);
            match self.code[i] {
                Item::Insn(ins) => {
                    let cls = ins.code & 0x07;
                    let mode = ins.code & 0xe0;
                    let mut after = (a, x);
                    if cls == LD && (mode == ABS || mode == LEN) {
                        remove[i] = a == Some(ins);
                        after.0 = Some(ins);
                    } else if cls == LD || cls == ALU || ins.code == MISC | TXA {
                        after.0 = None;
                    }
                    if ins.code == LDX | B | MSH || ins.code == LDX | W | IMM {
                        remove[i] = x == Some(ins);
                        after.1 = Some(ins);
                    } else if cls == LDX || ins.code == MISC | TAX {
                        after.1 = None;
                    }
                    if cls != RET {
                        meet(&mut at_entry[i + 1], after);
                    }
                }
                Item::Jump { t, f, .. } => {
                    meet(&mut at_entry[pos(t)], (a, x));
                    meet(&mut at_entry[pos(f)], (a, x));
                }
                Item::Ja(l) => meet(&mut at_entry[pos(l)], (a, x)),
            }
        }
        if !remove.contains(&true) {
            return;
        }
        // Removed before each index, to move the labels.
        let mut before = vec![0usize; n + 1];
        for i in 0..n {
            before[i + 1] = before[i] + usize::from(remove[i]);
        }
        for l in self.labels.iter_mut().flatten() {
            *l -= before[(*l).min(n)];
        }
        let mut i = 0;
        self.code.retain(|_| {
            i += 1;
            !remove[i - 1]
        });
    }

    /// The block starting at `p`: its statements and its jump's index, or None for a `ret`.
    fn block_at(&self, p: usize) -> Option<(usize, usize)> {
        let mut j = p;
        while let Some(Item::Insn(ins)) = self.code.get(j) {
            if ins.code & 0x07 == RET {
                return None;
            }
            j += 1;
        }
        matches!(self.code.get(j), Some(Item::Jump { .. })).then_some((p, j))
    }

    fn stmts(&self, from: usize, to: usize) -> Vec<Insn> {
        self.code[from..to]
            .iter()
            .filter_map(|it| match it {
                Item::Insn(x) => Some(*x),
                _ => None,
            })
            .collect()
    }

    /// Jump threading over known outcomes (libpcap's optimiser does the same): an edge whose path already
    /// decided a later test (the same loads compared again: `ldh [12]` against 0x800 after it equalled 0x800,
    /// or against 0x806 after it equalled 0x800) goes straight to where that test leads, and an edge to a test
    /// whose two branches meet at `ret #0` goes to `ret #0`. Runs before [`Emit::drop_redundant_loads`], while
    /// every test still loads what it compares (each block is self-contained), so skipping a block changes no
    /// register a later block reads. A skipped block either repeats loads that already succeeded on the path
    /// (so none can fail) or leads only to rejection (where a failing load leads too): every packet gets the
    /// same verdict.
    fn thread_jumps(&mut self) {
        /// (the statements of a test, its jump code, k, outcome) known on a path.
        type Fact = (Vec<Insn>, u16, u32, bool);
        const MAX_FACTS: usize = 64;
        fn decide(facts: &[Fact], key: &[Insn], code: u16, k: u32) -> Option<bool> {
            if code & X != 0 {
                return None;
            }
            for (fk, fc, fkk, o) in facts {
                if fk.as_slice() != key {
                    continue;
                }
                if *fc == code && *fkk == k {
                    return Some(*o);
                }
                if *fc == JMP | JEQ | K && *o {
                    let v = *fkk;
                    return Some(match code & 0xf0 {
                        JEQ => v == k,
                        JGT => v > k,
                        JGE => v >= k,
                        JSET => v & k != 0,
                        _ => return None,
                    });
                }
            }
            None
        }
        let n_rounds = 8;
        for _ in 0..n_rounds {
            let n = self.code.len();
            let pos = |labels: &[Option<usize>], l: usize| labels[l].unwrap_or(n).min(n);
            let is_reject = |code: &[Item], p: usize| matches!(code.get(p), Some(Item::Insn(x)) if x.code == RET | K && x.k == 0);
            let mut facts_in: Vec<Option<Vec<Fact>>> = vec![None; n + 1];
            facts_in[0] = Some(Vec::new());
            let mut changed = false;
            let mut p = 0;
            while p < n {
                let Some((start, j)) = self.block_at(p) else {
                    p += 1;
                    continue;
                };
                p = j + 1;
                let Some(facts) = facts_in[start].take() else {
                    continue;
                };
                let key = self.stmts(start, j);
                let Item::Jump { code, k, t, f } = self.code[j] else {
                    continue;
                };
                let known = decide(&facts, &key, code, k);
                let mut new_tf = [t, f];
                for (idx, outcome) in [(0usize, true), (1usize, false)] {
                    if known.is_some_and(|o| o != outcome) {
                        continue;
                    }
                    let mut fs = facts.clone();
                    if known.is_none() && code & X == 0 {
                        fs.push((key.clone(), code, k, outcome));
                        if fs.len() > MAX_FACTS {
                            fs.remove(0);
                        }
                    }
                    // Follow the edge through decided tests.
                    let mut l = new_tf[idx];
                    for _ in 0..n {
                        let lp = pos(&self.labels, l);
                        let Some((s2, j2)) = self.block_at(lp) else {
                            break;
                        };
                        let Item::Jump {
                            code: c2,
                            k: k2,
                            t: t2,
                            f: f2,
                        } = self.code[j2]
                        else {
                            break;
                        };
                        let key2 = self.stmts(s2, j2);
                        let loads_known = key2.is_empty() || fs.iter().any(|x| x.0 == key2);
                        let (pt, pf) = (pos(&self.labels, t2), pos(&self.labels, f2));
                        let next = if pt == pf && (loads_known || is_reject(&self.code, pt)) {
                            t2
                        } else if let Some(o) = decide(&fs, &key2, c2, k2).filter(|_| loads_known) {
                            if o { t2 } else { f2 }
                        } else {
                            break;
                        };
                        l = next;
                    }
                    if l != new_tf[idx] {
                        new_tf[idx] = l;
                        changed = true;
                    }
                    let lp = pos(&self.labels, l);
                    let slot = &mut facts_in[lp];
                    *slot = Some(match slot.take() {
                        None => fs,
                        Some(prev) => prev.into_iter().filter(|x| fs.contains(x)).collect(),
                    });
                }
                self.code[j] = Item::Jump {
                    code,
                    k,
                    t: new_tf[0],
                    f: new_tf[1],
                };
            }
            if !changed {
                break;
            }
        }
        self.drop_unreachable();
    }

    /// Merges identical tests: two blocks with the same statements, the same comparison and the same two
    /// targets compute the same thing (each block loads what it compares), so the jumps to the earlier copy go
    /// to the later one (forward still) and the earlier one dies: the ARP and RARP address tests of `host X`
    /// become one, as in libpcap. Blocks are visited from the end, so merged targets make more blocks equal.
    fn merge_tails(&mut self) {
        let n = self.code.len();
        let mut starts = Vec::new();
        let mut p = 0;
        while p < n {
            match self.block_at(p) {
                Some((s, j)) => {
                    starts.push((s, j));
                    p = j + 1;
                }
                None => p += 1,
            }
        }
        // Position of a block start -> the label of the copy that replaces it.
        let mut replaced: std::collections::HashMap<usize, usize> = Default::default();
        let mut seen: std::collections::HashMap<(Vec<Insn>, u16, u32, usize, usize), usize> =
            Default::default();
        let mut label_at: std::collections::HashMap<usize, usize> = Default::default();
        for (l, p) in self.labels.iter().enumerate() {
            if let Some(p) = p {
                label_at.entry(*p).or_insert(l);
            }
        }
        let mut changed = false;
        for &(s, j) in starts.iter().rev() {
            let Item::Jump { code, k, t, f } = self.code[j] else {
                continue;
            };
            let pos = |l: usize| self.labels[l].unwrap_or(n).min(n);
            let t = replaced.get(&pos(t)).copied().unwrap_or(t);
            let f = replaced.get(&pos(f)).copied().unwrap_or(f);
            if let Item::Jump { t: jt, f: jf, .. } = &mut self.code[j] {
                changed |= *jt != t || *jf != f;
                *jt = t;
                *jf = f;
            }
            let sig = (self.stmts(s, j), code, k, pos(t), pos(f));
            match seen.get(&sig) {
                Some(&later) => {
                    replaced.insert(s, later);
                }
                None => {
                    let l = match label_at.get(&s) {
                        Some(&l) => l,
                        None => {
                            let l = self.label();
                            self.labels[l] = Some(s);
                            label_at.insert(s, l);
                            l
                        }
                    };
                    seen.insert(sig, l);
                }
            }
        }
        if changed {
            self.drop_unreachable();
        }
    }

    /// Removes the instructions no path reaches (tests every edge into which was threaded away).
    fn drop_unreachable(&mut self) {
        let n = self.code.len();
        let pos = |l: usize| self.labels[l].unwrap_or(n).min(n);
        let mut live = vec![false; n + 1];
        live[0] = true;
        for i in 0..n {
            if !live[i] {
                continue;
            }
            match self.code[i] {
                Item::Insn(x) => {
                    if x.code & 0x07 != RET {
                        live[i + 1] = true;
                    }
                }
                Item::Jump { t, f, .. } => {
                    live[pos(t)] = true;
                    live[pos(f)] = true;
                }
                Item::Ja(l) => live[pos(l)] = true,
            }
        }
        let mut before = vec![0usize; n + 1];
        for i in 0..n {
            before[i + 1] = before[i] + usize::from(!live[i]);
        }
        for l in self.labels.iter_mut().flatten() {
            *l -= before[(*l).min(n)];
        }
        let mut i = 0;
        self.code.retain(|_| {
            i += 1;
            live[i - 1]
        });
    }

    /// Gives every conditional jump whose target is more than 255 instructions away an unconditional `ja`
    /// right after it (classic BPF's conditional offsets are 8 bits; `ja` takes 32).
    fn long_jumps(&mut self) {
        loop {
            let pos = |l: usize, labels: &[Option<usize>]| labels[l].unwrap_or(usize::MAX);
            let far = self.code.iter().enumerate().find_map(|(i, it)| match *it {
                Item::Jump { t, f, .. } => {
                    let (ft, ff) = (
                        pos(t, &self.labels).saturating_sub(i + 1) > 255,
                        pos(f, &self.labels).saturating_sub(i + 1) > 255,
                    );
                    (ft || ff).then_some((i, ft, ff))
                }
                _ => None,
            });
            let Some((i, ft, ff)) = far else { return };
            let mut at = i + 1;
            for (is_far, which) in [(ft, true), (ff, false)] {
                if !is_far {
                    continue;
                }
                let Item::Jump { t, f, .. } = self.code[i] else {
                    return;
                };
                let to = if which { t } else { f };
                for l in self.labels.iter_mut().flatten() {
                    if *l >= at {
                        *l += 1;
                    }
                }
                self.code.insert(at, Item::Ja(to));
                let tramp = self.label();
                self.labels[tramp] = Some(at);
                if let Item::Jump { t, f, .. } = &mut self.code[i] {
                    if which {
                        *t = tramp;
                    } else {
                        *f = tramp;
                    }
                }
                at += 1;
            }
        }
    }

    fn cond(&mut self, b: &B, t: usize, f: usize) {
        match b {
            B::Const(v) => {
                // Folded away before emitting except at the top; kept correct anyway.
                let to = if *v { t } else { f };
                self.code.push(Item::Jump {
                    code: JMP | JEQ | K,
                    k: 0,
                    t: to,
                    f: to,
                });
            }
            B::And(a, c) => {
                let mid = self.label();
                self.cond(a, mid, f);
                self.place(mid);
                self.cond(c, t, f);
            }
            B::Or(a, c) => {
                let mid = self.label();
                self.cond(a, t, mid);
                self.place(mid);
                self.cond(c, t, f);
            }
            B::Not(a) => self.cond(a, f, t),
            B::Test { stmts, code, k } => {
                self.code.extend(stmts.iter().copied().map(Item::Insn));
                self.code.push(Item::Jump {
                    code: *code,
                    k: *k,
                    t,
                    f,
                });
            }
        }
    }
}

pub(super) fn compile(
    root: Option<&Node>,
    target: Target,
    opts: &Options,
) -> Result<Program, CompileError> {
    compile_with(root, target, opts, true)
}

/// [`compile`], with the optimiser (jump threading, merging, dead code) on or off: off only to check that it
/// changes no verdict.
pub(super) fn compile_with(
    root: Option<&Node>,
    target: Target,
    opts: &Options,
    optimise: bool,
) -> Result<Program, CompileError> {
    let mut g = Gen::new(target)?;
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
    let b = fold(b);
    let insns = match b {
        B::Const(v) => vec![Insn::stmt(RET | K, if v { accept } else { 0 })],
        b => {
            let mut e = Emit {
                code: Vec::new(),
                labels: Vec::new(),
            };
            let (t, f) = (e.label(), e.label());
            e.cond(&b, t, f);
            e.place(t);
            e.code.push(Item::Insn(Insn::stmt(RET | K, accept)));
            e.place(f);
            e.code.push(Item::Insn(Insn::stmt(RET | K, 0)));
            if optimise {
                e.thread_jumps();
                e.merge_tails();
            }
            e.drop_redundant_loads();
            e.long_jumps();
            let mut out = Vec::with_capacity(e.code.len());
            for (i, it) in e.code.iter().enumerate() {
                let off =
                    |l: usize| -> usize { e.labels[l].unwrap_or(usize::MAX).saturating_sub(i + 1) };
                out.push(match *it {
                    Item::Insn(x) => x,
                    Item::Ja(l) => Insn::stmt(JMP | JA, u32::try_from(off(l)).unwrap_or(u32::MAX)),
                    Item::Jump { code, k, t, f } => Insn::jump(
                        code,
                        k,
                        u8::try_from(off(t)).map_err(|_| CompileError::TooLong(e.code.len()))?,
                        u8::try_from(off(f)).map_err(|_| CompileError::TooLong(e.code.len()))?,
                    ),
                });
            }
            if out.len() > super::vm::MAX_INSNS {
                return Err(CompileError::TooLong(out.len()));
            }
            out
        }
    };
    Program::new(insns).map_err(CompileError::Invalid)
}
