//! toolwatch's command line ([`cli`]), the SQL over the archive ([`query`], the only code
//! that needs DataFusion), the responder's console over it ([`console`]) and the load client
//! ([`loadgen`], which sends OTLP to a daemon rather than being part of one).
//!
//! The pipeline is the `toolwatch` library (package `toolwatch-core`, in `core/`); its modules
//! are re-exported here under their names, so `crate::archive` reads the same on both sides.
//! Two crates rather than one so that a cold build compiles the pipeline beside DataFusion
//! instead of after it (BENCHMARKS.md, "Where a cold release build goes"). See `DESIGN.md`.

#![deny(missing_docs)]

pub use toolwatch::{
    admin, archive, assemble, budget, clock, config, durable, event, export, findings,
    fuzz_targets, journal, maps, metrics, pipeline, protect, receive, replay, retry, serve,
    tenancy, units,
};

pub mod cli;
pub mod console;
pub mod loadgen;
pub mod query;
