//! Compaction: small files merged while readers (DuckDB, pyarrow) loop over the archive, and
//! `kill -9` in the middle of a compaction (of `toolwatch compact`, and of the daemon's own).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use serde_json::Value;

use crate::harness::{
    parquet_files, python, read_table, toolwatch, wait_for, Daemon, DaemonOptions,
};

/// Counts rows and distinct (trace_id, span_id) of `spans` with DuckDB and pyarrow in a
/// loop, until `<control>/stop` exists; one JSON line per read, with the test's phase (the
/// content of `<control>/phase`) before and after the read. A read that fails is reported as an
/// error and retried. Both read under the archive's readers' lock, as schemas/archive.md tells
/// external readers to: pyarrow's discovery lists a folder, then stats each file by path and
/// silently skips one that is gone, so a swap between the two loses the merged rows without an
/// error (this test caught it); DuckDB was seen to do the same once (a fresh-clone CI run of
/// 053f581: 2,180 rows read after 2,376, no error).
const READER: &str = r#"
import fcntl, json, os, sys
import duckdb
import pyarrow as pa, pyarrow.dataset as ds, pyarrow.compute as pc
data, control = sys.argv[1], sys.argv[2]
spans = os.path.join(data, "spans")
part = ds.partitioning(pa.schema([("tenant", pa.string()), ("date", pa.string()), ("hour", pa.string())]), flavor="hive")
con = duckdb.connect()
glob = os.path.join(spans, "**", "*.parquet")
readers_lock = os.path.join(data, ".compact", "locks", "readers.lock")
def shared_lock():
    os.makedirs(os.path.dirname(readers_lock), exist_ok=True)
    lock = open(readers_lock, "a")
    fcntl.flock(lock, fcntl.LOCK_SH)
    return lock
def duck():
    with shared_lock():
        return con.sql(f"SELECT count(*), count(DISTINCT (trace_id, span_id)) FROM read_parquet('{glob}', hive_partitioning = true, hive_types_autocast = false)").fetchall()[0]
def arrow():
    with shared_lock():
        t = ds.dataset(spans, format="parquet", partitioning=part).to_table(columns=["trace_id", "span_id"])
    keys = pc.binary_join_element_wise(t.column("trace_id"), t.column("span_id"), "/")
    return (t.num_rows, len(pc.unique(keys)))
def phase():
    try:
        with open(os.path.join(control, "phase")) as f:
            return f.read()
    except FileNotFoundError:
        return ""
print(json.dumps({"ready": True}), flush=True)
while not os.path.exists(os.path.join(control, "stop")):
    for engine, read in (("duckdb", duck), ("pyarrow", arrow)):
        try:
            before = phase()
            n, distinct = read()
            after = phase()
            print(json.dumps({"engine": engine, "rows": n, "distinct": distinct, "before": before, "after": after}), flush=True)
        except Exception as e:
            print(json.dumps({"engine": engine, "error": type(e).__name__ + ": " + str(e)[:200]}), flush=True)
"#;

/// One successful read.
#[derive(Debug)]
struct Read {
    engine: String,
    rows: u64,
    distinct: u64,
    /// The phase before and after the read.
    before: String,
    after: String,
}

struct Reader {
    child: Child,
    control: tempfile::TempDir,
    lines: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
}

impl Reader {
    fn start(data_dir: &Path) -> Reader {
        let control = tempfile::tempdir().expect("tempdir");
        let mut child = std::process::Command::new(python())
            .arg("-c")
            .arg(READER)
            .arg(data_dir)
            .arg(control.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the reader");
        let stdout = child.stdout.take().expect("stdout");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = std::sync::Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    sink.lock().expect("lock").push(v);
                }
            }
        });
        let r = Reader {
            child,
            control,
            lines,
        };
        wait_for("the reader to start", || {
            (!r.lines.lock().expect("lock").is_empty()).then_some(())
        });
        r
    }

    /// Successful reads so far.
    fn reads(&self) -> Vec<Read> {
        self.lines
            .lock()
            .expect("lock")
            .iter()
            .filter_map(|v| {
                Some(Read {
                    engine: v["engine"].as_str()?.to_string(),
                    rows: v["rows"].as_u64()?,
                    distinct: v["distinct"].as_u64()?,
                    before: v["before"].as_str()?.to_string(),
                    after: v["after"].as_str()?.to_string(),
                })
            })
            .collect()
    }

    /// Sets the phase the reads are labelled with.
    fn phase(&self, text: &str) {
        let tmp = self.control.path().join("phase.tmp");
        std::fs::write(&tmp, text).expect("phase");
        std::fs::rename(&tmp, self.control.path().join("phase")).expect("phase");
    }

    fn errors(&self) -> Vec<String> {
        self.lines
            .lock()
            .expect("lock")
            .iter()
            .filter_map(|v| v["error"].as_str().map(str::to_string))
            .collect()
    }

    fn stop(mut self) -> (Vec<Read>, Vec<String>) {
        std::fs::write(self.control.path().join("stop"), b"").expect("stop file");
        let status = self.child.wait().expect("reader exit");
        assert!(status.success(), "reader failed: {status}");
        (self.reads(), self.errors())
    }
}

