use super::*;
use crate::event::{EventBatch, Source};
use crate::receive::normalize::{self, FIELD_SOURCES};
use opentelemetry_proto::tonic::logs::v1::{LogRecord as PbLog, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};
use proptest::prelude::*;

fn val(v: any_value::Value) -> Option<AnyValue> {
    Some(AnyValue { value: Some(v) })
}

fn s(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: val(any_value::Value::StringValue(v.into())),
        ..Default::default()
    }
}

fn i(k: &str, v: i64) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: val(any_value::Value::IntValue(v)),
        ..Default::default()
    }
}

fn otlp_resource(attrs: Vec<KeyValue>) -> Option<OtlpResource> {
    Some(OtlpResource {
        attributes: attrs,
        ..Default::default()
    })
}

fn pb_span(id: u8, attrs: Vec<KeyValue>) -> Span {
    Span {
        trace_id: vec![0xab; 16],
        span_id: vec![id; 8],
        parent_span_id: vec![0xcd; 8],
        trace_state: "vendor=1".into(),
        name: format!("span {id}"),
        kind: 3,
        start_time_unix_nano: 1_767_225_600_000_000_000 + u64::from(id),
        end_time_unix_nano: 1_767_225_600_500_000_000,
        attributes: attrs,
        dropped_attributes_count: 1,
        events: vec![Event {
            time_unix_nano: 1_767_225_600_100_000_000,
            name: "gen_ai.choice".into(),
            attributes: vec![s("e", "v")],
            dropped_attributes_count: 0,
        }],
        dropped_events_count: 2,
        links: vec![Link {
            trace_id: vec![1; 16],
            span_id: vec![2; 8],
            trace_state: "l=1".into(),
            attributes: vec![i("n", 3)],
            dropped_attributes_count: 0,
            flags: 0,
        }],
        dropped_links_count: 3,
        status: Some(Status {
            message: "failed".into(),
            code: 2,
        }),
        flags: 0,
    }
}

/// Canonical names on one resource, OpenInference and older GenAI names on another whose
/// resource carries the request, principal and tenant.
fn rich_request() -> ExportTraceServiceRequest {
    let args = AnyValue {
        value: Some(any_value::Value::KvlistValue(KeyValueList {
            values: vec![i("order_id", 42)],
        })),
    };
    let finish = AnyValue {
        value: Some(any_value::Value::ArrayValue(ArrayValue {
            values: vec![
                AnyValue {
                    value: Some(any_value::Value::StringValue("stop".into())),
                },
                AnyValue {
                    value: Some(any_value::Value::StringValue("length".into())),
                },
            ],
        })),
    };
    let canonical = vec![
        s("gen_ai.operation.name", "execute_tool"),
        s("gen_ai.tool.name", "search_orders"),
        s("gen_ai.tool.call.id", "call_1"),
        KeyValue {
            key: "gen_ai.tool.call.arguments".into(),
            value: Some(args),
            ..Default::default()
        },
        s("executor.request_id", "req-1"),
        s("executor.policy_decision", "allow"),
        i("executor.retry_attempt", 1),
        s("executor.idempotency_key", "idem-raw"),
        KeyValue {
            key: "executor.cancelled".into(),
            value: val(any_value::Value::BoolValue(false)),
            ..Default::default()
        },
        KeyValue {
            key: "executor.claimed_cost_usd".into(),
            value: val(any_value::Value::DoubleValue(0.25)),
            ..Default::default()
        },
        s("http.url", "https://example.invalid/x"),
        KeyValue {
            key: "empty".into(),
            value: Some(AnyValue { value: None }),
            ..Default::default()
        },
    ];
    let model = vec![
        s("gen_ai.operation.name", "chat"),
        s("gen_ai.system", "openai"),
        s("gen_ai.request.model", "gpt-x"),
        i("gen_ai.usage.prompt_tokens", 10),
        i("gen_ai.usage.completion_tokens", 5),
        KeyValue {
            key: "gen_ai.response.finish_reasons".into(),
            value: Some(finish),
            ..Default::default()
        },
    ];
    let openinference_tool = vec![
        s("openinference.span.kind", "TOOL"),
        s("tool.name", "fetch"),
        s("input.value", "{\"url\":1}"),
        s("output.value", "ok"),
        s("session.id", "conv-9"),
    ];
    let openinference_llm = vec![
        s("openinference.span.kind", "LLM"),
        s("llm.provider", "anthropic"),
        s("llm.model_name", "claude"),
        i("llm.token_count.prompt", 100),
        i("llm.token_count.completion", 20),
        s("input.value", "a prompt stays an attribute on a model span"),
        s("executor.principal_id", "on-the-span-wins"),
    ];
    ExportTraceServiceRequest {
        resource_spans: vec![
            ResourceSpans {
                resource: otlp_resource(vec![s("service.name", "executor")]),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "lib".into(),
                        version: "1".into(),
                        attributes: vec![s("sa", "1")],
                        dropped_attributes_count: 0,
                    }),
                    spans: vec![pb_span(1, canonical), pb_span(2, model)],
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            },
            ResourceSpans {
                resource: otlp_resource(vec![
                    s("service.name", "agent"),
                    s("executor.request_id", "req-2"),
                    s("executor.principal_id", "alice"),
                    s("executor.tenant_id", "acme"),
                ]),
                scope_spans: vec![
                    ScopeSpans {
                        scope: None,
                        spans: vec![pb_span(3, openinference_tool)],
                        schema_url: String::new(),
                    },
                    ScopeSpans {
                        scope: Some(InstrumentationScope {
                            name: "other".into(),
                            ..Default::default()
                        }),
                        spans: vec![pb_span(4, openinference_llm)],
                        schema_url: String::new(),
                    },
                ],
                schema_url: String::new(),
            },
        ],
    }
}

