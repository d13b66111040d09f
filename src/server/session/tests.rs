//! Unit tests of one client's protocol: framing however the bytes are split, answers, the key exchange, and
//! arbitrary bytes.

use super::*;

fn cx<'a>(psk: Option<&'a Psk>, jar: &'a CookieJar) -> Context<'a> {
    Context {
        psk,
        jar,
        peer: "192.0.2.7:5000".parse().unwrap(),
        now_s: 100,
        recv_ns: 1,
        allow_replay: true,
    }
}

fn ping(seq: u64, len: usize, flags: Flags) -> Vec<u8> {
    let mut m = vec![0xabu8; len];
    Header {
        seq,
        flags,
        len: len as u32,
    }
    .write(&mut m);
    m
}

const ASK: Flags = Flags(3);

fn feed_all(s: &mut Session, bytes: &[u8], cx: &Context<'_>) -> (Vec<u8>, Vec<Step>) {
    let mut data = bytes.to_vec();
    let mut answers = Vec::new();
    let mut steps = Vec::new();
    let mut off = 0;
    loop {
        let (used, step) = s.feed(&mut data[off..], cx, &mut answers);
        off += used;
        if step == Step::Continue {
            assert_eq!(off, data.len());
            break;
        }
        let stop = matches!(step, Step::Drop(_));
        steps.push(step);
        if stop {
            break;
        }
    }
    (answers, steps)
}

#[test]
fn large_streamed_payloads_are_read_header_by_header_and_discarded() {
    let jar = CookieJar::new();
    let cx = cx(None, &jar);
    let mut s = Session::new(false);
    assert_eq!(s.read_hint(), ReadHint::Any);
    let big = ping(1, 128 * 1024, Flags::CLIENT);
    let answer_me = ping(2, 64, ASK);
    // Header first, as the loop reads it after a large streamed message; the payload is discarded.
    for round in 0..3 {
        let (a, steps) = feed_all(&mut s, &big[..HEADER_LEN], &cx);
        assert!(a.is_empty() && steps.is_empty());
        assert_eq!(
            s.read_hint(),
            ReadHint::Discard(128 * 1024 - HEADER_LEN),
            "round {round}"
        );
        s.discarded(100_000);
        assert_eq!(
            s.read_hint(),
            ReadHint::Discard(128 * 1024 - HEADER_LEN - 100_000)
        );
        s.discarded(128 * 1024);
        assert_eq!(s.pending(), 0);
        assert_eq!(s.read_hint(), ReadHint::Header);
    }
    // A message that wants an answer is still answered whole, and reading goes back to whole buffers.
    let (a, _) = feed_all(&mut s, &answer_me[..HEADER_LEN], &cx);
    assert!(a.is_empty());
    assert_eq!(s.read_hint(), ReadHint::Any);
    let (a, _) = feed_all(&mut s, &answer_me[HEADER_LEN..], &cx);
    assert_eq!(a.len(), 64);
    assert_eq!(s.read_hint(), ReadHint::Any);
    // Small streamed messages are read in whole buffers, never discarded one by one.
    let (_, _) = feed_all(&mut s, &ping(3, 1000, Flags::CLIENT)[..500], &cx);
    assert_eq!(s.read_hint(), ReadHint::Any);
    assert_eq!(s.messages, 5);
}

#[test]
fn answers_every_message_however_the_bytes_are_split() {
    let jar = CookieJar::new();
    let cx = cx(None, &jar);
    let mut stream = Vec::new();
    for i in 1..=20u64 {
        stream.extend(ping(i, 14 + (i as usize * 37) % 300, ASK));
        // Streamed data in between, never answered.
        stream.extend(ping(1000 + i, 5000, Flags::CLIENT));
    }
    let (whole, _) = feed_all(&mut Session::new(false), &stream, &cx);
    for cut in [1usize, 2, 7, 13, 14, 15, 100, 4999, 65536] {
        let mut s = Session::new(false);
        let mut got = Vec::new();
        for chunk in stream.chunks(cut) {
            let (a, steps) = feed_all(&mut s, chunk, &cx);
            assert!(steps.is_empty());
            got.extend(a);
            // Never more kept than one message.
            assert!(s.kept() <= 5000 + 64, "kept {}", s.kept());
        }
        assert_eq!(got, whole, "cut {cut}");
        assert_eq!(s.pending(), 0);
        assert_eq!(s.messages, 40);
    }
    // Each answer is its request with CLIENT cleared.
    let first = ping(1, 14 + 37, ASK);
    assert_eq!(&whole[..8], &first[..8]);
    assert_eq!(&whole[8..10], &[0, 2]);
}

