//! `roundtrip db URL`: round trips to PostgreSQL, MySQL/MariaDB, Redis and Oracle listeners.

use super::args;
use super::output::{Exit, error_line, note, out, out_text};
use anyhow::Context;
use clap::Args;
use roundtrip::db::link::{self, LinkTarget};
use roundtrip::db::{self, DbConfig, DbError, DbSample, DbUrl, LinkConfig, Observer, Secret};
use roundtrip::doc;
use roundtrip::doc::db::DbDoc;
use roundtrip::output_file::{self, OutputFile};
use roundtrip::report::db::link_heading;
use roundtrip::report::db::{text_heading, text_summary};
use roundtrip::report::load;
use std::io::{BufRead, BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `roundtrip db`.
#[derive(Debug, Args)]
pub struct DbArgs {
    /// postgres://, mysql://, mariadb://, redis://, rediss:// or oracle://, as
    /// SCHEME://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE][?sslmode=MODE]. Missing parts come from the
    /// ecosystem's variables (PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE PGSSLMODE; MYSQL_HOST MYSQL_TCP_PORT
    /// MYSQL_PWD; REDISCLI_AUTH).
    #[arg(value_name = "URL")]
    url: String,
    /// Fresh connections to time phase by phase (DNS, TCP, TLS, startup+auth, first query).
    #[arg(long, default_value = "5", value_parser = args::count, value_name = "N")]
    connects: u64,
    /// Iterations on the open connection: protocol ping, query and fetch each (Oracle: TNS pings).
    #[arg(long, short = 'c', short_alias = 'n', default_value = "100", value_parser = args::count)]
    count: u64,
    /// Pause between iterations (default: none).
    #[arg(long, short = 'i', value_parser = args::positive_duration)]
    interval: Option<Duration>,
    /// Singleton statement to time [default: SELECT 1; Redis: GET roundtrip:db:probe].
    #[arg(long, value_name = "SQL")]
    query: Option<String>,
    /// Rows per multi-row fetch (0: no fetch) [default: 100; with --link: 10, a row per packet].
    #[arg(long, value_parser = rows)]
    rows: Option<u64>,
    /// Bytes per fetched row (e.g. 1000, 1400, 8k) [default: 1000; with --link: 1437, a row per packet].
    #[arg(long, value_parser = args::size, value_name = "BYTES")]
    row_bytes: Option<u64>,
    /// Measure from inside the database at URL to a remote database through a database link: a dblink
    /// connection string ('host=... dbname=... user=... password=...') or foreign server name (PostgreSQL),
    /// or mysql://USER:PASSWORD@HOST:PORT/DATABASE reached through a FEDERATEDX table (MySQL/MariaDB).
    /// The password is never printed. See docs/db-link.md.
    #[arg(long, value_name = "TARGET")]
    link: Option<String>,
    /// With --link: create the dblink extension (PostgreSQL) or load FEDERATEDX (MariaDB) when missing.
    #[arg(long, requires = "link")]
    create_extension: bool,
    /// Longest wait for any answer.
    #[arg(long, default_value = "5s", value_parser = args::positive_duration)]
    timeout: Duration,
    /// Ask for the password on the terminal.
    #[arg(long = "password", short = 'W')]
    prompt_password: bool,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pictures: super::report::PictureArgs,
    /// Write one CSV row per timed operation to FILE (op, seq, start, duration, rows, bytes).
    #[arg(long, value_name = "FILE.csv")]
    full_log: Option<PathBuf>,
    #[command(flatten)]
    family: super::common::FamilyArgs,
}

fn rows(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if n <= db::MAX_ROWS => Ok(n),
        Ok(_) => Err(format!("at most {} rows", db::MAX_ROWS)),
        Err(_) => Err(format!("rows '{s}' is not a whole number")),
    }
}

/// Writes every sample as one CSV row.
struct CsvLog {
    w: BufWriter<OutputFile>,
    rows: u64,
    failed: bool,
    /// `--link`: two more columns, the local database's clock around each link call.
    link: bool,
}

