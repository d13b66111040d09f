//! RESP, the Redis serialization protocol (RESP2, and the RESP3 types a server may send after `HELLO 3`).
//!
//! [`parse`] reads one value from the front of a buffer; it returns `Ok(None)` when more bytes are needed,
//! never panics on any bytes, limits nesting to [`MAX_DEPTH`] and refuses announced lengths beyond
//! [`MAX_BULK`] so a peer cannot make it allocate without bound.
#![forbid(unsafe_code)]

use thiserror::Error;

/// Deepest nesting accepted.
pub const MAX_DEPTH: usize = 32;
/// Largest bulk string or aggregate length accepted (512 MiB, as Redis's own proto-max-bulk-len).
pub const MAX_BULK: i64 = 512 * 1024 * 1024;

/// Bytes that are not RESP.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RespError {
    /// The first byte is not a RESP type marker.
    #[error("unexpected byte 0x{0:02x} where a RESP type marker was expected")]
    Marker(u8),
    /// A length or integer line is not a number, or out of range.
    #[error("invalid RESP length or integer")]
    Number,
    /// A bulk string is not followed by CRLF.
    #[error("RESP bulk string not terminated by CRLF")]
    Terminator,
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("RESP value nested too deeply")]
    Depth,
}

/// One RESP value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `+OK`.
    Simple(String),
    /// `-ERR ...`.
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$n` bulk string; `None` is the RESP2 null bulk `$-1`.
    Bulk(Option<Vec<u8>>),
    /// `*n` array, `~n` set, `>n` push; `None` is `*-1`.
    Array(Option<Vec<Value>>),
    /// `%n` map as key/value pairs.
    Map(Vec<(Value, Value)>),
    /// `_` null.
    Null,
    /// `#t` / `#f`.
    Bool(bool),
    /// `,1.5` double, `(123` big number, `=txt:...` verbatim: kept as text.
    Other(String),
}

fn line(buf: &[u8]) -> Option<(&[u8], usize)> {
    let pos = buf.windows(2).position(|w| w == b"\r\n")?;
    Some((&buf[..pos], pos + 2))
}

fn number(l: &[u8]) -> Result<i64, RespError> {
    std::str::from_utf8(l)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(RespError::Number)
}

fn parse_at(buf: &[u8], depth: usize) -> Result<Option<(Value, usize)>, RespError> {
    if depth > MAX_DEPTH {
        return Err(RespError::Depth);
    }
    let Some(&marker) = buf.first() else {
        return Ok(None);
    };
    let Some((l, used)) = line(&buf[1..]) else {
        // A line longer than any sane header with no CRLF yet: still just wait, unless it is a bulk header
        // that cannot be a number.
        return if buf.len() > 64 && matches!(marker, b'$' | b'*' | b'%' | b'~' | b'>' | b':') {
            Err(RespError::Number)
        } else if !b"+-:$*%~>_#,(=|!".contains(&marker) {
            Err(RespError::Marker(marker))
        } else {
            Ok(None)
        };
    };
    let used = used + 1;
    let text = || String::from_utf8_lossy(l).into_owned();
    let v = match marker {
        b'+' => (Value::Simple(text()), used),
        b'-' => (Value::Error(text()), used),
        b':' => (Value::Int(number(l)?), used),
        b'_' => (Value::Null, used),
        b'#' => (Value::Bool(l == b"t"), used),
        b',' | b'(' => (Value::Other(text()), used),
        b'$' | b'=' | b'!' => {
            let n = number(l)?;
            if n < 0 {
                return Ok(Some((Value::Bulk(None), used)));
            }
            if n > MAX_BULK {
                return Err(RespError::Number);
            }
            let n = n as usize;
            if buf.len() < used + n + 2 {
                return Ok(None);
            }
            if &buf[used + n..used + n + 2] != b"\r\n" {
                return Err(RespError::Terminator);
            }
            let data = buf[used..used + n].to_vec();
            let v = match marker {
                b'$' => Value::Bulk(Some(data)),
                b'!' => Value::Error(String::from_utf8_lossy(&data).into_owned()),
                _ => Value::Other(String::from_utf8_lossy(&data).into_owned()),
            };
            (v, used + n + 2)
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = number(l)?;
            if n < 0 {
                return Ok(Some((Value::Array(None), used)));
            }
            if n > MAX_BULK {
                return Err(RespError::Number);
            }
            let items = if matches!(marker, b'%' | b'|') {
                n as usize * 2
            } else {
                n as usize
            };
            let mut off = used;
            let mut vals = Vec::with_capacity(items.min(1024));
            for _ in 0..items {
                match parse_at(&buf[off..], depth + 1)? {
                    Some((v, u)) => {
                        vals.push(v);
                        off += u;
                    }
                    None => return Ok(None),
                }
            }
            if marker == b'|' {
                // An attribute precedes the real reply: skip it.
                return match parse_at(&buf[off..], depth + 1)? {
                    Some((v, u)) => Ok(Some((v, off + u))),
                    None => Ok(None),
                };
            }
            let v = if matches!(marker, b'%') {
                let mut it = vals.into_iter();
                let mut pairs = Vec::new();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    pairs.push((k, v));
                }
                Value::Map(pairs)
            } else {
                Value::Array(Some(vals))
            };
            (v, off)
        }
        other => return Err(RespError::Marker(other)),
    };
    Ok(Some(v))
}

