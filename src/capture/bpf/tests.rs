use super::vm::op::*;
use super::vm::{MEMWORDS, SKF_AD_OFF, SKF_AD_PKTTYPE, SKF_AD_PROTOCOL};
use super::*;
use crate::capture::decode::{flags, tests::ipv4_tcp, tests::ipv6_tcp};

fn eth() -> Target {
    Target::Link(LinkType::ETHERNET)
}

fn prog(e: &str, t: Target) -> Program {
    compile(e, t, &Options::default()).unwrap_or_else(|err| panic!("'{e}': {err}"))
}

fn ether(ethertype: u16, l3: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; 12];
    v.extend_from_slice(&ethertype.to_be_bytes());
    v.extend_from_slice(l3);
    v
}

fn keeps(e: &str, t: Target, pkt: &[u8]) -> bool {
    prog(e, t).run(pkt, pkt.len() as u32) != 0
}

#[test]
fn code_bytes_for_simple_expressions() {
    let i = |code, jt, jf, k| Insn { code, jt, jf, k };
    assert_eq!(
        prog("ip", eth()).insns(),
        &[
            i(LD | H | ABS, 0, 0, 12),
            i(JMP | JEQ | K, 0, 1, 0x800),
            i(RET | K, 0, 0, 262_144),
            i(RET | K, 0, 0, 0),
        ]
    );
    // The cooked socket takes the ethertype from the ancillary area.
    assert_eq!(
        prog("arp", Target::Cooked).insns(),
        &[
            i(LD | W | ABS, 0, 0, SKF_AD_OFF + SKF_AD_PROTOCOL),
            i(JMP | JEQ | K, 0, 1, 0x806),
            i(RET | K, 0, 0, 262_144),
            i(RET | K, 0, 0, 0),
        ]
    );
    // Empty expression with drop_outgoing: the libpcap `lo` prologue, snaplen as the accept value.
    let p = Expr::parse("")
        .unwrap()
        .compile(
            Target::Cooked,
            &Options {
                drop_outgoing: true,
                snaplen: 65535,
                netmask: 0,
            },
        )
        .unwrap();
    assert_eq!(
        p.insns(),
        &[
            i(LD | W | ABS, 0, 0, SKF_AD_OFF + SKF_AD_PKTTYPE),
            i(JMP | JEQ | K, 1, 0, 4),
            i(RET | K, 0, 0, 65535),
            i(RET | K, 0, 0, 0),
        ]
    );
    assert_eq!(prog("", eth()).insns(), &[i(RET | K, 0, 0, 262_144)]);
    // less N is len <= N.
    assert_eq!(
        prog("less 100", eth()).insns(),
        &[
            i(LD | W | LEN, 0, 0, 0),
            i(JMP | JGT | K, 1, 0, 100),
            i(RET | K, 0, 0, 262_144),
            i(RET | K, 0, 0, 0),
        ]
    );
    // Raw IPv4: `ip` is always true, `arp` never.
    assert_eq!(
        prog("ip", Target::Link(LinkType::IPV4)).insns(),
        &[i(RET | K, 0, 0, 262_144)]
    );
    assert_eq!(
        prog("arp", Target::Link(LinkType::RAW)).insns(),
        &[i(RET | K, 0, 0, 0)]
    );
    // IPv4 port: fragment check, then the header length from the first byte (ldxb), as libpcap.
    let p = prog("tcp dst port 80", Target::Link(LinkType::IPV4));
    assert_eq!(
        p.insns(),
        &[
            i(LD | B | ABS, 0, 0, 9),
            i(JMP | JEQ | K, 0, 6, 6),
            i(LD | H | ABS, 0, 0, 6),
            i(JMP | JSET | K, 4, 0, 0x1fff),
            i(LDX | B | MSH, 0, 0, 0),
            i(LD | H | IND, 0, 0, 2),
            i(JMP | JEQ | K, 0, 1, 80),
            i(RET | K, 0, 0, 262_144),
            i(RET | K, 0, 0, 0),
        ]
    );
}

#[test]
fn dump_reads_like_tcpdump_d() {
    assert_eq!(
        prog("ip", eth()).dump(),
        "(000) ldh      [12]\n(001) jeq      #0x800           jt 2\tjf 3\n(002) ret      #262144\n(003) ret      #0\n"
    );
    let d = prog("tcp port 80", eth()).dump();
    assert!(d.contains("ldxb     4*([14]&0xf)"), "{d}");
    assert!(d.contains("ldh      [x + 14]"), "{d}");
    assert!(d.contains("jset     #0x1fff"), "{d}");
}

