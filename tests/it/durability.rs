//! Durability end to end: what toolwatch acknowledged survives `kill -9` and is archived
//! exactly once; a torn or corrupt journal tail is cut and counted at start; overload is
//! refused with retryable codes while the journal and memory stay bounded.
//!
//! Every check compares sets of (trace id, span id): what the clients were told succeeded
//! (loadgen's `--acked-file`, the Python SDK exporter's successes), what they attempted
//! (`--sent-file`), and what DuckDB reads from the archive.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::harness::{
    free_addr, loadgen, parquet_files, python, read_ids, read_table_python, toolwatch, try_get,
    wait_for, Daemon, DaemonOptions, SpanKey,
};
use crate::otlp::{spans_request, text};

// ---------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------

/// A set from a list, asserting the list has no repeats (`what` names it in the failure).
pub(crate) fn unique(ids: Vec<SpanKey>, what: &str) -> BTreeSet<SpanKey> {
    let n = ids.len();
    let set: BTreeSet<SpanKey> = ids.into_iter().collect();
    assert_eq!(
        set.len(),
        n,
        "{what} lists {} span ids more than once",
        n - set.len()
    );
    set
}

/// Every (trace_id, span_id) row of the archive's `spans` table, read by DuckDB (one entry
/// per row: repeats are kept so the caller can find them).
fn archived_span_ids(data_dir: &Path) -> Vec<SpanKey> {
    if parquet_files(data_dir, "spans").is_empty() {
        return Vec::new();
    }
    read_table_python("duckdb", data_dir, "spans")
        .iter()
        .map(|r| {
            let text = |k: &str| r[k].as_str().expect("hex id").to_string();
            (text("trace_id"), text("span_id"))
        })
        .collect()
}

/// The archive as a set, asserting no span is in it twice.
fn archived_once(data_dir: &Path) -> BTreeSet<SpanKey> {
    let rows = archived_span_ids(data_dir);
    let mut count: BTreeMap<&SpanKey, usize> = BTreeMap::new();
    for r in &rows {
        *count.entry(r).or_default() += 1;
    }
    let twice: Vec<_> = count.iter().filter(|(_, n)| **n > 1).take(10).collect();
    assert!(
        twice.is_empty(),
        "spans archived more than once (first 10 of {}): {twice:?}",
        count.values().filter(|n| **n > 1).count()
    );
    rows.into_iter().collect()
}

/// Asserts `a ⊆ b`, naming the first missing entries.
pub(crate) fn assert_subset(a: &BTreeSet<SpanKey>, b: &BTreeSet<SpanKey>, what: &str) {
    let missing: Vec<_> = a.difference(b).collect();
    assert!(
        missing.is_empty(),
        "{what}: {} of {} missing, e.g. {:?}",
        missing.len(),
        a.len(),
        &missing[..missing.len().min(10)]
    );
}

/// The value of one sample in a Prometheus text exposition.
fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let (n, v) = l.rsplit_once(' ')?;
        (n == name).then(|| v.parse().ok()).flatten()
    })
}

/// The sum of every sample of `family` whose labels contain `label` (e.g. `reason="overloaded"`).
fn sum_samples(metrics: &str, family: &str, label: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) && l.contains(label))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// The JSON log lines whose message is `message`.
pub(crate) fn log_lines(log: &Arc<Mutex<Vec<String>>>, message: &str) -> Vec<Value> {
    log.lock()
        .expect("log lock")
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["message"] == message)
        .collect()
}

/// A known OTLP/HTTP protobuf traces request: `n` spans of one trace whose ids start with
/// `tag`, so every id is known beforehand.
fn known_spans(tag: u8, n: u8) -> (ExportTraceServiceRequest, BTreeSet<SpanKey>) {
    let trace_id = vec![tag; 16];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    let spans: Vec<Span> = (1..=n)
        .map(|i| Span {
            trace_id: trace_id.clone(),
            span_id: vec![tag, i, 0, 0, 0, 0, 0, 1],
            name: format!("execute_tool known-{i}"),
            start_time_unix_nano: now,
            end_time_unix_nano: now + 1_000_000,
            attributes: vec![
                text("gen_ai.operation.name", "execute_tool"),
                text("gen_ai.tool.name", "known_tool"),
            ],
            ..Default::default()
        })
        .collect();
    let ids = spans
        .iter()
        .map(|s| (hex::encode(&s.trace_id), hex::encode(&s.span_id)))
        .collect();
    let resource = vec![
        text("service.name", "durability-test"),
        text("executor.tenant_id", "tenant-0"),
    ];
    (spans_request(resource, spans), ids)
}

