//! Protect on the worst inputs we can construct: dense `key=value` credentials (one value
//! repeated, or all distinct), URLs with passwords, closers after a key, long base64 runs,
//! values of one stem written again, JSON nested in strings, keywords run together, each as
//! one tool result of 64 KiB to 4 MiB. Throughput must stay flat as the size grows (linear
//! time) and above 20 MiB/s per core.
//!
//! Run with `cargo bench -p toolwatch-core --bench protect_worst`; figures go into
//! BENCHMARKS.md ("Protect on adversarial inputs"). Under `cargo test` each case runs once,
//! at 64 KiB only.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

use toolwatch::event::{fixtures, EventBatch, GenAiFields, SpanClass, SpanRecord};
use toolwatch::protect::rules::RedactionConfig;
use toolwatch::protect::{KeyedHasher, Protector};

/// A small deterministic generator (xorshift), so every run measures the same bytes.
struct Bytes(u64);

impl Bytes {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn word(&mut self, len: usize, alphabet: &[u8]) -> String {
        (0..len)
            .map(|_| char::from(alphabet[(self.next() % alphabet.len() as u64) as usize]))
            .collect()
    }
}

const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const BASE64: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/";

fn repeated(unit: &str, size: usize) -> String {
    let mut s = unit.repeat(size / unit.len() + 1);
    s.truncate(size);
    s
}

fn distinct(size: usize, mut unit: impl FnMut(usize) -> String) -> String {
    let mut s = String::with_capacity(size + 128);
    let mut i = 0;
    while s.len() < size {
        s.push_str(&unit(i));
        i += 1;
    }
    s
}

/// The shapes, by name, at about `size` bytes.
pub fn shapes(size: usize) -> Vec<(&'static str, String)> {
    let mut r = Bytes(0x9e37_79b9_7f4a_7c15);
    let mut nested = String::from(r#"{"password": "abc123XYZ", "k": "v"}"#);
    while nested.len() < size / 4 {
        nested = serde_json::json!({ "password": "hunter2X9", "inner": nested }).to_string();
    }
    let siblings = (size / nested.len()).max(1);
    let nested_doc = serde_json::Value::Object(
        (0..siblings)
            .map(|i| (format!("a{i}"), serde_json::Value::String(nested.clone())))
            .collect(),
    )
    .to_string();
    vec![
        ("kv_same", repeated("password=abc123 ", size)),
        ("kv_user_same", repeated("user=bob password=s3cr3t; ", size)),
        ("yaml_same", repeated("secret: \"x1y2z3\"\n", size)),
        ("flag_same", repeated("--password hunter22 ", size)),
        ("json_same", repeated("{\"password\": \"abc123\"}, ", size)),
        (
            "bearer_same",
            repeated("Authorization: Bearer abcdef123456 ", size),
        ),
        (
            "kv_distinct",
            distinct(size, |_| format!("password={} ", r.word(12, ALNUM))),
        ),
        (
            "url_passwords_distinct",
            distinct(size, |i| {
                format!(
                    "postgres://app:{}@db{i}.internal:5432/orders ",
                    r.word(10, ALNUM)
                )
            }),
        ),
        (
            "url_password_same",
            repeated("https://user:pAssw0rd99@example.com/x ", size),
        ),
        ("base64_run", r.word(size, BASE64)),
        (
            "closers_after_key",
            format!("password={}", ")".repeat(size)),
        ),
        (
            "periodic_values",
            distinct(size, |i| format!("password={} ", "Xk9".repeat(2 + i % 50))),
        ),
        (
            "stem_values_again",
            distinct(size, |i| {
                format!("password=sk-live-{i:08} echo sk-live-{:08}; ", i / 2)
            }),
        ),
        ("json_nested_in_strings", nested_doc),
        // Keyword starts at nearly every byte: the keyword filter passes everywhere and the
        // automaton walks from each place.
        (
            "keyword_soup",
            repeated("secrettokenpasswordapi_keysk-ghp_bearer@kty", size),
        ),
    ]
}

fn span(result: String) -> SpanRecord {
    SpanRecord {
        name: "execute_tool read_file".into(),
        class: SpanClass::Tool,
        gen_ai: GenAiFields {
            tool_result: Some(result),
            ..Default::default()
        },
        ..fixtures::span()
    }
}

fn worst_inputs(c: &mut Criterion) {
    let protector = Protector::from_config(&RedactionConfig::default(), KeyedHasher::new(b"bench"))
        .expect("rules compile");
    let benching = std::env::args().any(|a| a == "--bench");
    let sizes: &[usize] = if benching {
        &[64 << 10, 1 << 20, 4 << 20]
    } else {
        &[64 << 10]
    };
    let mut g = c.benchmark_group("protect_worst");
    g.sample_size(10);
    for &size in sizes {
        for (name, text) in shapes(size) {
            let batch = EventBatch {
                spans: vec![span(text.clone())],
                logs: Vec::new(),
            };
            g.throughput(Throughput::Bytes(text.len() as u64));
            g.bench_function(format!("{name}/{}KiB", size >> 10), |b| {
                b.iter_batched(
                    || batch.clone(),
                    |mut batch| {
                        protector.protect(&mut batch);
                        batch
                    },
                    BatchSize::LargeInput,
                )
            });
        }
    }
    g.finish();
}

criterion_group!(benches, worst_inputs);
criterion_main!(benches);
