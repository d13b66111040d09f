//! State the bridge's threads share with its control API ([`BridgeShared`]): the impairment in force,
//! the counters of each direction and their snapshot ([`BridgeCounters`]), and the stop flag.

use super::BridgeImpairment;
use crate::proxy::ControlToken;
use crate::proxy::control::{self, Change, Request, change_with, error_json, json_body};
use crate::proxy::impairment::ImpairmentError;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Counters of one direction.
#[derive(Debug, Default)]
pub(super) struct WayCounters {
    pub(super) frames_in: AtomicU64,
    pub(super) bytes_in: AtomicU64,
    pub(super) frames_out: AtomicU64,
    pub(super) bytes_out: AtomicU64,
    pub(super) lost: AtomicU64,
    pub(super) queue_full: AtomicU64,
    pub(super) duplicated: AtomicU64,
    pub(super) queued_frames: AtomicU64,
    pub(super) queued_bytes: AtomicU64,
    pub(super) late: AtomicU64,
    pub(super) max_late_ns: AtomicU64,
    pub(super) send_errors: AtomicU64,
}

/// A snapshot of one direction's counters (bytes are frame bytes: Ethernet header and payload).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WayDoc {
    /// Frames received.
    pub frames_in: u64,
    /// Bytes received.
    pub bytes_in: u64,
    /// Frames sent out of the other interface (duplicates included).
    pub frames_out: u64,
    /// Bytes sent.
    pub bytes_out: u64,
    /// Frames dropped by loss emulation (independent or Gilbert-Elliott).
    pub lost: u64,
    /// Frames dropped because the queue held `queue_limit_bytes` already.
    pub queue_full: u64,
    /// Frames sent twice.
    pub duplicated: u64,
    /// Frames waiting now.
    pub queued_frames: u64,
    /// Bytes waiting now.
    pub queued_bytes: u64,
    /// Frames released more than [`super::LATE_AFTER`] after their planned time.
    pub late: u64,
    /// The latest release so far, after its planned time, in nanoseconds.
    pub max_late_ns: u64,
    /// Frames the driver refused (or could not take).
    pub send_errors: u64,
}

/// The counters document (control API `GET /counters`, and `--json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BridgeCounters {
    /// Frames from the first interface to the second.
    pub a_to_b: WayDoc,
    /// Frames from the second interface to the first.
    pub b_to_a: WayDoc,
    /// Control API requests refused (token, or too many at once).
    pub control_refused: u64,
}

/// State shared by the bridge's threads and its control API.
#[derive(Debug)]
pub struct BridgeShared {
    imp: RwLock<Arc<BridgeImpairment>>,
    pub(super) ways: [WayCounters; 2],
    pub(super) stop: AtomicBool,
    ended: Mutex<Option<String>>,
    token: Option<ControlToken>,
    control_refused: AtomicU64,
}

impl BridgeShared {
    /// Fresh shared state: `imp` in force, every counter zero, not stopping.
    pub(super) fn new(imp: BridgeImpairment, token: Option<ControlToken>) -> Self {
        BridgeShared {
            imp: RwLock::new(Arc::new(imp)),
            ways: Default::default(),
            stop: AtomicBool::new(false),
            ended: Mutex::new(None),
            token,
            control_refused: AtomicU64::new(0),
        }
    }

    /// The impairment in force.
    pub fn impairment(&self) -> Arc<BridgeImpairment> {
        self.imp.read().expect("impairment lock").clone()
    }

    /// Replaces the impairment; frames already queued keep their release time, later frames follow the new
    /// settings (and still never overtake queued ones unless jitter may reorder).
    pub fn set_impairment(&self, i: BridgeImpairment) -> Result<Option<String>, ImpairmentError> {
        let note = i.validate()?;
        *self.imp.write().expect("impairment lock") = Arc::new(i);
        Ok(note)
    }

    /// A snapshot of the counters.
    pub fn counters(&self) -> BridgeCounters {
        let doc = |w: &WayCounters| {
            let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
            WayDoc {
                frames_in: l(&w.frames_in),
                bytes_in: l(&w.bytes_in),
                frames_out: l(&w.frames_out),
                bytes_out: l(&w.bytes_out),
                lost: l(&w.lost),
                queue_full: l(&w.queue_full),
                duplicated: l(&w.duplicated),
                queued_frames: l(&w.queued_frames),
                queued_bytes: l(&w.queued_bytes),
                late: l(&w.late),
                max_late_ns: l(&w.max_late_ns),
                send_errors: l(&w.send_errors),
            }
        };
        BridgeCounters {
            a_to_b: doc(&self.ways[0]),
            b_to_a: doc(&self.ways[1]),
            control_refused: self.control_refused.load(Ordering::Relaxed),
        }
    }

    /// Why the bridge ended by itself (an interface went away), once it did.
    pub fn ended(&self) -> Option<String> {
        self.ended.lock().expect("ended").clone()
    }

    pub(super) fn end(&self, why: String) {
        let mut e = self.ended.lock().expect("ended");
        if e.is_none() {
            *e = Some(why);
        }
        self.stop.store(true, Ordering::SeqCst);
    }

    pub(super) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

impl control::Api for BridgeShared {
    fn respond(&self, req: &Request) -> (u16, Vec<u8>) {
        if let Some(token) = &self.token {
            let presented = control::bearer_token(req.authorization.as_deref());
            if !presented.is_some_and(|p| token.matches(p.as_bytes())) {
                self.refused();
                return (
                    401,
                    error_json("this control api needs the header 'Authorization: Bearer <token>'"),
                );
            }
        }
        let ok = |v: Vec<u8>| (200, v);
        match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/impairment") => ok(json_body(&*self.impairment())),
            ("PUT", "/impairment") | ("PATCH", "/impairment") => {
                let how = if req.method == "PUT" {
                    Change::Replace
                } else {
                    Change::Merge
                };
                match change_with(
                    || self.impairment(),
                    |i: BridgeImpairment| {
                        self.set_impairment(i)
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    },
                    &req.body,
                    how,
                ) {
                    Ok(i) => ok(json_body(&*i)),
                    Err(e) => (400, error_json(&e)),
                }
            }
            ("GET", "/counters") => ok(json_body(&self.counters())),
            (_, "/impairment") | (_, "/counters") => {
                (405, error_json("use GET (or PUT / PATCH for /impairment)"))
            }
            _ => (
                404,
                error_json("unknown path: try /impairment or /counters"),
            ),
        }
    }

    fn stopping(&self) -> bool {
        BridgeShared::stopping(self)
    }

    fn refused(&self) {
        self.control_refused.fetch_add(1, Ordering::Relaxed);
    }
}
