//! ONC-RPC (RFC 5531) calls and replies, matched by XID within a connection, with names for NFS v2/v3
//! procedures, the main operation of NFSv4 COMPOUNDs, MOUNT and PORTMAP. Over TCP, messages are carried in
//! record-marking fragments (a 4-byte mark: last-fragment bit and 31-bit length), which may span segments.
#![forbid(unsafe_code)]

use super::{
    AnomalyKind, Carrier, Dir, Frame, FxHashMap, Out, Pdu, Protocol, Status, Transaction, be32,
};
use std::time::Duration;

/// ONC-RPC program number of NFS.
pub const NFS_PROGRAM: u32 = 100003;
/// Largest record fragment accepted before the bytes are taken for something else.
pub const MAX_FRAGMENT: u32 = 64 * 1024 * 1024;
/// Calls waiting for replies on one connection beyond this are reported unanswered and forgotten.
pub const MAX_PENDING: usize = 1 << 16;
/// How many bytes of a call are examined (enough for AUTH_SYS credentials and the first NFSv4 operations).
const WANT: usize = 512;

const NFS3_PROCS: [&str; 22] = [
    "NULL",
    "GETATTR",
    "SETATTR",
    "LOOKUP",
    "ACCESS",
    "READLINK",
    "READ",
    "WRITE",
    "CREATE",
    "MKDIR",
    "SYMLINK",
    "MKNOD",
    "REMOVE",
    "RMDIR",
    "RENAME",
    "LINK",
    "READDIR",
    "READDIRPLUS",
    "FSSTAT",
    "FSINFO",
    "PATHCONF",
    "COMMIT",
];

const NFS2_PROCS: [&str; 18] = [
    "NULL",
    "GETATTR",
    "SETATTR",
    "ROOT",
    "LOOKUP",
    "READLINK",
    "READ",
    "WRITECACHE",
    "WRITE",
    "CREATE",
    "REMOVE",
    "RENAME",
    "LINK",
    "SYMLINK",
    "MKDIR",
    "RMDIR",
    "READDIR",
    "STATFS",
];

/// NFSv4 operation names from code 3 (RFC 7530, 8881, 7862).
const NFS4_OPS: [&str; 69] = [
    "ACCESS",
    "CLOSE",
    "COMMIT",
    "CREATE",
    "DELEGPURGE",
    "DELEGRETURN",
    "GETATTR",
    "GETFH",
    "LINK",
    "LOCK",
    "LOCKT",
    "LOCKU",
    "LOOKUP",
    "LOOKUPP",
    "NVERIFY",
    "OPEN",
    "OPENATTR",
    "OPEN_CONFIRM",
    "OPEN_DOWNGRADE",
    "PUTFH",
    "PUTPUBFH",
    "PUTROOTFH",
    "READ",
    "READDIR",
    "READLINK",
    "REMOVE",
    "RENAME",
    "RENEW",
    "RESTOREFH",
    "SAVEFH",
    "SECINFO",
    "SETATTR",
    "SETCLIENTID",
    "SETCLIENTID_CONFIRM",
    "VERIFY",
    "WRITE",
    "RELEASE_LOCKOWNER",
    "BACKCHANNEL_CTL",
    "BIND_CONN_TO_SESSION",
    "EXCHANGE_ID",
    "CREATE_SESSION",
    "DESTROY_SESSION",
    "FREE_STATEID",
    "GET_DIR_DELEGATION",
    "GETDEVICEINFO",
    "GETDEVICELIST",
    "LAYOUTCOMMIT",
    "LAYOUTGET",
    "LAYOUTRETURN",
    "SECINFO_NO_NAME",
    "SEQUENCE",
    "SET_SSV",
    "TEST_STATEID",
    "WANT_DELEGATION",
    "DESTROY_CLIENTID",
    "RECLAIM_COMPLETE",
    "ALLOCATE",
    "COPY",
    "COPY_NOTIFY",
    "DEALLOCATE",
    "IO_ADVISE",
    "LAYOUTERROR",
    "LAYOUTSTATS",
    "OFFLOAD_CANCEL",
    "OFFLOAD_STATUS",
    "READ_PLUS",
    "SEEK",
    "WRITE_SAME",
    "CLONE",
];

