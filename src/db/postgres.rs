//! PostgreSQL sessions over the v3 protocol: SSLRequest detection, startup, trust / cleartext / md5 /
//! SCRAM-SHA-256 authentication, simple queries, the empty-query ping.

use super::{Conn, DbError, DbUrl, Fetched, Scheme, Secret, Session, Setup, SslMode};
use crate::wire::pg::{self, Backend, ServerError};
use crate::wire::scram::ScramClient;

/// An authenticated PostgreSQL connection, ready for queries.
pub(crate) struct PgSession {
    conn: Conn,
    /// BackendKeyData: the backend's process id and the secret a CancelRequest needs.
    key: Option<(u32, u32)>,
}

const PROTO: &str = "PostgreSQL";

fn next(conn: &mut Conn, during: &str) -> Result<Backend, DbError> {
    conn.next(during, pg::parse_backend)
}

/// Maps an ErrorResponse during startup to the error users understand.
fn startup_error(conn: &Conn, url: &DbUrl, e: &ServerError) -> DbError {
    match e.code.as_str() {
        "28P01" | "28000" => DbError::Auth {
            proto: PROTO,
            addr: conn.addr,
            user: url.user().to_string(),
            message: format!("{} ({})", e.message, e.code),
            hint: Scheme::Postgres.password_hint(),
        },
        "3D000" => DbError::UnknownDatabase {
            proto: PROTO,
            addr: conn.addr,
            database: url
                .database
                .clone()
                .unwrap_or_else(|| url.user().to_string()),
            message: e.message.clone(),
        },
        _ => conn.server(
            "startup",
            format!("{} {}: {}", e.severity, e.code, e.message),
        ),
    }
}

/// An error while a query runs: FATAL means the server is ending the session.
fn query_error(conn: &Conn, during: &str, e: &ServerError) -> DbError {
    if e.severity == "FATAL" || e.severity == "PANIC" {
        conn.closed(during, &format!("{} ({})", e.message, e.code))
    } else {
        let detail = if e.detail.is_empty() {
            String::new()
        } else {
            format!(": {}", e.detail)
        };
        conn.server(
            during,
            format!("{} {}: {}{detail}", e.severity, e.code, e.message).replace('\n', " "),
        )
    }
}

fn need_password<'a>(conn: &Conn, url: &'a DbUrl) -> Result<&'a Secret, DbError> {
    url.password.as_ref().ok_or_else(|| DbError::NoPassword {
        proto: PROTO,
        addr: conn.addr,
        user: url.user().to_string(),
        hint: Scheme::Postgres.password_hint(),
    })
}

/// Negotiates (or detects) TLS, starts up and authenticates.
pub(crate) fn connect(
    mut conn: Conn,
    url: &DbUrl,
    ssl: SslMode,
) -> Result<(PgSession, Setup), DbError> {
    let mut setup = Setup::default();
    if ssl != SslMode::Disable {
        let t0 = std::time::Instant::now();
        conn.send(&pg::ssl_request(), "the SSLRequest")?;
        let answer = conn.next(
            "the SSLRequest",
            |b: &[u8]| -> Result<Option<(u8, usize)>, String> { Ok(b.first().map(|&c| (c, 1))) },
        )?;
        match answer {
            b'N' if ssl.required() => {
                return Err(DbError::TlsNotOffered {
                    proto: PROTO,
                    addr: conn.addr,
                    setting: if ssl == SslMode::Verify {
                        "sslmode=verify-full"
                    } else {
                        "sslmode=require"
                    },
                });
            }
            b'N' => setup
                .notes
                .push("the server does not offer TLS (SSLRequest answered N): plain TCP".into()),
            b'S' => {
                conn.start_tls(url.host_or_localhost(), ssl)?;
                // The TLS phase is what libpq pays for it: the SSLRequest round trip and the handshake.
                setup.tls = Some(t0.elapsed());
                setup.notes.extend(conn.tls_info.clone());
            }
            b'E' => {
                // A pre-3.0 style error message: the server refuses SSLRequest outright.
                return Err(conn.protocol("the SSLRequest", "the server answered with an error"));
            }
            other => {
                return Err(conn.protocol(
                    "the SSLRequest",
                    format!("answer byte 0x{other:02x}, expected 'S' or 'N'"),
                ));
            }
        }
    }
    let user = url.user().to_string();
    let database = url.database.clone().unwrap_or_else(|| user.clone());
    conn.send(
        &pg::startup(&user, &database, &[("application_name", "roundtrip")]),
        "startup",
    )?;
    let mut scram: Option<ScramClient> = None;
    let mut key = None;
    loop {
        match next(&mut conn, "startup")? {
            Backend::AuthOk => {}
            Backend::AuthCleartext => {
                let pw = need_password(&conn, url)?;
                conn.send(&pg::password(pw.expose()), "cleartext authentication")?;
            }
            Backend::AuthMd5(salt) => {
                let pw = need_password(&conn, url)?;
                conn.send(
                    &pg::password(&pg::md5_password(&user, pw.expose(), salt)),
                    "md5 authentication",
                )?;
            }
            Backend::AuthSasl(mechs) => {
                let pw = need_password(&conn, url)?;
                let _ = pw;
                if !mechs.iter().any(|m| m == "SCRAM-SHA-256") {
                    return Err(DbError::Unsupported {
                        proto: PROTO,
                        addr: conn.addr,
                        what: format!("SASL mechanisms {}", mechs.join(", ")),
                        hint: "roundtrip speaks SCRAM-SHA-256 without channel binding",
                    });
                }
                let c = ScramClient::new("", &ScramClient::random_nonce());
                conn.send(
                    &pg::sasl_initial("SCRAM-SHA-256", c.client_first().as_bytes()),
                    "SCRAM authentication",
                )?;
                scram = Some(c);
            }
            Backend::AuthSaslContinue(data) => {
                let (Some(c), Some(pw)) = (scram.as_mut(), url.password.as_ref()) else {
                    return Err(conn.protocol("SCRAM authentication", "SASLContinue without SASL"));
                };
                let fin = c
                    .client_final(&data, pw.expose())
                    .map_err(|e| conn.protocol("SCRAM authentication", e))?;
                conn.send(&pg::sasl_response(fin.as_bytes()), "SCRAM authentication")?;
            }
            Backend::AuthSaslFinal(data) => {
                let Some(c) = scram.as_ref() else {
                    return Err(conn.protocol("SCRAM authentication", "SASLFinal without SASL"));
                };
                c.verify_server_final(&data)
                    .map_err(|e| conn.protocol("SCRAM authentication", e))?;
            }
            Backend::AuthOther(code) => {
                return Err(DbError::Unsupported {
                    proto: PROTO,
                    addr: conn.addr,
                    what: format!("authentication method {code} (Kerberos/GSSAPI/SSPI)"),
                    hint: "use trust, password, md5 or scram-sha-256 in pg_hba.conf",
                });
            }
            Backend::ParameterStatus(k, v) if k == "server_version" => {
                setup.server_version = Some(v)
            }
            Backend::BackendKeyData(pid, secret) => key = Some((pid, secret)),
            Backend::Error(e) => return Err(startup_error(&conn, url, &e)),
            Backend::ReadyForQuery(_) => break,
            _ => {}
        }
    }
    Ok((PgSession { conn, key }, setup))
}

