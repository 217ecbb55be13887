use proptest::prelude::*;

use super::prices::{ModelPrice, PriceTable};
use super::summary::Completeness;
use super::*;
use crate::event::{
    fixtures, AttrValue, EventBatch, LogRecord, SpanClass, SpanKind, SpanRecord, StatusCode,
};

const T1: TraceId = [0x11; 16];
const T2: TraceId = [0x22; 16];

fn prices() -> PriceTable {
    PriceTable(vec![ModelPrice {
        provider: "openai".into(),
        model: "gpt-4o".into(),
        input_per_million: 2.5,
        output_per_million: 10.0,
        cached_input_per_million: None,
    }])
}

fn config() -> AssembleConfig {
    AssembleConfig {
        quiet_period: HumanDuration(Duration::from_secs(5)),
        max_age: HumanDuration(Duration::from_secs(60)),
        amend_window: HumanDuration(Duration::from_secs(120)),
        max_requests: PositiveUsize(1000),
        max_spans: PositiveUsize(100_000),
        prices_file: String::new(),
    }
}

fn span(trace: TraceId, id: u8, parent: Option<u8>, class: SpanClass) -> SpanRecord {
    let mut s = fixtures::span();
    s.tenant = "acme".into();
    s.trace_id = trace;
    s.span_id = [id; 8];
    s.parent_span_id = parent.map(|p| [p; 8]);
    s.class = class;
    s.start_ns = 1_000 + i64::from(id) * 10;
    s.end_ns = 2_000 + i64::from(id) * 10;
    s
}

/// One agent run: root agent span (named request), two model turns, a tool call denied by
/// policy (on the span, a span event and a log record), an approved call with a retry and a
/// timeout, and a downstream call from another service that does not know the request id.
fn request() -> (Vec<SpanRecord>, Vec<LogRecord>) {
    let mut root = span(T1, 1, None, SpanClass::Agent);
    root.audit.request_id = Some("req-1".into());
    root.audit.principal_id = Some("user-7".into());
    root.audit.stop_reason = Some("completed".into());
    root.audit.claimed_cost_usd = Some(0.0175);
    let mut m1 = span(T1, 2, Some(1), SpanClass::Model);
    m1.audit.request_id = Some("req-1".into());
    m1.gen_ai.provider = Some("openai".into());
    m1.gen_ai.request_model = Some("gpt-4o".into());
    m1.gen_ai.input_tokens = Some(1_000);
    m1.gen_ai.output_tokens = Some(500);
    let mut m2 = m1.clone();
    m2.span_id = [3; 8];
    m2.gen_ai.input_tokens = Some(2_000);
    m2.gen_ai.output_tokens = Some(750);
    let mut denied = span(T1, 4, Some(1), SpanClass::Tool);
    denied.audit.request_id = Some("req-1".into());
    denied.gen_ai.tool_name = Some("delete_account".into());
    denied.audit.policy_decision = Some("deny".into());
    denied.events.push(crate::event::SpanEventRecord {
        time_ns: 1_045,
        name: "executor.policy_decision".into(),
        attributes: crate::event::Attributes(vec![(
            "executor.policy_decision".into(),
            AttrValue::Str("deny".into()),
        )]),
    });
    let mut write = span(T1, 5, Some(1), SpanClass::Tool);
    write.audit.request_id = Some("req-1".into());
    write.gen_ai.tool_name = Some("refund_order".into());
    write.audit.policy_decision = Some("require_confirmation".into());
    write.audit.confirmation_status = Some("approved".into());
    let mut retry = write.clone();
    retry.span_id = [6; 8];
    retry.audit.retry_attempt = Some(1);
    retry.audit.result_code = Some("timeout".into());
    retry.status_code = StatusCode::Error;
    // The downstream service's span: same trace, no request id, different clock.
    let mut db = span(T1, 7, Some(6), SpanClass::Downstream);
    db.start_ns -= 500;
    let mut log = fixtures::log();
    log.tenant = "acme".into();
    log.trace_id = Some(T1);
    log.span_id = Some([4; 8]);
    log.time_ns = 1_046;
    log.audit.policy_decision = Some("deny".into());
    log.severity_number = 13;
    (vec![root, m1, m2, denied, write, retry, db], vec![log])
}