const OP_SEQUENCE: u32 = 53;
const OP_PUTFH: u32 = 22;

/// The name of an NFSv4 operation code.
pub fn nfs4_op_name(op: u32) -> Option<&'static str> {
    op.checked_sub(3)
        .and_then(|i| NFS4_OPS.get(i as usize).copied())
}

/// The operation name of a call: NFSv3 procedures by their name, other versions and programs qualified.
pub fn op_name(prog: u32, vers: u32, proc_: u32, v4_main: Option<u32>) -> String {
    match (prog, vers) {
        (NFS_PROGRAM, 3) => NFS3_PROCS
            .get(proc_ as usize)
            .map_or_else(|| format!("NFSv3 proc {proc_}"), |s| (*s).to_string()),
        (NFS_PROGRAM, 2) => NFS2_PROCS
            .get(proc_ as usize)
            .map_or_else(|| format!("NFSv2 proc {proc_}"), |s| format!("NFSv2 {s}")),
        (NFS_PROGRAM, 4) => match proc_ {
            0 => "NFSv4 NULL".into(),
            1 => match v4_main.map(|op| (op, nfs4_op_name(op))) {
                Some((_, Some(name))) => format!("NFSv4 {name}"),
                Some((op, None)) => format!("NFSv4 op {op}"),
                None => "NFSv4 COMPOUND".into(),
            },
            p => format!("NFSv4 proc {p}"),
        },
        (100005, _) => {
            match ["NULL", "MNT", "DUMP", "UMNT", "UMNTALL", "EXPORT"].get(proc_ as usize) {
                Some(s) => format!("MOUNT {s}"),
                None => format!("MOUNT proc {proc_}"),
            }
        }
        (100000, _) => {
            match ["NULL", "SET", "UNSET", "GETPORT", "DUMP", "CALLIT"].get(proc_ as usize) {
                Some(s) => format!("PORTMAP {s}"),
                None => format!("PORTMAP proc {proc_}"),
            }
        }
        _ => format!("RPC {prog}/{vers} proc {proc_}"),
    }
}

/// What the framer read from one fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcInfo {
    /// A call.
    Call {
        /// Transaction id.
        xid: u32,
        /// Program number.
        prog: u32,
        /// Program version.
        vers: u32,
        /// Procedure number.
        proc_: u32,
        /// For NFSv4 COMPOUND: the main operation, when the snap length kept it.
        v4_main: Option<u32>,
    },
    /// A reply.
    Reply {
        /// Transaction id.
        xid: u32,
        /// False when the call was denied or not executed (accept_stat != SUCCESS).
        accepted: bool,
        /// The first word of the results (nfsstat for NFS), when captured.
        first_result: Option<u32>,
    },
    /// A fragment that continues a record (or a header that was not captured).
    Continuation,
}

/// Reads the header of one RPC message (without record mark) from `b`.
pub fn parse_message(b: &[u8]) -> Option<RpcInfo> {
    let xid = be32(b, 0)?;
    match be32(b, 4)? {
        0 => {
            if be32(b, 8)? != 2 {
                return None;
            }
            let prog = be32(b, 12)?;
            let vers = be32(b, 16)?;
            let proc_ = be32(b, 20)?;
            let v4_main = if prog == NFS_PROGRAM && vers == 4 && proc_ == 1 {
                compound_main_op(b)
            } else {
                None
            };
            Some(RpcInfo::Call {
                xid,
                prog,
                vers,
                proc_,
                v4_main,
            })
        }
        1 => {
            let stat = be32(b, 8)?;
            let (accepted, first_result) = match stat {
                0 => {
                    // verifier: flavor, length, body; then accept_stat, then results
                    let vlen = be32(b, 16).map(|l| (l as usize + 3) & !3);
                    match vlen {
                        Some(vlen) if vlen <= 400 => {
                            let at = 20 + vlen;
                            match be32(b, at) {
                                Some(0) => (true, be32(b, at + 4)),
                                Some(_) => (false, None),
                                None => (true, None),
                            }
                        }
                        Some(_) => return None,
                        None => (true, None),
                    }
                }
                1 => (false, None),
                _ => return None,
            };
            Some(RpcInfo::Reply {
                xid,
                accepted,
                first_result,
            })
        }
        _ => None,
    }
}

