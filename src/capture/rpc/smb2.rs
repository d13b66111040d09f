//! SMB2 / SMB3 over direct TCP (port 445) or the NetBIOS session service (139).
//!
//! Framing: each message sits in a 4-byte session header (type 0, 24-bit length); keepalives and the other
//! session-service types (0x81-0x85) are skipped. A message holds one SMB2 header of 64 bytes (protocol id
//! `FE 'S' 'M' 'B'`, structure size 64, credit charge, NT status, command, credits, flags, next command,
//! message id, async id or tree id, session id) or a chain of them (a compound: `NextCommand` is the offset of
//! the next header), each element a request or response of its own, related or not.
//!
//! Pairing: by message id, per connection. An interim response (`STATUS_PENDING`, usually with the ASYNC flag)
//! does not answer its request: the final response does, as in tshark's `smb2,srt`. `CANCEL` has no response
//! and server-sent oplock/lease break notifications (message id `0xFFFF_FFFF_FFFF_FFFF`) no request: neither
//! is paired. READ counts the bytes of its response's `DataLength`, WRITE those of its request's `Length`.
//!
//! An NT status of severity warning or error marks the transaction as an error, with the status's name (the
//! common ones; others as `0x%08x`), except `STATUS_MORE_PROCESSING_REQUIRED` in SESSION_SETUP (a normal
//! step of the authentication exchange) and `STATUS_BUFFER_OVERFLOW` (the answer was longer than the buffer,
//! and the part that fits is there). Messages sealed in an SMB3 transform header (encrypted, `FD 'S' 'M' 'B'`)
//! or compressed (`FC 'S' 'M' 'B'`) are counted as [`AnomalyKind::Encrypted`]: their commands cannot be seen.
//! An SMB1 negotiate (`FF 'S' 'M' 'B'`) that the server upgrades to SMB2 is skipped along with its answer.
#![forbid(unsafe_code)]

use super::{AnomalyKind, Dir, Frame, FxHashMap, Out, Pdu, Protocol, Status, Transaction};
use std::borrow::Cow;
use std::time::Duration;

/// Length of the NetBIOS session-service header in front of each message.
pub const NBSS_HEADER: usize = 4;
/// Length of the SMB2 header.
pub const HEADER: usize = 64;
/// Messages up to this length are looked at whole (every element of a compound is seen); of longer ones
/// (READ responses, WRITE requests) the start is enough: one header and the first bytes of its body.
const LOOK: u64 = 8192;
/// Open requests kept per connection; beyond that (a one-sided capture) they are reported and dropped.
pub const MAX_PENDING: usize = 1 << 16;

/// Header flag: the message is a response.
pub const FLAG_RESPONSE: u32 = 0x1;
/// Header flag: the header carries an async id instead of a tree id.
pub const FLAG_ASYNC: u32 = 0x2;
/// Header flag: the element is related to the previous one of its compound.
pub const FLAG_RELATED: u32 = 0x4;

/// NT status of an interim response: the final response comes later.
pub const STATUS_PENDING: u32 = 0x0000_0103;
/// NT status of a SESSION_SETUP round that needs another one (not an error).
pub const STATUS_MORE_PROCESSING_REQUIRED: u32 = 0xC000_0016;
/// NT status of an answer cut to the client's buffer (data is there: not an error).
pub const STATUS_BUFFER_OVERFLOW: u32 = 0x8000_0005;

/// SMB2 command codes.
pub mod cmd {
    /// NEGOTIATE.
    pub const NEGOTIATE: u16 = 0;
    /// SESSION_SETUP.
    pub const SESSION_SETUP: u16 = 1;
    /// READ.
    pub const READ: u16 = 8;
    /// WRITE.
    pub const WRITE: u16 = 9;
    /// CANCEL (no response).
    pub const CANCEL: u16 = 12;
}

