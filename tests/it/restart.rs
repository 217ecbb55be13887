//! Restarts with held items: a sender keeps exporting 50-span requests while the daemon is
//! killed with SIGKILL three times and restarted on the same data directory; then it is
//! started once more with no new traffic and stopped with SIGTERM. Every acknowledged span
//! must be archived exactly once, including children held for a root that never comes:
//! they are replayed and held again at each start, and only the start marker lets the last
//! daemon end its replay and write them at SIGTERM (before it, they stayed held for ever
//! when no new data came).
//!
//! (a) names no tenant anywhere; (b) names it on the root only, children exported in one
//! request and their root in the next (sometimes across a kill), and every span of a trace
//! whose root arrived must be under the root's tenant.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::durability::{assert_subset, kill_seed, log_lines, unique};
use crate::harness::{
    free_addr, metric_text, read_table, wait_for, Daemon, DaemonOptions, SpanKey, TENANT_CONSUMERS,
};
use crate::otlp::{spans_request, text};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Whether and where the traffic names tenants.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Naming {
    /// No tenant anywhere.
    Nowhere,
    /// `executor.tenant_id` on root spans only (`acme` or `globex`, by trace).
    RootOnly,
}

/// Spans in each request.
const BATCH: usize = 50;
/// Traces in request 0 whose root never comes (5 children each).
const ORPHAN_TRACES: u8 = 10;

/// The kind of trace a trace id belongs to (its byte 12).
const ORPHAN: u8 = 1;
const DEFERRED: u8 = 2;
const COMPLETE: u8 = 3;

/// One planned span.
struct Planned {
    trace: [u8; 16],
    span: [u8; 8],
    parent: Option<[u8; 8]>,
    tenant: Option<&'static str>,
}

fn trace_id(salt: u64, request: u32, kind: u8, k: u8) -> [u8; 16] {
    let mut t = [0u8; 16];
    t[..8].copy_from_slice(&salt.to_be_bytes());
    t[8..12].copy_from_slice(&request.to_be_bytes());
    t[12] = kind;
    t[13] = k;
    t[15] = 1;
    t
}

fn span_id(request: u32, kind: u8, k: u8, j: u8) -> [u8; 8] {
    let mut s = [0u8; 8];
    s[..4].copy_from_slice(&request.to_be_bytes());
    s[4] = kind;
    s[5] = k;
    s[6] = j;
    s[7] = 1;
    s
}

/// The tenant a root names in (b): by trace.
fn tenant_of(k: u8) -> &'static str {
    if k.is_multiple_of(2) {
        "acme"
    } else {
        "globex"
    }
}

/// Request `i`'s 50 spans. Request 0: ten traces of five children whose root never comes.
/// Request i ≥ 1: the children (4 each) of five traces whose roots come in request i + 1;
/// the roots of request i − 1's such traces (request 1: five lone roots); five complete
/// traces (root first, 4 children).
fn plan(salt: u64, naming: Naming, i: u32) -> Vec<Planned> {
    let claim = |k: u8| (naming == Naming::RootOnly).then(|| tenant_of(k));
    let mut out = Vec::new();
    if i == 0 {
        for k in 0..ORPHAN_TRACES {
            let trace = trace_id(salt, 0, ORPHAN, k);
            for j in 1..=5 {
                out.push(Planned {
                    trace,
                    span: span_id(0, ORPHAN, k, j),
                    parent: Some(span_id(0, ORPHAN, k, 0)),
                    tenant: None,
                });
            }
        }
        return out;
    }
    for k in 0..5 {
        let trace = trace_id(salt, i, DEFERRED, k);
        for j in 1..=4 {
            out.push(Planned {
                trace,
                span: span_id(i, DEFERRED, k, j),
                parent: Some(span_id(i, DEFERRED, k, 0)),
                tenant: None,
            });
        }
    }
    for k in 0..5 {
        // Request 1 has no earlier deferred traces: its roots are of traces of their own.
        let (r, kind) = if i == 1 {
            (1, COMPLETE)
        } else {
            (i - 1, DEFERRED)
        };
        let k = if i == 1 { 10 + k } else { k };
        out.push(Planned {
            trace: trace_id(salt, r, kind, k),
            span: span_id(r, kind, k, 0),
            parent: None,
            tenant: claim(k),
        });
    }
    for k in 0..5 {
        let trace = trace_id(salt, i, COMPLETE, k);
        for j in 0..=4 {
            out.push(Planned {
                trace,
                span: span_id(i, COMPLETE, k, j),
                parent: (j > 0).then(|| span_id(i, COMPLETE, k, 0)),
                tenant: if j == 0 { claim(k) } else { None },
            });
        }
    }
    assert_eq!(out.len(), BATCH);
    out
}

