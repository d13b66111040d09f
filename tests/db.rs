//! `roundtrip db` against the real PostgreSQL, MariaDB and Redis on this machine, in-test fake servers that
//! speak the real message formats (PostgreSQL password methods, an Oracle listener), and misbehaving peers.
//!
//! Table-driven: what differs between the databases is in one table ([`PG`], [`MARIADB`], [`REDIS`]), each
//! behaviour is written once, and [`cases!`] makes one `#[test]` per database (or scheme, or mode) so a
//! failure names the one it failed for: `full_run::redis`, `killed_mid_run::mariadb`, ...

mod common;

use common::db::{
    Cleanup, Out, assert_secret_absent, json_of, mariadb, psql, redis_cli, run, self_signed, sh,
    tag, wait_for_port,
};
use common::procs::Kill;

/// The command with no database variables inherited from the caller.
fn rt() -> Command {
    common::db::rt(Duration::from_secs(120))
}

use assert_cmd::Command;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// One `#[test]` per case: `cases!(behaviour { name: case, ... })` makes the tests `behaviour::name`, each
/// calling `behaviour(case)`, so a failure names the database (scheme, mode) it failed for.
macro_rules! cases {
    ($behaviour:ident { $($name:ident: $case:expr),+ $(,)? }) => {
        mod $behaviour {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                fn $name() {
                    super::$behaviour($case)
                }
            )+
        }
    };
}

// ---------------------------------------------------------------- the databases on this machine

/// A database server on this machine (.ci/run starts them) and what differs between them.
struct Db {
    /// Its name in skip messages.
    name: &'static str,
    /// The URL scheme.
    scheme: &'static str,
    port: u16,
    /// As a user without a password (the superuser) on the test database.
    url: &'static str,
    /// The database part of a URL: the test database.
    path: &'static str,
    /// A database that does not exist there.
    missing_db_url: &'static str,
    /// A URL completed by environment variables, and those variables (a text run relies on them).
    env_url: (&'static str, &'static [(&'static str, &'static str)]),
    /// A singleton query in its language, and the text summary's protocol ping row.
    query: &'static str,
    ping_row: &'static str,
    /// Sizes of the full run: iterations, rows, `--row-bytes` as typed, and as a number.
    sizes: (u64, u64, &'static str, u64),
    /// The server_version is this server's.
    version_ok: fn(&str) -> bool,
    /// What the fetch left behind on the server (must be nothing).
    leftovers: fn() -> String,
    /// Makes a login user with a password for the test's life (dropped with the returned guard).
    make_user: fn(user: &str, password: &str) -> Cleanup,
    /// The user has a session open on the server now.
    has_session: fn(user: &str) -> bool,
    /// Ends every session of the user from the server side.
    kill_sessions: fn(user: &str),
}

impl Db {
    /// True when it runs here (a failure under CI, a skip elsewhere).
    fn up(&self) -> bool {
        common::service_up(self.port, self.name)
    }

    /// `scheme://user[:password]@127.0.0.1{path}`.
    fn user_url(&self, user: &str, password: Option<&str>) -> String {
        let pw = password.map(|p| format!(":{p}")).unwrap_or_default();
        format!("{}://{user}{pw}@127.0.0.1{}", self.scheme, self.path)
    }
}

const PG: Db = Db {
    name: "PostgreSQL",
    scheme: "postgres",
    port: 5432,
    url: "postgres://postgres@127.0.0.1/test?sslmode=disable",
    path: "/test",
    missing_db_url: "postgres://postgres@127.0.0.1/no_such_db_rt",
    env_url: (
        "postgres://127.0.0.1",
        &[("PGUSER", "postgres"), ("PGDATABASE", "test")],
    ),
    query: "SELECT now()",
    ping_row: "protocol ping (empty query)",
    sizes: (5, 20, "300", 300),
    version_ok: |v| v.starts_with(char::is_numeric),
    leftovers: String::new,
    make_user: |role, pw| {
        psql("test", &format!("CREATE ROLE {role} LOGIN PASSWORD '{pw}'"));
        let role = role.to_string();
        Cleanup(Box::new(move || {
            common::db::psql_ok(&format!("DROP ROLE IF EXISTS {role}"));
        }))
    },
    has_session: |role| {
        psql(
            "test",
            &format!("SELECT count(*) FROM pg_stat_activity WHERE usename = '{role}'"),
        )
        .trim()
            == "1"
    },
    kill_sessions: |role| {
        psql(
            "test",
            &format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'"
            ),
        );
    },
};

const MARIADB: Db = Db {
    name: "MariaDB",
    scheme: "mysql",
    port: 3306,
    url: "mysql://root@127.0.0.1/test",
    path: "/test",
    missing_db_url: "mysql://root@127.0.0.1/no_such_db_rt",
    env_url: ("mysql://root@127.0.0.1/test", &[]),
    query: "SELECT now()",
    ping_row: "protocol ping (COM_PING)",
    sizes: (4, 50, "1k", 1024),
    version_ok: |v| v.contains("MariaDB"),
    leftovers: String::new,
    make_user: |user, pw| {
        mariadb(&format!(
            "CREATE USER '{user}'@'%' IDENTIFIED BY '{pw}'; CREATE USER '{user}'@'localhost' IDENTIFIED BY '{pw}'; \
             GRANT SELECT ON test.* TO '{user}'@'%'; GRANT SELECT ON test.* TO '{user}'@'localhost';"
        ));
        let user = user.to_string();
        Cleanup(Box::new(move || {
            let _ = std::process::Command::new("mariadb")
                .args([
                    "-h127.0.0.1",
                    "-uroot",
                    "-e",
                    &format!("DROP USER IF EXISTS '{user}'@'%', '{user}'@'localhost'"),
                ])
                .status();
        }))
    },
    has_session: |user| !mariadb(&mariadb_sessions(user)).trim().is_empty(),
    kill_sessions: |user| {
        for id in mariadb(&mariadb_sessions(user)).split_whitespace() {
            let _ = std::process::Command::new("mariadb")
                .args(["-h127.0.0.1", "-uroot", "-e", &format!("KILL {id}")])
                .status();
        }
    },
};

/// The query listing the ids of `user`'s MariaDB sessions.
fn mariadb_sessions(user: &str) -> String {
    format!("SELECT id FROM information_schema.processlist WHERE user = '{user}'")
}

const REDIS: Db = Db {
    name: "Redis",
    scheme: "redis",
    port: 6379,
    url: "redis://127.0.0.1",
    path: "/0",
    missing_db_url: "redis://127.0.0.1/999",
    env_url: ("redis://127.0.0.1", &[]),
    query: "TIME",
    ping_row: "protocol ping (PING)",
    sizes: (4, 30, "200", 200),
    version_ok: |v| v.starts_with(char::is_numeric),
    // The temporary list is gone.
    leftovers: || redis_cli(&["--scan", "--pattern", "roundtrip:db:fetch:*"]),
    make_user: |user, pw| {
        redis_cli(&[
            "ACL",
            "SETUSER",
            user,
            "on",
            &format!(">{pw}"),
            "~*",
            "+@all",
        ]);
        let user = user.to_string();
        Cleanup(Box::new(move || {
            let _ = std::process::Command::new("redis-cli")
                .args(["-h", "127.0.0.1", "ACL", "DELUSER", &user])
                .status();
        }))
    },
    has_session: |user| redis_cli(&["CLIENT", "LIST"]).contains(&format!("user={user} ")),
    kill_sessions: |user| {
        redis_cli(&["CLIENT", "KILL", "USER", user]);
    },
};