fn run(batches: Vec<EventBatch>) -> Vec<RequestSummary> {
    let mut a = Assembler::new(config(), prices());
    let mut out = Vec::new();
    for (i, b) in batches.iter().enumerate() {
        out.extend(a.ingest(b, i as u64));
    }
    out.extend(a.due(1_000_000));
    out
}

fn batch(spans: Vec<SpanRecord>, logs: Vec<LogRecord>) -> EventBatch {
    EventBatch { spans, logs }
}

#[test]
fn a_request_is_summarized_with_exact_counts() {
    let (spans, logs) = request();
    let out = run(vec![batch(spans, logs)]);
    assert_eq!(out.len(), 1);
    let s = &out[0];
    assert_eq!(s.request_id, "req-1");
    assert_eq!(s.trace_ids, vec![hex_id(&T1)]);
    assert_eq!(s.tenant, "acme");
    assert_eq!(s.principal_id.as_deref(), Some("user-7"));
    assert_eq!(s.completeness, Completeness::Complete);
    assert_eq!(s.summary_version, 1);
    assert_eq!(s.span_count, 7);
    assert_eq!(s.orphan_count, 0);
    assert_eq!(s.model_turns, 2);
    assert_eq!(s.tool_calls, 3);
    assert_eq!(
        s.tool_calls_by_tool,
        BTreeMap::from([("delete_account".into(), 1), ("refund_order".into(), 2)])
    );
    assert_eq!(s.downstream_calls, 1);
    assert_eq!((s.input_tokens, s.output_tokens), (3_000, 1_250));
    // 3,000 in at 2.5/M + 1,250 out at 10/M.
    assert!((s.cost_usd - 0.02).abs() < 1e-12, "{}", s.cost_usd);
    assert_eq!(s.claimed_cost_usd, Some(0.0175));
    assert!(!s.cost_disagrees, "0.25 cents apart is rounding");
    // The denial is on the span, its event and a log record: one decision.
    assert_eq!(s.denials, 1);
    assert_eq!(s.confirmations_requested, 2);
    assert_eq!(s.confirmations_approved, 2);
    assert_eq!((s.retries, s.timeouts, s.errors), (1, 1, 1));
    assert_eq!(s.stop_reason.as_deref(), Some("completed"));
    assert_eq!(s.outcome, "ok");
    assert_eq!((s.start_ns, s.end_ns), (570, 2_070));
}

#[test]
fn a_claim_far_from_the_computed_cost_is_flagged() {
    let (mut spans, logs) = request();
    spans[0].audit.claimed_cost_usd = Some(0.5);
    let s = &run(vec![batch(spans, logs)])[0];
    assert_eq!(s.claimed_cost_usd, Some(0.5));
    assert!(s.cost_disagrees);
}

#[test]
fn a_late_span_amends_the_summary() {
    let (spans, logs) = request();
    let mut a = Assembler::new(config(), prices());
    a.ingest(&batch(spans, logs), 0);
    assert!(a.due(4_999).is_empty(), "still within the quiet period");
    let first = a.due(5_000);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].completeness, Completeness::Complete);
    let mut late = span(T1, 8, Some(1), SpanClass::Model);
    late.gen_ai.input_tokens = Some(10);
    a.ingest(&batch(vec![late], vec![]), 6_000);
    assert!(a.due(6_001).is_empty());
    let second = a.due(11_000);
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].completeness, Completeness::Amended);
    assert_eq!(second[0].summary_version, 2);
    assert_eq!(second[0].span_count, 8);
    assert_eq!(second[0].model_turns, 3);
    assert_eq!(second[0].unpriced_model_turns, 1);
    // A duplicate of a span already counted changes nothing and amends nothing.
    let (again, _) = request();
    a.ingest(&batch(vec![again[2].clone()], vec![]), 12_000);
    assert!(a.due(20_000).is_empty());
    assert_eq!(a.stats().duplicate_spans, 1);
    // After the amend window the request is forgotten.
    a.due(200_000);
    assert_eq!(a.requests_held(), 0);
    assert_eq!(a.spans_held(), 0);
}

