//! Per-stage cost of the ingest path on loadgen's traffic (spans of about 1 KiB with 1-3 KiB
//! JSON tool arguments and results): decode, normalize, protect, Arrow rows, Parquet encode.
//! Run with `cargo bench --bench pipeline`; figures go into BENCHMARKS.md.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use parquet::arrow::ArrowWriter;
use prost::Message;

use toolwatch::archive::table::encoding::{writer_properties, FileSettings};
use toolwatch::archive::table::rows::TableRows;
use toolwatch::archive::table::schema::{spans_schema, SpanRows};
use toolwatch::archive::table::Table;
use toolwatch::event::EventBatch;
use toolwatch::protect::engine::Redactor;
use toolwatch::protect::rules::RedactionConfig;
use toolwatch::protect::{KeyedHasher, Protector};
use toolwatch::receive::decode;
use toolwatch::receive::normalize;
use toolwatch_cli::loadgen::generate;

const BASE_NS: u64 = 1_767_225_600_000_000_000;

fn bodies() -> Vec<Vec<u8>> {
    generate(1, 3, BASE_NS, 100)
        .iter()
        .map(|r| r.traces.encode_to_vec())
        .collect()
}

fn batches(bodies: &[Vec<u8>]) -> Vec<EventBatch> {
    bodies
        .iter()
        .map(|b| {
            let req: ExportTraceServiceRequest = decode::protobuf(b).expect("decodes");
            normalize::spans(req).expect("normalizes")
        })
        .collect()
}

fn stages(c: &mut Criterion) {
    let bodies = bodies();
    let batches = batches(&bodies);
    let spans: usize = batches.iter().map(EventBatch::len).sum();
    let bytes: usize = bodies.iter().map(Vec::len).sum();
    let mut g = c.benchmark_group("ingest");
    g.throughput(Throughput::Elements(spans as u64));
    eprintln!(
        "{spans} spans, {bytes} protobuf bytes ({} bytes/span)",
        bytes / spans
    );

    g.bench_function("decode_protobuf", |b| {
        b.iter(|| {
            for body in &bodies {
                let req: ExportTraceServiceRequest = decode::protobuf(body).expect("decodes");
                std::hint::black_box(req);
            }
        })
    });
    g.bench_function("decode_and_normalize", |b| {
        b.iter(|| std::hint::black_box(batches_of(&bodies)))
    });
    let redactor = Redactor::new(&RedactionConfig::default(), KeyedHasher::new(b"bench-key"))
        .expect("default rules compile");
    let protector = Protector::new(redactor);
    g.bench_function("protect", |b| {
        b.iter_batched(
            || batches.clone(),
            |mut bs| {
                for batch in &mut bs {
                    protector.protect(batch);
                }
                bs
            },
            BatchSize::LargeInput,
        )
    });
    g.bench_function("arrow_rows", |b| {
        b.iter(|| {
            let mut rows = SpanRows::default();
            for batch in &batches {
                for s in &batch.spans {
                    rows.append(s).expect("append");
                }
            }
            rows.finish().expect("batch")
        })
    });
    let mut rows = SpanRows::default();
    for batch in &batches {
        for s in &batch.spans {
            rows.append(s).expect("append");
        }
    }
    // A daemon's writer lives for a whole file, so encode ten batches per writer to keep the
    // writer's set-up (a zstd context per column) from dominating the figure.
    let one = rows.finish().expect("batch");
    let record_batch =
        arrow::compute::concat_batches(&one.schema(), &vec![one.clone(); 10]).expect("concat");
    g.finish();
    let mut g = c.benchmark_group("ingest_x10");
    g.throughput(Throughput::Elements(record_batch.num_rows() as u64));
    let settings = FileSettings {
        max_bytes: u64::MAX,
        max_age: std::time::Duration::from_secs(3600),
        row_group_rows: 65536,
        row_group_bytes: 32 << 20,
        zstd_level: 3,
    };
    for level in [1, 3] {
        let settings = FileSettings {
            zstd_level: level,
            ..settings.clone()
        };
        let props = writer_properties(&settings, Table::Spans).expect("props");
        let encode = || {
            let mut w = ArrowWriter::try_new(Vec::new(), spans_schema(), Some(props.clone()))
                .expect("writer");
            w.write(&record_batch).expect("write");
            w.into_inner().expect("close").len()
        };
        eprintln!("zstd {level}: {} bytes of Parquet", encode());
        g.bench_function(format!("parquet_encode_zstd{level}"), |b| b.iter(encode));
    }
    g.finish();
    let mut g = c.benchmark_group("ingest");
    g.throughput(Throughput::Elements(spans as u64));
    let json_bodies: Vec<Vec<u8>> = bodies
        .iter()
        .map(|b| {
            let req: ExportTraceServiceRequest = decode::protobuf(b).expect("decodes");
            serde_json::to_vec(&req).expect("json")
        })
        .collect();
    g.bench_function("decode_json", |b| {
        b.iter(|| {
            for body in &json_bodies {
                let req: ExportTraceServiceRequest = decode::json(body).expect("decodes");
                std::hint::black_box(req);
            }
        })
    });
    g.finish();
}

