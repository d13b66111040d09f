//! The headings of `roundtrip capture` summaries: what was read (a file or a live interface) and how much.

use crate::capture::CaptureInfo;
use crate::capture::live::LiveInfo;
use crate::units::fmt_bytes;

/// The heading of a capture's summary: the file, its format, link types, size and packets (or the live
/// heading).
pub fn capture_heading(info: &CaptureInfo) -> String {
    if let Some(l) = &info.source {
        return live_heading(info, l);
    }
    format!(
        "{}: {}{}, {} ({}), {} packets{}",
        info.file,
        info.format,
        if info.gzip { " (gzip)" } else { "" },
        if info.link_types.is_empty() {
            "no link type seen".to_string()
        } else {
            info.link_types.join("+")
        },
        fmt_bytes(info.file_bytes),
        info.packets_read,
        match (&info.filter, info.packets_filtered_out) {
            (Some(f), Some(n)) => format!(" ({n} left out by filter '{f}')"),
            _ => String::new(),
        }
    )
}

/// The heading of a live capture's summary.
pub fn live_heading(info: &CaptureInfo, l: &LiveInfo) -> String {
    // The link types seen (none before the first packet).
    let link = if info.link_types.is_empty() {
        String::new()
    } else {
        format!(", {}", info.link_types.join("+"))
    };
    format!(
        "{} (live{link}): {} packets captured ({} bytes), {} dropped by the kernel, {} cut by snaplen {}; stopped: {}",
        l.interface,
        info.packets_read,
        info.file_bytes,
        l.kernel_drops,
        l.packets_cut,
        l.snaplen,
        l.stop_reason
            .as_ref()
            .map_or("-".to_string(), |r| r.to_string())
    )
}
