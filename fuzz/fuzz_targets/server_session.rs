//! Fuzzes the server's per-client protocol (framing, answers, key exchange, extension requests) with arbitrary
//! bytes split at arbitrary points, with and without a key: it must never panic nor keep more than one message.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let keyed = data[0] & 1 == 1;
    let cut = usize::from(data[1]) + 1;
    roundtrip::server::session::fuzz_feed(&data[2..], keyed, cut);
});
