//! Generic TCP turns for protocols roundtrip does not parse: a request is the client's bytes since the server
//! last spoke, its response the server's first byte after them. The latency is from the last client byte of
//! the turn to the first server byte (time to first byte); the operation is "turn".
#![forbid(unsafe_code)]

use super::{AnomalyKind, ConnMatcher, Dir, Out, Status, Transaction};
use std::time::Duration;

/// Turn tracking for one connection.
#[derive(Debug, Default)]
pub struct Generic {
    /// The client's turn in progress: first ts, last ts, seq of its first byte.
    turn: Option<(Duration, Duration, u32)>,
}

impl Generic {
    /// A matcher for one connection.
    pub fn new() -> Self {
        Self::default()
    }
}

impl ConnMatcher for Generic {
    fn on_data(&mut self, dir: Dir, ts: Duration, seq: u32, data: &[u8], out: &mut Out) {
        if data.is_empty() {
            return;
        }
        match dir {
            Dir::Request => match &mut self.turn {
                Some(t) => t.1 = ts,
                None => self.turn = Some((ts, ts, seq)),
            },
            Dir::Response => {
                if let Some((first, last, seq)) = self.turn.take() {
                    out.push(Transaction::new(
                        "turn".into(),
                        (first, last),
                        (ts, ts),
                        Some(seq),
                        Status::Ok,
                    ));
                }
            }
        }
    }

    fn on_gap(&mut self, dir: Dir, ts: Duration, len: u64, _out: &mut Out) {
        // Missing client bytes still belong to the turn; missing server bytes still answer it.
        if dir == Dir::Request
            && len > 0
            && let Some(t) = &mut self.turn
        {
            t.1 = ts;
        }
    }

    fn on_close(&mut self, ts: Duration, out: &mut Out) {
        if self.turn.take().is_some() {
            out.anomaly(ts, AnomalyKind::NoResponse);
        }
    }
}
