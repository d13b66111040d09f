//! The run loop: connect and set up a session, then the timed protocol pings, singleton queries and
//! fetches, into a [`DbResult`].

use super::*;

fn now_since(start: Instant) -> Duration {
    start.elapsed()
}

pub(crate) fn record(
    h: &mut LatencyHistogram,
    obs: &mut dyn Observer,
    op: Op,
    seq: u64,
    at: Duration,
    d: Duration,
    f: Fetched,
) {
    h.record(d);
    obs.sample(&DbSample {
        op,
        seq,
        at,
        duration: d,
        rows: f.rows,
        bytes: f.bytes,
        db_span: None,
    });
}

/// A TCP connection to `addr` for round `i`, its handshake recorded (in `r` and to `obs`) at its start
/// since `start`.
pub(crate) fn connect_recorded(
    addr: SocketAddr,
    proto: &'static str,
    timeout: Duration,
    r: &mut DbResult,
    obs: &mut dyn Observer,
    i: u64,
    start: Instant,
) -> Result<Conn, DbError> {
    let at = now_since(start);
    let (conn, hs) = tcp_connect(addr, proto, timeout)?;
    record(
        &mut r.tcp_handshake,
        obs,
        Op::TcpHandshake,
        i,
        at,
        hs,
        Fetched::default(),
    );
    Ok(conn)
}

/// The singleton statement used when none was given.
pub fn default_query(scheme: Scheme) -> &'static str {
    match scheme {
        Scheme::Redis => "GET roundtrip:db:probe",
        _ => "SELECT 1",
    }
}

/// Runs the measurement. Errors before anything was measured (bad settings, DNS) are returned as `Err`;
/// later errors end the run and are kept in [`DbResult::error`] with everything measured so far.
pub fn run(config: &DbConfig, obs: &mut dyn Observer) -> Result<DbResult, DbError> {
    config.validate()?;
    let url = &config.url;
    let scheme = url.scheme;
    let target = Target {
        host: if url.host.is_empty() {
            "localhost".into()
        } else {
            url.host.clone()
        },
        port: url.port(),
    };
    let query_text = config
        .query
        .clone()
        .unwrap_or_else(|| default_query(scheme).to_string());
    let start = Instant::now();
    let plain = scheme != Scheme::Oracle && config.link.is_none();
    let mut r = DbResult::new(
        scheme,
        url.redacted(),
        url.ssl_mode.unwrap_or(match scheme {
            Scheme::Postgres | Scheme::Mysql => SslMode::Prefer,
            _ => SslMode::Disable,
        }),
        if plain { config.rows } else { 0 },
        if plain {
            query_text.clone()
        } else {
            String::new()
        },
    );
    // The first resolution is fatal when it fails: nothing can be measured.
    let (addr, dns) = target.resolve(config.family)?;
    r.address = Some(addr);
    record(
        &mut r.dns,
        obs,
        Op::Dns,
        0,
        Duration::ZERO,
        dns,
        Fetched::default(),
    );
    let outcome = if scheme == Scheme::Oracle {
        oracle::run_pings(config, &target, addr, &mut r, obs, start)
    } else {
        run_sql(config, &target, addr, &query_text, &mut r, obs, start)
    };
    if let Err(e) = outcome {
        r.error = Some(e);
    }
    r.cancelled = config.cancel.load(Ordering::SeqCst);
    r.elapsed = start.elapsed();
    Ok(r)
}

fn open_session(
    config: &DbConfig,
    conn: Conn,
    r: &mut DbResult,
) -> Result<(Box<dyn Session + Send>, Setup), DbError> {
    let url = &config.url;
    match url.scheme {
        Scheme::Postgres => postgres::connect(conn, url, r.ssl_mode)
            .map(|(s, st)| (Box::new(s) as Box<dyn Session + Send>, st)),
        Scheme::Mysql => mysql::connect(conn, url, r.ssl_mode)
            .map(|(s, st)| (Box::new(s) as Box<dyn Session + Send>, st)),
        Scheme::Redis => redis::connect(conn, url, r.ssl_mode)
            .map(|(s, st)| (Box::new(s) as Box<dyn Session + Send>, st)),
        Scheme::Oracle => Err(DbError::Config(
            "an Oracle listener ping opens no database session".into(),
        )),
    }
}

