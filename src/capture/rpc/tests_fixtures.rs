//! Byte-level fixtures for every protocol matcher: hand-built messages, split across segments, pipelined,
//! cut by the snap length, duplicated, unanswered, unrequested, and garbage.

use super::*;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// Feeds events to a fresh matcher of `proto` and returns what came out.
enum Ev<'a> {
    /// direction, time in ms, bytes (seq follows on automatically)
    D(Dir, u64, &'a [u8]),
    /// direction, time in ms, missing byte count
    Gap(Dir, u64, u64),
    Close(u64),
}

fn run(proto: Proto, carrier: Carrier, evs: &[Ev]) -> Out {
    let mut m = proto.matcher(carrier);
    let mut out = Out::new(7);
    let mut seq = [1000u32, 5000u32];
    for e in evs {
        match e {
            Ev::D(d, t, b) => {
                m.on_data(*d, ms(*t), seq[d.index()], b, &mut out);
                seq[d.index()] = seq[d.index()].wrapping_add(b.len() as u32);
            }
            Ev::Gap(d, t, n) => {
                m.on_gap(*d, ms(*t), *n, &mut out);
                seq[d.index()] = seq[d.index()].wrapping_add(*n as u32);
            }
            Ev::Close(t) => m.on_close(ms(*t), &mut out),
        }
    }
    out
}

fn ops(out: &Out) -> Vec<(String, u64, Status)> {
    out.transactions
        .iter()
        .map(|t| (t.op.to_string(), t.latency().as_millis() as u64, t.status))
        .collect()
}

fn kinds(out: &Out) -> Vec<AnomalyKind> {
    out.anomalies.iter().map(|a| a.kind).collect()
}

use AnomalyKind as A;
use Dir::{Request as Q, Response as R};
use Ev::{Close, D, Gap};

// ---------- ONC-RPC ----------

fn rpc_call(xid: u32, prog: u32, vers: u32, proc_: u32, body: usize) -> Vec<u8> {
    let mut m = Vec::new();
    for w in [xid, 0, 2, prog, vers, proc_, 1, 8, 0, 0, 0, 0] {
        m.extend_from_slice(&w.to_be_bytes());
    }
    // AUTH_SYS cred was declared 8 bytes: stamp, machine name len 0 (2 words), then verf flavor 0 len 0
    m.resize(m.len() + body, 0xab);
    record(m)
}

fn record(m: Vec<u8>) -> Vec<u8> {
    let mut r = (0x8000_0000u32 | m.len() as u32).to_be_bytes().to_vec();
    r.extend(m);
    r
}

fn rpc_reply(xid: u32, status: u32, body: usize) -> Vec<u8> {
    let mut m = Vec::new();
    for w in [xid, 1, 0, 0, 0, 0, status] {
        m.extend_from_slice(&w.to_be_bytes());
    }
    m.resize(m.len() + body, 0xcd);
    record(m)
}

#[test]
fn rpc_call_and_reply() {
    let out = run(
        Proto::Nfs,
        Carrier::Tcp,
        &[
            D(Q, 0, &rpc_call(1, 100003, 3, 6, 40)),
            D(R, 5, &rpc_reply(1, 0, 100)),
            Close(9),
        ],
    );
    assert_eq!(ops(&out), vec![("READ".into(), 5, Status::Ok)]);
    assert_eq!(out.transactions[0].xid, Some(1));
    assert_eq!(out.transactions[0].request_seq, Some(1000));
    assert_eq!(out.transactions[0].conn, 7);
    assert!(out.anomalies.is_empty());
}

#[test]
fn long_read_reply_first_and_last_byte() {
    // A 32 KiB READ reply in three segments: the first byte arrives 2 ms after the request ended, the last
    // at 30 ms (the transfer); the request itself ended at 1 ms.
    let call = rpc_call(9, 100003, 3, 6, 40);
    let reply = rpc_reply(9, 0, 32 * 1024);
    let out = run(
        Proto::Nfs,
        Carrier::Tcp,
        &[
            D(Q, 0, &call[..20]),
            D(Q, 1, &call[20..]),
            D(R, 3, &reply[..1000]),
            D(R, 10, &reply[1000..20000]),
            D(R, 30, &reply[20000..]),
            Close(40),
        ],
    );
    let t = &out.transactions[0];
    assert_eq!(t.first_byte(), ms(2));
    assert_eq!(t.last_byte(), ms(29));
    assert_eq!(t.latency(), t.last_byte());
}

#[test]
fn rpc_split_across_segments_and_pipelined() {
    let c1 = rpc_call(10, 100003, 3, 7, 8192); // WRITE with a body
    let c2 = rpc_call(11, 100003, 3, 1, 32); // GETATTR
    let mut both = c1.clone();
    both.extend_from_slice(&c2);
    let r2 = rpc_reply(11, 0, 20);
    let r1 = rpc_reply(10, 0, 20);
    let mut replies = r2.clone();
    replies.extend_from_slice(&r1);
    let out = run(
        Proto::Nfs,
        Carrier::Tcp,
        &[
            // the record mark itself is split
            D(Q, 0, &both[..2]),
            D(Q, 1, &both[2..30]),
            D(Q, 2, &both[30..5000]),
            D(Q, 3, &both[5000..]),
            // replies out of order, in one segment but split in the middle of the second
            D(R, 10, &replies[..r2.len() + 6]),
            D(R, 12, &replies[r2.len() + 6..]),
        ],
    );
    let mut got = ops(&out);
    got.sort();
    assert_eq!(
        got,
        vec![
            ("GETATTR".into(), 7, Status::Ok),
            ("WRITE".into(), 9, Status::Ok)
        ]
    );
    let w = out.transactions.iter().find(|t| t.op == "WRITE").unwrap();
    assert_eq!(w.request_ts, ms(0));
    assert_eq!(w.request_end_ts, ms(3));
    assert_eq!(w.request_seq, Some(1000));
    let g = out.transactions.iter().find(|t| t.op == "GETATTR").unwrap();
    assert_eq!(g.request_seq, Some(1000 + c1.len() as u32));
}