#[test]
fn an_announced_length_is_not_allocated() {
    let jar = CookieJar::new();
    let cx = cx(None, &jar);
    let mut s = Session::new(false);
    // Announces 256 KiB and sends 20 bytes: 20 bytes kept, not 256 KiB.
    let m = ping(1, MAX_MESSAGE_LEN, ASK);
    let (a, steps) = feed_all(&mut s, &m[..20], &cx);
    assert!(a.is_empty() && steps.is_empty());
    assert!(s.kept() < 1024, "kept {}", s.kept());
    assert_eq!(s.pending(), 20);
    // The rest completes it.
    let (a, _) = feed_all(&mut s, &m[20..], &cx);
    assert_eq!(a.len(), MAX_MESSAGE_LEN);
    assert_eq!(s.pending(), 0);
    // A streamed message announcing 256 KiB keeps nothing.
    let m = ping(2, MAX_MESSAGE_LEN, Flags::CLIENT);
    feed_all(&mut s, &m[..100], &cx);
    assert_eq!(s.pending(), MAX_MESSAGE_LEN - 100);
    assert_eq!(s.partial.capacity(), 0);
}

#[test]
fn bad_lengths_drop_the_client() {
    let jar = CookieJar::new();
    let cx = cx(None, &jar);
    for bad in [
        [0u8, 0, 0, 0, 0, 0, 0, 1, 0, 3, 0xff, 0xff, 0xff, 0xff],
        [0, 0, 0, 0, 0, 0, 0, 1, 0, 3, 0, 0, 0, 2],
    ] {
        for cut in [1, 14] {
            let mut s = Session::new(false);
            let mut last = Vec::new();
            for c in bad.chunks(cut) {
                last = feed_all(&mut s, c, &cx).1;
            }
            assert!(
                matches!(&last[..], [Step::Drop(r)] if r.kind == DropKind::Protocol),
                "{last:?}"
            );
        }
    }
}

#[test]
fn open_server_acks_the_hello_and_counts() {
    let jar = CookieJar::new();
    let cx = cx(None, &jar);
    let mut s = Session::new(false);
    let hello = Hello::request(Feature::ALL, [4; 16]).encode(ASK);
    let (a, _) = feed_all(&mut s, &hello, &cx);
    let ack = Hello::decode(&a).unwrap();
    assert_eq!(ack.kind, HelloKind::Ack);
    assert_eq!(ack.nonce, [4; 16]);
    // PSK is not granted by a server without a key.
    assert_eq!(ack.features, Feature::MEASURE.with(Feature::REPLAY));
    let mut stream = ping(1, 100, Flags::CLIENT);
    stream.extend(ping(2, 64, ASK));
    stream.extend(Control::CountsRequest.encode(ASK));
    let (a, _) = feed_all(&mut s, &stream, &cx);
    assert_eq!(
        Control::decode(&a[64..]),
        Some(Control::Counts {
            messages: 2,
            bytes: 164
        })
    );
    // A version 1 hello (32 bytes) gets a 32-byte ack.
    let mut v1 = hello[..32].to_vec();
    v1[13] = 32;
    let (a, _) = feed_all(&mut Session::new(false), &v1, &cx);
    assert_eq!(a.len(), 32);
    // Without --allow-replay, replay is not granted.
    let no_replay = Context {
        allow_replay: false,
        ..cx
    };
    let (a, _) = feed_all(&mut Session::new(false), &hello, &no_replay);
    assert!(
        !Hello::decode(&a)
            .unwrap()
            .features
            .contains(Feature::REPLAY)
    );
}

