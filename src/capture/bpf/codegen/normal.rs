//! Rewriting the branch tree before it is emitted, so that long `or` chains of the same kind of primitive
//! (`port 1 or port 2 or ...`, `host A or host B or ...`) test the link type, the protocol and the fragment
//! once per path and compare each port or address once per field, as libpcap's optimiser makes them.
//!
//! Every rewrite keeps each packet's verdict EXACTLY, including the verdict of a packet cut short (a load past
//! the captured bytes rejects the packet at once). What makes that hold: every test (`B::Test`) is
//! self-contained (it loads what it compares), so evaluating a condition twice gives the same result and a test
//! that succeeded once cannot fail later. The rewrites of an `or` list `D1 or D2 or ...` (a later disjunct is
//! reached only when every earlier one was evaluated and was false):
//! - a disjunct equal to an earlier one is dropped (if reached it is false, and it cannot fail);
//! - a run of disjuncts that each begin with a test of the same pure load against different constants
//!   (`ldh [12]` = 0x86dd / 0x800 / 0x806) is grouped by constant: the load either fails in the first disjunct
//!   in both orders, or gives one value, and then only the disjuncts of that value's group can hold, evaluated
//!   in their original order;
//! - adjacent disjuncts beginning with the same condition `G` become `G and (R1 or R2)`: re-evaluating `G` gives
//!   what it gave;
//! - single tests whose loads an earlier single test of the list already made (so they cannot fail and have no
//!   effect) are sorted by load between the tests that may still fail: `[54]=1, [56]=1, [54]=2, [56]=2` becomes
//!   `[54]=1, [56]=1, [54]=2, [54]=3, ..., [56]=2, [56]=3, ...`, which loads each field once.
//!
//! Lists are flattened with explicit stacks: a chain of thousands of terms costs time linear in its length.

use super::B;
use crate::capture::bpf::vm::{Insn, op::*};
use std::collections::{HashMap, HashSet};

/// The rewritten condition (the same verdict for every packet).
pub(super) fn normalise(b: B) -> B {
    match b {
        B::Or(..) => {
            let items = flatten(b, true).into_iter().map(normalise).collect();
            or_list(items)
        }
        B::And(..) => {
            let items = flatten(b, false).into_iter().map(normalise).collect();
            and_list(items)
        }
        B::Not(a) => B::Not(Box::new(normalise(*a))),
        x => x,
    }
}

/// The members of a chain of `or` (or of `and`), in evaluation order.
fn flatten(b: B, is_or: bool) -> Vec<B> {
    let mut out = Vec::new();
    let mut stack = vec![b];
    while let Some(x) = stack.pop() {
        match x {
            B::Or(a, c) if is_or => {
                stack.push(*c);
                stack.push(*a);
            }
            B::And(a, c) if !is_or => {
                stack.push(*c);
                stack.push(*a);
            }
            x => out.push(x),
        }
    }
    out
}

/// Right-nested chain (evaluated in the same order as any nesting).
fn rebuild(items: Vec<B>, is_or: bool) -> B {
    let mut it = items.into_iter().rev();
    let Some(mut acc) = it.next() else {
        return B::Const(!is_or);
    };
    for x in it {
        acc = if is_or {
            B::Or(Box::new(x), Box::new(acc))
        } else {
            B::And(Box::new(x), Box::new(acc))
        };
    }
    acc
}

fn and_list(items: Vec<B>) -> B {
    // Nested `and`s flattened; a repeated conjunct is true where it is reached again.
    let mut out: Vec<B> = Vec::new();
    let mut seen: HashSet<B> = HashSet::new();
    for x in items {
        for y in flatten(x, false) {
            match y {
                B::Const(true) => {}
                B::Const(false) => {
                    out.push(B::Const(false));
                    return rebuild(out, false);
                }
                y => {
                    if seen.insert(y.clone()) {
                        out.push(y);
                    }
                }
            }
        }
    }
    rebuild(out, false)
}

/// The first conjunct of a condition and the rest (None when the condition is that conjunct alone).
fn split_head(b: B) -> (B, Option<B>) {
    match b {
        B::And(..) => {
            let mut v = flatten(b, false);
            let head = v.remove(0);
            let rest = if v.is_empty() {
                None
            } else {
                Some(rebuild(v, false))
            };
            (head, rest)
        }
        x => (x, None),
    }
}

fn head(b: &B) -> &B {
    let mut h = b;
    while let B::And(a, _) = h {
        h = a;
    }
    h
}

/// True for statements whose result depends on the packet bytes only (absolute loads and ALU with constants).
fn pure(stmts: &[Insn]) -> bool {
    !stmts.is_empty()
        && stmts.iter().all(|i| {
            let cls = i.code & 0x07;
            (cls == LD && matches!(i.code & 0xe0, ABS | LEN | IMM))
                || (cls == ALU && i.code & X == 0)
        })
}

