//! Findings: where a request shows that its executor skipped part of the production
//! checklist (authorize the exact effect, bind confirmations, make writes idempotent, never
//! retry an ambiguous write blindly, do not retry a denial, run only independent calls in
//! parallel, end every loop with a stop reason).
//!
//! The rule engine is a pure function of what assembly keeps of one request (its span and log
//! facts, never attribute values) and its summary: the same request gives the same findings
//! in any arrival order, and a finding's evidence is ids and a reason code only. Rules and
//! their evidence: `schemas/findings.md`. Not yet here: the `findings` table, metrics and
//! alarm delivery, per-tenant rule settings, the tool registry, the confirmation digest
//! computed before redaction, and `secret_in_outbound_call` (the remaining parts).

use std::collections::BTreeMap;

use crate::assemble::summary::{Decision, RequestFacts, RequestSummary, SpanFacts};
use crate::event::{hex_id, SpanClass, SpanId};

/// A rule's setting: off, or on with a severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleSetting {
    /// Not evaluated.
    Off,
    /// On, with this severity.
    Low,
    /// See `Low`.
    Medium,
    /// See `Low`.
    High,
}

/// `[findings]`: which rules run and how much each matters, for every tenant and per tenant.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FindingsConfig {
    /// Rule id → setting, for every tenant (rules not named keep their default severity).
    pub rules: BTreeMap<String, RuleSetting>,
    /// The tools (and their schema versions) every tenant may call; none: `unknown_tool`
    /// and `unknown_tool_version` do not run.
    pub registry: Option<ToolRegistry>,
    /// Per tenant: rule id → setting, over `rules`.
    pub tenants: BTreeMap<String, TenantFindings>,
}

/// `[findings.tenants.<tenant>]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TenantFindings {
    /// Rule id → setting.
    pub rules: BTreeMap<String, RuleSetting>,
    /// The tenant's own registry, instead of `[findings.registry]`.
    pub registry: Option<ToolRegistry>,
}

/// `[findings.registry]`: tool name → the `executor.tool_schema_version`s it may be called
/// with (an empty list: any version).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolRegistry {
    /// Tool name → schema versions.
    pub tools: BTreeMap<String, Vec<String>>,
}

impl FindingsConfig {
    /// Checks every named rule exists.
    pub fn validate(&self) -> Result<(), String> {
        let named = self
            .rules
            .keys()
            .map(|r| (String::from("findings.rules"), r))
            .chain(self.tenants.iter().flat_map(|(t, f)| {
                f.rules
                    .keys()
                    .map(move |r| (format!("findings.tenants.{t}.rules"), r))
            }));
        for (key, rule) in named {
            if !Rule::ALL.iter().any(|r| r.id() == rule) {
                let known: Vec<&str> = Rule::ALL.iter().map(|r| r.id()).collect();
                return Err(format!(
                    "{key}: no rule {rule:?} (rules: {})",
                    known.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// The registry that applies to a tenant: its own, else the shared one.
    pub fn registry_for(&self, tenant: &str) -> Option<&ToolRegistry> {
        self.tenants
            .get(tenant)
            .and_then(|t| t.registry.as_ref())
            .or(self.registry.as_ref())
    }

    /// The findings a tenant's settings keep, with their severities.
    pub fn apply(&self, tenant: &str, findings: Vec<Finding>) -> Vec<Finding> {
        let setting = |rule: Rule| {
            self.tenants
                .get(tenant)
                .and_then(|t| t.rules.get(rule.id()))
                .or_else(|| self.rules.get(rule.id()))
                .copied()
        };
        findings
            .into_iter()
            .filter_map(|mut f| {
                match setting(f.rule) {
                    Some(RuleSetting::Off) => return None,
                    Some(RuleSetting::Low) => f.severity = Severity::Low,
                    Some(RuleSetting::Medium) => f.severity = Severity::Medium,
                    Some(RuleSetting::High) => f.severity = Severity::High,
                    None => {}
                }
                Some(f)
            })
            .collect()
    }
}

/// How much a finding matters by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Worth a look.
    Low,
    /// A checklist item skipped.
    Medium,
    /// A write or high-impact effect without its safeguard.
    High,
}

impl Severity {
    /// The name stored in the `severity` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
        }
    }
}

/// The rules the engine evaluates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// A write or high-impact call ran with no `allow` decision for it.
    WriteWithoutAllow,
    /// A high-impact call ran with no approved confirmation.
    HighImpactWithoutConfirmation,
    /// The approved confirmation's digest is not the digest of what ran.
    ConfirmationDigestMismatch,
    /// A write that ended `timeout` or `error` was attempted again without an idempotency key.
    AmbiguousWriteRetriedWithoutKey,
    /// … or with another key than the first attempt's.
    AmbiguousWriteRetriedWithNewKey,
    /// The same call attempted again after a `deny`.
    RetryAfterDeny,
    /// A call named a resource of another tenant.
    CrossTenantResource,
    /// Two write calls on one resource overlapped in time.
    ParallelWritesSameResource,
    /// A tool not in the tenant's registry.
    UnknownTool,
    /// A registered tool called with a schema version the registry does not list.
    UnknownToolVersion,
    /// The request's root ended without `executor.stop_reason`.
    LoopWithoutStopReason,
    /// The request says it succeeded while its last tool call failed.
    SuccessClaimedAfterFailure,
    /// A value removed from a tool's result came back in a later call's arguments or a
    /// downstream URL or header of the same request.
    SecretInOutboundCall,
    /// The cost the executor claims differs from the one computed from token counts.
    CostDisagrees,
}

impl Rule {
    /// Every rule, in id order.
    pub const ALL: [Rule; 14] = [
        Rule::WriteWithoutAllow,
        Rule::HighImpactWithoutConfirmation,
        Rule::ConfirmationDigestMismatch,
        Rule::AmbiguousWriteRetriedWithoutKey,
        Rule::AmbiguousWriteRetriedWithNewKey,
        Rule::RetryAfterDeny,
        Rule::CrossTenantResource,
        Rule::ParallelWritesSameResource,
        Rule::UnknownTool,
        Rule::UnknownToolVersion,
        Rule::LoopWithoutStopReason,
        Rule::SuccessClaimedAfterFailure,
        Rule::SecretInOutboundCall,
        Rule::CostDisagrees,
    ];

