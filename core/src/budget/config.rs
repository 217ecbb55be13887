//! The `[budget]` section: limits per request, and per tenant and principal over windows.
//!
//! A limit of 0 switches that budget off. Every budget warns at `warning_ratio` of its limit
//! and fires again at the limit.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::units::HumanDuration;

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
    /// Time from the first span's start to the latest span's end (`"0s"` = off).
    pub wall_time: LimitDuration,
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
            wall_time: LimitDuration(Duration::from_secs(600)),
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
            result_bytes: 0,
        }
    }
}

pub use crate::units::LimitDuration;

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
    /// This tenant's warning ratio, instead of `budget.warning_ratio`.
    pub warning_ratio: Option<f64>,
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
    /// Requests tracked at once (about 3 KB each); past this the least recently active are
    /// resolved and forgotten early.
    pub max_requests: usize,
    /// How often window state is saved under `<data_dir>/state/` (also saved at shutdown).
    pub save_interval: HumanDuration,
    /// Per-tenant replacements, by tenant id.
    pub tenants: BTreeMap<String, TenantBudgets>,
    /// Where alarms are delivered besides the archive and `/metrics`.
    pub webhooks: Vec<WebhookTarget>,
}

/// The body a webhook target receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WebhookFormat {
    /// toolwatch's own JSON: `{"source":"toolwatch","alarms":[…]}`.
    Json,
    /// Prometheus Alertmanager's `POST /api/v2/alerts` (the URL is the Alertmanager's base,
    /// e.g. `http://alertmanager:9093`).
    Alertmanager,
}

/// One place alarms are sent to, with its retry policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookTarget {
    /// Names the target in metrics and logs (the URL may hold credentials, so it never does).
    pub name: String,
    /// `http://host:port/path`.
    pub url: String,
    /// Body format.
    #[serde(default = "default_format")]
    pub format: WebhookFormat,
    /// Extra request headers (e.g. `Authorization`); never logged or printed.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Time allowed for one attempt.
    #[serde(default = "default_timeout")]
    pub timeout: HumanDuration,
    /// Attempts per batch before it is given up (counted as failed).
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    /// First retry delay; doubles per attempt up to `max_backoff` (a `Retry-After` answer
    /// is honoured up to `max_backoff`).
    #[serde(default = "default_initial_backoff")]
    pub initial_backoff: HumanDuration,
    /// Longest delay between attempts.
    #[serde(default = "default_max_backoff")]
    pub max_backoff: HumanDuration,
    /// Alarms waiting for this target; beyond this new alarms are dropped (counted), so a dead
    /// target never holds up evaluation or ingestion.
    #[serde(default = "default_queue")]
    pub queue_alarms: usize,
    /// Alertmanager only: firing alerts are re-sent this often (Alertmanager resolves alerts it
    /// has not heard of for a while).
    #[serde(default = "default_resend")]
    pub resend_interval: HumanDuration,
    /// Send findings (`schemas/findings.md`) to this target too, not only budget alarms.
    #[serde(default = "default_findings")]
    pub findings: bool,
    /// Alertmanager only: how long a finding's alert stays active (it is sent once, not
    /// re-sent; a withdrawn finding resolves it at once).
    #[serde(default = "default_finding_alert_for")]
    pub finding_alert_for: HumanDuration,
}

fn default_findings() -> bool {
    true
}
fn default_finding_alert_for() -> HumanDuration {
    HumanDuration(Duration::from_secs(3600))
}

fn default_format() -> WebhookFormat {
    WebhookFormat::Json
}
fn default_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(5))
}
fn default_attempts() -> u32 {
    8
}
fn default_initial_backoff() -> HumanDuration {
    HumanDuration(Duration::from_millis(500))
}
fn default_max_backoff() -> HumanDuration {
    HumanDuration(Duration::from_secs(30))
}
fn default_queue() -> usize {
    10_000
}
fn default_resend() -> HumanDuration {
    HumanDuration(Duration::from_secs(60))
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            warning_ratio: 0.8,
            request: RequestBudgets::default(),
            tenant: WindowBudgets::default(),
            principal: WindowBudgets::default(),
            request_idle: HumanDuration(Duration::from_secs(300)),
            max_requests: 50_000,
            save_interval: HumanDuration(Duration::from_secs(5)),
            tenants: BTreeMap::new(),
            webhooks: Vec::new(),
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
    /// A webhook target cannot work.
    #[error("budget.webhooks[{index}] ({name}): {message}")]
    Webhook {
        /// Position in the list.
        index: usize,
        /// The target's name.
        name: String,
        /// What is wrong.
        message: String,
    },
}

