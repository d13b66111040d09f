//! Fuzzes the extension's control-message decoder (counts, reverse streams) with arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roundtrip::wire::sockperf::{CONTROL_LEN, Control, Flags};

fuzz_target!(|data: &[u8]| {
    if let Some(c) = Control::decode(data) {
        // Whatever decoded re-encodes to a message that decodes to the same thing.
        let m = c.encode(Flags(0));
        assert_eq!(m.len(), CONTROL_LEN);
        assert_eq!(Control::decode(&m), Some(c));
    }
});
