//! Debouncing as a pure timing state machine: fed with `Instant`s, it reads no clock and
//! sleeps nowhere, so the watcher's plan tick (async, tokio) and the actor's applies and
//! state saves (a synchronous step function) share it and a table tests it.
//!
//! A burst of changes fires once: `quiet` after its last change, or `max` after its first
//! one, whichever comes first (a steady stream of changes still fires every `max`).

use std::time::{Duration, Instant};

/// Joins bursts of changes; see the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Debouncer {
    /// Fire this long after the last change of a burst...
    pub quiet: Duration,
    /// ...but no later than this long after its first change.
    pub max: Duration,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Default for Debouncer {
    /// 100 ms quiet, at most 1 s: the default of both binaries. The watcher publishes the
    /// whole state as one object, so the actor's 100 ms only joins what arrives together
    /// (shards, quick successions).
    fn default() -> Self {
        Debouncer::new(Duration::from_millis(100), Duration::from_secs(1))
    }
}

impl Debouncer {
    pub fn new(quiet: Duration, max: Duration) -> Self {
        Debouncer {
            quiet,
            max,
            first: None,
            last: None,
        }
    }

    /// A change at `now`: starts a burst, or extends the current one.
    pub fn changed(&mut self, now: Instant) {
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    /// True while a burst waits to fire.
    pub fn pending(&self) -> bool {
        self.first.is_some()
    }

    /// When the current burst fires if nothing else changes (`None`: no burst).
    pub fn due(&self) -> Option<Instant> {
        match (self.first, self.last) {
            (Some(f), Some(l)) => Some((l + self.quiet).min(f + self.max)),
            _ => None,
        }
    }

    /// True (and the burst is over) when the burst is due at `now`.
    pub fn fire(&mut self, now: Instant) -> bool {
        let due = self.due().is_some_and(|t| now >= t);
        if due {
            self.clear();
        }
        due
    }

    /// Forget the current burst (what it waited for was done another way).
    pub fn clear(&mut self) {
        self.first = None;
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One step of a table: a change, or a question whether the burst fires.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Step {
        Change(u64),
        Fires(u64),
        Waits(u64),
    }
    use Step::*;

    /// Runs `steps` (times in ms from a common start) on a 100 ms / 1 s debouncer and
    /// returns the first step whose answer differs, if any.
    fn run(steps: &[Step]) -> Option<(usize, Step)> {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut d = Debouncer::default();
        for (i, s) in steps.iter().enumerate() {
            let ok = match *s {
                Change(ms) => {
                    d.changed(at(ms));
                    true
                }
                Fires(ms) => d.fire(at(ms)),
                Waits(ms) => !d.fire(at(ms)),
            };
            if !ok {
                return Some((i, *s));
            }
        }
        None
    }

    #[test]
    fn a_burst_fires_once_after_quiet_or_max() {
        let cases: &[(&str, &[Step])] = &[
            ("nothing changed, nothing fires", &[Waits(0), Waits(5_000)]),
            (
                "one change fires after the quiet time, once",
                &[Change(0), Waits(99), Fires(100), Waits(101), Waits(5_000)],
            ),
            (
                "a change during the quiet time pushes it back",
                &[Change(0), Change(50), Waits(149), Fires(150)],
            ),
            (
                "a steady stream fires at max after its first change",
                &[
                    Change(0),
                    Change(90),
                    Change(180),
                    Change(270),
                    Change(360),
                    Change(450),
                    Change(540),
                    Change(630),
                    Change(720),
                    Change(810),
                    Change(900),
                    Waits(999),
                    Change(990),
                    Fires(1_000),
                ],
            ),
            (
                "after firing, the next change starts a new burst",
                &[Change(0), Fires(100), Change(200), Waits(250), Fires(300)],
            ),
            (
                "a late question fires a burst that was due long ago",
                &[Change(0), Change(10), Fires(60_000), Waits(60_001)],
            ),
        ];
        for (name, steps) in cases {
            assert_eq!(run(steps), None, "{name}: {steps:?}");
        }
    }

    #[test]
    fn due_is_the_earlier_of_quiet_after_the_last_and_max_after_the_first() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Debouncer::new(ms(200), ms(1_000));
        assert_eq!(d.due(), None);
        assert!(!d.pending());
        d.changed(t0);
        assert_eq!(d.due(), Some(t0 + ms(200)));
        d.changed(t0 + ms(150));
        assert_eq!(d.due(), Some(t0 + ms(350)));
        d.changed(t0 + ms(900));
        assert_eq!(d.due(), Some(t0 + ms(1_000)));
        assert!(d.pending());
        d.clear();
        assert!(!d.pending());
        assert_eq!(d.due(), None);
        assert!(!d.fire(t0 + ms(5_000)));
    }
}
