//! Fuzzes the sockperf request/response matcher (capture rpc), alone and behind the content fingerprint of
//! capture match, with arbitrary segments, gaps and directions.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roundtrip::capture::rpc::{Proto, replay};

fuzz_target!(|data: &[u8]| {
    let out = replay(Proto::Sockperf, data);
    for t in &out.transactions {
        assert!(t.response_end_ts >= t.response_ts || t.latency().is_zero());
        assert!(t.first_byte() <= t.last_byte() || t.last_byte().is_zero());
    }
});