/// What protect does to the idempotency key, enough for these tests.
fn hash_keys(batch: &mut EventBatch) {
    let audits = batch
        .spans
        .iter_mut()
        .map(|s| &mut s.audit)
        .chain(batch.logs.iter_mut().map(|l| &mut l.audit));
    for audit in audits {
        if let Some(k) = audit.idempotency_key.take() {
            audit.idempotency_key_hash = Some(format!("hmac:test:{}", k.len()));
        }
    }
}

/// Takes out what export adds: toolwatch's attributes, and the hash (which normalize does not
/// read into the field) goes back into its field.
fn strip(mut batch: EventBatch) -> EventBatch {
    let items = batch
        .spans
        .iter_mut()
        .map(|s| (&mut s.attributes, &mut s.audit))
        .chain(
            batch
                .logs
                .iter_mut()
                .map(|l| (&mut l.attributes, &mut l.audit)),
        );
    for (attrs, audit) in items {
        attrs
            .0
            .retain(|(k, _)| k != TENANT_KEY && k != REDACTIONS_KEY);
        if let Some(pos) = attrs.0.iter().position(|(k, _)| k == IDEMPOTENCY_HASH_KEY) {
            let (_, v) = attrs.0.remove(pos);
            audit.idempotency_key_hash = v.as_str().map(str::to_string);
        }
    }
    batch
}

fn spans_round_trip(req: ExportTraceServiceRequest) -> (EventBatch, EventBatch) {
    let mut first = normalize::spans(req).expect("valid request");
    hash_keys(&mut first);
    let again = normalize::spans(trace_request(&first.spans)).expect("export is valid OTLP");
    (first, strip(again))
}

