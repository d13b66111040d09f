//! Fuzzes every database parser of `roundtrip db` (PostgreSQL, MySQL/MariaDB and its RSA key, RESP, Oracle TNS, SCRAM) with
//! arbitrary bytes: none may panic, and framed lengths must stay within the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roundtrip::wire::{mysql, pg, resp, scram, tns};

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((_, used))) = pg::parse_backend(data) {
        assert!(used <= data.len());
    }
    if let Some((_, used)) = mysql::parse_packet(data) {
        assert!(used <= data.len());
    }
    let _ = mysql::parse_handshake(data);
    let _ = mysql::parse_reply(data, true);
    let _ = mysql::parse_reply(data, false);
    let _ = mysql::row_value_bytes(data);
    let _ = mysql::more_results(data);
    // The RSA public key a MySQL server sends in AuthMoreData (PEM text, any bytes from the network).
    let _ = mysql::ServerPublicKey::from_pem(data);
    if let Ok(Some((_, used))) = resp::parse(data) {
        assert!(used <= data.len());
    }
    if let Ok(Some((p, used))) = tns::parse_packet(data) {
        assert!(used <= data.len());
        let _ = tns::parse_refuse(&p.body);
    }
    let _ = tns::parse_refuse(data);
    let mut c = scram::ScramClient::new("", "n");
    let _ = c.client_final(data, "pw");
    let _ = c.verify_server_final(data);
});
