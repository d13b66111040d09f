//! `roundtrip db URL --link TARGET` against the real PostgreSQL (dblink) and MariaDB (FEDERATEDX) on this
//! machine, with `roundtrip proxy --rtt 10ms` in front of the same server as the far end of the link, and the
//! agent's `db-link` probe scraped from /metrics. Scratch databases, roles and tables are removed at the end.

mod common;

use assert_cmd::Command;
use common::db::{json_of, mariadb, psql, run};
use common::procs::{Kids, Proc};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const PG: u16 = 5432;
const MY: u16 = 3306;
/// The delay the proxy adds to the far end of the link.
const RTT_MS: f64 = 10.0;
/// A password put in every TARGET: it must appear in no output.
const MARKER: &str = "MarkerPw7731x";

/// The command with no database variables inherited from the caller.
fn rt() -> Command {
    common::db::rt(Duration::from_secs(180))
}

/// A scratch PostgreSQL database, dropped (with its sessions) when the test ends however it ends.
struct ScratchDb(String);

impl ScratchDb {
    fn new(what: &str, dblink: bool) -> ScratchDb {
        let name = format!("rt_dblink_{what}_{}", std::process::id());
        psql(
            "test",
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        );
        psql("test", &format!("CREATE DATABASE {name}"));
        let db = ScratchDb(name);
        if dblink {
            psql(&db.0, "CREATE EXTENSION dblink");
        }
        db
    }
    fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{PG}/{}?sslmode=disable",
            self.0
        )
    }
}

impl Drop for ScratchDb {
    fn drop(&mut self) {
        common::db::psql_ok(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.0));
    }
}

/// A dblink connection string to `port` on this machine, carrying the marker password.
fn pg_target(port: u16) -> String {
    format!(
        "host=127.0.0.1 port={port} dbname=test user=postgres password={MARKER} sslmode=disable"
    )
}

fn ms(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}")) / 1e6
}

fn pg_ready() -> bool {
    common::service_up(PG, "PostgreSQL") && common::have("psql")
}

fn no_marker(what: &str, text: &str) {
    assert!(
        !text.contains(MARKER),
        "the password appears in {what}:\n{text}"
    );
}