impl PgSession {
    fn run(&mut self, sql: &str, during: &str) -> Result<Fetched, DbError> {
        self.run_rows(&pg::query(sql), during, false)
            .map(|(f, _)| f)
    }

    /// Sends `request` (a simple Query, or an extended-protocol statement ending in Sync) and reads its
    /// answer up to ReadyForQuery; with `first`, also returns the values of the first row.
    fn run_rows(
        &mut self,
        request: &[u8],
        during: &str,
        first: bool,
    ) -> Result<(Fetched, Option<super::Row>), DbError> {
        self.conn.send(request, during)?;
        let mut f = Fetched::default();
        let mut row: Option<super::Row> = None;
        let mut error: Option<DbError> = None;
        loop {
            let want = first && row.is_none();
            let (msg, values) = self.conn.next(during, |b: &[u8]| {
                let Some((m, used)) = pg::parse_backend(b)? else {
                    return Ok(None);
                };
                let v = match (&m, want) {
                    (Backend::DataRow { .. }, true) => Some(pg::data_row_values(&b[..used])?),
                    _ => None,
                };
                Ok::<_, pg::PgWireError>(Some(((m, v), used)))
            })?;
            if values.is_some() {
                row = values;
            }
            match msg {
                Backend::DataRow { value_bytes, .. } => {
                    f.rows += 1;
                    f.bytes += value_bytes as u64;
                }
                Backend::Error(e) => {
                    let fatal = e.severity == "FATAL" || e.severity == "PANIC";
                    let err = query_error(&self.conn, during, &e);
                    if fatal {
                        return Err(err);
                    }
                    error.get_or_insert(err);
                }
                Backend::ReadyForQuery(_) => break,
                _ => {}
            }
        }
        match error {
            Some(e) => Err(e),
            None => Ok((f, row)),
        }
    }
}

impl Session for PgSession {
    fn ping(&mut self) -> Result<(), DbError> {
        self.run("", "the protocol ping (empty query)").map(|_| ())
    }
    fn query(&mut self, q: &str) -> Result<Fetched, DbError> {
        self.run(q, "the query")
    }
    fn query_row(&mut self, q: &str, during: &str) -> Result<(Fetched, super::Row), DbError> {
        self.run_rows(&pg::query(q), during, true)
            .map(|(f, row)| (f, row.unwrap_or_default()))
    }
    fn query_row_params(
        &mut self,
        q: &str,
        params: &[&str],
        during: &str,
    ) -> Result<(Fetched, super::Row), DbError> {
        self.run_rows(&pg::extended_query(q, params), during, true)
            .map(|(f, row)| (f, row.unwrap_or_default()))
    }
    fn interrupt(&self) -> Option<super::Interrupt> {
        self.key.map(|(pid, key)| super::Interrupt::PgCancel {
            addr: self.conn.addr,
            pid,
            key,
        })
    }
    fn set_read_timeout(&mut self, d: std::time::Duration) {
        self.conn.set_read_timeout(d);
    }
    fn prepare_fetch(&mut self, rows: u64, row_bytes: u64) -> Result<String, DbError> {
        Ok(format!(
            "SELECT repeat('x', {row_bytes}) FROM generate_series(1, {rows})"
        ))
    }
    fn close(&mut self) {
        let _ = self.conn.send(&pg::terminate(), "terminate");
    }
}