#[allow(clippy::too_many_arguments)]
fn run_sql(
    config: &DbConfig,
    target: &Target,
    mut addr: SocketAddr,
    query_text: &str,
    r: &mut DbResult,
    obs: &mut dyn Observer,
    start: Instant,
) -> Result<(), DbError> {
    let proto = r.scheme.name();
    let mut session: Option<Box<dyn Session + Send>> = None;
    for i in 0..u64::from(config.connects) {
        if config.cancel.load(Ordering::SeqCst) {
            return Ok(());
        }
        if i > 0 {
            let at = now_since(start);
            let (a, dns) = target.resolve(config.family)?;
            addr = a;
            record(&mut r.dns, obs, Op::Dns, i, at, dns, Fetched::default());
        }
        let conn = connect_recorded(addr, proto, config.timeout, r, obs, i, start)?;
        let at = now_since(start);
        let t0 = Instant::now();
        let (mut s, setup) = open_session(config, conn, r)?;
        let total = t0.elapsed();
        if let Some(tls) = setup.tls {
            record(&mut r.tls, obs, Op::Tls, i, at, tls, Fetched::default());
        }
        let startup = total
            .saturating_sub(setup.tls.unwrap_or_default())
            .saturating_sub(setup.uncounted);
        let at = at + setup.tls.unwrap_or_default();
        record(
            &mut r.startup,
            obs,
            Op::Startup,
            i,
            at,
            startup,
            Fetched::default(),
        );
        if r.server_version.is_none() {
            r.server_version = setup.server_version;
        }
        for n in setup.notes {
            if !r.notes.contains(&n) {
                r.notes.push(n);
            }
        }
        let at = now_since(start);
        let t0 = Instant::now();
        let f = s.query(query_text)?;
        record(
            &mut r.first_query,
            obs,
            Op::FirstQuery,
            i,
            at,
            t0.elapsed(),
            f,
        );
        r.connects_ok += 1;
        if i + 1 < u64::from(config.connects) {
            s.close();
        } else {
            session = Some(s);
        }
    }
    let Some(mut s) = session else { return Ok(()) };
    if config.link.is_some() {
        return link::measure(config, s, r, obs, start);
    }
    let result = measure_loop(config, query_text, s.as_mut(), r, obs, start);
    s.cleanup();
    s.close();
    result
}

fn measure_loop(
    config: &DbConfig,
    query_text: &str,
    s: &mut dyn Session,
    r: &mut DbResult,
    obs: &mut dyn Observer,
    start: Instant,
) -> Result<(), DbError> {
    let fetch_sql = if config.rows > 0 {
        Some(s.prepare_fetch(config.rows, config.row_bytes)?)
    } else {
        None
    };
    for i in 0..config.count {
        if !config.next_round(i) {
            return Ok(());
        }
        let at = now_since(start);
        let t0 = Instant::now();
        s.ping()?;
        record(
            &mut r.ping,
            obs,
            Op::Ping,
            i,
            at,
            t0.elapsed(),
            Fetched::default(),
        );

        let at = now_since(start);
        let t0 = Instant::now();
        let f = s.query(query_text)?;
        record(&mut r.query, obs, Op::Query, i, at, t0.elapsed(), f);

        if let Some(sql) = &fetch_sql {
            let at = now_since(start);
            let t0 = Instant::now();
            let f = s.query(sql)?;
            let d = t0.elapsed();
            if f.rows != config.rows {
                return Err(DbError::Server {
                    proto: r.scheme.name(),
                    addr: r
                        .address
                        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0))),
                    during: "the multi-row fetch".into(),
                    message: format!("{} rows came back, {} were asked for", f.rows, config.rows),
                });
            }
            r.fetch_rows_total += f.rows;
            r.fetch_bytes_total += f.bytes;
            record(&mut r.fetch, obs, Op::Fetch, i, at, d, f);
        }
    }
    Ok(())
}
