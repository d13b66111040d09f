//! The PostgreSQL frontend/backend protocol, version 3.0: the messages `roundtrip db` sends and the backend
//! messages it reads.
//!
//! Every backend message is a one-byte tag, a big-endian `i32` length that counts itself but not the tag, and
//! the body. [`parse_backend`] frames one message from the front of a buffer; it never panics, whatever the
//! bytes, and refuses lengths beyond [`MAX_MESSAGE_LEN`] so that no peer can make it allocate without bound.
#![forbid(unsafe_code)]

use thiserror::Error;

/// Protocol version 3.0 as sent in the startup message.
pub const PROTOCOL_3_0: u32 = 196_608;
/// The code of an SSLRequest message.
pub const SSL_REQUEST_CODE: u32 = 80_877_103;
/// Largest backend message accepted (64 MiB).
pub const MAX_MESSAGE_LEN: usize = 64 * 1024 * 1024;

/// A backend message that cannot be understood.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PgWireError {
    /// The length field is below 4 or above [`MAX_MESSAGE_LEN`].
    #[error("message '{tag}' announces an impossible length {len}")]
    BadLength {
        /// The tag as a character.
        tag: char,
        /// The length field.
        len: i64,
    },
    /// The body is shorter than its fields need.
    #[error("message '{tag}' is truncated ({detail})")]
    Truncated {
        /// The tag as a character.
        tag: char,
        /// What was missing.
        detail: &'static str,
    },
}

/// The fields of an ErrorResponse or NoticeResponse that roundtrip reports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerError {
    /// Severity (`S` or `V`), e.g. `FATAL`.
    pub severity: String,
    /// SQLSTATE code (`C`), e.g. `28P01`.
    pub code: String,
    /// Primary message (`M`).
    pub message: String,
    /// Detail (`D`), often empty.
    pub detail: String,
}

/// A backend message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// AuthenticationOk.
    AuthOk,
    /// AuthenticationCleartextPassword.
    AuthCleartext,
    /// AuthenticationMD5Password with its 4-byte salt.
    AuthMd5([u8; 4]),
    /// AuthenticationSASL with the mechanisms the server offers.
    AuthSasl(Vec<String>),
    /// AuthenticationSASLContinue with the server's SASL data.
    AuthSaslContinue(Vec<u8>),
    /// AuthenticationSASLFinal with the server's SASL data.
    AuthSaslFinal(Vec<u8>),
    /// Any other authentication request (Kerberos, GSS, SSPI), by code.
    AuthOther(u32),
    /// ParameterStatus name and value.
    ParameterStatus(String, String),
    /// BackendKeyData (process id, secret key).
    BackendKeyData(u32, u32),
    /// ReadyForQuery with the transaction status byte.
    ReadyForQuery(u8),
    /// RowDescription with its number of columns.
    RowDescription(u16),
    /// DataRow: number of columns and the bytes of all non-null values.
    DataRow {
        /// Number of columns.
        columns: u16,
        /// Sum of the value lengths.
        value_bytes: usize,
    },
    /// CommandComplete with its tag (`SELECT 1`).
    CommandComplete(String),
    /// EmptyQueryResponse: the answer to an empty query string.
    EmptyQuery,
    /// ErrorResponse.
    Error(ServerError),
    /// NoticeResponse.
    Notice(ServerError),
    /// Any other message, by tag.
    Other(u8),
}

