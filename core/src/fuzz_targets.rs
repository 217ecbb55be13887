//! Fuzz targets: what toolwatch does with bytes from outside, as functions that must return
//! for any input. Each panics only on a bug (a panic inside, a journal record that does not
//! read back as written, a protect failure).
//!
//! Two drivers run them: `fuzz/` (cargo-fuzz, libFuzzer with coverage feedback, nightly) for
//! long runs, and [`mutation`], on stable, in the test suite: every file of the regression
//! corpus (`fuzz/regressions/<target>/`) here, then seeded mutations of valid requests for a
//! bounded time (`TOOLWATCH_FUZZ_SECONDS`, 2 s a target by default). The mutations' seeds are
//! `toolwatch loadgen`'s traffic, so that test is beside the load client in the root package
//! (`src/loadgen.rs`); `cargo test --workspace --lib fuzz_targets` runs both.

use std::sync::OnceLock;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use crate::event::EventBatch;
use crate::journal::codec::{self, JournalEntry};
use crate::protect::{KeyedHasher, Protector, QUARANTINE_FAILED};
use crate::receive::admission::{check_logs, check_traces, StructureLimits};
use crate::receive::decode;
use crate::receive::Ingestible;

/// A target: a function that must return for any input.
pub type FuzzTarget = fn(&[u8]);

/// The targets, by name (the folder names of the corpora).
pub const TARGETS: &[(&str, FuzzTarget)] = &[
    ("otlp_protobuf", otlp_protobuf),
    ("otlp_json", otlp_json),
    ("protect_text", protect_text),
    ("journal_codec", journal_codec),
];

fn protector() -> &'static Protector {
    static P: OnceLock<Protector> = OnceLock::new();
    P.get_or_init(|| {
        Protector::from_config(&Default::default(), KeyedHasher::new(b"fuzz key"))
            .unwrap_or_else(|e| panic!("the default rules compile: {e}"))
    })
}

/// Decoding, structural limits, normalization, protect and the journal round trip.
fn pipeline<M: Ingestible>(request: M) {
    let _ = request.check_structure(&StructureLimits::default());
    let Ok(mut batch) = request.normalize() else {
        return;
    };
    let report = protector().protect(&mut batch);
    let failed: u64 = report
        .quarantined
        .iter()
        .filter(|((_, reason), _)| *reason == QUARANTINE_FAILED)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(failed, 0, "protect failed on an item");
    round_trip(&batch);
}

fn round_trip(batch: &EventBatch) {
    let bytes = codec::encode_events(batch).unwrap_or_else(|e| panic!("encodes: {e}"));
    match codec::decode(&bytes) {
        Ok(JournalEntry::Events(back)) => {
            // NaN attribute values compare unequal to themselves; compare the encodings.
            let again = codec::encode_events(&back).unwrap_or_else(|e| panic!("re-encodes: {e}"));
            assert_eq!(again, bytes, "a journal record reads back as written");
        }
        other => panic!("a journal record reads back as written, not {other:?}"),
    }
}

/// An OTLP/gRPC or OTLP/HTTP protobuf body (traces, then logs).
pub fn otlp_protobuf(data: &[u8]) {
    if let Ok(r) = decode::protobuf::<ExportTraceServiceRequest>(data) {
        let _ = check_traces(&r, &StructureLimits::default());
        pipeline(r);
    }
    if let Ok(r) = decode::protobuf::<ExportLogsServiceRequest>(data) {
        let _ = check_logs(&r, &StructureLimits::default());
        pipeline(r);
    }
    let _ = decode::gunzip(data, 1 << 20);
}

/// An OTLP/HTTP JSON body (traces, then logs).
pub fn otlp_json(data: &[u8]) {
    if let Ok(r) = decode::json::<ExportTraceServiceRequest>(data) {
        pipeline(r);
    }
    if let Ok(r) = decode::json::<ExportLogsServiceRequest>(data) {
        pipeline(r);
    }
}

/// Any text through the redactor, as a plain string and as an attribute of a span.
pub fn protect_text(data: &[u8]) {
    let text = String::from_utf8_lossy(data).into_owned();
    let mut span = crate::event::fixtures::span();
    span.attributes.0.push((
        "tool.output".into(),
        crate::event::AttrValue::Str(text.clone()),
    ));
    span.gen_ai.tool_arguments = Some(text);
    let mut batch = EventBatch {
        spans: vec![span],
        logs: Vec::new(),
    };
    let report = protector().protect(&mut batch);
    assert!(
        !report
            .quarantined
            .keys()
            .any(|(_, reason)| *reason == QUARANTINE_FAILED),
        "protect failed"
    );
    round_trip(&batch);
}

