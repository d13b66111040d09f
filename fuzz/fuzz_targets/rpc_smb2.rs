//! Fuzzes the SMB2 request/response matcher (capture rpc) with arbitrary segments, gaps and directions.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roundtrip::capture::rpc::{Proto, replay};

fuzz_target!(|data: &[u8]| {
    let out = replay(Proto::Smb2, data);
    for t in &out.transactions {
        assert!(t.response_end_ts >= t.response_ts || t.latency().is_zero());
    }
});
