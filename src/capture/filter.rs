//! The capture filter of every analysis (`--host`, `--port`, `--flow`, `--filter`): [`Filter`], its parsing
//! and its match on a decoded packet.

use super::bpf;
use super::decode::Decoded;
use std::net::{IpAddr, SocketAddr};
use thiserror::Error;

/// A filter argument that could not be understood.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FilterError {
    /// `--host` is not an IP address.
    #[error(
        "--host '{0}' is not an IP address (give e.g. 10.0.0.1 or ::1; names are not resolved)"
    )]
    Host(String),
    /// `--flow` is not two endpoints.
    #[error(
        "--flow '{0}' is not two endpoints: write ADDR:PORT-ADDR:PORT, e.g. 10.0.0.1:40000-10.0.0.2:80 or [::1]:5201-[::1]:40000"
    )]
    Flow(String),
    /// `--flow` names endpoints no TCP/UDP conversation can have.
    #[error("--flow '{0}': {1} (write the two ends of one conversation, ADDR:PORT-ADDR:PORT)")]
    FlowEndpoints(String, &'static str),
}

/// Which packets to look at. All given conditions must hold; the empty filter takes everything.
///
/// Syntax (documented in `roundtrip capture --help`):
/// - `--host ADDR`: either address is ADDR.
/// - `--port N`: either TCP/UDP port is N.
/// - `--flow A:P-B:P` (or `A:P,B:P`): one TCP/UDP conversation, either direction; IPv6 as `[ADDR]:PORT`.
/// - `--filter EXPR`: a tcpdump expression ([`bpf`]), compiled to classic BPF for each link type of the file
///   and run on the raw packet bytes by [`Packets`] (open it with [`Packets::open_filtered`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Either address.
    pub host: Option<IpAddr>,
    /// Either port.
    pub port: Option<u16>,
    /// Both endpoints, in either order.
    pub flow: Option<(SocketAddr, SocketAddr)>,
    /// A tcpdump filter expression (`--filter`); applied by [`Packets::open_filtered`], not by
    /// [`matches`](Self::matches).
    pub expr: Option<bpf::Expr>,
}

impl Filter {
    /// True when no condition is set.
    pub fn is_empty(&self) -> bool {
        self.fields_empty() && self.expr.is_none()
    }

    /// True when `--host`, `--port` and `--flow` are all unset (the conditions [`matches`](Self::matches) checks).
    pub fn fields_empty(&self) -> bool {
        self.host.is_none() && self.port.is_none() && self.flow.is_none()
    }

    /// The expression's text, for the JSON documents (None without `--filter`).
    pub fn expr_text(&self) -> Option<&str> {
        self.expr.as_ref().map(|e| e.text())
    }

    /// Parses `--host`.
    pub fn parse_host(s: &str) -> Result<IpAddr, FilterError> {
        s.trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| FilterError::Host(s.to_string()))
    }

    /// Parses `--flow`.
    pub fn parse_flow(s: &str) -> Result<(SocketAddr, SocketAddr), FilterError> {
        let err = || FilterError::Flow(s.to_string());
        let (a, b) = s
            .split_once(',')
            .or_else(|| s.split_once('-'))
            .or_else(|| s.split_once(' '))
            .ok_or_else(err)?;
        let a: SocketAddr = a.trim().parse().map_err(|_| err())?;
        let b: SocketAddr = b.trim().parse().map_err(|_| err())?;
        if a.port() == 0 || b.port() == 0 {
            return Err(FilterError::FlowEndpoints(
                s.to_string(),
                "port 0 is never on the wire",
            ));
        }
        if a == b {
            return Err(FilterError::FlowEndpoints(
                s.to_string(),
                "it names the same endpoint twice",
            ));
        }
        Ok((a, b))
    }

    /// True when the packet passes `--host/--port/--flow`. Non-IP packets pass only when none is set. The
    /// expression (`--filter`) is checked on the raw bytes by [`Packets::open_filtered`].
    #[inline]
    pub fn matches(&self, d: Option<&Decoded<'_>>) -> bool {
        if self.fields_empty() {
            return true;
        }
        let Some(d) = d else { return false };
        if let Some(h) = self.host
            && d.src != h
            && d.dst != h
        {
            return false;
        }
        let ports = d.ports();
        if let Some(p) = self.port {
            match ports {
                Some((s, t)) if s == p || t == p => {}
                _ => return false,
            }
        }
        if let Some((a, b)) = self.flow {
            let Some((sp, dp)) = ports else { return false };
            let src = SocketAddr::new(d.src, sp);
            let dst = SocketAddr::new(d.dst, dp);
            if !((src == a && dst == b) || (src == b && dst == a)) {
                return false;
            }
        }
        true
    }
}