/// Any bytes as a journal record.
pub fn journal_codec(data: &[u8]) {
    if let Ok(JournalEntry::Events(batch)) = codec::decode(data) {
        round_trip(&batch);
    }
}

/// The stable driver: mutations of seed inputs, without coverage feedback.
pub mod mutation {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// Byte values that find edges: lengths, varint continuation, signs, UTF-8 lead bytes.
    const INTERESTING: &[u8] = &[
        0, 1, 0x7f, 0x80, 0xff, 0xc0, 0xe0, 0xf0, b'"', b'\\', b'{', b'[',
    ];

    /// One mutation of `input` (bit flip, byte set, insert, delete, duplicate a run, splice
    /// from `other`, truncate).
    pub fn mutate(rng: &mut StdRng, input: &[u8], other: &[u8]) -> Vec<u8> {
        let mut v = input.to_vec();
        let rounds = rng.random_range(1..=4);
        for _ in 0..rounds {
            let len = v.len();
            match rng.random_range(0..7) {
                0 if len > 0 => {
                    let i = rng.random_range(0..len);
                    v[i] ^= 1 << rng.random_range(0..8);
                }
                1 if len > 0 => {
                    let i = rng.random_range(0..len);
                    v[i] = INTERESTING[rng.random_range(0..INTERESTING.len())];
                }
                2 => {
                    let i = rng.random_range(0..=len);
                    v.insert(i, rng.random());
                }
                3 if len > 0 => {
                    let i = rng.random_range(0..len);
                    let n = rng.random_range(1..=(len - i).min(16));
                    v.drain(i..i + n);
                }
                4 if len > 0 => {
                    let i = rng.random_range(0..len);
                    let n = rng.random_range(1..=(len - i).min(64));
                    let run: Vec<u8> = v[i..i + n].to_vec();
                    let at = rng.random_range(0..=v.len());
                    v.splice(at..at, run);
                }
                5 if !other.is_empty() => {
                    let i = rng.random_range(0..other.len());
                    let n = rng.random_range(1..=(other.len() - i).min(128));
                    let at = rng.random_range(0..=v.len());
                    v.splice(at..at, other[i..i + n].iter().copied());
                }
                _ if len > 0 => v.truncate(rng.random_range(0..len)),
                _ => v.push(rng.random()),
            }
        }
        v
    }

    /// Runs `target` on mutations of `seeds` for `budget`; returns the executions. A panic
    /// propagates with the input's hex in the message, to become a regression file.
    pub fn run(
        target: super::FuzzTarget,
        seeds: &[Vec<u8>],
        budget: std::time::Duration,
        seed: u64,
    ) -> u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let started = std::time::Instant::now();
        let mut executions = 0u64;
        let mut pool: Vec<Vec<u8>> = seeds.to_vec();
        while started.elapsed() < budget {
            let a = &pool[rng.random_range(0..pool.len())];
            let b = &pool[rng.random_range(0..pool.len())];
            let input = mutate(&mut rng, a, b);
            let outcome = std::panic::catch_unwind(|| target(&input));
            if let Err(e) = outcome {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                panic!("{msg}\ninput (hex): {}", hex::encode(&input));
            }
            executions += 1;
            // Keep some mutants as seeds: deeper changes build up.
            if pool.len() < 512 && rng.random_range(0..16) == 0 {
                pool.push(input);
            }
        }
        executions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use std::path::Path;

