//! Unit tests of the capture file reader, and builders of pcap and pcapng bytes other modules' tests use.

use super::*;

/// A pcap file header.
pub fn pcap_header(big: bool, nano: bool, link: u32, snap: u32) -> Vec<u8> {
    let magic: u32 = if nano { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
    let mut v = Vec::new();
    let w32 = |v: &mut Vec<u8>, x: u32| {
        v.extend(if big {
            x.to_be_bytes()
        } else {
            x.to_le_bytes()
        })
    };
    let w16 = |v: &mut Vec<u8>, x: u16| {
        v.extend(if big {
            x.to_be_bytes()
        } else {
            x.to_le_bytes()
        })
    };
    w32(&mut v, magic);
    w16(&mut v, 2);
    w16(&mut v, 4);
    w32(&mut v, 0);
    w32(&mut v, 0);
    w32(&mut v, snap);
    w32(&mut v, link);
    v
}

/// One pcap record.
pub fn pcap_record(big: bool, sec: u32, frac: u32, data: &[u8], orig: u32) -> Vec<u8> {
    let mut v = Vec::new();
    for x in [sec, frac, data.len() as u32, orig] {
        v.extend(if big {
            x.to_be_bytes()
        } else {
            x.to_le_bytes()
        });
    }
    v.extend(data);
    v
}

fn w32(v: &mut Vec<u8>, big: bool, x: u32) {
    v.extend(if big {
        x.to_be_bytes()
    } else {
        x.to_le_bytes()
    });
}
fn w16(v: &mut Vec<u8>, big: bool, x: u16) {
    v.extend(if big {
        x.to_be_bytes()
    } else {
        x.to_le_bytes()
    });
}

fn block(big: bool, btype: u32, body: &[u8]) -> Vec<u8> {
    let mut body = body.to_vec();
    while !body.len().is_multiple_of(4) {
        body.push(0);
    }
    let len = body.len() as u32 + 12;
    let mut v = Vec::new();
    w32(&mut v, big, btype);
    w32(&mut v, big, len);
    v.extend(body);
    w32(&mut v, big, len);
    v
}

/// A pcapng section header block.
pub fn shb(big: bool) -> Vec<u8> {
    let mut b = Vec::new();
    w32(&mut b, big, PCAPNG_BOM);
    w16(&mut b, big, 1);
    w16(&mut b, big, 0);
    b.extend([0xff; 8]);
    block(big, PCAPNG_SHB, &b)
}

/// A pcapng interface description block with an optional if_tsresol.
pub fn idb(big: bool, link: u16, snap: u32, tsresol: Option<u8>) -> Vec<u8> {
    let mut b = Vec::new();
    w16(&mut b, big, link);
    w16(&mut b, big, 0);
    w32(&mut b, big, snap);
    if let Some(r) = tsresol {
        w16(&mut b, big, 9);
        w16(&mut b, big, 1);
        b.extend([r, 0, 0, 0]);
        w16(&mut b, big, 0);
        w16(&mut b, big, 0);
    }
    block(big, 1, &b)
}

/// A pcapng enhanced packet block.
pub fn epb(big: bool, iface: u32, ts: u64, data: &[u8], orig: u32) -> Vec<u8> {
    let mut b = Vec::new();
    w32(&mut b, big, iface);
    w32(&mut b, big, (ts >> 32) as u32);
    w32(&mut b, big, ts as u32);
    w32(&mut b, big, data.len() as u32);
    w32(&mut b, big, orig);
    b.extend(data);
    block(big, 6, &b)
}

type Got = (i64, u32, Vec<u8>, LinkType, u32);

fn read_all(bytes: Vec<u8>) -> (Vec<Got>, Option<ReadWarning>) {
    let mut r = CaptureReader::from_reader(Box::new(io::Cursor::new(bytes))).expect("a capture");
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push((p.ts_ns, p.orig_len, p.data.to_vec(), p.link, p.interface));
    }
    (out, r.warning().cloned())
}

#[test]
fn pcap_both_orders_and_resolutions() {
    for big in [false, true] {
        for nano in [false, true] {
            let mut f = pcap_header(big, nano, 1, 65535);
            let frac = if nano { 123_456_789 } else { 123_456 };
            f.extend(pcap_record(big, 1_700_000_000, frac, b"abcdef", 60));
            f.extend(pcap_record(big, 1_700_000_001, 0, b"xy", 2));
            let (p, w) = read_all(f);
            assert_eq!(w, None, "big={big} nano={nano}");
            assert_eq!(p.len(), 2);
            let want = 1_700_000_000_000_000_000 + if nano { 123_456_789 } else { 123_456_000 };
            assert_eq!(p[0].0, want);
            assert_eq!(p[0].1, 60);
            assert_eq!(p[0].2, b"abcdef");
            assert_eq!(p[0].3, LinkType::ETHERNET);
            assert_eq!(p[1].0, 1_700_000_001_000_000_000);
        }
    }
}

