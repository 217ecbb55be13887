//! One memory budget for everything the pipeline holds between the receivers and the outputs.
//!
//! `[pipeline] memory_limit` is split into shares, one per [`Holder`]: requests being
//! protected and journalled, records published for the consumers, archive buffers, assembly
//! state, and the rest (the de-duplication window, budget windows). Each holder reports what
//! it holds here; what bounds it is its [`MemoryBudget::allowance`]:
//!
//! - A consumer-side holder may borrow what the other consumer-side holders leave unused
//!   (less a sixteenth of the limit, kept free), so one busy stage is not starved while the
//!   others are idle; it never has less than its own share. When the others come back for their share, the total goes over the limit and the
//!   borrower's allowance falls below what it holds: the borrower gives back, at its next
//!   record or tick (the archive ends row groups, then writes out its largest partitions;
//!   assembly summarizes its oldest requests early; budgets forget their least recently
//!   active requests; the journal keeps fewer decoded records), while the others, within
//!   their shares, do not.
//! - The intake never lends its share (it would never get it back: refusing is all it can
//!   do), and has less than its share only while a borrower has not given back yet. Over its
//!   allowance the receivers refuse (HTTP 429, gRPC `RESOURCE_EXHAUSTED`): before decoding a
//!   request, and again once it is decompressed if others are in flight too.
//!
//! The bytes are estimates of heap memory, counted where the data is held. What no holder
//! counts (code, the rules' automata, thread stacks, the allocator's pages among freed
//! blocks) is outside the limit, unless `[pipeline] resident_limit` is set: then the
//! process's resident memory is read ten times a second ([`ResidentWatch`]), what it holds
//! beyond the holders' counts is taken out of their pool (averaged over about two seconds),
//! and over the resident limit the allocator gives freed memory back at once. The shares
//! shrink with the pool; the pool never falls below a quarter of the limit (a limit near the
//! process's own footprint cannot be kept, and the pipeline must go on). It is off by
//! default because what no holder counts grows with a run and with tenants (BENCHMARKS.md,
//! "Memory"), and holders squeezed for it cost CPU per span.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Heap bytes of a decoded batch per byte of its journal payload, about (each string and
/// vector is allocated on its own; the payload is packed).
pub const DECODED_PER_PAYLOAD: usize = 2;

/// Heap bytes a request holds from its body to the journal's commit, per byte of its
/// (uncompressed) body, about: the body, the decoded message, the normalized batch and its
/// journal payload.
pub const INTAKE_PER_BODY_BYTE: usize = 4;

/// What holds memory under the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// Requests being protected and journalled, from decoding to the journal's commit.
    Intake,
    /// Journal records decoded and held for the consumers to share.
    Journal,
    /// Archive rows not yet in a completed file (held items included).
    Archive,
    /// Assembly's open and remembered requests.
    Assembly,
    /// The budget stage's tracked requests.
    Budgets,
    /// The archive's de-duplication window (reserved whole at start: it fills and stays full).
    Windows,
}