fn compact(data_dir: &Path, env: &[(&str, String)]) -> std::process::Output {
    let mut c = toolwatch();
    c.args(["compact", "--older-than", "0s", "--data-dir"])
        .arg(data_dir)
        .env("TOOLWATCH_ARCHIVE__COMPACT_MIN_FILES", "2");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run toolwatch compact")
}

fn spans_sent(report: &Value) -> u64 {
    report["spans"].as_u64().expect("spans")
}

/// Spans files per partition folder.
fn files_per_partition(data_dir: &Path) -> std::collections::BTreeMap<PathBuf, usize> {
    let mut out = std::collections::BTreeMap::new();
    for f in parquet_files(data_dir, "spans") {
        *out.entry(f.parent().expect("folder").to_path_buf())
            .or_insert(0) += 1;
    }
    out
}

/// Every span once: as many rows as distinct (trace_id, span_id).
fn assert_exactly(data_dir: &Path, expected: u64) {
    let rows = read_table(data_dir, "spans");
    let ids: BTreeSet<(String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["trace_id"].as_str().expect("trace_id").to_string(),
                r["span_id"].as_str().expect("span_id").to_string(),
            )
        })
        .collect();
    assert_eq!(rows.len() as u64, expected, "rows");
    assert_eq!(ids.len() as u64, expected, "distinct (trace_id, span_id)");
}