#[test]
fn implicit_qualifiers_and_precedence_as_libpcap() {
    let t = |a: &str| Expr::parse(a).unwrap().tree().cloned();
    assert_eq!(t("port 80 or 443"), t("port 80 or port 443"));
    assert_eq!(t("tcp port 80 or 443"), t("tcp port 80 or tcp port 443"));
    assert_eq!(
        t("host 10.0.0.1 and not 10.0.0.2"),
        t("host 10.0.0.1 and not host 10.0.0.2")
    );
    assert_eq!(
        t("host (10.0.0.1 or 10.0.0.2)"),
        t("host 10.0.0.1 or host 10.0.0.2")
    );
    // and/or: same precedence, left to right.
    assert_eq!(t("tcp or udp and port 53"), t("(tcp or udp) and port 53"));
    assert_ne!(t("tcp or udp and port 53"), t("tcp or (udp and port 53)"));
    assert_eq!(
        t("! tcp && ! udp || arp"),
        t("(not tcp and not udp) or arp")
    );
    assert_eq!(t("net 10"), t("net 10.0.0.0/8"));
    assert_eq!(t("net 192.168"), t("net 192.168.0.0 mask 255.255.0.0"));
    assert_eq!(t("10.0.0.1"), t("host 10.0.0.1"));
    assert_eq!(t("src or dst port 5"), t("port 5"));
    assert_eq!(t("portrange 10-5"), t("portrange 5-10"));
    assert_eq!(t("tcp[tcpflags] & tcp-syn != 0"), t("tcp[13] & 2 != 0"));
}

#[test]
fn refusals_name_the_part_and_the_fix() {
    for (e, needle) in [
        ("host db01", "host names are not resolved"),
        ("port http", "write the number"),
        (
            "gateway 10.0.0.1",
            "'gateway' is not supported: write host ADDR",
        ),
        ("ether host 00:11:22:33:44:55", "'ether' is not supported"),
        ("mpls 100 and tcp", "'mpls' is not supported"),
        ("vlan 5000", "VLAN ID is 0-4095"),
        ("tcp and 80", "needs a qualifier"),
        ("net 10.0.0.1/8", "bits set outside the mask"),
        ("port 80 or", "expected a primitive"),
        ("(tcp", "expected ')'"),
        ("tcp port 80 443", "join primitives with and / or"),
        ("tcp host 10.0.0.1", "does not qualify a host"),
        ("ip port 80", "ports belong to tcp, udp or sctp"),
        ("ip6 host 10.0.0.1", "IPv4 address"),
        ("tcp[0:3] = 1", "size is 1, 2 or 4"),
        ("tcp[13] / 0 = 1", "division by zero"),
        ("port 65536", "out of range"),
        ("host 10.1", "write all four parts"),
        ("host fd00::/64", "host takes one address"),
        ("a $ b", "unexpected character"),
    ] {
        let err = Expr::parse(e).expect_err(e).to_string();
        assert!(err.contains(needle), "'{e}': {err}");
        assert!(!err.contains('\n'));
    }
}