    /// The rule's id.
    pub fn id(self) -> &'static str {
        match self {
            Rule::WriteWithoutAllow => "write_without_allow",
            Rule::HighImpactWithoutConfirmation => "high_impact_without_confirmation",
            Rule::ConfirmationDigestMismatch => "confirmation_digest_mismatch",
            Rule::CrossTenantResource => "cross_tenant_resource",
            Rule::UnknownTool => "unknown_tool",
            Rule::UnknownToolVersion => "unknown_tool_version",
            Rule::SecretInOutboundCall => "secret_in_outbound_call",
            Rule::AmbiguousWriteRetriedWithoutKey => "ambiguous_write_retried_without_key",
            Rule::AmbiguousWriteRetriedWithNewKey => "ambiguous_write_retried_with_new_key",
            Rule::RetryAfterDeny => "retry_after_deny",
            Rule::ParallelWritesSameResource => "parallel_writes_same_resource",
            Rule::LoopWithoutStopReason => "loop_without_stop_reason",
            Rule::SuccessClaimedAfterFailure => "success_claimed_after_failure",
            Rule::CostDisagrees => "cost_disagrees",
        }
    }

    /// Its default severity.
    pub fn severity(self) -> Severity {
        match self {
            Rule::WriteWithoutAllow
            | Rule::HighImpactWithoutConfirmation
            | Rule::ConfirmationDigestMismatch
            | Rule::AmbiguousWriteRetriedWithoutKey
            | Rule::AmbiguousWriteRetriedWithNewKey
            | Rule::CrossTenantResource
            | Rule::SecretInOutboundCall => Severity::High,
            Rule::RetryAfterDeny
            | Rule::ParallelWritesSameResource
            | Rule::UnknownTool
            | Rule::SuccessClaimedAfterFailure => Severity::Medium,
            Rule::LoopWithoutStopReason | Rule::UnknownToolVersion | Rule::CostDisagrees => {
                Severity::Low
            }
        }
    }
}

/// One finding: a rule, where, and why in a reason code; never a payload value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The rule.
    pub rule: Rule,
    /// Its severity.
    pub severity: Severity,
    /// The request's tenant.
    pub tenant: String,
    /// The request.
    pub request_id: String,
    /// Traces of the evidence spans (hex), in order.
    pub trace_ids: Vec<String>,
    /// The evidence spans (hex), in the order the rule names them.
    pub span_ids: Vec<String>,
    /// A short reason code, e.g. `effect=write decision=none`.
    pub reason: String,
}

