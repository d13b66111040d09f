use super::*;
use crate::capture::rpc::Carrier;

/// A pseudo-random sequence (xorshift), the same every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Live interval rows as comparable text.
fn text(rows: &LiveRows) -> String {
    serde_json::to_string(rows).unwrap()
}

/// Counting each request in its live interval's histogram only (the totals get the interval's buckets
/// when it ends) reports what counting it in both the totals and a separate [`LiveIntervals`] did: the
/// same rows at the same moments and the same totals, with responses whose first and last bytes differ
/// (past the point where the totals give the first byte buckets of their own), quiet intervals and ticks.
#[test]
fn live_rows_and_totals_equal_recording_twice() {
    let config = StatsConfig {
        top: 5,
        interval: Some(Duration::from_millis(700)),
        by_conn: true,
        live_interval: None,
    };
    let mut both = RpcStats::new(config);
    let mut old_rows = LiveIntervals::new(Duration::from_secs(1));
    let mut once = RpcStats::new(StatsConfig {
        live_interval: Some(Duration::from_secs(1)),
        ..config
    });
    let (mut got, mut want) = (String::new(), String::new());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let ops: [(Proto, &'static str); 3] = [
        (Proto::Pgsql, "SELECT"),
        (Proto::Pgsql, "INSERT"),
        (Proto::Redis, "GET"),
    ];
    let mut now = Duration::from_secs(1_700_000_000);
    for i in 0..20_000u64 {
        let r = rng.next();
        now += Duration::from_micros(r % 700);
        if i % 5000 == 4999 {
            now += Duration::from_secs(3); // quiet intervals
        }
        let (proto, op) = ops[(r >> 20) as usize % 3];
        let conn = ConnInfo {
            id: r % 4,
            client: "10.0.0.1:40000".parse().unwrap(),
            server: "10.0.0.2:5432".parse().unwrap(),
            proto,
            carrier: Carrier::Tcp,
        };
        let last = Duration::from_nanos(1 + (r >> 30) % 5_000_000);
        // SELECT's responses mostly span packets; the others' rarely.
        let differ = if op == "SELECT" {
            !r.is_multiple_of(3)
        } else {
            r.is_multiple_of(50)
        };
        let first = if differ { last / 3 } else { last };
        let t = Transaction {
            conn: conn.id,
            op: op.into(),
            request_ts: now.saturating_sub(last + Duration::from_micros(5)),
            request_end_ts: now.saturating_sub(last),
            response_ts: now.saturating_sub(last) + first,
            response_end_ts: now,
            request_seq: Some(i as u32),
            xid: None,
            content: None,
            bytes: None,
            error: None,
            status: if r.is_multiple_of(97) {
                Status::Error
            } else {
                Status::Ok
            },
        };
        both.add(&conn, &t);
        want += &text(&old_rows.close_before(t.response_end_ts));
        old_rows.add(&conn, &t);
        once.add(&conn, &t);
        got += &text(&once.take_live_rows());
        if i.is_multiple_of(777) {
            let tick = now + Duration::from_millis(r % 1500);
            want += &text(&old_rows.close_before(tick));
            got += &text(&once.live_close_before(tick));
        }
    }
    want += &text(&old_rows.close_all());
    got += &text(&once.live_close_all());
    assert_eq!(got, want);
    let (a, b) = (both.finish(), once.finish());
    assert_eq!(a.ops.iter().map(|o| o.last_byte.count).sum::<u64>(), 20_000);
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
}

/// `byte_times` gives `nanos` of the first and last byte times, on either side of the year 2514 and with
/// responses before their requests.
#[test]
fn byte_times_are_nanos_of_the_durations() {
    let at = [
        Duration::ZERO,
        Duration::new(1, 999_999_999),
        Duration::new(1_700_000_000, 5),
        Duration::new((1 << 34) - 1, 999_999_999),
        Duration::new(1 << 34, 0),
        Duration::new(18_446_744_073, 709_551_615),
        Duration::MAX,
    ];
    for &a in &at {
        for &b in &at {
            for &c in &at {
                let t = Transaction {
                    conn: 0,
                    op: "X".into(),
                    request_ts: a,
                    request_end_ts: a,
                    response_ts: b,
                    response_end_ts: c,
                    request_seq: None,
                    xid: None,
                    content: None,
                    bytes: None,
                    error: None,
                    status: Status::Ok,
                };
                assert_eq!(
                    byte_times(&t),
                    (nanos(t.first_byte()), nanos(t.last_byte())),
                    "{a:?} {b:?} {c:?}"
                );
            }
        }
    }
}

/// The slowest requests kept are the `top` slowest (the earliest first among equal times), whatever the
/// order they come in, and none when `top` is 0.
#[test]
fn slowest_are_the_top_slowest() {
    let conn = ConnInfo {
        id: 1,
        client: "10.0.0.1:40000".parse().unwrap(),
        server: "10.0.0.2:5432".parse().unwrap(),
        proto: Proto::Pgsql,
        carrier: crate::capture::rpc::Carrier::Tcp,
    };
    for top in [0usize, 1, 3, 10] {
        let mut stats = RpcStats::new(StatsConfig {
            top,
            ..StatsConfig::default()
        });
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut all = Vec::new();
        for i in 0..2000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let last = match i {
                7 | 8 => u64::MAX / 4,
                _ => x % 1000,
            };
            let req = Duration::from_secs(1_700_000_000) + Duration::from_millis(i);
            let t = Transaction {
                conn: 1,
                op: "SELECT".into(),
                request_ts: req,
                request_end_ts: req,
                response_ts: req + Duration::from_nanos(last),
                response_end_ts: req + Duration::from_nanos(last),
                request_seq: Some(i as u32),
                xid: None,
                content: None,
                bytes: None,
                error: None,
                status: Status::Ok,
            };
            all.push((last, Reverse(i)));
            stats.add(&conn, &t);
        }
        all.sort_unstable_by(|a, b| b.cmp(a));
        let want: Vec<(u64, Option<u32>)> = all
            .iter()
            .take(top)
            .map(|&(l, Reverse(i))| (l, Some(i as u32)))
            .collect();
        let got: Vec<(u64, Option<u32>)> = stats
            .finish()
            .slowest
            .iter()
            .map(|s| (s.last_byte_ns, s.request_seq))
            .collect();
        assert_eq!(got, want, "top {top}");
    }
}

#[test]
fn nanos_is_as_nanos_saturated() {
    for d in [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::new(1, 999_999_999),
        Duration::new(18_446_744_073, 709_551_615),
        Duration::new(18_446_744_073, 709_551_616),
        Duration::new(18_446_744_074, 0),
        Duration::MAX,
    ] {
        assert_eq!(
            nanos(d),
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
            "{d:?}"
        );
    }
}
