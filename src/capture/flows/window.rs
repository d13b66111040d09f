//! Window and bytes in flight of one direction, and what held the sender back: the receiver's window, the
//! sender itself (full segments), or the application.

use super::Half;

impl Half {
    /// Takes the advertised window of this packet (`raw`, scaled by this side's option when `scaled`); a
    /// reset's window does not count towards the minimum and maximum. Returns the window in bytes.
    #[inline]
    pub(super) fn advertise(&mut self, raw: u16, scaled: bool, rst: bool) -> u64 {
        let h = self;
        let shift = if scaled {
            h.wscale_opt.unwrap_or(0).min(14)
        } else {
            0
        };
        let window = (raw as u64) << shift;
        h.window = window;
        if !rst {
            if h.has_win {
                h.window_min = h.window_min.min(window);
            } else {
                h.window_min = window;
            }
            h.window_max = h.window_max.max(window);
        }
        h.last_win = raw;
        h.has_win = true;
        window
    }

    /// Bytes in flight from this side after a segment of `plen` payload bytes (`syn_or_fin`: it carries a
    /// SYN or FIN), and, for a first-sent one when both windows are known, what held the side back.
    #[inline]
    pub(super) fn in_flight(
        &mut self,
        oh: &Half,
        plen: u32,
        syn_or_fin: bool,
        retransmission: bool,
        window_known: bool,
    ) -> Option<u64> {
        let h = self;
        // Bytes in flight from this side: highest sequence sent minus the receiver's last ACK, or minus the
        // first sequence sent while the receiver has not ACKed anything (as Wireshark).
        let mut in_flight = None;
        if plen > 0 {
            let low = if oh.acked { oh.last_ack } else { h.first_seq };
            // Wireshark leaves out the virtual byte of a SYN or FIN on the packet itself.
            let f = h.next_seq.wrapping_sub(low) as i32 - syn_or_fin as i32;
            if f > 0 {
                let f = f as u64;
                in_flight = Some(f);
                h.in_flight_max = h.in_flight_max.max(f);
                h.in_flight.record(f);
                // What held this side back: the receiver's window, or not. The window held it back when
                // in flight left less room than one more segment, and in flight is near the window: the
                // segment counted is at most a quarter of the window, so a window of one or two MSS
                // (loopback's 64 KiB MSS against a 64 KiB window) does not make every segment "limited".
                if plen > 0 && !retransmission && oh.has_win && window_known {
                    let mss = oh.mss_opt.map(u32::from).unwrap_or(h.max_payload).max(1) as u64;
                    let rwnd = oh.window;
                    if rwnd.saturating_sub(f) < mss.min(rwnd / 4) {
                        h.receiver_limited += 1;
                    } else if plen as u64 >= mss {
                        h.sender_limited += 1;
                    } else {
                        h.app_limited += 1;
                    }
                }
            }
        }
        in_flight
    }
}
