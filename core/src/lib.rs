//! toolwatch's pipeline: an audit daemon for the executors of LLM tool calls.
//!
//! Executors stream OTLP traces and logs; toolwatch normalizes them into one event model
//! ([`event`]), protects them ([`protect`]), and archives them as partitioned Parquet
//! ([`archive`]). See `DESIGN.md` for the whole pipeline. The command line, the SQL over
//! the archive and the load client (`toolwatch loadgen`) are the `toolwatch_cli` library of the
//! root package, beside the binary.

#![deny(missing_docs)]

pub mod admin;
pub mod archive;
pub mod assemble;
pub mod budget;
pub mod clock;
pub mod config;
pub mod durable;
pub mod event;
pub mod export;
pub mod findings;
pub mod fuzz_targets;
pub mod journal;
pub mod maps;
pub mod memory;
pub mod metrics;
pub mod pipeline;
pub mod protect;
pub mod receive;
pub mod replay;
pub mod retry;
pub mod serve;
pub mod tenancy;
pub mod units;
