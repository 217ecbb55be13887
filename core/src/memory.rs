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
//! The bytes are estimates of heap memory, counted where the data is held; what no holder
//! counts (code, the rules' automata, thread stacks, the allocator's slack) is outside the
//! limit.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

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
    held: [AtomicUsize; Holder::ALL.len()],
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit,
            held: Default::default(),
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
        (self.limit / 16).saturating_mul(holder.sixteenths())
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
        let intake_share = self.share(Holder::Intake);
        match holder {
            Holder::Intake => intake_share.min(self.limit.saturating_sub(consumers)),
            _ => {
                let others = consumers - held[holder.index()];
                let pool = self.limit.saturating_sub(intake_share);
                // A borrower leaves a sixteenth free: a stage coming back for its share then
                // does not squeeze the intake before the borrower has given back.
                let lendable = pool.saturating_sub(others).saturating_sub(self.limit / 16);
                self.share(holder).max(lendable)
            }
        }
    }

    /// True when the holders together hold more than the limit (a borrower has not given
    /// back yet): every stage that can give back should.
    pub fn over_limit(&self) -> bool {
        self.total() > self.limit
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
