//! Retrying a delivery to a system toolwatch does not control (alarm webhooks, export
//! endpoints): exponential backoff with jitter that honours the server's hint, and what an
//! HTTP answer or failure says, without quoting anything the server or URL holds.

use std::time::Duration;

/// Delays between attempts: from `initial`, doubling up to `max`; a server's hint replaces
/// the next delay (still capped at `max`); each wait gets up to a quarter more, so many
/// daemons do not retry in step.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    delay: Duration,
    max: Duration,
}

impl Backoff {
    /// Backoff starting at `initial`, never longer than `max`.
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            delay: initial,
            max,
        }
    }

    /// How long to wait before the next attempt; moves on to the next delay.
    pub fn next_wait(&mut self, hint: Option<Duration>) -> Duration {
        let wait = jitter(hint.unwrap_or(self.delay).min(self.max));
        self.delay = (self.delay * 2).min(self.max);
        wait
    }
}

fn jitter(d: Duration) -> Duration {
    let extra = rand::random::<f64>() * 0.25;
    d + d.mul_f64(extra)
}

/// A `Retry-After` header given in seconds (an HTTP date is not read).
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// What kind of failure a request had. The error's own text names the URL, which may hold
/// credentials, so only its kind is kept.
pub fn failure_kind(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "cannot connect"
    } else {
        "request failed"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_and_a_hint_replaces_one() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
        let within = |w: Duration, base: u64| {
            let base = Duration::from_millis(base);
            assert!(w >= base && w <= base + base / 4, "{w:?} for {base:?}");
        };
        within(b.next_wait(None), 100);
        within(b.next_wait(None), 200);
        within(b.next_wait(Some(Duration::from_secs(10))), 350);
        within(b.next_wait(None), 350);
    }

    #[test]
    fn retry_after_reads_seconds_only() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(reqwest::header::RETRY_AFTER, " 7 ".parse().expect("value"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert(
            reqwest::header::RETRY_AFTER,
            "Wed, 21 Oct 2026 07:28:00 GMT".parse().expect("value"),
        );
        assert_eq!(retry_after(&h), None);
    }
}
