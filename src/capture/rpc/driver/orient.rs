//! Which end of a connection is the client: the handshake, else the protocol's own framing, else the ports.

use super::{L4, ProtoChoice, Segment, flags};
use crate::capture::rpc::{Carrier, Dir, Proto, detect};
use serde::Serialize;
use std::net::SocketAddr;

/// How a connection's client and server were told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Oriented {
    /// The handshake was seen: the SYN's sender is the client.
    Handshake,
    /// Caught mid-stream: the first payload is, by the protocol's own framing, a request or a response
    /// ([`detect::direction`]).
    Protocol,
    /// Caught mid-stream and the payload does not say: the side on a service port (the protocol's, else any
    /// known one) is the server, else the lower port.
    Port,
}

impl Oriented {
    /// Every way, in the order of [`Oriented::name`]'s indices.
    pub const ALL: [Oriented; 3] = [Oriented::Handshake, Oriented::Protocol, Oriented::Port];

    /// The name used in metrics and reports.
    pub fn name(self) -> &'static str {
        match self {
            Oriented::Handshake => "handshake",
            Oriented::Protocol => "protocol",
            Oriented::Port => "port",
        }
    }
}

/// The two ends of a connection, and how they were told apart ([`orient`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Orientation {
    /// The side that sends requests.
    pub client: SocketAddr,
    /// The side that answers.
    pub server: SocketAddr,
    /// How.
    pub how: Oriented,
    /// The protocol whose framing told ([`Oriented::Protocol`]).
    pub proto: Option<Proto>,
}

/// The client and the server of a connection first seen in segment `s`, and how they were told apart: a SYN's
/// sender is the client (a SYN+ACK's the server); else the protocol's own direction of the payload (the
/// protocol forced by `choice`, else those of the two ports, else any); else by port.
/// [`Driver`](super::Driver) orients its connections so; a sink that tracks connections itself calls it to
/// agree with the decoders.
pub fn orient(s: &Segment<'_>, choice: ProtoChoice) -> Orientation {
    let udp = matches!(s.l4, L4::Udp);
    let carrier = if udp { Carrier::Udp } else { Carrier::Tcp };
    let o = |client_is_src: bool, how: Oriented, proto: Option<Proto>| {
        let (client, server) = if client_is_src {
            (s.src(), s.dst())
        } else {
            (s.dst(), s.src())
        };
        Orientation {
            client,
            server,
            how,
            proto,
        }
    };
    if let L4::Tcp { flags: f, .. } = s.l4
        && f & flags::SYN != 0
    {
        return o(f & flags::ACK == 0, Oriented::Handshake, None);
    }
    let (sp, dp) = (s.src_port, s.dst_port);
    if !s.payload.is_empty() {
        let (by_d, by_s) = (detect::by_port(dp, carrier), detect::by_port(sp, carrier));
        let mut h = [Proto::Generic; 2];
        let n = match (choice, by_d, by_s) {
            (ProtoChoice::Force(p), _, _) => {
                h[0] = p;
                1
            }
            (ProtoChoice::Auto, Some(a), Some(b)) if a != b => {
                h = [a, b];
                2
            }
            (ProtoChoice::Auto, Some(a), _) | (ProtoChoice::Auto, None, Some(a)) => {
                h[0] = a;
                1
            }
            (ProtoChoice::Auto, None, None) => 0,
        };
        if let Some((d, p)) = detect::direction(s.payload, carrier, &h[..n]) {
            return o(d == Dir::Request, Oriented::Protocol, Some(p));
        }
    }
    let src_is_client = match (detect::by_port(dp, carrier), detect::by_port(sp, carrier)) {
        (Some(_), None) => true,
        (None, Some(_)) => false,
        _ => {
            if detect::is_service_port(dp) != detect::is_service_port(sp) {
                detect::is_service_port(dp)
            } else {
                sp >= dp
            }
        }
    };
    o(src_is_client, Oriented::Port, None)
}
