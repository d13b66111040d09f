//! The document `roundtrip tcp --per-packet --json` writes: the filter, the event counts, one tally per traced
//! connection (segments, ACKs, bytes per ACK, the largest unacknowledged bytes and peer window) and the first
//! [`FIRST_EVENTS`] tcp_probe events verbatim.

use super::Header;
use crate::tcpwatch::Filter;
use crate::tcpwatch::trace::ProbeEvent;
use serde::{Deserialize, Serialize};

/// How many events `--per-packet --json` keeps verbatim.
pub const FIRST_EVENTS: usize = 10_000;

/// Per-connection tally of a trace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TcpTraceConn {
    /// Local address.
    pub local: String,
    /// Remote address.
    pub remote: String,
    /// The kernel's socket cookie.
    pub cookie: u64,
    /// tcp_probe events of this connection.
    pub events: u64,
    /// Segments that arrived with payload.
    pub data_segments_in: u64,
    /// Arriving pure ACKs that acknowledged new data.
    pub acks_in: u64,
    /// Bytes those ACKs acknowledged.
    pub bytes_acked: u64,
    /// Sender MSS from sock_diag (0: unknown).
    pub mss: u32,
    /// Mean data segments acknowledged per ACK (bytes per ACK / MSS).
    pub segments_per_ack: Option<f64>,
    /// Most bytes sent and not acknowledged at any event.
    pub unacked_max: u32,
    /// Largest peer window at any event, bytes.
    pub snd_wnd_max: u32,
}

impl TcpTraceConn {
    /// The tally of the connection `e` belongs to, before any event is counted.
    pub fn new(e: &ProbeEvent) -> Self {
        TcpTraceConn {
            local: e.local.to_string(),
            remote: e.remote.to_string(),
            cookie: e.cookie,
            ..TcpTraceConn::default()
        }
    }

    /// Counts event `e`, given the connection's previous event `prev` and its sender MSS (0: unknown).
    pub fn count(&mut self, e: &ProbeEvent, prev: Option<&ProbeEvent>, mss: u32) {
        self.mss = mss;
        self.events += 1;
        let acked = prev.map_or(0, |p| e.snd_una.wrapping_sub(p.snd_una));
        if e.data_len > 0 {
            self.data_segments_in += 1;
        } else if acked > 0 && acked < 1 << 30 {
            self.acks_in += 1;
            self.bytes_acked += u64::from(acked);
        }
        self.unacked_max = self.unacked_max.max(e.unacked());
        self.snd_wnd_max = self.snd_wnd_max.max(e.snd_wnd);
    }

    /// Sets [`segments_per_ack`](Self::segments_per_ack) once every event is counted.
    pub fn finish(&mut self) {
        self.segments_per_ack = (self.acks_in > 0 && self.mss > 0)
            .then(|| self.bytes_acked as f64 / self.acks_in as f64 / f64::from(self.mss));
    }
}

/// The document `roundtrip tcp --per-packet --json` prints.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TcpTraceDoc {
    /// `format`, `format_version`, `kind` ([`kind::TCP_TRACE`](super::kind::TCP_TRACE)) and
    /// `environment`; [`Header`] says how a missing one reads.
    #[serde(flatten)]
    pub header: Header,
    /// Start of the trace, Unix seconds.
    pub started_unix_s: f64,
    /// The filter as the user gave it.
    pub filter: Filter,
    /// Length of the trace asked for; null until Ctrl-C.
    pub duration_ns: Option<u64>,
    /// Matching events.
    pub events: u64,
    /// Events the kernel dropped because a ring buffer was full.
    pub lost_events: u64,
    /// One tally per connection, in the order their first events arrived.
    pub connections: Vec<TcpTraceConn>,
    /// The first matching events (at most [`FIRST_EVENTS`]), in time order per drain.
    pub first_events: Vec<ProbeEvent>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(time_ns: u64, data_len: u32, snd_nxt: u32, snd_una: u32) -> ProbeEvent {
        ProbeEvent {
            time_ns,
            local: "127.0.0.1:40000".parse().unwrap(),
            remote: "127.0.0.1:5201".parse().unwrap(),
            cookie: 7,
            data_len,
            snd_nxt,
            snd_una,
            cwnd: 10,
            ssthresh: 20,
            snd_wnd: 65_536,
            srtt_us: 50,
            rcv_wnd: 131_072,
        }
    }

    #[test]
    fn a_tally_counts_acks_and_data_and_reads_back() {
        let a = event(1_000, 0, 10_000, 1_000);
        let b = event(2_000, 0, 10_000, 4_000); // a pure ACK of 3000 bytes
        let c = event(3_000, 100, 10_000, 4_000); // data in, nothing newly acked
        let mut t = TcpTraceConn::new(&a);
        t.count(&a, None, 1_500);
        t.count(&b, Some(&a), 1_500);
        t.count(&c, Some(&b), 1_500);
        t.finish();
        assert_eq!((t.events, t.acks_in, t.data_segments_in), (3, 1, 1));
        assert_eq!(t.bytes_acked, 3_000);
        assert_eq!(t.segments_per_ack, Some(2.0));
        assert_eq!(t.unacked_max, 9_000);
        let doc = TcpTraceDoc {
            header: Header::new(crate::doc::kind::TCP_TRACE),
            events: 3,
            connections: vec![t],
            first_events: vec![a, b, c],
            ..TcpTraceDoc::default()
        };
        let back: TcpTraceDoc = serde_json::from_slice(&super::super::to_bytes(&doc)).unwrap();
        assert_eq!(back.header.kind, crate::doc::kind::TCP_TRACE);
        assert_eq!(back.connections, doc.connections);
        assert_eq!(back.first_events, doc.first_events);
    }
}