fn batches_of(bodies: &[Vec<u8>]) -> usize {
    batches(bodies).len()
}

/// A JSON tool payload of about `size` bytes, with planted secrets when `secrets` is set.
fn payload(size: usize, secrets: bool, seed: usize) -> String {
    let words = [
        "order",
        "shipment",
        "refund",
        "customer",
        "priority",
        "warehouse",
        "status",
    ];
    let mut items = Vec::new();
    let mut len = 0;
    let mut i = seed;
    while len < size {
        let mut item = serde_json::json!({
            "order_id": format!("ORD-{:08}", i * 7919 % 100_000_000),
            "amount_cents": (i * 31) % 500_000,
            "note": (0..8).map(|k| words[(i + k) % words.len()]).collect::<Vec<_>>().join(" "),
            "updated": "2026-11-30T05:17:14.133Z",
            "trace": format!("{:032x}", i as u128 * 0x9e37_79b9_7f4a_7c15),
        });
        if secrets && i.is_multiple_of(4) {
            item["contact"] = serde_json::Value::String(match i % 3 {
                0 => "reach jane.doe@example.com or +1 415 555 0132".into(),
                1 => "key sk-proj-T3stOnlyN0tAR3alK3yAbCdEfGhIjKlMnOpQrStUvWxYz012345".into(),
                _ => "card 4111 1111 1111 1111, token ghp_T3stOnlyT0ken7f3a9c2e1d5b8a4c6e0f2d9"
                    .into(),
            });
        }
        len += item.to_string().len() + 1;
        items.push(item);
        i += 1;
    }
    serde_json::json!({ "items": items }).to_string()
}

