//! Text that came from the network or a file, made safe to print on a terminal.
//!
//! An op name decoded from a packet, a server banner, an HTTP header, a peer's error message or a DNS name can hold
//! any bytes its sender chose: ESC starts a terminal escape sequence (move the cursor, rewrite the title, recolour
//! or hide the lines after it), BEL rings, NUL and DEL vanish, and the bidirectional and invisible format characters
//! (U+202E RIGHT-TO-LEFT OVERRIDE, U+200B ZERO WIDTH SPACE, ...) make a line read differently from what it holds.
//! [`escape_for_terminal`] is the one function every text sink runs such a string through: every such character
//! becomes a visible escape (`\x1b`, `\x7f`, `\u{202e}`); printable Unicode, including non-ASCII letters, is kept
//! as it is, and a string with nothing to escape is returned borrowed (no copy). JSON output is not passed through
//! it: serde_json already escapes control characters.

use std::borrow::Cow;
use std::fmt::Write as _;

/// True for a character that must not reach a terminal raw: C0 controls (U+0000-U+001F, tab and newline
/// included, since a value printed on one line must stay on it), DEL (U+007F), C1 controls (U+0080-U+009F), and the
/// bidirectional and invisible format characters U+200B-U+200F, U+202A-U+202E, U+2066-U+2069 and U+FEFF.
pub fn needs_escape(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{200b}'..='\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}'
        | '\u{feff}')
}

/// `s` with every character [`needs_escape`] names replaced by a visible escape: `\xHH` for U+0000-U+00FF
/// (`\x1b` for ESC, `\x07` for BEL, `\x00` for NUL, `\x7f` for DEL, `\x9b` for the C1 CSI) and `\u{HHHH}` above
/// (`\u{202e}`). A backslash is kept as it is (only characters that change what the terminal shows are escaped).
/// Borrowed when nothing needed escaping.
pub fn escape_for_terminal(s: &str) -> Cow<'_, str> {
    let Some(first) = s.find(needs_escape) else {
        return Cow::Borrowed(s);
    };
    let mut out = String::with_capacity(s.len() + 8);
    out.push_str(&s[..first]);
    for c in s[first..].chars() {
        if needs_escape(c) {
            let code = u32::from(c);
            if code <= 0xff {
                let _ = write!(out, "\\x{code:02x}");
            } else {
                let _ = write!(out, "\\u{{{code:04x}}}");
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// [`escape_for_terminal`] for bytes that may not be UTF-8 (a path or a name read from a packet): invalid
/// sequences become U+FFFD first, as `String::from_utf8_lossy` does, then the result is escaped.
pub fn escape_bytes_for_terminal(bytes: &[u8]) -> String {
    escape_for_terminal(&String::from_utf8_lossy(bytes)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        let s = "GET /naïve/café 東京 ok\\x";
        assert!(matches!(escape_for_terminal(s), Cow::Borrowed(_)));
        assert_eq!(escape_for_terminal(s), s);
    }

    #[test]
    fn controls_become_visible_escapes() {
        assert_eq!(escape_for_terminal("a\u{1b}[2Jb"), "a\\x1b[2Jb");
        assert_eq!(
            escape_for_terminal("\u{7}\u{0}\u{7f}\u{9b}"),
            "\\x07\\x00\\x7f\\x9b"
        );
        assert_eq!(escape_for_terminal("x\ny\tz\r"), "x\\x0ay\\x09z\\x0d");
    }

    #[test]
    fn bidi_and_invisible_format_characters_become_visible() {
        assert_eq!(escape_for_terminal("SET\u{202e}yek"), "SET\\u{202e}yek");
        for c in [
            '\u{202a}', '\u{2066}', '\u{2069}', '\u{200b}', '\u{200f}', '\u{feff}',
        ] {
            let out = escape_for_terminal(&format!("a{c}b")).into_owned();
            assert!(!out.contains(c), "{c:?} kept in {out:?}");
            assert!(out.contains("\\u{"), "{out:?}");
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_are_replaced_then_escaped() {
        assert_eq!(escape_bytes_for_terminal(b"ab\xff\x1b"), "ab\u{fffd}\\x1b");
    }
}
