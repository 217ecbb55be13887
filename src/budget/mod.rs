//! Budget: limits on what requests, tenants and principals spend, evaluated as spans arrive.
//!
//! Built so far: the `[budget]` configuration ([`config`]), rolling windows over event time
//! for per-tenant and per-principal budgets ([`window`]), the canonical digest of a tool call's
//! arguments for the repeated-call budget ([`digest`]), and the streaming evaluator that turns
//! usage into alarms that fire once per level and resolve ([`evaluate`]). Not yet: wiring into
//! `serve`, the `alarms` table, metrics, webhooks and Alertmanager, persistence across
//! restarts, dashboards (issue 5).

pub mod config;
pub mod digest;
pub mod evaluate;
pub mod window;
