//! The local session prepared for link calls ([`LinkSession`]): the dblink function (PostgreSQL) or the
//! scratch FEDERATED(X) table and procedure (MySQL/MariaDB), the calls through them, and their cleanup.

//!
//! Every statement runs on a thread of its own ([`Runner`]): the caller waits at most the timeout, and a
//! Ctrl-C (the `cancel` flag) gives up within 50 ms, sending the local server a cancel (PostgreSQL
//! CancelRequest, MariaDB `KILL QUERY`) from another connection. A statement given up on keeps its thread
//! until the local server answers it, then that thread removes the scratch objects: while it waits, the
//! `inflight` count says a backend is still inside a link open (the agent starts no other meanwhile).
//!
//! Here: the runner, the calls and the cleanup, common to both databases. What each database prepares is in
//! `pg` (PostgreSQL) and `my` (MySQL/MariaDB).

use super::{LinkCall, LinkTarget};
use crate::db::{DbError, DbUrl, Fetched, Interrupt, Row, Scheme, Session, random_tag};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

mod my;
mod pg;

fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// How long a statement given up on may keep its thread waiting for the local server's answer (the server
/// bounds it first: `connect_timeout` for dblink, `net_read_timeout` for FEDERATEDX).
const ORPHAN_WAIT: Duration = Duration::from_secs(15 * 60);

/// How often a waiting caller looks at the cancel flag.
const POLL: Duration = Duration::from_millis(50);

/// libpq's smallest `connect_timeout` (it raises 1 to 2).
pub(super) const MIN_CONNECT_TIMEOUT_S: u64 = 2;

/// The `connect_timeout` roundtrip adds to a link string without one: the larger of libpq's minimum (2 s)
/// and `timeout`, in whole seconds rounded up.
pub fn link_connect_timeout(timeout: Duration) -> u64 {
    let whole = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
    whole.max(MIN_CONNECT_TIMEOUT_S)
}

/// What a statement given up on removes when the local server finally answers it.
#[derive(Default)]
struct Cleanup {
    /// Statements on the local session.
    local: Vec<String>,
    /// A statement on the remote server, over roundtrip's own connection.
    remote: Option<(Box<DbUrl>, String)>,
}

