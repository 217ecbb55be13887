//! Integration tests: the real `toolwatch` binary over real sockets with real clients.
//! One test binary, because each one links everything.

mod assemble;
mod bad_input;
mod cli;
mod corpora;
mod harness;
mod hashing;
mod lifecycle;
mod loadgen;
mod otlp_json;
mod protect_e2e;
mod python_sdk;
mod query;
mod rust_sdk;
