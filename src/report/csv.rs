//! CSV exports: the per-round-trip full log (sockperf --full-log, with RTT instead of one-way halves).

use crate::probe::ping::{Observer, Sample};
use std::io::{self, Write};

/// Column names of the full log.
pub const FULL_LOG_HEADER: &str = "seq,send_ns,recv_ns,rtt_ns,server_ns\n";

/// Writes one row per measured round trip as the samples arrive; keeps the first write error.
pub struct FullLog<W: Write> {
    out: W,
    rows: u64,
    error: Option<io::Error>,
}

impl<W: Write> FullLog<W> {
    /// Starts a log and writes its header line.
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(FULL_LOG_HEADER.as_bytes())?;
        Ok(FullLog {
            out,
            rows: 0,
            error: None,
        })
    }

    /// Appends one row.
    pub fn write_sample(&mut self, s: &Sample) {
        if self.error.is_some() {
            return;
        }
        let server = s.server.map_or(String::new(), |d| d.as_nanos().to_string());
        let r = writeln!(
            self.out,
            "{},{},{},{},{}",
            s.seq,
            s.sent.as_nanos(),
            s.received.as_nanos(),
            s.rtt().as_nanos(),
            server
        );
        match r {
            Ok(()) => self.rows += 1,
            Err(e) => self.error = Some(e),
        }
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Flushes, reports the first error met while writing, and hands back the writer (to commit an output
    /// file) with the rows written.
    pub fn into_inner(mut self) -> io::Result<(W, u64)> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()?;
        Ok((self.out, self.rows))
    }

    /// Flushes and reports the first error met while writing.
    pub fn finish(mut self) -> io::Result<u64> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()?;
        Ok(self.rows)
    }
}

impl<W: Write> Observer for FullLog<W> {
    fn sample(&mut self, sample: &Sample) {
        self.write_sample(sample);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rows_have_rtt() {
        let mut log = FullLog::new(Vec::new()).unwrap();
        log.write_sample(&Sample {
            seq: 3,
            sent: Duration::from_nanos(100),
            received: Duration::from_nanos(350),
            server: Some(Duration::from_nanos(20)),
        });
        log.write_sample(&Sample {
            seq: 4,
            sent: Duration::from_nanos(400),
            received: Duration::from_nanos(500),
            server: None,
        });
        let out = String::from_utf8(log.out.clone()).unwrap();
        assert_eq!(
            out,
            format!("{FULL_LOG_HEADER}3,100,350,250,20\n4,400,500,100,\n")
        );
        assert_eq!(log.finish().unwrap(), 2);
    }
}