/// POSTs a protobuf traces request; returns status and `Retry-After` (None if unreachable).
fn post_traces(http: SocketAddr, body: Vec<u8>) -> Option<(u16, Option<String>)> {
    let url = format!("http://{http}/v1/traces");
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        rt.block_on(async {
            let resp = reqwest::Client::new()
                .post(&url)
                .header("content-type", "application/x-protobuf")
                .body(body)
                .send()
                .await
                .ok()?;
            let retry_after = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            Some((resp.status().as_u16(), retry_after))
        })
    })
    .join()
    .ok()
    .flatten()
}

/// `toolwatch loadgen ... --json` running in the background.
struct Loadgen {
    child: Child,
}

impl Loadgen {
    fn start(args: &[&str]) -> Loadgen {
        let child = toolwatch()
            .arg("loadgen")
            .args(args)
            .arg("--json")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start loadgen");
        Loadgen { child }
    }

    /// Waits (up to `deadline`) for loadgen to finish; returns its exit status, JSON report
    /// and stderr.
    fn finish(mut self, deadline: Duration) -> (ExitStatus, Value, String) {
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait loadgen") {
                break s;
            }
            assert!(
                start.elapsed() < deadline,
                "loadgen still running after {deadline:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut out = String::new();
        let mut err = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let report = serde_json::from_str(out.trim())
            .unwrap_or_else(|e| panic!("loadgen report {out:?}: {e}; stderr: {err}"));
        (status, report, err)
    }
}

impl Drop for Loadgen {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------
// a. kill -9 while loadgen sends
// ---------------------------------------------------------------------------------------

/// The seed for random kill moments: `DURABILITY_SEED` to replay a failure, else the clock.
pub(crate) fn kill_seed() -> u64 {
    std::env::var("DURABILITY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        })
}

#[test]
fn spans_acknowledged_before_kill_9_are_archived_exactly_once() {
    let started = Instant::now();
    let seed = kill_seed();
    println!("durability: kill seed {seed} (DURABILITY_SEED={seed} replays the kill moments)");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let acked_file = dir.path().join("acked");
    let sent_file = dir.path().join("sent");
    // Fixed ports, so that loadgen finds each restarted daemon where it sends.
    let listen = (free_addr(), free_addr());
    // Small segments, so that segments roll and are removed between kills; files complete
    // after a second, so that a replay meets records partly in completed files.
    let start = || {
        Daemon::start_with(DaemonOptions {
            data_dir: Some(data.clone()),
            listen: Some(listen),
            env: vec![
                ("TOOLWATCH_JOURNAL__SEGMENT_BYTES".into(), "256KiB".into()),
                ("TOOLWATCH_ARCHIVE__MAX_FILE_AGE".into(), "1s".into()),
                ("TOOLWATCH_LOG__LEVEL".into(), "info".into()),
            ],
            ..Default::default()
        })
    };
    let mut daemon = start();
    let target = daemon.http_url();
    let lg = Loadgen::start(&[
        "--target",
        &target,
        "--http",
        "--requests",
        "4000",
        "--rate",
        "400",
        "--batch",
        "5",
        "--concurrency",
        "4",
        "--seed",
        "11",
        "--acked-file",
        acked_file.to_str().expect("utf-8"),
        "--sent-file",
        sent_file.to_str().expect("utf-8"),
    ]);

    let mut restarts = Vec::new();
    let mut acked_before = 0;
    for kill in 1..=3 {
        // Only kill once this incarnation has acknowledged something new.
        let now_acked = wait_for("new acknowledgements before a kill", || {
            let n = read_ids(&acked_file).len();
            (n > acked_before).then_some(n)
        });
        let pause = Duration::from_millis(rng.random_range(300..1500));
        std::thread::sleep(pause);
        let acked_at_kill = read_ids(&acked_file).len();
        let killed = daemon.signal(libc::SIGKILL);
        assert!(!killed.success(), "SIGKILL ends the daemon: {killed}");
        println!(
            "durability: kill {kill} after {pause:?} more ({now_acked} then {acked_at_kill} spans acknowledged)"
        );
        acked_before = acked_at_kill;
        daemon = start();
        restarts.push(Arc::clone(&daemon.log));
    }

    let (status, report, stderr) = lg.finish(Duration::from_secs(90));
    assert!(
        status.success() && report["failed_batches"] == 0,
        "loadgen gave up on exports across the restarts: {status} {report}\n{stderr}"
    );
    daemon.stop();

    let acked = unique(read_ids(&acked_file), "the acked file");
    let sent = unique(read_ids(&sent_file), "the sent file");
    let archived = archived_once(&data);
    let replays: Vec<Value> = restarts
        .iter()
        .flat_map(|l| log_lines(l, "replaying journal records the archive had not completed"))
        .collect();
    let journal_named = parquet_files(&data, "spans")
        .iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains("_j"))
        })
        .count();
    println!(
        "durability: acked {} archived {} sent {} extra (stored, answer lost, retried) {} \
         loadgen retries {} replays {} files named by journal records {} in {:.1}s",
        acked.len(),
        archived.len(),
        sent.len(),
        archived.len() - acked.len().min(archived.len()),
        report["retries"],
        replays.len(),
        journal_named,
        started.elapsed().as_secs_f64()
    );
    for r in &replays {
        println!("durability: replay {r}");
    }

    assert!(
        acked.len() > 1000,
        "only {} spans acknowledged",
        acked.len()
    );
    assert_eq!(
        acked.len() as u64,
        report["spans"].as_u64().expect("spans"),
        "the acked file lists what loadgen counted as acknowledged"
    );
    assert_subset(&acked, &archived, "acknowledged spans in the archive");
    assert_subset(&archived, &sent, "archived spans among those sent");
    assert!(
        !replays.is_empty(),
        "no restart replayed journal records: the kills never caught unarchived data"
    );
    assert!(
        journal_named > 0,
        "no archive file is named by its journal records"
    );
}

