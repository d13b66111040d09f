//! From a client command's arguments to its link ([`LinkConfig`]): the server (`HOST[:PORT]`), `-u`, the
//! timeout and the [`ClientArgs`] group (`--no-extensions`, `--psk-file`), built the same way for ping, load,
//! sweep and throughput; [`UseLink`] copies the link into each engine's configuration and, once everything is
//! checked, resolves the server.

use super::common::ClientArgs;
use roundtrip::probe::link::{LinkConfig, Transport};
use roundtrip::probe::load::LoadConfig;
use roundtrip::probe::ping::PingConfig;
use roundtrip::probe::target::{Family, Target};
use roundtrip::probe::throughput::ThroughputConfig;
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

/// An engine configuration that holds a link's settings.
pub trait UseLink {
    /// Takes the address, transport, key, extensions and timeout of `link`.
    fn use_link(&mut self, link: LinkConfig);

    /// After every check: resolves `target` in `family`, points the configuration at the address found and
    /// lets Ctrl-C stop the run; the address.
    fn connect_to(&mut self, target: &Target, family: Family) -> anyhow::Result<SocketAddr>;
}

macro_rules! use_link {
    ($($t:ty),*) => {$(
        impl UseLink for $t {
            fn use_link(&mut self, link: LinkConfig) {
                self.addr = link.addr;
                self.transport = link.transport;
                self.psk = link.psk;
                self.extensions = link.extensions;
                self.timeout = link.timeout;
            }

            fn connect_to(&mut self, target: &Target, family: Family) -> anyhow::Result<SocketAddr> {
                let (addr, _) = target.resolve(family)?;
                self.addr = addr;
                self.cancel = super::common::cancel_on_ctrl_c();
                Ok(addr)
            }
        }
    )*};
}

use_link!(PingConfig, LoadConfig, ThroughputConfig);

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
    fn use_link_copies_every_setting() {
        let (_, mut link) = ClientArgs {
            no_extensions: true,
            psk_file: None,
        }
        .link_config("127.0.0.1:9", true, Duration::from_millis(700))
        .unwrap();
        link.addr = SocketAddr::from(([127, 0, 0, 2], 9));
        let mut c = PingConfig::new(SocketAddr::from(([127, 0, 0, 1], 1)));
        c.use_link(link);
        let got = c.link();
        assert_eq!(got.addr, SocketAddr::from(([127, 0, 0, 2], 9)));
        assert_eq!(got.transport, Transport::Udp);
        assert!(!got.extensions);
        assert_eq!(got.timeout, Duration::from_millis(700));
    }
}
