//! The database tests' kit (tests/db.rs, tests/db_link.rs): `roundtrip` with no database variables
//! inherited, its output captured, and psql / mariadb against the local servers.
#![allow(dead_code)]

use assert_cmd::Command;
use serde_json::Value;
use std::time::Duration;

/// `roundtrip` with no database variables inherited from the caller, killed after `timeout`.
pub fn rt(timeout: Duration) -> Command {
    let mut c = Command::cargo_bin("roundtrip").unwrap();
    for v in [
        "PGHOST",
        "PGPORT",
        "PGUSER",
        "PGPASSWORD",
        "PGDATABASE",
        "PGSSLMODE",
        "MYSQL_PWD",
        "MYSQL_HOST",
        "MYSQL_TCP_PORT",
        "REDISCLI_AUTH",
    ] {
        c.env_remove(v);
    }
    c.timeout(timeout);
    c
}

/// What a finished command printed, and its exit code (-1 when killed by a signal).
pub struct Out {
    /// The exit code.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs `c` to the end.
pub fn run(c: &mut Command) -> Out {
    let o = c.output().unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// The standard output of `o` as JSON (panics with both outputs when it is not).
pub fn json_of(o: &Out) -> Value {
    serde_json::from_str(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", o.stdout, o.stderr))
}

/// `psql -h 127.0.0.1 -U postgres -d DB -tAc SQL`; its output trimmed (panics when psql fails).
pub fn psql(db: &str, sql: &str) -> String {
    let o = std::process::Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-d", db, "-tAc", sql])
        .output()
        .expect("psql");
    assert!(
        o.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// `mysql -h 127.0.0.1 -uroot -N -B test -e SQL`; its output trimmed (panics when it fails).
pub fn mariadb(sql: &str) -> String {
    let o = std::process::Command::new("mysql")
        .args(["-h", "127.0.0.1", "-uroot", "-N", "-B", "test", "-e", sql])
        .output()
        .expect("mysql");
    assert!(
        o.status.success(),
        "mysql {sql}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// `psql -h 127.0.0.1 -U postgres -d test -q -c SQL` succeeded (its output is discarded).
pub fn psql_ok(sql: &str) -> bool {
    std::process::Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            "test",
            "-q",
            "-c",
            sql,
        ])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A scratch PostgreSQL database filled by `pgbench -i`, dropped when the test ends however it ends.
pub struct PgbenchDb(pub String);

impl PgbenchDb {
    /// Creates `PREFIX_PID_NANOS` and runs `pgbench -i -q` on it (panics when either fails).
    pub fn create(prefix: &str) -> PgbenchDb {
        let name = format!(
            "{prefix}_{}_{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        );
        let db = PgbenchDb(name);
        assert!(
            psql_ok(&format!("create database {}", db.0)),
            "create scratch database {}",
            db.0
        );
        let st = std::process::Command::new("pgbench")
            .args(["-h", "127.0.0.1", "-U", "postgres", "-i", "-q", &db.0])
            .output()
            .expect("pgbench -i runs");
        assert!(
            st.status.success(),
            "pgbench -i: {}",
            String::from_utf8_lossy(&st.stderr)
        );
        db
    }
}

impl Drop for PgbenchDb {
    fn drop(&mut self) {
        psql_ok(&format!("drop database if exists {}", self.0));
    }
}

/// Runs `program args` to the end and returns its standard output (panics when it fails).
pub fn sh(program: &str, args: &[&str]) -> String {
    let o = std::process::Command::new(program)
        .args(args)
        .output()
        .expect(program);
    assert!(
        o.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `redis-cli -h 127.0.0.1 -p 6379 ARGS`; its output (panics when it fails).
pub fn redis_cli(args: &[&str]) -> String {
    let mut a = vec!["-h", "127.0.0.1", "-p", "6379"];
    a.extend_from_slice(args);
    sh("redis-cli", &a)
}

/// Runs a cleanup command when dropped (users, roles, ACL entries made by a test).
pub struct Cleanup(pub Box<dyn FnMut()>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        (self.0)()
    }
}

/// Fails when `secret` appears in any of `texts`.
pub fn assert_secret_absent(secret: &str, texts: &[&str]) {
    for t in texts {
        assert!(!t.contains(secret), "the password leaked into output:\n{t}");
    }
}

/// A short tag unique to this run, for names of users and roles made by a test.
pub fn tag() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}_{}", std::process::id(), nanos % 1_000_000)
}

/// A self-signed certificate for "localhost" made with openssl in `dir`: (cert, key).
pub fn self_signed(dir: &std::path::Path) -> (String, String) {
    let cert = dir.join("cert.pem").to_str().unwrap().to_string();
    let key = dir.join("key.pem").to_str().unwrap().to_string();
    sh(
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &cert,
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
        ],
    );
    (cert, key)
}

/// Waits (up to 3 minutes) until something accepts connections on 127.0.0.1:`port`.
pub fn wait_for_port(port: u16) {
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "nothing listens on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
