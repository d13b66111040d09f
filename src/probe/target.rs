//! Targets as users type them (`host`, `host:port`, `[v6]:port`, `v6`) and their resolution.
#![forbid(unsafe_code)]

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Which address family to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Family {
    /// Whatever the name resolves to first.
    #[default]
    Any,
    /// IPv4 only (`-4`).
    V4,
    /// IPv6 only (`-6`).
    V6,
}

/// A host and port as given by the user, not yet resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Host name or literal address, without brackets.
    pub host: String,
    /// Port.
    pub port: u16,
}

/// A target that could not be understood or resolved.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TargetError {
    /// The text is not HOST, HOST:PORT or \[V6\]:PORT.
    #[error("invalid target '{0}': expected HOST, HOST:PORT or [IPv6]:PORT")]
    Syntax(String),
    /// The port is not a number from 1 to 65535.
    #[error("invalid port in '{0}': expected a number from 1 to 65535")]
    Port(String),
    /// Name resolution failed.
    #[error("cannot resolve '{host}': {detail} (check the name, or give an IP address)")]
    Resolve {
        /// The name.
        host: String,
        /// The resolver's message.
        detail: String,
    },
    /// The name has no address of the requested family.
    #[error("'{host}' has no {family} address (try without -4/-6)")]
    NoAddress {
        /// The name.
        host: String,
        /// "IPv4" or "IPv6".
        family: &'static str,
    },
}

impl Target {
    /// Parses `host`, `host:port`, `[v6]:port` or a bare IPv6 literal; `default_port` fills a missing port.
    pub fn parse(text: &str, default_port: u16) -> Result<Target, TargetError> {
        let t = text.trim();
        if t.is_empty() {
            return Err(TargetError::Syntax(text.to_string()));
        }
        let port_of = |p: &str| -> Result<u16, TargetError> {
            match p.parse::<u16>() {
                Ok(0) | Err(_) => Err(TargetError::Port(text.to_string())),
                Ok(n) => Ok(n),
            }
        };
        if let Some(rest) = t.strip_prefix('[') {
            let (host, after) = rest
                .split_once(']')
                .ok_or_else(|| TargetError::Syntax(text.to_string()))?;
            let port = match after {
                "" => default_port,
                p => port_of(
                    p.strip_prefix(':')
                        .ok_or_else(|| TargetError::Syntax(text.to_string()))?,
                )?,
            };
            if host.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(TargetError::Syntax(text.to_string()));
            }
            return Ok(Target {
                host: host.to_string(),
                port,
            });
        }
        if t.parse::<IpAddr>().is_ok() {
            return Ok(Target {
                host: t.to_string(),
                port: default_port,
            });
        }
        match t.rsplit_once(':') {
            Some((host, _)) if host.contains(':') => Err(TargetError::Syntax(text.to_string())),
            Some((host, port)) if !host.is_empty() => Ok(Target {
                host: host.to_string(),
                port: port_of(port)?,
            }),
            Some(_) => Err(TargetError::Syntax(text.to_string())),
            None => Ok(Target {
                host: t.to_string(),
                port: default_port,
            }),
        }
    }

    /// Resolves the target, keeping the first address of the requested family; returns it with the time
    /// the lookup took (zero for literal addresses).
    pub fn resolve(&self, family: Family) -> Result<(SocketAddr, Duration), TargetError> {
        let start = Instant::now();
        if let Ok(ip) = self.host.parse::<IpAddr>() {
            let ok = match family {
                Family::Any => true,
                Family::V4 => ip.is_ipv4(),
                Family::V6 => ip.is_ipv6(),
            };
            if !ok {
                return Err(TargetError::NoAddress {
                    host: self.host.clone(),
                    family: if family == Family::V4 { "IPv4" } else { "IPv6" },
                });
            }
            return Ok((SocketAddr::new(ip, self.port), Duration::ZERO));
        }
        let addrs =
            crate::resolve::lookup(&self.host, self.port).map_err(|e| TargetError::Resolve {
                host: self.host.clone(),
                detail: e.to_string(),
            })?;
        let elapsed = start.elapsed();
        let mut addrs: Vec<SocketAddr> = addrs;
        // Prefer IPv4 for Any, as most tools do, so "localhost" means 127.0.0.1.
        addrs.sort_by_key(|a| a.is_ipv6());
        addrs
            .into_iter()
            .find(|a| match family {
                Family::Any => true,
                Family::V4 => a.is_ipv4(),
                Family::V6 => a.is_ipv6(),
            })
            .map(|a| (a, elapsed))
            .ok_or(TargetError::NoAddress {
                host: self.host.clone(),
                family: match family {
                    Family::V6 => "IPv6",
                    _ => "IPv4",
                },
            })
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_forms() {
        let t = |s| Target::parse(s, 11111).unwrap();
        assert_eq!(
            t("db1"),
            Target {
                host: "db1".into(),
                port: 11111
            }
        );
        assert_eq!(
            t("db1:5432"),
            Target {
                host: "db1".into(),
                port: 5432
            }
        );
        assert_eq!(
            t("::1"),
            Target {
                host: "::1".into(),
                port: 11111
            }
        );
        assert_eq!(
            t("[::1]:80"),
            Target {
                host: "::1".into(),
                port: 80
            }
        );
        assert_eq!(
            t("[::1]"),
            Target {
                host: "::1".into(),
                port: 11111
            }
        );
        assert!(Target::parse("db1:0", 1).is_err());
        assert!(Target::parse("db1:99999", 1).is_err());
        assert!(Target::parse("db1:x", 1).is_err());
        assert!(Target::parse("", 1).is_err());
        assert!(Target::parse("[zz]:1", 1).is_err());
        assert!(Target::parse(":80", 1).is_err());
    }

    #[test]
    fn literal_addresses_resolve_without_dns() {
        let (a, d) = Target::parse("127.0.0.1:9", 1)
            .unwrap()
            .resolve(Family::Any)
            .unwrap();
        assert_eq!(a, "127.0.0.1:9".parse().unwrap());
        assert_eq!(d, Duration::ZERO);
        assert!(
            Target::parse("127.0.0.1", 1)
                .unwrap()
                .resolve(Family::V6)
                .is_err()
        );
    }
}
