//! Several instances, each with its own data directory (journal, state), writing one archive
//! folder (`storage.archive_dir`): no file collides, every span is there once, `verify`
//! checks every instance's manifest, `query` reads them all.

use std::collections::BTreeSet;
use std::path::Path;

use toolwatch::archive::layout::lock::PartitionLock;
use toolwatch::archive::layout::partition::PartitionDir;
use toolwatch::archive::table::Table;

use crate::harness::{
    compact_now, loadgen, parquet_files, query_n, run_verify, toolwatch, Daemon, DaemonOptions,
};

const REQUESTS: u64 = 60;

fn instance(archive: &Path, data: &Path) -> Daemon {
    Daemon::start_with(DaemonOptions {
        data_dir: Some(data.to_path_buf()),
        env: vec![
            (
                "TOOLWATCH_STORAGE__ARCHIVE_DIR".into(),
                archive.display().to_string(),
            ),
            ("TOOLWATCH_ASSEMBLE__QUIET_PERIOD".into(), "300ms".into()),
            ("TOOLWATCH_ARCHIVE__MAX_FILE_AGE".into(), "200ms".into()),
            // Both instances merge the same partitions, often.
            ("TOOLWATCH_ARCHIVE__COMPACT_EVERY".into(), "300ms".into()),
            ("TOOLWATCH_ARCHIVE__COMPACT_AFTER".into(), "1ms".into()),
            ("TOOLWATCH_ARCHIVE__COMPACT_MIN_FILES".into(), "2".into()),
        ],
        ..Default::default()
    })
}

fn count(archive: &Path, sql: &str) -> u64 {
    query_n(archive, &[], sql)
}

#[test]
fn two_instances_write_one_archive_without_collisions() {
    let root = tempfile::tempdir().expect("tempdir");
    let archive = root.path().join("shared-archive");
    let mut a = instance(&archive, &root.path().join("a"));
    let mut b = instance(&archive, &root.path().join("b"));
    // The same three tenants at both (a rebalanced router sends a tenant to either), so both
    // write, and merge, the same partitions at once.
    let (ta, tb) = (a.grpc_url(), b.grpc_url());
    let send = |target: String, seed: &'static str| {
        std::thread::spawn(move || {
            loadgen(&[
                "--target",
                &target,
                "--requests",
                "60",
                "--tenants",
                "3",
                "--seed",
                seed,
            ])
        })
    };
    let (ra, rb) = (send(ta, "71"), send(tb, "72"));
    let spans_a = ra.join().expect("loadgen a")["spans"]
        .as_u64()
        .expect("spans");
    let spans_b = rb.join().expect("loadgen b")["spans"]
        .as_u64()
        .expect("spans");
    a.wait_for_complete_summaries(REQUESTS);
    b.wait_for_complete_summaries(REQUESTS);
    a.stop();
    b.stop();

    // Each data directory keeps its own journal and state; the archive is in neither.
    for d in ["a", "b"] {
        assert!(root.path().join(d).join("journal").is_dir());
        assert!(!root.path().join(d).join("spans").exists());
    }
    let spans = spans_a + spans_b;
    assert_eq!(count(&archive, "SELECT count(*) AS n FROM spans"), spans);
    assert_eq!(
        count(
            &archive,
            "SELECT count(*) AS n FROM (SELECT DISTINCT trace_id, span_id FROM spans)"
        ),
        spans,
        "no span twice"
    );
    assert_eq!(
        count(
            &archive,
            "SELECT count(*) AS n FROM requests WHERE summary_version = 1"
        ),
        2 * REQUESTS
    );
    // One manifest per instance, each recording the files its instance wrote (named by its
    // id; either instance may since have merged the other's).
    let manifests: Vec<std::path::PathBuf> = std::fs::read_dir(archive.join("manifest"))
        .expect("manifests")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(manifests.len(), 2, "one manifest per instance");
    for m in &manifests {
        let id = m.file_stem().and_then(|s| s.to_str()).expect("instance id");
        let text = std::fs::read_to_string(m).expect("manifest");
        let flushed: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("\"reason\":\"flush\"") && l.contains("\"path\":\"spans/"))
            .collect();
        assert!(!flushed.is_empty(), "{id} wrote spans files");
        assert!(
            flushed.iter().all(|l| l.contains(&format!("-{id}-"))),
            "{id}'s manifest records only its own files"
        );
    }
    let run = run_verify(&archive, &[]);
    assert_eq!((run.problems, run.code), (vec![], 0), "{}", run.summary);
    assert!(run.summary.starts_with("2 manifests"), "{}", run.summary);

    // A third instance starting on the archive removes what a dead writer left unfinished,
    // but not the file of a writer that is alive (it holds the partition's lock).
    let spans_dirs: Vec<_> = parquet_files(&archive, "spans")
        .iter()
        .filter_map(|f| f.parent().map(Path::to_path_buf))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(spans_dirs.len() >= 2);
    let dead = spans_dirs[0].join(".part-dead-writer.parquet.inprogress");
    let alive = spans_dirs[1].join(".part-live-writer.parquet.inprogress");
    std::fs::write(&dead, b"half").expect("plant");
    std::fs::write(&alive, b"half").expect("plant");
    let part = |dir: &Path| {
        let value = |prefix: &str| {
            dir.ancestors()
                .filter_map(|a| a.file_name()?.to_str()?.strip_prefix(prefix))
                .next()
                .expect("partition folder")
                .to_string()
        };
        PartitionDir {
            table: Table::Spans,
            tenant: value("tenant="),
            date: value("date="),
            hour: value("hour="),
        }
    };
    let held = PartitionLock::acquire(&archive, &part(&spans_dirs[1]), true)
        .expect("lock")
        .expect("taken");
    let mut c = instance(&archive, &root.path().join("c"));
    assert!(!dead.exists(), "a dead writer's unfinished file is removed");
    assert!(alive.exists(), "a live writer's unfinished file stays");
    c.stop();
    drop(held);
    std::fs::remove_file(&alive).expect("clean");

    // The archive compacts and verifies as one.
    compact_now(&archive, &[]);
    let run = run_verify(&archive, &[]);
    assert_eq!((run.problems, run.code), (vec![], 0), "{}", run.summary);
    assert_eq!(count(&archive, "SELECT count(*) AS n FROM spans"), spans);
}

