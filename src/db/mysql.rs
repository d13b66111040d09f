//! MySQL / MariaDB sessions: v10 handshake; mysql_native_password, caching_sha2_password (fast and full
//! authentication), sha256_password (RSA-OAEP without TLS, the password inside TLS) and mysql_clear_password
//! (TLS only); auth switch; COM_PING, COM_QUERY with text result sets.

use super::{Conn, DbError, DbUrl, Fetched, Scheme, Session, Setup, SslMode};
use crate::wire::mysql::{self, Packet, Reply, ServerPublicKey, caps};
use std::path::Path;

const PROTO: &str = "MySQL";

/// An authenticated MySQL/MariaDB connection, ready for commands.
pub(crate) struct MySession {
    conn: Conn,
    /// The connection (thread) id from the handshake: what `KILL QUERY` names.
    id: u32,
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

/// The error for an ERR packet during authentication. `plain_but_offered`: the client turned down the TLS
/// the server offered (ssl-mode=DISABLED), which MariaDB's require_secure_transport and accounts with
/// REQUIRE SSL refuse with the same "Access denied" as a wrong password.
fn auth_error(
    conn: &Conn,
    url: &DbUrl,
    plain_but_offered: bool,
    (code, state, message): (u16, &str, &str),
) -> DbError {
    match code {
        1045 | 1698 => DbError::Auth {
            proto: PROTO,
            addr: conn.addr,
            user: url.user().to_string(),
            message: if plain_but_offered {
                format!(
                    "{message} (error {code}, {state}); this connection is not encrypted (ssl-mode=DISABLED) though the server offers TLS, and a server with require_secure_transport or an account with REQUIRE SSL is refused the same way: try ssl-mode=REQUIRED"
                )
            } else {
                format!("{message} (error {code}, {state})")
            },
            hint: Scheme::Mysql.password_hint(),
        },
        1049 => DbError::UnknownDatabase {
            proto: PROTO,
            addr: conn.addr,
            database: url.database.clone().unwrap_or_default(),
            message: format!("{message} (error {code})"),
        },
        // ER_SECURE_TRANSPORT_REQUIRED (MySQL 3159; MariaDB words it the same way).
        _ if code == 3159 || message.contains("insecure transport") => DbError::TlsRequired {
            proto: PROTO,
            addr: conn.addr,
            message: format!("{message} (error {code}, {state})"),
        },
        // ER_NOT_SUPPORTED_AUTH_MODE: the user's plugin is one the server will not switch this client to.
        1251 => DbError::Unsupported {
            proto: PROTO,
            addr: conn.addr,
            what: format!("an authentication method it did not name: {message} (error {code})"),
            hint: "roundtrip speaks mysql_native_password, caching_sha2_password, sha256_password and mysql_clear_password (over TLS)",
        },
        _ => conn.server(
            "authentication",
            format!("{message} (error {code}, {state})"),
        ),
    }
}

/// Reads a PEM RSA public key a user gave (`server-public-key-path`).
pub(crate) fn load_public_key(path: &Path) -> Result<ServerPublicKey, DbError> {
    let bytes = std::fs::read(path).map_err(|e| {
        DbError::Config(format!(
            "server-public-key-path: cannot read {}: {e}",
            path.display()
        ))
    })?;
    ServerPublicKey::from_pem(&bytes)
        .map_err(|e| DbError::Config(format!("server-public-key-path {}: {e}", path.display())))
}

/// The client side of MySQL's pluggable authentication, one plugin at a time.
struct Auth<'a> {
    password: &'a str,
    /// The connection is encrypted: passwords may travel in clear inside it.
    tls: bool,
    /// The server's key as the user pinned it.
    pinned: Option<ServerPublicKey>,
    /// The server may be asked for its key.
    may_ask_key: bool,
    plugin: String,
    scramble: Vec<u8>,
    /// The client asked for the server's public key and the next AuthMoreData carries it.
    awaiting_key: bool,
    /// How the password went, for the notes.
    how: String,
}