// ---------------------------------------------------------------- behaviours on every real server

cases!(full_run {
    postgres: &PG,
    mariadb: &MARIADB,
    redis: &REDIS
});

/// A JSON run on fresh connections and one kept connection, with a full log of every operation.
fn full_run(db: &Db) {
    if !db.up() {
        return;
    }
    let (n, rows, row_bytes_arg, row_bytes) = db.sizes;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ops.csv");
    let o = run(rt().args([
        "db",
        db.url,
        "--json",
        "--connects",
        "2",
        "-c",
        &n.to_string(),
        "--rows",
        &rows.to_string(),
        "--row-bytes",
        row_bytes_arg,
        "--full-log",
        log.to_str().unwrap(),
    ]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let j = json_of(&o);
    assert_eq!(j["format"], "roundtrip");
    assert_eq!(j["kind"], "db");
    assert_eq!(j["settings"]["scheme"], db.scheme);
    assert_eq!(j["connects_ok"], 2);
    assert_eq!(j["phases"]["tcp_handshake"]["count"], 2);
    assert_eq!(j["phases"]["startup"]["count"], 2);
    assert_eq!(j["phases"]["first_query"]["count"], 2);
    assert_eq!(j["ping"]["count"], n);
    assert_eq!(j["query"]["count"], n);
    assert_eq!(j["fetch"]["summary"]["count"], n);
    assert_eq!(j["fetch"]["bytes_total"], n * rows * row_bytes);
    let version = j["server_version"].as_str().unwrap();
    assert!((db.version_ok)(version), "{version}");
    assert!(j["attribution"]["network_ns"].as_u64().unwrap() > 0);
    assert!(j["error"].is_null());
    assert_eq!((db.leftovers)().trim(), "");
    let csv = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "op,seq,start_s,duration_ns,rows,bytes");
    // 2 x (dns, tcp, startup, first query) + n x (ping, query, fetch).
    assert_eq!(lines.len() - 1, 2 * 4 + n as usize * 3, "{csv}");
    let last_fetch = format!("fetch,{},", n - 1);
    let last_rows = format!(",{rows},{}", rows * row_bytes);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&last_fetch) && l.ends_with(&last_rows)),
        "{csv}"
    );
}

cases!(text_summary {
    postgres: &PG,
    mariadb: &MARIADB,
    redis: &REDIS
});

