//! Fuzzes the `roundtrip tcp` decoders: any bytes as a sock_diag netlink reply (messages, inet_diag_msg,
//! attributes, `struct tcp_info` of any length) and as a tcp_probe tracepoint record.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roundtrip::tcpwatch::{diag, info, trace::ProbeFormat};

const FORMAT: &str = "format:\n\tfield:__u8 saddr[28];\toffset:8;\tsize:28;\tsigned:0;\n\tfield:__u8 daddr[28];\toffset:36;\tsize:28;\tsigned:0;\n\tfield:__u16 sport;\toffset:64;\tsize:2;\tsigned:0;\n\tfield:__u16 dport;\toffset:66;\tsize:2;\tsigned:0;\n\tfield:__u16 family;\toffset:68;\tsize:2;\tsigned:0;\n\tfield:__u16 data_len;\toffset:76;\tsize:2;\tsigned:0;\n\tfield:__u32 snd_nxt;\toffset:80;\tsize:4;\tsigned:0;\n\tfield:__u32 snd_una;\toffset:84;\tsize:4;\tsigned:0;\n\tfield:__u32 snd_cwnd;\toffset:88;\tsize:4;\tsigned:0;\n\tfield:__u32 ssthresh;\toffset:92;\tsize:4;\tsigned:0;\n\tfield:__u32 snd_wnd;\toffset:96;\tsize:4;\tsigned:0;\n\tfield:__u32 srtt;\toffset:100;\tsize:4;\tsigned:0;\n\tfield:__u32 rcv_wnd;\toffset:104;\tsize:4;\tsigned:0;\n\tfield:__u64 sock_cookie;\toffset:112;\tsize:8;\tsigned:0;\n";

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = diag::parse(data) {
        for s in &p.sockets {
            let _ = s.state_name();
            if let Some(i) = &s.info {
                let _ = (i.in_flight_bytes(), i.cwnd_bytes());
            }
        }
    }
    let i = info::decode(data);
    assert_eq!(i.len, data.len());
    if let Ok(f) = ProbeFormat::parse(FORMAT)
        && let Some(e) = f.decode(0, data)
    {
        let _ = e.unacked();
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = ProbeFormat::parse(text);
    }
});