impl Auth<'_> {
    fn supported(&self) -> bool {
        matches!(
            self.plugin.as_str(),
            "mysql_native_password"
                | "caching_sha2_password"
                | "sha256_password"
                | "mysql_clear_password"
        )
    }

    fn rsa_error(&self, conn: &Conn, detail: String) -> DbError {
        DbError::RsaKey {
            proto: PROTO,
            addr: conn.addr,
            plugin: self.plugin.clone(),
            detail,
        }
    }

    /// The password for a full authentication: in clear inside TLS, else RSA-encrypted with the pinned
    /// key, else `None` after asking the server for its key (`request` is the plugin's request byte).
    fn full_password(&mut self, conn: &Conn, request: u8) -> Result<Vec<u8>, DbError> {
        if self.tls {
            self.how = format!("{}: password sent inside TLS", self.plugin);
            return Ok(mysql::cleartext_password(self.password));
        }
        if let Some(key) = &self.pinned {
            let ct = key
                .encrypt_password(self.password, &self.scramble)
                .map_err(|e| self.rsa_error(conn, e.to_string()))?;
            self.how = format!(
                "{}: password encrypted (RSA-OAEP) with the pinned {}-bit server key",
                self.plugin,
                key.bits()
            );
            return Ok(ct);
        }
        if !self.may_ask_key {
            return Err(self.rsa_error(
                conn,
                "get-server-public-key=false forbids asking the server for it".into(),
            ));
        }
        self.awaiting_key = true;
        Ok(vec![request])
    }

    /// The plugin's first answer to a scramble (in the handshake response or after an auth switch).
    fn first_response(&mut self, conn: &Conn) -> Result<Vec<u8>, DbError> {
        let pw = self.password;
        Ok(match self.plugin.as_str() {
            "caching_sha2_password" => mysql::caching_sha2_password(pw, &self.scramble),
            // An empty password is a single NUL and is never encrypted, as the MySQL client does.
            "sha256_password" if pw.is_empty() => vec![0],
            "sha256_password" => self.full_password(conn, mysql::SHA256_REQUEST_PUBLIC_KEY)?,
            "mysql_clear_password" if self.tls => {
                self.how = "mysql_clear_password: password sent inside TLS".into();
                mysql::cleartext_password(pw)
            }
            "mysql_clear_password" => {
                return Err(DbError::TlsRequired {
                    proto: PROTO,
                    addr: conn.addr,
                    message: "its mysql_clear_password plugin would get the password in clear text, which roundtrip only sends inside TLS".into(),
                });
            }
            _ => mysql::native_password(pw, &self.scramble),
        })
    }

    /// The answer to an AuthMoreData packet (`None`: nothing to send, the server speaks next).
    fn more_data(&mut self, conn: &Conn, data: &[u8]) -> Result<Option<Vec<u8>>, DbError> {
        if self.awaiting_key {
            self.awaiting_key = false;
            let key =
                ServerPublicKey::from_pem(data).map_err(|e| self.rsa_error(conn, e.to_string()))?;
            let ct = key
                .encrypt_password(self.password, &self.scramble)
                .map_err(|e| self.rsa_error(conn, e.to_string()))?;
            self.how = format!(
                "{}: full authentication, password encrypted (RSA-OAEP) with the {}-bit key the server sent (not authenticated: pin it with server-public-key-path=FILE, or use TLS)",
                self.plugin,
                key.bits()
            );
            return Ok(Some(ct));
        }
        match (self.plugin.as_str(), data.first()) {
            ("caching_sha2_password", Some(&mysql::FAST_AUTH_SUCCESS)) if data.len() == 1 => {
                self.how = "caching_sha2_password: fast authentication (the server had the password cached)".into();
                Ok(None)
            }
            ("caching_sha2_password", Some(&mysql::PERFORM_FULL_AUTHENTICATION))
                if data.len() == 1 =>
            {
                self.full_password(conn, mysql::CACHING_SHA2_REQUEST_PUBLIC_KEY)
                    .map(Some)
            }
            _ => Err(conn.protocol(
                "authentication",
                format!(
                    "unexpected AuthMoreData {:02x?} for {}",
                    &data[..data.len().min(8)],
                    self.plugin
                ),
            )),
        }
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
    setup.server_version = Some(server_version(&hs.server_version));
    let offers_tls = hs.capabilities & caps::SSL != 0;
    let mut seq = first.seq.wrapping_add(1);
    let mut client_caps = caps::LONG_PASSWORD
        | caps::LONG_FLAG
        | caps::PROTOCOL_41
        | caps::TRANSACTIONS
        | caps::SECURE_CONNECTION
        | caps::MULTI_RESULTS
        | caps::PLUGIN_AUTH
        | caps::PLUGIN_AUTH_LENENC;
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
    let pinned = match &url.server_public_key {
        Some(path) => Some(load_public_key(path)?),
        None => None,
    };
    let mut auth = Auth {
        password,
        tls: conn.tls_info.is_some(),
        pinned,
        may_ask_key: url.get_server_public_key,
        plugin: hs.auth_plugin.clone(),
        scramble: hs.scramble.clone(),
        awaiting_key: false,
        how: String::new(),
    };
    if !auth.supported() {
        // Unknown default plugin: answer as mysql_native_password; the server switches if the user needs another.
        auth.plugin = "mysql_native_password".into();
    }
    let first = auth.first_response(&conn)?;
    let resp = mysql::handshake_response(
        client_caps,
        url.user(),
        &first,
        url.database.as_deref(),
        &auth.plugin,
    );
    conn.send(&mysql::frame(seq, &resp), "authentication")?;
    loop {
        let p = packet(&mut conn, "authentication")?;
        let answer = match reply(&conn, &p, true, "authentication")? {
            Reply::Ok => break,
            Reply::Err {
                code,
                state,
                message,
            } => {
                return Err(auth_error(
                    &conn,
                    url,
                    offers_tls && conn.tls_info.is_none(),
                    (code, &state, &message),
                ));
            }
            Reply::AuthSwitch { plugin, data } => {
                auth.plugin = plugin;
                auth.scramble = data;
                auth.awaiting_key = false;
                if !auth.supported() {
                    return Err(DbError::Unsupported {
                        proto: PROTO,
                        addr: conn.addr,
                        what: format!("the authentication plugin '{}'", auth.plugin),
                        hint: "roundtrip speaks mysql_native_password, caching_sha2_password, sha256_password and mysql_clear_password (over TLS): give the user one of these",
                    });
                }
                Some(auth.first_response(&conn)?)
            }
            Reply::AuthMore(data) => auth.more_data(&conn, &data)?,
            other => return Err(conn.protocol("authentication", format!("unexpected {other:?}"))),
        };
        if let Some(a) = answer {
            conn.send(&mysql::frame(p.seq.wrapping_add(1), &a), "authentication")?;
        }
    }
    if !auth.how.is_empty() {
        setup.notes.push(auth.how);
    }
    Ok((
        MySession {
            conn,
            id: hs.connection_id,
        },
        setup,
    ))
}

