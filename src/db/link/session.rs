//! The local session prepared for link calls ([`LinkSession`]): the dblink function (PostgreSQL) or the
//! scratch FEDERATED(X) table and procedure (MySQL/MariaDB), the calls through them, and their cleanup.

//!
//! Every statement runs on a thread of its own ([`Runner`]): the caller waits at most the timeout, and a
//! Ctrl-C (the `cancel` flag) gives up within 50 ms, sending the local server a cancel (PostgreSQL
//! CancelRequest, MariaDB `KILL QUERY`) from another connection. A statement given up on keeps its thread
//! until the local server answers it, then that thread removes the scratch objects: while it waits, the
//! `inflight` count says a backend is still inside a link open (the agent starts no other meanwhile).

use super::target::Kind;
use super::{LinkCall, LinkTarget};
use crate::db::{DbError, DbUrl, Fetched, Interrupt, Row, Scheme, Session, random_tag};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

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

fn mysql_string(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
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
        let mut session = Runner {
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
        let tag = random_tag();
        let link_err = |message: String| DbError::Link {
            proto,
            addr,
            message,
        };
        let mut notes = Vec::new();
        match scheme {
            Scheme::Postgres => {
                let during = "looking for the dblink extension";
                let (_, row) = session.query_row(
                    "SELECT n.nspname, e.extversion FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'dblink'",
                    during,
                )?;
                let (schema, version) = if let [Some(s), Some(v)] = row.as_slice() {
                    (s.clone(), v.clone())
                } else {
                    let (_, db) = session.query_row("SELECT current_database()", during)?;
                    let db = db.first().cloned().flatten().unwrap_or_default();
                    let (_, avail) = session.query_row(
                        "SELECT count(*) FROM pg_available_extensions WHERE name = 'dblink'",
                        during,
                    )?;
                    let available = avail.first().cloned().flatten().as_deref() == Some("1");
                    if !available {
                        return Err(link_err(format!(
                            "the dblink extension is not installed in database '{db}' and this server has none to install (install the server's contrib package, e.g. postgresql-contrib, then CREATE EXTENSION dblink as a superuser)"
                        )));
                    }
                    if !create_extension {
                        return Err(link_err(format!(
                            "the dblink extension is not installed in database '{db}': a superuser can add it with CREATE EXTENSION dblink; (or run again with --create-extension to let roundtrip do it)"
                        )));
                    }
                    session
                        .query_row("CREATE EXTENSION dblink", "CREATE EXTENSION dblink")
                        .map_err(|e| target.scrub_error(e))?;
                    notes.push(format!(
                        "--create-extension: created the dblink extension in database '{db}' (left in place; DROP EXTENSION dblink removes it)"
                    ));
                    let (_, row) = session.query_row(
                        "SELECT n.nspname, e.extversion FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'dblink'",
                        during,
                    )?;
                    match row.as_slice() {
                        [Some(s), Some(v)] => (s.clone(), v.clone()),
                        _ => {
                            return Err(link_err(
                                "CREATE EXTENSION dblink did not create it".into(),
                            ));
                        }
                    }
                };
                let s = quote_ident(&schema);
                let body = |open: bool| {
                    format!(
                        "CREATE FUNCTION pg_temp.roundtrip_link_{kind}({args}conn text, q text, OUT began_us bigint, OUT ended_us bigint, OUT nrows bigint, OUT nbytes bigint) LANGUAGE plpgsql AS $rtf$
BEGIN
  began_us := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
  {connect}SELECT count(*), coalesce(sum(octet_length(r.f)), 0) INTO nrows, nbytes FROM {s}.dblink(conn, q) AS r(t timestamptz, f text);
  ended_us := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
END
$rtf$",
                        kind = if open { "open" } else { "call" },
                        args = if open { "target text, " } else { "" },
                        connect = if open {
                            format!("PERFORM {s}.dblink_connect(conn, target);\n  ")
                        } else {
                            String::new()
                        },
                    )
                };
                for open in [true, false] {
                    session.query_row(&body(open), "creating the temporary link function")?;
                }
                // A link open to a host that accepts and never answers must end in the local server too:
                // PostgreSQL 15 does not interrupt dblink_connect on a cancel, so libpq's connect_timeout is
                // what bounds it.
                let pg_link_text =
                    target.pg_text_with_connect_timeout(link_connect_timeout(timeout));
                if target.is_server_name() {
                    let (_, opts, _) = session.run(
                        "SELECT array_to_string(srvoptions, ' ') FROM pg_foreign_server WHERE srvname = $1",
                        &[target.text.expose()],
                        "reading the foreign server's options",
                    )?;
                    if let Some(Some(o)) = opts.first()
                        && !o.split(' ').any(|kv| kv.starts_with("connect_timeout="))
                    {
                        notes.push(format!(
                            "warning: foreign server {} has no connect_timeout in its OPTIONS: a link open to a host that never answers keeps a backend of this database waiting with no bound (PostgreSQL 15 ignores a cancel there); ALTER SERVER {} OPTIONS (ADD connect_timeout '{}')",
                            target.redacted(),
                            quote_ident(target.text.expose()),
                            link_connect_timeout(timeout)
                        ));
                    }
                }
                let name = format!("roundtrip_{tag}");
                let remote_single = "SELECT clock_timestamp(), NULL::text".to_string();
                let remote_multi = format!(
                    "SELECT clock_timestamp(), rpad('X', {row_bytes}, 'X') FROM generate_series(1, {rows})"
                );
                Ok(LinkSession {
                    runner: session,
                    pg_link_text,
                    single_sql: remote_single,
                    multi_sql: (rows > 0).then_some(remote_multi),
                    backend: Backend::Pg {
                        name,
                        schema: s.clone(),
                    },
                    target: target.clone(),
                    addr,
                    proto,
                    timeout,
                    method: format!(
                        "dblink {version} (schema {schema}), timed with clock_timestamp() in a pg_temp function"
                    ),
                    notes,
                    rows,
                    requests_per_call: 1,
                })
            }
            Scheme::Mysql => {
                if !matches!(target.kind, Kind::Url(_) | Kind::MyServer) {
                    return Err(link_err(
                        "a MySQL link needs a mysql:// TARGET or a CREATE SERVER name".into(),
                    ));
                }
                let Some(local_db) = local.database.as_ref().map(|d| d.replace('`', "``")) else {
                    return Err(DbError::Config(
                        "--link from MySQL/MariaDB needs the local database in the URL (mysql://USER@HOST/DATABASE): the scratch FEDERATED table goes there".into(),
                    ));
                };
                let during = "looking for the FEDERATED engine";
                let mariadb = server_version.is_some_and(|v| v.contains("MariaDB"));
                let support = |s: &mut Runner| -> Result<Option<String>, DbError> {
                    let (_, row) = s.query_row(
                        "SELECT SUPPORT FROM information_schema.ENGINES WHERE ENGINE = 'FEDERATED'",
                        during,
                    )?;
                    Ok(row.first().cloned().flatten())
                };
                let loaded = |v: &Option<String>| matches!(v.as_deref(), Some("YES" | "DEFAULT"));
                let mut engine = support(&mut session)?;
                if !loaded(&engine) {
                    let how = if mariadb {
                        "INSTALL SONAME 'ha_federatedx'"
                    } else {
                        "start mysqld with --federated (MySQL's FEDERATED engine is built in but disabled)"
                    };
                    if !create_extension || !mariadb {
                        return Err(link_err(format!(
                            "the FEDERATED{} engine is not loaded ({}): an administrator can {how}{}",
                            if mariadb { "X" } else { "" },
                            match engine.as_deref() {
                                None => "not in information_schema.ENGINES".to_string(),
                                Some(s) => format!("SUPPORT {s}"),
                            },
                            if mariadb && !create_extension {
                                "; (or run again with --create-extension to let roundtrip load it)"
                            } else {
                                ""
                            }
                        )));
                    }
                    session
                        .query_row(
                            "INSTALL SONAME 'ha_federatedx'",
                            "INSTALL SONAME 'ha_federatedx'",
                        )
                        .map_err(|e| link_err(format!("loading FEDERATEDX failed: {e}")))?;
                    engine = support(&mut session)?;
                    if !loaded(&engine) {
                        return Err(link_err(
                            "INSTALL SONAME 'ha_federatedx' succeeded but the FEDERATED engine is still not available".into(),
                        ));
                    }
                    notes.push(
                        "--create-extension: loaded FEDERATEDX (INSTALL SONAME 'ha_federatedx'; left loaded, UNINSTALL SONAME 'ha_federatedx' removes it)".into(),
                    );
                }
                // FEDERATEDX sends SHOW TABLE STATUS before each statement's SELECT (two round trips) unless
                // federated_pushdown hands the whole query over.
                let (_, pd) = session.query_row("SELECT @@global.federated_pushdown", during)?;
                let pushdown = matches!(pd.first().cloned().flatten().as_deref(), Some("1" | "ON"));
                if pushdown {
                    notes.push("federated_pushdown is ON: the requests per call were measured with it OFF (two), so the per-request figure assumes one".into());
                }
                let remote_table = format!("roundtrip_link_{tag}_remote");
                let table = format!("roundtrip_link_{tag}");
                let proc_name = format!("roundtrip_link_{tag}_call");
                // The far end: TARGET's URL, or what the CREATE SERVER entry holds (read as a result row, so
                // its password is in no statement text).
                let remote: Box<DbUrl> = match &target.kind {
                    Kind::Url(u) => u.clone(),
                    _ => Box::new(server_entry(&mut session, target)?),
                };
                // The remote scratch table, over roundtrip's own connection to the far end (on a thread of
                // its own: a Ctrl-C does not wait for it).
                let made = {
                    let (remote, remote_table, timeout) =
                        (remote.clone(), remote_table.clone(), timeout);
                    abandonable(
                        &session.cancel,
                        timeout,
                        move |given_up: &dyn Fn() -> bool| {
                            let mut rs =
                                open_direct(&remote, timeout).map_err(|e| Box::new((true, e)))?;
                            let r = (|| -> Result<(), DbError> {
                                rs.query(&format!(
                                "CREATE TABLE `{remote_table}` (id INT NOT NULL PRIMARY KEY, f LONGTEXT) ENGINE=InnoDB"
                            ))?;
                                rs.query(&format!("INSERT INTO `{remote_table}` VALUES (0, '')"))?;
                                if rows > 0 {
                                    if rows > 1000 {
                                        let _ = rs.query(&format!(
                                            "SET SESSION cte_max_recursion_depth = {}",
                                            rows + 1
                                        ));
                                    }
                                    rs.query(&format!(
                                    "INSERT INTO `{remote_table}` WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {rows}) SELECT n, REPEAT('X', {row_bytes}) FROM s"
                                ))?;
                                }
                                Ok(())
                            })();
                            if given_up() {
                                let _ = rs.query(&format!("DROP TABLE IF EXISTS `{remote_table}`"));
                            }
                            rs.close();
                            r.map_err(|e| Box::new((false, e)))
                        },
                    )
                };
                let made = match made {
                    None => return Err(session.stopped("creating the remote scratch table")),
                    Some(Err(b)) if b.0 => {
                        return Err(link_err(format!(
                            "roundtrip needs its own connection to {} to create the remote scratch table, and it failed: {}",
                            target.redacted(),
                            target.scrub(&b.1.to_string())
                        )));
                    }
                    Some(Err(b)) => Err(b.1),
                    Some(Ok(())) => Ok(()),
                };
                session
                    .cleanup
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remote = Some((
                    remote.clone(),
                    format!("DROP TABLE IF EXISTS `{remote_table}`"),
                ));
                let remote_url = remote.clone();
                let mut ls = LinkSession {
                    runner: session,
                    pg_link_text: None,
                    single_sql: format!("CALL `{proc_name}`(0, 0)"),
                    multi_sql: (rows > 0).then(|| format!("CALL `{proc_name}`(1, {rows})")),
                    backend: Backend::My {
                        table: table.clone(),
                        proc_name: proc_name.clone(),
                        remote_table: remote_table.clone(),
                        remote: remote_url,
                    },
                    target: target.clone(),
                    addr,
                    proto,
                    timeout,
                    method: format!(
                        "FEDERATED{} table -> {}/{remote_table}, timed with SYSDATE(6) in a scratch procedure",
                        if mariadb { "X" } else { "" },
                        target.label()
                    ),
                    notes,
                    rows,
                    requests_per_call: if pushdown { 1 } else { 2 },
                };
                if let Err(e) = made {
                    ls.cleanup();
                    return Err(link_err(format!(
                        "creating the remote scratch table {remote_table} at {} failed: {}",
                        target.redacted(),
                        target.scrub(&e.to_string())
                    )));
                }
                // A CREATE SERVER entry keeps the password out of the statement; a URL's password goes into
                // CONNECTION (DDL takes no parameters): the process list, the general log and the binlog
                // see it (the CLI warns).
                let conn = match &target.kind {
                    Kind::MyServer => format!("{}/{remote_table}", target.text.expose()),
                    _ => format!(
                        "mysql://{}{}@{}:{}/{}/{remote_table}",
                        remote.user(),
                        remote
                            .password
                            .as_ref()
                            .map(|p| format!(":{}", p.expose()))
                            .unwrap_or_default(),
                        remote.host,
                        remote.port(),
                        remote.database.clone().unwrap_or_default()
                    ),
                };
                {
                    let mut c = ls.runner.cleanup.lock().unwrap_or_else(|p| p.into_inner());
                    c.local.push(format!(
                        "DROP PROCEDURE IF EXISTS `{local_db}`.`{proc_name}`"
                    ));
                    c.local
                        .push(format!("DROP TABLE IF EXISTS `{local_db}`.`{table}`"));
                }
                let steps = [
                    format!(
                        "CREATE TABLE `{local_db}`.`{table}` (id INT NOT NULL, f LONGTEXT, PRIMARY KEY (id)) ENGINE=FEDERATED CONNECTION={}",
                        mysql_string(&conn)
                    ),
                    format!(
                        "CREATE PROCEDURE `{local_db}`.`{proc_name}`(IN lo INT, IN hi INT) BEGIN
  DECLARE b DATETIME(6); DECLARE e DATETIME(6); DECLARE n BIGINT; DECLARE nb BIGINT;
  SET b = SYSDATE(6);
  SELECT COUNT(*), COALESCE(SUM(LENGTH(f)), 0) INTO n, nb FROM `{local_db}`.`{table}` WHERE id BETWEEN lo AND hi;
  SET e = SYSDATE(6);
  SELECT CAST(UNIX_TIMESTAMP(b) * 1000000 AS SIGNED), CAST(UNIX_TIMESTAMP(e) * 1000000 AS SIGNED), n, nb;
END"
                    ),
                ];
                for sql in &steps {
                    if let Err(e) = ls.runner.query(sql) {
                        ls.cleanup();
                        return Err(link_err(format!(
                            "creating the scratch FEDERATED table and procedure failed: {}",
                            target.scrub(&e.to_string())
                        )));
                    }
                }
                ls.single_sql = format!("CALL `{local_db}`.`{proc_name}`(0, 0)");
                ls.multi_sql =
                    (rows > 0).then(|| format!("CALL `{local_db}`.`{proc_name}`(1, {rows})"));
                Ok(ls)
            }
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