    fn regressions(target: &str) -> Vec<(String, Vec<u8>)> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/regressions")
            .join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut files: Vec<_> = entries
            .flatten()
            .filter(|e| e.path().is_file())
            .map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                (name, std::fs::read(e.path()).unwrap_or_default())
            })
            .collect();
        files.sort();
        files
    }

    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::trace::v1::{span, ResourceSpans, ScopeSpans, Span, Status};
    use proptest::prelude::*;

    /// Attribute names the normalizer maps, and some it does not.
    const KEYS: &[&str] = &[
        "gen_ai.operation.name",
        "gen_ai.tool.name",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "gen_ai.usage.input_tokens",
        "gen_ai.request.model",
        "executor.tenant_id",
        "executor.request_id",
        "executor.idempotency_key",
        "executor.retry_attempt",
        "executor.cancelled",
        "executor.claimed_cost_usd",
        "openinference.span.kind",
        "llm.token_count.prompt",
        "password",
        "x",
        "",
    ];

    fn any_value() -> impl Strategy<Value = AnyValue> {
        let leaf = prop_oneof![
            ".{0,40}".prop_map(any_value::Value::StringValue),
            "(sk-|AKIA|ghp_|eyJ|password=)[A-Za-z0-9+/=_-]{0,48}"
                .prop_map(any_value::Value::StringValue),
            any::<i64>().prop_map(any_value::Value::IntValue),
            any::<f64>().prop_map(any_value::Value::DoubleValue),
            any::<bool>().prop_map(any_value::Value::BoolValue),
            prop::collection::vec(any::<u8>(), 0..16).prop_map(any_value::Value::BytesValue),
        ]
        .prop_map(|v| AnyValue { value: Some(v) });
        crate::receive::decode::strategies::nested(leaf.boxed(), 4)
    }

    fn attributes() -> impl Strategy<Value = Vec<KeyValue>> {
        prop::collection::vec((0..KEYS.len(), any_value()), 0..8).prop_map(|kvs| {
            kvs.into_iter()
                .map(|(k, v)| KeyValue {
                    key: KEYS[k].to_string(),
                    value: Some(v),
                    ..Default::default()
                })
                .collect()
        })
    }

    fn span_strategy() -> impl Strategy<Value = Span> {
        // Mostly valid ids, so most spans get past normalization into protect.
        (
            prop_oneof![4 => prop::collection::vec(any::<u8>(), 16..=16), 1 => prop::collection::vec(any::<u8>(), 0..18)],
            prop_oneof![4 => prop::collection::vec(any::<u8>(), 8..=8), 1 => prop::collection::vec(any::<u8>(), 0..10)],
            prop::option::of(prop::collection::vec(any::<u8>(), 8..=8)),
            any::<u64>(),
            any::<u64>(),
            ".{0,20}",
            attributes(),
            0..8i32,
            prop::option::of((0..4i32, ".{0,10}")),
        )
            .prop_map(
                |(trace_id, span_id, parent, start, end, name, attributes, kind, status)| Span {
                    trace_id,
                    span_id,
                    parent_span_id: parent.unwrap_or_default(),
                    start_time_unix_nano: start,
                    end_time_unix_nano: end,
                    name,
                    attributes,
                    kind,
                    status: status.map(|(code, message)| Status { code, message }),
                    events: vec![span::Event {
                        name: "e".into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            )
    }

    proptest! {
        // 64 cases in the suite; PROPTEST_CASES for long runs.
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(64),
            ..ProptestConfig::default()
        })]
        /// Structure-aware: requests of any shape (ids of any length, times in any order,
        /// mapped attributes of any type, nested values, secret-looking strings) go through
        /// normalization, protect and the journal without a panic.
        #[test]
        fn arbitrary_otlp_requests_never_panic(
            spans in prop::collection::vec(span_strategy(), 0..6),
            resource in attributes(),
        ) {
            let req = ExportTraceServiceRequest {
                resource_spans: vec![ResourceSpans {
                    resource: Some(opentelemetry_proto::tonic::resource::v1::Resource {
                        attributes: resource,
                        ..Default::default()
                    }),
                    scope_spans: vec![ScopeSpans { spans, ..Default::default() }],
                    ..Default::default()
                }],
            };
            otlp_protobuf(&req.encode_to_vec());
            otlp_json(&serde_json::to_vec(&req).unwrap_or_default());
        }
    }

    /// The regression corpus, every file, every run.
    #[test]
    fn every_regression_input_is_handled() {
        let mut n = 0;
        for (target, run) in TARGETS {
            for (name, bytes) in regressions(target) {
                if let Err(e) = std::panic::catch_unwind(|| run(&bytes)) {
                    panic!("{target}/{name}: {e:?}");
                }
                n += 1;
            }
        }
        assert!(n >= TARGETS.len(), "the corpus holds files: {n}");
    }
}