/// Decrements the in-flight count when the thread holding it ends.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn new(n: &Arc<AtomicUsize>) -> InFlight {
        n.fetch_add(1, Ordering::SeqCst);
        InFlight(n.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

type Answer = (
    Box<dyn Session + Send>,
    Result<(Fetched, Row), DbError>,
    Duration,
);

/// The local session, run on a thread per statement so that the caller can give up on one.
struct Runner {
    session: Option<Box<dyn Session + Send>>,
    interrupt: Option<Interrupt>,
    local: Box<DbUrl>,
    addr: SocketAddr,
    proto: &'static str,
    timeout: Duration,
    cancel: Arc<AtomicBool>,
    inflight: Arc<AtomicUsize>,
    cleanup: Arc<Mutex<Cleanup>>,
}

impl Runner {
    /// Runs `sql` (with `params` as bind parameters when there are any) and returns its first row and how
    /// long the statement took at the client. Gives up after the timeout, or within 50 ms of the cancel flag.
    fn run(
        &mut self,
        sql: &str,
        params: &[&str],
        during: &str,
    ) -> Result<(Fetched, Row, Duration), DbError> {
        let Some(mut session) = self.session.take() else {
            return Err(DbError::Link {
                proto: self.proto,
                addr: self.addr,
                message: format!(
                    "{during}: the session was given up on during an earlier statement"
                ),
            });
        };
        if self.cancel.load(Ordering::SeqCst) {
            self.session = Some(session);
            return Err(self.stopped(during));
        }
        let (tx, rx) = mpsc::channel::<Answer>();
        let (sql_owned, during_owned) = (sql.to_string(), during.to_string());
        let params_owned: Vec<String> = params.iter().map(|p| p.to_string()).collect();
        let guard = InFlight::new(&self.inflight);
        let cleanup = self.cleanup.clone();
        let timeout = self.timeout;
        session.set_read_timeout(ORPHAN_WAIT);
        let spawned = std::thread::Builder::new()
            .name("db-link".into())
            .spawn(move || {
                let _guard = guard;
                let t0 = Instant::now();
                let r = if params_owned.is_empty() {
                    session.query_row(&sql_owned, &during_owned)
                } else {
                    let p: Vec<&str> = params_owned.iter().map(String::as_str).collect();
                    session.query_row_params(&sql_owned, &p, &during_owned)
                };
                let took = t0.elapsed();
                if let Err(mpsc::SendError((mut session, _, _))) = tx.send((session, r, took)) {
                    // Given up on: the local server has answered at last; remove what is left.
                    session.set_read_timeout(timeout);
                    let c = std::mem::take(&mut *cleanup.lock().unwrap_or_else(|p| p.into_inner()));
                    for q in &c.local {
                        let _ = session.query(q);
                    }
                    session.close();
                    if let Some((url, q)) = c.remote
                        && let Ok(mut rs) = open_direct(&url, timeout)
                    {
                        let _ = rs.query(&q);
                        rs.close();
                    }
                }
            });
        if let Err(e) = spawned {
            return Err(DbError::Link {
                proto: self.proto,
                addr: self.addr,
                message: format!("{during}: cannot start a thread ({e})"),
            });
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left.min(POLL)) {
                Ok((mut session, r, took)) => {
                    session.set_read_timeout(self.timeout);
                    self.session = Some(session);
                    return r.map(|(f, row)| (f, row, took));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let stop = self.cancel.load(Ordering::SeqCst);
                    if !stop && !left.is_zero() {
                        continue;
                    }
                    // One last look: the answer may have come this instant.
                    if let Ok((mut session, r, took)) = rx.try_recv() {
                        session.set_read_timeout(self.timeout);
                        self.session = Some(session);
                        return r.map(|(f, row)| (f, row, took));
                    }
                    drop(rx);
                    self.interrupt_in_background();
                    return Err(if stop {
                        self.stopped(during)
                    } else {
                        DbError::Timeout {
                            proto: self.proto,
                            addr: self.addr,
                            during: during.to_string(),
                            timeout_ms: self.timeout.as_millis(),
                        }
                    });
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(DbError::Link {
                        proto: self.proto,
                        addr: self.addr,
                        message: format!(
                            "{during}: the statement's thread ended without an answer"
                        ),
                    });
                }
            }
        }
    }

    fn stopped(&self, during: &str) -> DbError {
        DbError::Link {
            proto: self.proto,
            addr: self.addr,
            message: format!(
                "stopped during {during}: the local server was asked to cancel the statement"
            ),
        }
    }

    /// Best effort, on a thread of its own (the caller returns at once): a PostgreSQL CancelRequest (a
    /// backend inside `dblink_connect` obeys it from PostgreSQL 16 on), or MariaDB's `KILL QUERY` (a
    /// FEDERATEDX open does not obey it: `net_read_timeout` bounds it).
    fn interrupt_in_background(&self) {
        let Some(how) = self.interrupt else { return };
        let local = self.local.clone();
        let timeout = self.timeout.min(Duration::from_secs(5));
        let _ = std::thread::Builder::new()
            .name("db-link-cancel".into())
            .spawn(move || send_interrupt(how, &local, timeout));
    }

    fn query_row(&mut self, sql: &str, during: &str) -> Result<(Fetched, Row), DbError> {
        self.run(sql, &[], during).map(|(f, r, _)| (f, r))
    }

    fn query(&mut self, sql: &str) -> Result<Fetched, DbError> {
        self.run(sql, &[], "the query").map(|(f, _, _)| f)
    }
}

