//! Fuzzes the agent's TOML configuration parser and the target plan built from it: any text either parses
//! or gives a one-line error naming a line of the file and never a database password.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roundtrip::agent::config;
use roundtrip::agent::targets::{CliTargets, Plan};
use std::path::Path;

/// True when `needle` (`:PASSWORD@`) stands in the authority of a `SCHEME://` URL in `text`: after a `://`
/// with no blank or quote in between.
fn url_password(text: &str, needle: &str) -> bool {
    text.match_indices(needle).any(|(i, _)| {
        text[..i].rfind("://").is_some_and(|j| {
            !text[j + 3..i].contains(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`'))
        })
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match config::parse(text, Path::new("fuzz.toml")) {
        Ok(c) => {
            // Building the plan never panics and never reads the real environment.
            let _ = Plan::build(&CliTargets::default(), Some(&c), &|_| None);
        }
        Err(e) => {
            let line = e.to_string();
            assert!(!line.contains('\n'), "{line}");
            assert!(
                e.line >= 1 && e.line <= text.lines().count().max(1) + 1,
                "{line}"
            );
            // A URL's password is never shown as one.
            if url_password(text, ":fuzzpw@") {
                assert!(!url_password(&line, ":fuzzpw@"), "{line}");
                assert!(!line.contains(":fuzzpw@"), "{line}");
            }
        }
    }
});