/// (the pure load, k) of a disjunct beginning with `load == k`.
fn eq_head(b: &B) -> Option<(&[Insn], u32)> {
    match head(b) {
        B::Test { stmts, code, k } if *code == JMP | JEQ | K && pure(stmts) => {
            Some((stmts.as_slice(), *k))
        }
        _ => None,
    }
}

fn or_list(items: Vec<B>) -> B {
    // Flatten and drop repeats (a repeated disjunct is false where it is reached again).
    let mut flat: Vec<B> = Vec::new();
    let mut seen: HashSet<B> = HashSet::new();
    for x in items {
        for y in flatten(x, true) {
            match y {
                B::Const(false) => {}
                B::Const(true) => {
                    flat.push(B::Const(true));
                    return rebuild(flat, true);
                }
                y => {
                    if seen.insert(y.clone()) {
                        flat.push(y);
                    }
                }
            }
        }
    }
    let grouped = group_exclusive(flat);
    let factored = factor_heads(grouped);
    let sorted = sort_known_loads(factored);
    rebuild(sorted, true)
}

/// Groups runs of disjuncts that begin with the same pure load compared to different constants.
fn group_exclusive(flat: Vec<B>) -> Vec<B> {
    let mut out = Vec::with_capacity(flat.len());
    let mut i = 0;
    let n = flat.len();
    let mut flat: Vec<Option<B>> = flat.into_iter().map(Some).collect();
    while i < n {
        let key: Option<Vec<Insn>> = flat[i].as_ref().and_then(eq_head).map(|(s, _)| s.to_vec());
        let Some(key) = key else {
            out.push(flat[i].take().unwrap_or(B::Const(false)));
            i += 1;
            continue;
        };
        let mut j = i;
        while j < n
            && flat[j]
                .as_ref()
                .and_then(eq_head)
                .is_some_and(|(s, _)| s == key.as_slice())
        {
            j += 1;
        }
        if j - i < 2 {
            out.push(flat[i].take().unwrap_or(B::Const(false)));
            i += 1;
            continue;
        }
        // k -> (the head test, the rests in order, whether a rest was `true`)
        let mut order: Vec<u32> = Vec::new();
        let mut groups: HashMap<u32, (B, Vec<B>, bool)> = HashMap::new();
        for slot in &mut flat[i..j] {
            let Some(b) = slot.take() else { continue };
            let k = eq_head(&b).map(|(_, k)| k).unwrap_or(0);
            let (h, rest) = split_head(b);
            let g = groups.entry(k).or_insert_with(|| {
                order.push(k);
                (h, Vec::new(), false)
            });
            if g.2 {
                continue;
            }
            match rest {
                None => g.2 = true,
                Some(r) => g.1.push(r),
            }
        }
        for k in order {
            let Some((h, rests, always)) = groups.remove(&k) else {
                continue;
            };
            if always && rests.is_empty() {
                out.push(h);
            } else {
                let mut rests = rests;
                if always {
                    rests.push(B::Const(true));
                }
                out.push(and_list(vec![h, or_list(rests)]));
            }
        }
        i = j;
    }
    out
}

/// `G and R1 or G and R2` (adjacent) becomes `G and (R1 or R2)`.
fn factor_heads(items: Vec<B>) -> Vec<B> {
    let mut out = Vec::with_capacity(items.len());
    let mut it = items.into_iter().peekable();
    while let Some(x) = it.next() {
        if !matches!(x, B::And(..)) || it.peek().is_none_or(|y| head(y) != head(&x)) {
            out.push(x);
            continue;
        }
        let (h, rest) = split_head(x);
        let mut rests = vec![rest.unwrap_or(B::Const(true))];
        while let Some(y) = it.next_if(|y| head(y) == &h) {
            rests.push(split_head(y).1.unwrap_or(B::Const(true)));
        }
        out.push(and_list(vec![h, or_list(rests)]));
    }
    out
}

/// Sorts, by load, the single tests whose loads an earlier single test already made, between the disjuncts
/// that may still fail.
fn sort_known_loads(items: Vec<B>) -> Vec<B> {
    let mut rank: HashMap<Vec<Insn>, usize> = HashMap::new();
    let mut out = Vec::with_capacity(items.len());
    let mut run: Vec<(usize, B)> = Vec::new();
    let flush = |run: &mut Vec<(usize, B)>, out: &mut Vec<B>| {
        run.sort_by_key(|(r, _)| *r);
        out.extend(run.drain(..).map(|(_, b)| b));
    };
    for x in items {
        if let B::Test { stmts, .. } = &x {
            if let Some(&r) = rank.get(stmts) {
                run.push((r, x));
                continue;
            }
            let r = rank.len();
            rank.insert(stmts.clone(), r);
        }
        flush(&mut run, &mut out);
        out.push(x);
    }
    flush(&mut run, &mut out);
    out
}