/// Sends `how` to the local server (errors ignored: it is a best effort).
fn send_interrupt(how: Interrupt, local: &DbUrl, timeout: Duration) {
    match how {
        Interrupt::PgCancel { addr, pid, key } => {
            if let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, timeout) {
                use std::io::Write;
                let _ = s.set_write_timeout(Some(timeout));
                let _ = s.write_all(&crate::wire::pg::cancel_request(pid, key));
            }
        }
        Interrupt::MyKill { id } => {
            if let Ok(mut s) = open_direct(local, timeout) {
                let _ = s.query(&format!("KILL QUERY {id}"));
                s.close();
            }
        }
    }
}

/// A [`DbError::Link`] of the local server at `addr` saying `message`.
fn link_error(proto: &'static str, addr: SocketAddr) -> impl Fn(String) -> DbError + Copy {
    move |message| DbError::Link {
        proto,
        addr,
        message,
    }
}

fn mysql_string(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

/// What each database's preparation ([`pg::prepare`], [`my::prepare`]) starts from.
struct Prep<'a> {
    runner: Runner,
    server_version: Option<&'a str>,
    local: &'a DbUrl,
    target: &'a LinkTarget,
    addr: SocketAddr,
    proto: &'static str,
    rows: u64,
    row_bytes: u64,
    create_extension: bool,
    timeout: Duration,
    /// Names the scratch objects.
    tag: String,
}

enum Backend {
    Pg {
        /// The dblink connection name.
        name: String,
        /// The dblink extension's schema, quoted.
        schema: String,
    },
    My {
        /// Local FEDERATED table and procedure names.
        table: String,
        proc_name: String,
        /// The remote scratch table, dropped over a direct connection.
        remote_table: String,
        remote: Box<DbUrl>,
    },
}

/// An open session prepared for link calls: the temporary function (PostgreSQL) or the scratch table and
/// procedure (MySQL) exist; [`LinkSession::open_link`] makes the first call.
pub struct LinkSession {
    runner: Runner,
    backend: Backend,
    target: LinkTarget,
    addr: SocketAddr,
    proto: &'static str,
    single_sql: String,
    multi_sql: Option<String>,
    timeout: Duration,
    /// TARGET as dblink gets it: with `connect_timeout` added when it had none (None: a foreign server).
    pg_link_text: Option<crate::db::Secret>,
    /// How the link is made.
    pub method: String,
    /// Remarks for the report.
    pub notes: Vec<String>,
    rows: u64,
    /// Requests each call sends through the link.
    pub requests_per_call: u32,
}

fn parse_call(
    values: &[Option<String>],
    target: &LinkTarget,
    proto: &'static str,
    addr: SocketAddr,
    client: Duration,
) -> Result<LinkCall, DbError> {
    let num = |i: usize| -> Option<i64> {
        values
            .get(i)?
            .as_deref()?
            .split('.')
            .next()?
            .trim()
            .parse()
            .ok()
    };
    match (num(0), num(1), num(2), num(3)) {
        (Some(b), Some(e), Some(n), Some(nb)) => Ok(LinkCall {
            began_unix_us: b,
            ended_unix_us: e,
            rows: n.max(0) as u64,
            bytes: nb.max(0) as u64,
            client,
        }),
        _ => Err(DbError::Protocol {
            proto,
            addr,
            during: "a link call".into(),
            detail: target.scrub(&format!(
                "expected began_us, ended_us, rows, bytes; got {values:?}"
            )),
        }),
    }
}

