//! Rates per tenant: one tenant's flood spends only its own share. Two senders with their own
//! tenants and tokens; one floods with blast, the other sends steadily the whole time.

use std::collections::BTreeSet;
use std::time::Instant;

use crate::harness::{loadgen, read_ids, read_table, span_keys, Daemon, DaemonOptions, SpanKey};

#[test]
fn one_tenants_flood_does_not_take_another_tenants_share() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = |name: &str| format!("tw-{name}-token-3c9a71e0");
    let sha = |name: &str| toolwatch::receive::auth::token_sha256(&token(name));
    let config = dir.path().join("toolwatch.toml");
    std::fs::write(
        &config,
        format!(
            "[auth]\nmode = \"required\"\n\n[[auth.senders]]\nname = \"flooder\"\ntoken_sha256 = \"{}\"\ntenants = [\"noisy-0\"]\n\n[[auth.senders]]\nname = \"steady\"\ntoken_sha256 = \"{}\"\ntenants = [\"quiet-0\"]\n\n[limits.rate.tenant]\nrequests_per_second = 20\nburst = \"1s\"\n\n[admin]\nopen_metrics = true\n",
            sha("flooder"),
            sha("steady")
        ),
    )
    .expect("config");
    let mut d = Daemon::start_with(DaemonOptions {
        config: Some(config),
        ..Default::default()
    });
    let token_file = |name: &str| {
        let p = dir.path().join(format!("{name}.token"));
        std::fs::write(&p, token(name)).expect("token file");
        p.to_str().expect("utf-8").to_string()
    };
    let (flood_token, steady_token) = (token_file("flooder"), token_file("steady"));
    let acked = dir.path().join("steady-acked.txt");
    let http = d.http_url();
    let started = Instant::now();
    let flood = std::thread::spawn(move || {
        loadgen(&[
            "--blast",
            "--target",
            &http,
            "--duration",
            "8",
            "--connections",
            "4",
            "--requests-per-batch",
            "5",
            "--tenants",
            "1",
            "--tenant-prefix",
            "noisy-",
            "--token-file",
            &flood_token,
        ])
    });
    // 40 agent runs at 5 a second: 10 export requests a second (traces and logs), half the
    // tenant's rate, for as long as the flood lasts.
    let steady = loadgen(&[
        "--target",
        &d.grpc_url(),
        "--requests",
        "40",
        "--rate",
        "5",
        "--tenant-prefix",
        "quiet-",
        "--token-file",
        &steady_token,
        "--acked-file",
        acked.to_str().expect("utf-8"),
    ]);
    let flood = flood.join().expect("blast thread");
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!(
        "flood: {} batches admitted, {} refused; steady: {} runs, {} retries; {elapsed:.1}s",
        flood["batches"], flood["refused"], steady["requests"], steady["retries"]
    );
    assert_eq!(steady["failed_batches"], 0, "{steady}");
    assert_eq!(
        steady["retries"], 0,
        "the steady tenant was never refused: {steady}"
    );
    assert_eq!(steady["requests"], 40, "{steady}");
    assert!(
        flood["refused"].as_u64().is_some_and(|n| n > 0),
        "the flood was refused: {flood}"
    );
    let admitted = flood["batches"].as_u64().unwrap_or(0);
    assert!(admitted > 0, "the flood kept its share: {flood}");
    // A bucket of 20 requests a second holding one second: never more than that admitted.
    let most = 20.0 + 20.0 * (elapsed + 1.0);
    assert!(
        (admitted as f64) <= most,
        "{admitted} batches admitted in {elapsed:.1}s"
    );
    let limited = d
        .metric("toolwatch_rate_limited_total{scope=\"tenant\",name=\"noisy-0\"}")
        .unwrap_or(0.0);
    assert!(
        limited >= flood["refused"].as_f64().unwrap_or(0.0),
        "{limited}: {flood}"
    );
    assert_eq!(
        d.metric("toolwatch_rate_limited_total{scope=\"tenant\",name=\"quiet-0\"}"),
        None
    );
    d.stop();

    let spans = read_table(&d.data_dir, "spans");
    let archived: BTreeSet<SpanKey> = span_keys(spans.iter().filter(|r| r["tenant"] == "quiet-0"))
        .into_iter()
        .collect();
    let want: BTreeSet<SpanKey> = read_ids(&acked).into_iter().collect();
    assert_eq!(
        archived, want,
        "every steady span acknowledged is archived, nothing else"
    );
    assert_eq!(
        spans.iter().filter(|r| r["tenant"] == "noisy-0").count() as u64,
        flood["spans"].as_u64().unwrap_or(0),
        "every flood span acknowledged is archived"
    );
}

/// Over gRPC a refusal is RESOURCE_EXHAUSTED with RetryInfo; the exporter waits as told and
/// nothing is lost. Every refusal is one retry, and one count.
#[test]
fn a_tenant_over_its_rate_over_grpc_is_told_when_to_retry() {
    let mut d = Daemon::start_with(DaemonOptions {
        env: vec![
            (
                "TOOLWATCH_LIMITS__RATE__TENANT__REQUESTS_PER_SECOND".into(),
                "5".into(),
            ),
            ("TOOLWATCH_LIMITS__RATE__TENANT__BURST".into(), "1s".into()),
        ],
        ..Default::default()
    });
    let report = loadgen(&[
        "--target",
        &d.grpc_url(),
        "--requests",
        "12",
        "--concurrency",
        "1",
    ]);
    assert_eq!(report["failed_batches"], 0, "{report}");
    let retries = report["retries"].as_f64().unwrap_or(0.0);
    assert!(retries > 0.0, "24 requests against 5 a second: {report}");
    assert_eq!(
        d.metric("toolwatch_rate_limited_total{scope=\"tenant\",name=\"tenant-0\"}"),
        Some(retries)
    );
    assert_eq!(
        d.metric("toolwatch_otlp_rejected_requests_total{transport=\"grpc\",signal=\"traces\",reason=\"rate_limited\"}")
            .unwrap_or(0.0)
            + d.metric("toolwatch_otlp_rejected_requests_total{transport=\"grpc\",signal=\"logs\",reason=\"rate_limited\"}")
                .unwrap_or(0.0),
        retries
    );
    d.stop();
    assert_eq!(
        read_table(&d.data_dir, "spans").len() as u64,
        report["spans"].as_u64().unwrap_or(0)
    );
}