#[test]
fn rpc_snaplen_cut_headers_still_count() {
    // -s 96 leaves about 30 bytes of TCP payload per packet.
    let call = rpc_call(5, 100003, 3, 6, 60);
    let reply = rpc_reply(5, 0, 8192);
    let out = run(
        Proto::Nfs,
        Carrier::Tcp,
        &[
            D(Q, 0, &call[..30]),
            Gap(Q, 0, (call.len() - 30) as u64),
            D(R, 2, &reply[..30]),
            Gap(R, 2, 1418),
            Gap(R, 3, 1448),
            Gap(R, 4, (reply.len() - 30 - 1418 - 1448) as u64),
            D(Q, 6, &rpc_call(6, 100003, 3, 1, 20)[..30]),
            Gap(Q, 6, 70 - 30 + 4 + 48 - 48),
        ],
    );
    assert_eq!(ops(&out)[0], ("READ".into(), 4, Status::Ok));
}

#[test]
fn rpc_xid_seen_twice_and_reply_without_call_and_cut_end() {
    let out = run(
        Proto::Nfs,
        Carrier::Tcp,
        &[
            D(R, 0, &rpc_reply(99, 0, 8)), // capture started mid-stream
            D(Q, 1, &rpc_call(1, 100003, 3, 1, 8)),
            D(Q, 3, &rpc_call(1, 100003, 3, 1, 8)), // retransmitted call
            D(R, 4, &rpc_reply(1, 0, 8)),
            D(Q, 5, &rpc_call(2, 100003, 3, 6, 8)), // never answered
            D(R, 6, &rpc_reply(1, 0, 8)),           // duplicate reply
            Close(9),
        ],
    );
    assert_eq!(ops(&out), vec![("GETATTR".into(), 3, Status::Ok)]);
    assert_eq!(
        kinds(&out),
        vec![
            A::ResponseWithoutRequest,
            A::DuplicateRequest,
            A::ResponseWithoutRequest,
            A::NoResponse
        ]
    );
}

#[test]
fn rpc_udp_and_error_status_and_names() {
    let call = rpc_call(3, 100003, 3, 3, 16);
    let reply = rpc_reply(3, 2, 4); // accepted, nfsstat3 = NFS3ERR_NOENT
    let out = run(
        Proto::Nfs,
        Carrier::Udp,
        &[D(Q, 0, &call[4..]), D(R, 2, &reply[4..])],
    );
    assert_eq!(ops(&out), vec![("LOOKUP".into(), 2, Status::Error)]);
    assert_eq!(out.transactions[0].request_seq, None);
    assert_eq!(oncrpc::op_name(100005, 3, 1, None), "MOUNT MNT");
    assert_eq!(oncrpc::op_name(100003, 4, 1, Some(25)), "NFSv4 READ");
    assert_eq!(oncrpc::op_name(100003, 3, 99, None), "NFSv3 proc 99");
}

#[test]
fn nfsv4_compound_main_operation() {
    let mut m = Vec::new();
    for w in [77u32, 0, 2, 100003, 4, 1] {
        m.extend_from_slice(&w.to_be_bytes());
    }
    // cred AUTH_NONE, verf AUTH_NONE
    m.extend_from_slice(&[0; 16]);
    m.extend_from_slice(&0u32.to_be_bytes()); // tag length 0
    m.extend_from_slice(&1u32.to_be_bytes()); // minorversion
    m.extend_from_slice(&3u32.to_be_bytes()); // numops
    m.extend_from_slice(&53u32.to_be_bytes()); // SEQUENCE
    m.extend_from_slice(&[0; 32]);
    m.extend_from_slice(&22u32.to_be_bytes()); // PUTFH
    m.extend_from_slice(&5u32.to_be_bytes());
    m.extend_from_slice(&[1, 2, 3, 4, 5, 0, 0, 0]);
    m.extend_from_slice(&25u32.to_be_bytes()); // READ
    m.extend_from_slice(&[0; 24]);
    let call = record(m);
    let out = run(
        Proto::Nfs,
        Carrier::Tcp,
        &[D(Q, 0, &call), D(R, 1, &rpc_reply(77, 0, 8))],
    );
    assert_eq!(ops(&out), vec![("NFSv4 READ".into(), 1, Status::Ok)]);
}

#[test]
fn rpc_garbage_then_resync_at_a_segment_start() {
    let out = run(
        Proto::Nfs,
        Carrier::Tcp,
        &[
            D(Q, 0, b"\x00\x00\x00\x10this is not rpc at all, no"),
            D(Q, 1, b"more garbage"),
            D(Q, 2, &rpc_call(4, 100003, 3, 4, 8)),
            D(R, 3, &rpc_reply(4, 0, 8)),
        ],
    );
    assert_eq!(ops(&out), vec![("ACCESS".into(), 1, Status::Ok)]);
    assert_eq!(kinds(&out), vec![A::Unparseable]);
}

// ---------- PostgreSQL ----------

