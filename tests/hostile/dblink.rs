//! Issue 34, classes 2 and 3 for `roundtrip db URL --link TARGET` and the agent's `db-link` targets, against the
//! real PostgreSQL (dblink) and MariaDB (FEDERATEDX) on this machine: the link's secret is in no statement text
//! (pg_stat_activity, the server log), redaction reads TARGET as libpq does, and a far end that accepts and never
//! answers (a black hole) neither keeps local backends past the link's timeout nor holds up a Ctrl-C.

use crate::common;
use common::db::{mariadb, psql, psql_ok, run};
use common::procs::Proc;
use std::io::{Read, Seek, SeekFrom};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PG: u16 = 5432;
const MY: u16 = 3306;

/// MariaDB tests load and unload FEDERATEDX: one at a time.
static MARIADB: Mutex<()> = Mutex::new(());

pub(crate) fn pg_ready() -> bool {
    common::service_up(PG, "PostgreSQL") && common::have("psql")
}

fn my_ready() -> bool {
    common::service_up(MY, "MariaDB") && common::have("mysql") && common::have("ss")
}

/// A scratch PostgreSQL database with dblink, dropped (with its sessions) when the test ends.
pub(crate) struct ScratchDb(pub(crate) String);

impl ScratchDb {
    pub(crate) fn new(what: &str) -> ScratchDb {
        let name = format!("rt_hostile_{what}_{}", std::process::id());
        psql(
            "test",
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        );
        psql("test", &format!("CREATE DATABASE {name}"));
        psql(&name, "CREATE EXTENSION dblink");
        ScratchDb(name)
    }
    pub(crate) fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{PG}/{}?sslmode=disable",
            self.0
        )
    }
    /// Backends of this database whose statement opens a link: (count, oldest statement age in seconds).
    fn link_opens(&self) -> (u32, f64) {
        let o = psql(
            "test",
            &format!(
                "SELECT count(*), coalesce(max(extract(epoch FROM now() - query_start)), 0) FROM pg_stat_activity WHERE datname = '{}' AND query LIKE '%roundtrip_link_open%' AND pid <> pg_backend_pid()",
                self.0
            ),
        );
        let (n, age) = o.split_once('|').expect("count|age");
        (n.parse().unwrap(), age.parse().unwrap())
    }
}

impl Drop for ScratchDb {
    fn drop(&mut self) {
        psql_ok(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.0));
    }
}

/// A TCP listener on 127.0.0.1 that accepts and never reads or writes: a far end that hangs every link open.
/// With `forward_unless`, a connection from a process whose name contains it is held; others are relayed to
/// `upstream` (so roundtrip's own connection works while the database server's link hangs).
struct BlackHole {
    port: u16,
    stop: Arc<AtomicBool>,
    held: Arc<Mutex<Vec<TcpStream>>>,
}

impl BlackHole {
    fn new() -> BlackHole {
        Self::start(None)
    }

    fn holding_only(process: &'static str, upstream: u16) -> BlackHole {
        Self::start(Some((process, upstream)))
    }

