//! The secret trail: keyed fingerprints of the credentials protect removes from a tool call's
//! result and from what a span sends out (a call's arguments, a URL, a request header), so
//! assembly can tell when a secret a tool returned leaves again later in the same request
//! (`secret_in_outbound_call`, `schemas/findings.md`).
//!
//! Only credentials count: values removed by a rule that learns what it removes (a secret in
//! context) and values removed because the tenant learned them. A fingerprint is 64 bits of an
//! HMAC under the daemon's hash key (domain separated from idempotency hashes): equal values
//! give equal fingerprints, and without the key a fingerprint confirms no guess.
//!
//! Collection costs nothing where nothing is found: a field is marked on the thread, and only
//! a credential removed while it is marked is copied (and fingerprinted afterwards).

use std::cell::{Cell, RefCell};

use super::KeyedHasher;

/// What the field being protected on this thread is, for the trail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// A tool call's result: what it returned.
    Returned,
    /// A call's arguments: what it sends out.
    Sent,
    /// A span's attributes: what it sends out, for the URL and request-header keys only.
    SentInAttributes,
}

thread_local! {
    static SIDE: Cell<Option<Side>> = const { Cell::new(None) };
    /// In [`Side::SentInAttributes`]: the string being scanned is under an outbound key.
    static OUTBOUND_KEY: Cell<bool> = const { Cell::new(false) };
    static FOUND: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Resets the thread's trail even if protection panics (protect catches the unwind and goes
/// on with the next item on this thread).
struct Reset;

impl Drop for Reset {
    fn drop(&mut self) {
        SIDE.with(|s| s.set(None));
        OUTBOUND_KEY.with(|k| k.set(false));
        FOUND.with(|f| f.borrow_mut().clear());
    }
}

/// Attributes that carry what a span sends out: a downstream URL and request headers.
pub fn outbound_key(key: &str) -> bool {
    matches!(
        key,
        "url.full" | "url.original" | "url.path" | "url.query" | "http.url" | "http.target"
    ) || key.starts_with("http.request.header.")
}

/// Runs `f` (protecting one field of side `side`) and returns the fingerprints (under
/// `hasher`'s key) of the credentials it removed, each once.
pub fn collect<R>(side: Side, hasher: &KeyedHasher, f: impl FnOnce() -> R) -> (R, Vec<u64>) {
    let reset = Reset;
    SIDE.with(|s| s.set(Some(side)));
    let out = f();
    let found = FOUND.with(|v| std::mem::take(&mut *v.borrow_mut()));
    drop(reset);
    // A dump repeats its credentials: each is fingerprinted (an HMAC) once.
    let distinct: crate::maps::FastSet<&str> = found.iter().map(String::as_str).collect();
    let mut fps: Vec<u64> = distinct.iter().map(|v| hasher.fingerprint(v)).collect();
    fps.sort_unstable();
    fps.dedup();
    (out, fps)
}

/// Marks the string about to be scanned as one under `key` (the engine calls this for every
/// string it scans; it matters only while attributes are collected).
pub fn scanning_under(key: Option<&str>) {
    if SIDE.with(Cell::get) == Some(Side::SentInAttributes) {
        OUTBOUND_KEY.with(|k| k.set(key.is_some_and(outbound_key)));
    }
}

/// Notes a credential removed (a value a rule learns, or a learned value found again), if a
/// field is being collected.
pub fn note(value: &str) {
    let keep = match SIDE.with(Cell::get) {
        None => false,
        Some(Side::SentInAttributes) => OUTBOUND_KEY.with(Cell::get),
        Some(_) => true,
    };
    if keep {
        FOUND.with(|v| v.borrow_mut().push(value.to_string()));
    }
}

/// Fingerprints as an attribute value: 16 hex digits each, comma-separated.
pub fn to_text(fps: &[u64]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(fps.len() * 17);
    for (i, f) in fps.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // Writing to a String cannot fail.
        let _ = write!(out, "{f:016x}");
    }
    out
}

/// The fingerprints of an attribute value written by [`to_text`] (others skipped).
pub fn from_text(text: &str) -> Box<[u64]> {
    text.split(',')
        .filter(|h| h.len() == 16)
        .filter_map(|h| u64::from_str_radix(h, 16).ok())
        .collect()
}