/// The name of an SMB2 command. QUERY_DIRECTORY is `FIND`, as tshark calls it; the index tshark's `smb2,srt`
/// prints is the command code.
pub fn command_name(c: u16) -> Cow<'static, str> {
    const NAMES: [&str; 19] = [
        "NEGOTIATE",
        "SESSION_SETUP",
        "LOGOFF",
        "TREE_CONNECT",
        "TREE_DISCONNECT",
        "CREATE",
        "CLOSE",
        "FLUSH",
        "READ",
        "WRITE",
        "LOCK",
        "IOCTL",
        "CANCEL",
        "ECHO",
        "FIND",
        "CHANGE_NOTIFY",
        "QUERY_INFO",
        "SET_INFO",
        "OPLOCK_BREAK",
    ];
    match NAMES.get(c as usize) {
        Some(n) => Cow::Borrowed(n),
        None => Cow::Owned(format!("CMD_0x{c:04x}")),
    }
}

/// The name of an NT status: the common ones by name, others as `0x%08x`.
pub fn status_name(s: u32) -> Cow<'static, str> {
    let n = match s {
        0x0000_0000 => "STATUS_SUCCESS",
        0x0000_0103 => "STATUS_PENDING",
        0x0000_010B => "STATUS_NOTIFY_CLEANUP",
        0x0000_010C => "STATUS_NOTIFY_ENUM_DIR",
        0x8000_0005 => "STATUS_BUFFER_OVERFLOW",
        0x8000_0006 => "STATUS_NO_MORE_FILES",
        0x8000_001A => "STATUS_NO_MORE_ENTRIES",
        0xC000_0001 => "STATUS_UNSUCCESSFUL",
        0xC000_0002 => "STATUS_NOT_IMPLEMENTED",
        0xC000_0003 => "STATUS_INVALID_INFO_CLASS",
        0xC000_0008 => "STATUS_INVALID_HANDLE",
        0xC000_000D => "STATUS_INVALID_PARAMETER",
        0xC000_000F => "STATUS_NO_SUCH_FILE",
        0xC000_0010 => "STATUS_INVALID_DEVICE_REQUEST",
        0xC000_0011 => "STATUS_END_OF_FILE",
        0xC000_0016 => "STATUS_MORE_PROCESSING_REQUIRED",
        0xC000_0022 => "STATUS_ACCESS_DENIED",
        0xC000_0023 => "STATUS_BUFFER_TOO_SMALL",
        0xC000_0033 => "STATUS_OBJECT_NAME_INVALID",
        0xC000_0034 => "STATUS_OBJECT_NAME_NOT_FOUND",
        0xC000_0035 => "STATUS_OBJECT_NAME_COLLISION",
        0xC000_003A => "STATUS_OBJECT_PATH_NOT_FOUND",
        0xC000_0043 => "STATUS_SHARING_VIOLATION",
        0xC000_0054 => "STATUS_FILE_LOCK_CONFLICT",
        0xC000_0055 => "STATUS_LOCK_NOT_GRANTED",
        0xC000_0056 => "STATUS_DELETE_PENDING",
        0xC000_0061 => "STATUS_PRIVILEGE_NOT_HELD",
        0xC000_006D => "STATUS_LOGON_FAILURE",
        0xC000_007F => "STATUS_DISK_FULL",
        0xC000_00B5 => "STATUS_IO_TIMEOUT",
        0xC000_00BA => "STATUS_FILE_IS_A_DIRECTORY",
        0xC000_00BB => "STATUS_NOT_SUPPORTED",
        0xC000_00CC => "STATUS_BAD_NETWORK_NAME",
        0xC000_0101 => "STATUS_DIRECTORY_NOT_EMPTY",
        0xC000_0103 => "STATUS_NOT_A_DIRECTORY",
        0xC000_0120 => "STATUS_CANCELLED",
        0xC000_0128 => "STATUS_FILE_CLOSED",
        0xC000_0203 => "STATUS_USER_SESSION_DELETED",
        0xC000_0225 => "STATUS_NOT_FOUND",
        0xC000_0257 => "STATUS_PATH_NOT_COVERED",
        0xC000_035C => "STATUS_NETWORK_SESSION_EXPIRED",
        _ => return Cow::Owned(format!("0x{s:08x}")),
    };
    Cow::Borrowed(n)
}

/// Does a final response with NT status `status` to command `command` report an error?
pub fn is_error(command: u16, status: u32) -> bool {
    let severity = status >> 30;
    severity >= 2
        && status != STATUS_BUFFER_OVERFLOW
        && !(command == cmd::SESSION_SETUP && status == STATUS_MORE_PROCESSING_REQUIRED)
}