// ---------------------------------------------------------------------------------------
// b. a damaged journal tail
// ---------------------------------------------------------------------------------------

/// Where each record of a journal segment starts and how long it is (header, then
/// `len u32 | crc32 u32 | seq u64 | payload`), read independently of the daemon's code.
fn record_bounds(segment: &[u8]) -> Vec<(usize, usize)> {
    const HEADER: usize = 4 + 8;
    const RECORD_HEADER: usize = 4 + 4 + 8;
    assert_eq!(&segment[..4], b"TWJ1", "segment magic");
    let mut out = Vec::new();
    let mut at = HEADER;
    while at < segment.len() {
        let len = u32::from_le_bytes(segment[at..at + 4].try_into().expect("4 bytes")) as usize;
        let size = RECORD_HEADER + len;
        assert!(
            at + size <= segment.len(),
            "record at {at} runs past the end"
        );
        out.push((at, size));
        at += size;
    }
    out
}

/// The newest segment file of a data directory's journal.
fn newest_segment(data: &Path) -> PathBuf {
    let mut segs: Vec<PathBuf> = std::fs::read_dir(data.join("journal"))
        .expect("journal folder")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("seg-") && n.ends_with(".twj"))
        })
        .collect();
    segs.sort();
    segs.pop().expect("a journal segment")
}

#[derive(Debug, Clone, Copy)]
enum Damage {
    /// Cut this many bytes off the end (a torn append).
    Truncate(usize),
    /// Flip one byte in the middle of the last record's payload (same length).
    FlipPayloadByte,
}

