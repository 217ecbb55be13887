//! `toolwatch verify`: an archive as written verifies; each kind of tampering is named, the
//! exact file or manifest line, with exit status 1.

use std::path::{Path, PathBuf};

use crate::harness::{
    compact_now, loadgen, parquet_files, run_verify, toolwatch, verify_archive as verify, Daemon,
};

/// A copy of the archive to tamper with.
fn copy(from: &Path, to: &Path) -> PathBuf {
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .expect("cp");
    assert!(status.success());
    to.to_path_buf()
}

fn rel(data_dir: &Path, p: &Path) -> String {
    p.strip_prefix(data_dir)
        .expect("inside")
        .to_string_lossy()
        .to_string()
}

/// The compaction's manifest: its entries remove the merged files, then add the outputs, so
/// its last line names a file that is there.
fn manifest(data_dir: &Path) -> PathBuf {
    std::fs::read_dir(data_dir.join("manifest"))
        .expect("manifest dir")
        .map(|e| e.expect("entry").path())
        .find(|m| {
            std::fs::read_to_string(m)
                .expect("manifest")
                .contains("\"reason\":\"compaction\"")
        })
        .expect("the compaction's manifest")
}

#[test]
fn an_archive_as_written_verifies_and_each_tampering_is_named() {
    let mut d = Daemon::start();
    loadgen(&[
        "--target",
        &d.grpc_url(),
        "--requests",
        "60",
        "--seed",
        "41",
    ]);
    d.stop();
    let data = d.data_dir.clone();
    // A second run (another instance, another manifest) and a compaction (a third) merging
    // the two runs' files: all recorded.
    let mut d2 = Daemon::start_with(crate::harness::DaemonOptions {
        data_dir: Some(data.clone()),
        ..Default::default()
    });
    loadgen(&[
        "--target",
        &d2.grpc_url(),
        "--requests",
        "60",
        "--seed",
        "42",
    ]);
    d2.stop();
    let before = parquet_files(&data, "spans").len();
    compact_now(&data, &["--min-files", "2"]);
    let after = parquet_files(&data, "spans").len();
    assert!(
        after < before,
        "compaction merged files ({before} -> {after})"
    );
    let manifests = std::fs::read_dir(data.join("manifest"))
        .expect("dir")
        .count();
    assert_eq!(manifests, 3, "two daemon runs and one compaction");
    assert_eq!(verify(&data), (vec![], 0), "the archive as written");

    let work = tempfile::tempdir().expect("tempdir");
    let case = |name: &str| copy(&data, &work.path().join(name));
    let spans = |dir: &Path| {
        let mut f = parquet_files(dir, "spans");
        f.sort();
        f
    };

    // A flipped byte.
    let dir = case("flipped");
    let victim = spans(&dir)[0].clone();
    let mut bytes = std::fs::read(&victim).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&victim, bytes).expect("write");
    assert_eq!(
        verify(&dir),
        (vec![format!("modified {}", rel(&dir, &victim))], 1)
    );

    // A deleted file.
    let dir = case("deleted");
    let victim = spans(&dir)[0].clone();
    std::fs::remove_file(&victim).expect("remove");
    assert_eq!(
        verify(&dir),
        (vec![format!("missing {}", rel(&dir, &victim))], 1)
    );

    // An extra file.
    let dir = case("extra");
    let source = spans(&dir)[0].clone();
    let extra = source.with_file_name("part-20990101T000000000Z-feedface-000001.parquet");
    std::fs::copy(&source, &extra).expect("copy");
    assert_eq!(
        verify(&dir),
        (vec![format!("extra {}", rel(&dir, &extra))], 1)
    );

    // A hidden file: readers' globs take it, so it is extra too.
    let dir = case("hidden");
    let source = spans(&dir)[0].clone();
    let hidden = source.with_file_name(".slipped.parquet");
    std::fs::copy(&source, &hidden).expect("copy");
    assert_eq!(
        verify(&dir),
        (vec![format!("extra {}", rel(&dir, &hidden))], 1)
    );

    // A file slipped in, then merged by a compaction: the merge does not launder it.
    let dir = case("laundered");
    let source = spans(&dir)[0].clone();
    let slipped = source.with_file_name("part-20000101T000000000Z-0badf00d-000001.parquet");
    std::fs::copy(&source, &slipped).expect("copy");
    compact_now(&dir, &["--min-files", "2"]);
    assert!(!slipped.exists(), "merged away");
    assert_eq!(
        verify(&dir),
        (
            vec![format!("removed-unrecorded {}", rel(&dir, &slipped))],
            1
        )
    );
    // Still named by a run whose --since leaves that partition out of the file comparison.
    assert_eq!(
        run_verify(&dir, &["--since", "2999-01-01"]).problems,
        vec![format!("removed-unrecorded {}", rel(&dir, &slipped))]
    );

    // Heads kept from the clean archive, to check later copies against.
    let out = toolwatch()
        .args(["verify", "--print-heads", "--data-dir"])
        .arg(&data)
        .output()
        .expect("heads");
    let heads = work.path().join("heads.txt");
    std::fs::write(&heads, &out.stdout).expect("heads");
    let with_heads = |dir: &Path| -> Vec<String> {
        let out = toolwatch()
            .args(["verify", "--heads"])
            .arg(&heads)
            .arg("--data-dir")
            .arg(dir)
            .output()
            .expect("verify");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(with_heads(&data), Vec::<String>::new(), "the clean archive");

    // A manifest cut short: the file its last line named is no longer recorded.
    let dir = case("truncated");
    let m = manifest(&dir);
    let text = std::fs::read_to_string(&m).expect("manifest");
    let mut lines: Vec<&str> = text.lines().collect();
    let last: serde_json::Value = serde_json::from_str(lines.pop().expect("a line")).expect("json");
    std::fs::write(&m, lines.join("\n") + "\n").expect("write");
    let (problems, code) = verify(&dir);
    assert_eq!(code, 1);
    assert!(
        problems.contains(&format!("extra {}", last["path"].as_str().expect("path"))),
        "{problems:?}"
    );
    // With the kept heads, the cut itself is named.
    let cut = format!(
        "truncated manifest/{} line {}",
        m.file_name().expect("name").to_string_lossy(),
        lines.len() + 1
    );
    let got = with_heads(&dir);
    assert!(got.contains(&cut), "{cut}: {got:?}");
    // A whole manifest deleted (with, here, nothing else): named too.
    let dir = case("manifest-deleted");
    let m = manifest(&dir);
    std::fs::remove_file(&m).expect("remove");
    let gone = format!(
        "manifest-missing manifest/{}",
        m.file_name().expect("name").to_string_lossy()
    );
    assert!(with_heads(&dir).contains(&gone), "{gone}");

    // Two lines swapped, and a line edited.
    let name = |m: &Path| {
        format!(
            "manifest/{}",
            m.file_name().expect("name").to_string_lossy()
        )
    };
    let dir = case("reordered");
    let m = manifest(&dir);
    let text = std::fs::read_to_string(&m).expect("manifest");
    let mut lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 4, "{} lines", lines.len());
    lines.swap(1, 2);
    std::fs::write(&m, lines.join("\n") + "\n").expect("write");
    let (problems, code) = verify(&dir);
    assert_eq!(code, 1);
    assert!(
        problems.contains(&format!("reordered {} line 2", name(&m))),
        "{problems:?}"
    );

    let dir = case("edited");
    let m = manifest(&dir);
    let text = std::fs::read_to_string(&m).expect("manifest");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut e: serde_json::Value = serde_json::from_str(&lines[1]).expect("json");
    e["rows"] = serde_json::json!(e["rows"].as_u64().expect("rows") + 1);
    lines[1] = serde_json::to_string(&e).expect("json");
    std::fs::write(&m, lines.join("\n") + "\n").expect("write");
    assert_eq!(
        verify(&dir),
        (vec![format!("chain-broken {} line 3", name(&m))], 1)
    );

    // An archive written before manifests existed: every file is extra until adopted, and
    // from then on tampering shows again.
    let dir = case("adopted");
    std::fs::remove_dir_all(dir.join("manifest")).expect("no manifests");
    let (problems, code) = verify(&dir);
    assert_eq!(code, 1);
    let files = parquet_files(&dir, "spans").len()
        + parquet_files(&dir, "logs").len()
        + parquet_files(&dir, "requests").len()
        + parquet_files(&dir, "alarms").len()
        + parquet_files(&dir, "findings").len();
    assert_eq!(problems.len(), files, "{problems:?}");
    assert!(problems.iter().all(|p| p.starts_with("extra ")));
    let out = toolwatch()
        .args(["verify", "--adopt-unrecorded", "--data-dir"])
        .arg(&dir)
        .output()
        .expect("adopt");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("adopted {files} unrecorded files"))
    );
    assert_eq!(verify(&dir), (vec![], 0));
    let victim = spans(&dir)[0].clone();
    let mut bytes = std::fs::read(&victim).expect("read");
    bytes[10] ^= 0x01;
    std::fs::write(&victim, bytes).expect("write");
    assert_eq!(
        verify(&dir),
        (vec![format!("modified {}", rel(&dir, &victim))], 1)
    );
}

