//! The `[budget]` section: limits per request, and per tenant and principal over windows.
//!
//! A limit of 0 switches that budget off. Every budget warns at `warning_ratio` of its limit
//! and fires again at the limit.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::HumanDuration;

/// Limits on one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RequestBudgets {
    /// Model calls.
    pub model_turns: u64,
    /// Tool calls in total.
    pub tool_calls: u64,
    /// Tool calls of one tool, by tool name (overrides nothing else; 0 = no per-tool limit).
    pub tool_calls_by_tool: BTreeMap<String, u64>,
    /// Calls of the same tool with the same canonical arguments.
    pub repeated_calls: u64,
    /// Time from the first span's start to the latest span's end.
    pub wall_time: Option<HumanDuration>,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cost in US dollars, from the price table.
    pub cost_usd: f64,
    /// Bytes of tool results (`executor.result_bytes`).
    pub result_bytes: u64,
}

impl Default for RequestBudgets {
    fn default() -> Self {
        RequestBudgets {
            model_turns: 25,
            tool_calls: 50,
            tool_calls_by_tool: BTreeMap::new(),
            repeated_calls: 5,
            wall_time: Some(HumanDuration(Duration::from_secs(600))),
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
            result_bytes: 0,
        }
    }
}

/// Limits over rolling windows for one tenant or one principal.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WindowBudgets {
    /// Input plus output tokens per minute, hour, day.
    pub tokens_per_minute: u64,
    /// See `tokens_per_minute`.
    pub tokens_per_hour: u64,
    /// See `tokens_per_minute`.
    pub tokens_per_day: u64,
    /// Cost in US dollars per minute, hour, day.
    pub cost_usd_per_minute: f64,
    /// See `cost_usd_per_minute`.
    pub cost_usd_per_hour: f64,
    /// See `cost_usd_per_minute`.
    pub cost_usd_per_day: f64,
    /// Tool calls per minute, hour, day.
    pub tool_calls_per_minute: u64,
    /// See `tool_calls_per_minute`.
    pub tool_calls_per_hour: u64,
    /// See `tool_calls_per_minute`.
    pub tool_calls_per_day: u64,
}

/// What one tenant gets instead of the defaults (each section replaces the default section).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TenantBudgets {
    /// Per-request limits for this tenant's requests.
    pub request: Option<RequestBudgets>,
    /// This tenant's windows.
    pub tenant: Option<WindowBudgets>,
    /// Windows for each of this tenant's principals.
    pub principal: Option<WindowBudgets>,
}

/// The `[budget]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetConfig {
    /// Fraction of a limit at which a warning fires (0 < ratio < 1; 1 switches warnings off).
    pub warning_ratio: f64,
    /// Per-request limits.
    pub request: RequestBudgets,
    /// Per-tenant windows.
    pub tenant: WindowBudgets,
    /// Per-principal windows.
    pub principal: WindowBudgets,
    /// A request with no new span for this long is over: its alarms resolve.
    pub request_idle: HumanDuration,
    /// Per-tenant replacements, by tenant id.
    pub tenants: BTreeMap<String, TenantBudgets>,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            warning_ratio: 0.8,
            request: RequestBudgets::default(),
            tenant: WindowBudgets::default(),
            principal: WindowBudgets::default(),
            request_idle: HumanDuration(Duration::from_secs(300)),
            tenants: BTreeMap::new(),
        }
    }
}

/// A budget configuration that cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BudgetError {
    /// The warning ratio is outside (0, 1].
    #[error("budget.warning_ratio must be above 0 and at most 1, got {0}")]
    WarningRatio(f64),
    /// A cost limit is negative or not a number.
    #[error("{0} must be a non-negative number")]
    Cost(String),
}

impl BudgetConfig {
    /// Checks what serde cannot.
    pub fn validate(&self) -> Result<(), BudgetError> {
        if !(self.warning_ratio > 0.0 && self.warning_ratio <= 1.0) {
            return Err(BudgetError::WarningRatio(self.warning_ratio));
        }
        let mut costs = vec![("budget.request.cost_usd".to_string(), self.request.cost_usd)];
        for (scope, w) in [("tenant", &self.tenant), ("principal", &self.principal)] {
            for (name, v) in w.costs() {
                costs.push((format!("budget.{scope}.{name}"), v));
            }
        }
        for (id, t) in &self.tenants {
            if let Some(r) = &t.request {
                costs.push((format!("budget.tenants.{id}.request.cost_usd"), r.cost_usd));
            }
            for (scope, w) in [("tenant", &t.tenant), ("principal", &t.principal)] {
                if let Some(w) = w {
                    for (name, v) in w.costs() {
                        costs.push((format!("budget.tenants.{id}.{scope}.{name}"), v));
                    }
                }
            }
        }
        for (name, v) in costs {
            if !v.is_finite() || v < 0.0 {
                return Err(BudgetError::Cost(name));
            }
        }
        Ok(())
    }