impl LinkSession {
    /// Prepares `session` (connected to `addr`) for calls through `target`: checks the extension or engine
    /// (creating or loading it only when `create_extension`), creates the temporary objects. Untimed.
    ///
    /// Statements run where `cancel` can abandon them ([`Runner`]); `inflight` counts those still inside
    /// the local server, given up on or not.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn prepare(
        session: Box<dyn Session + Send>,
        scheme: Scheme,
        server_version: Option<&str>,
        local: &DbUrl,
        target: &LinkTarget,
        addr: SocketAddr,
        rows: u64,
        row_bytes: u64,
        create_extension: bool,
        timeout: Duration,
        cancel: Arc<AtomicBool>,
        inflight: Arc<AtomicUsize>,
    ) -> Result<LinkSession, DbError> {
        let proto = scheme.name();
        let runner = Runner {
            interrupt: session.interrupt(),
            session: Some(session),
            local: Box::new(local.clone()),
            addr,
            proto,
            timeout,
            cancel,
            inflight,
            cleanup: Arc::default(),
        };
        let prep = Prep {
            runner,
            server_version,
            local,
            target,
            addr,
            proto,
            rows,
            row_bytes,
            create_extension,
            timeout,
            tag: random_tag(),
        };
        match scheme {
            Scheme::Postgres => pg::prepare(prep),
            Scheme::Mysql => my::prepare(prep),
            _ => Err(DbError::Config(
                "--link needs a PostgreSQL or MySQL/MariaDB database at URL".into(),
            )),
        }
    }

    /// The statement a single-row call runs through the link.
    pub fn remote_sql(&self) -> String {
        match &self.backend {
            Backend::Pg { .. } => self.single_sql.clone(),
            Backend::My { remote_table, .. } => {
                format!("SELECT id, f FROM {remote_table} WHERE id = 0 (FEDERATEDX)")
            }
        }
    }

    /// The statement a multi-row call runs through the link.
    pub fn remote_multi_sql(&self) -> Option<String> {
        match &self.backend {
            Backend::Pg { .. } => self.multi_sql.clone(),
            Backend::My { remote_table, .. } => self.multi_sql.as_ref().map(|_| {
                format!(
                    "SELECT id, f FROM {remote_table} WHERE id BETWEEN 1 AND {} (FEDERATEDX)",
                    self.rows
                )
            }),
        }
    }

    fn run_call(&mut self, sql: &str, params: &[&str], during: &str) -> Result<LinkCall, DbError> {
        let (_f, row, client) = self
            .runner
            .run(sql, params, during)
            .map_err(|e| self.explain(e))?;
        parse_call(&row, &self.target, self.proto, self.addr, client)
    }

    /// Adds PostgreSQL's rule to a "password is required" error and scrubs the password.
    fn explain(&self, e: DbError) -> DbError {
        let text = self.target.scrub(&e.to_string());
        if text.contains("2F003") {
            return DbError::Link {
                proto: self.proto,
                addr: self.addr,
                message: format!(
                    "{text} (PostgreSQL's rule for dblink: a non-superuser's link must authenticate with a password the remote server asks for: put password=... in TARGET or in the foreign server's user mapping, and make the remote pg_hba.conf ask for it (scram-sha-256 or md5); or run as a superuser)"
                ),
            };
        }
        if text != e.to_string() {
            return DbError::Config(text);
        }
        e
    }

    /// The first call: opens the link, then one single-row round trip through it. TARGET travels as a bind
    /// parameter: the statement text (what the server log and `pg_stat_activity` show) holds `$1`.
    pub fn open_link(&mut self) -> Result<LinkCall, DbError> {
        match &self.backend {
            Backend::Pg { name, .. } => {
                let (name, q) = (name.clone(), self.single_sql.clone());
                let text = self
                    .pg_link_text
                    .clone()
                    .unwrap_or_else(|| self.target.text.clone());
                self.run_call(
                    "SELECT * FROM pg_temp.roundtrip_link_open($1, $2, $3)",
                    &[text.expose(), &name, &q],
                    "opening the link (first call)",
                )
            }
            Backend::My { .. } => {
                let sql = self.single_sql.clone();
                self.run_call(&sql, &[], "opening the link (first call)")
            }
        }
    }

    /// One single-row round trip through the open link.
    pub fn call(&mut self) -> Result<LinkCall, DbError> {
        self.call_through(false, "a call through the link")
    }

    /// One multi-row call through the open link (None when there are no rows to fetch).
    pub fn call_multi(&mut self) -> Option<Result<LinkCall, DbError>> {
        self.multi_sql.as_ref()?;
        Some(self.call_through(true, "a multi-row call through the link"))
    }

    fn call_through(&mut self, multi: bool, during: &str) -> Result<LinkCall, DbError> {
        let q = if multi {
            self.multi_sql.clone().unwrap_or_default()
        } else {
            self.single_sql.clone()
        };
        match &self.backend {
            Backend::Pg { name, .. } => {
                let name = name.clone();
                self.run_call(
                    "SELECT * FROM pg_temp.roundtrip_link_call($1, $2)",
                    &[&name, &q],
                    during,
                )
            }
            Backend::My { .. } => self.run_call(&q, &[], during),
        }
    }

    /// The client -> local database protocol ping on the same session.
    pub fn ping(&mut self) -> Result<Duration, DbError> {
        let Some(session) = self.runner.session.as_mut() else {
            return Err(self.runner.stopped("the protocol ping"));
        };
        let t0 = Instant::now();
        session.ping()?;
        Ok(t0.elapsed())
    }

    /// True while a statement of this session that was given up on is still running in the local server.
    pub fn in_flight(&self) -> usize {
        self.runner.inflight.load(Ordering::SeqCst)
    }

    /// Closes the link and removes the scratch objects (errors ignored; a temporary function goes with the
    /// session anyway). Runs on the session directly, whatever the cancel flag says; a session given up on
    /// is cleaned up by the thread that still waits for its statement.
    pub fn cleanup(&mut self) {
        let Some(session) = self.runner.session.as_mut() else {
            // Given up on: the statement's thread cleans up when the local server answers, but a process
            // that exits (a Ctrl-C) does not wait for it. The remote scratch table does not depend on the
            // local server: drop it now (waiting half a second at most; the thread drops it again if need be).
            if let Backend::My {
                remote_table,
                remote,
                ..
            } = &self.backend
            {
                let (remote, q, timeout) = (
                    remote.clone(),
                    format!("DROP TABLE IF EXISTS `{remote_table}`"),
                    self.timeout,
                );
                let (tx, rx) = mpsc::channel();
                let _ = std::thread::Builder::new()
                    .name("db-link-remote".into())
                    .spawn(move || {
                        if let Ok(mut rs) = open_direct(&remote, timeout) {
                            let _ = rs.query(&q);
                            rs.close();
                        }
                        let _ = tx.send(());
                    });
                let _ = rx.recv_timeout(Duration::from_millis(500));
            }
            return;
        };
        match &self.backend {
            Backend::Pg { name, schema } => {
                let _ = session.query_row_params(
                    &format!(
                        "SELECT {schema}.dblink_disconnect($1) WHERE $1 = ANY ({schema}.dblink_get_connections())"
                    ),
                    &[name],
                    "closing the link",
                );
            }
            Backend::My {
                table,
                proc_name,
                remote_table,
                remote,
            } => {
                let _ = session.query(&format!("DROP PROCEDURE IF EXISTS `{proc_name}`"));
                let _ = session.query(&format!("DROP TABLE IF EXISTS `{table}`"));
                if let Ok(mut rs) = open_direct(remote, self.timeout) {
                    let _ = rs.query(&format!("DROP TABLE IF EXISTS `{remote_table}`"));
                    rs.close();
                }
            }
        }
        *self
            .runner
            .cleanup
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Cleanup::default();
    }

    /// Cleans up and says goodbye.
    pub fn close(mut self) {
        self.cleanup();
        if let Some(mut s) = self.runner.session.take() {
            s.close();
        }
    }
}