fn damaged_tail_case(damage: Damage) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let acked_file = dir.path().join("acked");
    let opts = || DaemonOptions {
        data_dir: Some(data.clone()),
        ..Default::default()
    };
    let mut d = Daemon::start_with(opts());
    let report = loadgen(&[
        "--target",
        &d.http_url(),
        "--http",
        "--requests",
        "30",
        "--batch",
        "3",
        "--concurrency",
        "1",
        "--seed",
        "21",
        "--acked-file",
        acked_file.to_str().expect("utf-8"),
    ]);
    let before_cut = unique(read_ids(&acked_file), "the acked file");
    assert_eq!(
        before_cut.len() as u64,
        report["spans"].as_u64().expect("spans")
    );
    // The last record: a request of known spans, acknowledged, then damaged on disk.
    let (last, last_ids) = known_spans(0xd1, 3);
    let posted = post_traces(d.http, last.encode_to_vec()).expect("POST");
    assert_eq!(posted.0, 200, "the last request is accepted");
    let killed = d.signal(libc::SIGKILL);
    assert!(!killed.success(), "SIGKILL ends the daemon: {killed}");

    let seg = newest_segment(&data);
    let bytes = std::fs::read(&seg).expect("read segment");
    let records = record_bounds(&bytes);
    // Every accepted export is one record (traces and logs), then the known request.
    assert_eq!(
        records.len() as u64,
        report["exports"].as_u64().expect("exports") + 1,
        "one record per accepted export in {}",
        seg.display()
    );
    let (last_at, last_size) = *records.last().expect("a record");
    assert_eq!(last_at + last_size, bytes.len());
    let expected_cut = match damage {
        Damage::Truncate(n) => {
            assert!(n < last_size);
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&seg)
                .expect("open segment");
            f.set_len((bytes.len() - n) as u64).expect("truncate");
            last_size - n
        }
        Damage::FlipPayloadByte => {
            let mut damaged = bytes.clone();
            let payload = last_at + 16;
            let i = payload + (last_size - 16) / 2;
            damaged[i] ^= 0x5a;
            std::fs::write(&seg, &damaged).expect("write segment");
            last_size
        }
    };

    let mut d = Daemon::start_with(opts());
    let cut_lines = log_lines(&d.log, "journal tail damaged by a crash; cut off");
    assert_eq!(
        cut_lines.len(),
        1,
        "{damage:?}: one cut logged:\n{}",
        d.log_text()
    );
    assert_eq!(
        cut_lines[0]["bytes"].as_u64(),
        Some(expected_cut as u64),
        "{damage:?}: the log names the bytes cut: {}",
        cut_lines[0]
    );
    assert_eq!(
        d.metric("toolwatch_journal_recovered_cut_bytes_total"),
        Some(expected_cut as f64),
        "{damage:?}: the cut is counted"
    );
    // The journal goes on after the cut: a new request is stored and archived.
    let (after, after_ids) = known_spans(0xd2, 2);
    let posted = post_traces(d.http, after.encode_to_vec()).expect("POST");
    assert_eq!(posted.0, 200, "accepted after the restart");
    d.stop();

    let archived = archived_once(&data);
    let expected: BTreeSet<SpanKey> = before_cut.union(&after_ids).cloned().collect();
    assert!(
        archived.is_disjoint(&last_ids),
        "{damage:?}: spans of the cut record were archived"
    );
    assert_eq!(
        archived.len(),
        expected.len(),
        "{damage:?}: archived {} spans, expected {}",
        archived.len(),
        expected.len()
    );
    assert_subset(
        &expected,
        &archived,
        "spans before the cut (and after the restart)",
    );
    println!(
        "durability: {damage:?}: {} records, last of {last_size} bytes, cut {expected_cut} bytes, {} spans archived",
        records.len(),
        archived.len()
    );
}

#[test]
fn a_torn_or_corrupt_journal_tail_is_cut_and_counted_at_start() {
    damaged_tail_case(Damage::Truncate(7));
    damaged_tail_case(Damage::FlipPayloadByte);
}

// ---------------------------------------------------------------------------------------
// c. overload
// ---------------------------------------------------------------------------------------

/// Exports batches of spans with the official Python SDK OTLP/HTTP exporter for a while,
/// retrying a failed batch itself (on top of the exporter's own retries); writes the span
/// ids of every batch attempted and acknowledged, and prints its counts as JSON.
const PYTHON_EXPORTER: &str = r#"
import json, sys, time
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

endpoint, seconds, sent_path, acked_path = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
memory = InMemorySpanExporter()
provider = TracerProvider(
    resource=Resource.create({"service.name": "py-overload", "executor.tenant_id": "acme"})
)
provider.add_span_processor(SimpleSpanProcessor(memory))
tracer = provider.get_tracer("py-overload", "1.0.0")
exporter = OTLPSpanExporter(endpoint=endpoint + "/v1/traces", timeout=5)
stats = {"batches": 0, "acked_batches": 0, "failed_attempts": 0, "gave_up": 0}
deadline = time.time() + seconds
with open(sent_path, "w") as sent, open(acked_path, "w") as acked:
    while time.time() < deadline:
        for i in range(50):
            with tracer.start_as_current_span(
                "execute_tool lookup",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "lookup",
                    "gen_ai.tool.call.arguments": json.dumps({"q": "order " * 200, "i": i}),
                },
            ):
                pass
        batch = memory.get_finished_spans()
        memory.clear()
        lines = "".join(
            "%032x %016x\n" % (s.context.trace_id, s.context.span_id) for s in batch
        )
        stats["batches"] += 1
        sent.write(lines)
        sent.flush()
        for attempt in range(8):
            if exporter.export(batch) == SpanExportResult.SUCCESS:
                acked.write(lines)
                acked.flush()
                stats["acked_batches"] += 1
                break
            stats["failed_attempts"] += 1
            time.sleep(min(0.1 * 2 ** attempt, 1.0))
        else:
            stats["gave_up"] += 1