/// The text summary of a run with the user's own query and no fetch, its URL completed by the environment.
fn text_summary(db: &Db) {
    if !db.up() {
        return;
    }
    let (url, env) = db.env_url;
    let mut c = rt();
    for (k, v) in env {
        c.env(k, v);
    }
    let o = run(c.args([
        "db",
        url,
        "-c",
        "3",
        "--connects",
        "1",
        "--query",
        db.query,
        "--rows",
        "0",
    ]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let query_row = format!("query ({})", db.query);
    for want in [
        "tcp handshake",
        "startup + auth",
        db.ping_row,
        &query_row,
        "attribution (medians)",
    ] {
        assert!(o.stdout.contains(want), "missing {want}:\n{}", o.stdout);
    }
    assert!(!o.stdout.contains("fetch ("));
    // The answer opens the result: the line after the command's heading.
    let answer = o.stdout.lines().nth(1).unwrap_or_default();
    assert!(
        answer.starts_with("of the ") && answer.contains(" median query round trip, "),
        "the second line is not the answer:\n{}",
        o.stdout
    );
}

/// `roundtrip db redis://127.0.0.1:6379` opens with the answer, and its HTML report carries the same
/// sentence, the attribution line, the server's version and the notes its text shows.
#[test]
fn answer_leads_text_and_html() {
    if !REDIS.up() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("db.html");
    let o = run(rt().args([
        "db",
        "redis://127.0.0.1:6379",
        "-c",
        "20",
        "--connects",
        "2",
        "--report",
        html.to_str().unwrap(),
    ]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert!(
        lines[0].starts_with("roundtrip db redis://127.0.0.1:6379 (Redis);"),
        "{}",
        o.stdout
    );
    assert!(
        lines[1].starts_with("of the ") && lines[1].contains(" median query round trip, "),
        "{}",
        o.stdout
    );
    let page = std::fs::read_to_string(&html).unwrap();
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('\'', "&#39;")
            .replace('"', "&quot;")
    };
    assert!(
        page.contains(&format!("<p class=\"answer\">{}</p>", esc(lines[1]))),
        "the page lacks the answer {}",
        lines[1]
    );
    for l in lines
        .iter()
        .filter(|l| l.starts_with("attribution (medians)") || l.starts_with("note: "))
    {
        assert!(page.contains(&esc(l)), "the page lacks {l}");
    }
    let version = lines
        .iter()
        .find_map(|l| l.strip_prefix("--- Redis at 127.0.0.1:6379, server "))
        .and_then(|r| r.split(',').next())
        .unwrap();
    assert!(
        page.contains(&format!("<td>{version}</td>")),
        "the page lacks the version {version}"
    );
}

cases!(password_user {
    mariadb: (&MARIADB, "MYSQL_PWD", "1045"),
    redis: (&REDIS, "REDISCLI_AUTH", "WRONGPASS")
});

/// A user with a password: in the URL (shown redacted), from the environment variable `env`, and a wrong one
/// (refused with the server's `code`); the password never appears in any output. (PostgreSQL here trusts
/// 127.0.0.1: its password methods are tested against a fake server below.)
fn password_user((db, env, code): (&Db, &str, &str)) {
    if !db.up() {
        return;
    }
    let user = format!("rt_pw_{}", tag());
    let pw = format!("Pw-{}-x9", std::process::id());
    let _drop = (db.make_user)(&user, &pw);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ops.csv");
    // Password in the URL.
    let ok = run(rt().args([
        "db",
        &db.user_url(&user, Some(&pw)),
        "-c",
        "2",
        "--connects",
        "1",
        "--rows",
        "3",
        "--full-log",
        log.to_str().unwrap(),
    ]));
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    let redacted = format!(
        "{}://{user}:***@127.0.0.1:{}{}",
        db.scheme, db.port, db.path
    );
    assert!(ok.stdout.contains(&redacted), "{redacted}: {}", ok.stdout);
    let csv = std::fs::read_to_string(&log).unwrap();
    // Password from the environment, JSON output.
    let from_env = run(rt().env(env, &pw).args([
        "db",
        &db.user_url(&user, None),
        "--json",
        "-c",
        "1",
        "--connects",
        "1",
        "--rows",
        "0",
    ]));
    assert_eq!(from_env.code, 0, "{}", from_env.stderr);
    // Wrong password.
    let bad_pw = format!("{pw}-wrong");
    let bad = run(rt().args([
        "db",
        &db.user_url(&user, Some(&bad_pw)),
        "--json",
        "-c",
        "1",
    ]));
    assert_eq!(bad.code, 1);
    assert!(
        bad.stderr.contains(&format!("rejected user '{user}'")),
        "{}",
        bad.stderr
    );
    assert!(bad.stderr.contains(code), "{}", bad.stderr);
    assert_eq!(bad.stderr.lines().count(), 1, "{}", bad.stderr);
    let j = json_of(&bad);
    assert!(j["error"].as_str().unwrap().contains("rejected user"));
    assert_secret_absent(
        &pw,
        &[
            &ok.stdout,
            &ok.stderr,
            &csv,
            &from_env.stdout,
            &from_env.stderr,
            &bad.stdout,
            &bad.stderr,
        ],
    );
}

cases!(unknown_database {
    postgres: &PG,
    mariadb: &MARIADB,
    redis: &REDIS
});

/// A database that does not exist: one error line and, as no connection was set up, no table of dashes.
fn unknown_database(db: &Db) {
    if !db.up() {
        return;
    }
    let url = db.missing_db_url;
    let o = run(rt().args(["db", url, "-c", "1"]));
    assert_eq!(o.code, 1, "{url}");
    assert!(o.stderr.contains("has no database"), "{url}: {}", o.stderr);
    assert!(o.stderr.starts_with("roundtrip: error:"), "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "{url}: {}", o.stderr);
    // No connection was set up: the heading line alone, no table around one TCP handshake.
    assert!(
        !o.stdout.contains("connection setup") && o.stdout.lines().count() == 1,
        "{url}: {}",
        o.stdout
    );
}

cases!(killed_mid_run {
    postgres: &PG,
    mariadb: &MARIADB,
    redis: &REDIS
});

/// The server ends the session in the middle of a run: one error line, the partial results kept.
fn killed_mid_run(db: &Db) {
    if !db.up() {
        return;
    }
    const PW: &str = "killme";
    let user = format!("rt_kill_{}", tag());
    let _drop = (db.make_user)(&user, PW);
    let child = spawn_rt(&[
        "db",
        &db.user_url(&user, Some(PW)),
        "--connects",
        "1",
        "-c",
        "100000",
        "-i",
        "5ms",
        "--rows",
        "0",
    ]);
    let o = kill_mid_run(
        child,
        || (db.has_session)(&user),
        || (db.kill_sessions)(&user),
    );
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("closed the connection"), "{}", o.stderr);
    assert!(
        o.stdout.contains("on one connection ("),
        "partial results:\n{}",
        o.stdout
    );
    assert!(!o.stderr.contains(PW) && !o.stdout.contains(PW));
}

fn spawn_rt(args: &[&str]) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_roundtrip"))
        .args(args)
        .env_remove("PGPASSWORD")
        .env_remove("MYSQL_PWD")
        .env_remove("REDISCLI_AUTH")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until `seen()` is true, kills the session with `kill()`, and returns the finished run's output.
fn kill_mid_run(mut child: std::process::Child, seen: impl Fn() -> bool, kill: impl Fn()) -> Out {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !seen() {
        assert!(
            Instant::now() < deadline,
            "the session never showed up on the server"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Let a few iterations complete first, so there are partial results to keep.
    std::thread::sleep(Duration::from_millis(500));
    kill();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("roundtrip db did not stop after its session was killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    Out {
        code: child.wait().unwrap().code().unwrap_or(-1),
        stdout,
        stderr,
    }
}

// ---------------------------------------------------------------- TLS

cases!(tls_not_offered {
    postgres: || {
        // A PostgreSQL server that answers SSLRequest with 'N'.
        let fake = FakePg::start(FakeAuth::Trust, "");
        Some((
            format!("postgres://u@127.0.0.1:{}/d?sslmode=require", fake.port),
            "sslmode=require",
        ))
    },
    mariadb: || MARIADB.up().then(|| (
        "mysql://root@127.0.0.1/test?ssl-mode=REQUIRED".to_string(),
        ""
    )),
    redis: || REDIS.up().then(|| ("rediss://127.0.0.1".to_string(), "")),
});

/// TLS required from a server that does not offer it: refused, naming the setting when `also` says so.
fn tls_not_offered(server: fn() -> Option<(String, &'static str)>) {
    let Some((url, also)) = server() else {
        return;
    };
    let o = run(rt().args(["db", &url, "-c", "1"]));
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains("does not offer TLS") && o.stderr.contains(also),
        "{}",
        o.stderr
    );
}

/// A server offering TLS, for [`tls_offered`].
struct TlsServer {
    /// Kept until the test ends (a server process, then its folder).
    _keep: Vec<Box<dyn std::any::Any>>,
    /// A URL asking for TLS without verifying the certificate, and the `ssl_mode` it shows.
    require: String,
    ssl_mode: &'static str,
    /// A URL verifying the certificate and the name, which fails here, and what the error says.
    verify: String,
    verify_error: &'static [&'static str],
    /// A URL without TLS, and whether it works (then no TLS phase) or fails (the port speaks only TLS).
    plain: String,
    plain_works: bool,
    /// Checks only this server has.
    more: Box<dyn Fn()>,
}

cases!(tls_offered {
    postgres: local_postgres_tls,
    mariadb: mariadb_started_with_tls,
    redis: redis_started_with_tls,
});

/// Runs asking for TLS (a TLS phase per connection), verifying (refused: nobody trusts the certificate or it
/// names someone else), and without TLS.
fn tls_offered(server: fn() -> Option<TlsServer>) {
    let Some(s) = server() else {
        return;
    };
    let o = run(rt().args([
        "db",
        &s.require,
        "-c",
        "3",
        "--connects",
        "2",
        "--rows",
        "5",
        "--json",
    ]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let j = json_of(&o);
    assert_eq!(j["phases"]["tls"]["count"], 2);
    assert_eq!(j["settings"]["ssl_mode"], s.ssl_mode);
    assert!(j["notes"].to_string().contains("TLS"), "{j}");
    assert_eq!(j["ping"]["count"], 3);
    assert_eq!(j["fetch"]["bytes_total"], 3 * 5 * 1000);
    let o = run(rt().args(["db", &s.verify, "-c", "1"]));
    assert_eq!(o.code, 1);
    for want in s.verify_error {
        assert!(o.stderr.contains(want), "{want}: {}", o.stderr);
    }
    if s.plain_works {
        let o = run(rt().args(["db", &s.plain, "-c", "1", "--json"]));
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert_eq!(json_of(&o)["phases"]["tls"]["count"], 0);
    } else {
        let o = run(rt().args(["db", &s.plain, "-c", "1", "--timeout", "3s"]));
        assert_eq!(o.code, 1);
    }
    (s.more)();
}

/// The PostgreSQL on this machine, when it offers TLS (here: Debian's snakeoil certificate, issued to
/// "localhost"); when it does not, checks the error instead and returns None.
fn local_postgres_tls() -> Option<TlsServer> {
    if !PG.up() {
        return None;
    }
    let offers_tls = {
        let mut s = TcpStream::connect(("127.0.0.1", PG.port)).unwrap();
        s.write_all(&[0, 0, 0, 8, 4, 210, 22, 47]).unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        b[0] == b'S'
    };
    let require = "postgres://postgres@127.0.0.1/test?sslmode=require".to_string();
    if !offers_tls {
        eprintln!("NOTE: this PostgreSQL does not offer TLS; checking the error instead");
        let o = run(rt().args(["db", &require, "-c", "3", "--connects", "2", "--json"]));
        assert_eq!(o.code, 1);
        assert!(o.stderr.contains("does not offer TLS"), "{}", o.stderr);
        return None;
    }
    Some(TlsServer {
        _keep: Vec::new(),
        require,
        ssl_mode: "require",
        // verify-full checks the name: no certificate is issued to 127.0.0.1.
        verify: "postgres://postgres@127.0.0.1/test?sslmode=verify-full".into(),
        verify_error: &["TLS with PostgreSQL at 127.0.0.1:5432 failed"],
        // disable: no SSLRequest, no TLS row.
        plain: PG.url.into(),
        plain_works: true,
        more: Box::new(|| {}),
    })
}

/// A Redis started here on a TLS-only port with a self-signed certificate.
fn redis_started_with_tls() -> Option<TlsServer> {
    if !common::have("redis-server") || !common::have("openssl") {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let port = common::free_port();
    let child = std::process::Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-auth-clients",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            dir.path().to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let kill = Kill(child);
    wait_for_port(port);
    Some(TlsServer {
        _keep: vec![Box::new(kill), Box::new(dir)],
        require: format!("rediss://127.0.0.1:{port}?sslmode=require"),
        ssl_mode: "require",
        // rediss:// verifies by default, and this certificate is signed by nobody the platform trusts.
        verify: format!("rediss://localhost:{port}"),
        verify_error: &["TLS with Redis", "certificate"],
        // The same server spoken to without TLS: it is a TLS port, the answer is not RESP.
        plain: format!("redis://127.0.0.1:{port}"),
        plain_works: false,
        more: Box::new(|| {}),
    })
}

/// A MariaDB started here with a self-signed certificate, a password user `app` and an ed25519 user `ed`.
fn mariadb_started_with_tls() -> Option<TlsServer> {
    if !common::have("mariadb-install-db") || !common::have("mariadbd") || !common::have("openssl")
    {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let data = dir.path().join("data");
    let data_s = data.to_str().unwrap().to_string();
    sh(
        "mariadb-install-db",
        &[
            "--no-defaults",
            &format!("--datadir={data_s}"),
            "--user=root",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ],
    );
    let port = common::free_port();
    let sock = dir.path().join("sock").display().to_string();
    let child = std::process::Command::new("mariadbd")
        .args([
            "--no-defaults".to_string(),
            format!("--datadir={data_s}"),
            format!("--port={port}"),
            "--bind-address=127.0.0.1".into(),
            format!("--socket={sock}"),
            format!("--pid-file={}", dir.path().join("pid").display()),
            "--user=root".into(),
            format!("--ssl-cert={cert}"),
            format!("--ssl-key={key}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let kill = Kill(child);
    wait_for_port(port);
    // root over the socket (no password there): a password user, and one whose plugin roundtrip lacks.
    let admin = move |sql: &str| {
        sh(
            "mariadb",
            &[
                "--no-defaults",
                &format!("--socket={sock}"),
                "-uroot",
                "-e",
                sql,
            ],
        )
    };
    let pw = "Tls-Pw-9";
    admin(&format!(
        "CREATE USER 'app'@'%' IDENTIFIED BY '{pw}'; GRANT ALL ON mysql.* TO 'app'@'%'; \
         INSTALL SONAME 'auth_ed25519'; CREATE USER 'ed'@'%' IDENTIFIED VIA ed25519 USING PASSWORD('{pw}');"
    ));
    let url = format!("mysql://app:{pw}@127.0.0.1:{port}/mysql");
    Some(TlsServer {
        _keep: vec![Box::new(kill), Box::new(dir)],
        require: format!("{url}?ssl-mode=REQUIRED"),
        ssl_mode: "require",
        // VERIFY_IDENTITY: self-signed, not trusted by the platform.
        verify: format!("{url}?ssl-mode=VERIFY_IDENTITY").replace("127.0.0.1", "localhost"),
        verify_error: &["TLS with MySQL"],
        // DISABLED: plain, no TLS phase.
        plain: format!("{url}?ssl-mode=DISABLED"),
        plain_works: true,
        more: Box::new(move || mariadb_tls_more(&admin, &url, port, pw)),
    })
}

/// The MariaDB-only checks on [`mariadb_started_with_tls`]: a wrong password inside TLS, an account on a
/// plugin roundtrip does not speak, and a server that demands TLS.
fn mariadb_tls_more(admin: &dyn Fn(&str) -> String, url: &str, port: u16, pw: &str) {
    // The wrong password inside TLS.
    let o = run(rt().args([
        "db",
        &format!("mysql://app:not-{pw}@127.0.0.1:{port}/mysql?ssl-mode=REQUIRED"),
        "-c",
        "1",
    ]));
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains("rejected user 'app'") && o.stderr.contains("1045"),
        "{}",
        o.stderr
    );
    // An account on client_ed25519 (MariaDB's ed25519 plugin): a real auth switch to a plugin roundtrip
    // does not speak.
    let o = run(rt().args([
        "db",
        &format!("mysql://ed:{pw}@127.0.0.1:{port}/mysql"),
        "-c",
        "1",
    ]));
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains(
            "asks for the authentication plugin 'client_ed25519', which roundtrip does not support"
        ),
        "{}",
        o.stderr
    );
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    // The server now demands TLS: plain connections get a one-line error naming the setting to use.
    admin("SET GLOBAL require_secure_transport = ON");
    let o = run(rt().args(["db", &format!("{url}?ssl-mode=DISABLED"), "-c", "1"]));
    assert_eq!(o.code, 1);
    // MariaDB 10.11 answers "Access denied" (1045), as for a wrong password: the error says TLS was turned
    // down although offered, and what to try.
    assert!(
        o.stderr.contains("rejected user 'app'") && o.stderr.contains("1045"),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr.contains(
            "this connection is not encrypted (ssl-mode=DISABLED) though the server offers TLS"
        ),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("try ssl-mode=REQUIRED"), "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    assert_secret_absent(pw, &[&o.stdout, &o.stderr]);
    let o = run(rt().args(["db", url, "-c", "1"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
}

// ---------------------------------------------------------------- every scheme, no server needed

cases!(refused_port {
    postgres: "postgres",
    mysql: "mysql",
    redis: "redis",
    oracle: "oracle"
});

/// Nothing listens: one error naming the address, and no document of empty histograms.
fn refused_port(scheme: &str) {
    let port = common::free_port();
    let o = run(rt().args([
        "db",
        &format!("{scheme}://127.0.0.1:{port}"),
        "-c",
        "1",
        "--json",
    ]));
    assert_eq!(o.code, 1, "{scheme}");
    assert!(
        o.stderr.contains("cannot connect") && o.stderr.contains(&format!("127.0.0.1:{port}")),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("refused"), "{}", o.stderr);
    // Nothing was measured: the error alone, no document of empty histograms.
    assert!(o.stdout.trim().is_empty(), "{scheme}: {}", o.stdout);
}

#[test]
fn bad_arguments_fail_before_any_io() {
    for args in [
        vec!["db", "http://x"],
        vec!["db", "postgres://u:topsecret@h/db?sslmode=maybe"],
        vec!["db", "postgres://h", "--rows", "many"],
        vec!["db", "postgres://h", "--row-bytes", "0"],
        vec!["db", "postgres://h", "-c", "0"],
        vec!["db", "postgres://h", "--timeout", "0s"],
    ] {
        let o = run(rt().args(&args));
        assert_ne!(o.code, 0, "{args:?}");
        assert!(!o.stderr.contains("topsecret"), "{}", o.stderr);
        assert!(o.stdout.is_empty(), "{args:?}: {}", o.stdout);
    }
}

// ---------------------------------------------------------------- fake PostgreSQL (password methods)

#[derive(Clone, Copy, PartialEq)]
enum FakeAuth {
    Trust,
    Cleartext,
    Md5,
    Scram,
}

struct FakePg {
    port: u16,
}

fn read_exact_vec(s: &mut TcpStream, n: usize) -> Option<Vec<u8>> {
    let mut b = vec![0u8; n];
    s.read_exact(&mut b).ok()?;
    Some(b)
}

/// A startup-phase message: length-prefixed, no tag.
fn read_untagged(s: &mut TcpStream) -> Option<Vec<u8>> {
    let l = read_exact_vec(s, 4)?;
    let n = u32::from_be_bytes([l[0], l[1], l[2], l[3]]) as usize;
    read_exact_vec(s, n.checked_sub(4)?)
}

fn read_tagged(s: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let t = read_exact_vec(s, 1)?[0];
    Some((t, read_untagged(s)?))
}

fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    v.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    v.extend_from_slice(body);
    v
}

fn auth(code: u32, extra: &[u8]) -> Vec<u8> {
    let mut b = code.to_be_bytes().to_vec();
    b.extend_from_slice(extra);
    msg(b'R', &b)
}

fn pg_error(code: &str, text: &str) -> Vec<u8> {
    msg(
        b'E',
        format!("SFATAL\0VFATAL\0C{code}\0M{text}\0\0").as_bytes(),
    )
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn hmac256(key: &[u8], data: &[u8]) -> Vec<u8> {
    use hmac::{KeyInit, Mac};
    let mut m = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(key).unwrap();
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// The server side of SCRAM-SHA-256, written from RFC 5802 independently of the client under test.
fn scram_server(s: &mut TcpStream, password: &str) -> Option<bool> {
    use base64::Engine;
    use sha2::Digest;
    let b64 = base64::engine::general_purpose::STANDARD;
    s.write_all(&auth(10, b"SCRAM-SHA-256\0\0")).ok()?;
    let (t, body) = read_tagged(s)?;
    assert_eq!(t, b'p');
    let end = body.iter().position(|&c| c == 0)?;
    assert_eq!(&body[..end], b"SCRAM-SHA-256");
    let client_first = String::from_utf8(body[end + 5..].to_vec()).ok()?;
    let bare = client_first.strip_prefix("n,,")?.to_string();
    let cnonce = bare
        .split(',')
        .find_map(|p| p.strip_prefix("r="))?
        .to_string();
    let salt = b"fake-pg-salt-123";
    let iterations = 4096u32;
    let server_first = format!("r={cnonce}SRVnonce,s={},i={iterations}", b64.encode(salt));
    s.write_all(&auth(11, server_first.as_bytes())).ok()?;
    let (t, body) = read_tagged(s)?;
    assert_eq!(t, b'p');
    let client_final = String::from_utf8(body).ok()?;
    let (without_proof, proof) = client_final.rsplit_once(",p=")?;
    // Hi(): PBKDF2-HMAC-SHA-256, one block.
    let mut u = hmac256(password.as_bytes(), &[&salt[..], &[0, 0, 0, 1]].concat());
    let mut salted = u.clone();
    for _ in 1..iterations {
        u = hmac256(password.as_bytes(), &u);
        salted.iter_mut().zip(&u).for_each(|(a, b)| *a ^= b);
    }
    let client_key = hmac256(&salted, b"Client Key");
    let stored_key = sha2::Sha256::digest(&client_key).to_vec();
    let auth_message = format!("{bare},{server_first},{without_proof}");
    let client_sig = hmac256(&stored_key, auth_message.as_bytes());
    let proof = b64.decode(proof).ok()?;
    let recovered: Vec<u8> = proof.iter().zip(&client_sig).map(|(a, b)| a ^ b).collect();
    if sha2::Sha256::digest(&recovered).to_vec() != stored_key {
        return Some(false);
    }
    let server_sig = hmac256(&hmac256(&salted, b"Server Key"), auth_message.as_bytes());
    s.write_all(&auth(
        12,
        format!("v={}", b64.encode(server_sig)).as_bytes(),
    ))
    .ok()?;
    Some(true)
}

fn fake_pg_conn(mut s: TcpStream, mode: FakeAuth, password: &str) -> Option<()> {
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let mut startup = read_untagged(&mut s)?;
    if startup[..4] == 80_877_103u32.to_be_bytes() {
        s.write_all(b"N").ok()?;
        startup = read_untagged(&mut s)?;
    }
    assert_eq!(startup[..4], 196_608u32.to_be_bytes());
    let fields: Vec<&[u8]> = startup[4..].split(|&c| c == 0).collect();
    let user = fields
        .chunks(2)
        .find(|kv| kv[0] == b"user")
        .map(|kv| String::from_utf8_lossy(kv[1]).into_owned())
        .unwrap_or_default();
    let ok = match mode {
        FakeAuth::Trust => true,
        FakeAuth::Cleartext => {
            s.write_all(&auth(3, &[])).ok()?;
            let (_, b) = read_tagged(&mut s)?;
            b == [password.as_bytes(), b"\0"].concat()
        }
        FakeAuth::Md5 => {
            use md5::Digest;
            let salt = [7u8, 1, 9, 3];
            s.write_all(&auth(5, &salt)).ok()?;
            let (_, b) = read_tagged(&mut s)?;
            let inner = hex(&md5::Md5::digest(format!("{password}{user}")));
            let want = format!(
                "md5{}",
                hex(&md5::Md5::digest([inner.as_bytes(), &salt].concat()))
            );
            b == [want.as_bytes(), b"\0"].concat()
        }
        FakeAuth::Scram => scram_server(&mut s, password)?,
    };
    if !ok {
        s.write_all(&pg_error(
            "28P01",
            &format!("password authentication failed for user \"{user}\""),
        ))
        .ok()?;
        return Some(());
    }
    let mut hello = auth(0, &[]);
    hello.extend(msg(
        b'S',
        &[&b"server_version\0"[..], b"15.0-fake\0"].concat(),
    ));
    hello.extend(msg(b'K', &[0, 0, 0, 1, 0, 0, 0, 2]));
    hello.extend(msg(b'Z', b"I"));
    s.write_all(&hello).ok()?;
    loop {
        let (t, body) = read_tagged(&mut s)?;
        match t {
            b'Q' if body == b"\0" => s
                .write_all(&[msg(b'I', &[]), msg(b'Z', b"I")].concat())
                .ok()?,
            b'Q' => {
                let mut r = msg(
                    b'T',
                    &[
                        0, 1, b'x', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 23, 0, 4, 0xff, 0xff, 0xff, 0xff,
                        0, 0,
                    ],
                );
                r.extend(msg(b'D', &[0, 1, 0, 0, 0, 1, b'1']));
                r.extend(msg(b'C', b"SELECT 1\0"));
                r.extend(msg(b'Z', b"I"));
                s.write_all(&r).ok()?;
            }
            _ => return Some(()),
        }
    }
}

impl FakePg {
    fn start(mode: FakeAuth, password: &str) -> FakePg {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let password = password.to_string();
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let pw = password.clone();
                std::thread::spawn(move || fake_pg_conn(s, mode, &pw));
            }
        });
        FakePg { port }
    }
}

// pg_hba.conf on this machine is trust-only for 127.0.0.1, so the password methods are tested against an
// in-test server speaking the real v3 messages and checking the answers itself.
cases!(postgres_password_method {
    cleartext: FakeAuth::Cleartext,
    md5: FakeAuth::Md5,
    scram_sha_256: FakeAuth::Scram,
});

/// A PostgreSQL password method: the password from PGPASSWORD, a wrong one, none at all.
fn postgres_password_method(mode: FakeAuth) {
    let pw = "Fake-Pg-Pw-42";
    let fake = FakePg::start(mode, pw);
    let ok = run(rt().env("PGPASSWORD", pw).args([
        "db",
        &format!("postgres://alice@127.0.0.1:{}/db", fake.port),
        "--json",
        "-c",
        "3",
        "--connects",
        "2",
        "--rows",
        "0",
    ]));
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    let j = json_of(&ok);
    assert_eq!(j["server_version"], "15.0-fake");
    assert_eq!(j["connects_ok"], 2);
    assert_eq!(j["ping"]["count"], 3);
    let bad = run(rt().args([
        "db",
        &format!("postgres://alice:wrong-{pw}@127.0.0.1:{}/db", fake.port),
        "-c",
        "1",
    ]));
    assert_eq!(bad.code, 1);
    assert!(
        bad.stderr.contains("rejected user 'alice'") && bad.stderr.contains("28P01"),
        "{}",
        bad.stderr
    );
    let none = run(rt().args([
        "db",
        &format!("postgres://alice@127.0.0.1:{}/db", fake.port),
        "-c",
        "1",
    ]));
    assert_eq!(none.code, 1);
    assert!(
        none.stderr.contains("wants a password") && none.stderr.contains("PGPASSWORD"),
        "{}",
        none.stderr
    );
    assert_secret_absent(pw, &[&ok.stdout, &ok.stderr, &bad.stdout, &bad.stderr]);
}

// ---------------------------------------------------------------- Oracle listener

/// A listener that answers a TNS ping as Oracle's does: REFUSE carrying (ERR=err). The bytes are built here by
/// hand from the public layout, not with the code under test.
fn fake_tns_listener(err: u32) -> (u16, std::sync::mpsc::Receiver<Vec<u8>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut hdr = [0u8; 8];
            if s.read_exact(&mut hdr).is_err() {
                continue;
            }
            let len = u16::from_be_bytes([hdr[0], hdr[1]]) as usize;
            let mut rest = vec![0u8; len.saturating_sub(8)];
            if s.read_exact(&mut rest).is_err() {
                continue;
            }
            let mut whole = hdr.to_vec();
            whole.extend_from_slice(&rest);
            let _ = tx.send(whole);
            let text = format!("(DESCRIPTION=(TMP=)(VSNNUM=318767104)(ERR={err})(ALIAS=LISTENER))");
            let mut p = vec![0, 0, 0, 0, 4, 0, 0, 0, 0x22, 0];
            p.extend_from_slice(&(text.len() as u16).to_be_bytes());
            p.extend_from_slice(text.as_bytes());
            let n = p.len() as u16;
            p[..2].copy_from_slice(&n.to_be_bytes());
            let _ = s.write_all(&p);
        }
    });
    (port, rx)
}

#[test]
fn oracle_listener_ping() {
    let (port, seen) = fake_tns_listener(0);
    let o = run(rt().args([
        "db",
        &format!("oracle://127.0.0.1:{port}/ORCLPDB1"),
        "-c",
        "3",
        "--json",
    ]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let j = json_of(&o);
    assert_eq!(j["settings"]["scheme"], "oracle");
    assert_eq!(j["ping"]["count"], 3);
    assert_eq!(j["phases"]["tcp_handshake"]["count"], 3);
    assert_eq!(j["server_version"], "TNS listener 19.0.0.0.0");
    assert!(j["attribution"]["network_ns"].as_u64().is_some());
    let pkt = seen.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(pkt[4], 1, "CONNECT packet type");
    let off = u16::from_be_bytes([pkt[26], pkt[27]]) as usize;
    let dlen = u16::from_be_bytes([pkt[24], pkt[25]]) as usize;
    assert_eq!(&pkt[off..off + dlen], b"(CONNECT_DATA=(COMMAND=ping))");
    assert_eq!(u16::from_be_bytes([pkt[0], pkt[1]]) as usize, pkt.len());

    let text = run(rt().args(["db", &format!("oracle://127.0.0.1:{port}"), "-c", "2"]));
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(
        text.stdout.contains("TNS ping (CONNECT -> REFUSE)"),
        "{}",
        text.stdout
    );

    let (bad_port, _rx) = fake_tns_listener(12514);
    let o = run(rt().args(["db", &format!("oracle://127.0.0.1:{bad_port}"), "-c", "1"]));
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("ERR=12514"), "{}", o.stderr);
}

// ---------------------------------------------------------------- peers that are not what they seem

fn answering_listener(answer: Vec<u8>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let a = answer.clone();
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                let mut b = [0u8; 512];
                let _ = s.read(&mut b);
                let _ = s.write_all(&a);
                std::thread::sleep(Duration::from_millis(200));
            });
        }
    });
    port
}

cases!(unexpected_answer {
    postgres: "postgres://u@127.0.0.1:PORT/d",
    postgres_no_tls: "postgres://u@127.0.0.1:PORT/d?sslmode=disable",
    mysql: "mysql://u@127.0.0.1:PORT/d",
    redis: "redis://127.0.0.1:PORT",
    oracle: "oracle://127.0.0.1:PORT",
});

/// A listener answering something else (an HTTP error): "unexpected answer", and what it may really be.
fn unexpected_answer(url: &str) {
    let port =
        answering_listener(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n".to_vec());
    let url = url.replace("PORT", &port.to_string());
    let o = run(rt().args(["db", &url, "-c", "1", "--timeout", "10s"]));
    assert_eq!(o.code, 1, "{url}");
    assert!(
        o.stderr.contains("unexpected answer from"),
        "{url}: {}",
        o.stderr
    );
    assert!(o.stderr.contains("is this really a"), "{url}: {}", o.stderr);
}

cases!(random_bytes_never_panic {
    postgres: "postgres",
    mysql: "mysql",
    redis: "redis",
    oracle: "oracle"
});

/// Eight peers answering 600 random bytes: one error line each, never a panic.
fn random_bytes_never_panic(scheme: &str) {
    let mut x: u64 = 0x1234_5678_9abc_def1;
    for round in 0..8 {
        let bytes: Vec<u8> = (0..600)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let port = answering_listener(bytes);
        let o = run(rt().args([
            "db",
            &format!("{scheme}://u@127.0.0.1:{port}/1"),
            "-c",
            "1",
            "--timeout",
            "2s",
        ]));
        assert_eq!(o.code, 1, "round {round} {scheme}: {}", o.stdout);
        assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
        assert!(o.stderr.starts_with("roundtrip: error:"), "{}", o.stderr);
    }
}

// ---------------------------------------------------------------- scripted MySQL 8 (tests/mysql8_server.py)

/// The scripted MySQL 8 server: a Python process (with the `cryptography` package) that plays the server side
/// of MySQL 8's authentication with a real RSA key. It prints its port, then one line per login.
struct Mysql8 {
    port: u16,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    child: std::process::Child,
}

impl Mysql8 {
    /// Starts it, or returns None (a skip; a failure under CI) when python3 or its cryptography package is
    /// missing.
    fn start(password: &str, extra: &[&str]) -> Option<Mysql8> {
        let have_crypto = std::process::Command::new("python3")
            .args(["-c", "import cryptography"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !have_crypto {
            common::skip(
                "python3 with the cryptography package is not installed (.ci/run installs it)",
            );
            return None;
        }
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mysql8_server.py");
        let mut child = std::process::Command::new("python3")
            .arg(script)
            .args(["--password", password])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let l2 = lines.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(p) = line.strip_prefix("PORT ") {
                    let _ = tx.send(p.parse::<u16>().unwrap());
                } else {
                    l2.lock().unwrap().push(line);
                }
            }
        });
        let port = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the scripted MySQL 8 server did not start");
        Some(Mysql8 { port, lines, child })
    }

    fn url(&self, user_pw: &str, query: &str) -> String {
        format!("mysql://{user_pw}@127.0.0.1:{}/db{query}", self.port)
    }

    /// The `path=` of every login so far, waiting until at least `n` were logged.
    fn paths(&self, n: usize) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let l = self.lines.lock().unwrap().clone();
            let auth: Vec<String> = l
                .iter()
                .filter(|x| x.starts_with("AUTH "))
                .cloned()
                .collect();
            if auth.len() >= n || Instant::now() > deadline {
                return auth;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Mysql8 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn db_run(url: &str, extra: &[&str]) -> Out {
    let mut args = vec!["db", url, "-c", "3", "--rows", "4", "--row-bytes", "100"];
    args.extend_from_slice(extra);
    run(rt().args(&args))
}

const MY8_PW: &str = "S3cret pw-€";
const MY8_PW_URL: &str = "S3cret%20pw-%E2%82%AC";

#[test]
fn mysql8_caching_sha2_full_authentication_over_rsa_then_fast_from_the_cache() {
    let Some(srv) = Mysql8::start(MY8_PW, &[]) else {
        return;
    };
    // First connection: not cached, so full authentication: key request, RSA-OAEP password. The next ones
    // find the password in the server's cache.
    let ok = db_run(
        &srv.url(&format!("app:{MY8_PW_URL}"), ""),
        &["--connects", "3", "--json"],
    );
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    let j = json_of(&ok);
    assert_eq!(j["server_version"], "8.0.36-scripted");
    assert_eq!(j["phases"]["startup"]["count"], 3);
    assert_eq!(j["ping"]["count"], 3);
    assert_eq!(j["fetch"]["bytes_total"], 3 * 4 * 100);
    let notes = j["notes"].to_string();
    assert!(
        notes.contains("full authentication, password encrypted (RSA-OAEP) with the 2048-bit key"),
        "{notes}"
    );
    assert!(notes.contains("fast authentication"), "{notes}");
    assert_eq!(
        srv.paths(3),
        [
            "AUTH user=app plugin=caching_sha2_password path=full-rsa result=ok",
            "AUTH user=app plugin=caching_sha2_password path=fast result=ok",
            "AUTH user=app plugin=caching_sha2_password path=fast result=ok",
        ]
    );
    // A wrong password against the cache (fast path), then on a fresh server (full authentication: the
    // server decrypts a different password).
    let bad = db_run(&srv.url("app:Wrong", ""), &[]);
    assert_eq!(bad.code, 1);
    assert!(bad.stderr.contains("rejected user 'app'"), "{}", bad.stderr);
    assert!(bad.stderr.contains("error 1045"), "{}", bad.stderr);
    assert_eq!(bad.stderr.lines().count(), 1, "{}", bad.stderr);
    assert_eq!(
        srv.paths(4)[3],
        "AUTH user=app plugin=caching_sha2_password path=fast result=denied"
    );
    let fresh = Mysql8::start(MY8_PW, &[]).unwrap();
    let bad = db_run(&fresh.url("app:Wrong", ""), &[]);
    assert_eq!(bad.code, 1);
    assert!(bad.stderr.contains("rejected user 'app'"), "{}", bad.stderr);
    assert_eq!(
        fresh.paths(1),
        ["AUTH user=app plugin=caching_sha2_password path=full-rsa result=denied"]
    );
    assert_secret_absent(MY8_PW, &[&ok.stdout, &ok.stderr, &bad.stdout, &bad.stderr]);
    assert_secret_absent(MY8_PW_URL, &[&ok.stdout, &ok.stderr]);
}

cases!(mysql8_auth_plugin {
    sha256_password: ("sha256", "sha256_password", ["full-rsa", "full-rsa"]),
    switch_to_caching_sha2: (
        "switch-caching",
        "caching_sha2_password",
        ["full-rsa", "fast"]
    ),
    switch_to_sha256: ("switch-sha256", "sha256_password", ["full-rsa", "full-rsa"]),
});

/// sha256_password, and auth switches to either plugin: two logins by the expected `paths`, a wrong password.
fn mysql8_auth_plugin((mode, plugin, paths): (&str, &str, [&str; 2])) {
    let Some(srv) = Mysql8::start(MY8_PW, &["--mode", mode]) else {
        return;
    };
    let ok = run(rt().env("MYSQL_PWD", MY8_PW).args([
        "db",
        &srv.url("app", ""),
        "-c",
        "2",
        "--connects",
        "2",
        "--rows",
        "2",
        "--json",
    ]));
    assert_eq!(ok.code, 0, "{mode}: {}", ok.stderr);
    assert_eq!(json_of(&ok)["query"]["count"], 2);
    let want: Vec<String> = paths
        .iter()
        .map(|p| format!("AUTH user=app plugin={plugin} path={p} result=ok"))
        .collect();
    assert_eq!(srv.paths(2), want, "{mode}");
    let bad = db_run(&srv.url("app:nope", ""), &[]);
    assert_eq!(bad.code, 1, "{mode}");
    assert!(
        bad.stderr.contains("rejected user 'app'"),
        "{mode}: {}",
        bad.stderr
    );
    assert_secret_absent(MY8_PW, &[&ok.stdout, &ok.stderr, &bad.stderr]);
}

#[test]
fn mysql8_pinned_key_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    // A pinned key: the password is encrypted with it and the server is never asked for its key (for
    // sha256_password the 256 encrypted bytes go in the handshake response itself).
    for mode in ["caching", "sha256"] {
        let key = dir.path().join(format!("{mode}.pem"));
        let Some(srv) = Mysql8::start(
            MY8_PW,
            &["--mode", mode, "--write-public-key", key.to_str().unwrap()],
        ) else {
            return;
        };
        let q = format!(
            "?server-public-key-path={}&get-server-public-key=false",
            key.display()
        );
        let ok = db_run(
            &srv.url(&format!("app:{MY8_PW_URL}"), &q),
            &["--connects", "1"],
        );
        assert_eq!(ok.code, 0, "{mode}: {}", ok.stderr);
        assert!(
            ok.stdout.contains("with the pinned 2048-bit server key"),
            "{}",
            ok.stdout
        );
        assert!(
            srv.paths(1)[0].contains("path=rsa-pinned result=ok"),
            "{:?}",
            srv.paths(1)
        );
    }
    // Asking for the key is forbidden and nothing is pinned.
    let srv = Mysql8::start(MY8_PW, &[]).unwrap();
    let o = db_run(
        &srv.url(&format!("app:{MY8_PW_URL}"), "?get-server-public-key=false"),
        &[],
    );
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("caching_sha2_password encrypted with its RSA public key, but get-server-public-key=false forbids asking the server for it"), "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    // A 1024-bit key and a key that is not one: refused before any password is sent.
    for (args, want) in [
        (
            &["--key-bits", "1024"][..],
            "has 1024 bits; roundtrip refuses keys under 2048 bits",
        ),
        (&["--mode", "junk-key"][..], "is not a PEM RSA public key"),
    ] {
        let srv = Mysql8::start(MY8_PW, args).unwrap();
        let o = db_run(&srv.url(&format!("app:{MY8_PW_URL}"), ""), &[]);
        assert_eq!(o.code, 1, "{}", o.stdout);
        assert!(o.stderr.contains(want), "{}", o.stderr);
        assert!(o.stderr.contains("ssl-mode=REQUIRED"), "{}", o.stderr);
        assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
        assert!(
            srv.paths(1)[0].contains("path=key-sent-client-closed result=denied"),
            "{:?}",
            srv.paths(1)
        );
        assert_secret_absent(MY8_PW, &[&o.stdout, &o.stderr]);
    }
    // A key file that is not a key, and one that is missing: refused before any connection.
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "hello").unwrap();
    for (path, want) in [
        (junk.display().to_string(), "is not a PEM RSA public key"),
        (
            "/nonexistent/key.pem".to_string(),
            "cannot read /nonexistent/key.pem",
        ),
    ] {
        let o = db_run(
            &format!("mysql://app@127.0.0.1:9/db?server-public-key-path={path}"),
            &[],
        );
        // A bad key file is found before any I/O: refused (exit 2).
        assert_eq!(o.code, 2, "{}", o.stderr);
        assert!(o.stderr.contains(want), "{}", o.stderr);
    }
}

#[test]
fn mysql8_unknown_plugin_and_a_server_that_demands_tls() {
    let Some(srv) = Mysql8::start(MY8_PW, &["--mode", "switch-unknown"]) else {
        return;
    };
    let o = db_run(&srv.url(&format!("app:{MY8_PW_URL}"), ""), &[]);
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains("asks for the authentication plugin 'authentication_kerberos_client', which roundtrip does not support"),
        "{}",
        o.stderr
    );
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    assert!(
        srv.paths(1)[0].ends_with("result=client-closed"),
        "{:?}",
        srv.paths(1)
    );
    let srv = Mysql8::start(MY8_PW, &["--mode", "require-tls"]).unwrap();
    let o = db_run(&srv.url(&format!("app:{MY8_PW_URL}"), ""), &[]);
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains(
            "requires an encrypted connection: Connections using insecure transport are prohibited"
        ),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("ssl-mode=REQUIRED"), "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
}

cases!(mysql8_password_inside_tls {
    caching_sha2: ("caching", "caching_sha2_password", ["full-tls", "fast"]),
    sha256_password: ("sha256", "sha256_password", ["full-tls", "full-tls"]),
    server_requires_tls: ("require-tls", "caching_sha2_password", ["full-tls", "fast"]),
});

/// The password sent inside TLS (no RSA), two logins by the expected `paths`.
fn mysql8_password_inside_tls((mode, plugin, paths): (&str, &str, [&str; 2])) {
    if !common::have("openssl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let Some(srv) = Mysql8::start(MY8_PW, &["--mode", mode, "--tls", &cert, &key]) else {
        return;
    };
    let ok = db_run(
        &srv.url(&format!("app:{MY8_PW_URL}"), "?ssl-mode=REQUIRED"),
        &["--connects", "2", "--json"],
    );
    assert_eq!(ok.code, 0, "{mode}: {}", ok.stderr);
    let j = json_of(&ok);
    assert_eq!(j["phases"]["tls"]["count"], 2);
    assert!(
        j["notes"]
            .to_string()
            .contains(&format!("{plugin}: password sent inside TLS")),
        "{j}"
    );
    let want: Vec<String> = paths
        .iter()
        .map(|p| format!("AUTH user=app plugin={plugin} path={p} result=ok"))
        .collect();
    assert_eq!(srv.paths(2), want, "{mode}");
}

// ---------------------------------------------------------------- password prompt on a terminal

/// Runs roundtrip under `script` (a pseudo-terminal), types `password` once the prompt shows, and returns
/// the exit code and everything the terminal showed.
fn run_on_terminal(args: &str, password: &str) -> (i32, String) {
    let mut child = std::process::Command::new("script")
        .args([
            "-qec",
            &format!("{} {args}", env!("CARGO_BIN_EXE_roundtrip")),
            "/dev/null",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut b = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut b) {
            if n == 0 || tx.send(b[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !String::from_utf8_lossy(&seen).contains("Password for") {
        assert!(
            Instant::now() < deadline,
            "no prompt: {}",
            String::from_utf8_lossy(&seen)
        );
        if let Ok(b) = rx.recv_timeout(Duration::from_millis(100)) {
            seen.extend(b);
        }
    }
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(format!("{password}\n").as_bytes()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code().unwrap_or(-1);
        }
        assert!(Instant::now() < deadline, "roundtrip did not finish");
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(stdin);
    while let Ok(b) = rx.recv_timeout(Duration::from_millis(500)) {
        seen.extend(b);
    }
    (code, String::from_utf8_lossy(&seen).into_owned())
}

#[test]
fn password_prompt_on_a_terminal() {
    if !common::have("script") {
        return;
    }
    let pw = "Typed-Pw-77";
    let fake = FakePg::start(FakeAuth::Md5, pw);
    let url = format!(
        "postgres://alice@127.0.0.1:{}/db -n 2 --connects 1 --rows 0",
        fake.port
    );
    // -W asks before connecting.
    let (code, screen) = run_on_terminal(&format!("db {url} -W"), pw);
    assert_eq!(code, 0, "{screen}");
    assert!(
        screen.contains("Password for PostgreSQL user 'alice'"),
        "{screen}"
    );
    assert!(
        screen.contains("on one connection (2 iterations)"),
        "{screen}"
    );
    assert!(
        !screen.contains(pw),
        "the password was echoed or printed: {screen}"
    );
    // Without -W, a server that asks for a password gets a prompt when a person is at the terminal.
    let (code, screen) = run_on_terminal(&format!("db {url}"), pw);
    assert_eq!(code, 0, "{screen}");
    assert!(
        screen.contains("Password for PostgreSQL user 'alice'"),
        "{screen}"
    );
    assert!(!screen.contains(pw), "{screen}");
}