/// Runs `f` on a thread of its own and waits for it at most `timeout` (plus a little: `f` bounds its own
/// I/O by `timeout`), or until `cancel` is set: None when given up on. `f` is told whether it was given up
/// on (to undo its work).
fn abandonable<T: Send + 'static>(
    cancel: &Arc<AtomicBool>,
    timeout: Duration,
    f: impl FnOnce(&dyn Fn() -> bool) -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = mpsc::channel::<T>();
    let given_up = Arc::new(AtomicBool::new(false));
    let g = given_up.clone();
    std::thread::Builder::new()
        .name("db-link-remote".into())
        .spawn(move || {
            let t = f(&|| g.load(Ordering::SeqCst));
            let _ = tx.send(t);
        })
        .ok()?;
    // The remote connection's own timeouts end it; the caller waits a little longer than the worst of them.
    let deadline = Instant::now() + timeout * 4 + Duration::from_secs(1);
    loop {
        match rx.recv_timeout(POLL) {
            Ok(t) => return Some(t),
            Err(mpsc::RecvTimeoutError::Disconnected) => return None,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if cancel.load(Ordering::SeqCst) || Instant::now() >= deadline {
                    given_up.store(true, Ordering::SeqCst);
                    return rx.try_recv().ok();
                }
            }
        }
    }
}