#[test]
fn spans_whose_parent_never_arrives_are_orphans() {
    let (spans, logs) = request();
    // Without span 6, the downstream span 7 has no parent.
    let spans: Vec<_> = spans.into_iter().filter(|s| s.span_id != [6; 8]).collect();
    let s = &run(vec![batch(spans, logs)])[0];
    assert_eq!(s.span_count, 6);
    assert_eq!(s.orphan_count, 1);
}

#[test]
fn traces_with_the_same_request_id_are_one_request() {
    let (spans, logs) = request();
    // A follow-up trace: its first span has no request id, a later one names it.
    let mut follow = span(T2, 20, Some(1), SpanClass::Tool);
    follow.gen_ai.tool_name = Some("notify".into());
    let mut follow_child = span(T2, 21, Some(20), SpanClass::Downstream);
    follow_child.audit.request_id = Some("req-1".into());
    let out = run(vec![
        batch(vec![follow], vec![]),
        batch(spans, logs),
        batch(vec![follow_child], vec![]),
    ]);
    assert_eq!(out.len(), 1, "{out:?}");
    let s = &out[0];
    assert_eq!(s.trace_ids, vec![hex_id(&T1), hex_id(&T2)]);
    assert_eq!(s.span_count, 9);
    assert_eq!(s.tool_calls, 4);
    // Span 20's parent (span 1) is in the request, though in another trace.
    assert_eq!(s.orphan_count, 0);
}

#[test]
fn a_request_whose_root_never_arrives_times_out() {
    let (spans, logs) = request();
    let spans: Vec<_> = spans.into_iter().filter(|s| s.span_id != [1; 8]).collect();
    let mut a = Assembler::new(config(), prices());
    a.ingest(&batch(spans, logs), 0);
    assert!(a.due(59_999).is_empty());
    let out = a.due(60_000);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].completeness, Completeness::TimedOut);
    assert_eq!(out[0].orphan_count, 5, "spans 2 to 6 name the missing root");
}

#[test]
fn the_oldest_request_is_evicted_under_a_tiny_limit() {
    let mut a = Assembler::new(
        AssembleConfig {
            max_requests: PositiveUsize(2),
            ..config()
        },
        prices(),
    );
    let mut out = Vec::new();
    for (i, t) in [[1u8; 16], [2; 16], [3; 16]].iter().enumerate() {
        let mut s = span(*t, 1, None, SpanClass::Agent);
        s.audit.request_id = Some(format!("req-{i}"));
        out.extend(a.ingest(&batch(vec![s], vec![]), i as u64));
    }
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].request_id, "req-0");
    assert_eq!(out[0].completeness, Completeness::Evicted);
    assert_eq!(a.requests_held(), 2);
    assert_eq!(a.stats().evicted_requests, 1);
    let rest = a.due(1_000_000);
    assert_eq!(
        rest.iter()
            .map(|s| s.request_id.as_str())
            .collect::<Vec<_>>(),
        ["req-1", "req-2"]
    );
    // Remembered (summarized) requests make room before open ones are evicted.
    let mut s = span([4; 16], 1, None, SpanClass::Agent);
    s.audit.request_id = Some("req-3".into());
    assert!(a.ingest(&batch(vec![s], vec![]), 1_000_001).is_empty());
    assert_eq!(a.stats().evicted_requests, 1);
}