#[test]
fn keyed_server_answers_nothing_before_the_proof() {
    let jar = CookieJar::new();
    let key = Psk::from_bytes(b"a key of sixteen bytes or more").unwrap();
    let cx = cx(Some(&key), &jar);
    // A sockperf ping: dropped without a byte of answer.
    let (a, steps) = feed_all(&mut Session::new(true), &ping(1, 64, ASK), &cx);
    assert!(a.is_empty());
    assert!(matches!(&steps[..], [Step::Drop(r)] if r.kind == DropKind::KeyRequired));
    // A version 1 roundtrip hello cannot do the exchange: told so, and dropped.
    let mut v1 = Hello::request(Feature::MEASURE, [0; 16]).encode(ASK)[..32].to_vec();
    v1[13] = 32;
    let (a, steps) = feed_all(&mut Session::new(true), &v1, &cx);
    assert_eq!(
        Control::decode(&a),
        Some(Control::Refused {
            reason: Some(Refusal::KeyRequired)
        })
    );
    assert!(matches!(&steps[..], [Step::Drop(_)]));
    // A sockperf throughput stream: dropped.
    let (a, steps) = feed_all(&mut Session::new(true), &ping(1, 64, Flags::CLIENT), &cx);
    assert!(a.is_empty());
    assert!(matches!(&steps[..], [Step::Drop(_)]));
    // The exchange with the right key.
    let mut s = Session::new(true);
    let cn = [8; 16];
    let (a, steps) = feed_all(
        &mut s,
        &Hello::request(Feature::MEASURE.with(Feature::PSK), cn).encode(ASK),
        &cx,
    );
    assert!(steps.is_empty());
    let Some(Control::Challenge { nonce: sn }) = Control::decode(&a) else {
        panic!("expected a challenge, got {a:?}");
    };
    // A ping before the proof: dropped.
    let mut early = Session::new(true);
    feed_all(
        &mut early,
        &Hello::request(Feature::MEASURE, cn).encode(ASK),
        &cx,
    );
    let (_, steps) = feed_all(&mut early, &ping(1, 64, ASK), &cx);
    assert!(matches!(&steps[..], [Step::Drop(_)]));
    let auth = Control::Auth {
        server_nonce: sn,
        client_nonce: cn,
        features: Feature::MEASURE,
        proof: auth::client_proof(&key, &sn, &cn, Feature::MEASURE.0),
    };
    // The wrong key: refused.
    let wrong = Psk::from_bytes(b"another key, also long enough").unwrap();
    let mut w = Session::new(true);
    feed_all(
        &mut w,
        &Hello::request(Feature::MEASURE, cn).encode(ASK),
        &cx,
    );
    let bad = Control::Auth {
        server_nonce: sn,
        client_nonce: cn,
        features: Feature::MEASURE,
        proof: auth::client_proof(&wrong, &sn, &cn, Feature::MEASURE.0),
    };
    let (a, steps) = feed_all(&mut w, &bad.encode(ASK), &cx);
    assert_eq!(
        Control::decode(&a),
        Some(Control::Refused {
            reason: Some(Refusal::BadProof)
        })
    );
    assert!(matches!(&steps[..], [Step::Drop(r)] if r.kind == DropKind::BadProof));
    // The right key: the ack carries the server's proof, and pings are answered.
    let (a, steps) = feed_all(&mut s, &auth.encode(ASK), &cx);
    assert!(steps.is_empty());
    let ack = Hello::decode(&a).unwrap();
    assert!(ack.features.contains(Feature::PSK));
    assert!(auth::verify_server_proof(
        &key,
        &cn,
        &sn,
        ack.features.0,
        &ack.proof
    ));
    let (a, steps) = feed_all(&mut s, &ping(5, 64, ASK), &cx);
    assert!(steps.is_empty());
    assert_eq!(a.len(), 64);
}

#[test]
fn reverse_and_replay_requests_become_steps() {
    let jar = CookieJar::new();
    let cx = cx(None, &jar);
    let mut s = Session::new(false);
    feed_all(
        &mut s,
        &Hello::request(Feature::ALL, [0; 16]).encode(ASK),
        &cx,
    );
    let mut bytes = Control::ReverseRequest {
        size: 1000,
        duration: Duration::from_secs(1),
        cookie: None,
    }
    .encode(ASK);
    bytes.extend(ping(9, 64, ASK));
    let mut data = bytes.clone();
    let mut answers = Vec::new();
    let (used, step) = s.feed(&mut data, &cx, &mut answers);
    assert_eq!(used, 64, "stops right after the request");
    assert_eq!(
        step,
        Step::Reverse {
            size: 1000,
            duration: Duration::from_secs(1)
        }
    );
    let mut r = ping(3, 40, ASK.with(Flags::REPLAY));
    ReplayRequest {
        answer_len: 1 << 20,
        delay: Duration::from_millis(2),
    }
    .write(&mut r);
    let (_, steps) = feed_all(&mut s, &r, &cx);
    assert_eq!(
        steps,
        vec![Step::Replay {
            header: Header {
                seq: 3,
                flags: Flags(2).with(Flags::REPLAY),
                len: 1 << 20
            },
            delay: Duration::from_millis(2)
        }]
    );
    // Out of range: dropped.
    ReplayRequest {
        answer_len: sockperf::MAX_REPLAY_ANSWER + 1,
        delay: Duration::ZERO,
    }
    .write(&mut r);
    let (_, steps) = feed_all(&mut s, &r, &cx);
    assert!(matches!(&steps[..], [Step::Drop(d)] if d.kind == DropKind::Protocol));
}

#[test]
fn arbitrary_bytes_never_panic() {
    let jar = CookieJar::new();
    let key = Psk::from_bytes(b"a key of sixteen bytes or more").unwrap();
    let mut x: u64 = 7;
    for round in 0..3000 {
        let keyed = round % 2 == 0;
        let cx = cx(keyed.then_some(&key), &jar);
        let mut s = Session::new(keyed);
        let mut bytes = Hello::request(Feature::ALL, [1; 16]).encode(ASK).to_vec();
        for _ in 0..(round % 200) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            bytes.push(if x.is_multiple_of(5) { 0 } else { x as u8 });
        }
        // Mostly sane lengths.
        if bytes.len() > 94 {
            bytes[80 + 10..80 + 14].copy_from_slice(&((x % 300) as u32).to_be_bytes());
        }
        for chunk in bytes.chunks(1 + (round % 17)) {
            let (_, steps) = feed_all(&mut s, chunk, &cx);
            if steps.iter().any(|s| matches!(s, Step::Drop(_))) {
                break;
            }
        }
    }
}
