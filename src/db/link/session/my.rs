//! The MySQL/MariaDB preparation: the FEDERATED(X) engine (found, or loaded under `--create-extension`), the
//! remote scratch table over roundtrip's own connection, and the local FEDERATED table and procedure that
//! time a call through it.

use super::{
    Backend, LinkSession, Prep, Runner, abandonable, link_error, mysql_string, open_direct,
    server_entry,
};
use crate::db::link::target::Kind;
use crate::db::{DbError, DbUrl};

/// Prepares a MySQL/MariaDB session for FEDERATED(X) calls ([`LinkSession::prepare`]).
pub(super) fn prepare(p: Prep<'_>) -> Result<LinkSession, DbError> {
    let mut session = p.runner;
    let (target, local, addr, proto, timeout) = (p.target, p.local, p.addr, p.proto, p.timeout);
    let (rows, row_bytes, create_extension, tag) = (p.rows, p.row_bytes, p.create_extension, p.tag);
    let server_version = p.server_version;
    let link_err = link_error(proto, addr);
    let mut notes = Vec::new();
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
        let (remote, remote_table, timeout) = (remote.clone(), remote_table.clone(), timeout);
        abandonable(
            &session.cancel,
            timeout,
            move |given_up: &dyn Fn() -> bool| {
                let mut rs = open_direct(&remote, timeout).map_err(|e| Box::new((true, e)))?;
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
    ls.multi_sql = (rows > 0).then(|| format!("CALL `{local_db}`.`{proc_name}`(1, {rows})"));
    Ok(ls)
}
