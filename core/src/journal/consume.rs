//! The loop every journal consumer runs: read durable records from its checkpoint on, hand
//! them to the stage, and move the checkpoint to what the stage says is durable on its side.
//!
//! A consumer stops once `stop.drained` is cancelled (nothing more will be appended that it
//! must wait for) and it has read every durable record (a clean shutdown), or as soon as
//! `stop.give_up` is cancelled (the shutdown deadline passed): then what it has not read stays
//! in the journal for the next start.
//!
//! Between the journal and the stage sit the consumer's [`HeldItems`]: items whose trace has
//! not named its tenant yet wait there (see [`crate::tenancy`]), and the checkpoint never
//! passes one of them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::codec::{self, JournalEntry};
use super::head::JournalHead;
use super::tail::{Record, Tail};
use crate::memory::{Holder, MemoryBudget, DECODED_PER_PAYLOAD};
use crate::tenancy::{Bound, HeldItems};

/// How often a consumer's `tick` runs when records keep coming, and how long it waits for one.
pub const TICK: Duration = Duration::from_millis(250);

/// Records read per call.
const READ_RECORDS: usize = 256;
/// Bytes read per call, about.
const READ_BYTES: usize = 16 << 20;

/// While commits come less than this apart, a consumer that has caught up reads this far
/// apart (several commits at one wake-up) rather than waking at every commit: at a thousand
/// small exports a second each commit woke every consumer, and the wake-ups cost more than
/// the records. A reader's flush does not wait for it.
pub const LINGER: Duration = Duration::from_millis(5);

/// When the last reads that found records returned, and how many the last one found.
#[derive(Debug, Default)]
struct RecentReads {
    last: Option<(Instant, usize)>,
    gap: Option<Duration>,
}

impl RecentReads {
    fn found(&mut self, now: Instant, records: usize) {
        if records == 0 {
            self.gap = None;
            return;
        }
        self.gap = self.last.map(|(at, _)| now.duration_since(at));
        self.last = Some((now, records));
    }

    /// How long to wait before the next read: records have been coming less than
    /// [`LINGER`] apart (two or more at the last read, or a short gap before it) and the
    /// consumer has read all there is.
    fn linger(&self, now: Instant) -> Option<Duration> {
        let (at, n) = self.last?;
        let frequent = n >= 2 || self.gap.is_some_and(|g| g < LINGER);
        let since = now.duration_since(at);
        (frequent && since < LINGER).then(|| LINGER - since)
    }
}

/// A stage that reads the journal.
pub trait Consumer {
    /// What the stage reports when it stops.
    type Totals;
    /// Takes journal record `seq` (shared: a stage may hand it on to threads of its own).
    fn record(&mut self, seq: u64, entry: &Arc<JournalEntry>);
    /// Periodic work. `next_seq` is the first record not yet handed over; returns the first
    /// record not yet durable on the stage's side (its checkpoint).
    fn tick(&mut self, next_seq: u64, head: &JournalHead) -> u64;
    /// How soon a reader's flush waiting for this stage's archive writer may go (zero: now),
    /// if one waits.
    fn flush_due_in(&self) -> Option<Duration> {
        None
    }
    /// How soon `tick` has work, if sooner than [`TICK`]: an idle consumer's wait for records
    /// ends then. A waiting flush by default; a stage with deadlines of its own adds them.
    fn tick_due_in(&self) -> Option<Duration> {
        self.flush_due_in()
    }
    /// Stops: makes everything taken durable where it can; returns its checkpoint and totals.
    fn finish(self, next_seq: u64) -> (u64, Self::Totals);
}