impl Holder {
    /// Every holder.
    pub const ALL: [Holder; 6] = [
        Holder::Intake,
        Holder::Journal,
        Holder::Archive,
        Holder::Assembly,
        Holder::Budgets,
        Holder::Windows,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Holder::Intake => "intake",
            Holder::Journal => "journal",
            Holder::Archive => "archive",
            Holder::Assembly => "assembly",
            Holder::Budgets => "budgets",
            Holder::Windows => "windows",
        }
    }

    /// The holder's share of the limit, in sixteenths (they add up to 16).
    fn sixteenths(self) -> usize {
        match self {
            Holder::Intake => 2,
            Holder::Journal => 1,
            Holder::Archive => 7,
            Holder::Assembly => 3,
            Holder::Budgets => 2,
            Holder::Windows => 1,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The process's memory budget (see the module's documentation).
#[derive(Debug)]
pub struct MemoryBudget {
    limit: usize,
    /// `pipeline.resident_limit`: 0, none.
    resident_limit: usize,
    held: [AtomicUsize; Holder::ALL.len()],
    /// Resident bytes beyond the holders' counts, as last measured; nothing until then.
    uncounted: AtomicUsize,
    /// Resident bytes, as last measured; nothing until then.
    resident: AtomicUsize,
    /// Bodies of requests waiting for the intake's memory ([`wait_for_intake`]).
    waiting: AtomicUsize,
}

impl MemoryBudget {
    /// A budget of `limit` bytes, with no resident limit.
    pub fn new(limit: usize) -> Arc<MemoryBudget> {
        MemoryBudget::with_resident_limit(limit, 0)
    }

    /// A budget of `limit` bytes whose holders give way to keep the process's resident
    /// memory under `resident_limit` (0: no resident limit).
    pub fn with_resident_limit(limit: usize, resident_limit: usize) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit,
            resident_limit,
            held: Default::default(),
            uncounted: AtomicUsize::new(0),
            resident: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
        })
    }

    /// A budget no holder ever reaches (tests and tools that bound nothing).
    pub fn unbounded() -> Arc<MemoryBudget> {
        MemoryBudget::new(usize::MAX / 2)
    }

    /// The limit, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// `holder`'s own share of the limit.
    pub fn share(&self, holder: Holder) -> usize {
        share_of(self.limit, holder)
    }

    /// The resident memory the process is kept under (0: none).
    pub fn resident_limit(&self) -> usize {
        self.resident_limit
    }

    /// Records the process's resident memory: under a resident limit, what it holds beyond
    /// the holders' counts comes out of their pool, averaged over the last few readings.
    /// True when the process is over its resident limit (freed memory should go back to the
    /// system now).
    pub fn observe_resident(&self, resident: usize) -> bool {
        let uncounted = resident.saturating_sub(self.total());
        // A sixteenth of each new reading (ten a second): a Parquet file's encoding holds
        // tens of megabytes for a moment, and a pool that dipped with it would refuse
        // requests (each refusal costs its client a retry delay) for memory soon given back.
        let before = self.resident.swap(resident, Ordering::Relaxed);
        let average = if before == 0 {
            uncounted
        } else {
            // A sixteenth of the way, rounded towards the reading: it is reached, not neared.
            let old = self.uncounted.load(Ordering::Relaxed);
            if uncounted >= old {
                old + (uncounted - old).div_ceil(16)
            } else {
                old - (old - uncounted).div_ceil(16)
            }
        };
        self.uncounted.store(average, Ordering::Relaxed);
        self.resident_limit > 0 && resident > self.resident_limit
    }

    /// Resident bytes, as last measured (nothing before the first measurement).
    pub fn resident(&self) -> usize {
        self.resident.load(Ordering::Relaxed)
    }

    /// What the holders may hold together now: the limit, or under a resident limit that
    /// less what the process holds beyond their counts, at most the limit and at least a
    /// quarter of it.
    pub fn pool(&self) -> usize {
        if self.resident_limit == 0 {
            return self.limit;
        }
        let uncounted = self.uncounted.load(Ordering::Relaxed);
        self.resident_limit
            .saturating_sub(uncounted)
            .clamp(self.limit / 4, self.limit)
    }

    /// What `holder` holds now.
    pub fn held(&self, holder: Holder) -> usize {
        self.held[holder.index()].load(Ordering::Relaxed)
    }

    /// What all holders hold now.
    pub fn total(&self) -> usize {
        Holder::ALL.iter().map(|&h| self.held(h)).sum()
    }

    /// Sets what `holder` holds.
    pub fn set(&self, holder: Holder, bytes: usize) {
        self.held[holder.index()].store(bytes, Ordering::Relaxed);
    }

    /// Adds `bytes` to what `holder` holds.
    pub fn add(&self, holder: Holder, bytes: usize) {
        self.held[holder.index()].fetch_add(bytes, Ordering::Relaxed);
    }

    /// Takes `bytes` from what `holder` holds (never below nothing).
    pub fn sub(&self, holder: Holder, bytes: usize) {
        let cell = &self.held[holder.index()];
        let _ = cell.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            Some(v.saturating_sub(bytes))
        });
    }

    /// What `holder` may hold now: see the module's documentation.
    pub fn allowance(&self, holder: Holder) -> usize {
        // Each holder read once: several threads move some of them meanwhile.
        let held = Holder::ALL.map(|h| self.held(h));
        let consumers: usize = Holder::ALL
            .iter()
            .filter(|&&h| h != Holder::Intake)
            .map(|&h| held[h.index()])
            .sum();
        let pool = self.pool();
        let intake_share = share_of(pool, Holder::Intake);
        match holder {
            Holder::Intake => intake_share.min(pool.saturating_sub(consumers)),
            _ => {
                let others = consumers - held[holder.index()];
                let consumers_pool = pool.saturating_sub(intake_share);
                // A borrower leaves a sixteenth free: a stage coming back for its share then
                // does not squeeze the intake before the borrower has given back.
                let lendable = consumers_pool
                    .saturating_sub(others)
                    .saturating_sub(pool / 16);
                share_of(pool, holder).max(lendable)
            }
        }
    }

    /// True when the holders together hold more than their pool (a borrower has not given
    /// back yet, or the process's uncounted memory grew): every stage that can give back
    /// should.
    pub fn over_limit(&self) -> bool {
        self.total() > self.pool()
    }

    /// True when `holder` holds more than its allowance: it should give back.
    pub fn over(&self, holder: Holder) -> bool {
        self.held(holder) > self.allowance(holder)
    }

    /// True when a request may be taken in: the intake is within its allowance.
    pub fn admits(&self) -> bool {
        self.held(Holder::Intake) < self.allowance(Holder::Intake)
    }

    /// True when a request the intake holds `own` bytes for (its body now counted whole) may
    /// go on: the intake is within its allowance, or holds nothing but this request (a request
    /// alone is taken, however large, else a body over the intake's share never could be).
    pub fn keeps(&self, own: usize) -> bool {
        let intake = self.held(Holder::Intake);
        intake <= self.allowance(Holder::Intake) || intake <= own
    }

    /// Holds `bytes` for `holder` until the returned guard is dropped.
    pub fn hold(self: &Arc<Self>, holder: Holder, bytes: usize) -> HeldBytes {
        self.add(holder, bytes);
        HeldBytes {
            budget: Arc::clone(self),
            holder,
            bytes,
        }
    }
}