#[test]
fn semantics_on_real_packet_bytes() {
    let syn = ipv4_tcp(
        [10, 0, 0, 5],
        [10, 0, 0, 9],
        40000,
        1521,
        1,
        0,
        flags::SYN,
        b"",
    );
    let e = ether(0x800, &syn);
    assert!(keeps("port 1521", eth(), &e));
    assert!(keeps("host 10.0.0.5 and tcp", eth(), &e));
    assert!(keeps("tcp port 5432 or tcp port 1521", eth(), &e));
    assert!(keeps("net 10.0.0.0/8", eth(), &e));
    assert!(!keeps("not port 1521", eth(), &e));
    assert!(keeps("src host 10.0.0.5 and dst host 10.0.0.9", eth(), &e));
    assert!(!keeps("dst host 10.0.0.5", eth(), &e));
    assert!(keeps("tcp[tcpflags] & (tcp-syn|tcp-fin) != 0", eth(), &e));
    assert!(!keeps("tcp[tcpflags] & tcp-ack != 0", eth(), &e));
    assert!(keeps("portrange 1500-1600", eth(), &e));
    assert!(!keeps("udp or icmp or ip6 or arp", eth(), &e));
    assert!(keeps(&format!("len = {}", e.len()), eth(), &e));
    // The same program, other link types.
    assert!(keeps("port 1521", Target::Link(LinkType::RAW), &syn));
    assert!(keeps("port 1521", Target::Link(LinkType::IPV4), &syn));
    assert!(!keeps("port 1521", Target::Cooked, &[]));
    let p = prog("port 1521 and ip", Target::Cooked);
    let meta = Meta {
        protocol: Some(0x800),
        pkttype: Some(0),
    };
    assert_ne!(p.run_meta(&syn, syn.len() as u32, &meta), 0);
    assert_eq!(p.run(&syn, syn.len() as u32), 0, "no metadata on files");
    let mut null = 2u32.to_le_bytes().to_vec();
    null.extend_from_slice(&syn);
    assert!(keeps("port 1521", Target::Link(LinkType::NULL), &null));
    let mut lp = 2u32.to_be_bytes().to_vec();
    lp.extend_from_slice(&syn);
    assert!(keeps("port 1521", Target::Link(LinkType::LOOP), &lp));
    // A non-first fragment: `tcp` matches, ports do not (as libpcap).
    let mut frag = syn.clone();
    frag[6] = 0x00;
    frag[7] = 0x10;
    let f = ether(0x800, &frag);
    assert!(keeps("tcp", eth(), &f));
    assert!(!keeps("port 1521", eth(), &f));
    // Cut short: the load past the end rejects the packet.
    assert!(!keeps("port 1521", eth(), &e[..35]));
    assert!(keeps("ip", eth(), &e[..35]));
    // IPv6 (::1 -> ::2) with a hop-by-hop header before TCP: libpcap does not walk extension headers, so
    // neither `tcp` nor the port matches; `ip6 proto 0` does.
    let v6 = ipv6_tcp(40000, 6379, 1, flags::ACK, b"x");
    let e6 = ether(0x86dd, &v6);
    assert!(!keeps("tcp port 6379", eth(), &e6));
    assert!(!keeps("tcp", eth(), &e6));
    assert!(keeps("ip6 proto 0", eth(), &e6));
    assert!(keeps("src host ::1 and dst host ::2", eth(), &e6));
    assert!(keeps("net ::/8", eth(), &e6));
    assert!(!keeps("host ::3 or ip", eth(), &e6));
    // Without the extension header, TCP over IPv6 is seen.
    let mut direct = v6[..40].to_vec();
    direct.extend_from_slice(&v6[48..]);
    direct[6] = 6;
    let plen = ((direct.len() - 40) as u16).to_be_bytes();
    direct[4..6].copy_from_slice(&plen);
    let d6 = ether(0x86dd, &direct);
    assert!(keeps("tcp port 6379 and ip6", eth(), &d6));
    assert!(
        !keeps("tcp[13] & 2 = 0 and ip6", eth(), &d6),
        "tcp[] is IPv4 only, as libpcap"
    );
    assert!(keeps("ip6 proto 6", eth(), &d6));
    // ARP: `host` without a protocol matches the ARP sender address.
    let mut arp = vec![0, 1, 8, 0, 6, 4, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 5];
    arp.extend_from_slice(&[0, 0, 0, 0, 0, 0, 10, 0, 0, 9]);
    let a = ether(0x806, &arp);
    assert!(keeps("host 10.0.0.5", eth(), &a));
    assert!(keeps("arp and dst host 10.0.0.9", eth(), &a));
    assert!(!keeps("ip host 10.0.0.5", eth(), &a));
}