    fn start(relay: Option<(&'static str, u16)>) -> BlackHole {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let held = Arc::new(Mutex::new(Vec::new()));
        let (s, h) = (stop.clone(), held.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match l.accept() {
                    Ok((c, peer)) => {
                        c.set_nonblocking(false).unwrap();
                        match relay {
                            Some((process, upstream)) if !owned_by(peer, process) => {
                                relay_to(c, upstream)
                            }
                            _ => h.lock().unwrap().push(c),
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        BlackHole { port, stop, held }
    }

    fn held(&self) -> usize {
        self.held.lock().unwrap().len()
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.held.lock().unwrap().clear();
    }
}

/// True when the client socket at `peer` belongs to a process whose name contains `process` (`ss -tnp`).
fn owned_by(peer: SocketAddr, process: &str) -> bool {
    let o = std::process::Command::new("ss")
        .args(["-tnpH", &format!("sport = :{}", peer.port())])
        .output()
        .expect("ss");
    String::from_utf8_lossy(&o.stdout).contains(&format!("\"{process}"))
}

fn relay_to(c: TcpStream, upstream: u16) {
    let Ok(u) = TcpStream::connect(("127.0.0.1", upstream)) else {
        return;
    };
    for (mut a, mut b) in [(c.try_clone().unwrap(), u.try_clone().unwrap()), (u, c)] {
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut a, &mut b);
            let _ = b.shutdown(std::net::Shutdown::Both);
        });
    }
}

/// A port on 127.0.0.1 where nothing listens (connections are refused).
pub(crate) fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The PostgreSQL server log and its size now (None: not readable here, the log checks are skipped).
pub(crate) fn pg_log() -> Option<(std::path::PathBuf, u64)> {
    let current = psql("test", "SELECT coalesce(pg_current_logfile(), '')");
    let path = if current.is_empty() {
        let dir = std::fs::read_dir("/var/log/postgresql").ok()?;
        dir.filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())?
    } else {
        let data = psql("test", "SHOW data_directory");
        std::path::Path::new(&data).join(current)
    };
    let len = std::fs::metadata(&path).ok()?.len();
    eprintln!("server log: {}", path.display());
    Some((path, len))
}

/// What the server log gained since `from`.
pub(crate) fn pg_log_since(log: &(std::path::PathBuf, u64)) -> String {
    let mut f = std::fs::File::open(&log.0).unwrap();
    f.seek(SeekFrom::Start(log.1)).unwrap();
    let mut s = Vec::new();
    f.read_to_end(&mut s).unwrap();
    String::from_utf8_lossy(&s).into_owned()
}

fn rt_cmd(args: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(common::procs::bin());
    for v in [
        "PGHOST",
        "PGPORT",
        "PGUSER",
        "PGPASSWORD",
        "PGDATABASE",
        "MYSQL_PWD",
    ] {
        c.env_remove(v);
    }
    c.args(args);
    c
}

/// Polls `done` every 100 ms for up to `limit`.
fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// SIGINT to `p`; how long it took to exit (None: not within `limit`).
fn ctrl_c(p: &mut Proc, limit: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    p.signal(libc::SIGINT);
    p.wait_exit(limit).map(|_| t0.elapsed())
}

#[test]
fn pg_link_password_is_in_no_statement_text_nor_server_log() {
    if !pg_ready() {
        return;
    }
    let db = ScratchDb::new("stmt");
    let log = pg_log();
    // A link open that fails at once (refused): PostgreSQL logs the failing statement (log_min_error_statement).
    let refused = run(common::db::rt(Duration::from_secs(120)).args([
        "db",
        &db.url(),
        "--link",
        &format!(
            "host=127.0.0.1 port={} dbname=test user=postgres password=StmtMarkA91 sslmode=disable",
            closed_port()
        ),
        "-c",
        "1",
        "--connects",
        "1",
    ]));
    assert_eq!(refused.code, 1, "{}\n{}", refused.stdout, refused.stderr);
    // A link open that hangs (black hole): the statement is in pg_stat_activity while it runs.
    let bh = BlackHole::new();
    let mut p = Proc::spawn(
        "db",
        rt_cmd(&[
            "db",
            &db.url(),
            "--link",
            &format!(
                "host=127.0.0.1 port={} dbname=test user=postgres password=StmtMarkB92 sslmode=disable",
                bh.port
            ),
            "-c",
            "1",
            "--connects",
            "1",
            "--timeout",
            "3s",
        ]),
    );
    assert!(
        wait_for(Duration::from_secs(60), || db.link_opens().0 > 0),
        "the link open never showed in pg_stat_activity: {}",
        p.output()
    );
    let seen = psql(
        "test",
        &format!(
            "SELECT string_agg(query, ' | ') FROM pg_stat_activity WHERE datname = '{}' AND pid <> pg_backend_pid()",
            db.0
        ),
    );
    assert!(
        !seen.contains("StmtMarkB92"),
        "the password is in pg_stat_activity.query: {seen}"
    );
    assert!(seen.contains("roundtrip_link_open($1"), "{seen}");
    let _ = p.wait_exit(Duration::from_secs(60));
    let out = p.output();
    assert!(!out.contains("StmtMarkB92"), "{out}");
    if let Some(log) = log {
        // The backend ends its open within connect_timeout and logs the failing statement.
        assert!(wait_for(Duration::from_secs(30), || db.link_opens().0 == 0));
        std::thread::sleep(Duration::from_millis(500));
        let text = pg_log_since(&log);
        assert!(
            text.contains("roundtrip_link_open"),
            "the failing statements were not logged:\n{text}"
        );
        for m in ["StmtMarkA91", "StmtMarkB92"] {
            assert!(
                !text.contains(m),
                "the password {m} is in the server log:\n{text}"
            );
        }
    }
}

#[test]
fn pg_link_password_ending_in_dollar_rt_opens_the_link() {
    if !pg_ready() {
        return;
    }
    let db = ScratchDb::new("dollar");
    // Trust authentication: any password is accepted, so the link opens when the statement is whole.
    let o = run(common::db::rt(Duration::from_secs(120)).args([
        "db",
        &db.url(),
        "--link",
        &format!(
            "host=127.0.0.1 port={PG} dbname=test user=postgres sslmode=disable password=Pw$rt"
        ),
        "-c",
        "2",
        "--connects",
        "1",
        "--json",
    ]));
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let d = common::db::json_of(&o);
    assert_eq!(d["link"]["round_trip"]["count"], 2, "{d}");
    assert!(!o.stdout.contains("Pw$rt") && !o.stderr.contains("Pw$rt"));
}

#[test]
fn link_targets_are_redacted_as_libpq_reads_them() {
    if !pg_ready() {
        return;
    }
    let db = ScratchDb::new("redact");
    let closed = closed_port();
    for (target, marker) in [
        (
            format!(
                "host=127.0.0.1 port={closed} dbname=test user=postgres sslpassword=RedactMarkC3 sslmode=disable"
            ),
            "RedactMarkC3",
        ),
        // U+00A0 is no separator for libpq: it is part of the password.
        (
            format!(
                "host=127.0.0.1 port={closed} dbname=test user=postgres password=pw\u{a0}RedactMarkD4 sslmode=disable"
            ),
            "RedactMarkD4",
        ),
        (
            format!(
                "postgresql://postgres@127.0.0.1:{closed}/test?sslpassword=RedactMarkF6&sslmode=disable"
            ),
            "RedactMarkF6",
        ),
    ] {
        for json in [false, true] {
            let mut c = common::db::rt(Duration::from_secs(120));
            c.args([
                "db",
                &db.url(),
                "--link",
                &target,
                "-c",
                "1",
                "--connects",
                "1",
            ]);
            if json {
                c.arg("--json");
            }
            let o = run(&mut c);
            assert_eq!(o.code, 1, "{target}: {}\n{}", o.stdout, o.stderr);
            assert!(
                !o.stdout.contains(marker) && !o.stderr.contains(marker),
                "{marker} shows:\n{}\n{}",
                o.stdout,
                o.stderr
            );
        }
    }
    // libpq ends a URI's user part at the FIRST '@' (psql shows host "ss@127.0.0.1" for
    // postgresql://u:p@ss@127.0.0.1/...): the rest of the password would become a host name. Refused before
    // any I/O, without echoing it.
    let o = run(common::db::rt(Duration::from_secs(120)).args([
        "db",
        &db.url(),
        "--link",
        &format!(
            "postgresql://postgres:p@RedactMarkE5@127.0.0.1:{PG}/test?hostaddr=127.0.0.1&sslmode=disable"
        ),
        "-c",
        "1",
        "--connects",
        "1",
    ]));
    assert_eq!(o.code, 2, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("%40"), "{}", o.stderr);
    assert!(!o.stdout.contains("RedactMarkE5") && !o.stderr.contains("RedactMarkE5"));
}

#[test]
fn pg_black_hole_link_backends_end_within_connect_timeout_under_the_agent() {
    if !pg_ready() {
        return;
    }
    let db = ScratchDb::new("agentbh");
    let bh = BlackHole::new();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agent.toml");
    // timeout 1s: the link's connect_timeout is libpq's minimum, 2 s.
    std::fs::write(
        &cfg,
        format!(
            "interval = \"200ms\"\ntimeout = \"1s\"\n[[target]]\nprobe = \"db\"\nurl = \"{}\"\nlink = \"host=127.0.0.1 port={} dbname=test user=postgres password=AgentMarkG7 sslmode=disable\"\n",
            db.url(),
            bh.port
        ),
    )
    .unwrap();
    let mut agent = Proc::spawn(
        "agent",
        rt_cmd(&[
            "agent",
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--metrics",
            "127.0.0.1:0",
            "--config",
            cfg.to_str().unwrap(),
        ]),
    );
    agent
        .wait_line("metrics on http://", Duration::from_secs(60))
        .unwrap();
    // 50 cycles of 200 ms; the oldest link-open backend never older than connect_timeout (2 s) + 1 s.
    let (mut most, mut oldest) = (0, 0.0f64);
    let end = Instant::now() + Duration::from_millis(50 * 200);
    while Instant::now() < end {
        let (n, age) = db.link_opens();
        most = most.max(n);
        oldest = oldest.max(age);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        bh.held() > 0,
        "the agent never opened the link: {}",
        agent.output()
    );
    assert!(
        oldest <= 3.0,
        "a link-open backend was {oldest:.1} s old (connect_timeout 2 s + 1 s); at most {most} at once"
    );
    assert!(most <= 1, "{most} link opens at once from one target");
    eprintln!("oldest link-open backend {oldest:.2} s, at most {most} at once");
    let took = ctrl_c(&mut agent, Duration::from_secs(20)).expect("the agent stops on Ctrl-C");
    eprintln!("the agent stopped {took:?} after SIGINT");
    assert!(
        took < Duration::from_secs(5),
        "the agent took {took:?} to stop"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        db.link_opens().0,
        0,
        "link-open backends outlive the agent by 3 s"
    );
    assert!(!agent.output().contains("AgentMarkG7"));
}

#[test]
fn ctrl_c_during_a_black_hole_pg_link_open_returns_at_once() {
    if !pg_ready() {
        return;
    }
    let db = ScratchDb::new("ctrlc");
    let bh = BlackHole::new();
    let mut p = Proc::spawn(
        "db",
        rt_cmd(&[
            "db",
            &db.url(),
            "--link",
            &format!(
                "host=127.0.0.1 port={} dbname=test user=postgres sslmode=disable",
                bh.port
            ),
            "--connects",
            "1",
            "--timeout",
            "60s",
        ]),
    );
    assert!(
        wait_for(Duration::from_secs(60), || db.link_opens().0 > 0),
        "{}",
        p.output()
    );
    let took = ctrl_c(&mut p, Duration::from_secs(10));
    eprintln!("Ctrl-C during the open: exit after {took:?}");
    assert!(
        took.is_some_and(|t| t < Duration::from_secs(5)),
        "Ctrl-C during a link open took {took:?} (the --timeout is 60 s): {}",
        p.output()
    );
}

/// FEDERATEDX loaded for the test (unloaded after when the test loaded it).
struct Federatedx(bool);

impl Federatedx {
    fn load() -> Federatedx {
        let loaded = mariadb(
            "SELECT count(*) FROM information_schema.ENGINES WHERE ENGINE = 'FEDERATED' AND SUPPORT IN ('YES', 'DEFAULT')",
        ) == "1";
        if !loaded {
            mariadb("INSTALL SONAME 'ha_federatedx'");
        }
        Federatedx(!loaded)
    }
}

impl Drop for Federatedx {
    fn drop(&mut self) {
        // Wait for backends still inside a link open (net_read_timeout) before the scratch tables go.
        let stuck = "SELECT count(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%roundtrip_link_%' AND ID <> CONNECTION_ID()";
        wait_for(Duration::from_secs(90), || mariadb(stuck) == "0");
        for t in mariadb(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'test' AND TABLE_NAME LIKE 'roundtrip\\_link\\_%' AND CREATE_TIME > NOW() - INTERVAL 1 HOUR",
        )
        .lines()
        {
            let _ = std::process::Command::new("mysql")
                .args(["-h", "127.0.0.1", "-uroot", "test", "-e", &format!("DROP TABLE IF EXISTS `{t}`")])
                .output();
        }
        if self.0 {
            let _ = std::process::Command::new("mysql")
                .args([
                    "-h",
                    "127.0.0.1",
                    "-uroot",
                    "-e",
                    "UNINSTALL SONAME 'ha_federatedx'",
                ])
                .output();
        }
    }
}

/// Backends inside a FEDERATEDX link open to the trap (the CREATE of the scratch FEDERATED table).
fn federated_opens(port: u16) -> u32 {
    mariadb(&format!(
        "SELECT count(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'CREATE TABLE%roundtrip_link_%127.0.0.1:{port}%' AND ID <> CONNECTION_ID()"
    ))
    .parse()
    .unwrap()
}

#[test]
fn mariadb_agent_starts_one_link_open_per_target_at_a_time() {
    if !my_ready() {
        return;
    }
    let _one = MARIADB.lock().unwrap_or_else(|p| p.into_inner());
    let _fx = Federatedx::load();
    // roundtrip's own connection to the far end is relayed to MariaDB; the server's FEDERATEDX link hangs.
    let trap = BlackHole::holding_only("mariadbd", MY);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "interval = \"200ms\"\ntimeout = \"1s\"\n[[target]]\nprobe = \"db\"\nurl = \"mysql://root@127.0.0.1:{MY}/test\"\nlink = \"mysql://root@127.0.0.1:{}/test\"\n",
            trap.port
        ),
    )
    .unwrap();
    let mut agent = Proc::spawn(
        "agent",
        rt_cmd(&[
            "agent",
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--metrics",
            "127.0.0.1:0",
            "--config",
            cfg.to_str().unwrap(),
        ]),
    );
    agent
        .wait_line("metrics on http://", Duration::from_secs(60))
        .unwrap();
    // 50 cycles of 200 ms (each link open is given up on after 1 s; the server keeps it for net_read_timeout).
    let mut most = 0;
    let end = Instant::now() + Duration::from_millis(50 * 200);
    while Instant::now() < end {
        most = most.max(federated_opens(trap.port));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        most >= 1,
        "the trap never held a link open: {}",
        agent.output()
    );
    assert!(
        most <= 1,
        "{most} FEDERATEDX link opens at once from one target"
    );
    eprintln!("at most {most} FEDERATEDX link open at once");
    let took = ctrl_c(&mut agent, Duration::from_secs(20)).expect("the agent stops on Ctrl-C");
    eprintln!("the agent stopped {took:?} after SIGINT");
    assert!(
        took < Duration::from_secs(5),
        "the agent took {took:?} to stop"
    );
}