#[test]
fn normalize_export_normalize_gives_the_same_events() {
    let (first, again) = spans_round_trip(rich_request());
    assert_eq!(first.spans.len(), 4);
    // Field by field first, for a readable failure.
    for (a, b) in first.spans.iter().zip(&again.spans) {
        assert_eq!(a.gen_ai, b.gen_ai, "{}", a.name);
        assert_eq!(a.audit, b.audit, "{}", a.name);
        assert_eq!(a.attributes, b.attributes, "{}", a.name);
        assert_eq!(a.source_keys, b.source_keys, "{}", a.name);
    }
    assert_eq!(again, first);
    // The dialects were read, and remembered.
    let oi = &first.spans[2];
    assert_eq!(oi.gen_ai.tool_name.as_deref(), Some("fetch"));
    assert_eq!(oi.audit.request_id.as_deref(), Some("req-2"));
    assert_eq!(oi.source_keys.get(Field::RequestId), Some(Source::Resource));
    assert_eq!(oi.source_keys.get(Field::Operation), Some(Source::Inferred));
    assert_eq!(
        oi.source_keys.get(Field::ToolArguments),
        Some(Source::Key("input.value"))
    );
    assert!(first.spans[0].source_keys.0.is_empty());
}

fn keys(kvs: &[KeyValue]) -> Vec<String> {
    let mut k: Vec<String> = kvs.iter().map(|kv| kv.key.clone()).collect();
    k.sort();
    k
}

#[test]
fn attributes_keep_the_names_the_sender_used() {
    let req = rich_request();
    let sent: Vec<Vec<String>> = req
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .map(|s| keys(&s.attributes))
        .collect();
    let mut batch = normalize::spans(req).expect("valid");
    hash_keys(&mut batch);
    batch.spans[0].redactions.insert("email".into(), 2);
    batch.spans[0].redactions.insert("aws_key".into(), 1);
    let out = trace_request(&batch.spans);
    let got: Vec<&Span> = out
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .collect();
    for (sent, span) in sent.iter().zip(&got) {
        let mut expected: Vec<String> = sent
            .iter()
            .map(|k| match k.as_str() {
                "executor.idempotency_key" => IDEMPOTENCY_HASH_KEY.to_string(),
                other => other.to_string(),
            })
            .chain([TENANT_KEY.to_string()])
            .collect();
        if span.span_id == vec![1; 8] {
            expected.push(REDACTIONS_KEY.into());
        }
        expected.sort();
        assert_eq!(keys(&span.attributes), expected, "{}", span.name);
    }
    let first = &got[0].attributes;
    let get = |k: &str| {
        first
            .iter()
            .find(|kv| kv.key == k)
            .and_then(|kv| kv.value.clone())
    };
    assert_eq!(
        get(REDACTIONS_KEY),
        val(any_value::Value::StringValue("aws_key:1,email:2".into()))
    );
    assert_eq!(
        get(TENANT_KEY),
        val(any_value::Value::StringValue("default".into()))
    );
    // Never the raw key.
    assert!(!format!("{out:?}").contains("idem-raw"));
    // The resource attributes go out as received.
    assert_eq!(
        keys(
            &out.resource_spans[1]
                .resource
                .as_ref()
                .expect("resource")
                .attributes
        ),
        keys(
            &rich_request().resource_spans[1]
                .resource
                .as_ref()
                .expect("resource")
                .attributes
        )
    );
}

#[test]
fn ids_kind_status_times_events_links_exact() {
    let req = rich_request();
    let batch = normalize::spans(req.clone()).expect("valid");
    let out = trace_request(&batch.spans);
    assert_eq!(out.resource_spans.len(), 2);
    assert_eq!(out.resource_spans[1].scope_spans.len(), 2);
    for (a, b) in req.resource_spans.iter().zip(&out.resource_spans) {
        for (sa, sb) in a.scope_spans.iter().zip(&b.scope_spans) {
            for (x, y) in sa.spans.iter().zip(&sb.spans) {
                assert_eq!(x.trace_id, y.trace_id);
                assert_eq!(x.span_id, y.span_id);
                assert_eq!(x.parent_span_id, y.parent_span_id);
                assert_eq!(x.trace_state, y.trace_state);
                assert_eq!(x.name, y.name);
                assert_eq!(x.kind, y.kind);
                assert_eq!(x.start_time_unix_nano, y.start_time_unix_nano);
                assert_eq!(x.end_time_unix_nano, y.end_time_unix_nano);
                assert_eq!(x.status, y.status);
                assert_eq!(x.events, y.events);
                assert_eq!(x.links, y.links);
                assert_eq!(x.dropped_attributes_count, y.dropped_attributes_count);
                assert_eq!(x.dropped_events_count, y.dropped_events_count);
                assert_eq!(x.dropped_links_count, y.dropped_links_count);
            }
        }
    }
}

