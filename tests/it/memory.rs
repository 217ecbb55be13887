//! `[pipeline] memory_limit`: what requests hold is counted from their body to the journal's
//! commit, and over the intake's allowance the receivers refuse (HTTP 429, gRPC
//! RESOURCE_EXHAUSTED) rather than hold more; a refused request sent again is archived once,
//! and nothing of it is echoed.

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use crate::harness::{read_table, wait_for, Daemon, DaemonOptions};
use crate::otlp::{spans_request, text};
use crate::otlp_json::post;

/// A value that must never appear in a response, a log line or a metric.
const CANARY: &str = "sk-live-CANARY0b7e3d51aa";

/// A secret the default rules find (a GitHub token's shape), planted where executors put
/// text.
const TOKEN: &str = "ghp_R4nD0mCanaryT0kenAbCdEfGhIjKlMnOpQr1";

const MIB: usize = 1 << 20;

fn span(trace: u8, n: u64, note: &str) -> Span {
    Span {
        trace_id: vec![trace; 16],
        span_id: (n + 1).to_be_bytes().to_vec(),
        name: "execute_tool lookup".into(),
        start_time_unix_nano: 1_767_225_600_000_000_000 + n,
        end_time_unix_nano: 1_767_225_600_100_000_000 + n,
        attributes: vec![text("note", note)],
        ..Default::default()
    }
}

fn held(d: &Daemon, holder: &str) -> f64 {
    d.metric(&format!(
        "toolwatch_memory_held_bytes{{holder=\"{holder}\"}}"
    ))
    .unwrap_or(-1.0)
}

fn refused_for_memory(d: &Daemon, transport: &str) -> f64 {
    d.metric(&format!(
        "toolwatch_otlp_rejected_requests_total{{transport=\"{transport}\",signal=\"traces\",reason=\"memory\"}}"
    ))
    .unwrap_or(0.0)
}