#[test]
fn checker_refuses_what_the_kernel_refuses() {
    let i = |code, jt, jf, k| Insn { code, jt, jf, k };
    let ret = i(RET | K, 0, 0, 1);
    assert_eq!(Program::new(vec![]), Err(InvalidProgram::Empty));
    assert_eq!(
        Program::new(vec![i(LD | IMM, 0, 0, 1)]),
        Err(InvalidProgram::NoReturn)
    );
    assert_eq!(
        Program::new(vec![i(JMP | JEQ | K, 1, 0, 0), ret]),
        Err(InvalidProgram::Jump(0))
    );
    assert_eq!(
        Program::new(vec![i(JMP | JA, 0, 0, 5), ret]),
        Err(InvalidProgram::Jump(0))
    );
    assert_eq!(
        Program::new(vec![i(LD | MEM, 0, 0, 3), ret]),
        Err(InvalidProgram::MemUninit(0, 3))
    );
    assert_eq!(
        Program::new(vec![i(ST, 0, 0, MEMWORDS as u32), ret]),
        Err(InvalidProgram::Mem(0, 16))
    );
    assert_eq!(
        Program::new(vec![i(ALU | DIV | K, 0, 0, 0), ret]),
        Err(InvalidProgram::Constant(0, 0))
    );
    assert_eq!(
        Program::new(vec![i(0xffff, 0, 0, 0), ret]),
        Err(InvalidProgram::Opcode(0, 0xffff))
    );
    // Written on one path only: refused.
    assert!(matches!(
        Program::new(vec![
            i(JMP | JEQ | K, 0, 1, 0),
            i(ST, 0, 0, 0),
            i(LD | MEM, 0, 0, 0),
            ret
        ]),
        Err(InvalidProgram::MemUninit(2, 0))
    ));
    // Division by X = 0 at run time rejects, as the kernel.
    let p = Program::new(vec![
        i(LD | IMM, 0, 0, 7),
        i(LDX | W | IMM, 0, 0, 0),
        i(ALU | DIV | X, 0, 0, 0),
        ret,
    ])
    .unwrap();
    assert_eq!(p.run(&[], 0), 0);
    let p = Program::new(vec![i(LD | W | LEN, 0, 0, 0), i(RET | RET_A, 0, 0, 0)]).unwrap();
    assert_eq!(p.run(&[1, 2], 1234), 1234);
}

/// Random programs: whatever passes the checker runs without panicking on random packets; random text never
/// panics the parser or the code generator, and what compiles passes the checker for every target.
#[test]
fn random_programs_and_text_never_panic() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let codes: Vec<u16> = (0..=0xffu16).collect();
    let mut ran = 0;
    for _ in 0..20000 {
        let n = (rnd() % 12 + 1) as usize;
        let mut v: Vec<Insn> = (0..n)
            .map(|_| Insn {
                code: codes[(rnd() % 256) as usize],
                jt: (rnd() % 4) as u8,
                jf: (rnd() % 4) as u8,
                k: if rnd() % 2 == 0 {
                    (rnd() % 80) as u32
                } else {
                    rnd() as u32
                },
            })
            .collect();
        v.push(Insn::stmt(RET | RET_A, 0));
        if let Ok(p) = Program::new(v) {
            ran += 1;
            let pkt: Vec<u8> = (0..rnd() % 80).map(|_| rnd() as u8).collect();
            let _ = p.run(&pkt, rnd() as u32);
        }
    }
    assert!(ran > 100, "only {ran} random programs passed the checker");
    let words = [
        "host",
        "net",
        "port",
        "portrange",
        "src",
        "dst",
        "and",
        "or",
        "not",
        "(",
        ")",
        "tcp",
        "udp",
        "ip",
        "ip6",
        "arp",
        "icmp",
        "icmp6",
        "10.0.0.1",
        "::1",
        "80",
        "1-5",
        "/",
        "8",
        "mask",
        "255.0.0.0",
        "less",
        "greater",
        "[",
        "]",
        ":",
        "2",
        "&",
        "|",
        "!=",
        "=",
        ">",
        "len",
        "-",
        "+",
        "*",
        "tcpflags",
        "tcp-syn",
        "proto",
        "0",
        "/0",
        "<<",
        "40",
    ];
    for _ in 0..20000 {
        let n = (rnd() % 9) as usize;
        let text: Vec<&str> = (0..n)
            .map(|_| words[(rnd() as usize) % words.len()])
            .collect();
        let text = text.join(" ");
        if let Ok(e) = Expr::parse(&text) {
            for t in [
                eth(),
                Target::Cooked,
                Target::Link(LinkType::LINUX_SLL2),
                Target::Link(LinkType::RAW),
                Target::Link(LinkType::NULL),
                Target::Link(LinkType::IPV6),
            ] {
                let p = e
                    .compile(t, &Options::default())
                    .unwrap_or_else(|err| panic!("'{text}': {err}"));
                let pkt: Vec<u8> = (0..rnd() % 90).map(|_| rnd() as u8).collect();
                let _ = p.run(&pkt, pkt.len() as u32);
            }
        }
    }
}

