//! MySQL / MariaDB sessions: v10 handshake, mysql_native_password and caching_sha2_password (fast path),
//! auth switch, COM_PING, COM_QUERY with text result sets.

use super::{Conn, DbError, DbUrl, Fetched, Scheme, Session, Setup, SslMode};
use crate::wire::mysql::{self, Packet, Reply, caps};

const PROTO: &str = "MySQL";

/// An authenticated MySQL/MariaDB connection, ready for commands.
pub(crate) struct MySession {
    conn: Conn,
}

fn packet(conn: &mut Conn, during: &str) -> Result<Packet, DbError> {
    conn.next(
        during,
        |b: &[u8]| -> Result<Option<(Packet, usize)>, String> { Ok(mysql::parse_packet(b)) },
    )
}

fn reply(conn: &Conn, p: &Packet, in_auth: bool, during: &str) -> Result<Reply, DbError> {
    mysql::parse_reply(&p.payload, in_auth).map_err(|e| conn.protocol(during, e))
}

fn auth_error(conn: &Conn, url: &DbUrl, code: u16, state: &str, message: &str) -> DbError {
    match code {
        1045 | 1698 => DbError::Auth {
            proto: PROTO,
            addr: conn.addr,
            user: url.user().to_string(),
            message: format!("{message} (error {code}, {state})"),
            hint: Scheme::Mysql.password_hint(),
        },
        1049 => DbError::UnknownDatabase {
            proto: PROTO,
            addr: conn.addr,
            database: url.database.clone().unwrap_or_default(),
            message: format!("{message} (error {code})"),
        },
        _ => conn.server(
            "authentication",
            format!("{message} (error {code}, {state})"),
        ),
    }
}

fn scramble_for(plugin: &str, password: &str, scramble: &[u8]) -> Option<Vec<u8>> {
    match plugin {
        "mysql_native_password" | "" => Some(mysql::native_password(password, scramble)),
        "caching_sha2_password" => Some(mysql::caching_sha2_password(password, scramble)),
        _ => None,
    }
}

/// Reads the handshake, detects TLS, logs in.
pub(crate) fn connect(
    mut conn: Conn,
    url: &DbUrl,
    ssl: SslMode,
) -> Result<(MySession, Setup), DbError> {
    let mut setup = Setup::default();
    // A greeting is small: a peer announcing more is not a MySQL server (an HTTP answer reads as 5 MiB).
    let first = conn.next(
        "the server greeting",
        |b: &[u8]| -> Result<Option<(Packet, usize)>, String> {
            if b.len() >= 4
                && (usize::from(b[0]) | usize::from(b[1]) << 8 | usize::from(b[2]) << 16)
                    > 16 * 1024
            {
                return Err(format!(
                    "{:?}... is not a MySQL server greeting",
                    String::from_utf8_lossy(&b[..b.len().min(16)])
                ));
            }
            Ok(mysql::parse_packet(b))
        },
    )?;
    if first.payload.first() == Some(&0xff) {
        // Refused before the handshake (too many connections, host blocked).
        if let Reply::Err { code, message, .. } =
            reply(&conn, &first, false, "the server greeting")?
        {
            return Err(conn.server("the server greeting", format!("{message} (error {code})")));
        }
    }
    let hs = mysql::parse_handshake(&first.payload)
        .map_err(|e| conn.protocol("the server greeting", e))?;
    if hs.capabilities & caps::PROTOCOL_41 == 0 {
        return Err(conn.protocol(
            "the server greeting",
            "the server does not speak protocol 4.1",
        ));
    }
    setup.server_version = Some(hs.server_version.clone());
    let offers_tls = hs.capabilities & caps::SSL != 0;
    let mut seq = first.seq.wrapping_add(1);
    let mut client_caps = caps::LONG_PASSWORD
        | caps::LONG_FLAG
        | caps::PROTOCOL_41
        | caps::TRANSACTIONS
        | caps::SECURE_CONNECTION
        | caps::MULTI_RESULTS
        | caps::PLUGIN_AUTH;
    if url.database.is_some() {
        client_caps |= caps::CONNECT_WITH_DB;
    }
    client_caps &= hs.capabilities | caps::PLUGIN_AUTH;
    match (ssl, offers_tls) {
        (SslMode::Require | SslMode::Verify, false) => {
            return Err(DbError::TlsNotOffered {
                proto: PROTO,
                addr: conn.addr,
                setting: if ssl == SslMode::Verify {
                    "ssl-mode=VERIFY_IDENTITY"
                } else {
                    "ssl-mode=REQUIRED"
                },
            });
        }
        (SslMode::Prefer, false) => setup
            .notes
            .push("the server does not offer TLS: plain TCP".into()),
        (SslMode::Disable, _) => {}
        (_, true) => {
            // SSLRequest: the first 32 bytes of a HandshakeResponse41 with CLIENT_SSL, then the TLS handshake.
            client_caps |= caps::SSL;
            let t0 = std::time::Instant::now();
            conn.send(
                &mysql::frame(seq, &mysql::ssl_request(client_caps)),
                "the SSLRequest",
            )?;
            seq = seq.wrapping_add(1);
            conn.start_tls(url.host_or_localhost(), ssl)?;
            setup.tls = Some(t0.elapsed());
            setup.notes.extend(conn.tls_info.clone());
        }
    }
    let password = url.password.as_ref().map(|p| p.expose()).unwrap_or("");
    let mut plugin = hs.auth_plugin.clone();
    let auth = match scramble_for(&plugin, password, &hs.scramble) {
        Some(a) => a,
        None => {
            // Unknown default plugin: answer as mysql_native_password; the server will switch if it must.
            plugin = "mysql_native_password".into();
            mysql::native_password(password, &hs.scramble)
        }
    };
    let resp = mysql::handshake_response(
        client_caps,
        url.user(),
        &auth,
        url.database.as_deref(),
        &plugin,
    );
    conn.send(&mysql::frame(seq, &resp), "authentication")?;
    let mut scramble = hs.scramble.clone();
    loop {
        let p = packet(&mut conn, "authentication")?;
        match reply(&conn, &p, true, "authentication")? {
            Reply::Ok => break,
            Reply::Err {
                code,
                state,
                message,
            } => return Err(auth_error(&conn, url, code, &state, &message)),
            Reply::AuthSwitch { plugin: new, data } => {
                scramble = data;
                plugin = new;
                let Some(a) = scramble_for(&plugin, password, &scramble) else {
                    return Err(DbError::Unsupported {
                        proto: PROTO,
                        addr: conn.addr,
                        what: format!("the authentication plugin {plugin}"),
                        hint: "use mysql_native_password or caching_sha2_password for this user",
                    });
                };
                conn.send(&mysql::frame(p.seq.wrapping_add(1), &a), "authentication")?;
            }
            Reply::AuthMore(data) if plugin == "caching_sha2_password" => match data.first() {
                Some(3) => {} // fast authentication succeeded; OK follows
                Some(4) => {
                    return Err(DbError::Unsupported {
                        proto: PROTO,
                        addr: conn.addr,
                        what: "caching_sha2_password full authentication (TLS or RSA key exchange)"
                            .into(),
                        hint: "log in once with the mysql client so the server caches the password, then retry",
                    });
                }
                _ => {
                    return Err(
                        conn.protocol("authentication", "unknown caching_sha2_password state")
                    );
                }
            },
            other => return Err(conn.protocol("authentication", format!("unexpected {other:?}"))),
        }
    }
    let _ = scramble;
    Ok((MySession { conn }, setup))
}