/// With a signing key every entry is signed; `verify --public-key` checks each, and names an
/// unsigned entry and a key that does not match.
#[test]
fn signed_manifests_verify_with_their_public_key_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key_file = dir.path().join("manifest.key");
    let config = crate::monitoring::write_file(
        dir.path(),
        "signed.toml",
        &format!(
            "[archive]\nmanifest_signing_key_file = \"{}\"\n",
            key_file.display()
        ),
    );
    let mut d = Daemon::start_with(crate::harness::DaemonOptions {
        config: Some(config),
        ..Default::default()
    });
    loadgen(&[
        "--target",
        &d.grpc_url(),
        "--requests",
        "40",
        "--seed",
        "43",
    ]);
    d.stop();
    let data = d.data_dir.clone();
    let out = toolwatch()
        .args(["verify", "--print-public-key", "--key-file"])
        .arg(&key_file)
        .output()
        .expect("print key");
    assert!(out.status.success());
    let public = String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_string();
    assert_eq!(public.len(), 64, "{public}");
    let with_key = |data: &Path, key: &str| -> (Vec<String>, i32) {
        let run = run_verify(data, &["--public-key", key]);
        (run.problems, run.code)
    };
    assert_eq!(with_key(&data, &public), (vec![], 0));

    let m = std::fs::read_dir(data.join("manifest"))
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .next()
        .expect("a manifest");
    let name = format!(
        "manifest/{}",
        m.file_name().expect("name").to_string_lossy()
    );
    let lines = std::fs::read_to_string(&m)
        .expect("manifest")
        .lines()
        .count();
    // Another key: every entry's signature fails.
    let other = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c";
    let (problems, code) = with_key(&data, other);
    assert_eq!(code, 1);
    assert_eq!(
        problems,
        (1..=lines)
            .map(|l| format!("bad-signature {name} line {l}"))
            .collect::<Vec<_>>()
    );
    // A signature removed: that entry is unsigned (and the next line's chain breaks).
    let work = tempfile::tempdir().expect("tempdir");
    let copy_dir = copy(&data, &work.path().join("unsigned"));
    let m2 = copy_dir.join(&name);
    let text = std::fs::read_to_string(&m2).expect("manifest");
    let mut l: Vec<String> = text.lines().map(str::to_string).collect();
    let mut e: serde_json::Value = serde_json::from_str(&l[0]).expect("json");
    e.as_object_mut().expect("object").remove("sig");
    l[0] = serde_json::to_string(&e).expect("json");
    std::fs::write(&m2, l.join("\n") + "\n").expect("write");
    let (problems, code) = with_key(&copy_dir, &public);
    assert_eq!(code, 1);
    assert!(
        problems.contains(&format!("unsigned {name} line 1")),
        "{problems:?}"
    );
    assert!(
        problems.contains(&format!("chain-broken {name} line 2")),
        "{problems:?}"
    );
    // Without --public-key, signatures are not asked for.
    assert_eq!(verify(&data), (vec![], 0));
}