/// A code for a reason: the value when it is one of `known` (any case, written in lower
/// case), `none` when absent, else `other`. Reasons reach webhooks and alerts; a field an
/// executor fills with free text must not carry that text there.
fn code(value: Option<&str>, known: &[&'static str]) -> &'static str {
    match value {
        None => "none",
        Some(v) => known
            .iter()
            .find(|k| v.eq_ignore_ascii_case(k))
            .copied()
            .unwrap_or("other"),
    }
}

/// Confirmation statuses that count as approved.
const APPROVED: &[&str] = &["approved", "confirmed"];

/// A tool call as the rules see it.
struct Call<'a> {
    span: &'a SpanFacts,
    decision: Decision,
}

impl Call<'_> {
    fn effect(&self) -> Option<&str> {
        self.span.call().effect.as_deref()
    }

    fn writes(&self) -> bool {
        matches!(self.effect(), Some("write" | "high_impact"))
    }

    fn result(&self) -> Option<&str> {
        self.span.result_code.as_deref()
    }

    fn policy(&self) -> Option<&str> {
        self.decision.policy.as_deref()
    }

    fn approved(&self) -> bool {
        self.decision
            .confirmation
            .as_deref()
            .is_some_and(|s| APPROVED.iter().any(|a| s.eq_ignore_ascii_case(a)))
    }

    fn ambiguous(&self) -> bool {
        matches!(self.result(), Some("timeout" | "error"))
            || (self.result().is_none() && self.span.error)
    }
}

/// The findings of one request, in rule order then evidence order.
pub fn evaluate(
    facts: &RequestFacts<'_>,
    summary: &RequestSummary,
    registry: Option<&ToolRegistry>,
) -> Vec<Finding> {
    let calls = calls_of(facts);
    let mut out = call_findings(facts, &calls, registry, false);
    request_end(facts, summary, &calls, &mut out, &maker(facts));
    sort_findings(&mut out);
    out
}

/// The findings the request's calls show so far, without those about its end (stop reason,
/// outcome, cost): what can be decided as the spans arrive. A missing decision or
/// confirmation may still come in a log record, so the rules about them fire here only on a
/// decision the executor stated (the summary decides the rest).
pub fn evaluate_calls(facts: &RequestFacts<'_>, registry: Option<&ToolRegistry>) -> Vec<Finding> {
    let calls = calls_of(facts);
    let mut out = call_findings(facts, &calls, registry, true);
    sort_findings(&mut out);
    out
}

fn sort_findings(out: &mut [Finding]) {
    out.sort_by(|a, b| (a.rule, &a.span_ids).cmp(&(b.rule, &b.span_ids)));
}

/// How a rule turns evidence spans into a finding of this request.
fn maker<'f>(facts: &'f RequestFacts<'_>) -> impl Fn(Rule, &[&SpanFacts], String) -> Finding + 'f {
    move |rule: Rule, spans: &[&SpanFacts], reason: String| Finding {
        rule,
        severity: rule.severity(),
        tenant: facts.tenant.to_string(),
        request_id: facts.request_id.to_string(),
        trace_ids: spans.iter().map(|s| hex_id(&s.trace_id)).collect(),
        span_ids: spans.iter().map(|s| hex_id(&s.span_id)).collect(),
        reason,
    }
}