#[test]
fn pg_link_through_a_10ms_proxy_and_without() {
    if !pg_ready() {
        return;
    }
    // The scratch database starts without dblink: --create-extension must add it.
    let db = ScratchDb::new("proxy", false);
    let dir = tempfile::tempdir().unwrap();
    let direct = run(rt().args([
        "db",
        &db.url(),
        "--link",
        &pg_target(PG),
        "--create-extension",
        "-c",
        "20",
        "--connects",
        "1",
        "--json",
    ]));
    assert_eq!(direct.code, 0, "{}\n{}", direct.stdout, direct.stderr);
    no_marker("stdout", &direct.stdout);
    no_marker("stderr", &direct.stderr);
    let d = json_of(&direct);
    assert_eq!(
        psql(
            &db.0,
            "SELECT count(*) FROM pg_extension WHERE extname = 'dblink'"
        ),
        "1"
    );
    assert!(
        d["notes"]
            .to_string()
            .contains("created the dblink extension"),
        "{}",
        d["notes"]
    );
    let direct_p50 = ms(&d["link"]["round_trip"]["p50_ns"]);
    assert_eq!(d["link"]["round_trip"]["count"], 20);
    assert!(
        direct_p50 < RTT_MS,
        "without the proxy the link round trip ({direct_p50} ms) is below the {RTT_MS} ms the proxy adds"
    );

    let mut kids = Kids::default();
    let proxy = kids.proxy(PG, &["--rtt", "10ms"]);
    let csv = dir.path().join("link.csv");
    let html = dir.path().join("link.html");
    let o = run(rt().args([
        "db",
        &db.url(),
        "--link",
        &pg_target(proxy),
        "-c",
        "15",
        "-i",
        "20ms",
        "--connects",
        "1",
        "--json",
        "--full-log",
        csv.to_str().unwrap(),
        "--report",
        html.to_str().unwrap(),
    ]));
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let v = json_of(&o);
    let l = &v["link"];
    assert_eq!(
        l["target"].as_str().unwrap(),
        pg_target(proxy).replace(MARKER, "***")
    );
    let p50 = ms(&l["round_trip"]["p50_ns"]);
    // 10 ms through the proxy plus the dblink call: a missing delay is below 10 ms, a doubled one 20 ms.
    assert!(
        (RTT_MS..RTT_MS + 8.0).contains(&p50),
        "link p50 {p50} ms, expected 10 ms plus a small overhead"
    );
    let client_leg = ms(&l["client_leg"]["p50_ns"]);
    assert!(
        client_leg < RTT_MS / 2.0,
        "the client -> local leg ({client_leg} ms) does not cross the proxy"
    );
    assert_eq!(v["ping"]["count"], 15);
    // The first call opened the link through the proxy (several round trips) and is kept apart.
    let open = &l["open"];
    assert!(ms(&open["round_trip_ns"]) >= RTT_MS, "{open}");
    assert_eq!(l["round_trip"]["count"], 15);
    // Multi-row: seed 001's defaults, every call returning its rows through the 10 ms link.
    let m = &l["multi_row"];
    assert_eq!(
        (m["rows"].as_u64(), m["row_bytes"].as_u64()),
        (Some(10), Some(1437))
    );
    assert_eq!(m["summary"]["count"], 15);
    assert!(ms(&m["summary"]["p50_ns"]) >= RTT_MS, "{m}");
    let per_row = m["per_row_ns"].as_f64().expect("a per-row figure");
    let expect = (m["summary"]["p50_ns"].as_f64().unwrap()
        - l["round_trip"]["p50_ns"].as_f64().unwrap())
        / 9.0;
    assert!((per_row - expect).abs() < 1.0, "{per_row} vs {expect}");
    // The full log: one link row per call with the local database's clock around it, and the open apart.
    let log = std::fs::read_to_string(&csv).unwrap();
    assert!(
        log.starts_with("op,seq,start_s,duration_ns,rows,bytes,db_begin_unix_s,db_end_unix_s\n")
    );
    let links: Vec<&str> = log.lines().filter(|r| r.starts_with("link,")).collect();
    assert_eq!(links.len(), 15, "{log}");
    for r in &links {
        let f: Vec<&str> = r.split(',').collect();
        let (b, e): (f64, f64) = (f[6].parse().unwrap(), f[7].parse().unwrap());
        let d = f[3].parse::<f64>().unwrap() / 1e9;
        assert!((e - b - d).abs() < 2e-6, "{r}");
        assert!(d >= RTT_MS / 1e3, "{r}");
    }
    assert_eq!(
        log.lines().filter(|r| r.starts_with("link_open,")).count(),
        1
    );
    // Every multi-row call brought the seed's 10 rows of 1,437 bytes back through the link.
    let multis: Vec<&str> = log
        .lines()
        .filter(|r| r.starts_with("link_multi,"))
        .collect();
    assert_eq!(multis.len(), 15, "{log}");
    for r in &multis {
        let f: Vec<&str> = r.split(',').collect();
        assert_eq!((f[4], f[5]), ("10", "14370"), "{r}");
    }
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("link round trip"),
        "the report shows the link"
    );
    for (what, text) in [
        ("stdout", &o.stdout),
        ("stderr", &o.stderr),
        ("full log", &log),
        ("report", &page),
    ] {
        no_marker(what, text);
    }

    // Text: one line per call as the seed prints them, then the table with both legs.
    let t = run(rt().args([
        "db",
        &db.url(),
        "--link",
        &pg_target(proxy),
        "-c",
        "3",
        "--connects",
        "1",
        "--rows",
        "4",
        "--row-bytes",
        "100",
    ]));
    assert_eq!(t.code, 0, "{}\n{}", t.stdout, t.stderr);
    assert!(
        t.stdout
            .contains("link open (first call, not in the statistics): local begin ")
    );
    assert!(t.stdout.contains("call 3: local begin "), "{}", t.stdout);
    assert!(
        t.stdout.contains("link multi-row (4 rows x 100 B)"),
        "{}",
        t.stdout
    );
    assert!(
        t.stdout
            .contains("legs (medians): client -> local database ")
    );
    assert!(t.stdout.contains("password=***"));
    no_marker("text stdout", &t.stdout);
    no_marker("text stderr", &t.stderr);
}

