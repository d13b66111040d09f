//! Fuzzes the pcap/pcapng/gzip reader and everything behind it: any bytes as a capture file, every packet
//! decoded and fed to the TCP tracker (with the in-order stream hook) and to the interval statistics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roundtrip::capture::decode::decode;
use roundtrip::capture::flows::{Dir, FlowTracker, StreamSink, TrackerConfig};
use roundtrip::capture::read::CaptureReader;
use roundtrip::capture::stats::{StatsDir, StatsEngine};
use std::time::Duration;

struct Count(u64);

impl StreamSink for Count {
    fn data(&mut self, _flow: u64, _dir: Dir, _ts: i64, offset: u64, data: &[u8]) {
        self.0 = self.0.wrapping_add(offset).wrapping_add(data.len() as u64);
    }
    fn gap(&mut self, _flow: u64, _dir: Dir, offset: u64, len: u64) {
        self.0 = self.0.wrapping_add(offset ^ len);
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(mut r) = CaptureReader::from_reader(Box::new(std::io::Cursor::new(data.to_vec())))
    else {
        return;
    };
    let config = TrackerConfig {
        max_reassembly_bytes: 4096,
        ..TrackerConfig::default()
    };
    let mut tracker = FlowTracker::new(config);
    let mut stats = StatsEngine::new(Duration::from_millis(100), true);
    let mut sink = Count(0);
    while let Some(p) = r.next_packet() {
        assert!(p.data.len() <= p.orig_len as usize);
        stats.add(p.ts_ns, p.orig_len, StatsDir::Other);
        if let Ok(d) = decode(p.link, p.data, p.orig_len) {
            tracker.process_with(p.ts_ns, p.orig_len, &d, Some(&mut sink));
        }
    }
    let _ = r.warning();
    let _ = stats.finish();
    let _ = tracker.finish_all(Some(&mut sink));
});
