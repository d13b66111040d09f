use super::vm::op::*;
use super::*;

fn eth() -> Target {
    Target::Link(LinkType::ETHERNET)
}

#[test]
fn print_some() {
    for e in [
        "port 1521",
        "host 10.0.0.5 and tcp",
        "tcp[tcpflags] & (tcp-syn|tcp-fin) != 0",
        "net fe80::/10",
    ] {
        println!(
            "== {e}\n{}",
            compile(e, eth(), &Options::default()).unwrap()
        );
    }
    let _ = (LD, W);
}
