//! Fuzzes the sockperf header, the hello decoder and the timestamp reader with arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roundtrip::wire::sockperf::{Header, Hello, MAX_MESSAGE_LEN, read_server_timestamps};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = Header::parse(data, MAX_MESSAGE_LEN) {
        assert!(h.len as usize >= 14 && h.len as usize <= MAX_MESSAGE_LEN);
        let mut out = [0u8; 14];
        h.write(&mut out);
        assert_eq!(&out[..], &data[..14]);
    }
    let _ = Hello::decode(data);
    let _ = read_server_timestamps(data);
});
