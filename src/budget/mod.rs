//! Budget: limits on what requests, tenants and principals spend, evaluated as spans arrive.
//!
//! The building blocks so far: rolling windows over event time for per-tenant and
//! per-principal budgets ([`window`]), and the canonical digest of a tool call's arguments for
//! the repeated-call budget ([`digest`]). Evaluation, alarms and their delivery come next
//! (issue 5).

pub mod digest;
pub mod window;