/// The daemon with `env` set.
fn daemon_with(env: &[(&str, &str)]) -> Daemon {
    Daemon::start_with(DaemonOptions {
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_its_memory_the_intake_refuses_and_a_request_sent_again_is_kept_once() {
    // 16 MiB: the intake's share is 2 MiB. The journal waits 3 s for others to share a
    // commit, so the first request holds its memory that long.
    let env = [
        ("TOOLWATCH_PIPELINE__MEMORY_LIMIT", "16MiB"),
        ("TOOLWATCH_ARCHIVE__DEDUP_SPANS", "10000"),
        ("TOOLWATCH_JOURNAL__GROUP_COMMIT", "3s"),
    ];
    let mut d = daemon_with(&env);
    assert_eq!(
        d.metric("toolwatch_memory_limit_bytes"),
        Some((16 * MIB) as f64)
    );
    // The de-duplication window is held from the start: 10,000 spans at 32 bytes.
    assert_eq!(held(&d, "windows"), 320_000.0);

    // About 1 MiB of spans: held as 4 MiB, twice the intake's share.
    let note = "x".repeat(1000);
    let big = spans_request(vec![], (0..1000).map(|n| span(1, n, &note)).collect());
    let body = big.encode_to_vec();
    assert!(body.len() > MIB, "{}", body.len());
    let url = format!("{}/v1/traces", d.http_url());
    let first = tokio::spawn({
        let url = url.clone();
        async move { post(&url, "application/x-protobuf", None, body).await }
    });
    tokio::task::block_in_place(|| {
        wait_for("the first request to be held", || {
            (held(&d, "intake") >= (4 * MIB) as f64).then_some(())
        })
    });

    // Meanwhile both transports refuse, and say why; the canary is not echoed.
    let small = spans_request(vec![], vec![span(2, 0, CANARY)]);
    let (status, answer) = post(&url, "application/x-protobuf", None, small.encode_to_vec()).await;
    assert_eq!(status, 429, "{}", String::from_utf8_lossy(&answer));
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(answer.contains("memory limit"), "{answer}");
    assert!(!answer.contains(CANARY));
    let mut client = TraceServiceClient::connect(d.grpc_url())
        .await
        .expect("connect");
    let err = client
        .export(spans_request(vec![], vec![span(3, 0, CANARY)]))
        .await
        .expect_err("refused while the intake is at its allowance");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    assert!(
        err.message().contains("pipeline.memory_limit"),
        "{}",
        err.message()
    );
    assert!(!err.message().contains(CANARY));
    assert_eq!(refused_for_memory(&d, "http"), 1.0);
    assert_eq!(refused_for_memory(&d, "grpc"), 1.0);

    // The first is answered once durable; then its memory is given back.
    let (status, answer) = first.await.expect("first request");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    tokio::task::block_in_place(|| {
        wait_for("the intake to hold nothing", || {
            (held(&d, "intake") == 0.0).then_some(())
        })
    });

    // Sent again, both are taken.
    let (status, _) = post(&url, "application/x-protobuf", None, small.encode_to_vec()).await;
    assert_eq!(status, 200);
    client
        .export(spans_request(vec![], vec![span(3, 0, CANARY)]))
        .await
        .expect("accepted once the memory is back");
    assert_eq!(refused_for_memory(&d, "http"), 1.0);
    assert_eq!(refused_for_memory(&d, "grpc"), 1.0);
    let metrics = d.admin_get("/metrics").1;
    assert!(!metrics.contains(CANARY));

    d.stop();
    let rows = read_table(&d.data_dir, "spans");
    let mut per_trace: BTreeMap<String, usize> = BTreeMap::new();
    for row in &rows {
        let trace = row["trace_id"].as_str().expect("trace_id").to_string();
        *per_trace.entry(trace).or_default() += 1;
    }
    let expected: BTreeMap<String, usize> = [(1u8, 1000), (2, 1), (3, 1)]
        .into_iter()
        .map(|(t, n)| (hex::encode([t; 16]), n))
        .collect();
    assert_eq!(per_trace, expected);
    // The canary was redacted before anything was kept, and the log never saw it.
    assert!(!d.log_text().contains(CANARY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_resident_limit_the_holders_give_way_to_what_they_do_not_count() {
    // A debug build holds more than 24 MiB resident before any request (code, the rules'
    // automata): under a resident limit of 32 MiB the holders' pool is at its floor, a
    // quarter of the limit.
    let env = [
        ("TOOLWATCH_PIPELINE__MEMORY_LIMIT", "32MiB"),
        ("TOOLWATCH_PIPELINE__RESIDENT_LIMIT", "32MiB"),
        ("TOOLWATCH_ARCHIVE__DEDUP_SPANS", "10000"),
    ];
    let mut d = daemon_with(&env);
    // Read ten times a second, averaged: the pool reaches its floor within seconds.
    wait_for("the pool at its floor", || {
        (d.metric("toolwatch_memory_pool_bytes") == Some((8 * MIB) as f64)).then_some(())
    });
    let resident = d
        .metric("toolwatch_memory_resident_bytes")
        .expect("resident gauge");
    assert!(resident > (24 * MIB) as f64, "{resident}");

    // The pipeline goes on at its floor: requests are taken and archived, a planted token
    // redacted, and nothing of it in the gauges or the log.
    let url = format!("{}/v1/traces", d.http_url());
    for t in 1..=3u8 {
        let spans = (0..100)
            .map(|n| span(t, n, &format!("deploy with {TOKEN}")))
            .collect();
        let (status, answer) = post(
            &url,
            "application/x-protobuf",
            None,
            spans_request(vec![], spans).encode_to_vec(),
        )
        .await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    }
    assert_eq!(refused_for_memory(&d, "http"), 0.0);
    let metrics = d.admin_get("/metrics").1;
    assert!(!metrics.contains(TOKEN));
    d.stop();
    let rows = read_table(&d.data_dir, "spans");
    assert_eq!(rows.len(), 300);
    assert!(rows.iter().all(|r| !serde_json::Value::Object(r.clone())
        .to_string()
        .contains(CANARY)));
    assert!(!d.log_text().contains(CANARY));
}

#[test]
fn without_a_resident_limit_the_pool_is_the_memory_limit() {
    let mut d = daemon_with(&[
        ("TOOLWATCH_PIPELINE__MEMORY_LIMIT", "64MiB"),
        ("TOOLWATCH_ARCHIVE__DEDUP_SPANS", "10000"),
    ]);
    // Read at each scrape, for the gauge.
    wait_for("the resident memory to be read", || {
        d.metric("toolwatch_memory_resident_bytes")
            .filter(|&r| r > 0.0)
    });
    assert_eq!(
        d.metric("toolwatch_memory_pool_bytes"),
        Some((64 * MIB) as f64)
    );
    d.stop();
}