/// The tenant each trace of the plan names (by its root), keyed by hex trace id.
fn named_tenant(planned: &[Planned]) -> Vec<(String, &'static str)> {
    planned
        .iter()
        .filter(|p| p.parent.is_none())
        .filter_map(|p| Some((hex::encode(p.trace), p.tenant?)))
        .collect()
}

/// The OTLP/HTTP protobuf body of request `i`, and its span ids.
fn request(salt: u64, naming: Naming, i: u32) -> (Vec<u8>, Vec<SpanKey>) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    let planned = plan(salt, naming, i);
    let keys = planned
        .iter()
        .map(|p| (hex::encode(p.trace), hex::encode(p.span)))
        .collect();
    let spans = planned
        .iter()
        .map(|p| {
            let root = p.parent.is_none();
            let mut attributes = if root {
                vec![text("gen_ai.operation.name", "invoke_agent")]
            } else {
                vec![
                    text("gen_ai.operation.name", "execute_tool"),
                    text("gen_ai.tool.name", "lookup_order"),
                ]
            };
            if let Some(t) = p.tenant {
                attributes.push(text("executor.tenant_id", t));
            }
            Span {
                trace_id: p.trace.to_vec(),
                span_id: p.span.to_vec(),
                parent_span_id: p.parent.map(|s| s.to_vec()).unwrap_or_default(),
                name: if root {
                    "invoke_agent restart"
                } else {
                    "execute_tool lookup_order"
                }
                .into(),
                start_time_unix_nano: now,
                end_time_unix_nano: now + 1_000_000,
                attributes,
                ..Default::default()
            }
        })
        .collect();
    let body = spans_request(vec![text("service.name", "restart-test")], spans).encode_to_vec();
    (body, keys)
}

/// What the sender did: requests in order, each with its span ids, and whether it was
/// acknowledged (answered 200).
#[derive(Default)]
struct Sent {
    sent: Vec<SpanKey>,
    acked: Vec<SpanKey>,
    requests_acked: u32,
}

/// Sends request 0, 1, 2, ... one at a time to `http`, each until it is answered 200
/// (connection failures and 429/503 are retried; the daemon may be down), until `stop`.
fn sender(
    http: SocketAddr,
    salt: u64,
    naming: Naming,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Sent>>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        // The client's connection pool needs the runtime's reactor when it is built.
        let _guard = rt.enter();
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client");
        let url = format!("http://{http}/v1/traces");
        let mut i = 0u32;
        while !stop.load(Ordering::SeqCst) {
            let (body, keys) = request(salt, naming, i);
            log.lock().expect("log").sent.extend(keys.iter().cloned());
            loop {
                let answer = rt.block_on(
                    client
                        .post(&url)
                        .header("content-type", "application/x-protobuf")
                        .body(body.clone())
                        .send(),
                );
                match answer.map(|r| r.status().as_u16()) {
                    Ok(200) => {
                        let mut l = log.lock().expect("log");
                        l.acked.extend(keys);
                        l.requests_acked += 1;
                        break;
                    }
                    // Down (killed, restarting) or refusing for load: again.
                    Ok(429 | 503) | Err(_) => {}
                    Ok(other) => panic!("request {i} answered {other}"),
                }
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            i += 1;
        }
    })
}

/// The `toolwatch stopped` line's `span_rows`.
fn stopped_span_rows(d: &Daemon) -> u64 {
    let lines = log_lines(&d.log, "toolwatch stopped");
    assert_eq!(lines.len(), 1, "one stop line:\n{}", d.log_text());
    lines[0]["span_rows"].as_u64().expect("span_rows")
}