/// Waits, up to `wait`, until the intake may take in a request whose body holds
/// `body_bytes`: true then, false when the deadline passed first, or at once when the bodies
/// already waiting hold the intake's share (a wait must not hold more than a refusal would).
/// A consumer over its allowance gives back within a record or two, and a request refused
/// costs its client a retry delay; one that waits, only the wait.
pub async fn wait_for_intake(budget: &MemoryBudget, wait: Duration, body_bytes: usize) -> bool {
    /// How often a waiting request looks at the budget again.
    const POLL: Duration = Duration::from_millis(5);
    if budget.admits() {
        return true;
    }
    let room = share_of(budget.pool(), Holder::Intake);
    let waiting = budget.waiting.fetch_add(body_bytes, Ordering::Relaxed);
    // Given back however the wait ends (the future may also be dropped).
    let _waiting = WaitingBody { budget, body_bytes };
    if waiting.saturating_add(body_bytes) > room {
        return false;
    }
    let deadline = tokio::time::Instant::now() + wait;
    while !budget.admits() {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
    true
}

/// A body counted as waiting for the intake while this lives.
struct WaitingBody<'a> {
    budget: &'a MemoryBudget,
    body_bytes: usize,
}

impl Drop for WaitingBody<'_> {
    fn drop(&mut self) {
        self.budget
            .waiting
            .fetch_sub(self.body_bytes, Ordering::Relaxed);
    }
}

/// `holder`'s share of `pool` bytes.
fn share_of(pool: usize, holder: Holder) -> usize {
    (pool / 16).saturating_mul(holder.sixteenths())
}

/// How often [`ResidentWatch`] reads the process's resident memory: often enough that a
/// blast's growth between two readings is a small part of the limit.
pub const RESIDENT_PERIOD: Duration = Duration::from_millis(100);