fn pg(t: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![t];
    v.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    v.extend_from_slice(body);
    v
}

#[test]
fn pgsql_startup_simple_extended_pipelined_error() {
    let mut startup = (8u32 + 10).to_be_bytes().to_vec();
    startup.extend_from_slice(&196_608u32.to_be_bytes());
    startup.extend_from_slice(b"user\0bob\0\0");
    let ready = pg(b'Z', b"I");
    let mut auth = pg(b'R', &[0, 0, 0, 0]);
    auth.extend(pg(b'S', b"a\0b\0"));
    auth.extend(ready.clone());
    let q = pg(b'Q', b"select * from t\0");
    let mut resp = pg(b'T', &[0, 0]);
    resp.extend(pg(b'D', &[0, 0]));
    resp.extend(pg(b'C', b"SELECT 1\0"));
    // extended: Parse/Bind/Execute/Sync twice (pipelined), the second an already prepared statement
    let mut ext = pg(b'P', b"s1\0insert into t values ($1)\0\0\0");
    ext.extend(pg(b'B', b"\0s1\0\0\0\0\0\0\0"));
    ext.extend(pg(b'E', b"\0\0\0\0\0"));
    ext.extend(pg(b'S', b""));
    ext.extend(pg(b'B', b"\0s1\0\0\0\0\0\0\0"));
    ext.extend(pg(b'E', b"\0\0\0\0\0"));
    ext.extend(pg(b'S', b""));
    let mut ext_resp = pg(b'1', b"");
    ext_resp.extend(pg(b'2', b""));
    ext_resp.extend(pg(b'C', b"INSERT 0 1\0"));
    ext_resp.extend(ready.clone());
    let mut ext_resp2 = pg(b'2', b"");
    ext_resp2.extend(pg(b'E', b"SERROR\0\0"));
    ext_resp2.extend(ready.clone());
    let out = run(
        Proto::Pgsql,
        Carrier::Tcp,
        &[
            D(Q, 0, &startup),
            D(R, 3, &auth),
            D(Q, 10, &q),
            D(R, 12, &resp[..7]),
            D(R, 13, &resp[7..]),
            D(R, 14, &ready),
            D(Q, 20, &ext),
            D(R, 21, &ext_resp),
            D(R, 25, &ext_resp2),
            Close(30),
        ],
    );
    assert_eq!(
        ops(&out),
        vec![
            ("STARTUP".into(), 3, Status::Ok),
            ("SELECT".into(), 4, Status::Ok),
            ("INSERT".into(), 1, Status::Ok),
            ("EXECUTE".into(), 5, Status::Error),
        ]
    );
    assert!(out.anomalies.is_empty(), "{:?}", out.anomalies);
}

/// Feeds `packets` (direction, time in ms, bytes) to a fresh matcher of `proto`, packet `cut` (if any) split
/// into segments at the offsets `at` (all at the packet's time), then closes.
fn run_split(proto: Proto, packets: &[(Dir, u64, Vec<u8>)], cut: Option<(usize, &[usize])>) -> Out {
    let mut evs = Vec::new();
    for (i, (d, t, b)) in packets.iter().enumerate() {
        match cut {
            Some((c, at)) if c == i => {
                let mut from = 0;
                for &k in at.iter().chain([b.len()].iter()) {
                    evs.push(D(*d, *t, &b[from..k]));
                    from = k;
                }
            }
            _ => evs.push(D(*d, *t, b)),
        }
    }
    evs.push(Close(1000));
    run(proto, Carrier::Tcp, &evs)
}

/// Every packet split in two at every byte offset, and cut into single bytes, gives the transactions and
/// anomalies of the unsplit packets (the whole-message fast paths agree with the byte-by-byte framing).
fn assert_split_anywhere_is_the_same(proto: Proto, packets: &[(Dir, u64, Vec<u8>)]) -> Out {
    let whole = run_split(proto, packets, None);
    for (i, (_, _, b)) in packets.iter().enumerate() {
        for k in 0..=b.len() {
            let split = run_split(proto, packets, Some((i, &[k])));
            assert_eq!(
                split.transactions, whole.transactions,
                "packet {i} split at {k}"
            );
            assert_eq!(split.anomalies, whole.anomalies, "packet {i} split at {k}");
        }
        let bytes: Vec<usize> = (1..b.len()).collect();
        let split = run_split(proto, packets, Some((i, &bytes)));
        assert_eq!(
            split.transactions, whole.transactions,
            "packet {i} in bytes"
        );
        assert_eq!(split.anomalies, whole.anomalies, "packet {i} in bytes");
    }
    whole
}