/// The far end of a CREATE SERVER entry, read from `mysql.servers` (its password comes back in a result row,
/// never in statement text).
fn server_entry(session: &mut Runner, target: &LinkTarget) -> Result<DbUrl, DbError> {
    let name = target.text.expose();
    let (_, row) = session.query_row(
        &format!(
            "SELECT Host, Port, Db, Username, Password, Wrapper FROM mysql.servers WHERE Server_name = '{}'",
            name.replace('\\', "\\\\").replace('\'', "''")
        ),
        "reading the CREATE SERVER entry",
    )
    .map_err(|e| DbError::Link {
        proto: session.proto,
        addr: session.addr,
        message: format!(
            "roundtrip reads the server entry '{name}' from mysql.servers to reach the far end itself (it creates the remote scratch table), and could not: {} (GRANT SELECT ON mysql.servers, or give a mysql:// TARGET)",
            target.scrub(&e.to_string())
        ),
    })?;
    let get = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
    if row.is_empty() {
        return Err(DbError::Link {
            proto: session.proto,
            addr: session.addr,
            message: format!(
                "there is no server '{name}' in mysql.servers (CREATE SERVER {name} FOREIGN DATA WRAPPER mysql OPTIONS (HOST '...', PORT 3306, DATABASE '...', USER '...', PASSWORD '...'))"
            ),
        });
    }
    let (host, port, db, user, password) = (get(0), get(1), get(2), get(3), get(4));
    if host.is_empty() || db.is_empty() {
        return Err(DbError::Link {
            proto: session.proto,
            addr: session.addr,
            message: format!(
                "server '{name}' in mysql.servers needs HOST and DATABASE for a FEDERATEDX link"
            ),
        });
    }
    let port: u16 = port.parse().ok().filter(|p| *p != 0).unwrap_or(3306);
    Ok(DbUrl {
        scheme: Scheme::Mysql,
        user: (!user.is_empty()).then_some(user),
        password: (!password.is_empty()).then(|| crate::db::Secret::new(password)),
        host,
        port: Some(port),
        database: Some(db),
        ..DbUrl::parse("mysql://127.0.0.1/x")?
    })
}

/// A direct session to a MySQL server (the remote end, to create and drop its scratch table).
fn open_direct(url: &DbUrl, timeout: Duration) -> Result<Box<dyn Session + Send>, DbError> {
    let target = crate::probe::target::Target {
        host: url.host_or_localhost().to_string(),
        port: url.port(),
    };
    let (addr, _) = target.resolve(crate::probe::target::Family::Any)?;
    let (conn, _) = crate::db::tcp_connect(addr, Scheme::Mysql.name(), timeout)?;
    let ssl = url.ssl_mode.unwrap_or(crate::db::SslMode::Prefer);
    Ok(Box::new(crate::db::mysql::connect(conn, url, ssl)?.0))
}