#[test]
fn span_limit_evicts_too() {
    let mut a = Assembler::new(
        AssembleConfig {
            max_spans: PositiveUsize(3),
            ..config()
        },
        prices(),
    );
    let (spans, logs) = request();
    let out = a.ingest(&batch(spans, logs), 0);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].completeness, Completeness::Evicted);
    assert_eq!(out[0].span_count, 7);
    assert_eq!(a.spans_held(), 0);
}

#[test]
fn over_its_memory_allowance_assembly_evicts_and_within_it_holds() {
    use crate::memory::{Holder, MemoryBudget};
    // 16 KiB: assembly's share is 3 KiB, less than one request of 8 items (about 4.6 KiB).
    let memory = MemoryBudget::new(16 << 10);
    let mut a = Assembler::new(config(), prices()).with_memory(Arc::clone(&memory));
    let (spans, logs) = request();
    // Alone it may borrow what the others leave (14 KiB): the request is held.
    assert!(a.ingest(&batch(spans, logs), 0).is_empty());
    assert_eq!(a.spans_held(), 8);
    assert_eq!(memory.held(Holder::Assembly), 8 * 530 + 400);
    // The archive comes for its share and more: assembly is back to its own (3 KiB) and
    // gives it back at its next tick, with no record coming.
    memory.set(Holder::Archive, 11 << 10);
    assert_eq!(memory.allowance(Holder::Assembly), 3 << 10);
    let out = a.due(1);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].completeness, Completeness::Evicted);
    assert_eq!(out[0].span_count, 7);
    assert_eq!(a.spans_held(), 0);
    assert_eq!(memory.held(Holder::Assembly), 0);
    // The same at a record: a fresh assembler under such a budget evicts at once.
    let other = MemoryBudget::new(16 << 10);
    other.set(Holder::Archive, 11 << 10);
    let mut b = Assembler::new(config(), prices()).with_memory(Arc::clone(&other));
    let (spans, logs) = request();
    let out = b.ingest(&batch(spans, logs), 0);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].completeness, Completeness::Evicted);
    assert_eq!(other.held(Holder::Assembly), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn arrival_order_duplicates_and_batching_do_not_change_the_summary(
        order in Just((0..8usize).collect::<Vec<_>>()).prop_shuffle(),
        dups in proptest::collection::vec(0..8usize, 0..6),
        cuts in proptest::collection::btree_set(1..10usize, 0..4),
    ) {
        let (spans, logs) = request();
        let expected = run(vec![batch(spans.clone(), logs.clone())]);
        // Items 0..7 are spans, 7 is the log record; duplicates are re-sent items.
        let items: Vec<usize> = order.iter().copied().chain(dups).collect();
        let mut batches = Vec::new();
        let mut current = batch(vec![], vec![]);
        for (n, i) in items.iter().enumerate() {
            if cuts.contains(&n) {
                batches.push(std::mem::replace(&mut current, batch(vec![], vec![])));
            }
            match spans.get(*i) {
                Some(s) => current.spans.push(s.clone()),
                None => current.logs.push(logs[0].clone()),
            }
        }
        batches.push(current);
        prop_assert_eq!(run(batches), expected);
    }
}

#[test]
fn the_sample_price_table_loads_and_prices_loadgen_traffic() {
    let table = AssembleConfig::default().prices().expect("sample prices");
    let cost = table.cost(
        "openai",
        "gpt-4o-2024-08-06",
        super::prices::TokenCounts {
            input: 1_000_000,
            output: 1_000_000,
            cache_read: 0,
        },
    );
    assert_eq!(cost, Some(12.5));
    let bad = AssembleConfig {
        prices_file: "/nonexistent/prices.toml".into(),
        ..config()
    };
    assert!(bad
        .prices()
        .unwrap_err()
        .to_string()
        .contains("/nonexistent/prices.toml"));
}