#[test]
fn pcap_truncated_record_warns_with_offset() {
    let mut f = pcap_header(false, false, 1, 65535);
    f.extend(pcap_record(false, 1, 0, b"abcdef", 6));
    let second = f.len();
    f.extend(pcap_record(false, 2, 0, b"0123456789", 10));
    f.truncate(f.len() - 3);
    let (p, w) = read_all(f);
    assert_eq!(p.len(), 1);
    let w = w.expect("a warning");
    assert_eq!(w.offset, second as u64);
    assert!(w.message.contains("truncated"), "{w}");
}

#[test]
fn pcap_corrupt_length_warns() {
    let mut f = pcap_header(true, false, 1, 65535);
    f.extend(pcap_record(true, 1, 0, b"abcdef", 6));
    let bad = f.len();
    f.extend(pcap_record(true, 1, 0, b"abcdef", 6));
    f[bad + 8..bad + 12].copy_from_slice(&0x7fff_ffffu32.to_be_bytes());
    let (p, w) = read_all(f);
    assert_eq!(p.len(), 1);
    assert_eq!(w.unwrap().offset, bad as u64);
}

#[test]
fn pcapng_sections_interfaces_and_tsresol() {
    let mut f = shb(false);
    f.extend(idb(false, 1, 65535, None)); // microseconds
    f.extend(idb(false, 276, 96, Some(9))); // nanoseconds, SLL2
    f.extend(epb(false, 0, 1_700_000_000_000_001, b"eth", 100));
    f.extend(epb(false, 1, 1_700_000_000_000_000_002, b"sll2", 200));
    // A second section in the other byte order, with a power-of-two resolution.
    f.extend(shb(true));
    f.extend(idb(true, 0, 65535, Some(0x80 | 10))); // 1/1024 s
    f.extend(epb(true, 0, 1024 * 3 + 512, b"null", 4));
    let (p, w) = read_all(f);
    assert_eq!(w, None);
    assert_eq!(p.len(), 3);
    assert_eq!(p[0].0, 1_700_000_000_000_001_000);
    assert_eq!(p[0].3, LinkType::ETHERNET);
    assert_eq!(p[1].0, 1_700_000_000_000_000_002);
    assert_eq!((p[1].3, p[1].4, p[1].1), (LinkType::LINUX_SLL2, 1, 200));
    assert_eq!(p[2].0, 3_500_000_000);
    assert_eq!(p[2].3, LinkType::NULL);
    assert_eq!(p[2].2, b"null");
}

#[test]
fn pcapng_unknown_interface_and_bad_trailer_warn() {
    let mut f = shb(false);
    f.extend(idb(false, 1, 0, None));
    let bad = f.len();
    f.extend(epb(false, 5, 1, b"x", 1));
    let (p, w) = read_all(f);
    assert!(p.is_empty());
    let w = w.unwrap();
    assert_eq!(w.offset, bad as u64);
    assert!(w.message.contains("interface 5"));

    let mut f = shb(false);
    f.extend(idb(false, 1, 0, None));
    f.extend(epb(false, 0, 1, b"ok", 2));
    let bad = f.len();
    let mut b = epb(false, 0, 1, b"x", 1);
    let n = b.len();
    b[n - 4] ^= 0x10;
    f.extend(b);
    let (p, w) = read_all(f);
    assert_eq!(p.len(), 1);
    assert_eq!(w.unwrap().offset, bad as u64);
}

#[test]
fn gzip_input_is_read() {
    use std::io::Write;
    let mut f = pcap_header(false, true, 101, 65535);
    for i in 0..1000u32 {
        f.extend(pcap_record(false, i, 5, &i.to_le_bytes(), 4));
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&f).unwrap();
    let z = gz.finish().unwrap();
    let mut r = CaptureReader::from_reader(Box::new(io::Cursor::new(z))).unwrap();
    assert!(r.is_gzip());
    assert_eq!(r.format(), Format::PcapNano);
    let mut n = 0u32;
    while let Some(p) = r.next_packet() {
        assert_eq!(p.data, n.to_le_bytes());
        assert_eq!(p.link, LinkType::RAW);
        n += 1;
    }
    assert_eq!(n, 1000);
    assert!(r.warning().is_none());
}

#[test]
fn not_a_capture_is_an_error() {
    let e =
        CaptureReader::from_reader(Box::new(io::Cursor::new(b"hello world".to_vec()))).unwrap_err();
    assert!(e.to_string().contains("68 65 6c 6c"), "{e}");
    let e = CaptureReader::from_reader(Box::new(io::Cursor::new(Vec::new()))).unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
}

#[test]
fn records_larger_than_the_buffer_are_read() {
    let mut f = pcap_header(false, false, 1, 0);
    let big = vec![7u8; BUF_SIZE + 1000];
    f.extend(pcap_record(false, 1, 0, b"a", 1));
    f.extend(pcap_record(false, 1, 1, &big, big.len() as u32));
    f.extend(pcap_record(false, 1, 2, b"b", 1));
    let (p, w) = read_all(f);
    assert_eq!(w, None);
    assert_eq!(p.len(), 3);
    assert_eq!(p[1].2.len(), big.len());
    assert_eq!(p[2].2, b"b");
}
