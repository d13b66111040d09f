//! Message formats spoken on the wire.
//!
//! [`sockperf`] is the sockperf 3.x message header with roundtrip's negotiated extensions; [`auth`] holds the
//! pre-shared key and the return-routability cookie they use. [`pg`], [`mysql`],
//! [`resp`] and [`tns`] are the database protocols `roundtrip db` speaks; [`scram`] is SCRAM-SHA-256.
#![forbid(unsafe_code)]

pub mod auth;
pub mod mysql;
pub mod pg;
pub mod resp;
pub mod scram;
pub mod sockperf;
pub mod tns;

/// Random and mutated bytes through every database parser: none may panic, whatever they are fed.
#[cfg(test)]
mod fuzz {
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            // xorshift64*
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn bytes(&mut self, max: usize) -> Vec<u8> {
            let n = (self.next() as usize) % (max + 1);
            (0..n).map(|_| self.next() as u8).collect()
        }
    }

    fn all_parsers(b: &[u8]) {
        let _ = super::pg::parse_backend(b);
        let _ = super::mysql::parse_packet(b);
        let _ = super::mysql::parse_handshake(b);
        let _ = super::mysql::parse_reply(b, true);
        let _ = super::mysql::parse_reply(b, false);
        let _ = super::mysql::row_value_bytes(b);
        let _ = super::mysql::more_results(b);
        let _ = super::resp::parse(b);
        if let Ok(Some((p, _))) = super::tns::parse_packet(b) {
            let _ = super::tns::parse_refuse(&p.body);
        }
        let _ = super::tns::parse_refuse(b);
        let mut c = super::scram::ScramClient::new("", "abc");
        let _ = c.client_final(b, "pw");
        let _ = c.verify_server_final(b);
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut r = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..20_000 {
            let b = r.bytes(96);
            all_parsers(&b);
        }
    }

    #[test]
    fn mutated_valid_messages_never_panic() {
        let seeds: Vec<Vec<u8>> = vec![
            vec![b'R', 0, 0, 0, 12, 0, 0, 0, 5, 1, 2, 3, 4],
            vec![
                b'D', 0, 0, 0, 13, 0, 2, 0, 0, 0, 3, b'a', b'b', b'c', 0xff, 0xff, 0xff, 0xff,
            ],
            b"E\0\0\0\x10SFATAL\0C28P01\0\0".to_vec(),
            b"*2\r\n$3\r\nabc\r\n%1\r\n+a\r\n:1\r\n".to_vec(),
            super::tns::refuse("(DESCRIPTION=(ERR=0)(VSNNUM=318767104))"),
            super::tns::connect(super::tns::PING_CONNECT_DATA),
            b"r=abcdef,s=QUJD,i=16".to_vec(),
            {
                let mut p = vec![10];
                p.extend_from_slice(b"8.0.36\0\x01\0\0\0abcdefgh\0\xff\xff\x2d\x02\0\xff\xdf\x15");
                p.extend_from_slice(&[0; 10]);
                p.extend_from_slice(b"ijklmnopqrst\0caching_sha2_password\0");
                p
            },
        ];
        let mut r = Rng(42);
        for seed in &seeds {
            all_parsers(seed);
            for _ in 0..5_000 {
                let mut m = seed.clone();
                for _ in 0..1 + r.next() % 4 {
                    let i = (r.next() as usize) % m.len();
                    match r.next() % 3 {
                        0 => m[i] = r.next() as u8,
                        1 => m.truncate(i),
                        _ => m.insert(i, r.next() as u8),
                    }
                    if m.is_empty() {
                        break;
                    }
                }
                all_parsers(&m);
            }
        }
    }
}