/// One element of a message (a whole message, or one request or response of a compound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Command code.
    pub command: u16,
    /// Flags (response, async, related, ...).
    pub flags: u32,
    /// NT status (meaningful in responses).
    pub status: u32,
    /// Message id: pairs a response with its request.
    pub message_id: u64,
    /// READ response DataLength / WRITE request Length, when the element carries one.
    pub bytes: Option<u64>,
}

/// What the framer read from one message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MsgInfo {
    /// The SMB2 elements seen (empty for keepalives and what cannot be read).
    pub elems: Vec<Header>,
    /// An SMB3 transform (encrypted) or compression header: the content cannot be read.
    pub sealed: bool,
    /// An SMB1 message.
    pub smb1: bool,
}

/// Does `b` start like a session-service message carrying SMB (1, 2, or a sealed SMB3 message)?
pub fn looks_like_start(b: &[u8]) -> bool {
    b.len() >= 8 && b[0] == 0 && &b[5..8] == b"SMB" && (0xFC..=0xFF).contains(&b[4])
}

fn le16(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at + 2).map(|s| u16::from_le_bytes([s[0], s[1]]))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn le64(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 8).map(|s| {
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        u64::from_le_bytes(a)
    })
}

/// Reads the chain of SMB2 headers of a message body (after the session header), as far as the bytes go.
pub fn parse_elements(dir: Dir, body: &[u8]) -> Vec<Header> {
    let mut elems = Vec::new();
    let mut off = 0usize;
    while let Some(h) = body.get(off..) {
        if h.len() < HEADER || &h[..4] != b"\xfeSMB" || le16(h, 4) != Some(HEADER as u16) {
            break;
        }
        let (Some(status), Some(command), Some(flags), Some(next), Some(message_id)) = (
            le32(h, 8),
            le16(h, 12),
            le32(h, 16),
            le32(h, 20),
            le64(h, 24),
        ) else {
            break;
        };
        let structure = le16(h, HEADER);
        let bytes = match (dir, command) {
            // READ response: StructureSize 17, DataOffset, Reserved, DataLength.
            (Dir::Response, cmd::READ) if structure == Some(17) && !is_error(command, status) => {
                le32(h, HEADER + 4).map(u64::from)
            }
            // WRITE request: StructureSize 49, DataOffset, Length.
            (Dir::Request, cmd::WRITE) if structure == Some(49) => {
                le32(h, HEADER + 4).map(u64::from)
            }
            _ => None,
        };
        elems.push(Header {
            command,
            flags,
            status,
            message_id,
            bytes,
        });
        // Elements of a compound are 8-byte aligned and at least a header long.
        if next == 0 || (next as usize) < HEADER || elems.len() >= 256 {
            break;
        }
        off += next as usize;
    }
    elems
}

#[derive(Debug)]
struct Pending {
    command: u16,
    ts: Duration,
    end_ts: Duration,
    seq: u32,
    bytes: Option<u64>,
}

/// SMB2 pairing for one connection.
#[derive(Debug, Default)]
pub struct Smb2 {
    pending: FxHashMap<u64, Pending>,
    /// The client sent an SMB1 negotiate: an SMB2 NEGOTIATE response with message id 0 answers it.
    smb1_negotiate: bool,
}

impl Smb2 {
    /// A matcher for a new connection.
    pub fn new() -> Self {
        Smb2::default()
    }

    /// Requests waiting for their final response.
    pub fn open_requests(&self) -> usize {
        self.pending.len()
    }
}

impl Protocol for Smb2 {
    type Info = MsgInfo;