#[test]
fn spans_group_by_resource_and_scope_in_first_seen_order() {
    let batch = normalize::spans(rich_request()).expect("valid");
    // Interleave the two resources: groups keep first-seen order and collect their spans.
    let spans = vec![
        batch.spans[2].clone(),
        batch.spans[0].clone(),
        batch.spans[3].clone(),
        batch.spans[1].clone(),
    ];
    let out = trace_request(&spans);
    let ids: Vec<Vec<u8>> = out
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .map(|s| s.span_id.clone())
        .collect();
    assert_eq!(ids, vec![vec![3; 8], vec![4; 8], vec![1; 8], vec![2; 8]]);
    assert_eq!(out.resource_spans.len(), 2);
    // A resource equal in value but not the same Arc joins the group.
    let mut copy = batch.spans[1].clone();
    copy.resource = Arc::new((*copy.resource).clone());
    let out = trace_request(&[batch.spans[0].clone(), copy]);
    assert_eq!(out.resource_spans.len(), 1);
    assert_eq!(out.resource_spans[0].scope_spans[0].spans.len(), 2);
}

#[test]
fn logs_round_trip_with_resource_fields() {
    let req = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: otlp_resource(vec![
                s("service.name", "executor"),
                s("executor.request_id", "req-7"),
            ]),
            scope_logs: vec![ScopeLogs {
                scope: None,
                log_records: vec![
                    PbLog {
                        time_unix_nano: 5,
                        observed_time_unix_nano: 6,
                        severity_number: 13,
                        severity_text: "WARN".into(),
                        body: val(any_value::Value::BytesValue(vec![1, 2])),
                        attributes: vec![
                            s("executor.policy_decision", "deny"),
                            s("gen_ai.tool.name", "stays an attribute on logs"),
                        ],
                        dropped_attributes_count: 4,
                        trace_id: vec![9; 16],
                        span_id: vec![8; 8],
                        event_name: "executor.policy".into(),
                        ..Default::default()
                    },
                    PbLog {
                        observed_time_unix_nano: 6,
                        ..Default::default()
                    },
                ],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    };
    let first = normalize::logs(req).expect("valid");
    let out = logs_request(&first.logs);
    let rec = &out.resource_logs[0].scope_logs[0].log_records[0];
    assert!(!rec
        .attributes
        .iter()
        .any(|kv| kv.key == "executor.request_id"));
    let again = strip(normalize::logs(out).expect("valid"));
    assert_eq!(again, first);
}

mod properties {
    use super::*;

    fn value() -> impl Strategy<Value = any_value::Value> {
        use any_value::Value as V;
        prop_oneof![
            "[a-z0-9 ]{0,8}".prop_map(V::StringValue),
            prop::sample::select(vec![
                "TOOL",
                "llm",
                "Agent",
                "tools/call",
                "true",
                " 7 ",
                "tool",
                "workflow",
                "agent",
                r#"["stop","length"]"#,
                "[stop",
            ])
            .prop_map(|s| V::StringValue(s.into())),
            (0i64..5000).prop_map(V::IntValue),
            any::<bool>().prop_map(V::BoolValue),
            (0.0f64..10.0).prop_map(V::DoubleValue),
            Just(V::DoubleValue(3.0)),
            prop::collection::vec("[a-z]{0,3}", 0..3).prop_map(|items| V::ArrayValue(ArrayValue {
                values: items
                    .into_iter()
                    .map(|s| AnyValue {
                        value: Some(V::StringValue(s)),
                    })
                    .collect(),
            })),
        ]
    }

    fn attribute(names: Vec<&'static str>) -> impl Strategy<Value = KeyValue> {
        (prop::sample::select(names), value()).prop_map(|(k, v)| KeyValue {
            key: k.to_string(),
            value: val(v),
            ..Default::default()
        })
    }

    fn unique(v: Vec<KeyValue>) -> Vec<KeyValue> {
        let mut seen = std::collections::HashSet::new();
        v.into_iter()
            .filter(|kv| seen.insert(kv.key.clone()))
            .collect()
    }

    fn span_names() -> Vec<&'static str> {
        FIELD_SOURCES
            .iter()
            .map(|(n, _, _)| *n)
            .chain([
                "custom.a",
                "input.value",
                "output.value",
                "openinference.span.kind",
                "traceloop.span.kind",
                "traceloop.entity.name",
                "traceloop.entity.input",
                "traceloop.entity.output",
                "name",
                "input",
                "output",
            ])
            .collect()
    }

    /// A Logfire message template, known or not, on some spans.
    fn logfire_template() -> impl Strategy<Value = Option<&'static str>> {
        let mut templates: Vec<&'static str> = crate::event::LOGFIRE_TEMPLATES
            .iter()
            .map(|(t, _, _)| *t)
            .collect();
        templates.push("Turn {turn} for agent a");
        prop::option::of(prop::sample::select(templates))
    }

    proptest! {
        /// Whatever mix of canonical and dialect names a sender uses, normalize reads the
        /// export's output back into the same events.
        #[test]
        fn random_attributes_round_trip(
            span_attrs in prop::collection::vec(
                prop::collection::vec(attribute(span_names()), 0..20).prop_map(unique), 1..4),
            res_attrs in prop::collection::vec(attribute(vec![
                "executor.request_id", "executor.principal_id", "executor.tenant_id", "x",
            ]), 0..4).prop_map(unique),
            kind in 0i32..6,
            template in logfire_template(),
        ) {
            let with_template = |mut attrs: Vec<KeyValue>| {
                if let Some(t) = template {
                    attrs.retain(|kv| kv.key != crate::event::LOGFIRE_TEMPLATE_KEY);
                    attrs.push(KeyValue {
                        key: crate::event::LOGFIRE_TEMPLATE_KEY.into(),
                        value: val(any_value::Value::StringValue(t.into())),
                        ..Default::default()
                    });
                }
                attrs
            };
            let req = ExportTraceServiceRequest {
                resource_spans: vec![ResourceSpans {
                    resource: otlp_resource(res_attrs),
                    scope_spans: vec![ScopeSpans {
                        spans: span_attrs
                            .into_iter()
                            .map(with_template)
                            .enumerate()
                            .map(|(n, attrs)| Span { kind, ..pb_span(n as u8 + 1, attrs) })
                            .collect(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            };
            let (first, again) = spans_round_trip(req);
            prop_assert_eq!(again, first);
        }

        /// Logs: audit fields on the record or the resource, other names kept.
        #[test]
        fn random_log_attributes_round_trip(
            attrs in prop::collection::vec(attribute(span_names()), 0..16).prop_map(unique),
            res_attrs in prop::collection::vec(attribute(vec![
                "executor.request_id", "executor.principal_id", "executor.tenant_id",
            ]), 0..3).prop_map(unique),
        ) {
            let req = ExportLogsServiceRequest {
                resource_logs: vec![ResourceLogs {
                    resource: otlp_resource(res_attrs),
                    scope_logs: vec![ScopeLogs {
                        log_records: vec![PbLog { attributes: attrs, time_unix_nano: 1, ..Default::default() }],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            };
            let mut first = normalize::logs(req).expect("valid");
            hash_keys(&mut first);
            let again = strip(normalize::logs(logs_request(&first.logs)).expect("valid"));
            prop_assert_eq!(again, first);
        }
    }
}