/// Skips an XDR opaque<> at `at`; returns the offset after it.
fn skip_opaque(b: &[u8], at: usize, max: u32) -> Option<usize> {
    let len = be32(b, at)?;
    if len > max {
        return None;
    }
    Some(at + 4 + ((len as usize + 3) & !3))
}

/// The main operation of an NFSv4 COMPOUND call: the first operation that is not SEQUENCE, PUTFH, PUTROOTFH,
/// PUTPUBFH, SAVEFH, RESTOREFH or GETFH, else the last operation seen.
fn compound_main_op(b: &[u8]) -> Option<u32> {
    // call header: xid type rpcvers prog vers proc = 24 bytes, then cred and verf (flavor + opaque)
    let mut at = skip_opaque(b, 28, 400)?;
    at = skip_opaque(b, at + 4, 400)?;
    at = skip_opaque(b, at, 1024)?; // tag
    at += 4; // minorversion
    let numops = be32(b, at)?;
    at += 4;
    let mut last = None;
    for _ in 0..numops.min(64) {
        let Some(op) = be32(b, at) else {
            return last;
        };
        at += 4;
        last = Some(op);
        match op {
            OP_SEQUENCE => at += 32,
            OP_PUTFH => match skip_opaque(b, at, 128) {
                Some(n) => at = n,
                None => return last,
            },
            23 | 24 | 31 | 32 | 10 => {}
            _ => return Some(op),
        }
    }
    last
}

/// Does `b` (a record body, or a UDP datagram) start with a plausible RPC call or reply?
fn plausible_message(b: &[u8]) -> bool {
    match be32(b, 4) {
        Some(0) => be32(b, 8).is_none_or(|v| v == 2),
        Some(1) => be32(b, 8).is_none_or(|v| v <= 1),
        _ => false,
    }
}

#[derive(Debug)]
struct Pending {
    ts: Duration,
    end_ts: Duration,
    seq: u32,
    op: String,
    nfs: bool,
    proc_: u32,
}

/// ONC-RPC pairing for one connection.
#[derive(Debug)]
pub struct OncRpc {
    carrier: Carrier,
    /// Per direction: the next fragment continues a record.
    continuing: [bool; 2],
    pending: FxHashMap<u32, Pending>,
}

impl OncRpc {
    /// A matcher state for one connection.
    pub fn new(carrier: Carrier) -> Self {
        OncRpc {
            carrier,
            continuing: [false; 2],
            pending: FxHashMap::default(),
        }
    }

    /// Calls still waiting for a reply.
    pub fn open_calls(&self) -> usize {
        self.pending.len()
    }
}

impl Protocol for OncRpc {
    type Info = RpcInfo;

