//! The expression tree a filter parses into ([`Node`]), with its qualifiers and arithmetic; what code
//! generation reads.

/// Direction qualifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// `src`.
    Src,
    /// `dst`.
    Dst,
    /// No qualifier or `src or dst`: either end.
    Either,
    /// `src and dst`: both ends.
    Both,
}

/// Protocol qualifier of `host`/`net`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostProto {
    /// None given: IPv4 addresses match IP, ARP and RARP; IPv6 addresses IPv6.
    Any,
    /// `ip`.
    Ip,
    /// `ip6`.
    Ip6,
    /// `arp`.
    Arp,
    /// `rarp`.
    Rarp,
}

/// Transport of `port`/`portrange`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortProto {
    /// None given: TCP, UDP and SCTP.
    Any,
    /// `tcp`.
    Tcp,
    /// `udp`.
    Udp,
    /// `sctp`.
    Sctp,
}

/// A protocol named alone (`tcp`, `ip6`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// `ip`.
    Ip,
    /// `ip6`.
    Ip6,
    /// `arp`.
    Arp,
    /// `rarp`.
    Rarp,
    /// `tcp` (IPv4 or IPv6).
    Tcp,
    /// `udp`.
    Udp,
    /// `sctp`.
    Sctp,
    /// `icmp` (IPv4 only, as libpcap).
    Icmp,
    /// `icmp6`.
    Icmp6,
}

/// An address with a mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetAddr {
    /// IPv4 network (address, mask).
    V4(u32, u32),
    /// IPv6 network (address, prefix length).
    V6(u128, u8),
}

/// Where a `proto[offset:size]` load counts its offset from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadBase {
    /// `ether[]` / `link[]`: the first byte of the packet (link targets only).
    Link,
    /// `ip[]`: the IPv4 header.
    Ip,
    /// `ip6[]`: the IPv6 header.
    Ip6,
    /// `tcp[]`: the TCP header of an unfragmented (or first-fragment) IPv4 packet.
    Tcp,
    /// `udp[]`.
    Udp,
    /// `icmp[]`.
    Icmp,
    /// `sctp[]`.
    Sctp,
    /// `icmp6[]`: the ICMPv6 header right after the IPv6 header.
    Icmp6,
}

/// Arithmetic operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Mod,
    /// `&`
    And,
    /// `|`
    Or,
    /// `^`
    Xor,
    /// `<<`
    Lsh,
    /// `>>`
    Rsh,
}

/// Comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelOp {
    /// `=` / `==`
    Eq,
    /// `!=`
    Ne,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<`
    Lt,
    /// `<=`
    Le,
}

/// An arithmetic expression (unsigned 32 bits, as in BPF).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arith {
    /// A constant.
    Num(u32),
    /// `len`: the packet's length on the wire.
    Len,
    /// `proto[off:size]`.
    Load(LoadBase, Box<Arith>, u8),
    /// A binary operation.
    Bin(ArOp, Box<Arith>, Box<Arith>),
    /// Unary minus.
    Neg(Box<Arith>),
}

/// The expression tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// Both.
    And(Box<Node>, Box<Node>),
    /// Either.
    Or(Box<Node>, Box<Node>),
    /// Negation.
    Not(Box<Node>),
    /// A protocol alone.
    Proto(Proto),
    /// `ip proto N` (version None: `proto N`, both).
    IpProto(Option<bool>, u8),
    /// `[proto] [dir] host ADDR` / `net NET`.
    Net(HostProto, Dir, NetAddr),
    /// `[tcp|udp|sctp] [dir] port N` / `portrange A-B` (lo <= hi).
    Port(PortProto, Dir, u16, u16),
    /// `a relop b` (also `less`, `greater`).
    Rel(RelOp, Arith, Arith),
    /// `vlan [ID]`: an 802.1Q/802.1ad tag (with that VLAN ID); what follows in the expression looks 4 bytes
    /// further, past the tag (libpcap's rule).
    Vlan(Option<u16>),
    /// `ether [src|dst|src or dst|src and dst] [host] MAC`: Ethernet addresses (Ethernet captures only).
    EtherHost(Dir, [u8; 6]),
    /// `ether broadcast` / `broadcast`: the destination is ff:ff:ff:ff:ff:ff (Ethernet captures only).
    EtherBroadcast,
    /// `ether multicast` / `multicast`: the destination's group bit is set (Ethernet captures only).
    EtherMulticast,
    /// `ether proto N`: the ethertype (N > 1500; `\ip`, `\ip6`, `\arp`, `\rarp`).
    EtherProto(u16),
    /// `ip broadcast`: an IPv4 destination whose host part (outside the netmask) is all ones or all zeros.
    IpBroadcast,
    /// `ip multicast` (false: 224.0.0.0/4) and `ip6 multicast` (true: ff00::/8).
    IpMulticast(bool),
}