#[test]
fn ctrl_c_during_a_black_hole_mariadb_link_open_returns_at_once() {
    if !my_ready() {
        return;
    }
    let _one = MARIADB.lock().unwrap_or_else(|p| p.into_inner());
    let _fx = Federatedx::load();
    let trap = BlackHole::holding_only("mariadbd", MY);
    let mut p = Proc::spawn(
        "db",
        rt_cmd(&[
            "db",
            &format!("mysql://root@127.0.0.1:{MY}/test"),
            "--link",
            &format!("mysql://root@127.0.0.1:{}/test", trap.port),
            "--connects",
            "1",
            "--timeout",
            "60s",
        ]),
    );
    assert!(
        wait_for(Duration::from_secs(60), || federated_opens(trap.port) > 0),
        "{}",
        p.output()
    );
    let took = ctrl_c(&mut p, Duration::from_secs(10));
    eprintln!("Ctrl-C during the FEDERATEDX open: exit after {took:?}");
    assert!(
        took.is_some_and(|t| t < Duration::from_secs(5)),
        "Ctrl-C during a FEDERATEDX link open took {took:?} (the --timeout is 60 s): {}",
        p.output()
    );
    // The remote scratch table (made over roundtrip's own connection) went with it.
    assert_eq!(
        mariadb(
            "SELECT count(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'test' AND TABLE_NAME LIKE 'roundtrip\\_link\\_%\\_remote'"
        ),
        "0"
    );
}

