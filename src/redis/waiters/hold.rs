//! The pause hold: whether, and for how long, a wake-up may serve.
//!
//! While writes are paused (`CLIENT PAUSE WRITE|ALL`, `FAILOVER`, `CLUSTER
//! FAILOVER`, `SHUTDOWN` with replicas) nobody is served: nothing may be
//! taken or propagated then; waiters still time out (a denial changes
//! nothing). A wake-up holds the event loop at most [`SLICE`]; a backlog
//! goes on at the next turn, in order.

use std::time::{Duration, Instant};

use super::super::ffi::writes_paused;

/// The longest a wake-up holds the event loop before it lets other clients
/// in (a backlog of due waiters is served over several turns).
pub const SLICE: Duration = Duration::from_millis(1);

/// Whether writes are paused: nobody may be served now.
pub fn paused() -> bool {
    writes_paused()
}

/// One call's share of the event loop, from when it began.
pub struct Hold {
    started: Instant,
}

impl Hold {
    /// A share that begins now.
    pub fn now() -> Self {
        Self {
            started: Instant::now(),
        }
    }

    /// Whether the share is used up.
    pub fn over(&self) -> bool {
        self.started.elapsed() >= SLICE
    }
}
