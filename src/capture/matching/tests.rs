use super::*;
use crate::capture::rpc::Carrier;
use crate::capture::rpc::Status;

fn rec(conn: u64, op: &'static str, req_ms: u64, lat_ms: u64, seq: u32, content: u64) -> Record {
    let ms = Duration::from_millis;
    (
        ConnInfo {
            id: conn,
            client: "10.0.0.1:40000".parse().unwrap(),
            server: "10.0.0.2:5432".parse().unwrap(),
            proto: Proto::Pgsql,
            carrier: Carrier::Tcp,
        },
        Transaction {
            conn,
            op: op.into(),
            request_ts: ms(req_ms),
            request_end_ts: ms(req_ms),
            response_ts: ms(req_ms + lat_ms),
            response_end_ts: ms(req_ms + lat_ms),
            request_seq: Some(seq),
            xid: None,
            content: Some(content),
            bytes: None,
            error: None,
            status: Status::Ok,
        },
    )
}

/// A benchmark through a proxy: the same request on 5 connections started together, each connection
/// with its own pace; every request is paired with its own connection's, not a neighbour's.
#[test]
fn identical_traffic_on_many_connections() {
    let mut client = Vec::new();
    let mut server = Vec::new();
    for c in 0..5u64 {
        let step = 30 + c * 7;
        for k in 0..40u64 {
            let t = 1000 + c + k * step;
            client.push(rec(c, "SET", t, 4 + c, k as u32, 42));
            server.push(rec(20 - c, "SET", t + 1, 2 + c, 5000 + k as u32, 42));
        }
    }
    let (r, _) = match_captures(&client, &server);
    assert_eq!(r.matched, 200);
    assert!(r.pairs.iter().all(|p| p.server_conn == 20 - p.client_conn));
    assert!(
        r.pairs
            .iter()
            .all(|p| p.client_last_byte_ns - p.server_last_byte_ns == 2_000_000)
    );
}

/// Through a proxy: other sequence numbers, a server clock 1 s ahead, 10 ms each way between the capture
/// points; one request whose bytes the box rewrote is paired by order.
#[test]
fn content_then_order_through_a_box() {
    let mut client = Vec::new();
    let mut server = Vec::new();
    for k in 0..20u64 {
        let t = 1000 + k * 100;
        let content = if k == 7 { 999 } else { k };
        client.push(rec(3, "SELECT", t, 25, 100 + k as u32 * 50, content));
        let sc = if k == 7 { 555 } else { k };
        server.push(rec(
            8,
            "SELECT",
            t + 1000 + 10,
            5,
            90_000 + k as u32 * 50,
            sc,
        ));
    }
    // a request of another connection only the server capture holds
    server.push(rec(9, "INSERT", 1500, 1, 7, 12345));
    let (r, v) = match_captures(&client, &server);
    assert_eq!(r.matched, 20);
    assert_eq!(r.paired_by.content, 19);
    assert_eq!(r.paired_by.order, 1);
    assert_eq!(r.paired_by.tcp_seq + r.paired_by.xid, 0);
    assert_eq!(r.pairs[7].method, Method::Order);
    assert_eq!(r.clock_offset_ns, Some(1_000_000_000));
    let sel = r.ops.iter().find(|o| o.op == "SELECT").unwrap();
    assert!((sel.diff_mean_ns - 20e6).abs() < 1.0);
    let Verdict::Matched {
        op,
        op_matched,
        path: PathTime::Adds { ns },
        clock_offset_ns,
        through_box,
        ..
    } = &v
    else {
        panic!("{v:?}")
    };
    assert_eq!((op.as_str(), *op_matched), ("SELECT", 20));
    assert!((ns - 20e6).abs() < 1.0, "{v:?}");
    assert_eq!(*clock_offset_ns, Some(1_000_000_000));
    assert_eq!(
        *through_box,
        Some(ThroughBox {
            by_content_or_order: 20,
            matched: 20
        })
    );
    assert_eq!(
        r.unmatched
            .iter()
            .map(|u| (u.reason, u.count))
            .collect::<Vec<_>>(),
        vec![(Unmatched::NotInClientCapture, 1)]
    );
}

/// The files given the wrong way round (the "client" capture saw shorter times): the verdict says what the
/// figures show, never that the path "adds" a clamped 0.
#[test]
fn a_negative_path_time_is_not_said_as_adding_zero() {
    let mut client = Vec::new();
    let mut server = Vec::new();
    for k in 0..20u64 {
        let t = 1000 + k * 100;
        client.push(rec(3, "SELECT", t, 10, 100 + k as u32 * 50, k));
        server.push(rec(3, "SELECT", t, 11, 100 + k as u32 * 50, k));
    }
    let (r, v) = match_captures(&client, &server);
    let sel = r.ops.iter().find(|o| o.op == "SELECT").unwrap();
    assert!(sel.diff_mean_ns < 0.0, "{v:?}");
    let Verdict::Matched {
        path: PathTime::ClientSawLess { ns },
        through_box: None,
        ..
    } = v
    else {
        panic!("{v:?}")
    };
    assert!((ns - 1e6).abs() < 1.0, "{v:?}");
}

/// One capture empty: nothing to compare, whatever the other holds.
#[test]
fn an_empty_capture_is_nothing_to_compare() {
    let client = vec![rec(3, "SELECT", 1000, 10, 100, 1)];
    let (r, v) = match_captures(&client, &[]);
    assert!(r.unrelated);
    assert_eq!(
        v,
        Verdict::NothingToCompare {
            client_requests: 1,
            server_requests: 0
        }
    );
}
