//! Fuzzes the TLS record layer of capture rpc (framing, hello parsing, turn timing, decryption attempts with a
//! key log whose session random is 32 bytes of 7, the random a fuzzed ClientHello can carry) and the key log
//! parser.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roundtrip::capture::rpc::tls::Tls;
use roundtrip::capture::rpc::tlskeys::KeyLog;
use roundtrip::capture::rpc::{Proto, replay, replay_into};
use std::path::Path;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let _ = KeyLog::parse(Path::new("fuzz.keys"), &String::from_utf8_lossy(data));
    let out = replay(Proto::Tls, data);
    for t in &out.transactions {
        assert!(t.response_end_ts >= t.response_ts);
    }
    let random = "07".repeat(32);
    let text = format!(
        "CLIENT_RANDOM {random} {}\nCLIENT_HANDSHAKE_TRAFFIC_SECRET {random} {}\n\
         SERVER_HANDSHAKE_TRAFFIC_SECRET {random} {}\nCLIENT_TRAFFIC_SECRET_0 {random} {}\n\
         SERVER_TRAFFIC_SECRET_0 {random} {}\n",
        "01".repeat(48),
        "02".repeat(32),
        "03".repeat(32),
        "04".repeat(32),
        "05".repeat(32)
    );
    let keys = Arc::new(KeyLog::parse(Path::new("k"), &text).expect("valid"));
    let _ = replay_into(
        |_| {
            Box::new(Tls::wrap(
                Proto::Pgsql,
                Proto::Pgsql.matcher(roundtrip::capture::rpc::Carrier::Tcp),
                Some(keys),
            ))
        },
        data,
    );
});