#[test]
fn a_trace_id_shared_by_two_tenants_is_two_requests() {
    let mut a = Assembler::new(config(), prices());
    let mut one = span(T1, 1, None, SpanClass::Agent);
    one.tenant = "acme".into();
    let mut other = span(T1, 2, None, SpanClass::Agent);
    other.tenant = "globex".into();
    a.ingest(&batch(vec![one, other], vec![]), 0);
    let out = a.due(1_000_000);
    assert_eq!(out.len(), 2);
    assert_eq!(
        out.iter()
            .map(|s| (s.tenant.as_str(), s.span_count))
            .collect::<Vec<_>>(),
        [("acme", 1), ("globex", 1)]
    );
}

#[test]
fn huge_or_negative_token_counts_saturate() {
    let (mut spans, logs) = request();
    spans[1].gen_ai.input_tokens = Some(i64::MAX);
    spans[2].gen_ai.input_tokens = Some(i64::MAX);
    spans[2].gen_ai.output_tokens = Some(-5);
    let s = &run(vec![batch(spans, logs)])[0];
    assert_eq!(s.input_tokens, i64::MAX);
    assert_eq!(s.output_tokens, 500);
}

#[test]
fn a_request_snapshot_is_the_batch_finish_makes() {
    use crate::archive::table::rows::{assert_snapshot_is_finish, ArchiveRow};

    let (spans, logs) = request();
    let first = run(vec![batch(spans, logs)]).remove(0);
    // A second version with other lists, maps and nulls, so no column is the same in every row.
    let amended = RequestSummary {
        trace_ids: vec![hex_id(&T1), hex_id(&T2)],
        principal_id: None,
        completeness: Completeness::Amended,
        summary_version: 2,
        tool_calls_by_tool: BTreeMap::new(),
        claimed_cost_usd: None,
        stop_reason: None,
        ..first.clone()
    };
    assert_snapshot_is_finish(|rows: &mut rows::RequestRows| {
        for s in [&first, &amended] {
            s.append_to(rows).expect("append");
        }
    });
}

#[test]
fn a_late_span_withdraws_a_finding_and_raises_another_once() {
    use crate::findings::rows::FindingStatus;
    let status = |out: &[RequestSummary]| -> Vec<(&'static str, FindingStatus, u32)> {
        out.iter()
            .flat_map(|s| &s.finding_rows)
            .map(|r| (r.finding.rule.id(), r.status, r.summary_version))
            .collect()
    };
    let (spans, logs) = request();
    let mut a = Assembler::new(config(), prices());
    a.ingest(&batch(spans, logs), 0);
    let first = a.due(5_000);
    // The last call (span 6) timed out while the root says `completed`.
    assert_eq!(
        status(&first),
        [("success_claimed_after_failure", FindingStatus::Open, 1)]
    );
    assert_eq!(first[0].findings, 1);
    // A later call succeeds: the claim stands now; but it writes without an allow decision.
    let mut late = span(T1, 9, Some(1), SpanClass::Tool);
    late.gen_ai.tool_name = Some("add_note".into());
    late.audit.effect_class = Some("write".into());
    late.audit.result_code = Some("ok".into());
    // A stated decision: a confirmation asked for and still pending.
    late.audit.policy_decision = Some("require_confirmation".into());
    late.audit.confirmation_status = Some("pending".into());
    a.ingest(&batch(vec![late.clone()], vec![]), 6_000);
    // The call's own finding is raised as it arrives, before the next version.
    let early: Vec<_> = a
        .take_early_findings()
        .into_iter()
        .map(|r| (r.finding.rule.id(), r.status, r.summary_version))
        .collect();
    assert_eq!(early, [("write_without_allow", FindingStatus::Open, 2)]);
    let second = a.due(11_000);
    assert_eq!(
        status(&second),
        [("success_claimed_after_failure", FindingStatus::Withdrawn, 2)]
    );
    assert_eq!(second[0].findings, 1);
    // The same span again amends nothing: no row repeats.
    a.ingest(&batch(vec![late], vec![]), 12_000);
    assert!(a.due(20_000).is_empty());
}

