//! Fuzzes the agent's HTTP request parser (`roundtrip::agent::http::parse_request`, what its event loop makes
//! of the bytes a client sent) with arbitrary bytes, whole and cut at every point a read could end.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roundtrip::agent::http::{MAX_HEAD, parse_head, parse_request};

fuzz_target!(|data: &[u8]| {
    let whole = parse_request(data);
    match &whole {
        Ok(Some(r)) => {
            assert!(!r.method.is_empty());
            assert!(!r.path.contains(['?', '#']));
            // The head alone parses to the same request.
            let end = data.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
            assert!(end <= MAX_HEAD);
            assert_eq!(parse_head(&data[..end]).as_ref(), Some(r));
        }
        Ok(None) => assert!(data.len() <= MAX_HEAD),
        Err(s) => assert!(*s == 400 || *s == 431),
    }
    // A prefix is never complete with a different answer: either still incomplete or the same decision.
    let cut = data.len() / 2;
    match parse_request(&data[..cut]) {
        Ok(None) => {}
        p => assert_eq!(p, whole),
    }
});