exporter.shutdown()
print(json.dumps(stats))
"#;

/// What the monitor thread saw.
#[derive(Debug, Default)]
struct Observed {
    polls: u64,
    readyz_503: u64,
    max_journal_bytes: f64,
    journal_max_bytes: f64,
    over_bound: Vec<(f64, f64)>,
    peak_rss_kib: u64,
}

/// The pid of the `toolwatch serve` whose data directory is `data` (the harness keeps its
/// child private).
fn daemon_pid(data: &Path) -> u32 {
    let want = data.to_str().expect("utf-8").as_bytes().to_vec();
    wait_for("the daemon's pid", || {
        std::fs::read_dir("/proc")
            .ok()?
            .filter_map(Result::ok)
            .find_map(|e| {
                let pid: u32 = e.file_name().to_str()?.parse().ok()?;
                let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
                let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
                (args.iter().any(|a| *a == b"serve") && args.contains(&want.as_slice()))
                    .then_some(pid)
            })
    })
}

/// `VmHWM` (peak resident memory) of a process, in KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| {
        l.strip_prefix("VmHWM:")?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()
    })
}

/// Peak resident memory the daemon may reach under this load, in MiB: the journal is 4 MiB
/// on disk; what the daemon holds is requests being decoded (at most 8 MiB each, a few at a
/// time), the writer's queue of protected batches, the archive's open row groups (a few
/// partitions here, far below `row_group_bytes` each), the assembler's span facts and the
/// dedup window (~25 bytes a span), plus a debug build's code and allocator slack (~100
/// MiB). Unbounded buffering of refused or queued data would blow well past it.
const PEAK_RSS_BOUND_MIB: u64 = 512;

