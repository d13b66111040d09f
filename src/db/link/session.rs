//! The local session prepared for link calls ([`LinkSession`]): the dblink function (PostgreSQL) or the
//! scratch FEDERATED(X) table and procedure (MySQL/MariaDB), the calls through them, and their cleanup.

use super::target::Kind;
use super::{LinkCall, LinkTarget};
use crate::db::{DbError, DbUrl, Scheme, Session, random_tag};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// A dollar-quoted PostgreSQL literal whose tag does not occur in `s`.
fn dollar(s: &str) -> String {
    let mut tag = "rt".to_string();
    while s.contains(&format!("${tag}$")) {
        tag.push('x');
    }
    format!("${tag}${s}${tag}$")
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
    session: Box<dyn Session + Send>,
    backend: Backend,
    target: LinkTarget,
    addr: SocketAddr,
    proto: &'static str,
    single_sql: String,
    multi_sql: Option<String>,
    timeout: Duration,
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
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn prepare(
        mut session: Box<dyn Session + Send>,
        scheme: Scheme,
        server_version: Option<&str>,
        local: &DbUrl,
        target: &LinkTarget,
        addr: SocketAddr,
        rows: u64,
        row_bytes: u64,
        create_extension: bool,
        timeout: Duration,
    ) -> Result<LinkSession, DbError> {
        let proto = scheme.name();
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
                let name = format!("roundtrip_{tag}");
                let remote_single = "SELECT clock_timestamp(), NULL::text".to_string();
                let remote_multi = format!(
                    "SELECT clock_timestamp(), rpad('X', {row_bytes}, 'X') FROM generate_series(1, {rows})"
                );
                Ok(LinkSession {
                    session,
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
                let Kind::Url(remote) = &target.kind else {
                    return Err(link_err("a MySQL link needs a mysql:// TARGET".into()));
                };
                let Some(local_db) = local.database.as_ref().map(|d| d.replace('`', "``")) else {
                    return Err(DbError::Config(
                        "--link from MySQL/MariaDB needs the local database in the URL (mysql://USER@HOST/DATABASE): the scratch FEDERATED table goes there".into(),
                    ));
                };
                let during = "looking for the FEDERATED engine";
                let mariadb = server_version.is_some_and(|v| v.contains("MariaDB"));
                let support = |s: &mut Box<dyn Session + Send>| -> Result<Option<String>, DbError> {
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
                // The remote scratch table, over roundtrip's own connection to TARGET.
                let mut rs = open_direct(remote, timeout).map_err(|e| {
                    link_err(format!(
                        "roundtrip needs its own connection to {} to create the remote scratch table, and it failed: {}",
                        target.redacted(),
                        target.scrub(&e.to_string())
                    ))
                })?;
                let made = (|| -> Result<(), DbError> {
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
                rs.close();
                let remote_url = remote.clone();
                let mut ls = LinkSession {
                    session,
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
                let conn = format!(
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
                );
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
                    if let Err(e) = ls.session.query(sql) {
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

    fn run_call(&mut self, sql: &str, during: &str) -> Result<LinkCall, DbError> {
        let t0 = Instant::now();
        let (_f, row) = self
            .session
            .query_row(sql, during)
            .map_err(|e| self.explain(e))?;
        let client = t0.elapsed();
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

    /// The first call: opens the link, then one single-row round trip through it.
    pub fn open_link(&mut self) -> Result<LinkCall, DbError> {
        let sql = match &self.backend {
            Backend::Pg { name, .. } => format!(
                "SELECT * FROM pg_temp.roundtrip_link_open({}, {}, {})",
                dollar(self.target.text.expose()),
                dollar(name),
                dollar(&self.single_sql)
            ),
            Backend::My { .. } => self.single_sql.clone(),
        };
        self.run_call(&sql, "opening the link (first call)")
    }

    /// One single-row round trip through the open link.
    pub fn call(&mut self) -> Result<LinkCall, DbError> {
        let sql = self.call_sql(false);
        self.run_call(&sql, "a call through the link")
    }

    /// One multi-row call through the open link (None when there are no rows to fetch).
    pub fn call_multi(&mut self) -> Option<Result<LinkCall, DbError>> {
        self.multi_sql.as_ref()?;
        let sql = self.call_sql(true);
        Some(self.run_call(&sql, "a multi-row call through the link"))
    }

    fn call_sql(&self, multi: bool) -> String {
        let q = if multi {
            self.multi_sql.clone().unwrap_or_default()
        } else {
            self.single_sql.clone()
        };
        match &self.backend {
            Backend::Pg { name, .. } => format!(
                "SELECT * FROM pg_temp.roundtrip_link_call({}, {})",
                dollar(name),
                dollar(&q)
            ),
            Backend::My { .. } => q,
        }
    }

    /// The client -> local database protocol ping on the same session.
    pub fn ping(&mut self) -> Result<Duration, DbError> {
        let t0 = Instant::now();
        self.session.ping()?;
        Ok(t0.elapsed())
    }

    /// Closes the link and removes the scratch objects (errors ignored; a temporary function goes with the
    /// session anyway).
    pub fn cleanup(&mut self) {
        match &self.backend {
            Backend::Pg { name, schema } => {
                let _ = self.session.query(&format!(
                    "SELECT {schema}.dblink_disconnect({n}) WHERE {n} = ANY ({schema}.dblink_get_connections())",
                    n = dollar(name)
                ));
            }
            Backend::My {
                table,
                proc_name,
                remote_table,
                remote,
            } => {
                let _ = self
                    .session
                    .query(&format!("DROP PROCEDURE IF EXISTS `{proc_name}`"));
                let _ = self
                    .session
                    .query(&format!("DROP TABLE IF EXISTS `{table}`"));
                if let Ok(mut rs) = open_direct(remote, self.timeout) {
                    let _ = rs.query(&format!("DROP TABLE IF EXISTS `{remote_table}`"));
                    rs.close();
                }
            }
        }
    }

    /// Cleans up and says goodbye.
    pub fn close(mut self) {
        self.cleanup();
        self.session.close();
    }
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