#[test]
fn long_expressions_get_trampolines() {
    // Each `port` is ~50 instructions: beyond 5 of them a conditional jump cannot reach the returns (8-bit
    // offsets) and goes through a `ja`.
    let ports: Vec<String> = (1..=40).map(|p| format!("port {p}")).collect();
    let p = prog(&ports.join(" or "), eth());
    assert!(p.insns().len() > 600);
    assert!(p.insns().iter().any(|i| i.code == JMP | JA));
    for port in [1u16, 17, 40, 41, 1000] {
        let e = ether(
            0x800,
            &ipv4_tcp(
                [10, 0, 0, 1],
                [10, 0, 0, 2],
                50000,
                port,
                1,
                0,
                flags::ACK,
                b"",
            ),
        );
        assert_eq!(
            keeps(&ports.join(" or "), eth(), &e),
            port <= 40,
            "port {port}"
        );
    }
}

#[test]
fn vlan_shifts_what_follows_as_libpcap() {
    let syn = ipv4_tcp(
        [10, 0, 0, 5],
        [10, 0, 0, 9],
        40000,
        1521,
        1,
        0,
        flags::SYN,
        b"",
    );
    let mut tagged = vec![0u8; 12];
    tagged.extend([0x81, 0x00, 0x00, 42, 0x08, 0x00]);
    tagged.extend_from_slice(&syn);
    assert!(keeps("vlan and port 1521", eth(), &tagged));
    assert!(keeps("vlan 42 and host 10.0.0.5", eth(), &tagged));
    assert!(!keeps("vlan 43", eth(), &tagged));
    assert!(
        !keeps("port 1521", eth(), &tagged),
        "untagged offsets before `vlan`"
    );
    assert!(!keeps("port 1521 and vlan", eth(), &tagged));
    let plain = ether(0x800, &syn);
    assert!(!keeps("vlan", eth(), &plain));
    assert!(
        Expr::parse("vlan")
            .unwrap()
            .compile(Target::Cooked, &Options::default())
            .is_err()
    );
}

/// The expressions: (expression, our instruction count, `tcpdump -d -y EN10MB`'s (libpcap 1.10), the
/// margin allowed over libpcap). The same counts hold for the cooked socket (`tcpdump -d -y LINUX_SLL` gives
/// libpcap's the same as on Ethernet). Before the optimiser: 25, 31, 40, 26, 25, 20, 13, 21.
const SIZES: &[(&str, usize, usize, usize)] = &[
    ("port 1521", 24, 24, 0),
    ("host 10.0.0.5 and tcp", 10, 10, 0),
    // libpcap reorders the four port tests to compare each loaded port with both values; we keep the order
    // of the expression (a reordering changes the verdict on a packet cut between the two ports).
    ("tcp port 5432 or tcp port 6379", 28, 23, 5),
    ("net 10.0.0.0/8", 18, 18, 0),
    ("not port 22", 24, 24, 0),
    ("host 10.0.0.5", 14, 14, 0),
    ("tcp", 12, 12, 0),
    ("udp port 53", 20, 20, 0),
];

#[test]
fn programs_are_as_small_as_libpcaps() {
    for &(e, ours, libpcap, margin) in SIZES {
        assert!(ours <= libpcap + margin, "{e}: the table itself");
        for t in [eth(), Target::Cooked, Target::Link(LinkType::LINUX_SLL)] {
            let p = prog(e, t);
            assert_eq!(p.insns().len(), ours, "{e} for {t:?}:\n{}", p.dump());
        }
    }
}

#[test]
fn jump_threading_reuses_the_ethertype_test() {
    let i = |code, jt, jf, k| Insn { code, jt, jf, k };
    // Exactly tcpdump -d's program: after `host` matched on IPv4 the `tcp` test's `ldh [12]`/`jeq #0x800` is
    // known true and jumped over, its IPv6 half known false, and the ARP/RARP halves of `host`, which can
    // only lead to rejection once `tcp` is required, are gone.
    assert_eq!(
        prog("host 10.0.0.5 and tcp", eth()).insns(),
        &[
            i(LD | H | ABS, 0, 0, 12),
            i(JMP | JEQ | K, 0, 7, 0x800),
            i(LD | W | ABS, 0, 0, 26),
            i(JMP | JEQ | K, 2, 0, 0x0a00_0005),
            i(LD | W | ABS, 0, 0, 30),
            i(JMP | JEQ | K, 0, 3, 0x0a00_0005),
            i(LD | B | ABS, 0, 0, 23),
            i(JMP | JEQ | K, 0, 1, 6),
            i(RET | K, 0, 0, 262_144),
            i(RET | K, 0, 0, 0),
        ]
    );
    // The ARP and RARP address tests are the same code: merged, both ethertype tests jump to one copy.
    assert_eq!(
        prog("host 10.0.0.5", eth()).insns()[6..12],
        [
            i(JMP | JEQ | K, 1, 0, 0x806),
            i(JMP | JEQ | K, 0, 5, 0x8035),
            i(LD | W | ABS, 0, 0, 28),
            i(JMP | JEQ | K, 2, 0, 0x0a00_0005),
            i(LD | W | ABS, 0, 0, 38),
            i(JMP | JEQ | K, 0, 1, 0x0a00_0005),
        ]
    );
    // `tcp or tcp` decides the second test from the first: no second copy.
    assert_eq!(
        prog("tcp or tcp", eth()).insns().len(),
        prog("tcp", eth()).insns().len()
    );
}

