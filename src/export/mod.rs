//! Export: forwards the protected stream to downstream OTLP endpoints (gRPC or HTTP/protobuf).
//!
//! The stage owns the `[export]` configuration ([`config`]) and one client per configured
//! endpoint ([`endpoint`]). It promises: only what `protect` produced leaves toolwatch (it reads
//! the journal, never the receivers); a batch is retried as the OTLP specification allows until
//! the endpoint takes it or toolwatch stops, and one the endpoint refuses is counted, not
//! retried; logs and metrics name an endpoint by its configured name, never by its URL, header
//! values or payload values.

pub mod config;
pub mod endpoint;
