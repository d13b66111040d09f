//! Bounds of the parser: depth, primitives, words, excerpts (the grammar itself is tested in `bpf::tests`).

use super::*;
use crate::capture::bpf::{Expr, Options, Target, excerpt};
use crate::capture::read::LinkType;

const TARGETS: [Target; 4] = [
    Target::Link(LinkType::ETHERNET),
    Target::Link(LinkType(276)),
    Target::Link(LinkType::RAW),
    Target::Cooked,
];

/// Expressions exactly at the limit, of every kind of nesting.
fn at_limit(n: usize) -> Vec<String> {
    vec![
        format!("{}tcp{}", "(".repeat(n), ")".repeat(n)),
        format!("{}tcp", "not ".repeat(n)),
        format!("{}port 80", "! ".repeat(n)),
        format!("host 10.0.0.1 and {}10.0.0.2", "not ".repeat(n - 1)),
        format!("len = {}1", "-".repeat(n)),
        format!("len = {}1{}", "(".repeat(n), ")".repeat(n)),
        format!("len = {}1", "1 + ".repeat(n)),
        format!("{}0{} = 1", "ip[".repeat(n), "]".repeat(n)),
        format!(
            "{} tcp",
            (0..n)
                .map(|i| if i % 2 == 0 { "tcp or" } else { "udp and" })
                .collect::<Vec<_>>()
                .join(" ")
        ),
        format!("host {}10.0.0.1{}", "(".repeat(n), ")".repeat(n)),
    ]
}

#[test]
fn max_depth_parses_and_compiles_on_a_test_thread_stack() {
    // Test threads have 2 MiB of stack, as the agent's threads: every walk (parse, code generation, the
    // optimiser, drop) fits at the limit, in a debug build.
    for e in at_limit(MAX_DEPTH) {
        let x = Expr::parse(&e).unwrap_or_else(|err| panic!("{}: {err}", excerpt(&e, None)));
        for t in TARGETS {
            let _ = x.compile(t, &Options::default());
        }
    }
}

#[test]
fn one_level_more_is_refused_in_one_line() {
    for e in at_limit(MAX_DEPTH + 1)
        .into_iter()
        .chain(at_limit(20_000))
        .chain(at_limit(200_000))
    {
        let err = Expr::parse(&e).expect_err(&e[..40]).to_string();
        assert!(
            err.starts_with("the expression nests more than 256 levels"),
            "{}: {err}",
            excerpt(&e, None)
        );
        assert!(!err.contains('\n') && err.len() < 300, "{err}");
    }
}

#[test]
fn long_lists_are_balanced_not_deep() {
    let list = |n: usize, op: &str| {
        (1..=n)
            .map(|p| format!("port {p}"))
            .collect::<Vec<_>>()
            .join(op)
    };
    for op in [" or ", " and ", " || "] {
        let t = parse(&list(4096, op)).unwrap().unwrap();
        assert_eq!(node_depth(&t), 13, "{op}");
        assert_eq!(primitives(&t), 4096);
    }
    // The same tests in the same order as the chain libpcap builds: the same program.
    let chain = |n: usize| -> Node {
        (2..=n).fold(parse("port 1").unwrap().unwrap(), |l, p| {
            Node::Or(
                Box::new(l),
                Box::new(parse(&format!("port {p}")).unwrap().unwrap()),
            )
        })
    };
    for n in [2, 3, 5, 8, 13] {
        let balanced = parse(&list(n, " or ")).unwrap();
        let left = Some(chain(n));
        for t in TARGETS {
            let o = Options::default();
            assert_eq!(
                crate::capture::bpf::codegen::compile(balanced.as_ref(), t, &o, 0)
                    .map(|p| p.dump()),
                crate::capture::bpf::codegen::compile(left.as_ref(), t, &o, 0).map(|p| p.dump()),
                "{n} {t:?}"
            );
        }
    }
}

#[test]
fn too_many_primitives_are_refused_before_code_generation() {
    let e = (0..=MAX_PRIMITIVES)
        .map(|i| format!("port {}", i % 60000))
        .collect::<Vec<_>>()
        .join(" or ");
    let err = parse(&e).unwrap_err();
    assert!(err.msg.contains("4097 primitives"), "{}", err.msg);
}

#[test]
fn long_words_are_refused_short() {
    let e = format!("host {}", "a".repeat(100_000));
    let err = Expr::parse(&e).unwrap_err().to_string();
    assert!(
        err.starts_with("a word of 100000 characters"),
        "{}",
        &err[..80]
    );
    assert!(err.len() < 200, "{err}");
}

#[test]
fn errors_in_long_expressions_say_where_with_a_short_excerpt() {
    let mut e = (1..=1600)
        .map(|p| format!("port {p}"))
        .collect::<Vec<_>>()
        .join(" or ");
    e.push_str(" or port 99999");
    let err = Expr::parse(&e).unwrap_err().to_string();
    assert!(err.starts_with("port 99999 is out of range"), "{err}");
    assert!(err.contains("port 1600 or port 99999')"), "{err}");
    assert!(err.len() < 200, "{err}");
}

#[test]
fn excerpts_are_short_and_escaped() {
    assert_eq!(excerpt("tcp port 80", None), "tcp port 80");
    assert_eq!(
        excerpt("a\u{1b}[2Jb\u{7}\u{0}\u{202e}", None),
        "a\\x1b[2Jb\\x07\\x00\\u{202e}"
    );
    assert_eq!(excerpt("a\tb\nc", None), "a b c");
    let long = "x".repeat(1000);
    let head = excerpt(&long, None);
    assert_eq!(head, format!("{}…", "x".repeat(60)));
    let mid = excerpt(&long, Some(500));
    assert_eq!(mid, format!("…{}…", "x".repeat(60)));
    assert_eq!(excerpt(&long, Some(1000)), format!("…{}", "x".repeat(60)));
    // Multi-byte characters are cut at character boundaries.
    let wide = "é".repeat(100);
    assert_eq!(
        excerpt(&wide, Some(3))
            .chars()
            .filter(|&c| c == 'é')
            .count(),
        60
    );
}

#[test]
fn control_characters_in_an_expression_are_escaped_in_the_error() {
    for e in ["tcp \u{1b}]0;owned\u{7}", "port 80 \u{202e} or 1", "\u{0}"] {
        let err = Expr::parse(e).unwrap_err().to_string();
        assert!(!err.chars().any(crate::terminal::needs_escape), "{err:?}");
        assert!(err.starts_with("unexpected character '\\"), "{err}");
    }
}
