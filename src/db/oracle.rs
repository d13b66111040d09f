//! Oracle listener ping: a TNS CONNECT carrying `(CONNECT_DATA=(COMMAND=ping))` on a fresh TCP connection,
//! answered by REFUSE with `(ERR=0)` when the listener is up, as `lsnrctl ping` / `tnsping` do. No
//! credentials are involved and no database session is opened.

use super::run::connect_recorded;
use super::{DbConfig, DbError, DbResult, Fetched, Observer, Op, record};
use crate::probe::target::Target;
use crate::wire::tns::{self, PacketType};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const PROTO: &str = "Oracle listener";

/// Sends one TNS ping on an open connection and returns the listener's REFUSE data.
fn tns_ping(conn: &mut super::Conn) -> Result<tns::Refuse, DbError> {
    let during = "the TNS ping";
    let packet = tns::connect(tns::PING_CONNECT_DATA);
    conn.send(&packet, during)?;
    for _ in 0..3 {
        let p = conn.next(during, tns::parse_packet)?;
        match p.kind {
            PacketType::REFUSE => {
                let r = tns::parse_refuse(&p.body).map_err(|e| conn.protocol(during, e))?;
                return match r.err() {
                    Some(0) => Ok(r),
                    Some(code) => {
                        Err(conn.server(during, format!("listener error ERR={code}: {}", r.data)))
                    }
                    None => {
                        Err(conn
                            .protocol(during, format!("REFUSE without (ERR=...): {:?}", r.data)))
                    }
                };
            }
            PacketType::RESEND => conn.send(&packet, during)?,
            other => {
                return Err(conn.protocol(
                    during,
                    format!(
                        "a TNS {} packet (type {}), expected REFUSE",
                        other.name(),
                        other.0
                    ),
                ));
            }
        }
    }
    Err(conn.protocol(during, "the listener kept asking to resend"))
}

/// `count` TNS pings, each on a fresh connection: TCP handshake and ping are both recorded.
pub(crate) fn run_pings(
    config: &DbConfig,
    _target: &Target,
    addr: SocketAddr,
    r: &mut DbResult,
    obs: &mut dyn Observer,
    start: Instant,
) -> Result<(), DbError> {
    for i in 0..config.count {
        if !config.next_round(i) {
            return Ok(());
        }
        let mut conn = connect_recorded(addr, PROTO, config.timeout, r, obs, i, start)?;
        let at = start.elapsed();
        let t0 = Instant::now();
        let refuse = tns_ping(&mut conn)?;
        let d: Duration = t0.elapsed();
        record(&mut r.ping, obs, Op::Ping, i, at, d, Fetched::default());
        r.connects_ok += 1;
        if r.server_version.is_none() {
            r.server_version = refuse.version().map(|v| format!("TNS listener {v}"));
        }
    }
    Ok(())
}
