//! Fuzzes the bridge control API's HTTP request reader (`roundtrip::proxy::control::read_request`) with
//! arbitrary bytes, read at once and one byte per `read` (a slow client): both give the same answer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roundtrip::proxy::control::{MAX_BODY, MAX_HEAD, read_request};
use std::io::Read;

/// A reader handing out one byte per call.
struct Trickle<'a>(&'a [u8]);

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match (self.0.split_first(), buf.first_mut()) {
            (Some((b, rest)), Some(out)) => {
                *out = *b;
                self.0 = rest;
                Ok(1)
            }
            _ => Ok(0),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let whole = read_request(&mut &data[..]);
    if let Ok(r) = &whole {
        assert!(r.body.len() <= MAX_BODY);
        assert!(!r.method.is_empty());
        assert!(!r.path.contains('?'));
    }
    if let Err((status, _)) = &whole {
        assert!((400..600).contains(status));
    }
    // The head cap is checked between reads, so a head ending past MAX_HEAD is taken or refused depending on
    // how the reads fell (noted in the report of issue 34); compare the two readers below the cap only.
    let head_end = data.windows(4).position(|w| w == b"\r\n\r\n");
    if head_end.map_or(data.len(), |e| e + 4) <= MAX_HEAD {
        assert_eq!(
            read_request(&mut Trickle(data)).map_err(|e| e.0),
            whole.map_err(|e| e.0)
        );
    }
});
