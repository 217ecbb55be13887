//! Rolling sums over event time, for per-tenant and per-principal budgets (per minute, hour,
//! day).
//!
//! A window of length `span` is cut into equal buckets. An amount lands in the bucket of its
//! event time, whatever order events arrive in; the window's total at time `now` is the sum of
//! the buckets whose start lies in `(now - span, now]` (bucket-aligned). So a total moves in
//! steps of one bucket: a day window with 96 buckets forgets spend in 15-minute steps.

use std::collections::VecDeque;
use std::time::Duration;

/// A rolling sum.
#[derive(Debug, Clone, PartialEq)]
pub struct RollingWindow {
    span_ns: i64,
    bucket_ns: i64,
    /// (bucket start, sum), ordered by start, no two with the same start.
    buckets: VecDeque<(i64, f64)>,
}

/// Why an amount did not count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Late {
    /// Its event time is older than the window as of the newest time seen.
    BeforeWindow,
}

impl RollingWindow {
    /// A window of `span` in `buckets` buckets (at least one; `span` at least `buckets` ns).
    pub fn new(span: Duration, buckets: u32) -> RollingWindow {
        let span_ns = i64::try_from(span.as_nanos()).unwrap_or(i64::MAX).max(1);
        let buckets = i64::from(buckets.max(1)).min(span_ns);
        RollingWindow {
            span_ns,
            bucket_ns: (span_ns / buckets).max(1),
            buckets: VecDeque::new(),
        }
    }

    /// The window's length, ns.
    pub fn span_ns(&self) -> i64 {
        self.span_ns
    }

    fn bucket_start(&self, t_ns: i64) -> i64 {
        t_ns.div_euclid(self.bucket_ns) * self.bucket_ns
    }

    /// The earliest bucket start still inside the window at `now_ns`.
    fn horizon(&self, now_ns: i64) -> i64 {
        self.bucket_start(now_ns).saturating_sub(self.span_ns) + self.bucket_ns
    }

    /// Adds `amount` at event time `t_ns`, as seen at `now_ns`. An event from the future (a
    /// skewed clock) counts at `now_ns`; one older than the window does not count at all.
    pub fn add(&mut self, t_ns: i64, amount: f64, now_ns: i64) -> Result<(), Late> {
        let t = t_ns.min(now_ns);
        let start = self.bucket_start(t);
        if start < self.horizon(now_ns) {
            return Err(Late::BeforeWindow);
        }
        match self.buckets.binary_search_by_key(&start, |(s, _)| *s) {
            Ok(i) => self.buckets[i].1 += amount,
            Err(i) => self.buckets.insert(i, (start, amount)),
        }
        Ok(())
    }

    /// The total at `now_ns`, forgetting buckets that left the window.
    pub fn total(&mut self, now_ns: i64) -> f64 {
        let horizon = self.horizon(now_ns);
        while self.buckets.front().is_some_and(|(s, _)| *s < horizon) {
            self.buckets.pop_front();
        }
        self.buckets
            .iter()
            .filter(|(s, _)| *s <= now_ns)
            .map(|(_, v)| v)
            .sum()
    }

    /// Buckets held (for state persistence and memory accounting).
    pub fn buckets(&self) -> impl Iterator<Item = (i64, f64)> + '_ {
        self.buckets.iter().copied()
    }

    /// Restores buckets saved by [`RollingWindow::buckets`] (a restart must not reset a
    /// tenant's daily spend).
    pub fn restore(&mut self, saved: impl IntoIterator<Item = (i64, f64)>) {
        for (start, amount) in saved {
            let start = self.bucket_start(start);
            match self.buckets.binary_search_by_key(&start, |(s, _)| *s) {
                Ok(i) => self.buckets[i].1 += amount,
                Err(i) => self.buckets.insert(i, (start, amount)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIN: i64 = 60_000_000_000;

    fn minute() -> RollingWindow {
        RollingWindow::new(Duration::from_secs(60), 60)
    }

    #[test]
    fn amounts_leave_the_window_one_bucket_at_a_time() {
        let mut w = minute();
        let t0 = 10 * MIN;
        w.add(t0, 5.0, t0).expect("in window");
        w.add(t0 + 30_000_000_000, 7.0, t0 + 30_000_000_000)
            .expect("in window");
        assert_eq!(w.total(t0 + 30_000_000_000), 12.0);
        // 59 s after t0 the first amount's bucket is still the window's oldest.
        assert_eq!(w.total(t0 + 59_000_000_000), 12.0);
        // At t0 + 60 s its bucket has left: the window is (t0, t0 + 60 s].
        assert_eq!(w.total(t0 + MIN), 7.0);
        assert_eq!(w.total(t0 + MIN + 30_000_000_000), 0.0);
        assert_eq!(w.buckets().count(), 0, "forgotten buckets are freed");
    }

    #[test]
    fn late_future_and_edge_events() {
        let mut w = minute();
        let now = 100 * MIN;
        // Exactly one window old: out.
        assert_eq!(w.add(now - MIN, 1.0, now), Err(Late::BeforeWindow));
        // One bucket younger: in.
        assert_eq!(w.add(now - MIN + 1_000_000_000, 2.0, now), Ok(()));
        // From a clock ahead of ours: counted now.
        assert_eq!(w.add(now + 3 * MIN, 4.0, now), Ok(()));
        assert_eq!(w.total(now), 6.0);
        assert_eq!(w.total(now + 1_000_000_000), 4.0);
    }

    #[test]
    fn saved_buckets_restore_the_total() {
        let mut w = RollingWindow::new(Duration::from_secs(86_400), 96);
        let now = 1_000 * MIN;
        for i in 0..50 {
            w.add(now - i * 10 * MIN, 1.5, now).expect("in window");
        }
        let total = w.total(now);
        let mut restored = RollingWindow::new(Duration::from_secs(86_400), 96);
        restored.restore(w.buckets().collect::<Vec<_>>());
        assert_eq!(restored.total(now), total);
        // Ages 0 to 490 minutes: all inside the day.
        assert_eq!(total, 75.0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever the arrival order, the total is the sum of the amounts whose bucket lies
        /// in the window at `now`.
        #[test]
        fn arrival_order_does_not_change_the_total(
            events in proptest::collection::vec((0i64..180, 1u32..100), 1..60),
            order in any::<u64>(),
            later in 0i64..120,
        ) {
            let base = 1_000 * MIN;
            let now = base + 120 * 1_000_000_000 + later * 1_000_000_000;
            let mut shuffled = events.clone();
            // A deterministic shuffle from the generated seed.
            let mut seed = order;
            for i in (1..shuffled.len()).rev() {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                shuffled.swap(i, (seed >> 33) as usize % (i + 1));
            }
            let mut w = minute();
            for (secs, amount) in &shuffled {
                let _ = w.add(base + secs * 1_000_000_000, f64::from(*amount), now);
            }
            let horizon = (now / 1_000_000_000 - 60 + 1) * 1_000_000_000;
            let expected: f64 = events
                .iter()
                .map(|(secs, a)| (base + secs * 1_000_000_000, f64::from(*a)))
                .map(|(t, a)| (t.min(now), a))
                .filter(|(t, _)| (t / 1_000_000_000) * 1_000_000_000 >= horizon)
                .map(|(_, a)| a)
                .sum();
            prop_assert_eq!(w.total(now), expected);
        }
    }
}
