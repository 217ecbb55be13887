//! Export: forwards the protected stream to downstream OTLP endpoints (gRPC or HTTP/protobuf).
//!
//! The stage owns the `[export]` configuration ([`config`]), one client per configured
//! endpoint ([`endpoint`]), the conversion of protected events back to OTLP ([`encode`]) and
//! one journal consumer per endpoint ([`consumer`]). It promises: only what `protect` produced
//! leaves toolwatch (it reads the journal, never the receivers); each endpoint resumes from its
//! own checkpoint, so a downstream outage or a crash loses nothing the journal still holds
//! (delivery is at least once); a batch is retried as the OTLP specification allows until the
//! endpoint takes it or toolwatch stops, and one the endpoint refuses is counted, not retried;
//! logs and metrics name an endpoint by its configured name, never by its URL, header values or
//! payload values.

pub mod config;
pub mod consumer;
pub mod encode;
pub mod endpoint;