#[test]
fn pg_link_to_a_foreign_server_with_a_user_mapping() {
    if !pg_ready() {
        return;
    }
    // The extension in a schema off the search path: roundtrip calls it by its schema.
    let db = ScratchDb::new("fdw", false);
    psql(
        &db.0,
        "CREATE SCHEMA rt_ext; CREATE EXTENSION dblink SCHEMA rt_ext",
    );
    let mut kids = Kids::default();
    let proxy = kids.proxy(PG, &["--rtt", "10ms"]);
    psql(
        &db.0,
        &format!(
            "CREATE SERVER rt_far FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '127.0.0.1', port '{proxy}', dbname 'test', sslmode 'disable'); \
             CREATE USER MAPPING FOR postgres SERVER rt_far OPTIONS (user 'postgres', password '{MARKER}')"
        ),
    );
    let o = run(rt().args([
        "db",
        &db.url(),
        "--link",
        "rt_far",
        "-c",
        "8",
        "--connects",
        "1",
        "--json",
    ]));
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let v = json_of(&o);
    assert_eq!(v["link"]["target"], "rt_far");
    assert!(
        v["link"]["method"]
            .as_str()
            .unwrap()
            .contains("schema rt_ext"),
        "{}",
        v["link"]
    );
    let p50 = ms(&v["link"]["round_trip"]["p50_ns"]);
    assert!(
        (RTT_MS..RTT_MS + 8.0).contains(&p50),
        "link p50 {p50} ms through the foreign server"
    );
    no_marker("stdout", &o.stdout);
    no_marker("stderr", &o.stderr);
}

#[test]
fn ctrl_c_mid_run_prints_what_was_measured_and_closes_the_link() {
    if !pg_ready() {
        return;
    }
    let db = ScratchDb::new("sigint", true);
    let mut kids = Kids::default();
    let proxy = kids.proxy(PG, &["--rtt", "10ms"]);
    let mut cmd = std::process::Command::new(common::procs::bin());
    cmd.args([
        "db",
        &db.url(),
        "--link",
        &pg_target(proxy),
        "-c",
        "100000",
        "-i",
        "50ms",
        "--connects",
        "1",
    ]);
    let mut p = Proc::spawn("db --link", cmd);
    // Progress: one line per call as it comes.
    p.wait_line("call 4: local begin", Duration::from_secs(60))
        .unwrap();
    p.signal(2);
    let status = p
        .wait_exit(Duration::from_secs(30))
        .expect("it stops on Ctrl-C");
    let out = p.stdout();
    assert!(status.success(), "{}", p.output());
    assert!(
        out.contains("link round trip (SELECT clock_timestamp(), NULL::text)"),
        "{out}"
    );
    // It stopped early and says so (the planned count appears only in that sentence).
    assert!(
        out.contains("interrupted (Ctrl-C) after") && out.contains("of 100000 iterations"),
        "{out}"
    );
    assert!(
        !out.lines()
            .any(|l| l.starts_with("  link round trip") && l.trim_end().ends_with(" 100000")),
        "it stopped early: {out}"
    );
    no_marker("output", &p.output());
    // Its session in the local database has ended (the link closed with it).
    let deadline = Instant::now() + Duration::from_secs(20);
    while psql(
        "test",
        &format!(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}'",
            db.0
        ),
    ) != "0"
    {
        assert!(
            Instant::now() < deadline,
            "a session is still open in {}",
            db.0
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn pg_missing_extension_is_one_line_and_nothing_is_created() {
    if !pg_ready() {
        return;
    }
    let db = ScratchDb::new("noext", false);
    let o = run(rt().args(["db", &db.url(), "--link", &pg_target(PG), "-c", "2"]));
    assert_eq!(o.code, 1, "{}\n{}", o.stdout, o.stderr);
    let errors: Vec<&str> = o.stderr.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{}", o.stderr);
    assert!(
        errors[0].contains("dblink extension is not installed")
            && errors[0].contains("CREATE EXTENSION dblink")
            && errors[0].contains("--create-extension"),
        "{}",
        errors[0]
    );
    assert_eq!(
        psql(
            &db.0,
            "SELECT count(*) FROM pg_extension WHERE extname = 'dblink'"
        ),
        "0"
    );
    no_marker("stderr", &o.stderr);
    no_marker("stdout", &o.stdout);
}

#[test]
fn pg_link_target_down_is_one_line_and_exit_1() {
    if !pg_ready() {
        return;
    }
    let db = ScratchDb::new("down", true);
    let closed = common::free_port();
    let o = run(rt().args([
        "db",
        &db.url(),
        "--link",
        &pg_target(closed),
        "-c",
        "2",
        "--json",
    ]));
    assert_eq!(o.code, 1, "{}\n{}", o.stdout, o.stderr);
    let errors: Vec<&str> = o.stderr.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{}", o.stderr);
    assert!(
        errors[0].contains("could not establish connection")
            && errors[0].contains(&closed.to_string()),
        "{}",
        errors[0]
    );
    let v = json_of(&o);
    assert!(
        v["error"].as_str().unwrap().contains("opening the link"),
        "{}",
        v["error"]
    );
    no_marker("stderr", &o.stderr);
    no_marker("stdout", &o.stdout);
}

#[test]
fn pg_non_superuser_without_password_gets_the_rule() {
    if !pg_ready() {
        return;
    }
    let db = ScratchDb::new("nosu", true);
    let role = format!("rt_dblink_nosu_{}", std::process::id());
    psql("test", &format!("DROP ROLE IF EXISTS {role}"));
    psql("test", &format!("CREATE ROLE {role} LOGIN"));
    struct DropRole(String);
    impl Drop for DropRole {
        fn drop(&mut self) {
            let _ = std::process::Command::new("psql")
                .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-tAc"])
                .arg(format!("DROP ROLE IF EXISTS {}", self.0))
                .output();
        }
    }
    let _role = DropRole(role.clone());
    let url = format!("postgres://{role}@127.0.0.1:{PG}/{}?sslmode=disable", db.0);
    let o = run(rt().args([
        "db",
        &url,
        "--link",
        "host=127.0.0.1 dbname=test user=postgres sslmode=disable",
        "-c",
        "2",
    ]));
    assert_eq!(o.code, 1, "{}\n{}", o.stdout, o.stderr);
    let errors: Vec<&str> = o.stderr.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{}", o.stderr);
    assert!(
        errors[0].contains("password is required") && errors[0].contains("PostgreSQL's rule"),
        "{}",
        errors[0]
    );
    drop(db);
}

#[test]
fn oracle_and_redis_links_are_refused_before_any_io() {
    let o = run(rt().args([
        "db",
        "oracle://127.0.0.1:1/ORCLPDB1",
        "--link",
        &format!("remote_link password={MARKER}"),
    ]));
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("SQL over TNS") && o.stderr.contains("does not speak yet"),
        "{}",
        o.stderr
    );
    no_marker("stderr", &o.stderr);
    let r = run(rt().args(["db", "redis://127.0.0.1:1", "--link", "x"]));
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("Redis has no database links"),
        "{}",
        r.stderr
    );
    // A malformed connection string is refused without echoing its password.
    let b = run(rt().args([
        "db",
        "postgres://127.0.0.1:1/x",
        "--link",
        &format!("host=h password='{MARKER}"),
    ]));
    assert_eq!(b.code, 2, "{}", b.stderr);
    assert!(b.stderr.contains("not closed"), "{}", b.stderr);
    no_marker("stderr", &b.stderr);
}

