//! Classic BPF programs: the instruction layout the kernel takes, the checks it makes before accepting a
//! program, and an interpreter with its semantics (used on capture files, so a file and a live socket keep
//! the same packets).
#![forbid(unsafe_code)]

use std::fmt;
use thiserror::Error;

/// Instruction classes, sizes, modes and operations of classic BPF (`linux/filter.h`, `pcap/bpf.h`).
#[allow(missing_docs)]
pub mod op {
    pub const LD: u16 = 0x00;
    pub const LDX: u16 = 0x01;
    pub const ST: u16 = 0x02;
    pub const STX: u16 = 0x03;
    pub const ALU: u16 = 0x04;
    pub const JMP: u16 = 0x05;
    pub const RET: u16 = 0x06;
    pub const MISC: u16 = 0x07;

    pub const W: u16 = 0x00;
    pub const H: u16 = 0x08;
    pub const B: u16 = 0x10;

    pub const IMM: u16 = 0x00;
    pub const ABS: u16 = 0x20;
    pub const IND: u16 = 0x40;
    pub const MEM: u16 = 0x60;
    pub const LEN: u16 = 0x80;
    pub const MSH: u16 = 0xa0;

    pub const ADD: u16 = 0x00;
    pub const SUB: u16 = 0x10;
    pub const MUL: u16 = 0x20;
    pub const DIV: u16 = 0x30;
    pub const OR: u16 = 0x40;
    pub const AND: u16 = 0x50;
    pub const LSH: u16 = 0x60;
    pub const RSH: u16 = 0x70;
    pub const NEG: u16 = 0x80;
    pub const MOD: u16 = 0x90;
    pub const XOR: u16 = 0xa0;

    pub const JA: u16 = 0x00;
    pub const JEQ: u16 = 0x10;
    pub const JGT: u16 = 0x20;
    pub const JGE: u16 = 0x30;
    pub const JSET: u16 = 0x40;

    /// Operand is the constant `k`.
    pub const K: u16 = 0x00;
    /// Operand is the X register.
    pub const X: u16 = 0x08;
    /// `ret a`: return the accumulator.
    pub const RET_A: u16 = 0x10;

    pub const TAX: u16 = 0x00;
    pub const TXA: u16 = 0x80;
}

/// Start of the kernel's ancillary data area for absolute loads (`SKF_AD_OFF`, -0x1000 as u32).
pub const SKF_AD_OFF: u32 = 0xffff_f000;
/// Ancillary load: the packet's ethertype (`skb->protocol`, host order), `SKF_AD_PROTOCOL`.
pub const SKF_AD_PROTOCOL: u32 = 0;
/// Ancillary load: the packet type (`PACKET_HOST`, `PACKET_OUTGOING`, ...), `SKF_AD_PKTTYPE`.
pub const SKF_AD_PKTTYPE: u32 = 4;
/// `PACKET_OUTGOING`: the packet type of a packet this host sends.
pub const PACKET_OUTGOING: u32 = 4;
/// Scratch memory words (`BPF_MEMWORDS`).
pub const MEMWORDS: usize = 16;
/// Longest program the kernel takes (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;

/// One classic BPF instruction, laid out exactly as `struct sock_filter` (`libc::sock_filter`), so a slice of
/// them can be handed to `SO_ATTACH_FILTER` as it is.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Insn {
    /// Class, size/operation and mode bits.
    pub code: u16,
    /// Jump offset when the condition holds.
    pub jt: u8,
    /// Jump offset when it does not.
    pub jf: u8,
    /// The constant operand.
    pub k: u32,
}

impl Insn {
    /// A non-jump instruction.
    pub const fn stmt(code: u16, k: u32) -> Insn {
        Insn {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }

    /// A conditional jump.
    pub const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
        Insn { code, jt, jf, k }
    }
}

const _: () = assert!(std::mem::size_of::<Insn>() == 8);