/// How freed memory is given back to the system now: the binary's allocator knows how.
static GIVE_BACK: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Installs how freed memory is given back to the system (the binary does, for its
/// allocator; the first one installed is kept). Without one, nothing is forced back.
pub fn install_give_back(give_back: fn()) {
    let _ = GIVE_BACK.set(give_back);
}

/// Reads the process's resident memory into a [`MemoryBudget`], and over its resident limit
/// has the allocator give freed memory back to the system.
pub struct ResidentWatch {
    budget: Arc<MemoryBudget>,
}

impl ResidentWatch {
    /// A watch over `budget`.
    pub fn new(budget: Arc<MemoryBudget>) -> ResidentWatch {
        ResidentWatch { budget }
    }

    /// Reads once; false where the resident memory cannot be read (not Linux).
    pub fn read_once(&self) -> bool {
        let Some(resident) = resident_bytes() else {
            return false;
        };
        if self.budget.observe_resident(resident) {
            if let Some(give_back) = GIVE_BACK.get() {
                give_back();
            }
        }
        true
    }

    /// Reads every [`RESIDENT_PERIOD`] on a thread of its own until the budget is dropped;
    /// nothing without a resident limit (the gauge is read at each scrape then) or where the
    /// resident memory cannot be read.
    pub fn spawn(self) -> std::io::Result<()> {
        if self.budget.resident_limit() == 0 || !self.read_once() {
            return Ok(());
        }
        let budget = Arc::downgrade(&self.budget);
        drop(self);
        std::thread::Builder::new()
            .name("toolwatch-resident".into())
            .spawn(move || loop {
                std::thread::sleep(RESIDENT_PERIOD);
                let Some(budget) = budget.upgrade() else {
                    return;
                };
                ResidentWatch { budget }.read_once();
            })
            .map(drop)
    }
}

/// The process's resident memory in bytes, from `/proc/self/statm`; `None` elsewhere.
pub fn resident_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages.saturating_mul(page_size()))
}

/// The system's page size (4 KiB where it cannot be asked).
fn page_size() -> usize {
    #[cfg(unix)]
    {
        // SAFETY: sysconf reads a constant of the system and touches no memory of ours.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if let Ok(n) = usize::try_from(n) {
            if n > 0 {
                return n;
            }
        }
    }
    4096
}

/// Bytes held under a [`MemoryBudget`] while this lives.
#[derive(Debug)]
pub struct HeldBytes {
    budget: Arc<MemoryBudget>,
    holder: Holder,
    bytes: usize,
}

impl HeldBytes {
    /// The bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Holds `bytes` instead (a request's body once decompressed).
    pub fn resize(&mut self, bytes: usize) {
        if bytes >= self.bytes {
            self.budget.add(self.holder, bytes - self.bytes);
        } else {
            self.budget.sub(self.holder, self.bytes - bytes);
        }
        self.bytes = bytes;
    }
}

