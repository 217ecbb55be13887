//! A tool that reads a log full of credentials: as many ~4 MiB dense `password=...` tool
//! results as the machine has cores arrive at once; while protect works on them, small
//! requests sent afterwards are acknowledged first (protect keeps no runtime worker), the big
//! ones are acknowledged too, and the credential is in no output.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use crate::harness::{all_bytes, contains, read_table, wait_for, Daemon};
use crate::otlp::{spans_request, text};

/// The credential the log repeats.
const CANARY: &str = "abc123";
/// One line of the log.
const LINE: &str = "password=abc123 ";
/// Small requests sent once the big ones are being protected.
const SMALL: usize = 5;

/// One tool span (its own trace) whose result is `result`, as an OTLP/HTTP protobuf body.
fn tool_request(n: u8, result: String) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    let span = Span {
        trace_id: [[0x7a; 15].as_slice(), &[n]].concat(),
        span_id: [[0x5b; 7].as_slice(), &[n]].concat(),
        name: "execute_tool read_log".into(),
        start_time_unix_nano: now,
        end_time_unix_nano: now + 1_000_000,
        attributes: vec![
            text("gen_ai.operation.name", "execute_tool"),
            text("gen_ai.tool.name", "read_log"),
            text("gen_ai.tool.call.result", &result),
        ],
        ..Default::default()
    };
    spans_request(vec![text("service.name", "log-reader")], vec![span]).encode_to_vec()
}

#[test]
fn small_requests_are_acknowledged_while_large_credential_dumps_are_protected() {
    let mut d = Daemon::start();
    let big = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
    // Just under limits.structure.max_string_bytes (4 MiB).
    let dump = LINE.repeat((4 << 20) / LINE.len() - 64);
    let url = format!("{}/v1/traces", d.http_url());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(big + 2)
        .enable_all()
        .build()
        .expect("runtime");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()
        .expect("client");
    // Each answer takes the next number: the order in which the daemon acknowledged them.
    let answered = Arc::new(AtomicUsize::new(0));
    let post = |body: Vec<u8>| {
        let (client, url, answered) = (client.clone(), url.clone(), Arc::clone(&answered));
        async move {
            let status = client
                .post(&url)
                .header("content-type", "application/x-protobuf")
                .body(body)
                .send()
                .await
                .map(|r| r.status().as_u16());
            (status.ok(), answered.fetch_add(1, Ordering::SeqCst))
        }
    };
    let large: Vec<_> = (0..big)
        .map(|i| rt.spawn(post(tool_request(i as u8, dump.clone()))))
        .collect();
    // Every large batch has been decoded and handed to protect.
    wait_for("every large batch in protect", || {
        let lines = d
            .log_text()
            .matches("protecting a large batch off the runtime workers")
            .count();
        (lines == big).then_some(())
    });
    let small: Vec<(Option<u16>, usize)> = (0..SMALL)
        .map(|i| {
            let result = format!("{LINE}ok {i}");
            rt.block_on(post(tool_request(100 + i as u8, result)))
        })
        .collect();
    let large: Vec<(Option<u16>, usize)> = large
        .into_iter()
        .map(|h| rt.block_on(h).expect("large request task"))
        .collect();
    assert!(small.iter().all(|(s, _)| *s == Some(200)), "{small:?}");
    assert!(large.iter().all(|(s, _)| *s == Some(200)), "{large:?}");
    let small_order: Vec<usize> = small.iter().map(|(_, n)| *n).collect();
    let mut large_order: Vec<usize> = large.iter().map(|(_, n)| *n).collect();
    large_order.sort_unstable();
    assert_eq!(
        small_order,
        (0..SMALL).collect::<Vec<_>>(),
        "the small requests, sent after the large ones, are answered first and in order \
         (large ones answered as {large_order:?})"
    );
    assert_eq!(large_order, (SMALL..SMALL + big).collect::<Vec<_>>());

    // Everything archived, every password removed, here and in every other output.
    let (_, metrics) = d.admin_get("/metrics");
    assert_eq!(
        d.metric("toolwatch_received_items_total{signal=\"traces\"}"),
        Some((big + SMALL) as f64)
    );
    d.stop();
    let rows = read_table(&d.data_dir, "spans");
    assert_eq!(rows.len(), big + SMALL);
    for r in &rows {
        let row = serde_json::to_string(r).expect("row");
        assert!(!row.contains(CANARY), "the password in an archived row");
        assert!(row.contains("[REDACTED"), "nothing redacted in {row:.300}");
    }
    assert!(!metrics.contains(CANARY), "the password in /metrics");
    assert!(!d.log_text().contains(CANARY), "the password in the log");
    assert!(
        !contains(&all_bytes(&d.data_dir), CANARY),
        "the password in a file of the data directory"
    );
}