impl MySession {
    fn run(&mut self, sql: &str, during: &str) -> Result<Fetched, DbError> {
        self.run_rows(sql, during, &mut None)
    }

    /// Runs `sql`; when `first` is `Some`, it receives the values of the first row of any result set.
    fn run_rows(
        &mut self,
        sql: &str,
        during: &str,
        first: &mut Option<super::Row>,
    ) -> Result<Fetched, DbError> {
        let want = first.is_some();
        self.conn
            .send(&mysql::command(mysql::COM_QUERY, sql.as_bytes()), during)?;
        let mut f = Fetched::default();
        let mut got = false;
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
                        if want && !got {
                            *first = Some(
                                mysql::row_values(&p.payload)
                                    .map_err(|e| self.conn.protocol(during, e))?,
                            );
                            got = true;
                        }
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
    fn interrupt(&self) -> Option<super::Interrupt> {
        Some(super::Interrupt::MyKill { id: self.id })
    }
    fn set_read_timeout(&mut self, d: std::time::Duration) {
        self.conn.set_read_timeout(d);
    }
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
    fn query_row(&mut self, q: &str, during: &str) -> Result<(Fetched, super::Row), DbError> {
        let mut first = Some(Vec::new());
        let f = self.run_rows(q, during, &mut first)?;
        Ok((f, first.unwrap_or_default()))
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

/// The server's version as its vendor writes it: MariaDB 10+ prefixes `5.5.5-` to its handshake version (so
/// that old MySQL clients accept it); that prefix is not its version.
pub(crate) fn server_version(handshake: &str) -> String {
    match handshake.strip_prefix("5.5.5-") {
        Some(v) if v.contains("MariaDB") => v.to_string(),
        _ => handshake.to_string(),
    }
}

#[cfg(test)]
mod version_tests {
    #[test]
    fn mariadb_prefix_is_stripped() {
        assert_eq!(
            super::server_version("5.5.5-10.11.19-MariaDB-0+deb12u1"),
            "10.11.19-MariaDB-0+deb12u1"
        );
        assert_eq!(super::server_version("8.0.36"), "8.0.36");
        assert_eq!(super::server_version("5.5.5-custom"), "5.5.5-custom");
    }
}