impl Drop for HeldBytes {
    fn drop(&mut self) {
        self.budget.sub(self.holder, self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn the_shares_add_up_to_the_limit() {
        let b = MemoryBudget::new(512 * MIB);
        let sum: usize = Holder::ALL.iter().map(|&h| b.share(h)).sum();
        assert_eq!(sum, 512 * MIB);
        assert_eq!(b.share(Holder::Archive), 224 * MIB);
        assert_eq!(b.share(Holder::Intake), 64 * MIB);
    }

    #[test]
    fn a_consumer_borrows_what_the_others_leave_and_gives_it_back_when_they_come() {
        let b = MemoryBudget::new(512 * MIB);
        // Alone, the archive may use everything but the intake's share and the sixteenth
        // kept free.
        assert_eq!(b.allowance(Holder::Archive), 416 * MIB);
        b.set(Holder::Archive, 416 * MIB);
        assert!(!b.over(Holder::Archive));
        assert!(b.admits());
        // Assembly starts growing: within what was kept free, nobody is squeezed.
        b.set(Holder::Assembly, 32 * MIB);
        assert_eq!(b.allowance(Holder::Intake), 64 * MIB);
        // It comes for its whole share (96 MiB): the archive, the borrower, is now over.
        b.set(Holder::Assembly, 96 * MIB);
        assert_eq!(b.allowance(Holder::Assembly), 96 * MIB);
        assert_eq!(b.allowance(Holder::Archive), 320 * MIB);
        assert!(b.over(Holder::Archive));
        assert!(!b.over(Holder::Assembly));
        // Until it has given back, the intake is squeezed: 512 - 512 = nothing.
        assert_eq!(b.allowance(Holder::Intake), 0);
        assert!(!b.admits());
        b.set(Holder::Archive, 320 * MIB);
        assert!(!b.over(Holder::Archive));
        assert_eq!(b.allowance(Holder::Intake), 64 * MIB);
        assert!(b.admits());
    }

    #[test]
    fn the_pool_shrinks_by_what_the_process_holds_beyond_the_counts() {
        let b = MemoryBudget::with_resident_limit(512 * MIB, 576 * MIB);
        // Readings held long enough for the average to reach them; the last answer.
        let settle = |resident: usize| {
            let mut over = false;
            for _ in 0..400 {
                over = b.observe_resident(resident);
            }
            over
        };
        b.set(Holder::Archive, 200 * MIB);
        // 50 MiB beside the counts, less than the resident limit leaves them: the pool is
        // the limit, and nothing is forced back.
        assert!(!settle(250 * MIB));
        assert_eq!(b.resident(), 250 * MIB);
        assert_eq!(b.pool(), 512 * MIB);
        assert_eq!(b.allowance(Holder::Archive), 416 * MIB);
        // 400 MiB beside them (the allocator's slack after a blast): the holders get what is
        // left of the target, the shares shrink with it, and freed memory is forced back.
        assert!(settle(600 * MIB));
        assert_eq!(b.pool(), 176 * MIB);
        // The archive holds more than the pool: the intake refuses until it gives back.
        assert_eq!(b.allowance(Holder::Intake), 0);
        assert!(!b.admits());
        // The archive borrows the pool less the intake's share and a sixteenth: 143 MiB.
        assert_eq!(b.allowance(Holder::Archive), 143 * MIB);
        assert_eq!(b.allowance(Holder::Assembly), 33 * MIB);
        assert!(b.over(Holder::Archive));
        assert!(b.over_limit());
        // Everything the archive held goes, but the slack stays: never below a quarter.
        b.set(Holder::Archive, 0);
        settle(700 * MIB);
        assert_eq!(b.pool(), 128 * MIB);
        assert!(!b.over_limit());
        assert_eq!(b.allowance(Holder::Intake), 16 * MIB);
        assert!(b.admits());
        // Given back to the system, the pool is whole again; 100 MiB beside the counts
        // takes 36 MiB of it.
        assert!(!settle(50 * MIB));
        assert_eq!(b.pool(), 512 * MIB);
        settle(100 * MIB);
        assert_eq!(b.pool(), 476 * MIB);
    }

    #[test]
    fn one_reading_moves_the_pool_a_sixteenth_of_the_way() {
        let b = MemoryBudget::with_resident_limit(512 * MIB, 576 * MIB);
        // The first reading is taken whole.
        b.observe_resident(64 * MIB);
        assert_eq!(b.pool(), 512 * MIB);
        // 400 MiB more for one reading (an encoder's moment): the pool gives up a sixteenth
        // of it, and nothing is forced back (under the resident limit).
        assert!(!b.observe_resident(464 * MIB));
        assert_eq!(b.pool(), 576 * MIB - 89 * MIB);
        // Gone at the next: back a sixteenth of the way, rounded towards the reading.
        b.observe_resident(64 * MIB);
        assert_eq!(b.pool(), 576 * MIB - (89 * MIB - (25 * MIB).div_ceil(16)));
        // Over the resident limit, freed memory is forced back.
        assert!(b.observe_resident(577 * MIB));
    }

    #[test]
    fn the_resident_memory_is_read_from_the_system() {
        if cfg!(target_os = "linux") {
            let rss = resident_bytes().expect("statm");
            // A test process holds some megabytes and far less than a terabyte.
            assert!((MIB..(1 << 40)).contains(&rss), "{rss}");
            let b = MemoryBudget::new(512 * MIB);
            assert!(ResidentWatch::new(Arc::clone(&b)).read_once());
            assert!(b.resident() >= MIB);
            // Without a resident limit, the reading changes nothing.
            assert!(!b.observe_resident(1 << 40));
            assert_eq!(b.pool(), 512 * MIB);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_waits_for_memory_given_back_within_the_wait_and_no_longer() {
        let b = MemoryBudget::new(16 * MIB);
        let wait = Duration::from_millis(250);
        let first = b.hold(Holder::Intake, 8 * MIB);
        // Given back 100 ms later: the waiting request is taken.
        let waiting = tokio::spawn({
            let b = Arc::clone(&b);
            async move { wait_for_intake(&b, wait, 1000).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished());
        // The waiting body is counted while it waits; more than the intake's share (2 MiB)
        // waiting is refused at once.
        assert_eq!(b.waiting.load(Ordering::Relaxed), 1000);
        let started = tokio::time::Instant::now();
        assert!(!wait_for_intake(&b, wait, 2 * MIB).await);
        assert_eq!(started.elapsed(), Duration::ZERO);
        drop(first);
        assert!(waiting.await.expect("joins"));
        assert_eq!(b.waiting.load(Ordering::Relaxed), 0);
        // Held past the wait: refused at its deadline, not before.
        let _held = b.hold(Holder::Intake, 8 * MIB);
        let started = tokio::time::Instant::now();
        assert!(!wait_for_intake(&b, wait, 1000).await);
        assert!(started.elapsed() >= wait);
        assert!(started.elapsed() < wait + Duration::from_millis(10));
        assert_eq!(b.waiting.load(Ordering::Relaxed), 0);
        // Room at once: no wait at all.
        assert!(wait_for_intake(&MemoryBudget::new(16 * MIB), wait, 1000).await);
    }

    #[test]
    fn no_holder_is_pushed_below_its_share() {
        let b = MemoryBudget::new(512 * MIB);
        b.set(Holder::Archive, 1000 * MIB);
        for h in [
            Holder::Journal,
            Holder::Assembly,
            Holder::Budgets,
            Holder::Windows,
        ] {
            assert_eq!(b.allowance(h), b.share(h), "{}", h.as_str());
        }
        // The archive itself may still use the pool (less a sixteenth) while the others hold
        // nothing.
        assert_eq!(b.allowance(Holder::Archive), 416 * MIB);
        assert!(b.over(Holder::Archive));
        assert_eq!(b.allowance(Holder::Intake), 0);
        assert!(!b.admits());
    }

    #[test]
    fn a_request_alone_is_kept_however_large_and_one_among_others_only_within_the_allowance() {
        let b = MemoryBudget::new(16 * MIB);
        // The intake's share is 2 MiB; an 8 MiB body (32 MiB held) alone goes on.
        let big = b.hold(Holder::Intake, 32 * MIB);
        assert!(b.keeps(big.bytes()));
        // A small compressed body that turns out large, beside another request: refused.
        let small = b.hold(Holder::Intake, MIB);
        assert!(!b.admits());
        drop(big);
        let mut grown = small;
        grown.resize(8 * MIB);
        assert!(b.keeps(grown.bytes()), "alone again");
        let other = b.hold(Holder::Intake, MIB / 2);
        assert!(!b.keeps(other.bytes()));
        assert!(!b.keeps(grown.bytes()));
        drop(grown);
        assert!(b.keeps(other.bytes()));
    }

    #[test]
    fn held_bytes_are_given_back_when_dropped() {
        let b = MemoryBudget::new(16 * MIB);
        let one = b.hold(Holder::Intake, MIB);
        let two = b.hold(Holder::Intake, MIB);
        assert_eq!(b.held(Holder::Intake), 2 * MIB);
        drop(one);
        assert_eq!(b.held(Holder::Intake), MIB);
        let mut three = b.hold(Holder::Intake, MIB);
        three.resize(3 * MIB);
        assert_eq!(b.held(Holder::Intake), 4 * MIB);
        three.resize(MIB / 2);
        assert_eq!(b.held(Holder::Intake), MIB + MIB / 2);
        drop(three);
        drop(two);
        assert_eq!(b.held(Holder::Intake), 0);
        b.sub(Holder::Intake, 5);
        assert_eq!(b.held(Holder::Intake), 0);
    }

    proptest! {
        /// Holders that stay within their allowances, one change at a time, in any order,
        /// never hold more than the limit together; the intake is always admitted at least
        /// once the others are within their shares.
        #[test]
        fn holders_within_their_allowances_stay_within_the_limit(
            steps in prop::collection::vec((0usize..6, 0usize..600), 1..60),
        ) {
            let b = MemoryBudget::new(512 * MIB);
            for (h, mib) in steps {
                let holder = Holder::ALL[h];
                // A holder grows only up to its allowance, and gives back to it when over.
                let want = mib * MIB;
                let bytes = want.min(b.allowance(holder));
                b.set(holder, bytes);
                for h in Holder::ALL {
                    if b.over(h) {
                        b.set(h, b.allowance(h));
                    }
                }
                prop_assert!(b.total() <= b.limit(), "total {} over {}", b.total(), b.limit());
                let within_shares = Holder::ALL
                    .iter()
                    .filter(|&&h| h != Holder::Intake)
                    .all(|&h| b.held(h) <= b.share(h));
                if within_shares {
                    prop_assert_eq!(b.allowance(Holder::Intake), b.share(Holder::Intake));
                }
            }
        }
    }
}
