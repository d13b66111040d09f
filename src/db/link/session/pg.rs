//! The PostgreSQL preparation: the dblink extension (found, or created under `--create-extension`) and
//! the two `pg_temp` functions that time a call through it.

use super::{Backend, LinkSession, Prep, link_connect_timeout, link_error, quote_ident};
use crate::db::DbError;

/// Prepares a PostgreSQL session for dblink calls ([`LinkSession::prepare`]).
pub(super) fn prepare(p: Prep<'_>) -> Result<LinkSession, DbError> {
    let mut session = p.runner;
    let (target, addr, proto, timeout) = (p.target, p.addr, p.proto, p.timeout);
    let (rows, row_bytes, create_extension, tag) = (p.rows, p.row_bytes, p.create_extension, p.tag);
    let link_err = link_error(proto, addr);
    let mut notes = Vec::new();
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
                return Err(link_err("CREATE EXTENSION dblink did not create it".into()));
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
    let pg_link_text = target.pg_text_with_connect_timeout(link_connect_timeout(timeout));
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