fn protect_payloads(c: &mut Criterion) {
    use toolwatch::event::{fixtures, AttrValue, Attributes, GenAiFields, SpanClass, SpanRecord};
    // Learned values on (the default) and off, to show what matching them costs.
    let protector = |learned: bool| {
        let mut config = RedactionConfig::default();
        config.learned.enabled = learned;
        Protector::from_config(&config, KeyedHasher::new(b"bench-key")).expect("rules compile")
    };
    let (learning, not_learning) = (protector(true), protector(false));
    let mut g = c.benchmark_group("protect");
    // Secrets in every span's payloads (a stress case: every document holds one), in none,
    // and in one span of sixteen (closer to what agents send: most tool calls carry none).
    let cases = [1024, 4096, 8192]
        .into_iter()
        .flat_map(|size| [(size, 0), (size, 1)])
        .flat_map(|(size, every)| [(size, every, true), (size, every, false)])
        .chain([(4096, 16, true)]);
    for (size, every, learned) in cases {
        let protector = if learned { &learning } else { &not_learning };
        let spans: Vec<SpanRecord> = (0..64usize)
            .map(|n| SpanRecord {
                name: "execute_tool search_orders".into(),
                class: SpanClass::Tool,
                gen_ai: GenAiFields {
                    tool_arguments: Some(payload(
                        size / 2,
                        every > 0 && n.is_multiple_of(every),
                        n,
                    )),
                    tool_result: Some(payload(
                        size / 2,
                        every > 0 && n.is_multiple_of(every),
                        n + 1000,
                    )),
                    ..Default::default()
                },
                attributes: Attributes(vec![(
                    "http.url".into(),
                    AttrValue::Str("https://orders.internal.example/v1/orders?page=2".into()),
                )]),
                ..fixtures::span()
            })
            .collect();
        let bytes: usize = spans
            .iter()
            .map(|s| {
                s.gen_ai.tool_arguments.as_ref().map_or(0, String::len)
                    + s.gen_ai.tool_result.as_ref().map_or(0, String::len)
            })
            .sum();
        let batch = EventBatch {
            spans,
            logs: vec![],
        };
        g.throughput(Throughput::Bytes(bytes as u64));
        let name = format!(
            "{}KiB_{}{}",
            size / 1024,
            match every {
                0 => "clean".to_string(),
                1 => "with_secrets".to_string(),
                n => format!("one_in_{n}_with_secrets"),
            },
            if learned { "" } else { "_learned_off" }
        );
        g.bench_function(name, |b| {
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
    g.finish();
}

/// Counts live heap bytes, so the assembly bench can report memory held per open request.
/// Forwards to mimalloc, the daemon's own allocator (`src/main.rs`), so that every stage is
/// timed with the allocator it runs with; `realloc` is forwarded too, so that a growing
/// `Vec` is grown in place as in the daemon, not copied.
struct CountingAllocator;

static LIVE_BYTES: std::sync::atomic::AtomicIsize = std::sync::atomic::AtomicIsize::new(0);

static INNER: mimalloc::MiMalloc = mimalloc::MiMalloc;

// SAFETY: every call is forwarded unchanged to mimalloc; the counter is only arithmetic on
// the sizes it was given.
unsafe impl std::alloc::GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: same layout as given to us.
        unsafe { INNER.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: same layout as given to us.
        unsafe { INNER.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: ptr came from alloc with this layout.
        unsafe { INNER.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(
            new_size as isize - layout.size() as isize,
            std::sync::atomic::Ordering::Relaxed,
        );
        // SAFETY: ptr came from alloc with this layout; the caller upholds new_size's rules.
        unsafe { INNER.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn live_bytes() -> isize {
    LIVE_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Assembly: facts extraction and grouping for loadgen batches, and the memory an open
/// request holds (printed once: requests held open, heap bytes per request and per span).
fn assemble(c: &mut Criterion) {
    use toolwatch::assemble::{AssembleConfig, Assembler};
    let batches = batches(&bodies());
    let spans: usize = batches.iter().map(|b| b.spans.len()).sum();
    let prices = AssembleConfig::default().prices().expect("sample prices");

    let before = live_bytes();
    let mut held = Assembler::new(AssembleConfig::default(), prices.clone());
    for (i, b) in batches.iter().enumerate() {
        held.ingest(b, i as u64);
    }
    let bytes = (live_bytes() - before).max(0) as usize;
    eprintln!(
        "assembly holds {} requests, {} spans in {} heap bytes: {} bytes per request, {} per span",
        held.requests_held(),
        held.spans_held(),
        bytes,
        bytes / held.requests_held().max(1),
        bytes / held.spans_held().max(1)
    );
    drop(held);

    let mut g = c.benchmark_group("assemble");
    g.throughput(Throughput::Elements(spans as u64));
    g.bench_function("ingest_and_summarize", |b| {
        b.iter_batched(
            || Assembler::new(AssembleConfig::default(), prices.clone()),
            |mut a| {
                for (i, batch) in batches.iter().enumerate() {
                    a.ingest(batch, i as u64);
                }
                std::hint::black_box(a.due(u64::MAX / 2))
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// Budget evaluation: loadgen traffic over 1,000 tenants against the 18 budgets of
/// `benches/budgets.toml`, and the memory the evaluator holds.
fn budget(c: &mut Criterion) {
    use toolwatch::assemble::AssembleConfig;
    use toolwatch::budget::config::BudgetConfig;
    use toolwatch::budget::evaluate::BudgetEvaluator;
    #[derive(serde::Deserialize)]
    struct File {
        budget: BudgetConfig,
    }
    let text = include_str!("budgets.toml");
    let config = toml::from_str::<File>(text)
        .expect("benches/budgets.toml")
        .budget;
    let bodies: Vec<Vec<u8>> = generate(1, 1_000, BASE_NS, 2_000)
        .iter()
        .map(|r| r.traces.encode_to_vec())
        .collect();
    let batches = batches(&bodies);
    let spans: usize = batches.iter().map(|b| b.spans.len()).sum();
    let prices = AssembleConfig::default().prices().expect("sample prices");
    let now = BASE_NS as i64 + 60_000_000_000;

    let before = live_bytes();
    let mut held = BudgetEvaluator::new(config.clone(), prices.clone());
    let alarms: usize = batches.iter().map(|b| held.observe(b, now).len()).sum();
    let bytes = (live_bytes() - before).max(0) as usize;
    eprintln!(
        "budget evaluator: {spans} spans of {} requests over 1,000 tenants, {alarms} alarms, {bytes} heap bytes held ({} per request)",
        held.requests_tracked(),
        bytes / held.requests_tracked().max(1)
    );
    drop(held);

    let mut g = c.benchmark_group("budget");
    g.throughput(Throughput::Elements(spans as u64));
    g.bench_function("observe_1000_tenants_18_budgets", |b| {
        b.iter_batched(
            || BudgetEvaluator::new(config.clone(), prices.clone()),
            |mut e| {
                for batch in &batches {
                    std::hint::black_box(e.observe(batch, now));
                }
                e
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// Journal: append 64 KiB records (about one batch of 50 spans) and make them durable, one
/// fsync per record or per group of 16 (group commit).
fn journal(c: &mut Criterion) {
    use toolwatch::journal::Journal;
    let record = vec![0x5au8; 64 * 1024];
    let mut g = c.benchmark_group("journal");
    g.sample_size(10);
    for per_commit in [1usize, 16] {
        g.throughput(Throughput::Bytes((record.len() * 16) as u64));
        g.bench_function(format!("append_16x64KiB_fsync_every_{per_commit}"), |b| {
            let dir = tempfile::tempdir().expect("tempdir");
            let (mut j, _) = Journal::open(dir.path(), 64 << 20).expect("journal");
            b.iter(|| {
                for i in 0..16 {
                    j.append(&record);
                    if (i + 1) % per_commit == 0 {
                        j.commit().expect("commit");
                    }
                }
            })
        });
    }
    g.finish();
}

/// Journal payload codec: one protected batch of 500 loadgen spans (each request's spans
/// share their resource and scope), encoded once per accepted batch and decoded by each of
/// the four consumers.
fn codec(c: &mut Criterion) {
    use toolwatch::journal::codec::{decode, encode_events, JournalEntry};
    let redactor = Redactor::new(&RedactionConfig::default(), KeyedHasher::new(b"bench-key"))
        .expect("default rules compile");
    let protector = Protector::new(redactor);
    let mut batch = EventBatch::default();
    for body in bodies() {
        let req: ExportTraceServiceRequest = decode::protobuf(&body).expect("decodes");
        let mut b = normalize::spans(req).expect("normalizes");
        protector.protect(&mut b);
        batch.spans.extend(b.spans);
    }
    batch.spans.truncate(500);
    let bytes = encode_events(&batch).expect("encodes");
    eprintln!(
        "codec: {} spans, {} bytes ({} bytes/span)",
        batch.spans.len(),
        bytes.len(),
        bytes.len() / batch.spans.len().max(1)
    );
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Elements(batch.spans.len() as u64));
    g.bench_function("encode_500_spans", |b| {
        b.iter(|| encode_events(std::hint::black_box(&batch)).expect("encodes"))
    });
    g.bench_function("decode_500_spans", |b| {
        b.iter(|| match decode(std::hint::black_box(&bytes)) {
            Ok(JournalEntry::Events(b)) => b.len(),
            _ => panic!("the bench batch decodes"),
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    stages,
    protect_payloads,
    assemble,
    budget,
    journal,
    codec
);
criterion_main!(benches);
