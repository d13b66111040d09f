//! From a client command's arguments to its link ([`LinkConfig`]): the server (`HOST[:PORT]`), `-u`, the
//! timeout and the [`ClientArgs`] group (`--no-extensions`, `--psk-file`), built the same way for ping, load,
//! sweep and throughput; each engine's configuration embeds it (`config.link = link`) and, once everything is
//! checked, [`connect_to`] resolves the server.

use super::common::ClientArgs;
use roundtrip::probe::link::{LinkConfig, Transport};
use roundtrip::probe::target::{Family, Target};
use roundtrip::wire::sockperf::DEFAULT_PORT;
use std::net::SocketAddr;
use std::time::Duration;

impl ClientArgs {
    /// The server named by `target` (default port 11111; a wrong one is refused, exit 2) and the link to it:
    /// UDP when `udp`, the key of `--psk-file`, the hello unless `--no-extensions`. The address is loopback
    /// with the server's port until the name is resolved (after every check: [`Target::resolve`]).
    pub fn link_config(
        &self,
        target: &str,
        udp: bool,
        timeout: Duration,
    ) -> anyhow::Result<(Target, LinkConfig)> {
        let target = Target::parse(target, DEFAULT_PORT).map_err(super::output::refused)?;
        let link = LinkConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], target.port)),
            transport: if udp { Transport::Udp } else { Transport::Tcp },
            psk: self.psk()?,
            extensions: self.extensions(),
            timeout,
        };
        Ok((target, link))
    }
}

/// After every check: resolves `target` in `family` and points `link` at the address found; the address.
pub fn connect_to(
    link: &mut LinkConfig,
    target: &Target,
    family: Family,
) -> anyhow::Result<SocketAddr> {
    let (addr, _) = target.resolve(family)?;
    link.addr = addr;
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> ClientArgs {
        ClientArgs {
            no_extensions: false,
            psk_file: None,
        }
    }

    #[test]
    fn link_config_takes_the_default_port_and_the_transport() {
        let (t, l) = client()
            .link_config("example.invalid", true, Duration::from_secs(3))
            .unwrap();
        assert_eq!(t.port, DEFAULT_PORT);
        assert_eq!(l.addr, SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)));
        assert_eq!(l.transport, Transport::Udp);
        assert!(l.extensions && l.psk.is_none());
        assert_eq!(l.timeout, Duration::from_secs(3));
        let (t, l) = client()
            .link_config("[::1]:7", false, Duration::from_secs(1))
            .unwrap();
        assert_eq!((t.port, l.transport), (7, Transport::Tcp));
    }

    #[test]
    fn a_wrong_server_is_refused() {
        let e = client()
            .link_config("host:notaport", false, Duration::from_secs(1))
            .unwrap_err();
        assert!(e.downcast_ref::<super::super::output::Refused>().is_some());
    }

    #[test]
    fn a_config_takes_the_whole_link() {
        let (_, mut link) = ClientArgs {
            no_extensions: true,
            psk_file: None,
        }
        .link_config("127.0.0.1:9", true, Duration::from_millis(700))
        .unwrap();
        link.addr = SocketAddr::from(([127, 0, 0, 2], 9));
        let mut c = roundtrip::probe::ping::PingConfig::new(SocketAddr::from(([127, 0, 0, 1], 1)));
        c.link = link;
        let got = &c.link;
        assert_eq!(got.addr, SocketAddr::from(([127, 0, 0, 2], 9)));
        assert_eq!(got.transport, Transport::Udp);
        assert!(!got.extensions);
        assert_eq!(got.timeout, Duration::from_millis(700));
    }
}