#[test]
fn mariadb_inline_link_password_is_warned_about_and_a_create_server_entry_works() {
    if !my_ready() {
        return;
    }
    let _one = MARIADB.lock().unwrap_or_else(|p| p.into_inner());
    let _fx = Federatedx::load();
    // A password inline: one warning line (it goes into CONNECTION='...').
    let o = run(common::db::rt(Duration::from_secs(120)).args([
        "db",
        &format!("mysql://root@127.0.0.1:{MY}/test"),
        "--link",
        &format!("mysql://root:InlineMarkH8@127.0.0.1:{}/test", closed_port()),
        "-c",
        "1",
        "--connects",
        "1",
    ]));
    assert_eq!(
        o.stderr
            .matches("warning: the --link password goes into")
            .count(),
        1,
        "{}",
        o.stderr
    );
    assert!(!o.stdout.contains("InlineMarkH8") && !o.stderr.contains("InlineMarkH8"));
    // The agent says it once at start, for that target.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "interval = \"1s\"\ntimeout = \"1s\"\n[[target]]\nprobe = \"db\"\nurl = \"mysql://root@127.0.0.1:{MY}/test\"\nlink = \"mysql://root:InlineMarkH8@127.0.0.1:{}/test\"\n",
            closed_port()
        ),
    )
    .unwrap();
    let mut agent = Proc::spawn(
        "agent",
        rt_cmd(&[
            "agent",
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--metrics",
            "127.0.0.1:0",
            "--config",
            cfg.to_str().unwrap(),
        ]),
    );
    agent
        .wait_line("metrics on http://", Duration::from_secs(60))
        .unwrap();
    let said = agent.wait_line(
        "warning: the --link password goes into",
        Duration::from_secs(10),
    );
    let out = agent.output();
    drop(agent);
    assert!(said.is_ok(), "the agent did not warn: {out}");
    assert!(!out.contains("InlineMarkH8"), "{out}");
    // A CREATE SERVER entry: CONNECTION names it, no password in the statement.
    let server = format!("rt_hostile_srv_{}", std::process::id());
    mariadb(&format!(
        "CREATE OR REPLACE SERVER {server} FOREIGN DATA WRAPPER mysql OPTIONS (HOST '127.0.0.1', PORT {MY}, DATABASE 'test', USER 'root')"
    ));
    let o = run(common::db::rt(Duration::from_secs(120)).args([
        "db",
        &format!("mysql://root@127.0.0.1:{MY}/test"),
        "--link",
        &server,
        "-c",
        "2",
        "--connects",
        "1",
        "--json",
    ]));
    mariadb(&format!("DROP SERVER IF EXISTS {server}"));
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert!(
        !o.stderr.contains("warning: the --link password"),
        "{}",
        o.stderr
    );
    let d = common::db::json_of(&o);
    assert_eq!(d["link"]["round_trip"]["count"], 2, "{d}");
    assert_eq!(d["link"]["target"], server.as_str());
}

