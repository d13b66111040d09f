//! Fuzzes the extension's control-message decoder (counts, reverse streams, key exchange, replay requests)
//! with arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roundtrip::wire::sockperf::{Control, Flags, MAX_CONTROL_LEN, ReplayRequest};

fuzz_target!(|data: &[u8]| {
    if let Some(c) = Control::decode(data) {
        // Whatever decoded re-encodes to a message that decodes to the same thing.
        let m = c.encode(Flags(0));
        assert_eq!(m.len(), c.wire_len());
        assert!(m.len() <= MAX_CONTROL_LEN);
        assert_eq!(Control::decode(&m), Some(c));
    }
    if let Ok(r) = ReplayRequest::decode(data) {
        let mut m = data.to_vec();
        r.write(&mut m);
        assert_eq!(m, data);
    }
});