/// Records decoded lately, shared by the consumers: they read the same region of the journal
/// at about the same time, and decoding a record (every string allocated) is most of what a
/// consumer costs. The journal writer [`DecodedRecords::publish`]es each batch the intake
/// handed it as the intake had it in memory (decoding the payload would give the same batch),
/// so while the consumers keep up none of them decodes at all; a record not published, or
/// gone from here, is decoded by the first consumer to reach it and the others take it from
/// here.
///
/// Bounds: at most `capacity` records decoded by consumers and [`PUBLISHED_MAX_RECORDS`]
/// published records of at most [`PUBLISHED_MAX_BYTES`] of payload in all, and no record is
/// published while what is held is at the journal's allowance of the memory budget (see
/// [`crate::memory`], where what is held is counted); a record every
/// paced consumer has passed is dropped at once. When the published records are at their
/// bound (the consumers are far behind the intake) the writer publishes nothing more until
/// they catch up, so what is held is what the consumers will read next.
///
/// Sharing consumer-decoded records only works while the consumers stay within `capacity`
/// records of each other. Under a load that keeps the CPU busy, the fastest would run ahead,
/// the others would decode for themselves and fall further behind, so consumers that
/// [`DecodedRecords::join`] are paced: one more than half the window ahead of the slowest
/// other waits for it, at most [`PACE_MAX_WAIT`] a record (so a consumer that stalls slows
/// the others to some 50 records a second, never stops them), and only while the gap is one
/// the wait can close (under [`PACE_MAX_GAP`] windows; after a restart consumers can start
/// far apart).
pub struct DecodedRecords {
    recent: Mutex<Recent>,
    capacity: usize,
    /// The next record of each paced consumer (`u64::MAX` before its first and once it
    /// stopped).
    lanes: Mutex<Vec<Arc<AtomicU64>>>,
    /// Where the decoded records' memory is counted and bounded.
    memory: Arc<MemoryBudget>,
}

/// Published records held at most (about 1 MiB each decoded at 400 spans a batch).
pub const PUBLISHED_MAX_RECORDS: usize = 128;
/// Payload bytes of the published records held, at most.
pub const PUBLISHED_MAX_BYTES: usize = 64 << 20;

/// The records held, by sequence number.
#[derive(Default)]
struct Recent {
    entries: BTreeMap<u64, Held>,
    /// How many of `entries` were published, and their payload bytes.
    published: usize,
    published_bytes: usize,
    /// Memory of all `entries`, estimated from their payloads.
    memory_bytes: usize,
}

struct Held {
    entry: Arc<JournalEntry>,
    /// Payload bytes when published by the intake; `None` when decoded by a consumer.
    published_bytes: Option<usize>,
    /// The record's memory, estimated from its payload.
    memory_bytes: usize,
}

impl Recent {
    fn insert(&mut self, seq: u64, held: Held) {
        self.memory_bytes += held.memory_bytes;
        if let Some(bytes) = held.published_bytes {
            self.published += 1;
            self.published_bytes += bytes;
        }
        self.entries.insert(seq, held);
    }

    fn remove(&mut self, seq: u64) {
        if let Some(held) = self.entries.remove(&seq) {
            self.memory_bytes -= held.memory_bytes;
            if let Some(bytes) = held.published_bytes {
                self.published -= 1;
                self.published_bytes -= bytes;
            }
        }
    }

    /// Drops the records before `seq` (every paced consumer passed them).
    fn drop_before(&mut self, seq: u64) {
        while let Some((&first, _)) = self.entries.first_key_value() {
            if first >= seq {
                break;
            }
            self.remove(first);
        }
    }

    /// Drops the oldest consumer-decoded records beyond `capacity` of them.
    fn trim_decoded(&mut self, capacity: usize) {
        let excess = (self.entries.len() - self.published).saturating_sub(capacity);
        let oldest: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, h)| h.published_bytes.is_none())
            .map(|(&s, _)| s)
            .take(excess)
            .collect();
        for seq in oldest {
            self.remove(seq);
        }
    }
}

/// Where a consumer's record came from (see [`DecodedRecords::get`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The intake's batch, as journalled.
    Published,
    /// Decoded by another consumer lately.
    Shared,
    /// Decoded by this consumer now.
    Decoded,
}

impl Source {
    /// Every source, in the order of [`Source::index`].
    pub const ALL: [Source; 3] = [Source::Published, Source::Shared, Source::Decoded];

    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Published => "published",
            Source::Shared => "shared",
            Source::Decoded => "decoded",
        }
    }

    /// Position in [`Source::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The longest a paced consumer waits for the others before one record.
pub const PACE_MAX_WAIT: Duration = Duration::from_millis(20);
/// Beyond this many windows ahead of the slowest, a consumer does not wait.
pub const PACE_MAX_GAP: u64 = 4;