#[test]
fn mariadb_link_through_federatedx() {
    if !common::service_up(MY, "MariaDB") || !common::have("mysql") {
        return;
    }
    let engine = |s: &str| matches!(s, "YES" | "DEFAULT");
    let before = mariadb(
        "SELECT COALESCE(MAX(SUPPORT), '') FROM information_schema.ENGINES WHERE ENGINE = 'FEDERATED'",
    );
    struct Unload(bool);
    impl Drop for Unload {
        fn drop(&mut self) {
            if self.0 {
                let _ = std::process::Command::new("mysql")
                    .args([
                        "-h",
                        "127.0.0.1",
                        "-uroot",
                        "test",
                        "-e",
                        "UNINSTALL SONAME 'ha_federatedx'",
                    ])
                    .output();
            }
        }
    }
    let _unload = Unload(!engine(&before));
    let mut kids = Kids::default();
    let proxy = kids.proxy(MY, &["--rtt", "10ms"]);
    let target = format!("mysql://root:{MARKER}@127.0.0.1:{proxy}/test");
    let count_scratch = || {
        mariadb(
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_NAME LIKE 'roundtrip\\_link\\_%'",
        )
    };
    let scratch_before = count_scratch();
    if !engine(&before) {
        // Not loaded: one line naming what is missing, and nothing loaded.
        let o = run(rt().args([
            "db",
            "mysql://root@127.0.0.1/test",
            "--link",
            &target,
            "-c",
            "2",
        ]));
        assert_eq!(o.code, 1, "{}\n{}", o.stdout, o.stderr);
        assert!(
            o.stderr.contains("FEDERATEDX engine is not loaded")
                && o.stderr.contains("INSTALL SONAME 'ha_federatedx'"),
            "{}",
            o.stderr
        );
        no_marker("stderr", &o.stderr);
        // The agent never loads it either: its probe fails with the same words (MariaDB's, not MySQL's).
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("agent.toml");
        std::fs::write(
            &cfg,
            format!(
                "interval = \"200ms\"\ntimeout = \"2s\"\n[[target]]\nprobe = \"db\"\nurl = \"mysql://root@127.0.0.1:{MY}/test\"\nlink = \"{target}\"\n"
            ),
        )
        .unwrap();
        let (api, logs) = agent_until(&cfg, "/api/results", |a| a.contains("engine is not loaded"));
        assert!(
            api.contains("FEDERATEDX engine is not loaded")
                && api.contains("INSTALL SONAME 'ha_federatedx'"),
            "{api}"
        );
        no_marker("/api/results", &api);
        no_marker("agent logs", &logs);
        assert!(!engine(&mariadb(
            "SELECT COALESCE(MAX(SUPPORT), '') FROM information_schema.ENGINES WHERE ENGINE = 'FEDERATED'"
        )));
    }
    // The far end logs in as a scratch user whose password is the marker: it goes to FEDERATEDX's
    // CONNECTION and roundtrip's own connection for the remote scratch table, and nowhere else.
    let user = format!("rt_fedx_{}", std::process::id());
    mariadb(&format!(
        "DROP USER IF EXISTS '{user}'@'%'; CREATE USER '{user}'@'%' IDENTIFIED BY '{MARKER}'; \
         DROP USER IF EXISTS '{user}'@'localhost'; CREATE USER '{user}'@'localhost' IDENTIFIED BY '{MARKER}'; \
         GRANT ALL ON test.* TO '{user}'@'%'; GRANT ALL ON test.* TO '{user}'@'localhost'"
    ));
    struct DropUser(String);
    impl Drop for DropUser {
        fn drop(&mut self) {
            let u = &self.0;
            let _ = std::process::Command::new("mysql")
                .args(["-h", "127.0.0.1", "-uroot", "test", "-e"])
                .arg(format!(
                    "DROP USER IF EXISTS '{u}'@'%'; DROP USER IF EXISTS '{u}'@'localhost'"
                ))
                .output();
        }
    }
    let _user = DropUser(user.clone());
    let target = format!("mysql://{user}:{MARKER}@127.0.0.1:{proxy}/test");
    let o = run(rt().args([
        "db",
        "mysql://root@127.0.0.1/test",
        "--link",
        &target,
        "--create-extension",
        "-c",
        "10",
        "--connects",
        "1",
        "--json",
    ]));
    if o.code != 0 && o.stderr.contains("INSTALL SONAME") {
        // The engine cannot be loaded on this server: the refusal is the clear one-line answer.
        assert_eq!(
            o.stderr.lines().filter(|l| l.contains("error")).count(),
            1,
            "{}",
            o.stderr
        );
        common::skip("FEDERATEDX cannot be loaded on this MariaDB");
        return;
    }
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    no_marker("stdout", &o.stdout);
    no_marker("stderr", &o.stderr);
    let v = json_of(&o);
    let l = &v["link"];
    assert!(l["method"].as_str().unwrap().contains("FEDERATED"), "{l}");
    // FEDERATEDX sends SHOW TABLE STATUS, then the SELECT: two round trips through the 10 ms link per call.
    assert_eq!(l["requests_per_call"], 2, "{l}");
    let p50 = ms(&l["round_trip"]["p50_ns"]);
    assert!(
        (2.0 * RTT_MS..2.0 * RTT_MS + 8.0).contains(&p50),
        "FEDERATEDX call p50 {p50} ms, expected two 10 ms round trips plus a small overhead"
    );
    let per = ms(&l["round_trip_per_request_p50_ns"]);
    assert!(
        (RTT_MS..RTT_MS + 4.0).contains(&per),
        "per request {per} ms"
    );
    assert!(ms(&l["client_leg"]["p50_ns"]) < RTT_MS / 2.0, "{l}");
    assert_eq!(l["multi_row"]["summary"]["count"], 10);
    assert_eq!(l["multi_row"]["rows"], 10);
    // The scratch tables (local FEDERATED, remote InnoDB) and the procedure are gone.
    assert_eq!(count_scratch(), scratch_before);
    assert_eq!(
        mariadb(
            "SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_NAME LIKE 'roundtrip\\_link\\_%'"
        ),
        "0"
    );
}

