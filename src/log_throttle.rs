//! A log line that any client can provoke (a `RESTORE` of a corrupt value
//! is refused with one) must not be written once per provocation: a client
//! sending them in a loop would fill the server's disk. A [`LogThrottle`]
//! lets the first event's line through, then at most one line an interval,
//! and that line says how many events went unlogged since the last one, so
//! the log grows with time, not with the events, and still counts them all.
//!
//! Events are only counted when they happen: a burst of them ending within
//! an interval of a line is reported with the next event's line, whenever
//! that comes (nothing runs in the background to flush the count).

use std::time::{Duration, Instant};

/// What to do with one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Write this event's line. `unlogged` events came since the last line
    /// without one of their own, `since_last` ago (`None`: this is the first
    /// line).
    Log {
        unlogged: u64,
        since_last: Option<Duration>,
    },
    /// Write nothing: a line was written less than an interval ago. The
    /// event is counted in the next line.
    Count,
}

/// Lines of one kind of event, at most one an `interval`.
#[derive(Debug)]
pub struct LogThrottle {
    interval: Duration,
    last_line: Option<Instant>,
    unlogged: u64,
}

impl LogThrottle {
    pub const fn new(interval: Duration) -> Self {
        Self {
            interval,
            last_line: None,
            unlogged: 0,
        }
    }

    /// The interval between two lines, at least.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Notes an event at `now` (a monotonic clock) and says whether it gets
    /// a line.
    pub fn event(&mut self, now: Instant) -> Verdict {
        match self.last_line {
            Some(last) if now.saturating_duration_since(last) < self.interval => {
                self.unlogged = self.unlogged.saturating_add(1);
                Verdict::Count
            }
            last => {
                self.last_line = Some(now);
                Verdict::Log {
                    unlogged: std::mem::take(&mut self.unlogged),
                    since_last: last.map(|last| now.saturating_duration_since(last)),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN_S: Duration = Duration::from_secs(10);

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn the_first_event_is_logged() {
        let mut log = LogThrottle::new(TEN_S);
        let verdict = log.event(Instant::now());
        assert_eq!(
            verdict,
            Verdict::Log {
                unlogged: 0,
                since_last: None
            }
        );
    }

    #[test]
    fn events_within_an_interval_of_a_line_are_only_counted() {
        let start = Instant::now();
        let mut log = LogThrottle::new(TEN_S);
        log.event(start);
        for ms in [0, 1, 5_000, 9_999] {
            assert_eq!(log.event(at(start, ms)), Verdict::Count, "at {ms} ms");
        }
    }

    #[test]
    fn the_first_event_an_interval_after_a_line_is_logged_with_the_count_before_it() {
        let start = Instant::now();
        let mut log = LogThrottle::new(TEN_S);
        log.event(start);
        for ms in 1..=2460 {
            log.event(at(start, ms));
        }
        assert_eq!(
            log.event(at(start, 10_000)),
            Verdict::Log {
                unlogged: 2460,
                since_last: Some(TEN_S)
            }
        );
        // The count starts again from that line, and so does the interval.
        assert_eq!(log.event(at(start, 19_999)), Verdict::Count);
        assert_eq!(
            log.event(at(start, 20_000)),
            Verdict::Log {
                unlogged: 1,
                since_last: Some(TEN_S)
            }
        );
    }

    #[test]
    fn a_quiet_spell_longer_than_the_interval_logs_the_next_event_alone() {
        let start = Instant::now();
        let mut log = LogThrottle::new(TEN_S);
        log.event(start);
        assert_eq!(
            log.event(at(start, 3_600_000)),
            Verdict::Log {
                unlogged: 0,
                since_last: Some(Duration::from_secs(3600))
            }
        );
    }

    #[test]
    fn lines_grow_with_time_not_with_events() {
        let start = Instant::now();
        let mut log = LogThrottle::new(TEN_S);
        let mut lines = 0u64;
        let mut accounted = 0u64;
        // A minute of an event every millisecond.
        for ms in 0..60_000 {
            if let Verdict::Log { unlogged, .. } = log.event(at(start, ms)) {
                lines += 1;
                accounted += 1 + unlogged;
            }
        }
        assert_eq!(lines, 6);
        // Every event is counted in a line but those after the last one,
        // which wait for the next event.
        assert_eq!(accounted, 50_001);
    }

    #[test]
    fn a_clock_that_goes_back_only_delays_the_next_line() {
        let start = at(Instant::now(), 60_000);
        let mut log = LogThrottle::new(TEN_S);
        log.event(start);
        let earlier = start - Duration::from_secs(30);
        assert_eq!(log.event(earlier), Verdict::Count);
    }
}
