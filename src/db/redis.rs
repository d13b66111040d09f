//! Redis sessions: TLS detection for `rediss://`, HELLO with AUTH (AUTH for servers before 6), SELECT,
//! PING, commands, LRANGE fetches.

use super::{Conn, DbError, DbUrl, Fetched, Scheme, Session, Setup, SslMode};
use crate::wire::resp::{self, Value};

const PROTO: &str = "Redis";

/// A ready Redis connection.
pub(crate) struct RedisSession {
    conn: Conn,
    fetch_key: Option<String>,
}

/// A reply as read: either a whole value, or the header of an array whose items are read one by one (so a
/// 100 000-item LRANGE is parsed in one pass).
enum Head {
    Array(usize),
    Value(Value),
}

fn head(b: &[u8]) -> Result<Option<(Head, usize)>, resp::RespError> {
    if let (Some(b'*'), Some(end)) = (b.first(), b.windows(2).position(|w| w == b"\r\n")) {
        let n: i64 = std::str::from_utf8(&b[1..end])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or(resp::RespError::Number)?;
        if n > resp::MAX_BULK {
            return Err(resp::RespError::Number);
        }
        if n >= 0 {
            return Ok(Some((Head::Array(n as usize), end + 2)));
        }
    }
    Ok(resp::parse(b)?.map(|(v, n)| (Head::Value(v), n)))
}

