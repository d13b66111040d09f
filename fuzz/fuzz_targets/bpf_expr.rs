//! Fuzzes the filter-expression compiler and the BPF interpreter: the first byte picks the target, the text up
//! to the first NUL is the expression, the rest is the packet. Parsing, compiling and running never panic, and
//! every compiled program passes the kernel's checks ([`Program::new`] runs them). The same bytes are also
//! read as raw instructions: whatever passes the checker runs without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roundtrip::capture::bpf::{Expr, Insn, Meta, Options, Program, Target};
use roundtrip::capture::read::LinkType;

const LINKS: [u16; 10] = [0, 1, 12, 14, 101, 108, 113, 228, 229, 276];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    let (text, pkt) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let text = String::from_utf8_lossy(text);
    if let Ok(e) = Expr::parse(&text) {
        let target = if sel as usize % (LINKS.len() + 1) == LINKS.len() {
            Target::Cooked
        } else {
            Target::Link(LinkType(LINKS[sel as usize % (LINKS.len() + 1)]))
        };
        let opts = Options { drop_outgoing: sel & 0x80 != 0, snaplen: 65535 };
        if let Ok(p) = e.compile(target, &opts) {
            let _ = p.run(pkt, pkt.len() as u32);
            let meta = Meta { protocol: Some(0x800), pkttype: Some(sel & 7) };
            let _ = p.run_meta(pkt, pkt.len() as u32, &meta);
        }
    }
    let insns: Vec<Insn> = rest
        .chunks_exact(8)
        .map(|c| Insn {
            code: u16::from_le_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();
    if let Ok(p) = Program::new(insns) {
        let _ = p.run(pkt, sel as u32 * 7);
    }
});