/// Readers of a shared archive folder ask every instance writing it for the rows it still
/// buffers: a query sees both instances' acknowledged spans before either wrote a file.
#[test]
fn a_query_of_a_shared_archive_sees_every_instances_buffered_rows() {
    let root = tempfile::tempdir().expect("tempdir");
    let archive = root.path().join("shared-archive");
    let start = |name: &str| {
        Daemon::start_with(DaemonOptions {
            data_dir: Some(root.path().join(name)),
            env: vec![
                (
                    "TOOLWATCH_STORAGE__ARCHIVE_DIR".into(),
                    archive.display().to_string(),
                ),
                ("TOOLWATCH_ARCHIVE__MAX_FILE_AGE".into(), "1h".into()),
                ("TOOLWATCH_ARCHIVE__COMPACT_EVERY".into(), "0s".into()),
            ],
            ..Default::default()
        })
    };
    let (mut a, mut b) = (start("a"), start("b"));
    let sa = loadgen(&[
        "--target",
        &a.grpc_url(),
        "--requests",
        "20",
        "--seed",
        "81",
    ])["spans"]
        .as_u64()
        .expect("spans");
    let sb = loadgen(&[
        "--target",
        &b.grpc_url(),
        "--requests",
        "20",
        "--seed",
        "82",
    ])["spans"]
        .as_u64()
        .expect("spans");
    assert!(
        parquet_files(&archive, "spans").is_empty(),
        "nothing written yet"
    );
    assert_eq!(count(&archive, "SELECT count(*) AS n FROM spans"), sa + sb);
    // --flush asks both to write out: the files alone then hold every span.
    let out = toolwatch()
        .arg("query")
        .arg("--data-dir")
        .arg(&archive)
        .args([
            "--flush",
            "--format",
            "json",
            "SELECT count(*) AS n FROM spans",
        ])
        .output()
        .expect("query --flush");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = toolwatch()
        .arg("query")
        .arg("--data-dir")
        .arg(&archive)
        .args([
            "--no-flush",
            "--format",
            "json",
            "SELECT count(*) AS n FROM spans",
        ])
        .output()
        .expect("query --no-flush");
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("rows");
    assert_eq!(rows[0]["n"].as_u64(), Some(sa + sb));
    a.stop();
    b.stop();
    // Stopped daemons leave no address behind for readers to try.
    let instances = archive.join(".compact").join("instances");
    assert_eq!(
        std::fs::read_dir(&instances)
            .map(|rd| rd.count())
            .unwrap_or(0),
        0
    );
}