    /// The per-request limits for a tenant.
    pub fn request_for(&self, tenant: &str) -> &RequestBudgets {
        self.tenants
            .get(tenant)
            .and_then(|t| t.request.as_ref())
            .unwrap_or(&self.request)
    }

    /// The tenant windows for a tenant.
    pub fn tenant_for(&self, tenant: &str) -> &WindowBudgets {
        self.tenants
            .get(tenant)
            .and_then(|t| t.tenant.as_ref())
            .unwrap_or(&self.tenant)
    }

    /// The principal windows for a tenant's principals.
    pub fn principal_for(&self, tenant: &str) -> &WindowBudgets {
        self.tenants
            .get(tenant)
            .and_then(|t| t.principal.as_ref())
            .unwrap_or(&self.principal)
    }
}

impl WindowBudgets {
    fn costs(&self) -> [(&'static str, f64); 3] {
        [
            ("cost_usd_per_minute", self.cost_usd_per_minute),
            ("cost_usd_per_hour", self.cost_usd_per_hour),
            ("cost_usd_per_day", self.cost_usd_per_day),
        ]
    }

    /// Every windowed budget that is on: (name, what it counts, window, limit).
    pub fn active(&self) -> Vec<(String, Measure, Duration, f64)> {
        const MINUTE: Duration = Duration::from_secs(60);
        const HOUR: Duration = Duration::from_secs(3600);
        const DAY: Duration = Duration::from_secs(86_400);
        let all = [
            (
                "tokens_per_minute",
                Measure::Tokens,
                MINUTE,
                self.tokens_per_minute as f64,
            ),
            (
                "tokens_per_hour",
                Measure::Tokens,
                HOUR,
                self.tokens_per_hour as f64,
            ),
            (
                "tokens_per_day",
                Measure::Tokens,
                DAY,
                self.tokens_per_day as f64,
            ),
            (
                "cost_usd_per_minute",
                Measure::Cost,
                MINUTE,
                self.cost_usd_per_minute,
            ),
            (
                "cost_usd_per_hour",
                Measure::Cost,
                HOUR,
                self.cost_usd_per_hour,
            ),
            (
                "cost_usd_per_day",
                Measure::Cost,
                DAY,
                self.cost_usd_per_day,
            ),
            (
                "tool_calls_per_minute",
                Measure::ToolCalls,
                MINUTE,
                self.tool_calls_per_minute as f64,
            ),
            (
                "tool_calls_per_hour",
                Measure::ToolCalls,
                HOUR,
                self.tool_calls_per_hour as f64,
            ),
            (
                "tool_calls_per_day",
                Measure::ToolCalls,
                DAY,
                self.tool_calls_per_day as f64,
            ),
        ];
        all.into_iter()
            .filter(|(_, _, _, limit)| *limit > 0.0)
            .map(|(n, m, w, l)| (n.to_string(), m, w, l))
            .collect()
    }
}

/// What a windowed budget counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Input plus output tokens.
    Tokens,
    /// US dollars.
    Cost,
    /// Tool calls.
    ToolCalls,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_catch_a_runaway_loop_and_validate() {
        let c = BudgetConfig::default();
        assert!(c.validate().is_ok());
        assert_eq!(c.request.model_turns, 25);
        assert_eq!(c.request.tool_calls, 50);
        assert_eq!(c.request.repeated_calls, 5);
        assert_eq!(
            c.request.wall_time,
            Some(HumanDuration(Duration::from_secs(600)))
        );
        assert!(
            c.tenant.active().is_empty(),
            "windows are off until configured"
        );
    }

    #[test]
    fn bad_values_are_named() {
        let mut c = BudgetConfig {
            warning_ratio: 1.5,
            ..Default::default()
        };
        assert_eq!(c.validate(), Err(BudgetError::WarningRatio(1.5)));
        c.warning_ratio = 0.8;
        c.tenants.insert(
            "acme".into(),
            TenantBudgets {
                tenant: Some(WindowBudgets {
                    cost_usd_per_day: -1.0,
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        assert_eq!(
            c.validate(),
            Err(BudgetError::Cost(
                "budget.tenants.acme.tenant.cost_usd_per_day".into()
            ))
        );
    }

    #[test]
    fn tenant_sections_replace_the_defaults() {
        let mut c = BudgetConfig::default();
        c.tenants.insert(
            "acme".into(),
            TenantBudgets {
                request: Some(RequestBudgets {
                    tool_calls: 10,
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        assert_eq!(c.request_for("acme").tool_calls, 10);
        assert_eq!(c.request_for("other").tool_calls, 50);
        assert_eq!(c.tenant_for("acme"), &c.tenant);
    }
}