fn kill_and_restart(naming: Naming) {
    let started = Instant::now();
    let seed = kill_seed();
    println!("restart {naming:?}: seed {seed} (DURABILITY_SEED={seed} replays it)");
    let mut rng = StdRng::seed_from_u64(seed);
    let salt: u64 = rng.random();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let listen = (free_addr(), free_addr());
    // Files complete after a second, so replays meet records partly in completed files; the
    // wait for a tenant is longer than the test, so what request 0 holds stays held across
    // every restart (only the final SIGTERM lets it go).
    let start = || {
        Daemon::start_with(DaemonOptions {
            data_dir: Some(data.clone()),
            listen: Some(listen),
            env: vec![
                ("TOOLWATCH_ARCHIVE__MAX_FILE_AGE".into(), "1s".into()),
                ("TOOLWATCH_TENANCY__WAIT".into(), "10m".into()),
                ("TOOLWATCH_LOG__LEVEL".into(), "info".into()),
            ],
            ..Default::default()
        })
    };
    let mut daemon = start();
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Sent::default()));
    let sending = sender(
        daemon.http,
        salt,
        naming,
        Arc::clone(&stop),
        Arc::clone(&log),
    );
    let acked_requests = || log.lock().expect("log").requests_acked;
    let mut before = 0;
    for kill in 1..=3 {
        // Only kill once this daemon has acknowledged something new (the first: request 0
        // and at least one more, so the sender's space has seen a root).
        let now = wait_for("new acknowledgements before a kill", || {
            let n = acked_requests();
            (n > before.max(1)).then_some(n)
        });
        std::thread::sleep(Duration::from_millis(rng.random_range(200..800)));
        let killed = daemon.signal(libc::SIGKILL);
        assert!(!killed.success(), "SIGKILL ends the daemon: {killed}");
        before = acked_requests();
        println!("restart {naming:?}: kill {kill} after {now} then {before} requests acknowledged");
        if kill < 3 {
            daemon = start();
        }
    }
    stop.store(true, Ordering::SeqCst);
    sending.join().expect("sender");

    // The last start: no new traffic. Replay holds request 0's children (their root never
    // comes) again, in every consumer.
    let mut daemon = start();
    let held = wait_for("request 0's children held again after the restart", || {
        let (_, text) = daemon.admin_get("/metrics");
        let held: Vec<f64> = TENANT_CONSUMERS
            .iter()
            .map(|c| {
                metric_text(
                    &text,
                    &format!("toolwatch_tenant_held_items{{consumer=\"{c}\"}}"),
                )
                .unwrap_or(0.0)
            })
            .collect();
        held.iter()
            .all(|h| *h >= f64::from(ORPHAN_TRACES) * 5.0)
            .then_some(held)
    });
    daemon.stop();
    let last_rows = stopped_span_rows(&daemon);

    let sent_log = log.lock().expect("log");
    let acked = unique(sent_log.acked.clone(), "the acknowledged spans");
    let sent: BTreeSet<SpanKey> = sent_log.sent.iter().cloned().collect();
    let rows = read_table(&data, "spans");
    let mut count: BTreeMap<SpanKey, usize> = BTreeMap::new();
    let mut tenant: BTreeMap<SpanKey, String> = BTreeMap::new();
    for r in &rows {
        let key = (
            r["trace_id"].as_str().expect("trace id").to_string(),
            r["span_id"].as_str().expect("span id").to_string(),
        );
        *count.entry(key.clone()).or_default() += 1;
        tenant.insert(key, r["tenant"].as_str().expect("tenant").to_string());
    }
    let twice: Vec<_> = count.iter().filter(|(_, n)| **n > 1).take(10).collect();
    assert!(twice.is_empty(), "archived more than once: {twice:?}");
    let archived: BTreeSet<SpanKey> = count.keys().cloned().collect();
    println!(
        "restart {naming:?}: {} requests, {} spans acknowledged, {} archived, {} sent; the last \
         start held {held:?} and wrote {last_rows} span rows at SIGTERM; {:.1} s",
        sent_log.requests_acked,
        acked.len(),
        archived.len(),
        sent.len(),
        started.elapsed().as_secs_f64()
    );
    assert_subset(&acked, &archived, "acknowledged spans in the archive");
    assert_subset(&archived, &sent, "archived spans among those sent");
    let orphans: BTreeSet<SpanKey> = request(salt, naming, 0).1.into_iter().collect();
    assert_subset(&orphans, &acked, "request 0 acknowledged");
    assert!(
        last_rows >= held[0] as u64,
        "the last daemon wrote {last_rows} span rows, fewer than the {} it held",
        held[0]
    );

    // Tenants: every span of a trace whose root is archived is under the root's tenant;
    // the others (and everything in (a)) under `default`.
    let mut named: BTreeMap<String, &str> = BTreeMap::new();
    for i in 0..=sent_log.requests_acked + 1 {
        named.extend(named_tenant(&plan(salt, naming, i)));
    }
    let roots: BTreeSet<&str> = rows
        .iter()
        .filter(|r| r["parent_span_id"].is_null() || r["parent_span_id"] == "")
        .map(|r| r["trace_id"].as_str().expect("trace id"))
        .collect();
    let mut by_tenant: BTreeMap<&str, usize> = BTreeMap::new();
    for ((trace, span), t) in &tenant {
        let expected = match named.get(trace) {
            Some(root_tenant) if roots.contains(trace.as_str()) => root_tenant,
            _ => "default",
        };
        assert_eq!(t, expected, "span {trace} {span}");
        *by_tenant.entry(t.as_str()).or_default() += 1;
    }
    println!("restart {naming:?}: archived by tenant {by_tenant:?}");
    if naming == Naming::RootOnly {
        assert!(by_tenant.get("acme").copied().unwrap_or(0) > 0);
        assert!(by_tenant.get("globex").copied().unwrap_or(0) > 0);
    }
}

#[test]
fn held_items_of_untenanted_traffic_survive_kill_9_and_are_archived_once_at_sigterm() {
    kill_and_restart(Naming::Nowhere);
}

#[test]
fn children_before_a_root_naming_the_tenant_survive_kill_9_under_the_roots_tenant() {
    kill_and_restart(Naming::RootOnly);
}