impl MySession {
    fn run(&mut self, sql: &str, during: &str) -> Result<Fetched, DbError> {
        self.conn
            .send(&mysql::command(mysql::COM_QUERY, sql.as_bytes()), during)?;
        let mut f = Fetched::default();
        loop {
            let p = packet(&mut self.conn, during)?;
            let columns = match reply(&self.conn, &p, false, during)? {
                Reply::Ok if mysql::more_results(&p.payload) => continue,
                Reply::Ok => return Ok(f),
                Reply::Err {
                    code,
                    state,
                    message,
                } => return Err(self.err(during, code, &state, &message)),
                Reply::ResultSet(n) => n,
                other => return Err(self.conn.protocol(during, format!("unexpected {other:?}"))),
            };
            // Column definitions, then EOF.
            for _ in 0..columns {
                packet(&mut self.conn, during)?;
            }
            let eof = packet(&mut self.conn, during)?;
            if reply(&self.conn, &eof, false, during)? != Reply::Eof {
                return Err(self
                    .conn
                    .protocol(during, "no EOF after the column definitions"));
            }
            let more = loop {
                let p = packet(&mut self.conn, during)?;
                match p.payload.first() {
                    Some(0xfe) if p.payload.len() < 9 => break mysql::more_results(&p.payload),
                    Some(0xff) => {
                        if let Reply::Err {
                            code,
                            state,
                            message,
                        } = reply(&self.conn, &p, false, during)?
                        {
                            return Err(self.err(during, code, &state, &message));
                        }
                    }
                    _ => {
                        f.rows += 1;
                        f.bytes += mysql::row_value_bytes(&p.payload)
                            .map_err(|e| self.conn.protocol(during, e))?;
                    }
                }
            };
            if !more {
                return Ok(f);
            }
        }
    }

    fn err(&self, during: &str, code: u16, state: &str, message: &str) -> DbError {
        match code {
            // ER_CONNECTION_KILLED, ER_SERVER_SHUTDOWN, ER_QUERY_INTERRUPTED from a killed session.
            1927 | 1053 | 1317 => self
                .conn
                .closed(during, &format!("{message} (error {code})")),
            _ => self
                .conn
                .server(during, format!("{message} (error {code}, {state})")),
        }
    }
}

impl Session for MySession {
    fn ping(&mut self) -> Result<(), DbError> {
        let during = "the protocol ping (COM_PING)";
        self.conn
            .send(&mysql::command(mysql::COM_PING, &[]), during)?;
        let p = packet(&mut self.conn, during)?;
        match reply(&self.conn, &p, false, during)? {
            Reply::Ok => Ok(()),
            Reply::Err {
                code,
                state,
                message,
            } => Err(self.err(during, code, &state, &message)),
            other => Err(self.conn.protocol(during, format!("unexpected {other:?}"))),
        }
    }
    fn query(&mut self, q: &str) -> Result<Fetched, DbError> {
        self.run(q, "the query")
    }
    fn prepare_fetch(&mut self, rows: u64, row_bytes: u64) -> Result<String, DbError> {
        // MySQL 8 stops recursion at cte_max_recursion_depth (1000 by default): lift it for this session.
        // MariaDB has no such variable and answers with a harmless error.
        if rows > 1000 {
            let _ = self.run(
                &format!("SET SESSION cte_max_recursion_depth = {}", rows + 1),
                "preparing the fetch",
            );
        }
        Ok(format!(
            "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {rows}) SELECT REPEAT('x', {row_bytes}) FROM s"
        ))
    }
    fn close(&mut self) {
        let _ = self
            .conn
            .send(&mysql::command(mysql::COM_QUIT, &[]), "quit");
    }
}