#[test]
fn pgsql_split_anywhere_gives_the_same_transactions() {
    let ready = pg(b'Z', b"I");
    let q = |sql: &str| pg(b'Q', format!("{sql}\0").as_bytes());
    let resp = |rows: usize| {
        let mut r = pg(
            b'T',
            &[
                0, 1, b'a', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            ],
        );
        for _ in 0..rows {
            r.extend(pg(b'D', &[0, 1, 0, 0, 0, 2, b'4', b'2']));
        }
        r.extend(pg(b'C', b"SELECT 1\0"));
        r.extend(ready.clone());
        r
    };
    let mut err = pg(b'E', b"SERROR\0C42601\0\0");
    err.extend(ready.clone());
    let mut notice_resp = pg(b'N', b"SNOTICE\0\0");
    notice_resp.extend(resp(2));
    let mut pipelined = q("SELECT abalance FROM pgbench_accounts WHERE aid = 1");
    pipelined.extend(q("  update x set a = 1"));
    pipelined.extend(q("BEGIN"));
    let mut three = resp(1);
    three.extend(pg(b'C', b"UPDATE 1\0"));
    three.extend(ready.clone());
    three.extend(pg(b'C', b"BEGIN\0"));
    three.extend(ready.clone());
    let mut ext = pg(b'P', b"s1\0select $1\0\0\0");
    ext.extend(pg(b'B', b"\0s1\0\0\0\0\0\0\0"));
    ext.extend(pg(b'E', b"\0\0\0\0\0"));
    ext.extend(pg(b'S', b""));
    let mut ext_resp = pg(b'1', b"");
    ext_resp.extend(pg(b'2', b""));
    ext_resp.extend(resp(1));
    // COPY FROM STDIN: CopyInResponse, CopyData, CopyDone, then CommandComplete.
    let copy_in = pg(b'G', &[0, 0, 0]);
    let mut copy_data = pg(b'd', b"1\t2\n");
    copy_data.extend(pg(b'c', b""));
    let mut copy_done = pg(b'C', b"COPY 1\0");
    copy_done.extend(ready.clone());
    let packets = vec![
        (
            Q,
            1,
            q("SELECT abalance FROM pgbench_accounts WHERE aid = 1"),
        ),
        (R, 2, resp(1)),
        (
            Q,
            3,
            q("SELECT abalance FROM pgbench_accounts WHERE aid = 2"),
        ),
        (R, 4, resp(3)),
        (Q, 5, q("selec x")),
        (R, 6, err),
        (Q, 7, q("/* c */ select 1")),
        (R, 8, notice_resp),
        (Q, 9, pipelined),
        (R, 10, three),
        (Q, 11, ext),
        (R, 12, ext_resp),
        (Q, 13, q("copy t from stdin")),
        (R, 14, copy_in),
        (Q, 15, copy_data),
        (R, 16, copy_done),
        (Q, 17, q("SELECT 1")),
        (R, 18, resp(0)),
    ];
    let out = assert_split_anywhere_is_the_same(Proto::Pgsql, &packets);
    assert_eq!(
        ops(&out)
            .into_iter()
            .map(|(op, _, st)| (op, st))
            .collect::<Vec<_>>(),
        [
            ("SELECT", Status::Ok),
            ("SELECT", Status::Ok),
            ("SELEC", Status::Error),
            ("SELECT", Status::Ok),
            ("SELECT", Status::Ok),
            ("UPDATE", Status::Ok),
            ("BEGIN", Status::Ok),
            ("SELECT", Status::Ok),
            ("COPY", Status::Ok),
            ("SELECT", Status::Ok),
        ]
        .map(|(op, st)| (op.to_string(), st))
    );
    assert!(out.anomalies.is_empty(), "{:?}", out.anomalies);
}

/// The TLS layer around a clear-text PostgreSQL connection hands its matcher over once a request was
/// answered (TLS can only be negotiated at the start), and the matcher goes on as if it had been alone.
#[test]
fn pgsql_tls_layer_hands_over_after_the_first_answer() {
    let ready = pg(b'Z', b"I");
    let q = pg(b'Q', b"select 1\0");
    let mut resp = pg(b'C', b"SELECT 1\0");
    resp.extend(ready);
    let mut alone = Proto::Pgsql.matcher(Carrier::Tcp);
    let mut m: Box<dyn ConnMatcher + Send> = Box::new(tls::Tls::wrap(
        Proto::Pgsql,
        Proto::Pgsql.matcher(Carrier::Tcp),
        None,
    ));
    let (mut a, mut b) = (Out::default(), Out::default());
    let mut handed = 0;
    for i in 0..4u32 {
        let seq = i * q.len() as u32;
        alone.on_data(Q, ms(10 * i as u64), seq, &q, &mut a);
        alone.on_data(R, ms(10 * i as u64 + 1), seq, &resp, &mut a);
        m.on_data(Q, ms(10 * i as u64), seq, &q, &mut b);
        assert!(m.take_plain().is_none(), "nothing answered yet");
        m.on_data(R, ms(10 * i as u64 + 1), seq, &resp, &mut b);
        if let Some(p) = m.take_plain() {
            m = p;
            handed += 1;
        }
    }
    alone.on_close(ms(100), &mut a);
    m.on_close(ms(100), &mut b);
    assert_eq!(handed, 1);
    assert!(m.tls().is_none());
    assert_eq!(a.transactions, b.transactions);
    assert_eq!(a.transactions.len(), 4);
    // Before any answer (an SSLRequest may still come), and on a TLS connection, nothing is handed over.
    let mut m = tls::Tls::wrap(Proto::Pgsql, Proto::Pgsql.matcher(Carrier::Tcp), None);
    m.on_data(Q, ms(1), 0, &q, &mut b);
    assert!(m.take_plain().is_none());
    assert!(tls::Tls::new(None).take_plain().is_none());
}

