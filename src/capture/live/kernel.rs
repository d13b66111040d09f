//! The filter a live capture's kernel runs: `--filter`'s parsed expression and `--host`, `--port`, `--flow`
//! as pcap-filter primitives, joined into one expression tree (no text is parsed again), compiled for the
//! interface's link type by [`super::LiveCapture::open`] and attached to the socket there.

use crate::capture::Filter;
use crate::capture::bpf::parse::{Dir, HostProto, NetAddr, Node, PortProto, Proto};
use crate::capture::bpf::{self, CompileError, Expr, Program};
use std::net::{IpAddr, SocketAddr};

/// The expression the kernel runs live: `--filter`'s, and `--host`, `--port`, `--flow` as pcap-filter
/// primitives (`ip host A`, `tcp port P or udp port P`, both directions of the address pair), so every filter is
/// applied before a packet reaches user space. `None` when there is no filter at all. Its text is what the
/// same expression would be written as (shown in the "capturing on" line).
pub fn kernel_expr(filter: &Filter) -> Option<Expr> {
    let user = filter.expr.as_ref().filter(|e| !e.is_empty());
    if filter.fields_empty() {
        return user.cloned();
    }
    let mut text: Vec<String> = Vec::new();
    let mut nodes: Vec<Node> = Vec::new();
    if let Some(e) = user {
        text.push(format!("({})", e.text()));
        nodes.extend(e.tree().cloned());
    }
    if let Some(h) = filter.host {
        text.push(host_text("", h));
        nodes.push(host(Dir::Either, h));
    }
    if let Some(p) = filter.port {
        text.push(format!("(tcp port {p} or udp port {p})"));
        nodes.push(or(
            Node::Port(PortProto::Tcp, Dir::Either, p, p),
            Node::Port(PortProto::Udp, Dir::Either, p, p),
        ));
    }
    if let Some((a, b)) = filter.flow {
        let one_way_text = |x: SocketAddr, y: SocketAddr| {
            format!(
                "({} and {} and (tcp or udp) and src port {} and dst port {})",
                host_text("src ", x.ip()),
                host_text("dst ", y.ip()),
                x.port(),
                y.port()
            )
        };
        let one_way = |x: SocketAddr, y: SocketAddr| {
            and_all(vec![
                host(Dir::Src, x.ip()),
                host(Dir::Dst, y.ip()),
                or(Node::Proto(Proto::Tcp), Node::Proto(Proto::Udp)),
                Node::Port(PortProto::Any, Dir::Src, x.port(), x.port()),
                Node::Port(PortProto::Any, Dir::Dst, y.port(), y.port()),
            ])
        };
        text.push(format!(
            "({} or {})",
            one_way_text(a, b),
            one_way_text(b, a)
        ));
        nodes.push(or(one_way(a, b), one_way(b, a)));
    }
    let root = (!nodes.is_empty()).then(|| and_all(nodes));
    Some(Expr::from_tree(text.join(" and "), root))
}

/// Compiles `expr` for a live socket: `cooked` (`any` and unusual interfaces) or the interface's link type;
/// `netmask` (host order) is what `ip broadcast` uses ([`super::netmask_of`]).
pub fn compile(
    expr: &Expr,
    link: Option<crate::capture::read::LinkType>,
    snaplen: u32,
    netmask: u32,
) -> Result<Program, CompileError> {
    let target = match link {
        Some(l) => bpf::Target::Link(l),
        None => bpf::Target::Cooked,
    };
    let opts = bpf::Options {
        drop_outgoing: false,
        snaplen,
    };
    expr.compile_with_netmask(target, &opts, netmask)
}

/// `filter` compiled for interface `iface` as [`super::LiveCapture::open`] compiles it (None: no filter), to
/// check a filter before anything starts.
pub fn check(iface: &str, filter: &Filter, snaplen: u32) -> Result<Option<Program>, FilterError> {
    let Some(e) = kernel_expr(filter) else {
        return Ok(None);
    };
    compile(&e, super::link_of(iface), snaplen, super::netmask_of(iface))
        .map(Some)
        .map_err(|source| FilterError {
            expr: e.excerpt(),
            source,
        })
}

/// A live filter that does not compile for the interface's link type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("filter '{expr}': {source}")]
pub struct FilterError {
    /// The kernel expression (`--filter` and `--host/--port/--flow`) as an error line quotes it: a short
    /// excerpt, control characters escaped ([`crate::capture::bpf::excerpt`]).
    pub expr: String,
    /// Why.
    pub source: CompileError,
}

fn host_text(dir: &str, a: IpAddr) -> String {
    let fam = if a.is_ipv4() { "ip" } else { "ip6" };
    format!("{fam} {dir}host {a}")
}

fn host(dir: Dir, a: IpAddr) -> Node {
    match a {
        IpAddr::V4(v4) => Node::Net(HostProto::Ip, dir, NetAddr::V4(u32::from(v4), u32::MAX)),
        IpAddr::V6(v6) => Node::Net(HostProto::Ip6, dir, NetAddr::V6(u128::from(v6), 128)),
    }
}

fn or(a: Node, b: Node) -> Node {
    Node::Or(Box::new(a), Box::new(b))
}

/// `a and b and c ...`, grouped as the parser groups a list (a balanced tree, the tests in the same order).
fn and_all(nodes: Vec<Node>) -> Node {
    crate::capture::bpf::parse::balanced(true, nodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::read::LinkType;

    /// The tree built for `--host/--port/--flow` is the tree the parser makes of the same text, so the kernel
    /// runs the program the text round trip used to give.
    #[test]
    fn built_tree_equals_the_parsed_text() {
        let exprs = [
            None,
            Some("tcp"),
            Some("vlan 100"),
            Some("port 80 or 443"),
            Some("host 10.0.0.1 and not 10.0.0.2"),
        ];
        let hosts: [Option<IpAddr>; 3] = [
            None,
            Some("10.1.2.3".parse().unwrap()),
            Some("fe80::1".parse().unwrap()),
        ];
        let flows: [Option<(SocketAddr, SocketAddr)>; 3] = [
            None,
            Some((
                "10.0.0.1:5432".parse().unwrap(),
                "10.0.0.2:40000".parse().unwrap(),
            )),
            Some((
                "[::1]:6379".parse().unwrap(),
                "127.0.0.1:1".parse().unwrap(),
            )),
        ];
        let mut n = 0;
        for e in exprs {
            for h in hosts {
                for p in [None, Some(5432u16)] {
                    for f in flows {
                        let filter = Filter {
                            host: h,
                            port: p,
                            flow: f,
                            expr: e.map(|t| Expr::parse(t).unwrap()),
                        };
                        let Some(built) = kernel_expr(&filter) else {
                            assert!(filter.is_empty());
                            continue;
                        };
                        let parsed = Expr::parse(built.text()).unwrap();
                        assert_eq!(built.tree(), parsed.tree(), "{}", built.text());
                        for link in [Some(LinkType::ETHERNET), Some(LinkType::RAW), None] {
                            assert_eq!(
                                compile(&built, link, 100, 0).map(|p| p.insns().to_vec()),
                                compile(&parsed, link, 100, 0).map(|p| p.insns().to_vec()),
                                "{}",
                                built.text()
                            );
                        }
                        n += 1;
                    }
                }
            }
        }
        assert!(n > 80);
    }
}