/// A synthetic year (one span a day for two tenants, each day its own partition): retention
/// deletes exactly the partitions past each tenant's retention, by the CLI (spans) and by the
/// daemon (requests), every deletion recorded, so `verify` still finds nothing wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_over_a_year_deletes_exactly_what_policy_says_and_verify_agrees() {
    use crate::protect_e2e::{kv, s};
    use std::collections::BTreeSet;
    const DAY: i64 = 86_400;
    let now_s = chrono::Utc::now().timestamp();
    let today = now_s - now_s.rem_euclid(DAY);
    let mut d = Daemon::start();
    for (t, tenant) in ["acme", "globex"].iter().enumerate() {
        let spans: Vec<serde_json::Value> = (0..365i64)
            .map(|day| {
                let noon = (today - day * DAY + DAY / 2) * 1_000_000_000;
                serde_json::json!({
                    "traceId": format!("{:08x}{:024x}", t + 1, day + 1),
                    "spanId": format!("{:016x}", day + 1),
                    "name": "invoke_agent",
                    "startTimeUnixNano": noon.to_string(),
                    "endTimeUnixNano": (noon + 1_000_000).to_string(),
                    "attributes": [kv("gen_ai.operation.name", s("invoke_agent"))],
                })
            })
            // Today's noon may be ahead of now: only days that have had their noon.
            .filter(|sp| {
                sp["endTimeUnixNano"]
                    .as_str()
                    .and_then(|v| v.parse::<i64>().ok())
                    .unwrap_or(0)
                    < now_s * 1_000_000_000
            })
            .collect();
        let body = serde_json::json!({ "resourceSpans": [{
            "resource": { "attributes": [ kv("executor.tenant_id", s(tenant)) ] },
            "scopeSpans": [{ "spans": spans }],
        }]});
        crate::otlp_json::post_accepted(&d, "/v1/traces", &body).await;
    }
    d.stop();
    let data = d.data_dir.clone();
    let dates = |table: &str, tenant: &str| -> BTreeSet<String> {
        let root = data.join(table).join(format!("tenant={tenant}"));
        std::fs::read_dir(&root)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .filter_map(|e| {
                        e.file_name()
                            .to_string_lossy()
                            .strip_prefix("date=")
                            .map(str::to_string)
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let all = dates("spans", "acme");
    assert!(all.len() >= 364, "{} days written", all.len());
    assert_eq!(verify(&data), (vec![], 0));

    // Kept: the days whose partition hour (12:00-13:00 UTC) ended less than `keep` ago.
    let kept = |keep_days: i64| -> BTreeSet<String> {
        all.iter()
            .filter(|date| {
                let day = chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d")
                    .expect("date")
                    .and_hms_opt(13, 0, 0)
                    .expect("time")
                    .and_utc()
                    .timestamp();
                day + keep_days * DAY > chrono::Utc::now().timestamp()
            })
            .cloned()
            .collect()
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = crate::monitoring::write_file(
        dir.path(),
        "retention.toml",
        "[archive.retention]\nspans = \"90d\"\n[archive.retention.tenants.acme]\nspans = \"200d\"\n",
    );
    let run = |dry: bool| {
        let mut c = toolwatch();
        c.args(["retention", "--config"])
            .arg(&config)
            .arg("--data-dir")
            .arg(&data);
        if dry {
            c.arg("--dry-run");
        }
        let out = c.output().expect("retention");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let (acme_kept, globex_kept) = (kept(200), kept(90));
    let listed = run(true);
    let would = listed.lines().count();
    assert_eq!(
        would,
        (all.len() - acme_kept.len()) + (all.len() - globex_kept.len()),
        "{listed}"
    );
    assert_eq!(dates("spans", "acme"), all, "a dry run deletes nothing");
    run(false);
    assert_eq!(dates("spans", "acme"), acme_kept);
    assert_eq!(dates("spans", "globex"), globex_kept);
    assert_eq!(
        dates("requests", "acme").len(),
        all.len(),
        "requests keep no retention"
    );
    assert_eq!(
        verify(&data),
        (vec![], 0),
        "deletions by policy are recorded"
    );

    // The daemon applies retention with its compaction passes (requests: 30 days).
    let config = crate::monitoring::write_file(
        dir.path(),
        "daemon.toml",
        "[archive]\ncompact_every = \"1s\"\n[archive.retention]\nrequests = \"30d\"\n",
    );
    let mut d = Daemon::start_with(crate::harness::DaemonOptions {
        data_dir: Some(data.clone()),
        config: Some(config),
        ..Default::default()
    });
    let want = kept(30);
    crate::harness::wait_for("the daemon's retention", || {
        (dates("requests", "acme") == want && dates("requests", "globex") == want).then_some(())
    });
    d.stop();
    assert_eq!(verify(&data), (vec![], 0));
    let retained = std::fs::read_dir(data.join("manifest"))
        .expect("dir")
        .map(|e| std::fs::read_to_string(e.expect("entry").path()).expect("manifest"))
        .map(|m| m.matches("\"reason\":\"retention\"").count())
        .sum::<usize>();
    assert_eq!(
        retained,
        (2 * all.len() - acme_kept.len() - globex_kept.len()) + 2 * (all.len() - want.len()),
        "one removal entry per deleted file"
    );
}

/// `verify --checkpoint`: a second run reads only the lines appended since, still compares
/// the files in scope, and names a manifest cut before or deleted after the checkpoint.
#[test]
fn a_checkpoint_lets_later_runs_read_only_new_manifest_lines() {
    let mut d = Daemon::start();
    loadgen(&[
        "--target",
        &d.grpc_url(),
        "--requests",
        "30",
        "--seed",
        "51",
    ]);
    d.stop();
    let data = d.data_dir.clone();
    let date = parquet_files(&data, "spans")[0]
        .ancestors()
        .find_map(|a| {
            a.file_name()?
                .to_str()?
                .strip_prefix("date=")
                .map(str::to_string)
        })
        .expect("a date folder");
    let checkpoint = data.parent().expect("parent").join("verify.checkpoint");
    let checkpoint_arg = checkpoint.to_str().expect("utf-8");
    // (stdout, stderr, exit code) of a checkpointed run.
    let run = |dir: &Path| {
        let r = run_verify(dir, &["--since", &date, "--checkpoint", checkpoint_arg]);
        let stdout: String = r.problems.iter().map(|l| format!("{l}\n")).collect();
        (stdout, r.summary, r.code)
    };
    let (problems, summary, code) = run(&data);
    assert_eq!((problems.as_str(), code), ("", 0), "{summary}");
    let entries = |summary: &str| -> u64 {
        summary
            .split(", ")
            .find_map(|p| p.strip_suffix(" entries"))
            .and_then(|n| n.parse().ok())
            .expect("entries in the summary")
    };
    assert!(entries(&summary) > 0);
    // Nothing appended: nothing read, every file still compared.
    let (problems, summary, code) = run(&data);
    assert_eq!((problems.as_str(), code), ("", 0), "{summary}");
    assert_eq!(entries(&summary), 0, "{summary}");
    assert!(!summary.contains(" 0 files compared"), "{summary}");

    // A second run of the daemon: a new manifest, read whole; the old one from its mark.
    let mut d2 = Daemon::start_with(crate::harness::DaemonOptions {
        data_dir: Some(data.clone()),
        ..Default::default()
    });
    loadgen(&[
        "--target",
        &d2.grpc_url(),
        "--requests",
        "10",
        "--seed",
        "52",
    ]);
    d2.stop();
    let (problems, summary, code) = run(&data);
    assert_eq!((problems.as_str(), code), ("", 0), "{summary}");
    let new_lines = entries(&summary);
    assert!(new_lines > 0);

    // A file changed after the checkpoint is still found: files are compared every run.
    let work = tempfile::tempdir().expect("tempdir");
    let dir = copy(&data, &work.path().join("flipped"));
    let victim = parquet_files(&dir, "spans")[0].clone();
    let mut bytes = std::fs::read(&victim).expect("read");
    bytes[10] ^= 0x01;
    std::fs::write(&victim, bytes).expect("write");
    let saved = std::fs::read(&checkpoint).expect("checkpoint");
    let (problems, _, code) = run(&dir);
    assert_eq!(
        (problems, code),
        (format!("modified {}\n", rel(&dir, &victim)), 1)
    );

    // A manifest cut before its mark, and one deleted: named.
    std::fs::write(&checkpoint, &saved).expect("restore checkpoint");
    let dir = copy(&data, &work.path().join("cut"));
    let mut manifests: Vec<PathBuf> = std::fs::read_dir(dir.join("manifest"))
        .expect("manifests")
        .map(|e| e.expect("entry").path())
        .collect();
    manifests.sort();
    let text = std::fs::read_to_string(&manifests[0]).expect("manifest");
    let lines: Vec<&str> = text.lines().collect();
    std::fs::write(&manifests[0], lines[..lines.len() - 1].join("\n") + "\n").expect("cut");
    std::fs::remove_file(&manifests[1]).expect("delete");
    let (problems, summary, code) = run(&dir);
    assert_eq!(code, 1, "{summary}");
    let name = |m: &Path| {
        format!(
            "manifest/{}",
            m.file_name().expect("name").to_string_lossy()
        )
    };
    assert!(
        problems.contains(&format!(
            "truncated {} line {}",
            name(&manifests[0]),
            lines.len()
        )),
        "{problems}"
    );
    assert!(
        problems.contains(&format!("manifest-missing {}", name(&manifests[1]))),
        "{problems}"
    );
    // The checkpoint did not advance past them.
    assert_eq!(std::fs::read(&checkpoint).expect("checkpoint"), saved);

    // An earlier --since than the checkpoint's is refused.
    let out = toolwatch()
        .args(["verify", "--since", "1999-01-01", "--checkpoint"])
        .arg(&checkpoint)
        .arg("--data-dir")
        .arg(&data)
        .output()
        .expect("verify");
    assert_eq!(out.status.code(), Some(2));
}

/// A manifest line being appended (no line end yet, not an entry) is not a problem; a bare
/// checkpoint file name works; adoption and checkpoints stop at a problem of the manifests.
#[test]
fn torn_tails_bare_checkpoint_names_and_adoption_behind_a_broken_chain() {
    let mut d = Daemon::start();
    loadgen(&[
        "--target",
        &d.grpc_url(),
        "--requests",
        "10",
        "--seed",
        "53",
    ]);
    d.stop();
    let data = d.data_dir.clone();
    let m = std::fs::read_dir(data.join("manifest"))
        .expect("manifests")
        .map(|e| e.expect("entry").path())
        .next()
        .expect("a manifest");
    let text = std::fs::read_to_string(&m).expect("manifest");
    std::fs::write(&m, format!("{text}{{\"seq\":99,\"op\":\"ad")).expect("torn tail");
    assert_eq!(verify(&data), (vec![], 0), "a tail being appended");

    let cwd = tempfile::tempdir().expect("tempdir");
    let out = toolwatch()
        .current_dir(cwd.path())
        .args([
            "verify",
            "--since",
            "2000-01-01",
            "--checkpoint",
            "cp.json",
            "--data-dir",
        ])
        .arg(&data)
        .output()
        .expect("verify");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(cwd.path().join("cp.json").is_file());
    // A checkpoint taken without a public key is not continued with one.
    let out = toolwatch()
        .current_dir(cwd.path())
        .args(["verify", "--since", "2000-01-01", "--checkpoint", "cp.json"])
        .args(["--public-key", &"ab".repeat(32), "--data-dir"])
        .arg(&data)
        .output()
        .expect("verify");
    assert_eq!(out.status.code(), Some(2));

    // An edited line breaks the chain: an extra file is then not adopted.
    std::fs::write(&m, &text).expect("restore");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines[0] = lines[0].replacen("\"rows\":", "\"rows\":1", 1);
    std::fs::write(&m, lines.join("\n") + "\n").expect("edit");
    let extra = parquet_files(&data, "spans")[0]
        .parent()
        .expect("partition")
        .join("part-planted.parquet");
    std::fs::copy(&parquet_files(&data, "spans")[0], &extra).expect("plant");
    let out = toolwatch()
        .args(["verify", "--adopt-unrecorded", "--data-dir"])
        .arg(&data)
        .output()
        .expect("verify");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing adopted"));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("extra {}", rel(&data, &extra))));
}