fn work_area(data_dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(data_dir.join(".compact/staging/spans"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

#[test]
fn readers_see_every_row_once_while_compaction_runs() {
    let mut d = Daemon::start_with(DaemonOptions {
        env: vec![
            ("TOOLWATCH_ARCHIVE__MAX_FILE_AGE".into(), "300ms".into()),
            // The daemon compacts too, concurrently with the CLI runs below.
            ("TOOLWATCH_ARCHIVE__COMPACT_EVERY".into(), "100ms".into()),
            ("TOOLWATCH_ARCHIVE__COMPACT_AFTER".into(), "1s".into()),
            ("TOOLWATCH_ARCHIVE__COMPACT_MIN_FILES".into(), "2".into()),
        ],
        ..Default::default()
    });
    let mut reader: Option<Reader> = None;
    let mut expected = 0u64;
    let mut compacted = 0u64;
    for round in 0..6u64 {
        if let Some(r) = &reader {
            r.phase(&format!("ingest {round}"));
        }
        let seed = (round + 1).to_string();
        let report = crate::harness::loadgen(&[
            "--target",
            &d.grpc_url(),
            "--requests",
            "40",
            "--tenants",
            "12",
            "--seed",
            &seed,
        ]);
        expected += spans_sent(&report);
        wait_for("this round's spans in completed files", || {
            let archived = d.metric("toolwatch_archive_rows_total{table=\"spans\"}")?;
            (archived as u64 == expected).then_some(())
        });
        // Started once there are files (an empty archive is an error to DuckDB).
        let r = reader.get_or_insert_with(|| Reader::start(&d.data_dir));
        // From here until the next round every read must count exactly `expected`, while
        // this round's files are merged with the earlier rounds' (by the CLI, and by the
        // daemon's own compaction).
        let phase = format!("compact {round} {expected}");
        r.phase(&phase);
        let in_phase = |r: &Reader, engine: &str| {
            r.reads()
                .iter()
                .filter(|x| x.engine == engine && x.before == phase && x.after == phase)
                .count()
        };
        let mut runs = 0;
        let started = std::time::Instant::now();
        while runs < 2 || in_phase(r, "duckdb") < 2 || in_phase(r, "pyarrow") < 2 {
            assert!(
                started.elapsed() < crate::harness::DEADLINE,
                "timed out waiting for two reads per engine during round {round}: {:?}",
                r.errors()
            );
            let out = compact(&d.data_dir, &[]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            // "compacted: <n> partitions looked at, <m> compacted: ..."
            compacted += text
                .split(" partitions looked at, ")
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok())
                .expect("a report line");
            runs += 1;
        }
    }
    let reader = reader.expect("started");
    let (reads, errors) = reader.stop();
    let background = d
        .metric("toolwatch_archive_compactions_total{table=\"spans\"}")
        .unwrap_or(0.0) as u64;
    d.stop();
    eprintln!(
        "compaction under readers: {} reads, {} read errors (vanished files), {compacted} CLI and {background} daemon compactions",
        reads.len(),
        errors.len()
    );
    assert!(
        compacted + background >= 6,
        "{compacted} + {background} compactions"
    );
    for engine in ["duckdb", "pyarrow"] {
        let mine: Vec<&Read> = reads.iter().filter(|r| r.engine == engine).collect();
        let mut exact = 0;
        let mut last = 0;
        for r in &mine {
            // A duplicate shows as more rows than distinct ids; a missed row as a count below
            // what the phase says, or one that goes down (rows are only ever added).
            assert_eq!(r.rows, r.distinct, "{engine} read a row twice: {r:?}");
            assert!(r.rows >= last, "{engine} read {} rows after {last}", r.rows);
            assert!(r.rows <= expected, "{engine} read {} > {expected}", r.rows);
            if r.before == r.after && r.before.starts_with("compact ") {
                let want: u64 = r
                    .before
                    .rsplit(' ')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("phase count");
                assert_eq!(r.rows, want, "{engine} during compaction: {r:?}");
                exact += 1;
            }
            last = r.rows;
        }
        assert!(
            exact >= 12,
            "{engine}: {exact} reads during compaction; errors: {:?}",
            &errors[errors.len().saturating_sub(4)..]
        );
        assert_eq!(last, expected, "{engine}'s last read");
    }
    // Errors are only files that vanished between listing and opening.
    for e in &errors {
        let lower = e.to_lowercase();
        assert!(
            lower.contains("no such file")
                || lower.contains("not found")
                || lower.contains("filenotfound")
                || lower.contains("cannot open"),
            "unexpected read error: {e}"
        );
    }
    assert_exactly(&d.data_dir, expected);
    // Three tenants, one hour (or two, if the test ran across an hour): few files each.
    let out = compact(&d.data_dir, &[]);
    assert!(out.status.success());
    for (dir, n) in files_per_partition(&d.data_dir) {
        assert_eq!(n, 1, "{} files in {}", n, dir.display());
    }
    assert!(work_area(&d.data_dir).is_empty());
}

/// Runs `toolwatch compact` that stops at `step`, waits for it to get there, kills it.
fn compact_killed_at(data_dir: &Path, step: &str) {
    let marker = data_dir.join(format!("paused-{step}"));
    let mut child = toolwatch()
        .args([
            "compact",
            "--older-than",
            "0s",
            "--table",
            "spans",
            "--data-dir",
        ])
        .arg(data_dir)
        .env("TOOLWATCH_ARCHIVE__COMPACT_MIN_FILES", "2")
        .env(
            "_TOOLWATCH_COMPACT_PAUSE",
            format!("{step}:{}", marker.display()),
        )
        .stdout(Stdio::null())
        .spawn()
        .expect("start toolwatch compact");
    wait_for(&format!("compaction to reach {step}"), || {
        marker.exists().then_some(())
    });
    child.kill().expect("kill -9");
    child.wait().expect("reap");
    std::fs::remove_file(&marker).expect("marker");
}

#[test]
fn kill_9_in_the_middle_of_a_compaction_loses_and_doubles_nothing() {
    let env = || {
        vec![
            (
                "TOOLWATCH_ARCHIVE__MAX_FILE_AGE".to_string(),
                "300ms".to_string(),
            ),
            (
                "TOOLWATCH_ARCHIVE__COMPACT_EVERY".to_string(),
                "0s".to_string(),
            ),
        ]
    };
    let mut d = Daemon::start_with(DaemonOptions {
        env: env(),
        ..Default::default()
    });
    let mut expected = 0;
    for seed in ["11", "12", "13"] {
        let report = crate::harness::loadgen(&[
            "--target",
            &d.grpc_url(),
            "--requests",
            "10",
            "--tenants",
            "2",
            "--seed",
            seed,
        ]);
        expected += spans_sent(&report);
        wait_for("the round's files", || {
            let archived = d.metric("toolwatch_archive_rows_total{table=\"spans\"}")?;
            (archived as u64 == expected).then_some(())
        });
    }
    let data_dir = d.data_dir.clone();
    let before: usize = files_per_partition(&data_dir).values().sum();
    assert!(before >= 6, "{before} files");

    // The CLI killed with the new folder built, not swapped: the live folders are untouched.
    compact_killed_at(&data_dir, "built");
    assert_exactly(&data_dir, expected);
    assert_eq!(
        files_per_partition(&data_dir).values().sum::<usize>(),
        before
    );
    assert_eq!(work_area(&data_dir).len(), 1, "the built folder is left");

    // Killed after the swap, before the old folder is removed: the new folder is live.
    compact_killed_at(&data_dir, "swapped");
    assert_exactly(&data_dir, expected);
    assert_eq!(work_area(&data_dir).len(), 1, "the old folder is left");
    let after_one: usize = files_per_partition(&data_dir).values().sum();
    assert!(after_one < before, "{after_one} files, {before} before");

    // The daemon's own compaction, killed after a swap with rows still buffered.
    d.stop();
    let marker = data_dir.join("paused-daemon");
    let mut env2 = env();
    env2.retain(|(k, _)| k != "TOOLWATCH_ARCHIVE__COMPACT_EVERY");
    env2.extend([
        (
            "TOOLWATCH_ARCHIVE__MAX_FILE_AGE".to_string(),
            "1h".to_string(),
        ),
        (
            "TOOLWATCH_ARCHIVE__COMPACT_EVERY".to_string(),
            "100ms".to_string(),
        ),
        (
            "TOOLWATCH_ARCHIVE__COMPACT_AFTER".to_string(),
            "1ms".to_string(),
        ),
        (
            "TOOLWATCH_ARCHIVE__COMPACT_MIN_FILES".to_string(),
            "2".to_string(),
        ),
        (
            "_TOOLWATCH_COMPACT_PAUSE".to_string(),
            format!("swapped:{}", marker.display()),
        ),
    ]);
    let mut d = Daemon::start_with(DaemonOptions {
        env: env2,
        data_dir: Some(data_dir.clone()),
        ..Default::default()
    });
    let report = crate::harness::loadgen(&[
        "--target",
        &d.grpc_url(),
        "--requests",
        "10",
        "--tenants",
        "2",
        "--seed",
        "14",
    ]);
    expected += spans_sent(&report);
    wait_for("the daemon's compaction to pause after its swap", || {
        marker.exists().then_some(())
    });
    d.signal(libc::SIGKILL);

    // Restart: the journal replays the buffered rows exactly once; compaction cleans up.
    let mut d = Daemon::start_with(DaemonOptions {
        env: vec![
            ("TOOLWATCH_ARCHIVE__COMPACT_EVERY".into(), "100ms".into()),
            ("TOOLWATCH_ARCHIVE__COMPACT_AFTER".into(), "1ms".into()),
            ("TOOLWATCH_ARCHIVE__COMPACT_MIN_FILES".into(), "2".into()),
        ],
        data_dir: Some(data_dir.clone()),
        ..Default::default()
    });
    wait_for("the interrupted compactions to be cleaned up", || {
        work_area(&data_dir).is_empty().then_some(())
    });
    d.stop();
    assert_exactly(&data_dir, expected);
    let out = compact(&data_dir, &[]);
    assert!(out.status.success());
    assert_exactly(&data_dir, expected);
    for (dir, n) in files_per_partition(&data_dir) {
        assert_eq!(n, 1, "{} files in {}", n, dir.display());
    }
}