/// Request fingerprints around the TLS layer keep themselves and swap the layer inside them for the matcher it
/// hands over: the same transactions and content hashes as without the hand-over.
#[test]
fn fingerprint_keeps_itself_when_the_tls_layer_hands_over() {
    let q = pg(b'Q', b"select 1\0");
    let mut resp = pg(b'C', b"SELECT 1\0");
    resp.extend(pg(b'Z', b"I"));
    let make = || -> Box<dyn ConnMatcher + Send> {
        Box::new(Fingerprint::new(Box::new(tls::Tls::wrap(
            Proto::Pgsql,
            Proto::Pgsql.matcher(Carrier::Tcp),
            None,
        ))))
    };
    let (mut kept, mut handed) = (make(), make());
    let (mut a, mut b) = (Out::default(), Out::default());
    for i in 0..3u32 {
        let seq = i * q.len() as u32;
        for (d, t, bytes) in [(Q, 10 * i as u64, &q), (R, 10 * i as u64 + 1, &resp)] {
            kept.on_data(d, ms(t), seq, bytes, &mut a);
            handed.on_data(d, ms(t), seq, bytes, &mut b);
            assert!(handed.take_plain().is_none());
        }
    }
    kept.on_close(ms(100), &mut a);
    handed.on_close(ms(100), &mut b);
    assert_eq!(a.transactions.len(), 3);
    assert!(a.transactions.iter().all(|t| t.content.is_some()));
    assert_eq!(a.transactions, b.transactions);
}