    fn frame(&mut self, dir: Dir, buf: &[u8], at_end: bool) -> Frame<MsgInfo> {
        if buf.len() < NBSS_HEADER {
            return if at_end { Frame::Bad } else { Frame::Need };
        }
        let len = u32::from_be_bytes([0, buf[1], buf[2], buf[3]]) as u64;
        let total = NBSS_HEADER as u64 + len;
        match buf[0] {
            0x00 => {}
            // Session request / positive / negative / retarget responses, keepalive: nothing to pair.
            0x81..=0x85 => {
                return Frame::Msg {
                    len: total,
                    info: MsgInfo::default(),
                };
            }
            _ => return Frame::Bad,
        }
        if len < 4 {
            return Frame::Bad;
        }
        let want = total.min(LOOK) as usize;
        if buf.len() < want && !at_end {
            return Frame::Need;
        }
        let body = &buf[NBSS_HEADER..buf.len().min(total as usize)];
        let mut info = MsgInfo::default();
        match body.get(..4) {
            Some(b"\xfeSMB") => info.elems = parse_elements(dir, body),
            Some(b"\xfdSMB") | Some(b"\xfcSMB") => info.sealed = true,
            Some(b"\xffSMB") => info.smb1 = true,
            Some(_) => return Frame::Bad,
            // Cut before the protocol id (at a gap): the length is known, the content is not.
            None => {}
        }
        Frame::Msg { len: total, info }
    }

    fn looks_like_start(&self, _dir: Dir, seg: &[u8]) -> bool {
        looks_like_start(seg) || (seg.len() == 4 && seg[0] == 0x85)
    }

    fn on_pdu(&mut self, pdu: Pdu<MsgInfo>, out: &mut Out) {
        if pdu.info.sealed {
            out.anomaly(pdu.first_ts, AnomalyKind::Encrypted);
            return;
        }
        if pdu.info.smb1 {
            if pdu.dir == Dir::Request {
                self.smb1_negotiate = true;
            }
            return;
        }
        for h in &pdu.info.elems {
            match pdu.dir {
                Dir::Request => {
                    if h.command == cmd::CANCEL {
                        // Carries the id of the request it cancels; never answered.
                        continue;
                    }
                    if self.pending.len() >= MAX_PENDING {
                        for _ in self.pending.drain() {
                            out.anomaly(pdu.first_ts, AnomalyKind::NoResponse);
                        }
                    }
                    let p = Pending {
                        command: h.command,
                        ts: pdu.first_ts,
                        end_ts: pdu.last_ts,
                        seq: pdu.seq,
                        bytes: h.bytes,
                    };
                    if self.pending.insert(h.message_id, p).is_some() {
                        out.anomaly(pdu.first_ts, AnomalyKind::DuplicateRequest);
                    }
                }
                Dir::Response => {
                    if h.message_id == u64::MAX || h.status == STATUS_PENDING {
                        // A break notification, or an interim response: the request stays open.
                        continue;
                    }
                    let Some(p) = self.pending.remove(&h.message_id) else {
                        if h.command == cmd::NEGOTIATE && h.message_id == 0 && self.smb1_negotiate {
                            // The answer to the SMB1 negotiate that upgraded the connection.
                            self.smb1_negotiate = false;
                        } else {
                            out.anomaly(pdu.first_ts, AnomalyKind::ResponseWithoutRequest);
                        }
                        continue;
                    };
                    let error = is_error(p.command, h.status);
                    out.push(Transaction {
                        conn: 0,
                        op: command_name(p.command),
                        request_ts: p.ts,
                        request_end_ts: p.end_ts,
                        response_ts: pdu.first_ts,
                        response_end_ts: pdu.last_ts,
                        request_seq: Some(p.seq),
                        xid: Some(h.message_id as u32),
                        content: None,
                        bytes: if p.command == cmd::READ {
                            h.bytes
                        } else {
                            p.bytes
                        },
                        error: error.then(|| status_name(h.status)),
                        status: if error { Status::Error } else { Status::Ok },
                    });
                }
            }
        }
    }

    fn on_lost(&mut self, _dir: Dir, _ts: Duration, _out: &mut Out) {}