fn call_findings(
    facts: &RequestFacts<'_>,
    calls: &[Call<'_>],
    registry: Option<&ToolRegistry>,
    early: bool,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let finding = maker(facts);
    for c in calls
        .iter()
        .filter(|c| c.writes() && c.result() == Some("ok"))
    {
        // A decision that asked for a confirmation, which a person then gave, authorized it.
        let confirmed = c.policy() == Some("require_confirmation") && c.approved();
        let undecided = c.policy().is_none()
            || (c.policy() == Some("require_confirmation") && c.decision.confirmation.is_none());
        if early && undecided {
            continue;
        }
        if c.policy() != Some("allow") && !confirmed {
            let reason = format!(
                "effect={} decision={}",
                c.effect().unwrap_or(""),
                code(c.policy(), &["allow", "deny", "require_confirmation"])
            );
            out.push(finding(Rule::WriteWithoutAllow, &[c.span], reason));
        }
    }
    for c in calls
        .iter()
        .filter(|c| c.effect() == Some("high_impact") && c.result() == Some("ok"))
    {
        if early && c.decision.confirmation.is_none() {
            continue;
        }
        if !c.approved() {
            let reason = format!(
                "confirmation={}",
                code(
                    c.decision.confirmation.as_deref(),
                    &[
                        "approved",
                        "confirmed",
                        "rejected",
                        "denied",
                        "pending",
                        "expired"
                    ]
                )
            );
            out.push(finding(
                Rule::HighImpactWithoutConfirmation,
                &[c.span],
                reason,
            ));
        }
    }
    for c in calls
        .iter()
        .filter(|c| c.result() == Some("ok") && c.approved())
    {
        if c.span.call().digest_matches == Some(false) {
            out.push(finding(
                Rule::ConfirmationDigestMismatch,
                &[c.span],
                "digest_differs".into(),
            ));
        }
    }
    for c in calls {
        if c.span
            .call()
            .resource_tenant
            .as_deref()
            .is_some_and(|t| t != facts.tenant)
        {
            out.push(finding(
                Rule::CrossTenantResource,
                &[c.span],
                "resource_tenant_differs".into(),
            ));
        }
    }
    if let Some(registry) = registry {
        registered(registry, calls, &mut out, &finding);
    }
    retries(calls, &mut out, &finding);
    parallel_writes(calls, &mut out, &finding);
    outbound_secrets(calls, facts, &mut out, &finding);
    out
}

/// Calls of tools the registry does not list, or with schema versions it does not list.
fn registered(
    registry: &ToolRegistry,
    calls: &[Call<'_>],
    out: &mut Vec<Finding>,
    finding: &MakeFinding<'_>,
) {
    for c in calls {
        let Some(tool) = c.span.tool.as_deref() else {
            // A call that names no tool is not a registered one.
            out.push(finding(Rule::UnknownTool, &[c.span], "tool=none".into()));
            continue;
        };
        match registry.tools.get(tool) {
            None => out.push(finding(
                Rule::UnknownTool,
                &[c.span],
                "not_in_registry".into(),
            )),
            Some(versions) if !versions.is_empty() => {
                let version = c.span.call().tool_schema_version.as_deref();
                if !version.is_some_and(|v| versions.iter().any(|k| k == v)) {
                    let reason = if version.is_some() {
                        "version_not_in_registry"
                    } else {
                        "version=none"
                    };
                    out.push(finding(Rule::UnknownToolVersion, &[c.span], reason.into()));
                }
            }
            Some(_) => {}
        }
    }
}

/// Spans that send out a credential an earlier tool call of the request returned (their
/// secret-trail fingerprints meet): the call that returned it (the earliest to end, before
/// the span starts), then the span (of any class) that sends it. One finding per span.
fn outbound_secrets(
    calls: &[Call<'_>],
    facts: &RequestFacts<'_>,
    out: &mut Vec<Finding>,
    finding: &MakeFinding<'_>,
) {
    for span in facts.spans.values().filter(|s| !s.secrets_sent.is_empty()) {
        let origin = calls
            .iter()
            .map(|c| c.span)
            .filter(|o| o.span_id != span.span_id && o.end_ns <= span.start_ns)
            .filter(|o| {
                o.call()
                    .secrets_returned
                    .iter()
                    .any(|f| span.secrets_sent.contains(f))
            })
            .min_by_key(|o| (o.end_ns, o.span_id));
        if let Some(o) = origin {
            out.push(finding(
                Rule::SecretInOutboundCall,
                &[o, span],
                "secret_from_result".into(),
            ));
        }
    }
}

/// Tool calls in start order (then span id, so ties do not depend on arrival), each with its
/// decision merged from the span, its events and the log records that name it.
fn calls_of<'a>(facts: &RequestFacts<'a>) -> Vec<Call<'a>> {
    let mut by_span: BTreeMap<SpanId, Decision> = BTreeMap::new();
    for l in facts.logs.values() {
        if let Some(id) = l.span_id {
            by_span.entry(id).or_default().merge(&l.decision);
        }
    }
    let echoes = facts.mcp_echoes();
    let mut calls: Vec<Call<'a>> = facts
        .spans
        .values()
        .filter(|s| s.class == SpanClass::Tool && !echoes.contains(&s.span_id))
        .map(|s| {
            let mut decision = s.decision.clone();
            if let Some(d) = by_span.get(&s.span_id) {
                decision.merge(d);
            }
            Call { span: s, decision }
        })
        .collect();
    calls.sort_by_key(|c| (c.span.start_ns, c.span.span_id));
    calls
}

type MakeFinding<'f> = dyn Fn(Rule, &[&SpanFacts], String) -> Finding + 'f;

/// Ambiguous writes tried again, and denials tried again: calls are "the same" by tool and
/// canonical arguments digest (after redaction, so two redacted secrets compare equal).
fn retries(calls: &[Call<'_>], out: &mut Vec<Finding>, finding: &MakeFinding<'_>) {
    for (i, first) in calls.iter().enumerate() {
        let Some(digest) = first.span.call().call_digest else {
            continue;
        };
        let Some(again) = calls[i + 1..]
            .iter()
            .find(|c| c.span.call().call_digest == Some(digest))
        else {
            continue;
        };
        if first.policy() == Some("deny") || first.result() == Some("denied") {
            out.push(finding(
                Rule::RetryAfterDeny,
                &[first.span, again.span],
                "same_call_after_deny".into(),
            ));
            continue;
        }
        if !(first.writes() && first.ambiguous()) {
            continue;
        }
        match (
            first.span.call().idempotency_key.as_deref(),
            again.span.call().idempotency_key.as_deref(),
        ) {
            (_, None) | (None, _) => out.push(finding(
                Rule::AmbiguousWriteRetriedWithoutKey,
                &[first.span, again.span],
                format!("first={} key=none", first.result().unwrap_or("error")),
            )),
            (Some(a), Some(b)) if a != b => out.push(finding(
                Rule::AmbiguousWriteRetriedWithNewKey,
                &[first.span, again.span],
                format!("first={} key=changed", first.result().unwrap_or("error")),
            )),
            _ => {}
        }
    }
}

/// Write calls on one resource whose times overlap (each pair once, earlier first).
fn parallel_writes(calls: &[Call<'_>], out: &mut Vec<Finding>, finding: &MakeFinding<'_>) {
    let writes: Vec<&Call<'_>> = calls
        .iter()
        .filter(|c| c.writes() && c.span.call().resource_id.is_some())
        .collect();
    for (i, a) in writes.iter().enumerate() {
        for b in &writes[i + 1..] {
            if a.span.call().resource_id == b.span.call().resource_id
                && b.span.start_ns < a.span.end_ns
            {
                out.push(finding(
                    Rule::ParallelWritesSameResource,
                    &[a.span, b.span],
                    "overlapping_writes".into(),
                ));
            }
        }
    }
}

/// The end of the loop: a stop reason, an honest outcome, the cost.
fn request_end(
    facts: &RequestFacts<'_>,
    summary: &RequestSummary,
    calls: &[Call<'_>],
    out: &mut Vec<Finding>,
    finding: &MakeFinding<'_>,
) {
    // The root: a span without a parent, the earliest if several.
    let root = facts
        .spans
        .values()
        .filter(|s| s.parent.is_none())
        .min_by_key(|s| (s.start_ns, s.span_id));
    if let Some(root) = root {
        let logged = facts
            .logs
            .values()
            .any(|l| l.span_id == Some(root.span_id) && l.stop_reason.is_some());
        if root.stop_reason.is_none() && !logged {
            out.push(finding(
                Rule::LoopWithoutStopReason,
                &[root],
                "stop_reason=none".into(),
            ));
        }
        // What the executor says of itself: a `completed` stop, or an `ok` result on the root.
        let claims_success = matches!(summary.stop_reason.as_deref(), Some("completed"))
            || root.result_code.as_deref() == Some("ok");
        if let Some(last) = calls.last() {
            // A denial or a cancellation is an answer, not a failure the loop should hide.
            let failed =
                matches!(last.result(), Some("error" | "timeout" | "invalid")) || last.span.error;
            if claims_success && failed {
                out.push(finding(
                    Rule::SuccessClaimedAfterFailure,
                    &[root, last.span],
                    format!(
                        "last_call={}",
                        // A span in error without a result code failed with an `error`.
                        code(
                            Some(last.result().unwrap_or("error")),
                            &["error", "timeout", "invalid"]
                        )
                    ),
                ));
            }
        }
        if summary.cost_disagrees {
            out.push(finding(
                Rule::CostDisagrees,
                &[root],
                "claimed_vs_computed".into(),
            ));
        }
    }
}

pub mod notice;
pub mod rows;

#[cfg(test)]
mod tests;
