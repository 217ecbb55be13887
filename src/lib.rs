//! toolwatch: an audit daemon for the executors of LLM tool calls.
//!
//! The pipeline's stages are the `toolwatch-core` crate (`core/`), re-exported here under
//! their names (`toolwatch::archive`, `toolwatch::protect`, …); this crate adds the SQL over
//! the archive ([`query`]) and the command line ([`cli`]), the only code that needs DataFusion.
//! Two crates rather than one so that a cold build compiles the pipeline beside DataFusion
//! instead of after it (BENCHMARKS.md, "Where a cold release build goes"). See `DESIGN.md`.

#![deny(missing_docs)]

pub use toolwatch_core::{
    admin, archive, assemble, budget, clock, config, durable, event, export, findings,
    fuzz_targets, journal, loadgen, maps, metrics, pipeline, protect, receive, replay, retry,
    serve, tenancy, units,
};

pub mod cli;
pub mod query;
