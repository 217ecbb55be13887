//! Integration tests: the real `toolwatch` binary over real sockets with real clients.
//! One test binary, because each one links everything.

mod admission;
mod assemble;
mod auth;
mod bad_input;
mod budget;
mod cli;
mod compaction;
mod corpora;
mod dashboards;
mod deploy;
mod durability;
mod engines;
mod export;
mod findings;
mod fresh;
mod harness;
mod hashing;
mod lifecycle;
mod loadgen;
mod matrix;
mod monitoring;
mod object_store;
mod otlp;
mod otlp_json;
mod protect_e2e;
mod python_sdk;
mod query;
mod reload;
mod replay;
mod rust_sdk;
mod scrub;
mod tenancy;
mod tls;
mod verify;
mod writers;
