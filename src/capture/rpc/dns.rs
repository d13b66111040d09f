//! DNS queries and responses over UDP (one message per datagram) and TCP (2-byte length prefix), matched by
//! message ID within the connection or address pair. The operation is the query type (A, AAAA, PTR, ...).
#![forbid(unsafe_code)]

use super::{
    AnomalyKind, Carrier, Dir, Frame, FxHashMap, Out, Pdu, Protocol, Status, Transaction, be16,
};
use std::time::Duration;

/// What the framer read from a DNS message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DnsInfo {
    /// Message ID.
    pub id: u16,
    /// True for a response (QR bit).
    pub response: bool,
    /// Response code (low 4 bits of the flags).
    pub rcode: u8,
    /// Type of the first question, when captured.
    pub qtype: Option<u16>,
}

/// Name of a query type.
pub fn qtype_name(t: u16) -> String {
    let s = match t {
        1 => "A",
        2 => "NS",
        5 => "CNAME",
        6 => "SOA",
        12 => "PTR",
        13 => "HINFO",
        15 => "MX",
        16 => "TXT",
        28 => "AAAA",
        33 => "SRV",
        35 => "NAPTR",
        43 => "DS",
        48 => "DNSKEY",
        64 => "SVCB",
        65 => "HTTPS",
        99 => "SPF",
        252 => "AXFR",
        251 => "IXFR",
        255 => "ANY",
        _ => return format!("TYPE{t}"),
    };
    s.to_string()
}

/// Parses a DNS message header and the type of its first question.
pub fn parse_message(b: &[u8]) -> Option<DnsInfo> {
    if b.len() < 12 {
        return None;
    }
    let id = be16(b, 0)?;
    let flags = be16(b, 2)?;
    let opcode = (flags >> 11) & 0xf;
    if opcode > 6 {
        return None;
    }
    let qd = be16(b, 4)?;
    let mut qtype = None;
    if qd >= 1 {
        // walk the first name (labels; a compression pointer ends it)
        let mut at = 12usize;
        let mut ok = false;
        for _ in 0..128 {
            let Some(&l) = b.get(at) else { break };
            if l == 0 {
                at += 1;
                ok = true;
                break;
            }
            if l & 0xc0 == 0xc0 {
                at += 2;
                ok = true;
                break;
            }
            if l & 0xc0 != 0 {
                return None;
            }
            at += 1 + l as usize;
        }
        if ok {
            qtype = be16(b, at);
        }
    }
    Some(DnsInfo {
        id,
        response: flags & 0x8000 != 0,
        rcode: (flags & 0xf) as u8,
        qtype,
    })
}

#[derive(Debug)]
struct Pending {
    ts: Duration,
    end_ts: Duration,
    seq: u32,
    qtype: Option<u16>,
}

/// DNS pairing for one connection or address pair.
#[derive(Debug)]
pub struct Dns {
    carrier: Carrier,
    pending: FxHashMap<u16, Pending>,
}

impl Dns {
    /// A matcher state for one connection.
    pub fn new(carrier: Carrier) -> Self {
        Dns {
            carrier,
            pending: FxHashMap::default(),
        }
    }
}

impl Protocol for Dns {
    type Info = DnsInfo;

    fn frame(&mut self, _dir: Dir, buf: &[u8], at_end: bool) -> Frame<DnsInfo> {
        if self.carrier == Carrier::Udp {
            return Frame::msg_or_bad(buf.len() as u64, parse_message(buf));
        }
        let Some(len) = be16(buf, 0) else {
            return if at_end { Frame::Bad } else { Frame::Need };
        };
        if len < 12 {
            return Frame::Bad;
        }
        let total = 2 + len as usize;
        let want = total.min(2 + 12 + 260);
        if buf.len() < want && !at_end {
            return Frame::Need;
        }
        let body = &buf[2..buf.len().min(total)];
        Frame::msg_or_bad(total as u64, parse_message(body))
    }

    fn looks_like_start(&self, _dir: Dir, seg: &[u8]) -> bool {
        match be16(seg, 0) {
            Some(l) if l >= 12 => seg.len() >= 14 && parse_message(&seg[2..]).is_some(),
            _ => false,
        }
    }

    fn on_pdu(&mut self, pdu: Pdu<DnsInfo>, out: &mut Out) {
        let i = pdu.info;
        // The QR bit, not the transport roles, tells queries from responses (53 <-> 53 is common).
        if !i.response {
            if self.pending.contains_key(&i.id) {
                out.anomaly(pdu.first_ts, AnomalyKind::DuplicateRequest);
                return;
            }
            if self.pending.len() >= 1 << 16 {
                for _ in self.pending.drain() {
                    out.anomaly(pdu.first_ts, AnomalyKind::NoResponse);
                }
            }
            self.pending.insert(
                i.id,
                Pending {
                    ts: pdu.first_ts,
                    end_ts: pdu.last_ts,
                    seq: pdu.seq,
                    qtype: i.qtype,
                },
            );
            return;
        }
        let Some(p) = self.pending.remove(&i.id) else {
            out.anomaly(pdu.first_ts, AnomalyKind::ResponseWithoutRequest);
            return;
        };
        out.push(Transaction {
            conn: 0,
            op: p
                .qtype
                .or(i.qtype)
                .map_or_else(|| "QUERY".into(), |q| qtype_name(q).into()),
            request_ts: p.ts,
            request_end_ts: p.end_ts,
            response_ts: pdu.first_ts,
            response_end_ts: pdu.last_ts,
            request_seq: (self.carrier == Carrier::Tcp).then_some(p.seq),
            xid: Some(i.id as u32),
            content: None,
            bytes: None,
            error: None,
            status: if i.rcode == 0 {
                Status::Ok
            } else {
                Status::Error
            },
        });
    }

    fn on_lost(&mut self, _dir: Dir, _ts: Duration, _out: &mut Out) {}

    fn on_close(&mut self, ts: Duration, out: &mut Out) {
        out.unanswered(ts, self.pending.drain().count());
    }
}