/// Why a program was refused (the same checks the kernel's `bpf_check_classic` makes).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InvalidProgram {
    /// No instruction at all.
    #[error("empty program")]
    Empty,
    /// More than [`MAX_INSNS`] instructions.
    #[error("{0} instructions, the kernel takes at most {MAX_INSNS}")]
    TooLong(usize),
    /// An instruction the kernel does not know.
    #[error("instruction {0}: unknown opcode {1:#06x}")]
    Opcode(usize, u16),
    /// A jump past the end.
    #[error("instruction {0}: jump past the end of the program")]
    Jump(usize),
    /// Scratch memory index out of range.
    #[error("instruction {0}: scratch memory M[{1}] does not exist (16 words)")]
    Mem(usize, u32),
    /// Scratch memory read before any write on some path.
    #[error("instruction {0}: M[{1}] is read before it is written")]
    MemUninit(usize, u32),
    /// Division or modulo by the constant 0, or a shift by 32 or more.
    #[error(
        "instruction {0}: constant operand {1} is not allowed (division by zero or shift >= 32)"
    )]
    Constant(usize, u32),
    /// An ancillary load the interpreter does not provide.
    #[error("instruction {0}: ancillary or negative offset load {1:#x} is not supported")]
    Ancillary(usize, u32),
    /// The last instruction does not return.
    #[error("the last instruction is not a return")]
    NoReturn,
}

/// Packet metadata the kernel gives to ancillary loads (files have none: ancillary loads reject there).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Meta {
    /// `SKF_AD_PROTOCOL`: the ethertype, when known.
    pub protocol: Option<u16>,
    /// `SKF_AD_PKTTYPE`: the packet type (`PACKET_HOST` 0, `PACKET_OUTGOING` 4, ...), when known.
    pub pkttype: Option<u8>,
}

/// A checked classic BPF program: jumps only forward and in range, every path ends in a return, scratch memory
/// written before it is read. Running it cannot panic or loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    insns: Vec<Insn>,
}

fn mem_k(i: usize, k: u32) -> Result<usize, InvalidProgram> {
    if (k as usize) < MEMWORDS {
        Ok(k as usize)
    } else {
        Err(InvalidProgram::Mem(i, k))
    }
}

impl Program {
    /// Checks `insns` as the kernel does and wraps them.
    pub fn new(insns: Vec<Insn>) -> Result<Program, InvalidProgram> {
        use op::*;
        let n = insns.len();
        if n == 0 {
            return Err(InvalidProgram::Empty);
        }
        if n > MAX_INSNS {
            return Err(InvalidProgram::TooLong(n));
        }
        // Scratch words surely written on every path reaching each instruction (None: not reached yet).
        let mut written: Vec<Option<u16>> = vec![None; n];
        written[0] = Some(0);
        for (i, ins) in insns.iter().enumerate() {
            let code = ins.code;
            let k = ins.k;
            // Unreached instructions are checked with nothing written (the kernel checks every one).
            let w = written[i].unwrap_or(0);
            let mut w_after = w;
            let mut succ: [Option<usize>; 2] = [Some(i + 1), None];
            match code {
                c if c == LD | W | ABS || c == LD | H | ABS || c == LD | B | ABS => {
                    if k >= SKF_AD_OFF {
                        let off = k - SKF_AD_OFF;
                        if c != LD | W | ABS || (off != SKF_AD_PROTOCOL && off != SKF_AD_PKTTYPE) {
                            return Err(InvalidProgram::Ancillary(i, k));
                        }
                    } else if k >= 0x8000_0000 {
                        return Err(InvalidProgram::Ancillary(i, k));
                    }
                }
                c if c == LD | W | IND || c == LD | H | IND || c == LD | B | IND => {}
                c if c == LD | W | LEN || c == LD | IMM || c == LDX | W | IMM => {}
                c if c == LDX | W | LEN || c == LDX | B | MSH => {
                    if c == LDX | B | MSH && k >= 0x8000_0000 {
                        return Err(InvalidProgram::Ancillary(i, k));
                    }
                }
                c if c == LD | MEM || c == LDX | MEM => {
                    let m = mem_k(i, k)?;
                    if w & (1 << m) == 0 {
                        return Err(InvalidProgram::MemUninit(i, k));
                    }
                }
                c if c == ST || c == STX => {
                    let m = mem_k(i, k)?;
                    w_after |= 1 << m;
                }
                c if c & 0x07 == ALU => {
                    let o = c & 0xf0;
                    let src = c & 0x08;
                    if c & !0xf8 != ALU
                        || !matches!(
                            o,
                            ADD | SUB | MUL | DIV | OR | AND | LSH | RSH | NEG | MOD | XOR
                        )
                    {
                        return Err(InvalidProgram::Opcode(i, code));
                    }
                    if o == NEG && src != 0 {
                        return Err(InvalidProgram::Opcode(i, code));
                    }
                    if src == K
                        && ((matches!(o, DIV | MOD) && k == 0)
                            || (matches!(o, LSH | RSH) && k >= 32))
                    {
                        return Err(InvalidProgram::Constant(i, k));
                    }
                }
                c if c == JMP | JA => {
                    let t = (i + 1).checked_add(k as usize).filter(|&t| t < n);
                    let Some(t) = t else {
                        return Err(InvalidProgram::Jump(i));
                    };
                    succ = [Some(t), None];
                }
                c if c & 0x07 == JMP => {
                    let o = c & 0xf0;
                    if c & !0xf8 != JMP || !matches!(o, JEQ | JGT | JGE | JSET) {
                        return Err(InvalidProgram::Opcode(i, code));
                    }
                    let t = i + 1 + ins.jt as usize;
                    let f = i + 1 + ins.jf as usize;
                    if t >= n || f >= n {
                        return Err(InvalidProgram::Jump(i));
                    }
                    succ = [Some(t), Some(f)];
                }
                c if c == RET | K || c == RET | RET_A => succ = [None, None],
                c if c == MISC | TAX || c == MISC | TXA => {}
                _ => return Err(InvalidProgram::Opcode(i, code)),
            }
            for s in succ.into_iter().flatten() {
                if s >= n {
                    return Err(InvalidProgram::NoReturn);
                }
                if written[i].is_some() {
                    written[s] = Some(match written[s] {
                        Some(prev) => prev & w_after,
                        None => w_after,
                    });
                }
            }
        }
        let last = insns[n - 1].code;
        if last != op::RET | op::K && last != op::RET | op::RET_A {
            return Err(InvalidProgram::NoReturn);
        }
        Ok(Program { insns })
    }