    fn on_close(&mut self, ts: Duration, out: &mut Out) {
        out.unanswered(ts, self.pending.drain().count());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::rpc::{Carrier, ConnMatcher, Framed, Proto, replay};

    const Q: Dir = Dir::Request;
    const R: Dir = Dir::Response;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// One SMB2 element: header with `next` as NextCommand, then `body`, padded to 8 bytes when chained.
    fn elem(command: u16, flags: u32, status: u32, id: u64, body: &[u8], chained: bool) -> Vec<u8> {
        let mut h = vec![0u8; HEADER];
        h[..4].copy_from_slice(b"\xfeSMB");
        h[4..6].copy_from_slice(&64u16.to_le_bytes());
        h[8..12].copy_from_slice(&status.to_le_bytes());
        h[12..14].copy_from_slice(&command.to_le_bytes());
        h[16..20].copy_from_slice(&flags.to_le_bytes());
        h[24..32].copy_from_slice(&id.to_le_bytes());
        h.extend_from_slice(body);
        if chained {
            while !h.len().is_multiple_of(8) {
                h.push(0);
            }
            let next = h.len() as u32;
            h[20..24].copy_from_slice(&next.to_le_bytes());
        }
        h
    }

    fn nbss(parts: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = parts.concat();
        let mut m = (body.len() as u32).to_be_bytes().to_vec();
        m[0] = 0;
        m.extend_from_slice(&body);
        m
    }

    fn matcher() -> Framed<Smb2> {
        Framed::new(Smb2::new(), Carrier::Tcp)
    }

    fn feed(steps: &[(Dir, u64, &[u8])]) -> Out {
        let mut m = matcher();
        let mut out = Out::new(0);
        let mut seq = [1000u32, 5000u32];
        for &(dir, t, b) in steps {
            m.on_data(dir, us(t), seq[dir.index()], b, &mut out);
            seq[dir.index()] = seq[dir.index()].wrapping_add(b.len() as u32);
        }
        m.on_close(us(1_000_000), &mut out);
        out
    }

    fn read_resp_body(data_len: u32) -> Vec<u8> {
        let mut b = vec![0u8; 16];
        b[..2].copy_from_slice(&17u16.to_le_bytes());
        b[2] = 0x50;
        b[4..8].copy_from_slice(&data_len.to_le_bytes());
        b
    }

    #[test]
    fn compound_request_and_response_are_three_transactions() {
        // CREATE + QUERY_INFO (related) + CLOSE (related), as smbclient's allinfo sends them.
        let req = nbss(&[
            elem(5, 0, 0, 10, &[0x39, 0, 1, 2], true),
            elem(16, FLAG_RELATED, 0, 11, &[0x29, 0], true),
            elem(6, FLAG_RELATED, 0, 12, &[0x18, 0], false),
        ]);
        let resp = nbss(&[
            elem(5, FLAG_RESPONSE, 0, 10, &[0x59, 0], true),
            elem(16, FLAG_RESPONSE | FLAG_RELATED, 0, 11, &[9, 0], true),
            elem(6, FLAG_RESPONSE | FLAG_RELATED, 0, 12, &[0x3c, 0], false),
        ]);
        let out = feed(&[(Q, 100, &req), (R, 350, &resp)]);
        let ops: Vec<&str> = out.transactions.iter().map(|t| t.op.as_ref()).collect();
        assert_eq!(ops, ["CREATE", "QUERY_INFO", "CLOSE"]);
        for t in &out.transactions {
            assert_eq!(t.first_byte(), us(250));
            assert_eq!(t.request_seq, Some(1000));
            assert_eq!(t.status, Status::Ok);
        }
        assert!(out.anomalies.is_empty(), "{:?}", out.anomalies);
    }

    #[test]
    fn interim_pending_response_does_not_answer_the_read() {
        let mut read_req = vec![0u8; 48];
        read_req[..2].copy_from_slice(&49u16.to_le_bytes());
        let req = nbss(&[elem(8, 0, 0, 273, &read_req, false)]);
        let interim = nbss(&[elem(
            8,
            FLAG_RESPONSE | FLAG_ASYNC,
            STATUS_PENDING,
            273,
            &[9, 0, 0, 0, 0, 0, 0, 0, 0],
            false,
        )]);
        let mut fin = nbss(&[elem(
            8,
            FLAG_RESPONSE | FLAG_ASYNC,
            0,
            273,
            &read_resp_body(200_000),
            false,
        )]);
        // The data follows the response header: the session header says how long the whole message is.
        let total = (fin.len() - 4 + 200_000) as u32;
        fin[1..4].copy_from_slice(&total.to_be_bytes()[1..]);
        let data = vec![0xabu8; 200_000];
        let (a, b) = data.split_at(100_000);
        let out = feed(&[
            (Q, 10, &req),
            (R, 20, &interim),
            (R, 500, &fin),
            (R, 600, a),
            (R, 900, b),
        ]);
        assert_eq!(out.transactions.len(), 1, "{:?}", out.anomalies);
        let t = &out.transactions[0];
        assert_eq!(t.op, "READ");
        assert_eq!(t.bytes, Some(200_000));
        assert_eq!(t.first_byte(), us(490));
        assert_eq!(t.last_byte(), us(890));
        assert!(out.anomalies.is_empty(), "{:?}", out.anomalies);
    }

    #[test]
    fn error_status_is_named_and_more_processing_is_not_an_error() {
        let out = feed(&[
            (Q, 1, &nbss(&[elem(1, 0, 0, 1, &[0x19, 0], false)])),
            (
                R,
                2,
                &nbss(&[elem(
                    1,
                    FLAG_RESPONSE,
                    STATUS_MORE_PROCESSING_REQUIRED,
                    1,
                    &[9, 0],
                    false,
                )]),
            ),
            (Q, 3, &nbss(&[elem(5, 0, 0, 2, &[0x39, 0], false)])),
            (
                R,
                4,
                &nbss(&[elem(5, FLAG_RESPONSE, 0xC000_0034, 2, &[9, 0], false)]),
            ),
            (Q, 5, &nbss(&[elem(11, 0, 0, 3, &[0x39, 0], false)])),
            (
                R,
                6,
                &nbss(&[elem(11, FLAG_RESPONSE, 0xC0AB_0001, 3, &[9, 0], false)]),
            ),
        ]);
        let t = &out.transactions;
        assert_eq!(t.len(), 3);
        assert_eq!((t[0].status, t[0].error.clone()), (Status::Ok, None));
        assert_eq!(t[1].status, Status::Error);
        assert_eq!(t[1].error.as_deref(), Some("STATUS_OBJECT_NAME_NOT_FOUND"));
        assert_eq!(t[2].error.as_deref(), Some("0xc0ab0001"));
    }

    #[test]
    fn encrypted_messages_are_counted_not_decoded() {
        let mut sealed = vec![0u8; 52];
        sealed[..4].copy_from_slice(b"\xfdSMB");
        sealed.extend_from_slice(&[0x77; 100]);
        let m = nbss(&[sealed]);
        let out = feed(&[(Q, 1, &m), (R, 2, &m)]);
        assert!(out.transactions.is_empty());
        assert_eq!(out.anomalies.len(), 2);
        assert!(
            out.anomalies
                .iter()
                .all(|a| a.kind == AnomalyKind::Encrypted)
        );
    }

    #[test]
    fn smb1_negotiate_upgraded_to_smb2_is_skipped() {
        let mut smb1 = b"\xffSMB\x72".to_vec();
        smb1.resize(40, 0);
        let out = feed(&[
            (Q, 1, &nbss(&[smb1])),
            (
                R,
                2,
                &nbss(&[elem(0, FLAG_RESPONSE, 0, 0, &[0x41, 0], false)]),
            ),
            (Q, 3, &[0x85, 0, 0, 0]),
            (Q, 4, &nbss(&[elem(0, 0, 0, 1, &[0x24, 0], false)])),
            (
                R,
                5,
                &nbss(&[elem(0, FLAG_RESPONSE, 0, 1, &[0x41, 0], false)]),
            ),
        ]);
        assert_eq!(out.transactions.len(), 1);
        assert_eq!(out.transactions[0].op, "NEGOTIATE");
        assert!(out.anomalies.is_empty(), "{:?}", out.anomalies);
    }

    #[test]
    fn request_split_over_segments_uses_both_timestamps() {
        let mut body = vec![0u8; 48];
        body[..2].copy_from_slice(&49u16.to_le_bytes());
        body[4..8].copy_from_slice(&70_000u32.to_le_bytes());
        let mut req = nbss(&[elem(9, 0, 0, 7, &body, false)]);
        let total = (req.len() - 4 + 70_000) as u32;
        req[1..4].copy_from_slice(&total.to_be_bytes()[1..]);
        req.resize(req.len() + 70_000, 1);
        let (a, b) = req.split_at(30);
        let out = feed(&[
            (Q, 10, a),
            (Q, 40, b),
            (
                R,
                90,
                &nbss(&[elem(9, FLAG_RESPONSE, 0, 7, &[17, 0], false)]),
            ),
        ]);
        let t = &out.transactions[0];
        assert_eq!((t.request_ts, t.request_end_ts), (us(10), us(40)));
        assert_eq!(t.bytes, Some(70_000));
        assert_eq!(t.first_byte(), us(50));
    }

    #[test]
    fn truncated_and_garbage_input_does_not_panic() {
        let good = nbss(&[elem(5, 0, 0, 2, &[0x39, 0], false)]);
        for cut in 0..good.len() {
            let _ = feed(&[(Q, 1, &good[..cut])]);
            let mut m = matcher();
            let mut out = Out::new(0);
            m.on_data(Q, us(1), 0, &good[..cut], &mut out);
            m.on_gap(Q, us(2), 1000, &mut out);
            m.on_close(us(3), &mut out);
        }
        // A chain whose NextCommand points past the end, and one that points backwards.
        let mut e = elem(5, 0, 0, 2, &[0x39, 0], true);
        e[20..24].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
        let _ = feed(&[(Q, 1, &nbss(&[e.clone()]))]);
        e[20..24].copy_from_slice(&8u32.to_le_bytes());
        let _ = feed(&[(Q, 1, &nbss(&[e]))]);
        let out = feed(&[(Q, 1, b"\x00\x00\x00\x08GARBAGE!"), (R, 2, b"\x07junk")]);
        assert!(out.transactions.is_empty());
        assert!(
            out.anomalies
                .iter()
                .any(|a| a.kind == AnomalyKind::Unparseable)
        );
        let _ = replay(Proto::Smb2, b"\x00\x08\x00\x00\x00\x04\xfeSMB\x40\xff");
    }

    #[test]
    fn fuzz_corpus_cut_from_a_samba_capture_pairs_its_requests() {
        // Scripts for `replay` made of real smbclient/smbd segments (long ones cut short by gaps).
        let cases: [(&[u8], &str); 4] = [
            (
                include_bytes!("../../../fuzz/corpus/rpc_smb2/negotiate_session_setup"),
                "SESSION_SETUP",
            ),
            (
                include_bytes!("../../../fuzz/corpus/rpc_smb2/tree_connect_create_error"),
                "CREATE",
            ),
            (
                include_bytes!("../../../fuzz/corpus/rpc_smb2/read_pending_then_data"),
                "READ",
            ),
            (
                include_bytes!("../../../fuzz/corpus/rpc_smb2/compound_allinfo_close"),
                "CLOSE",
            ),
        ];
        for (script, op) in cases {
            let out = replay(Proto::Smb2, script);
            assert!(
                out.transactions.iter().any(|t| t.op == op),
                "{op}: {:?} {:?}",
                out.transactions,
                out.anomalies
            );
        }
    }

    #[test]
    fn mutated_real_messages_never_panic() {
        // What the fuzz target does, for a few seconds' worth: the corpus scripts with bytes flipped, cut and
        // repeated, so the parser sees nearly valid headers, chains and lengths.
        let seeds: [&[u8]; 3] = [
            include_bytes!("../../../fuzz/corpus/rpc_smb2/negotiate_session_setup"),
            include_bytes!("../../../fuzz/corpus/rpc_smb2/tree_connect_create_error"),
            include_bytes!("../../../fuzz/corpus/rpc_smb2/compound_allinfo_close"),
        ];
        let mut x: u64 = 0x5eed_5eed_1234_5678;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for seed in seeds {
            for _ in 0..2000 {
                let mut s = seed.to_vec();
                for _ in 0..(1 + rnd() % 8) {
                    let i = (rnd() as usize) % s.len();
                    s[i] = match rnd() % 3 {
                        0 => rnd() as u8,
                        1 => s[i] ^ (1 << (rnd() % 8)),
                        _ => [0u8, 0xff, 0x40, 0x08][(rnd() % 4) as usize],
                    };
                }
                if rnd() % 4 == 0 {
                    s.truncate((rnd() as usize) % s.len());
                }
                let out = replay(Proto::Smb2, &s);
                for t in &out.transactions {
                    assert!(t.response_end_ts >= t.response_ts);
                }
            }
        }
    }
}