#[test]
fn pgsql_garbage_on_the_port() {
    let out = run(
        Proto::Pgsql,
        Carrier::Tcp,
        &[
            D(Q, 0, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
            D(R, 1, b"HTTP/1.1 400 Bad Request\r\n\r\n"),
            Close(2),
        ],
    );
    assert!(out.transactions.is_empty());
    assert_eq!(kinds(&out), vec![A::Unparseable, A::Unparseable]);
}

// ---------- MySQL ----------

fn my(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    v.push(seq);
    v.extend_from_slice(payload);
    v
}

#[test]
fn mysql_login_query_result_set_error_and_quit() {
    let greeting = my(0, b"\x0a8.0.36\0\x01\0\0\0abcdefgh\0");
    let login = my(1, &[0x0d, 0xa6, 0x03, 0x00, 0, 0, 0, 1, 33, 0, 0, 0]); // no DEPRECATE_EOF
    let ok = |seq| my(seq, &[0, 0, 0, 2, 0, 0, 0]);
    let query = my(0, b"\x03select a, b from t");
    let mut rs = my(1, &[2]); // two columns
    rs.extend(my(2, b"\x03def\x01a"));
    rs.extend(my(3, b"\x03def\x01b"));
    rs.extend(my(4, &[0xfe, 0, 0, 2, 0])); // EOF
    rs.extend(my(5, b"\x011\x012"));
    rs.extend(my(6, &[0xfe, 0, 0, 2, 0])); // EOF
    let bad = my(0, b"\x03selec oops");
    let err = my(1, b"\xff\x28\x04#42000syntax");
    let out = run(
        Proto::Mysql,
        Carrier::Tcp,
        &[
            D(R, 0, &greeting),
            D(Q, 1, &login),
            D(R, 3, &ok(2)),
            D(Q, 10, &query),
            D(R, 11, &rs[..20]),
            D(R, 14, &rs[20..]),
            D(Q, 20, &bad),
            D(R, 22, &err),
            D(Q, 30, &my(0, &[0x0e])), // ping
            D(R, 31, &ok(1)),
            D(Q, 40, &my(0, &[0x01])), // quit: no answer expected
            Close(41),
        ],
    );
    assert_eq!(
        ops(&out),
        vec![
            ("CONNECT".into(), 2, Status::Ok),
            ("SELECT".into(), 4, Status::Ok),
            ("SELEC".into(), 2, Status::Error),
            ("PING".into(), 1, Status::Ok),
        ]
    );
    assert!(out.anomalies.is_empty(), "{:?}", out.anomalies);
}

#[test]
fn mysql_garbage_on_the_port() {
    let out = run(
        Proto::Mysql,
        Carrier::Tcp,
        &[
            D(Q, 0, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage"),
            Close(1),
        ],
    );
    assert!(out.transactions.is_empty());
    assert_eq!(kinds(&out), vec![A::Unparseable]);
}

// ---------- Redis ----------

#[test]
fn redis_pipelined_resp2_resp3_errors_inline() {
    let reqs = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$5\r\nHELLO\r\nPING\r\n";
    let replies: &[u8] = b"+OK\r\n$1\r\nv\r\n%1\r\n+server\r\n+redis\r\n";
    let out = run(
        Proto::Redis,
        Carrier::Tcp,
        &[
            D(Q, 0, &reqs[..10]),
            D(Q, 1, &reqs[10..]),
            D(R, 5, &replies[..7]),
            D(R, 6, &replies[7..]),
            D(R, 8, b"|1\r\n+ttl\r\n:3\r\n-ERR wrong\r\n"),
            D(Q, 10, b"*1\r\n$4\r\nPING\r\n"),
            D(R, 11, b">2\r\n+message\r\n+hi\r\n"), // a push is not a reply
            D(R, 12, b"+PONG\r\n"),
        ],
    );
    assert_eq!(
        ops(&out),
        vec![
            ("SET".into(), 4, Status::Ok),
            ("GET".into(), 5, Status::Ok),
            ("HELLO".into(), 5, Status::Ok),
            ("PING".into(), 7, Status::Error),
            ("PING".into(), 2, Status::Ok),
        ]
    );
    assert!(out.anomalies.is_empty(), "{:?}", out.anomalies);
}

#[test]
fn redis_split_anywhere_gives_the_same_transactions() {
    let set = b"*3\r\n$3\r\nSET\r\n$16\r\nkey:__rand_int__\r\n$3\r\nxxx\r\n".to_vec();
    let get = b"*2\r\n$3\r\nget\r\n$16\r\nkey:__rand_int__\r\n".to_vec();
    let lpush = b"*3\r\n$5\r\nLPUSH\r\n$6\r\nmylist\r\n$3\r\nxxx\r\n".to_vec();
    let mut pipelined = b"*2\r\n$4\r\nINCR\r\n$7\r\ncounter\r\n".repeat(3);
    // (no inline command: one split between its CR and LF is taken for garbage, fast path or not)
    pipelined.extend_from_slice(b"*1\r\n$10\r\nCLIENTLIST\r\n*1\r\n$4\r\nping\r\n*0\r\n*-1\r\n");
    let packets = vec![
        (Q, 1, set),
        (R, 2, b"+OK\r\n".to_vec()),
        (Q, 3, get.clone()),
        (R, 4, b"$3\r\nxxx\r\n".to_vec()),
        (Q, 5, get),
        (R, 6, b"$-1\r\n".to_vec()),
        (Q, 7, lpush),
        (R, 8, b":1\r\n".to_vec()),
        (Q, 9, pipelined),
        (
            R,
            10,
            b":1\r\n:2\r\n-ERR no\r\n*2\r\n$1\r\na\r\n*1\r\n:5\r\n+PONG\r\n_\r\n>1\r\n+x\r\n|1\r\n+a\r\n+b\r\n%1\r\n+k\r\n#t\r\n".to_vec(),
        ),
        (Q, 11, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n".to_vec()),
        (R, 12, b"!5\r\nERR x\r\n".to_vec()),
    ];
    let out = assert_split_anywhere_is_the_same(Proto::Redis, &packets);
    assert_eq!(
        ops(&out)
            .into_iter()
            .map(|(op, _, st)| (op, st))
            .collect::<Vec<_>>(),
        [
            ("SET", Status::Ok),
            ("GET", Status::Ok),
            ("GET", Status::Ok),
            ("LPUSH", Status::Ok),
            ("INCR", Status::Ok),
            ("INCR", Status::Ok),
            ("INCR", Status::Error),
            ("CLIENTLIST", Status::Ok),
            ("PING", Status::Ok),
            ("UNKNOWN", Status::Ok),
            ("UNKNOWN", Status::Ok),
            ("GET", Status::Error),
        ]
        .map(|(op, st)| (op.to_string(), st))
    );
    assert!(out.anomalies.is_empty(), "{:?}", out.anomalies);
}

#[test]
fn redis_big_bulk_reply_cut_by_snaplen_and_unrequested_reply() {
    let out = run(
        Proto::Redis,
        Carrier::Tcp,
        &[
            D(R, 0, b"+OK\r\n"), // started mid-stream
            D(Q, 1, b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n"),
            D(R, 2, b"$100000\r\nxxxxxxxx"),
            Gap(R, 3, 100_000 - 8 + 2),
            Close(4),
        ],
    );
    assert_eq!(ops(&out), vec![("GET".into(), 2, Status::Ok)]);
    assert_eq!(kinds(&out), vec![A::ResponseWithoutRequest]);
}

// ---------- DNS ----------

fn dns(id: u16, response: bool, rcode: u8, qtype: u16) -> Vec<u8> {
    let flags: u16 = if response {
        0x8180 | rcode as u16
    } else {
        0x0100
    };
    let mut v = Vec::new();
    for w in [id, flags, 1, response as u16, 0, 0] {
        v.extend_from_slice(&w.to_be_bytes());
    }
    v.extend_from_slice(b"\x07example\x03com\x00");
    v.extend_from_slice(&qtype.to_be_bytes());
    v.extend_from_slice(&1u16.to_be_bytes());
    if response {
        v.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 1, 2, 3, 4]);
    }
    v
}

#[test]
fn dns_udp_by_id_out_of_order_and_tcp_split() {
    let out = run(
        Proto::Dns,
        Carrier::Udp,
        &[
            D(Q, 0, &dns(1, false, 0, 1)),
            D(Q, 1, &dns(2, false, 0, 28)),
            D(R, 3, &dns(2, true, 0, 28)),
            D(R, 4, &dns(1, true, 3, 1)),
            D(R, 5, &dns(9, true, 0, 1)),
            Close(6),
        ],
    );
    assert_eq!(
        ops(&out),
        vec![
            ("AAAA".into(), 2, Status::Ok),
            ("A".into(), 4, Status::Error)
        ]
    );
    assert_eq!(kinds(&out), vec![A::ResponseWithoutRequest]);
    let mut q = (dns(5, false, 0, 15).len() as u16).to_be_bytes().to_vec();
    q.extend(dns(5, false, 0, 15));
    let mut r = (dns(5, true, 0, 15).len() as u16).to_be_bytes().to_vec();
    r.extend(dns(5, true, 0, 15));
    let out = run(
        Proto::Dns,
        Carrier::Tcp,
        &[
            D(Q, 0, &q[..1]),
            D(Q, 1, &q[1..]),
            D(R, 4, &r[..9]),
            D(R, 5, &r[9..]),
        ],
    );
    assert_eq!(ops(&out), vec![("MX".into(), 4, Status::Ok)]);
}

// ---------- HTTP ----------

#[test]
fn http_keepalive_pipelined_chunked_head_until_close() {
    let out = run(
        Proto::Http,
        Carrier::Tcp,
        &[
            D(
                Q,
                0,
                b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nHEAD /b HTTP/1.1\r\nHost: x\r\n\r\n",
            ),
            D(R, 2, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel"),
            D(R, 3, b"loHTTP/1.1 200 OK\r\nContent-Length: 999\r\n\r\n"), // HEAD: no body
            D(Q, 10, b"POST /c HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"),
            D(R, 11, b"HTTP/1.1 100 Continue\r\n\r\n"),
            D(
                R,
                12,
                b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nnope\r\n",
            ),
            D(R, 14, b"0\r\n\r\n"),
            D(Q, 20, b"GET /d HTTP/1.0\r\n\r\n"),
            D(R, 21, b"HTTP/1.0 200 OK\r\n\r\nsome"),
            D(R, 23, b"body"),
            Close(30),
        ],
    );
    assert_eq!(
        ops(&out),
        vec![
            ("GET".into(), 3, Status::Ok),
            ("HEAD".into(), 3, Status::Ok),
            ("POST".into(), 4, Status::Error),
            ("GET".into(), 3, Status::Ok),
        ]
    );
    assert!(out.anomalies.is_empty(), "{:?}", out.anomalies);
}

#[test]
fn http_snaplen_cut_head_and_capture_ending_mid_response() {
    let out = run(
        Proto::Http,
        Carrier::Tcp,
        &[
            D(Q, 0, b"GET /a-long-path HTTP/1.1\r\nHo"),
            Gap(Q, 0, 200),
            D(R, 4, b"HTTP/1.1 200 OK\r\nContent-Len"),
            Gap(R, 4, 1400),
            Gap(R, 5, 1400),
            D(Q, 10, b"GET /next HTTP/1.1\r\n\r\n"),
            D(
                R,
                12,
                b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial",
            ),
            Close(13),
        ],
    );
    assert_eq!(ops(&out), vec![("GET".into(), 4, Status::Ok)]);
    assert!(
        kinds(&out).contains(&A::IncompleteResponse),
        "{:?}",
        kinds(&out)
    );
}

// ---------- TNS and generic ----------

fn tns(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut v = ((8 + body.len()) as u16).to_be_bytes().to_vec();
    v.extend_from_slice(&[0, 0, kind, 0, 0, 0]);
    v.extend_from_slice(body);
    v
}

#[test]
fn tns_turns() {
    let mut connect = vec![1, 0x3a, 1, 0x2c];
    connect.resize(40, 0);
    let out = run(
        Proto::Tns,
        Carrier::Tcp,
        &[
            D(Q, 0, &tns(1, &connect)),
            D(R, 3, &tns(2, &[1, 0x2c, 0, 0])),
            D(Q, 10, &tns(6, &[0, 0, 3, 0x5e, 1, 2, 3])),
            D(R, 12, &tns(6, &[0, 0, 8, 1])),
            D(R, 15, &tns(6, &[0, 0, 4, 1])),
            D(Q, 20, &tns(6, &[0, 0, 3, 0x05, 0])),
            D(R, 21, &tns(6, &[0, 0, 6, 0])),
            Close(30),
        ],
    );
    assert_eq!(
        ops(&out),
        vec![
            ("CONNECT".into(), 3, Status::Ok),
            ("EXECUTE (OALL8)".into(), 5, Status::Ok),
            ("FETCH".into(), 1, Status::Ok),
        ]
    );
}

#[test]
fn generic_turns_to_first_byte() {
    let out = run(
        Proto::Generic,
        Carrier::Tcp,
        &[
            D(R, 0, b"220 banner"),
            D(Q, 1, b"HELO"),
            D(Q, 2, b" x\r\n"),
            D(R, 5, b"250 ok"),
            D(R, 9, b" more"),
            D(Q, 10, b"QUIT\r\n"),
            Close(11),
        ],
    );
    assert_eq!(ops(&out), vec![("turn".into(), 3, Status::Ok)]);
    assert_eq!(kinds(&out), vec![A::NoResponse]);
}

// ---------- random bytes ----------

#[test]
fn random_bytes_never_panic() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for proto in Proto::ALL {
        for carrier in [Carrier::Tcp, Carrier::Udp] {
            for _ in 0..200 {
                let mut m = proto.matcher(carrier);
                let mut out = Out::new(0);
                let mut seq = 0u32;
                for i in 0..30u64 {
                    let dir = if rnd() % 2 == 0 { Q } else { R };
                    let len = (rnd() % 64) as usize;
                    let mut b: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
                    if rnd() % 3 == 0 && !b.is_empty() {
                        // plausible starts make the parsers go deeper
                        let starts: [&[u8]; 6] = [
                            b"*2\r\n$",
                            b"\x80\x00\x00\x40",
                            b"Q\x00\x00",
                            b"HTTP/1.1 ",
                            b"GET ",
                            b"\x00\x00\x00\x00",
                        ];
                        let s = starts[(rnd() % 6) as usize];
                        let n = s.len().min(b.len());
                        b[..n].copy_from_slice(&s[..n]);
                    }
                    if rnd() % 5 == 0 {
                        m.on_gap(dir, ms(i), rnd() % 5000, &mut out);
                    } else {
                        m.on_data(dir, ms(i), seq, &b, &mut out);
                    }
                    seq = seq.wrapping_add(len as u32);
                }
                m.on_close(ms(99), &mut out);
                for t in &out.transactions {
                    assert!(t.response_end_ts >= t.request_ts || t.latency() == Duration::ZERO);
                }
            }
        }
    }
}

#[test]
fn fuzz_findings_stay_fixed() {
    // an empty line where a RESP type byte should be (found by the rpc_redis fuzz target)
    let crash: &[u8] = b"z\njz\nj\xdc\n\xbd\xbd\xbd\xbd\xbd\r\nz\nz";
    for proto in Proto::ALL {
        let _ = replay(proto, crash);
    }
    let out = run(
        Proto::Redis,
        Carrier::Tcp,
        &[
            D(R, 0, b"\r\n+OK\r\n"),
            D(Q, 1, b":99999999999999999999\r\n"),
        ],
    );
    assert!(out.transactions.is_empty());
}

#[test]
fn random_scripts_through_replay_never_panic() {
    let mut x: u64 = 0x1234_5678_9abc_def1;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    // bytes from a small alphabet of protocol punctuation make deep parses likely
    let alphabet = b"\r\n*$+-:_,#!=(%~>|0123456789 GETPOSHTP/1.QZ\x00\x80\x01\x02\x06\xff";
    for proto in Proto::ALL {
        for _ in 0..3000 {
            let n = (rnd() % 200) as usize;
            let script: Vec<u8> = (0..n)
                .map(|_| {
                    if rnd() % 4 == 0 {
                        rnd() as u8
                    } else {
                        alphabet[(rnd() as usize) % alphabet.len()]
                    }
                })
                .collect();
            let _ = replay(proto, &script);
        }
    }
}

// ---------- sockperf ----------

fn sp(seq: u64, flags: u16, len: usize) -> Vec<u8> {
    let mut m = seq.to_be_bytes().to_vec();
    m.extend_from_slice(&flags.to_be_bytes());
    m.extend_from_slice(&(len as u32).to_be_bytes());
    m.resize(len, 0x5a);
    m
}

#[test]
fn sockperf_pings_warmup_control_and_split_messages() {
    // hello (control), a warm-up message the server answers but that is no request, two pings, the second
    // split across segments and its answer too; a ping left unanswered at the end.
    let hello = sp(u64::MAX, 3, 40);
    let p1 = sp(1, 3, 64);
    let p2 = sp(2, 3, 64);
    let mut two = sp(7, 7, 64);
    two.extend(sp(3, 3, 64));
    let out = run(
        Proto::Sockperf,
        Carrier::Tcp,
        &[
            D(Q, 0, &hello),
            D(R, 2, &sp(u64::MAX, 0, 40)),
            D(Q, 3, &two),
            D(R, 4, &sp(7, 4, 64)),
            D(R, 5, &sp(3, 2, 64)),
            D(Q, 10, &p1),
            D(R, 13, &sp(1, 2, 64)),
            D(Q, 20, &p2[..10]),
            D(Q, 21, &p2[10..]),
            D(R, 25, &sp(2, 2, 64)[..30]),
            D(R, 29, &sp(2, 2, 64)[30..]),
            D(Q, 40, &sp(4, 3, 64)),
            Close(50),
        ],
    );
    let got: Vec<(String, u64)> = out
        .transactions
        .iter()
        .map(|t| (t.op.to_string(), t.first_byte().as_millis() as u64))
        .collect();
    assert_eq!(
        got,
        vec![
            ("control".into(), 2),
            ("ping".into(), 2),
            ("ping".into(), 3),
            ("ping".into(), 4),
        ]
    );
    let last = &out.transactions[3];
    assert_eq!(last.last_byte(), ms(8));
    assert_eq!(last.request_seq, Some(1000 + 40 + 128 + 64));
    assert_eq!(kinds(&out), vec![A::NoResponse]);
}

#[test]
fn sockperf_udp_by_sequence_number() {
    let out = run(
        Proto::Sockperf,
        Carrier::Udp,
        &[
            D(Q, 0, &sp(1, 3, 64)),
            D(Q, 1, &sp(2, 3, 64)),
            D(R, 5, &sp(2, 2, 64)),
            D(R, 6, &sp(9, 2, 64)),
            Close(9),
        ],
    );
    assert_eq!(ops(&out), vec![("ping".into(), 4, Status::Ok)]);
    assert_eq!(kinds(&out), vec![A::ResponseWithoutRequest, A::NoResponse]);
}

/// The content hash depends on the bytes of the request stream only, not on how they were segmented.
#[test]
fn fingerprint_is_the_same_whatever_the_segmentation() {
    let reqs: Vec<Vec<u8>> = (1..=5).map(|s| sp(s, 3, 40)).collect();
    let stream: Vec<u8> = reqs.concat();
    let hashes = |cuts: &[usize]| -> Vec<Option<u64>> {
        let mut m = Fingerprint::new(Proto::Sockperf.matcher(Carrier::Tcp));
        let mut out = Out::new(1);
        let mut sent = 0usize;
        let mut t = 0;
        for (k, r) in reqs.iter().enumerate() {
            let end = stream
                .len()
                .min(sent.max((k + 1) * 40) + cuts[k % cuts.len()]);
            if end > sent {
                m.on_data(Q, ms(t), 1000 + sent as u32, &stream[sent..end], &mut out);
                sent = end;
            }
            t += 1;
            let seqno = u64::from_be_bytes(r[..8].try_into().unwrap());
            m.on_data(R, ms(t), 9000 + k as u32 * 40, &sp(seqno, 2, 40), &mut out);
            t += 1;
        }
        m.on_close(ms(t), &mut out);
        assert_eq!(out.transactions.len(), 5);
        out.transactions.iter().map(|t| t.content).collect()
    };
    let a = hashes(&[0]);
    let b = hashes(&[7, 33, 0]);
    assert_eq!(a, b);
    assert!(a.iter().all(|h| h.is_some()));
    // Different requests, different hashes.
    let mut u = a.clone();
    u.dedup();
    assert_eq!(u.len(), 5);
    assert_eq!(a[0], Some(content_hash(&stream[..CONTENT_BYTES])));
    assert_eq!(a[4], Some(content_hash(&stream[160..])));
}