    fn frame(&mut self, dir: Dir, buf: &[u8], at_end: bool) -> Frame<RpcInfo> {
        if self.carrier == Carrier::Udp {
            return Frame::msg_or_bad(buf.len() as u64, parse_message(buf));
        }
        let Some(mark) = be32(buf, 0) else {
            return if at_end { Frame::Bad } else { Frame::Need };
        };
        let frag_len = mark & 0x7fff_ffff;
        let last = mark & 0x8000_0000 != 0;
        if frag_len > MAX_FRAGMENT {
            return Frame::Bad;
        }
        let len = 4 + frag_len as u64;
        let d = dir.index();
        if self.continuing[d] {
            self.continuing[d] = !last;
            return Frame::Msg {
                len,
                info: RpcInfo::Continuation,
            };
        }
        let want = (len as usize).min(WANT);
        if buf.len() < want && !at_end {
            // Decide early when the header is clearly not RPC.
            if buf.len() >= 12 && !plausible_message(&buf[4..]) {
                return Frame::Bad;
            }
            return Frame::Need;
        }
        let body = &buf[4..buf.len().min(len as usize)];
        match parse_message(body) {
            Some(info) => {
                self.continuing[d] = !last;
                Frame::Msg { len, info }
            }
            None if body.len() < 12 && at_end && frag_len >= 12 => {
                // Header cut by the snap length: keep framing, the message cannot be named.
                self.continuing[d] = !last;
                Frame::Msg {
                    len,
                    info: RpcInfo::Continuation,
                }
            }
            None => Frame::Bad,
        }
    }

    fn looks_like_start(&self, _dir: Dir, seg: &[u8]) -> bool {
        if self.carrier == Carrier::Udp {
            return true;
        }
        match be32(seg, 0) {
            Some(mark) => {
                let len = mark & 0x7fff_ffff;
                (12..=MAX_FRAGMENT).contains(&len) && plausible_message(&seg[4..])
            }
            None => false,
        }
    }

    fn on_pdu(&mut self, pdu: Pdu<RpcInfo>, out: &mut Out) {
        match pdu.info {
            RpcInfo::Call {
                xid,
                prog,
                vers,
                proc_,
                v4_main,
            } => {
                if pdu.dir != Dir::Request {
                    // A call from the server (NFSv4 callback): not a client request, not paired here.
                    return;
                }
                if self.pending.contains_key(&xid) {
                    // Retransmission: the client waits since the first call.
                    out.anomaly(pdu.first_ts, AnomalyKind::DuplicateRequest);
                    return;
                }
                if self.pending.len() >= MAX_PENDING {
                    // A one-sided capture (no replies): keep memory bounded, report what is dropped.
                    for _ in self.pending.drain() {
                        out.anomaly(pdu.first_ts, AnomalyKind::NoResponse);
                    }
                }
                let seq = if self.carrier == Carrier::Tcp {
                    pdu.seq
                } else {
                    0
                };
                self.pending.insert(
                    xid,
                    Pending {
                        ts: pdu.first_ts,
                        end_ts: pdu.last_ts,
                        seq,
                        op: op_name(prog, vers, proc_, v4_main),
                        nfs: prog == NFS_PROGRAM,
                        proc_,
                    },
                );
            }
            RpcInfo::Reply {
                xid,
                accepted,
                first_result,
            } => {
                if pdu.dir != Dir::Response {
                    return;
                }
                let Some(p) = self.pending.remove(&xid) else {
                    out.anomaly(pdu.first_ts, AnomalyKind::ResponseWithoutRequest);
                    return;
                };
                let ok =
                    accepted && !(p.nfs && p.proc_ != 0 && first_result.is_some_and(|s| s != 0));
                out.push(Transaction {
                    conn: 0,
                    op: p.op.into(),
                    request_ts: p.ts,
                    request_end_ts: p.end_ts,
                    response_ts: pdu.first_ts,
                    response_end_ts: pdu.last_ts,
                    request_seq: (self.carrier == Carrier::Tcp).then_some(p.seq),
                    xid: Some(xid),
                    content: None,
                    bytes: None,
                    error: None,
                    status: if ok { Status::Ok } else { Status::Error },
                });
            }
            RpcInfo::Continuation => {}
        }
    }

    fn on_lost(&mut self, dir: Dir, _ts: Duration, _out: &mut Out) {
        self.continuing[dir.index()] = false;
    }

    fn on_close(&mut self, ts: Duration, out: &mut Out) {
        out.unanswered(ts, self.pending.drain().count());
    }
}