/// A paced consumer's place (see [`DecodedRecords::join`]); leaves when dropped.
pub struct Lane<'a> {
    records: &'a DecodedRecords,
    next: Arc<AtomicU64>,
}

impl Lane<'_> {
    /// Says every record before `next` is read (so a record read last is not held for this
    /// consumer until the next one comes).
    pub fn reached(&self, next: u64) {
        self.next.store(next, Ordering::Relaxed);
    }

    /// Waits, within the bounds above, until the other paced consumers are close enough
    /// behind record `seq` for it to be decoded once for all; true when it waited.
    pub fn pace(&self, seq: u64) -> bool {
        self.next.store(seq, Ordering::Relaxed);
        let window = self.records.capacity as u64;
        let started = Instant::now();
        let mut waited = false;
        loop {
            let slowest = self.records.slowest_but(&self.next);
            let gap = seq.saturating_sub(slowest);
            if gap <= window / 2 || gap > window * PACE_MAX_GAP {
                return waited;
            }
            if started.elapsed() >= PACE_MAX_WAIT {
                return waited;
            }
            waited = true;
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

impl Drop for Lane<'_> {
    fn drop(&mut self) {
        let mut lanes = self.records.lanes.lock().unwrap_or_else(|p| p.into_inner());
        lanes.retain(|l| !Arc::ptr_eq(l, &self.next));
    }
}

impl DecodedRecords {
    /// Keeps the last `capacity` records decoded by consumers, and published ones within
    /// [`PUBLISHED_MAX_RECORDS`] and [`PUBLISHED_MAX_BYTES`].
    pub fn new(capacity: usize) -> DecodedRecords {
        DecodedRecords {
            recent: Mutex::new(Recent::default()),
            capacity: capacity.max(1),
            lanes: Mutex::new(Vec::new()),
            memory: MemoryBudget::unbounded(),
        }
    }

    /// The records counted and bounded under `memory`.
    pub fn with_memory(mut self, memory: Arc<MemoryBudget>) -> DecodedRecords {
        self.memory = memory;
        self
    }

    /// Tells the memory budget what is held now.
    fn report(&self, recent: &Recent) {
        self.memory.set(Holder::Journal, recent.memory_bytes);
    }

    /// The records held, less those every paced consumer has passed (counted anew), and the
    /// first record they have not all passed.
    fn lock_unpassed(&self) -> (std::sync::MutexGuard<'_, Recent>, Option<u64>) {
        let passed = self.passed_by_all();
        let mut recent = self.lock();
        if let Some(passed) = passed {
            recent.drop_before(passed);
            self.report(&recent);
        }
        (recent, passed)
    }

    /// True when `bytes` more fit within the journal's allowance of the memory budget.
    fn has_room(&self, recent: &Recent, bytes: usize) -> bool {
        recent.memory_bytes + bytes <= self.memory.allowance(Holder::Journal)
    }

    /// Paces the caller with the other consumers that joined (see above).
    pub fn join(&self) -> Lane<'_> {
        let next = Arc::new(AtomicU64::new(u64::MAX));
        self.lanes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::clone(&next));
        Lane {
            records: self,
            next,
        }
    }

    /// The next record of the slowest paced consumer other than `me` (`u64::MAX`: none).
    fn slowest_but(&self, me: &Arc<AtomicU64>) -> u64 {
        let lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        lanes
            .iter()
            .filter(|l| !Arc::ptr_eq(l, me))
            .map(|l| l.load(Ordering::Relaxed))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// The record every paced consumer has reached (`None`: no paced consumer, or one that
    /// has not read a record yet and may still read any).
    fn passed_by_all(&self) -> Option<u64> {
        let lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        // A lane that has not read yet holds u64::MAX: then the min is None too.
        lanes
            .iter()
            .map(|l| l.load(Ordering::Relaxed))
            .try_fold(u64::MAX, |min, n| (n != u64::MAX).then_some(min.min(n)))
            .filter(|&n| n != u64::MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recent> {
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Record `seq` as the intake handed it to the journal (`payload_bytes` long on disk), for the
    /// consumers to take instead of decoding it; nothing when the published records are at
    /// their bound or `seq` is held already.
    pub fn publish(&self, seq: u64, entry: JournalEntry, payload_bytes: usize) -> bool {
        let (mut recent, passed) = self.lock_unpassed();
        let memory_bytes = payload_bytes * DECODED_PER_PAYLOAD;
        if passed.is_some_and(|p| seq < p)
            || recent.published >= PUBLISHED_MAX_RECORDS
            || recent.published_bytes + payload_bytes > PUBLISHED_MAX_BYTES
            || !self.has_room(&recent, memory_bytes)
            || recent.entries.contains_key(&seq)
        {
            return false;
        }
        recent.insert(
            seq,
            Held {
                entry: Arc::new(entry),
                published_bytes: Some(payload_bytes),
                memory_bytes,
            },
        );
        self.report(&recent);
        true
    }

    /// Drops what every paced consumer has passed and says what is held (at each tick, so
    /// that the last records read are not counted until more come).
    pub fn settle(&self) {
        drop(self.lock_unpassed());
    }

    /// Record `seq` and where it came from, if it is held (published, or decoded lately).
    pub fn held(&self, seq: u64) -> Option<(Arc<JournalEntry>, Source)> {
        let (recent, _) = self.lock_unpassed();
        recent.entries.get(&seq).map(|held| {
            let source = match held.published_bytes {
                Some(_) => Source::Published,
                None => Source::Shared,
            };
            (Arc::clone(&held.entry), source)
        })
    }

    /// Record `seq`: as published or decoded by another consumer lately, else decoded from
    /// `payload` now; and where it came from.
    pub fn get(
        &self,
        seq: u64,
        payload: &[u8],
    ) -> Result<(Arc<JournalEntry>, Source), codec::CodecError> {
        if let Some(held) = self.held(seq) {
            return Ok(held);
        }
        // Decoded outside the lock; two consumers may both decode a record now and then.
        let entry = Arc::new(codec::decode(payload)?);
        let mut recent = self.lock();
        let memory_bytes = payload.len() * DECODED_PER_PAYLOAD;
        // Over the journal's allowance the record is not kept for the others to share.
        if self.has_room(&recent, memory_bytes) && !recent.entries.contains_key(&seq) {
            recent.insert(
                seq,
                Held {
                    entry: Arc::clone(&entry),
                    published_bytes: None,
                    memory_bytes,
                },
            );
            recent.trim_decoded(self.capacity);
            self.report(&recent);
        }
        Ok((entry, Source::Decoded))
    }
}

/// When a consumer stops.
#[derive(Clone, Default)]
pub struct Stop {
    /// Nothing more will be appended for this consumer: stop once everything is read.
    pub drained: CancellationToken,
    /// Stop now, read or not.
    pub give_up: CancellationToken,
}

/// Runs `consumer` on `tail` until `stop` says so.
pub fn run<C: Consumer>(
    mut tail: Tail,
    mut consumer: C,
    mut held: HeldItems,
    stop: Stop,
    decoded: &DecodedRecords,
    paced: bool,
    all_metrics: &crate::metrics::Metrics,
) -> C::Totals {
    let metrics = &all_metrics.journal;
    let lane = paced.then(|| decoded.join());
    let taken_from = metrics.consumer_records(tail.consumer(), Source::ALL.map(Source::as_str));
    let mut last_tick = Instant::now();
    let mut saved = tail.next_seq();
    let mut last_seq = saved.saturating_sub(1);
    let mut reads = RecentReads::default();
    loop {
        if stop.give_up.is_cancelled() {
            break;
        }
        // The head's lock is taken only when a linger is due at all.
        if let Some(pause) = reads.linger(Instant::now()).filter(|_| {
            !stop.drained.is_cancelled()
                && consumer.flush_due_in().is_none()
                && tail.next_seq() >= tail.head().committed()
        }) {
            std::thread::sleep(pause);
        }
        // Checked before reading, so whatever was durable when drained was set gets read.
        let drained = stop.drained.is_cancelled();
        let wait = consumer.tick_due_in().map_or(TICK, |d| d.min(TICK));
        // A record published or decoded lately is not read from disk at all.
        let records = match tail.read(READ_RECORDS, READ_BYTES, wait, |seq| decoded.held(seq)) {
            Ok(r) => r,
            Err(e) => {
                // A damaged segment: stop reading rather than skip acknowledged data; the
                // records stay for an operator (and the next start reports them). The
                // journal stops shrinking, so this must be loud.
                metrics.consumer_failed(tail.consumer());
                tracing::error!(consumer = tail.consumer(), error = %e, "cannot read the journal; this consumer stops until restart");
                break;
            }
        };
        let caught_up = records.is_empty();
        reads.found(Instant::now(), records.len());
        for (seq, record) in records {
            last_seq = seq;
            if let Some(lane) = &lane {
                lane.pace(seq);
            }
            let entry = match record {
                Record::Taken(held) => Ok(held),
                Record::Payload(payload) => decoded.get(seq, &payload),
            };
            match entry {
                Ok((entry, source)) => {
                    taken_from[source.index()].inc();
                    match &*entry {
                        JournalEntry::Events(batch) => {
                            match held.bind(seq, batch, Instant::now()) {
                                Bound::AsIs => consumer.record(seq, &entry),
                                Bound::Changed(b) => {
                                    consumer.record(seq, &Arc::new(JournalEntry::Events(b)))
                                }
                            }
                        }
                        JournalEntry::AlarmLogs(_) => consumer.record(seq, &entry),
                    }
                }
                Err(e) => {
                    metrics.undecodable(tail.consumer());
                    tracing::error!(consumer = tail.consumer(), seq, error = %e, "journal record cannot be decoded; skipped");
                }
            }
        }
        // A reader's flush that may go now does not wait for the next tick.
        if last_tick.elapsed() >= TICK
            || caught_up
            || consumer.flush_due_in() == Some(Duration::ZERO)
        {
            last_tick = Instant::now();
            if let Some(b) = held.expire(last_tick, last_seq) {
                consumer.record(last_seq, &Arc::new(JournalEntry::Events(b)));
            }
            report_held(&mut held, tail.consumer(), all_metrics);
            if let Some(lane) = &lane {
                lane.reached(tail.next_seq());
            }
            decoded.settle();
            let durable = consumer.tick(tail.next_seq(), tail.head());
            saved = save(&tail, saved, held.checkpoint(durable));
        }
        let closed = drained || tail.head().is_closed();
        if caught_up && closed && tail.next_seq() >= tail.head().committed() {
            break;
        }
    }
    // The others no longer wait for this one.
    drop(lane);
    // Nothing more will come for what is still held: it goes on under the tenant it has.
    if let Some(b) = held.release_all(last_seq) {
        consumer.record(last_seq, &Arc::new(JournalEntry::Events(b)));
    }
    report_held(&mut held, tail.consumer(), all_metrics);
    let (durable, totals) = consumer.finish(tail.next_seq());
    save(&tail, saved, held.checkpoint(durable));
    totals
}

fn report_held(held: &mut HeldItems, consumer: &str, metrics: &crate::metrics::Metrics) {
    metrics.tenancy.set_held(consumer, held.len());
    for (why, n) in held.take_unresolved() {
        metrics.tenancy.unresolved(consumer, why.as_str(), n);
    }
    // Every consumer moves the same items; the archive's count is the one reported.
    let moved = held.take_moved();
    if consumer == "archive" {
        for (sender, n) in moved {
            metrics.tenancy.mismatched(&sender, n);
        }
    }
}

/// Writes the checkpoint when it moved; returns the one on disk.
fn save(tail: &Tail, saved: u64, durable: u64) -> u64 {
    if durable <= saved {
        return saved;
    }
    match tail.save_checkpoint(durable) {
        Ok(()) => durable,
        Err(e) => {
            tracing::error!(consumer = tail.consumer(), error = %e, "cannot save the journal checkpoint");
            saved
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{fixtures, EventBatch};

    #[test]
    fn paced_consumers_see_each_other_until_they_leave() {
        let decoded = DecodedRecords::new(32);
        let a = decoded.join();
        let b = decoded.join();
        assert_eq!(
            decoded.slowest_but(&a.next),
            u64::MAX,
            "b has read nothing yet"
        );
        b.pace(7);
        a.pace(10);
        assert_eq!(decoded.slowest_but(&a.next), 7);
        assert_eq!(decoded.slowest_but(&b.next), 10);
        drop(b);
        assert_eq!(decoded.slowest_but(&a.next), u64::MAX);
        assert_eq!(decoded.lanes.lock().expect("lanes").len(), 1);
        // Alone, or far ahead of a consumer that restarted behind: no wait at all.
        assert!(!a.pace(1_000));
        let c = decoded.join();
        assert!(!c.pace(0), "c is the slowest");
        assert!(!a.pace(1_000), "more than 4 windows ahead");
        // Within half a window: no wait; beyond it but within reach: a bounded wait.
        assert!(!a.pace(16));
        let started = Instant::now();
        assert!(a.pace(17));
        assert!(
            started.elapsed() >= PACE_MAX_WAIT,
            "waited its bound, c never moved"
        );
        // The slowest catching up ends the wait (here before it starts).
        assert!(!c.pace(10));
        assert!(!a.pace(17));
    }

    fn one_span_payload() -> Vec<u8> {
        codec::encode_events(&EventBatch {
            spans: vec![fixtures::span()],
            logs: Vec::new(),
        })
        .expect("encodes")
    }

    #[test]
    fn consumers_share_a_record_decoded_lately_and_the_oldest_goes() {
        let decoded = DecodedRecords::new(2);
        let payload = one_span_payload();
        let (a, source) = decoded.get(1, &payload).expect("decode");
        assert_eq!(source, Source::Decoded);
        let (b, source) = decoded.get(1, &payload).expect("shared");
        assert_eq!(source, Source::Shared);
        assert!(Arc::ptr_eq(&a, &b));
        decoded.get(2, &payload).expect("decode");
        decoded.get(3, &payload).expect("decode");
        // Record 1 fell out: a new decode, equal but not shared.
        let (c, source) = decoded.get(1, &payload).expect("decode again");
        assert_eq!(source, Source::Decoded);
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(a, c);
        assert!(decoded.get(4, b"\x01garbage").is_err());
    }

    #[test]
    fn a_published_record_is_taken_as_published_and_never_decoded() {
        let decoded = DecodedRecords::new(2);
        let batch = EventBatch {
            spans: vec![fixtures::span()],
            logs: Vec::new(),
        };
        assert!(decoded.publish(5, JournalEntry::Events(batch.clone()), 100));
        assert!(
            !decoded.publish(5, JournalEntry::Events(batch.clone()), 100),
            "held already"
        );
        // The payload is not read: garbage would not decode.
        let (a, source) = decoded.get(5, b"\x01garbage").expect("published");
        assert_eq!(source, Source::Published);
        assert_eq!(*a, JournalEntry::Events(batch.clone()));
        let (b, _) = decoded.get(5, b"").expect("published");
        assert!(Arc::ptr_eq(&a, &b));
        // Consumer decodes beyond their capacity do not push published records out.
        let payload = one_span_payload();
        for seq in 6..10 {
            assert_eq!(
                decoded.get(seq, &payload).expect("decode").1,
                Source::Decoded
            );
        }
        assert_eq!(
            decoded.get(5, b"").expect("still held").1,
            Source::Published
        );
        let recent = decoded.lock();
        assert_eq!((recent.entries.len(), recent.published), (3, 1));
        assert_eq!(recent.published_bytes, 100);
    }

    #[test]
    fn published_records_stay_within_their_bounds() {
        let decoded = DecodedRecords::new(2);
        let entry = || JournalEntry::AlarmLogs(vec![1, 2, 3]);
        for seq in 0..PUBLISHED_MAX_RECORDS as u64 {
            assert!(decoded.publish(seq, entry(), 10));
        }
        assert!(!decoded.publish(1_000, entry(), 10), "at the record bound");
        assert_eq!(decoded.lock().published, PUBLISHED_MAX_RECORDS);
        // The bytes bound, on its own.
        let decoded = DecodedRecords::new(2);
        assert!(decoded.publish(0, entry(), PUBLISHED_MAX_BYTES - 10));
        assert!(!decoded.publish(1, entry(), 11), "one byte over");
        assert!(decoded.publish(1, entry(), 10), "exactly at the bound");
        assert_eq!(decoded.lock().published_bytes, PUBLISHED_MAX_BYTES);
    }

    #[test]
    fn a_consumer_lingers_only_while_records_come_less_than_the_linger_apart() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut r = RecentReads::default();
        assert_eq!(r.linger(t0), None);
        // One record after a long wait: the next read waits for the next commit as before.
        r.found(t0, 1);
        assert_eq!(r.linger(t0), None);
        r.found(t0 + ms(20), 1);
        assert_eq!(r.linger(t0 + ms(20)), None);
        // A commit 1 ms after the last: read again 5 ms after the last read, not at once.
        r.found(t0 + ms(21), 1);
        assert_eq!(r.linger(t0 + ms(22)), Some(ms(4)));
        // Several at once: still frequent; past the linger, no wait.
        r.found(t0 + ms(26), 4);
        assert_eq!(r.linger(t0 + ms(26)), Some(LINGER));
        assert_eq!(r.linger(t0 + ms(31)), None);
        // An empty read (a wait that timed out) forgets the gap.
        r.found(t0 + ms(300), 0);
        r.found(t0 + ms(400), 1);
        assert_eq!(r.linger(t0 + ms(400)), None);
    }

    #[test]
    fn published_records_stay_within_the_journals_allowance_of_the_memory_budget() {
        use crate::memory::{Holder, MemoryBudget};
        // 1.6 MiB: the journal's share is 100 KiB; the others hold the rest of the pool.
        let memory = MemoryBudget::new((16 * 100) << 10);
        memory.set(Holder::Archive, (13 * 100) << 10);
        assert_eq!(memory.allowance(Holder::Journal), 100 << 10);
        let decoded = DecodedRecords::new(2).with_memory(Arc::clone(&memory));
        let entry = || JournalEntry::AlarmLogs(vec![1, 2, 3]);
        // Each is counted at twice its payload.
        assert!(decoded.publish(0, entry(), 30 << 10));
        assert_eq!(memory.held(Holder::Journal), 60 << 10);
        assert!(!decoded.publish(1, entry(), 21 << 10), "over the allowance");
        assert!(decoded.publish(1, entry(), 20 << 10), "exactly at it");
        assert_eq!(memory.held(Holder::Journal), 100 << 10);
        // At the allowance, a record a consumer decodes is not kept for the others.
        let (_, source) = decoded
            .get(2, &codec::encode(&entry()).expect("encode"))
            .expect("decode");
        assert_eq!(source, Source::Decoded);
        assert!(decoded.held(2).is_none());
        assert_eq!(memory.held(Holder::Journal), 100 << 10);
        // A consumer reading record 1 has passed record 0; once it says at its tick that it
        // has read them all, nothing stays counted.
        let lane = decoded.join();
        lane.pace(1);
        decoded.settle();
        assert_eq!(memory.held(Holder::Journal), 40 << 10);
        lane.reached(2);
        decoded.settle();
        assert_eq!(memory.held(Holder::Journal), 0);
        // With room again, a decoded record is kept and counted.
        memory.set(Holder::Archive, 0);
        let payload = codec::encode(&entry()).expect("encode");
        decoded.get(3, &payload).expect("decode");
        assert!(decoded.held(3).is_some());
        assert_eq!(memory.held(Holder::Journal), payload.len() * 2);
    }

    #[test]
    fn records_every_paced_consumer_passed_are_dropped() {
        let decoded = DecodedRecords::new(8);
        let entry = || JournalEntry::AlarmLogs(vec![7]);
        let a = decoded.join();
        let b = decoded.join();
        for seq in 1..=6 {
            assert!(decoded.publish(seq, entry(), 10));
        }
        a.pace(5);
        // b has not started: nothing it may still read goes.
        assert_eq!(decoded.get(5, b"").expect("held").1, Source::Published);
        b.pace(3);
        // Both passed 1 and 2.
        assert_eq!(decoded.get(3, b"").expect("held").1, Source::Published);
        {
            let recent = decoded.lock();
            assert_eq!(
                recent.entries.keys().copied().collect::<Vec<_>>(),
                vec![3, 4, 5, 6]
            );
            assert_eq!((recent.published, recent.published_bytes), (4, 40));
        }
        // A record the consumers passed is not published again.
        assert!(!decoded.publish(2, entry(), 10));
        drop(a);
        drop(b);
    }
}