#[test]
fn overload_is_refused_with_retryable_codes_memory_stays_bounded_and_everything_acknowledged_arrives(
) {
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut d = Daemon::start_with(DaemonOptions {
        data_dir: Some(data.clone()),
        env: vec![
            ("TOOLWATCH_ARCHIVE__PAUSE_PER_RECORD".into(), "20ms".into()),
            ("TOOLWATCH_JOURNAL__MAX_BYTES".into(), "4MiB".into()),
            ("TOOLWATCH_LIMITS__MAX_REQUEST_BYTES".into(), "1MiB".into()),
            ("TOOLWATCH_JOURNAL__SEGMENT_BYTES".into(), "256KiB".into()),
            ("TOOLWATCH_LOG__LEVEL".into(), "info".into()),
        ],
        ..Default::default()
    });
    let pid = daemon_pid(&data);

    // Watch readiness, the journal's size and the daemon's peak memory throughout.
    let observed = Arc::new(Mutex::new(Observed::default()));
    let done = Arc::new(AtomicBool::new(false));
    let monitor = {
        let (observed, done, admin) = (Arc::clone(&observed), Arc::clone(&done), d.admin);
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let ready = try_get(&format!("http://{admin}/readyz"));
                let metrics = try_get(&format!("http://{admin}/metrics")).map(|(_, t)| t);
                let rss = peak_rss_kib(pid);
                let mut o = observed.lock().expect("observed lock");
                o.polls += 1;
                if ready.is_some_and(|(s, _)| s == 503) {
                    o.readyz_503 += 1;
                }
                if let Some(m) = metrics {
                    let bytes = sample(&m, "toolwatch_journal_bytes").unwrap_or(0.0);
                    let max = sample(&m, "toolwatch_journal_max_bytes").unwrap_or(0.0);
                    o.max_journal_bytes = o.max_journal_bytes.max(bytes);
                    o.journal_max_bytes = max;
                    if bytes > max {
                        o.over_bound.push((bytes, max));
                    }
                }
                if let Some(r) = rss {
                    o.peak_rss_kib = o.peak_rss_kib.max(r);
                }
                drop(o);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };

    // Load far beyond 50 records a second: loadgen as fast as accepted, and the Python SDK.
    let lg_acked = dir.path().join("lg-acked");
    let lg_sent = dir.path().join("lg-sent");
    let target = d.http_url();
    let lg = Loadgen::start(&[
        "--target",
        &target,
        "--http",
        "--requests",
        "3000",
        "--rate",
        "0",
        "--batch",
        "5",
        "--concurrency",
        "8",
        "--seed",
        "31",
        "--acked-file",
        lg_acked.to_str().expect("utf-8"),
        "--sent-file",
        lg_sent.to_str().expect("utf-8"),
    ]);
    let py_acked = dir.path().join("py-acked");
    let py_sent = dir.path().join("py-sent");
    let py = Command::new(python())
        .arg("-c")
        .arg(PYTHON_EXPORTER)
        .arg(d.http_url())
        .arg("15")
        .arg(&py_sent)
        .arg(&py_acked)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the Python exporter");

    // While refusing: a request of our own gets 429 with Retry-After.
    let mut probe_acked = BTreeSet::new();
    let mut probe_sent = BTreeSet::new();
    let mut tag = 0x10u8;
    let refused = wait_for("a 429 answer to a request of our own", || {
        let (req, ids) = known_spans(tag, 5);
        tag = tag.checked_add(1).expect("fewer than 240 probes");
        probe_sent.extend(ids.iter().cloned());
        let (status, retry_after) = post_traces(d.http, req.encode_to_vec())?;
        if status == 200 {
            probe_acked.extend(ids);
            std::thread::sleep(Duration::from_millis(200));
            return None;
        }
        Some((status, retry_after))
    });
    assert_eq!(refused.0, 429, "overload answers 429");
    let retry_after: u64 = refused
        .1
        .as_deref()
        .expect("a 429 carries Retry-After")
        .parse()
        .expect("Retry-After in seconds");
    assert!(retry_after >= 1, "Retry-After {retry_after}");

    let (lg_status, lg_report, lg_stderr) = lg.finish(Duration::from_secs(360));
    let py_out = py.wait_with_output().expect("Python exporter");
    assert!(
        py_out.status.success(),
        "Python exporter failed: {}",
        String::from_utf8_lossy(&py_out.stderr)
    );
    let py_stats: Value = serde_json::from_slice(&py_out.stdout).expect("Python stats JSON");
    let metrics = d.admin_get("/metrics").1;
    done.store(true, Ordering::Relaxed);
    monitor.join().expect("monitor thread");
    d.stop();

    let o = observed.lock().expect("observed lock");
    let overloaded = sum_samples(
        &metrics,
        "toolwatch_otlp_rejected_requests_total",
        "reason=\"overloaded\"",
    );
    println!(
        "durability: overload: {overloaded} requests refused as overloaded, loadgen {lg_report}, \
         python {py_stats}, {} polls, readyz 503 {} times, journal peak {} of {} bytes, \
         peak RSS {} MiB (bound {PEAK_RSS_BOUND_MIB} MiB), {:.1}s",
        o.polls,
        o.readyz_503,
        o.max_journal_bytes,
        o.journal_max_bytes,
        o.peak_rss_kib / 1024,
        started.elapsed().as_secs_f64()
    );

    let mut acked = unique(read_ids(&lg_acked), "loadgen's acked file");
    acked.extend(unique(read_ids(&py_acked), "the Python acked file"));
    acked.extend(probe_acked);
    let mut sent = unique(read_ids(&lg_sent), "loadgen's sent file");
    sent.extend(unique(read_ids(&py_sent), "the Python sent file"));
    sent.extend(probe_sent);
    let archived = archived_once(&data);
    println!(
        "durability: overload: acked {} archived {} sent {}",
        acked.len(),
        archived.len(),
        sent.len()
    );

    assert!(overloaded > 0.0, "no request was refused as overloaded");
    assert!(
        lg_report["retries"].as_u64().unwrap_or(0) > 0,
        "loadgen never had to retry: {lg_report}"
    );
    assert!(
        lg_status.success() && lg_report["failed_batches"] == 0,
        "loadgen gave up on exports: {lg_status} {lg_report}\n{lg_stderr}"
    );
    assert!(
        o.readyz_503 > 0,
        "/readyz never answered 503 while refusing"
    );
    assert!(o.polls >= 20, "only {} polls", o.polls);
    assert_eq!(o.journal_max_bytes, 4.0 * 1024.0 * 1024.0);
    assert!(
        o.over_bound.is_empty(),
        "the journal exceeded its bound: {:?}",
        o.over_bound
    );
    assert!(
        o.peak_rss_kib > 0 && o.peak_rss_kib < PEAK_RSS_BOUND_MIB * 1024,
        "peak RSS {} KiB",
        o.peak_rss_kib
    );
    assert!(
        acked.len() > 1000,
        "only {} spans acknowledged",
        acked.len()
    );
    assert_subset(&acked, &archived, "acknowledged spans in the archive");
    assert_subset(&archived, &sent, "archived spans among those sent");
}