struct Reader<'a> {
    b: &'a [u8],
    tag: char,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], PgWireError> {
        if self.b.len() < n {
            return Err(PgWireError::Truncated {
                tag: self.tag,
                detail: what,
            });
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, PgWireError> {
        let s = self.take(4, what)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, PgWireError> {
        let s = self.take(2, what)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }
    fn cstr(&mut self, what: &'static str) -> Result<String, PgWireError> {
        let end = self
            .b
            .iter()
            .position(|&c| c == 0)
            .ok_or(PgWireError::Truncated {
                tag: self.tag,
                detail: what,
            })?;
        let s = String::from_utf8_lossy(&self.b[..end]).into_owned();
        self.b = &self.b[end + 1..];
        Ok(s)
    }
}

fn error_fields(r: &mut Reader<'_>) -> Result<ServerError, PgWireError> {
    let mut e = ServerError::default();
    loop {
        let code = r.take(1, "error field code")?[0];
        if code == 0 {
            break;
        }
        let v = r.cstr("error field value")?;
        match code {
            b'S' if e.severity.is_empty() => e.severity = v,
            b'V' => e.severity = v,
            b'C' => e.code = v,
            b'M' => e.message = v,
            b'D' => e.detail = v,
            _ => {}
        }
    }
    Ok(e)
}

/// Frames one backend message from the front of `buf`: `Ok(None)` when more bytes are needed, otherwise the
/// message and how many bytes it used.
pub fn parse_backend(buf: &[u8]) -> Result<Option<(Backend, usize)>, PgWireError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let tag = buf[0];
    let len = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
    if len < 4 || len as usize > MAX_MESSAGE_LEN {
        return Err(PgWireError::BadLength {
            tag: tag as char,
            len: i64::from(len),
        });
    }
    let total = 1 + len as usize;
    if buf.len() < total {
        return Ok(None);
    }
    let mut r = Reader {
        b: &buf[5..total],
        tag: tag as char,
    };
    let m = match tag {
        b'R' => match r.u32("authentication code")? {
            0 => Backend::AuthOk,
            3 => Backend::AuthCleartext,
            5 => {
                let s = r.take(4, "md5 salt")?;
                Backend::AuthMd5([s[0], s[1], s[2], s[3]])
            }
            10 => {
                let mut mechs = Vec::new();
                loop {
                    let m = r.cstr("SASL mechanism")?;
                    if m.is_empty() {
                        break;
                    }
                    mechs.push(m);
                }
                Backend::AuthSasl(mechs)
            }
            11 => Backend::AuthSaslContinue(r.b.to_vec()),
            12 => Backend::AuthSaslFinal(r.b.to_vec()),
            other => Backend::AuthOther(other),
        },
        b'S' => Backend::ParameterStatus(r.cstr("parameter name")?, r.cstr("parameter value")?),
        b'K' => Backend::BackendKeyData(r.u32("process id")?, r.u32("secret key")?),
        b'Z' => Backend::ReadyForQuery(r.take(1, "transaction status")?[0]),
        b'T' => Backend::RowDescription(r.u16("column count")?),
        b'D' => {
            let columns = r.u16("column count")?;
            let mut value_bytes = 0usize;
            for _ in 0..columns {
                let n = r.u32("value length")? as i32;
                if n > 0 {
                    r.take(n as usize, "value")?;
                    value_bytes += n as usize;
                }
            }
            Backend::DataRow {
                columns,
                value_bytes,
            }
        }
        b'C' => Backend::CommandComplete(r.cstr("command tag")?),
        b'I' => Backend::EmptyQuery,
        b'E' => Backend::Error(error_fields(&mut r)?),
        b'N' => Backend::Notice(error_fields(&mut r)?),
        other => Backend::Other(other),
    };
    Ok(Some((m, total)))
}

/// The values of a DataRow message (`msg` is the whole message as [`parse_backend`] framed it, tag
/// included): text per column, `None` for NULL. Non-UTF-8 bytes are replaced.
pub fn data_row_values(msg: &[u8]) -> Result<Vec<Option<String>>, PgWireError> {
    let mut r = Reader {
        b: msg.get(5..).unwrap_or_default(),
        tag: 'D',
    };
    let columns = r.u16("column count")?;
    let mut out = Vec::with_capacity(usize::from(columns));
    for _ in 0..columns {
        let n = r.u32("value length")? as i32;
        if n < 0 {
            out.push(None);
        } else {
            out.push(Some(
                String::from_utf8_lossy(r.take(n as usize, "value")?).into_owned(),
            ));
        }
    }
    Ok(out)
}

fn message(tag: Option<u8>, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(body.len() + 5);
    if let Some(t) = tag {
        v.push(t);
    }
    v.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// The StartupMessage: protocol 3.0 and `user`, `database` and the extra parameters.
pub fn startup(user: &str, database: &str, params: &[(&str, &str)]) -> Vec<u8> {
    let mut b = PROTOCOL_3_0.to_be_bytes().to_vec();
    for (k, v) in [("user", user), ("database", database)]
        .iter()
        .chain(params.iter())
    {
        b.extend_from_slice(k.as_bytes());
        b.push(0);
        b.extend_from_slice(v.as_bytes());
        b.push(0);
    }
    b.push(0);
    message(None, &b)
}

/// The SSLRequest message; the server answers one byte, `S` or `N`.
pub fn ssl_request() -> Vec<u8> {
    message(None, &SSL_REQUEST_CODE.to_be_bytes())
}

/// A PasswordMessage carrying a cleartext or md5 password.
pub fn password(pw: &str) -> Vec<u8> {
    let mut b = pw.as_bytes().to_vec();
    b.push(0);
    message(Some(b'p'), &b)
}

/// The md5 password answer: `md5` + hex(md5(hex(md5(password + user)) + salt)).
pub fn md5_password(user: &str, pw: &str, salt: [u8; 4]) -> String {
    use md5::{Digest, Md5};
    let inner = hex(&Md5::digest([pw.as_bytes(), user.as_bytes()].concat()));
    let outer = hex(&Md5::digest([inner.as_bytes(), &salt[..]].concat()));
    format!("md5{outer}")
}

/// Lower-case hexadecimal.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// SASLInitialResponse: mechanism name and the client-first message.
pub fn sasl_initial(mechanism: &str, data: &[u8]) -> Vec<u8> {
    let mut b = mechanism.as_bytes().to_vec();
    b.push(0);
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    message(Some(b'p'), &b)
}

/// SASLResponse carrying the client-final message.
pub fn sasl_response(data: &[u8]) -> Vec<u8> {
    message(Some(b'p'), data)
}

/// A simple Query message.
pub fn query(sql: &str) -> Vec<u8> {
    let mut b = sql.as_bytes().to_vec();
    b.push(0);
    message(Some(b'Q'), &b)
}

/// The code of a CancelRequest (in place of a protocol version).
pub const CANCEL_REQUEST_CODE: u32 = 80_877_102;

/// A CancelRequest for the backend `pid` with its secret `key` (sent on a fresh connection, no reply).
pub fn cancel_request(pid: u32, key: u32) -> Vec<u8> {
    let mut b = CANCEL_REQUEST_CODE.to_be_bytes().to_vec();
    b.extend_from_slice(&pid.to_be_bytes());
    b.extend_from_slice(&key.to_be_bytes());
    message(None, &b)
}

/// Parse (unnamed statement, parameter types left to the server), Bind (unnamed portal, every parameter as
/// text, results as text), Execute (all rows) and Sync: one statement of the extended query protocol whose
/// parameters travel apart from its text (`$1`, `$2`, ...).
pub fn extended_query(sql: &str, params: &[&str]) -> Vec<u8> {
    let mut parse = vec![0u8];
    parse.extend_from_slice(sql.as_bytes());
    parse.push(0);
    parse.extend_from_slice(&0u16.to_be_bytes());
    let mut bind = vec![0u8, 0u8];
    bind.extend_from_slice(&0u16.to_be_bytes());
    bind.extend_from_slice(&(params.len() as u16).to_be_bytes());
    for p in params {
        bind.extend_from_slice(&(p.len() as u32).to_be_bytes());
        bind.extend_from_slice(p.as_bytes());
    }
    bind.extend_from_slice(&0u16.to_be_bytes());
    let mut execute = vec![0u8];
    execute.extend_from_slice(&0u32.to_be_bytes());
    let mut out = message(Some(b'P'), &parse);
    out.extend(message(Some(b'B'), &bind));
    out.extend(message(Some(b'E'), &execute));
    out.extend(message(Some(b'S'), &[]));
    out
}

/// The Terminate message.
pub fn terminate() -> Vec<u8> {
    message(Some(b'X'), &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extended_query_keeps_parameters_out_of_the_statement() {
        let m = extended_query("SELECT $1", &["s3cret"]);
        assert_eq!(m[0], b'P');
        let plen = u32::from_be_bytes([m[1], m[2], m[3], m[4]]) as usize;
        let parse = &m[..1 + plen];
        assert!(!parse.windows(6).any(|w| w == b"s3cret"));
        assert_eq!(m[1 + plen], b'B');
        assert!(m.windows(6).any(|w| w == b"s3cret"));
        assert_eq!(&m[m.len() - 5..], &[b'S', 0, 0, 0, 4]);
        assert_eq!(cancel_request(7, 9).len(), 16);
    }

    #[test]
    fn frames_ready_for_query_and_waits_for_more() {
        let b = [b'Z', 0, 0, 0, 5, b'I'];
        assert_eq!(
            parse_backend(&b).unwrap(),
            Some((Backend::ReadyForQuery(b'I'), 6))
        );
        assert_eq!(parse_backend(&b[..5]).unwrap(), None);
        assert_eq!(parse_backend(&b[..2]).unwrap(), None);
    }

    #[test]
    fn parses_auth_requests() {
        let md5 = [b'R', 0, 0, 0, 12, 0, 0, 0, 5, 1, 2, 3, 4];
        assert_eq!(
            parse_backend(&md5).unwrap().unwrap().0,
            Backend::AuthMd5([1, 2, 3, 4])
        );
        let mut sasl = vec![b'R', 0, 0, 0, 0, 0, 0, 0, 10];
        sasl.extend_from_slice(b"SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0");
        let n = (sasl.len() - 1) as u32;
        sasl[1..5].copy_from_slice(&n.to_be_bytes());
        assert_eq!(
            parse_backend(&sasl).unwrap().unwrap().0,
            Backend::AuthSasl(vec!["SCRAM-SHA-256-PLUS".into(), "SCRAM-SHA-256".into()])
        );
    }

    #[test]
    fn parses_error_response_fields() {
        let body = b"SFATAL\0VFATAL\0C28P01\0Mpassword authentication failed for user \"x\"\0\0";
        let mut m = vec![b'E'];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(body);
        match parse_backend(&m).unwrap().unwrap().0 {
            Backend::Error(e) => {
                assert_eq!(e.code, "28P01");
                assert_eq!(e.severity, "FATAL");
                assert!(e.message.starts_with("password authentication failed"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn data_row_counts_value_bytes_and_nulls() {
        // 2 columns: "abc" and NULL.
        let body = [0u8, 2, 0, 0, 0, 3, b'a', b'b', b'c', 0xff, 0xff, 0xff, 0xff];
        let mut m = vec![b'D'];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(&body);
        assert_eq!(
            parse_backend(&m).unwrap().unwrap().0,
            Backend::DataRow {
                columns: 2,
                value_bytes: 3
            }
        );
        // A value longer than the message is an error, not a panic.
        let mut bad = m.clone();
        bad[10] = 9;
        assert!(parse_backend(&bad).is_err());
    }

    #[test]
    fn data_row_values_read_text_null_and_refuse_truncation() {
        // 'D', length, 3 columns: "ab", NULL, "".
        let mut m = vec![b'D', 0, 0, 0, 0, 0, 3];
        m.extend_from_slice(&2i32.to_be_bytes());
        m.extend_from_slice(b"ab");
        m.extend_from_slice(&(-1i32).to_be_bytes());
        m.extend_from_slice(&0i32.to_be_bytes());
        let len = (m.len() - 1) as u32;
        m[1..5].copy_from_slice(&len.to_be_bytes());
        assert_eq!(
            data_row_values(&m).unwrap(),
            vec![Some("ab".to_string()), None, Some(String::new())]
        );
        for cut in 0..m.len() - 4 {
            let _ = data_row_values(&m[..cut]);
        }
        assert!(data_row_values(&m[..9]).is_err());
        let mut big = m.clone();
        big[7..11].copy_from_slice(&1000i32.to_be_bytes());
        assert!(data_row_values(&big).is_err());
    }

    #[test]
    fn rejects_impossible_lengths() {
        assert!(parse_backend(&[b'Z', 0, 0, 0, 3, 0]).is_err());
        assert!(parse_backend(&[b'Z', 0x7f, 0xff, 0xff, 0xff]).is_err());
        assert!(parse_backend(&[b'Z', 0xff, 0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn frontend_messages_match_the_documented_layout() {
        assert_eq!(ssl_request(), vec![0, 0, 0, 8, 4, 210, 22, 47]);
        assert_eq!(query(""), vec![b'Q', 0, 0, 0, 5, 0]);
        assert_eq!(terminate(), vec![b'X', 0, 0, 0, 4]);
        let s = startup("u", "d", &[]);
        assert_eq!(&s[..8], &[0, 0, 0, 27, 0, 3, 0, 0]);
        assert_eq!(&s[8..], b"user\0u\0database\0d\0\0");
    }

    #[test]
    fn md5_password_matches_a_known_answer() {
        // md5(md5("secret" + "alice") hex + salt), computed with PostgreSQL's documented recipe.
        let a = md5_password("alice", "secret", [0x01, 0x02, 0x03, 0x04]);
        assert_eq!(a.len(), 35);
        assert!(a.starts_with("md5"));
        use md5::{Digest, Md5};
        let inner = hex(&Md5::digest(b"secretalice"));
        let mut outer_in = inner.into_bytes();
        outer_in.extend_from_slice(&[1, 2, 3, 4]);
        assert_eq!(a, format!("md5{}", hex(&Md5::digest(&outer_in))));
        // Known value of md5("secretalice").
        assert_eq!(hex(&Md5::digest(b"")), "d41d8cd98f00b204e9800998ecf8427e");
    }
}
