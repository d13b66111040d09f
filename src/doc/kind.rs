//! The `kind` of every document: which command wrote it. `roundtrip report` draws the kinds listed in
//! `report::charts::KINDS`; the others are read by scripts and `roundtrip model --from`.

/// `roundtrip ping`.
pub const PING: &str = "ping";
/// `roundtrip sweep`.
pub const SWEEP: &str = "sweep";
/// `roundtrip connect`.
pub const CONNECT: &str = "connect";
/// `roundtrip icmp`.
pub const ICMP: &str = "icmp";
/// `roundtrip load`.
pub const LOAD: &str = "load";
/// `roundtrip throughput`.
pub const THROUGHPUT: &str = "throughput";
/// `roundtrip compare`.
pub const COMPARE: &str = "compare";
/// `roundtrip db`.
pub const DB: &str = "db";
/// `roundtrip tcp`.
pub const TCP: &str = "tcp";
/// `roundtrip tcp --per-packet`.
pub const TCP_TRACE: &str = "tcp-trace";
/// `roundtrip capture stats`.
pub const CAPTURE_STATS: &str = "capture-stats";
/// `roundtrip capture flows`.
pub const CAPTURE_FLOWS: &str = "capture-flows";
/// `roundtrip capture timeline`.
pub const CAPTURE_TIMELINE: &str = "capture-timeline";
/// `roundtrip capture rpc`.
pub const CAPTURE_RPC: &str = "capture-rpc";
/// `roundtrip capture match`.
pub const CAPTURE_MATCH: &str = "capture-match";
/// `roundtrip capture whatif` (spelled with an underscore until the next `format_version`).
pub const CAPTURE_WHATIF: &str = "capture_whatif";
/// `roundtrip mesh`.
pub const MESH: &str = "mesh";