/// A TLS 1.2 ClientHello record, padded (RFC 7685 padding extension) to a record length of 0x0d0a bytes.
/// The record header then reads `16 03 01 0d 0a`: a plain Redis sees CR LF before any NUL byte, takes it for an
/// inline command and answers with an error at once instead of waiting for a line end.
fn tls_client_hello() -> Vec<u8> {
    const RECORD_LEN: usize = 0x0d0a;
    let mut hello = vec![0x03, 0x03];
    hello.extend_from_slice(b"roundtrip-tls-probe-random-bytes"); // 32 bytes of client random
    hello.push(0); // session id
    hello.extend_from_slice(&[0x00, 0x04, 0xc0, 0x2f, 0x00, 0x9c]); // two cipher suites
    hello.extend_from_slice(&[0x01, 0x00]); // null compression
    let pad = RECORD_LEN - 4 - hello.len() - 2 - 4;
    hello.extend_from_slice(&((pad + 4) as u16).to_be_bytes()); // extensions length
    hello.extend_from_slice(&[0x00, 0x15]); // padding extension
    hello.extend_from_slice(&(pad as u16).to_be_bytes());
    hello.resize(hello.len() + pad, 0);
    let mut hs = vec![0x01];
    hs.extend_from_slice(&(hello.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&hello);
    let mut rec = vec![0x16, 0x03, 0x01];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

impl RedisSession {
    fn read(&mut self, during: &str) -> Result<(Value, Fetched), DbError> {
        match self.conn.next(during, head)? {
            Head::Value(v) => {
                let f = match &v {
                    Value::Bulk(Some(b)) => Fetched {
                        rows: 1,
                        bytes: b.len() as u64,
                    },
                    Value::Array(Some(items)) => Fetched {
                        rows: items.len() as u64,
                        bytes: 0,
                    },
                    Value::Simple(_) | Value::Int(_) | Value::Bool(_) | Value::Other(_) => {
                        Fetched { rows: 1, bytes: 0 }
                    }
                    _ => Fetched::default(),
                };
                Ok((v, f))
            }
            Head::Array(n) => {
                let mut f = Fetched::default();
                for _ in 0..n {
                    let v = self.conn.next(during, resp::parse)?;
                    f.rows += 1;
                    if let Value::Bulk(Some(b)) = v {
                        f.bytes += b.len() as u64;
                    }
                }
                Ok((Value::Array(None), f))
            }
        }
    }

    fn call(&mut self, args: &[&str], during: &str) -> Result<(Value, Fetched), DbError> {
        self.conn.send(&resp::command(args), during)?;
        let (v, f) = self.read(during)?;
        if let Value::Error(e) = &v {
            return Err(self.error(during, e));
        }
        Ok((v, f))
    }

    fn error(&self, during: &str, e: &str) -> DbError {
        self.conn.server(during, e.to_string())
    }
}

fn version_of(v: &Value) -> Option<String> {
    let pairs: Vec<(&Value, &Value)> = match v {
        Value::Array(Some(items)) => items
            .chunks(2)
            .filter(|c| c.len() == 2)
            .map(|c| (&c[0], &c[1]))
            .collect(),
        Value::Map(m) => m.iter().map(|(k, v)| (k, v)).collect(),
        _ => return None,
    };
    let text = |v: &Value| match v {
        Value::Bulk(Some(b)) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::Simple(s) => Some(s.clone()),
        _ => None,
    };
    pairs
        .into_iter()
        .find(|(k, _)| text(k).as_deref() == Some("version"))
        .and_then(|(_, v)| text(v))
}

/// True when Redis answered AUTH saying it has no password to check: "ERR AUTH <password> called without any
/// password configured for the default user" (Redis 6 and later), "ERR Client sent AUTH, but no password is
/// set" (before 6).
fn no_password_set(e: &str) -> bool {
    e.contains("without any password configured") || e.contains("no password is set")
}

/// The note for a password given to a server that has none: the run goes on, the password was not needed.
fn no_password_note(addr: std::net::SocketAddr, user: &str) -> String {
    format!(
        "Redis at {addr} has no password set for user '{user}': the password given was not needed (drop it from the URL or REDISCLI_AUTH)"
    )
}

/// Detects TLS, says HELLO (authenticating), selects the database.
pub(crate) fn connect(
    mut conn: Conn,
    url: &DbUrl,
    ssl: SslMode,
) -> Result<(RedisSession, Setup), DbError> {
    let mut setup = Setup::default();
    if ssl.required() {
        // rediss:// speaks TLS from the first byte. Probe first, so that a plain server gets a clear error
        // instead of a failed handshake: the padded ClientHello makes a plain Redis answer at once.
        let during = "the TLS probe";
        let probe_start = std::time::Instant::now();
        conn.send(&tls_client_hello(), during)?;
        let first = conn.next(during, |b: &[u8]| -> Result<Option<(u8, usize)>, String> {
            Ok(b.first().map(|&c| (c, 1)))
        });
        match first {
            Ok(0x15 | 0x16) => {}
            Ok(_) | Err(DbError::Closed { .. }) => {
                return Err(DbError::TlsNotOffered {
                    proto: PROTO,
                    addr: conn.addr,
                    setting: "rediss://",
                });
            }
            Err(e) => return Err(e),
        }
        // A TLS server answered the probe: start over with a real handshake. The probe connection is not
        // part of what a client pays, so it is left out of the phases.
        let (addr, timeout) = (conn.addr, conn.timeout);
        drop(conn);
        let (c, probe_end) = (
            super::tcp_connect(addr, PROTO, timeout)?,
            std::time::Instant::now(),
        );
        conn = c.0;
        setup.uncounted = probe_start.elapsed().saturating_sub(probe_end.elapsed());
        setup.tls = Some(conn.start_tls(url.host_or_localhost(), ssl)?);
        setup.notes.extend(conn.tls_info.clone());
        setup.notes.push(
            "rediss://: each connection first probes for TLS on a separate connection, not counted in the phases"
                .into(),
        );
    }
    let mut s = RedisSession {
        conn,
        fetch_key: None,
    };
    let user = url.user.clone().unwrap_or_else(|| "default".into());
    let password = url.password.as_ref().map(|p| p.expose().to_string());
    let mut args: Vec<&str> = vec!["HELLO", "2"];
    if let Some(pw) = &password {
        args.extend_from_slice(&["AUTH", &user, pw]);
    }
    args.extend_from_slice(&["SETNAME", "roundtrip"]);
    let during = "HELLO";
    s.conn.send(&resp::command(&args), during)?;
    let v = s.conn.next(during, resp::parse)?;
    let auth_err = |s: &RedisSession, e: &str| DbError::Auth {
        proto: PROTO,
        addr: s.conn.addr,
        user: user.clone(),
        message: e.to_string(),
        hint: Scheme::Redis.password_hint(),
    };
    match &v {
        Value::Error(e) if e.starts_with("WRONGPASS") => return Err(auth_err(&s, e)),
        Value::Error(e) if e.starts_with("NOAUTH") => {
            return Err(DbError::NoPassword {
                proto: PROTO,
                addr: s.conn.addr,
                user,
                hint: Scheme::Redis.password_hint(),
            });
        }
        Value::Error(e) if e.contains("unknown command") || e.starts_with("NOPROTO") => {
            // Redis before 6: AUTH password.
            if let Some(pw) = &password {
                s.conn.send(&resp::command(&["AUTH", pw]), "AUTH")?;
                if let (Value::Error(e), _) = s.read("AUTH")? {
                    if !no_password_set(&e) {
                        return Err(auth_err(&s, &e));
                    }
                    // The connection works without one: say so and go on.
                    setup.notes.push(no_password_note(s.conn.addr, &user));
                }
            }
        }
        Value::Error(e) => return Err(s.error(during, e)),
        Value::Array(_) | Value::Map(_) => {
            setup.server_version = version_of(&v);
            // HELLO's AUTH succeeds with any password for a user that has none (`nopass`, the default user of a
            // server without requirepass); AUTH with the password alone says so. That round trip is not part
            // of what a client pays, so it is left out of the phases.
            if let Some(pw) = password.as_deref().filter(|_| user == "default") {
                let t0 = std::time::Instant::now();
                s.conn.send(&resp::command(&["AUTH", pw]), "AUTH")?;
                let answer = s.read("AUTH")?;
                setup.uncounted += t0.elapsed();
                if let (Value::Error(e), _) = answer
                    && no_password_set(&e)
                {
                    setup.notes.push(no_password_note(s.conn.addr, &user));
                }
            }
        }
        other => {
            return Err(s
                .conn
                .protocol(during, format!("unexpected answer {other:?}")));
        }
    }
    if let Some(db) = url.database.as_deref().filter(|d| *d != "0") {
        s.conn.send(&resp::command(&["SELECT", db]), "SELECT")?;
        if let (Value::Error(e), _) = s.read("SELECT")? {
            return Err(DbError::UnknownDatabase {
                proto: PROTO,
                addr: s.conn.addr,
                database: db.into(),
                message: e,
            });
        }
    }
    Ok((s, setup))
}

impl Session for RedisSession {
    fn ping(&mut self) -> Result<(), DbError> {
        let during = "the protocol ping (PING)";
        match self.call(&["PING"], during)?.0 {
            Value::Simple(p) if p == "PONG" => Ok(()),
            other => Err(self
                .conn
                .protocol(during, format!("PING answered {other:?}"))),
        }
    }
    fn query(&mut self, q: &str) -> Result<Fetched, DbError> {
        let args: Vec<&str> = q.split_whitespace().collect();
        self.call(&args, "the command").map(|(_, f)| f)
    }
    fn prepare_fetch(&mut self, rows: u64, row_bytes: u64) -> Result<String, DbError> {
        let key = format!(
            "roundtrip:db:fetch:{}:{}",
            std::process::id(),
            super::random_tag()
        );
        let during = "preparing the fetch (RPUSH)";
        self.call(&["DEL", &key], during)?;
        self.fetch_key = Some(key.clone());
        let value = "x".repeat(row_bytes as usize);
        let mut left = rows;
        while left > 0 {
            let n = left.min(1000);
            let mut args: Vec<&str> = vec!["RPUSH", &key];
            args.extend(std::iter::repeat_n(value.as_str(), n as usize));
            self.call(&args, during)?;
            left -= n;
        }
        Ok(format!("LRANGE {key} 0 -1"))
    }
    fn cleanup(&mut self) {
        if let Some(k) = self.fetch_key.take() {
            let _ = self.call(&["DEL", &k], "cleanup");
        }
    }
    fn close(&mut self) {
        let _ = self.conn.send(&resp::command(&["QUIT"]), "quit");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tls_probe_is_a_well_formed_client_hello() {
        let r = super::tls_client_hello();
        assert_eq!(&r[..5], &[0x16, 0x03, 0x01, 0x0d, 0x0a]);
        assert_eq!(r.len(), 5 + 0x0d0a);
        // Handshake length = record length - 4.
        assert_eq!(
            u32::from_be_bytes([0, r[6], r[7], r[8]]) as usize,
            0x0d0a - 4
        );
        assert!(!r[..5].contains(&0));
    }
}