#[test]
fn the_optimiser_changes_no_verdict() {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let atoms = [
        "tcp",
        "udp",
        "ip",
        "ip6",
        "arp",
        "icmp",
        "port 80",
        "port 53",
        "tcp port 5432",
        "udp port 53",
        "src port 80",
        "portrange 70-90",
        "host 10.0.0.1",
        "host 10.0.0.2",
        "src host 10.0.0.1",
        "dst host 10.0.0.2",
        "net 10.0.0.0/8",
        "host ::1",
        "ip6 net ::/16",
        "tcp[13] & 2 != 0",
        "ip[2:2] > 40",
        "less 60",
        "greater 100",
        "ip proto 6",
        "icmp6",
    ];
    let mut pkts: Vec<Vec<u8>> = Vec::new();
    for (s, d, sp, dp) in [
        ([10, 0, 0, 1], [10, 0, 0, 2], 80, 5432),
        ([10, 0, 0, 2], [192, 168, 0, 1], 50000, 53),
        ([172, 16, 0, 1], [10, 0, 0, 1], 75, 22),
    ] {
        let v4 = ipv4_tcp(s, d, sp, dp, 1, 0, flags::SYN, b"hello");
        pkts.push(ether(0x800, &v4));
        let mut udp = v4.clone();
        udp[9] = 17;
        pkts.push(ether(0x800, &udp));
        let mut frag = v4.clone();
        frag[7] = 8;
        pkts.push(ether(0x800, &frag));
        pkts.push(ether(0x86dd, &ipv6_tcp(sp, dp, 1, flags::ACK, b"x")));
        let mut arp = vec![0u8; 28];
        arp[14..18].copy_from_slice(&s);
        arp[24..28].copy_from_slice(&d);
        pkts.push(ether(0x806, &arp));
        pkts.push(ether(0x8035, &arp));
    }
    // Every packet cut at every length (a load past the end rejects: the order of loads matters).
    let mut all: Vec<Vec<u8>> = Vec::new();
    for p in &pkts {
        for n in 0..=p.len() {
            all.push(p[..n].to_vec());
        }
    }
    let (mut checked, mut kept) = (0, 0);
    for _ in 0..600 {
        let n = 1 + (rnd() % 4) as usize;
        let mut text = String::new();
        for w in 0..n {
            if w > 0 {
                text.push_str(["and ", "or ", "and not ", "or not "][(rnd() % 4) as usize]);
            }
            text.push_str(atoms[(rnd() as usize) % atoms.len()]);
            text.push(' ');
        }
        let e = Expr::parse(&text).unwrap_or_else(|err| panic!("'{text}': {err}"));
        // Ethernet: the cooked socket's ancillary loads reject every packet in the interpreter.
        let t = eth();
        let fast = e.compile(t, &Options::default()).unwrap();
        let slow = codegen::compile_with(e.tree(), t, &Options::default(), false).unwrap();
        assert!(fast.insns().len() <= slow.insns().len(), "'{text}'");
        for p in &all {
            let mut q = p.clone();
            if rnd() % 3 == 0 && !q.is_empty() {
                let i = (rnd() as usize) % q.len();
                q[i] = rnd() as u8;
            }
            let v = fast.run(&q, q.len() as u32);
            kept += usize::from(v != 0);
            assert_eq!(
                v,
                slow.run(&q, q.len() as u32),
                "'{text}' on {q:02x?}\n{}\n{}",
                fast.dump(),
                slow.dump()
            );
            checked += 1;
        }
    }
    assert!(checked > 100_000 && kept > 10_000, "{checked} {kept}");
}