#[test]
fn pg_foreign_server_without_connect_timeout_is_warned_about() {
    if !pg_ready() {
        return;
    }
    let db = ScratchDb::new("fsrv");
    psql(
        &db.0,
        &format!(
            "CREATE SERVER rt_far FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '127.0.0.1', port '{PG}', dbname 'test', sslmode 'disable')"
        ),
    );
    psql(
        &db.0,
        "CREATE USER MAPPING FOR postgres SERVER rt_far OPTIONS (user 'postgres')",
    );
    let args = |t: &'static str| {
        let mut c = common::db::rt(Duration::from_secs(120));
        c.args(["db", &db.url(), "--link", t, "-c", "1", "--connects", "1"]);
        run(&mut c)
    };
    let o = args("rt_far");
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let all = format!("{}{}", o.stdout, o.stderr);
    assert!(
        all.contains("foreign server rt_far has no connect_timeout")
            && all.contains("ALTER SERVER \"rt_far\" OPTIONS (ADD connect_timeout"),
        "{all}"
    );
    psql(
        &db.0,
        "ALTER SERVER rt_far OPTIONS (ADD connect_timeout '2')",
    );
    let o = args("rt_far");
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert!(
        !o.stdout.contains("has no connect_timeout")
            && !o.stderr.contains("has no connect_timeout")
    );
}