    /// The instructions, ready for `SO_ATTACH_FILTER` (same layout as `struct sock_filter`).
    pub fn insns(&self) -> &[Insn] {
        &self.insns
    }

    /// Runs the program on a packet as the kernel would: `pkt` is the captured bytes (from the link-layer
    /// header for a link target, from the network header for [`Target::Cooked`](super::Target::Cooked)),
    /// `wire_len` its length on the wire (`len`). Returns the bytes to keep; 0 rejects. A load past the end of
    /// `pkt`, a division by zero, or an ancillary load (files have no socket metadata) reject.
    pub fn run(&self, pkt: &[u8], wire_len: u32) -> u32 {
        self.run_meta(pkt, wire_len, &Meta::default())
    }

    /// [`run`](Self::run) with socket metadata for the ancillary loads.
    pub fn run_meta(&self, pkt: &[u8], wire_len: u32, meta: &Meta) -> u32 {
        use op::*;
        let mut a: u32 = 0;
        let mut x: u32 = 0;
        let mut mem = [0u32; MEMWORDS];
        let mut pc = 0usize;
        let load = |off: u64, size: usize| -> Option<u32> {
            let start = usize::try_from(off).ok()?;
            let b = pkt.get(start..start.checked_add(size)?)?;
            Some(match size {
                4 => u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
                2 => u32::from(u16::from_be_bytes([b[0], b[1]])),
                _ => u32::from(b[0]),
            })
        };
        let size_of = |code: u16| match code & 0x18 {
            W => 4,
            H => 2,
            _ => 1,
        };
        // Validation guarantees every jump is forward and in range and the last instruction returns.
        while let Some(ins) = self.insns.get(pc) {
            let k = ins.k;
            pc += 1;
            match ins.code & 0x07 {
                LD => match ins.code & 0xe0 {
                    ABS if k >= SKF_AD_OFF => {
                        let v = match k - SKF_AD_OFF {
                            SKF_AD_PROTOCOL => meta.protocol.map(u32::from),
                            _ => meta.pkttype.map(u32::from),
                        };
                        match v {
                            Some(v) => a = v,
                            None => return 0,
                        }
                    }
                    ABS => match load(u64::from(k), size_of(ins.code)) {
                        Some(v) => a = v,
                        None => return 0,
                    },
                    IND => match load(u64::from(x) + u64::from(k), size_of(ins.code)) {
                        Some(v) => a = v,
                        None => return 0,
                    },
                    LEN => a = wire_len,
                    MEM => a = mem[k as usize % MEMWORDS],
                    _ => a = k,
                },
                LDX => match ins.code & 0xe0 {
                    LEN => x = wire_len,
                    MEM => x = mem[k as usize % MEMWORDS],
                    MSH => match load(u64::from(k), 1) {
                        Some(v) => x = (v & 0xf) * 4,
                        None => return 0,
                    },
                    _ => x = k,
                },
                ST => mem[k as usize % MEMWORDS] = a,
                STX => mem[k as usize % MEMWORDS] = x,
                ALU => {
                    let v = if ins.code & X != 0 { x } else { k };
                    a = match ins.code & 0xf0 {
                        ADD => a.wrapping_add(v),
                        SUB => a.wrapping_sub(v),
                        MUL => a.wrapping_mul(v),
                        DIV => match a.checked_div(v) {
                            Some(r) => r,
                            None => return 0,
                        },
                        MOD => match a.checked_rem(v) {
                            Some(r) => r,
                            None => return 0,
                        },
                        OR => a | v,
                        AND => a & v,
                        XOR => a ^ v,
                        LSH => a.wrapping_shl(v),
                        RSH => a.wrapping_shr(v),
                        _ => a.wrapping_neg(),
                    };
                }
                JMP => {
                    let v = if ins.code & X != 0 { x } else { k };
                    let cond = match ins.code & 0xf0 {
                        JA => {
                            pc += k as usize;
                            continue;
                        }
                        JEQ => a == v,
                        JGT => a > v,
                        JGE => a >= v,
                        _ => a & v != 0,
                    };
                    pc += usize::from(if cond { ins.jt } else { ins.jf });
                }
                RET => return if ins.code & RET_A != 0 { a } else { k },
                _ => {
                    if ins.code & TXA != 0 {
                        a = x;
                    } else {
                        x = a;
                    }
                }
            }
        }
        0
    }