impl BudgetConfig {
    /// Checks what serde cannot.
    pub fn validate(&self) -> Result<(), BudgetError> {
        let ratios = std::iter::once(self.warning_ratio)
            .chain(self.tenants.values().filter_map(|t| t.warning_ratio));
        for r in ratios {
            if !(r > 0.0 && r <= 1.0) {
                return Err(BudgetError::WarningRatio(r));
            }
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
        let mut names = std::collections::HashSet::new();
        for (index, w) in self.webhooks.iter().enumerate() {
            let fail = |message: String| BudgetError::Webhook {
                index,
                name: w.name.clone(),
                message,
            };
            if w.name.is_empty()
                || !w
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return Err(fail(
                    "name must be non-empty letters, digits, '-', '_' or '.'".into(),
                ));
            }
            if !names.insert(w.name.as_str()) {
                return Err(fail("another target has the same name".into()));
            }
            w.endpoint().map_err(fail)?;
            if w.max_attempts == 0 {
                return Err(fail("max_attempts must be at least 1".into()));
            }
            if w.queue_alarms == 0 {
                return Err(fail("queue_alarms must be at least 1".into()));
            }
            // Bounds that keep the doubling backoff and the resend timer far from overflow.
            const HOUR: Duration = Duration::from_secs(3600);
            if w.max_backoff.0 > HOUR || w.initial_backoff.0 > w.max_backoff.0 {
                return Err(fail(
                    "backoff must satisfy initial_backoff <= max_backoff <= 1h".into(),
                ));
            }
            if w.timeout.0 > HOUR || w.resend_interval.0 > 24 * HOUR {
                return Err(fail(
                    "timeout must be at most 1h and resend_interval at most 24h".into(),
                ));
            }
            for (k, v) in &w.headers {
                let valid = reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_ok()
                    && reqwest::header::HeaderValue::from_str(v).is_ok();
                if !valid {
                    // The value is not quoted: it is usually a credential.
                    return Err(fail(format!("header `{k}` is not a valid HTTP header")));
                }
            }
        }
        Ok(())
    }

    /// The warning ratio for a tenant.
    pub fn warning_ratio_for(&self, tenant: &str) -> f64 {
        self.tenants
            .get(tenant)
            .and_then(|t| t.warning_ratio)
            .unwrap_or(self.warning_ratio)
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

impl WebhookTarget {
    /// The URL alarms are posted to: for Alertmanager, its `/api/v2/alerts` below the base.
    /// Only `http://` is supported (TLS comes with the OTLP export's client).
    pub fn endpoint(&self) -> Result<reqwest::Url, String> {
        let url = reqwest::Url::parse(&self.url).map_err(|e| format!("url does not parse: {e}"))?;
        if url.scheme() != "http" {
            return Err(format!(
                "url scheme `{}` is not supported; use http:// (https is not built in yet)",
                url.scheme()
            ));
        }
        match self.format {
            WebhookFormat::Json => Ok(url),
            WebhookFormat::Alertmanager => {
                let base = url.as_str().trim_end_matches('/');
                let full = if base.ends_with("/api/v2/alerts") {
                    base.to_string()
                } else {
                    format!("{base}/api/v2/alerts")
                };
                reqwest::Url::parse(&full).map_err(|e| format!("url does not parse: {e}"))
            }
        }
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

    /// Every windowed budget that is on.
    pub fn active(&self) -> Vec<WindowBudget> {
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
            .map(|(name, measure, span, limit)| WindowBudget {
                name,
                measure,
                span,
                limit,
            })
            .collect()
    }
}

/// One windowed budget that is on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowBudget {
    /// `tokens_per_minute`, …
    pub name: &'static str,
    /// What it counts.
    pub measure: Measure,
    /// The window's length.
    pub span: Duration,
    /// The limit.
    pub limit: f64,
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
        assert_eq!(c.request.wall_time, LimitDuration(Duration::from_secs(600)));
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