impl Observer for CsvLog {
    fn sample(&mut self, s: &DbSample) {
        let span = match (self.link, s.db_span) {
            (false, _) => String::new(),
            (true, None) => ",,".into(),
            (true, Some((b, e))) => format!(
                ",{}.{:06},{}.{:06}",
                b.div_euclid(1_000_000),
                b.rem_euclid(1_000_000),
                e.div_euclid(1_000_000),
                e.rem_euclid(1_000_000)
            ),
        };
        if writeln!(
            self.w,
            "{},{},{:.9},{},{},{}{span}",
            s.op.name(),
            s.seq,
            s.at.as_secs_f64(),
            s.duration.as_nanos(),
            s.rows,
            s.bytes
        )
        .is_err()
        {
            self.failed = true;
        }
        self.rows += 1;
    }
}

/// Passes samples to the full log and, with `--link` in text mode, prints each link call as it comes.
struct Both<'a> {
    log: Option<&'a mut CsvLog>,
    print_link: bool,
}

impl Observer for Both<'_> {
    fn sample(&mut self, s: &DbSample) {
        if let Some(l) = self.log.as_deref_mut() {
            l.sample(s);
        }
        if self.print_link
            && let Some(line) = roundtrip::report::db::link_call_line(s)
        {
            let _ = out_text(format!("{line}\n"));
        }
    }
}

/// Reads a password from the terminal without echo.
fn prompt_password(user: &str, what: &str) -> anyhow::Result<Secret> {
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .context("cannot open the terminal to ask for the password (give it in the URL or the environment)")?;
    let stty = |arg: &str| {
        let _ = std::process::Command::new("stty")
            .arg(arg)
            .stdin(tty.try_clone().expect("tty"))
            .status();
    };
    let mut w = &tty;
    // Echo goes off before the prompt shows, so nothing typed after the prompt can be echoed.
    stty("-echo");
    write!(w, "Password for {what} user '{user}': ")?;
    w.flush()?;
    let mut line = String::new();
    let r = std::io::BufReader::new(&tty).read_line(&mut line);
    stty("echo");
    writeln!(w)?;
    r.context("reading the password from the terminal")?;
    Ok(Secret::new(line.trim_end_matches(['\r', '\n'])))
}