/// A `tools/call` span of MCP's `side` (its JSON-RPC request id `rpc`), as the MCP SDKs trace
/// them: the client's and the server's span both name the tool.
fn mcp_side(id: u8, parent: u8, kind: SpanKind, rpc: &str) -> SpanRecord {
    let mut s = span(T1, id, Some(parent), SpanClass::Tool);
    s.kind = kind;
    s.gen_ai.mcp_method = Some("tools/call".into());
    s.gen_ai.tool_name = Some("get_weather".into());
    s.gen_ai.tool_arguments = Some(r#"{"city":"Oslo"}"#.into());
    s.attributes
        .0
        .push(("jsonrpc.request.id".into(), AttrValue::Str(rpc.into())));
    s
}

#[test]
fn an_mcp_call_traced_on_both_sides_is_one_tool_call() {
    let mut root = span(T1, 1, None, SpanClass::Agent);
    root.audit.request_id = Some("req-mcp".into());
    let spans = vec![
        root,
        // Two calls, each traced by the client and (a child of it) by the server.
        mcp_side(2, 1, SpanKind::Client, "7"),
        mcp_side(3, 2, SpanKind::Server, "7"),
        mcp_side(4, 1, SpanKind::Client, "8"),
        mcp_side(5, 4, SpanKind::Server, "8"),
        // A call whose client is not traced: the server's span under the application's.
        mcp_side(6, 1, SpanKind::Server, "9"),
        // A client whose server is not traced.
        mcp_side(7, 1, SpanKind::Client, "10"),
    ];
    // Whatever the order the two processes' exports arrive in.
    let mut reversed = spans.clone();
    reversed.reverse();
    for spans in [spans, reversed] {
        let out = run(spans.into_iter().map(|s| batch(vec![s], vec![])).collect());
        let s = out.last().expect("a summary");
        assert_eq!(s.span_count, 7);
        assert_eq!(s.tool_calls, 4);
        assert_eq!(
            s.tool_calls_by_tool,
            BTreeMap::from([("get_weather".into(), 4)])
        );
    }
}

#[test]
fn mcp_sides_pair_only_on_the_same_request_id_and_parent() {
    let root = span(T1, 1, None, SpanClass::Agent);
    // A server span under the client's span but another JSON-RPC id, and one with no id:
    // calls of their own.
    let mut no_id = mcp_side(4, 2, SpanKind::Server, "x");
    no_id.attributes.0.clear();
    let spans = vec![
        root,
        mcp_side(2, 1, SpanKind::Client, "7"),
        mcp_side(3, 2, SpanKind::Server, "70"),
        no_id,
        // An internal span naming the same call is no side of it.
        mcp_side(5, 2, SpanKind::Internal, "7"),
        // The client's call traced twice by the server: one pairs, the other counts.
        mcp_side(6, 2, SpanKind::Server, "7"),
        mcp_side(7, 2, SpanKind::Server, "7"),
    ];
    let out = run(vec![batch(spans, vec![])]);
    assert_eq!(out[0].tool_calls, 5);
}

/// A span of `service` (its resource's `service.name`), of kind `kind`.
fn of_service(mut s: SpanRecord, service: &str, kind: SpanKind) -> SpanRecord {
    s.resource = std::sync::Arc::new(crate::event::Resource {
        service_name: service.into(),
        ..Default::default()
    });
    s.kind = kind;
    s
}

/// An executor's request (root agent span 1 and four tool spans, 2 to 5) whose tool calls
/// each reach `orders-api`, traced by the executor's HTTP client (`client`: spans 12 to 15
/// under the tool spans), by `orders-api` (`server`: spans 22 to 25 under the client spans,
/// or under the tool spans when there are none), or both.
fn orders_calls(client: bool, server: bool) -> Vec<SpanRecord> {
    let executor = |s| of_service(s, "executor", SpanKind::Internal);
    let mut root = executor(span(T1, 1, None, SpanClass::Agent));
    root.audit.request_id = Some("req-orders".into());
    let mut spans = vec![root];
    for tool in 2..=5u8 {
        let mut call = executor(span(T1, tool, Some(1), SpanClass::Tool));
        call.audit.request_id = Some("req-orders".into());
        call.gen_ai.tool_name = Some("create_order".into());
        spans.push(call);
        let mut caller = tool;
        if client {
            let http = span(T1, tool + 10, Some(tool), SpanClass::Downstream);
            spans.push(of_service(http, "executor", SpanKind::Client));
            caller = tool + 10;
        }
        if server {
            let handler = span(T1, tool + 20, Some(caller), SpanClass::Other);
            spans.push(of_service(handler, "orders-api", SpanKind::Server));
        }
    }
    spans
}

#[test]
fn a_downstream_call_counts_once_whichever_side_traced_it() {
    for (client, server) in [(false, true), (true, false), (true, true)] {
        let spans = orders_calls(client, server);
        let count = spans.len();
        // Whatever the order the two services' exports arrive in.
        let mut reversed = spans.clone();
        reversed.reverse();
        for spans in [spans, reversed] {
            let out = run(spans.into_iter().map(|s| batch(vec![s], vec![])).collect());
            let s = out.last().expect("a summary");
            assert_eq!(
                s.span_count, count as u64,
                "client {client} server {server}"
            );
            assert_eq!(s.tool_calls, 4, "client {client} server {server}");
            assert_eq!(s.downstream_calls, 4, "client {client} server {server}");
        }
    }
}

#[test]
fn a_server_span_of_the_same_service_is_no_downstream_call() {
    let mut spans = orders_calls(false, false);
    // In-process dispatch: the executor's own server span under a tool span.
    let dispatch = span(T1, 30, Some(2), SpanClass::Other);
    spans.push(of_service(dispatch, "executor", SpanKind::Server));
    // And a server span whose parent never arrived: nothing says who called it.
    let orphan = span(T1, 31, Some(99), SpanClass::Other);
    spans.push(of_service(orphan, "orders-api", SpanKind::Server));
    let out = run(vec![batch(spans, vec![])]);
    assert_eq!(out[0].downstream_calls, 0);
}

#[test]
fn a_consumer_span_of_another_service_counts() {
    let mut spans = orders_calls(false, false);
    // A message the tool call sent, traced only by the consumer that processed it.
    let consume = span(T1, 30, Some(2), SpanClass::Other);
    spans.push(of_service(consume, "billing-worker", SpanKind::Consumer));
    // An internal span of another service under a tool span is no call's callee side.
    let internal = span(T1, 31, Some(3), SpanClass::Other);
    spans.push(of_service(internal, "billing-worker", SpanKind::Internal));
    let out = run(vec![batch(spans, vec![])]);
    assert_eq!(out[0].downstream_calls, 1);
}

#[test]
fn a_producer_pairs_with_one_consumer_and_a_second_delivery_counts() {
    let mut spans = orders_calls(false, false);
    let publish = span(T1, 30, Some(2), SpanClass::Downstream);
    spans.push(of_service(publish, "executor", SpanKind::Producer));
    // Two services consume the message: the earliest pairs with the producer, the other is a
    // delivery of its own (as it counts when only the consumers are traced).
    for (id, service) in [(31, "billing-worker"), (32, "audit-worker")] {
        let consume = span(T1, id, Some(30), SpanClass::Other);
        spans.push(of_service(consume, service, SpanKind::Consumer));
    }
    // A tool span of another service under the producer keeps its class: a tool call.
    let mut tool = span(T1, 33, Some(30), SpanClass::Tool);
    tool.gen_ai.tool_name = Some("bill".into());
    spans.push(of_service(tool, "billing-worker", SpanKind::Server));
    let out = run(vec![batch(spans, vec![])]);
    assert_eq!(out[0].downstream_calls, 2);
    assert_eq!(out[0].tool_calls, 5);
}