    /// The program as `tcpdump -d` prints it.
    pub fn dump(&self) -> String {
        self.to_string()
    }
}

fn image(i: usize, ins: &Insn) -> String {
    use op::*;
    let k = ins.k;
    let (name, operand): (&str, String) = match ins.code {
        c if c == LD | W | ABS && k >= SKF_AD_OFF => (
            "ld",
            match k - SKF_AD_OFF {
                SKF_AD_PROTOCOL => "#proto".into(),
                SKF_AD_PKTTYPE => "#type".into(),
                o => format!("#ancillary+{o}"),
            },
        ),
        c if c == LD | W | ABS => ("ld", format!("[{k}]")),
        c if c == LD | H | ABS => ("ldh", format!("[{k}]")),
        c if c == LD | B | ABS => ("ldb", format!("[{k}]")),
        c if c == LD | W | LEN => ("ld", "#pktlen".into()),
        c if c == LD | W | IND => ("ld", format!("[x + {k}]")),
        c if c == LD | H | IND => ("ldh", format!("[x + {k}]")),
        c if c == LD | B | IND => ("ldb", format!("[x + {k}]")),
        c if c == LD | IMM => ("ld", format!("#{k:#x}")),
        c if c == LDX | W | IMM => ("ldx", format!("#{k:#x}")),
        c if c == LDX | B | MSH => ("ldxb", format!("4*([{k}]&0xf)")),
        c if c == LD | MEM => ("ld", format!("M[{k}]")),
        c if c == LDX | MEM => ("ldx", format!("M[{k}]")),
        c if c == LDX | W | LEN => ("ldx", "#pktlen".into()),
        c if c == ST => ("st", format!("M[{k}]")),
        c if c == STX => ("stx", format!("M[{k}]")),
        c if c == JMP | JA => ("ja", format!("{}", i + 1 + k as usize)),
        c if c == RET | K => ("ret", format!("#{k}")),
        c if c == RET | RET_A => ("ret", "a".into()),
        c if c == MISC | TAX => ("tax", String::new()),
        c if c == MISC | TXA => ("txa", String::new()),
        c if c & 0x07 == JMP => {
            let name = match c & 0xf0 {
                JEQ => "jeq",
                JGT => "jgt",
                JGE => "jge",
                _ => "jset",
            };
            let operand = if c & X != 0 {
                "x".to_string()
            } else {
                format!("#{k:#x}")
            };
            return format!(
                "({i:03}) {name:<8} {operand:<16} jt {}\tjf {}",
                i + 1 + ins.jt as usize,
                i + 1 + ins.jf as usize
            );
        }
        c if c & 0x07 == ALU => {
            let name = match c & 0xf0 {
                ADD => "add",
                SUB => "sub",
                MUL => "mul",
                DIV => "div",
                MOD => "mod",
                OR => "or",
                AND => "and",
                XOR => "xor",
                LSH => "lsh",
                RSH => "rsh",
                _ => "neg",
            };
            let operand = if c & 0xf0 == NEG {
                String::new()
            } else if c & X != 0 {
                "x".to_string()
            } else {
                format!("#{k:#x}")
            };
            (name, operand)
        }
        c => ("unimp", format!("{c:#x}")),
    };
    format!("({i:03}) {name:<8} {operand}")
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, ins) in self.insns.iter().enumerate() {
            writeln!(f, "{}", image(i, ins))?;
        }
        Ok(())
    }
}