/// Reads one value from the front of `buf`: `Ok(None)` when more bytes are needed, otherwise the value and
/// how many bytes it used.
pub fn parse(buf: &[u8]) -> Result<Option<(Value, usize)>, RespError> {
    parse_at(buf, 0)
}

/// Encodes a command as an array of bulk strings.
pub fn command<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        let a = a.as_ref();
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_simple_types() {
        assert_eq!(
            parse(b"+PONG\r\n").unwrap(),
            Some((Value::Simple("PONG".into()), 7))
        );
        assert_eq!(
            parse(b"-ERR x\r\n").unwrap().unwrap().0,
            Value::Error("ERR x".into())
        );
        assert_eq!(parse(b":-3\r\n").unwrap().unwrap().0, Value::Int(-3));
        assert_eq!(parse(b"$-1\r\n").unwrap().unwrap().0, Value::Bulk(None));
        assert_eq!(
            parse(b"$3\r\nabc\r\n").unwrap(),
            Some((Value::Bulk(Some(b"abc".to_vec())), 9))
        );
        assert_eq!(parse(b"_\r\n").unwrap().unwrap().0, Value::Null);
    }

    #[test]
    fn waits_for_incomplete_values() {
        let full = b"*2\r\n$3\r\nabc\r\n:7\r\n";
        for n in 0..full.len() {
            assert_eq!(parse(&full[..n]).unwrap(), None, "prefix of {n} bytes");
        }
        assert_eq!(
            parse(full).unwrap().unwrap().0,
            Value::Array(Some(vec![
                Value::Bulk(Some(b"abc".to_vec())),
                Value::Int(7)
            ]))
        );
    }

    #[test]
    fn parses_resp3_map_and_skips_attributes() {
        let m = parse(b"%1\r\n+server\r\n+redis\r\n").unwrap().unwrap().0;
        assert_eq!(
            m,
            Value::Map(vec![(
                Value::Simple("server".into()),
                Value::Simple("redis".into())
            )])
        );
        let a = parse(b"|1\r\n+k\r\n+v\r\n:5\r\n").unwrap().unwrap();
        assert_eq!(a, (Value::Int(5), 16));
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(parse(b"HTTP/1.1 400\r\n"), Err(RespError::Marker(b'H')));
        assert!(parse(b"$abc\r\n").is_err());
        assert!(parse(b"$3\r\nabcXY").is_err());
        assert!(parse(b"$99999999999\r\n").is_err());
        let deep = "*1\r\n".repeat(100);
        assert_eq!(parse(deep.as_bytes()), Err(RespError::Depth));
    }

    #[test]
    fn encodes_commands() {
        assert_eq!(command(&["PING"]), b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(command(&["GET", "k"]), b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    }
}