/// GET `path` from the agent's metrics address.
fn get(addr: SocketAddr, path: &str) -> String {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
    let _ = s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    text.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

fn sample(text: &str, name: &str, having: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
        .find(|l| having.iter().all(|h| l.contains(h)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Starts the agent with `cfg`, GETs `path` until `done` holds (90 s at most), stops it; the last answer and
/// the agent's output.
fn agent_until(cfg: &std::path::Path, path: &str, done: impl Fn(&str) -> bool) -> (String, String) {
    let mut cmd = std::process::Command::new(common::procs::bin());
    cmd.args([
        "agent",
        "--bind",
        "127.0.0.1",
        "--port",
        "0",
        "--metrics",
        "127.0.0.1:0",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    let mut agent = Proc::spawn("agent", cmd);
    let line = agent
        .wait_line("metrics on http://", Duration::from_secs(60))
        .unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], common::procs::port_in(&line)));
    let deadline = Instant::now() + Duration::from_secs(90);
    let answer = loop {
        let a = get(addr, path);
        if done(&a) {
            break a;
        }
        assert!(
            Instant::now() < deadline,
            "{path} never answered as expected:\n{a}\n{}",
            agent.output()
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    agent.signal(libc_sigterm());
    let _ = agent.wait_exit(Duration::from_secs(20));
    (answer, agent.output())
}

#[test]
fn agent_db_link_target_is_scraped_without_its_password() {
    if !pg_ready() {
        return;
    }
    let db = ScratchDb::new("agent", true);
    let mut kids = Kids::default();
    let proxy = kids.proxy(PG, &["--rtt", "10ms"]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "interval = \"200ms\"\ntimeout = \"2s\"\n[[target]]\nprobe = \"db\"\nurl = \"{}\"\nlink = \"{}\"\n",
            db.url(),
            pg_target(proxy)
        ),
    )
    .unwrap();
    let mut cmd = std::process::Command::new(common::procs::bin());
    cmd.args([
        "agent",
        "--bind",
        "127.0.0.1",
        "--port",
        "0",
        "--metrics",
        "127.0.0.1:0",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    let mut agent = Proc::spawn("agent", cmd);
    let line = agent
        .wait_line("metrics on http://", Duration::from_secs(60))
        .unwrap();
    let port = common::procs::port_in(&line);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let label = format!("target=\"127.0.0.1:{PG}->127.0.0.1:{proxy}/test\"");
    let deadline = Instant::now() + Duration::from_secs(90);
    let metrics = loop {
        let m = get(addr, "/metrics");
        if sample(
            &m,
            "roundtrip_rtt_seconds_count",
            &[&label, "probe=\"db-link\""],
        )
        .is_some_and(|n| n >= 3.0)
        {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "no db-link samples:\n{m}\n{}",
            agent.output()
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let n = sample(
        &metrics,
        "roundtrip_rtt_seconds_count",
        &[&label, "probe=\"db-link\""],
    )
    .unwrap();
    let sum = sample(
        &metrics,
        "roundtrip_rtt_seconds_sum",
        &[&label, "probe=\"db-link\""],
    )
    .unwrap();
    // Every counted probe went through the 10 ms link (the link open is not counted).
    assert!(sum / n >= RTT_MS / 1e3, "mean {} s", sum / n);
    assert!(
        !metrics.contains("probe=\"db\""),
        "one db-link series set, no db one"
    );
    // One target's series, all under probe="db-link" (110 at the default --buckets 4: 98 buckets + sum + count,
    // probes, 8 error reasons, up).
    let series = metrics
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains("probe=\"db-link\""))
        .count();
    assert_eq!(
        series,
        roundtrip::agent::buckets::Buckets::DEFAULT.series_per_target(),
        "{metrics}"
    );
    let api = get(addr, "/api/results");
    let page = get(addr, "/");
    agent.signal(libc_sigterm());
    let _ = agent.wait_exit(Duration::from_secs(20));
    for (what, text) in [
        ("/metrics", metrics),
        ("/api/results", api),
        ("/", page),
        ("logs", agent.output()),
    ] {
        no_marker(what, &text);
    }
}

fn libc_sigterm() -> i32 {
    15
}
