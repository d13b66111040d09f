//! Emitting: a branch tree (`B`) as straight-line classic BPF with forward jumps, then the optimiser's
//! passes (jump threading, merging equal tails, redundant loads, dead code) and trampolines for long jumps.

use super::B;
use crate::capture::bpf::CompileError;
use crate::capture::bpf::vm::{Insn, MAX_INSNS, op::*};

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
                St::Holds(w) => {
                    let x = if w.1 == v.1 { v.1 } else { None };
                    // An indirect load is the same value only with the same X on both paths.
                    let a = if w.0 == v.0
                        && (x.is_some() || v.0.is_none_or(|a| a.code & 0xe0 != IND))
                    {
                        v.0
                    } else {
                        None
                    };
                    St::Holds((a, x))
                }
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
                    // An indirect load (`ldh [x + 14]`) is known while X keeps the value it was loaded with.
                    let ind = |r: Option<Insn>| r.is_some_and(|r| r.code & 0xe0 == IND);
                    if cls == LD && (mode == ABS || mode == LEN || mode == IND) {
                        remove[i] = a == Some(ins);
                        after.0 = Some(ins);
                    } else if cls == LD || cls == ALU || ins.code == MISC | TXA {
                        after.0 = None;
                    }
                    if ins.code == LDX | B | MSH || ins.code == LDX | W | IMM {
                        remove[i] = x == Some(ins);
                        after.1 = Some(ins);
                        if x != Some(ins) && ind(after.0) {
                            after.0 = None;
                        }
                    } else if cls == LDX || ins.code == MISC | TAX {
                        after.1 = None;
                        if ind(after.0) {
                            after.0 = None;
                        }
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
                            // The oldest fact that is not a known value goes first: a known value (`ldh [12]`
                            // equalled 0x86dd) decides every later test of its load, however long the chain
                            // of failed comparisons after it.
                            let i = fs
                                .iter()
                                .position(|f| !(f.1 == JMP | JEQ | K && f.3))
                                .unwrap_or(0);
                            fs.remove(i);
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
    /// (classic BPF's conditional offsets are 8 bits; `ja` takes 32). The `ja` goes as far forward as the jump
    /// reaches, at a place no instruction falls through to, and later jumps to the same target share it: a long
    /// chain of `jeq ... jt accept` needs one `ja` per ~255 instructions, not one per test.
    fn long_jumps(&mut self) {
        const REACH: usize = 255;
        /// Room left for `ja`s inserted later between a jump and its trampoline.
        const SLACK: usize = 32;
        let mut from = 0;
        loop {
            let n = self.code.len();
            let pos = |l: usize, labels: &[Option<usize>]| labels[l].unwrap_or(n).min(n);
            let far = self
                .code
                .iter()
                .enumerate()
                .skip(from)
                .find_map(|(i, it)| match *it {
                    Item::Jump { t, f, .. } => {
                        let ft = pos(t, &self.labels).saturating_sub(i + 1) > REACH;
                        let ff = pos(f, &self.labels).saturating_sub(i + 1) > REACH;
                        (ft || ff).then_some((i, ft))
                    }
                    _ => None,
                });
            let Some((i, which)) = far else {
                if from == 0 {
                    return;
                }
                // Inserts may have pushed an earlier jump out of reach: check again from the start.
                from = 0;
                continue;
            };
            let Item::Jump { t, f, .. } = self.code[i] else {
                return;
            };
            let to = if which { t } else { f };
            let target = pos(to, &self.labels);
            // A trampoline to the same place already within reach?
            let hi = (i + 1 + REACH).min(n.saturating_sub(1));
            let existing = (i + 1..=hi)
                .find(|&j| matches!(self.code[j], Item::Ja(l) if pos(l, &self.labels) == target));
            let at = match existing {
                Some(j) => j,
                None => {
                    // The furthest place within reach that nothing falls through to.
                    let top = (i + 1 + REACH - SLACK).min(target).min(n);
                    let at = (i + 2..=top)
                        .rev()
                        .find(|&p| match self.code[p - 1] {
                            Item::Insn(x) => x.code & 0x07 == RET,
                            _ => true,
                        })
                        .unwrap_or(i + 1);
                    for l in self.labels.iter_mut().flatten() {
                        if *l >= at {
                            *l += 1;
                        }
                    }
                    self.code.insert(at, Item::Ja(to));
                    at
                }
            };
            let tramp = self.label();
            self.labels[tramp] = Some(at);
            if let Item::Jump { t, f, .. } = &mut self.code[i] {
                if which {
                    *t = tramp;
                } else {
                    *f = tramp;
                }
            }
            from = i;
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

/// The instructions of `b`: accept with `accept` bytes when it holds, reject otherwise (optimised when
/// `optimise`).
pub(super) fn emit(b: &B, accept: u32, optimise: bool) -> Result<Vec<Insn>, CompileError> {
    let mut e = Emit {
        code: Vec::new(),
        labels: Vec::new(),
    };
    let (t, f) = (e.label(), e.label());
    e.cond(b, t, f);
    e.place(t);
    e.code.push(Item::Insn(Insn::stmt(RET | K, accept)));
    e.place(f);
    e.code.push(Item::Insn(Insn::stmt(RET | K, 0)));
    if optimise {
        e.thread_jumps();
        e.merge_tails();
    }
    e.drop_redundant_loads();
    if optimise {
        // Blocks left equal once their known loads are gone (the `jeq` chains of a port list on IPv4 and on
        // IPv6, which compare the same A) are merged too: identical code with identical targets does the same
        // thing from any state, so this needs no knowledge of the paths.
        e.merge_tails();
    }
    if e.code.len() > MAX_INSNS {
        return Err(CompileError::TooLong(e.code.len()));
    }
    e.long_jumps();
    let mut out = Vec::with_capacity(e.code.len());
    for (i, it) in e.code.iter().enumerate() {
        let off = |l: usize| -> usize { e.labels[l].unwrap_or(usize::MAX).saturating_sub(i + 1) };
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
    if out.len() > MAX_INSNS {
        return Err(CompileError::TooLong(out.len()));
    }
    Ok(out)
}