/// Runs `roundtrip db`.
pub fn run(a: DbArgs) -> anyhow::Result<Exit> {
    let mut url = DbUrl::parse(&a.url).map_err(super::output::refused)?;
    url.apply_env(&|k| std::env::var(k).ok());
    let link = match &a.link {
        Some(t) => match LinkTarget::parse(t, url.scheme) {
            Ok(t) => Some(LinkConfig {
                target: t,
                create_extension: a.create_extension,
            }),
            // Refused before any I/O.
            Err(e) => return Err(super::output::refused(e)),
        },
        None => None,
    };
    let (default_rows, default_row_bytes) = if link.is_some() {
        (link::DEFAULT_ROWS, link::DEFAULT_ROW_BYTES)
    } else {
        (100, 1000)
    };
    let mut config = DbConfig::new(url);
    config.link = link;
    config.family = a.family.family();
    config.connects = u32::try_from(a.connects).unwrap_or(u32::MAX);
    config.count = a.count;
    config.interval = a.interval;
    config.query = a.query.clone();
    config.rows = a.rows.unwrap_or(default_rows);
    config.row_bytes = a.row_bytes.unwrap_or(default_row_bytes);
    config.timeout = a.timeout;
    if config.link.is_some() && a.query.is_some() {
        return Err(super::output::refused(
            "--query does not go with --link: the link call is fixed (select clock_timestamp() through the link)",
        ));
    }
    config.validate().map_err(super::output::refused)?;
    let scrub = |s: String| match &config.link {
        Some(l) => l.target.scrub(&s),
        None => s,
    };
    a.pictures.validate().map_err(super::output::refused)?;
    check_chart(&a)?;
    if let Some(path) = &a.full_log {
        super::report::check_output(path).map_err(super::output::refused)?;
    }
    let mut log = match &a.full_log {
        Some(p) => {
            let mut w = BufWriter::new(
                output_file::create(p)
                    .with_context(|| format!("cannot create the full log {}", p.display()))?,
            );
            let header = if config.link.is_some() {
                load::DB_LINK_LOG_HEADER
            } else {
                load::DB_LOG_HEADER
            };
            writeln!(w, "{header}")
                .with_context(|| format!("writing the full log {}", p.display()))?;
            Some(CsvLog {
                w,
                rows: 0,
                failed: false,
                link: config.link.is_some(),
            })
        }
        None => None,
    };
    if a.prompt_password {
        config.url.password = Some(prompt_password(
            config.url.user(),
            config.url.scheme.name(),
        )?);
    }
    config.cancel = super::common::cancel_on_ctrl_c();
    if let Some(w) = config.link.as_ref().and_then(|l| l.target.warning()) {
        super::output::note(w);
    }
    if !a.json {
        out_text(match &config.link {
            Some(l) => link_heading(
                &config.url.redacted(),
                config.url.scheme,
                l.target.redacted(),
            ),
            None => text_heading(&config.url.redacted(), config.url.scheme),
        })?;
    }
    let print_link = !a.json && config.link.is_some();
    let mut result = {
        let mut obs = Both {
            log: log.as_mut(),
            print_link,
        };
        db::run(&config, &mut obs).map_err(|e| anyhow::anyhow!(scrub(e.to_string())))?
    };
    // The server wants a password we do not have: ask once, when a person is there to answer.
    if let Some(DbError::NoPassword { user, .. }) = &result.error
        && !a.prompt_password
        && std::io::stdin().is_terminal()
        && result.connects_ok == 0
    {
        config.url.password = Some(prompt_password(user, config.url.scheme.name())?);
        let mut obs = Both {
            log: log.as_mut(),
            print_link,
        };
        result = db::run(&config, &mut obs).map_err(|e| anyhow::anyhow!(scrub(e.to_string())))?;
    }
    // No connection got through startup (a closed port, a refused login, an unknown database): in text the
    // error alone, no table of dashes around one TCP handshake, the same for every database. --json still
    // gives its document (its "error" says why) once a handshake was timed; with nothing measured at all, no
    // document of empty histograms. A run that set up a connection keeps the phases it measured.
    if let Some(e) = &result.error
        && result.connects_ok == 0
        && (!a.json || result.tcp_handshake.is_empty())
        && result.ping.is_empty()
        && result.query.is_empty()
        && result.fetch.is_empty()
    {
        error_line(scrub(e.to_string()));
        return Ok(Exit::Failed);
    }
    if a.json {
        let bytes = doc::to_bytes(&DbDoc::new(&config, &result));
        out(scrub(String::from_utf8_lossy(&bytes).into_owned()))?;
    } else {
        out_text(scrub(text_summary(&config, &result)))?;
    }
    if let (Some(mut log), Some(path)) = (log, &a.full_log) {
        let committed = !log.failed
            && log.w.flush().is_ok()
            && log.w.into_inner().ok().is_some_and(|f| f.commit().is_ok());
        if !committed {
            error_line(format!(
                "writing the full log {} failed (disk full?)",
                path.display()
            ));
            return Ok(Exit::Failed);
        }
        if !a.json {
            note(format!(
                "full log: {} rows written to {}",
                log.rows,
                path.display()
            ));
        }
    }
    if a.pictures.wanted() {
        let doc = DbDoc::new(&config, &result);
        super::report::after_run(
            &a.pictures,
            &doc,
            a.full_log.as_deref(),
            &config.url.redacted(),
        )?;
    }
    if let Some(e) = &result.error {
        error_line(scrub(e.to_string()));
        return Ok(Exit::Failed);
    }
    Ok(Exit::Ok)
}

/// Refuses (exit 2, before any I/O) a `--chart` drawn only from what `--full-log` wrote: every timed operation
/// over time (`rtt-time`) and by percentile (`percentiles`) are read back from that file after the run; the
/// phase bars (`bars`) need nothing more.
fn check_chart(a: &DbArgs) -> anyhow::Result<()> {
    let Some(chart) = a.pictures.chart.filter(|c| {
        matches!(
            c,
            super::report::ChartId::Percentiles | super::report::ChartId::RttTime
        )
    }) else {
        return Ok(());
    };
    let name = chart.id();
    let readable = a.full_log.as_deref().is_some_and(|p| {
        !output_file::is_stdout(p)
            && !std::fs::metadata(p).is_ok_and(|m| {
                use std::os::unix::fs::FileTypeExt;
                m.file_type().is_fifo()
            })
    });
    match &a.full_log {
        None => Err(super::output::refused(format!(
            "--chart {name} draws every timed operation, read back from the full log: add --full-log FILE.csv (or pick --chart bars)"
        ))),
        Some(p) if !readable => Err(super::output::refused(format!(
            "--chart {name} reads the full log back after the run, which {} cannot be: give --full-log a file name (or pick --chart bars)",
            if output_file::is_stdout(p) {
                "standard output (-)".to_string()
            } else {
                format!("the FIFO {}", p.display())
            }
        ))),
        Some(_) => Ok(()),
    }
}
