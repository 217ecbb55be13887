use super::*;
use proptest::prelude::*;

fn payload(seq: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seq as usize * 31 + i) as u8).collect()
}

/// Appends `n` records of `len` bytes, committing every `per_commit`.
fn fill(j: &mut Journal, n: u64, len: usize, per_commit: u64) {
    for i in 0..n {
        let seq = j.next_seq();
        assert_eq!(j.append(&payload(seq, len)), seq);
        if (i + 1) % per_commit == 0 {
            j.commit().expect("commit");
        }
    }
    j.commit().expect("commit");
}

fn segments(dir: &Path) -> Vec<SegmentFile> {
    segment::list(dir).expect("list")
}

#[test]
fn records_read_back_in_order_across_segments_and_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut j, rec) = Journal::open(dir.path(), 4096).expect("open");
    assert_eq!(rec, Recovery::default());
    fill(&mut j, 100, 300, 7);
    assert!(segments(dir.path()).len() >= 7, "rolled by size");
    drop(j);
    let (mut j, rec) = Journal::open(dir.path(), 4096).expect("reopen");
    assert_eq!(rec.cut_bytes, 0);
    assert_eq!(j.next_seq(), 101);
    fill(&mut j, 10, 50, 3);
    let all = j.read_from(1).expect("read");
    assert_eq!(all.len(), 110);
    for (i, (seq, p)) in all.iter().enumerate() {
        assert_eq!(*seq, i as u64 + 1);
        let len = if *seq <= 100 { 300 } else { 50 };
        assert_eq!(*p, payload(*seq, len));
    }
    assert_eq!(
        j.read_from(95).expect("read").first().map(|r| r.0),
        Some(95)
    );
}

#[test]
fn a_torn_tail_is_cut_counted_and_appends_go_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut j, _) = Journal::open(dir.path(), 1 << 20).expect("open");
    fill(&mut j, 20, 100, 1);
    drop(j);
    let last = segments(dir.path()).pop().expect("segment");
    let len = std::fs::metadata(&last.path).expect("meta").len();
    // A crash in the middle of the 20th record: 50 of its 116 bytes are on disk.
    let torn = len - 116 + 50;
    OpenOptions::new()
        .write(true)
        .open(&last.path)
        .and_then(|f| f.set_len(torn))
        .expect("truncate");
    let (mut j, rec) = Journal::open(dir.path(), 1 << 20).expect("reopen");
    assert_eq!(rec.cut_bytes, 50);
    assert_eq!(rec.cut_reason, Some("record is torn"));
    assert_eq!(rec.tail_records, 19);
    assert_eq!(j.next_seq(), 20);
    assert_eq!(
        std::fs::metadata(&last.path).expect("meta").len(),
        len - 116
    );
    fill(&mut j, 2, 10, 1);
    let seqs: Vec<u64> = j.read_from(1).expect("read").iter().map(|r| r.0).collect();
    assert_eq!(seqs, (1..=21).collect::<Vec<_>>());
}

#[test]
fn a_flipped_byte_in_the_tail_is_cut_and_in_an_older_segment_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut j, _) = Journal::open(dir.path(), 2048).expect("open");
    fill(&mut j, 30, 200, 1);
    drop(j);
    let segs = segments(dir.path());
    assert!(segs.len() >= 3);
    let flip = |path: &Path, from_end: u64| {
        let mut bytes = std::fs::read(path).expect("read");
        let at = bytes.len() - from_end as usize;
        bytes[at] ^= 0x40;
        std::fs::write(path, bytes).expect("write");
    };
    // The newest segment's last record: cut, never read.
    let newest = &segs[segs.len() - 1];
    flip(&newest.path, 10);
    let (j, rec) = Journal::open(dir.path(), 2048).expect("reopen");
    assert_eq!(rec.cut_reason, Some("record checksum does not match"));
    assert_eq!(rec.cut_bytes, 216);
    assert_eq!(j.next_seq(), 30);
    let all = j.read_from(1).expect("read");
    assert_eq!(all.len(), 29);
    assert!(all.iter().all(|(s, p)| *p == payload(*s, 200)));
    // An older segment: reading through it is an error that names it, not data.
    flip(&segs[0].path, 10);
    match j.read_from(1) {
        Err(JournalError::Corrupt { path, why, .. }) => {
            assert_eq!(path, segs[0].path);
            assert_eq!(why, "record checksum does not match");
        }
        other => panic!(
            "expected a corrupt segment, got {:?}",
            other.map(|v| v.len())
        ),
    }
    // Past the damaged segment, reading works.
    assert!(j.read_from(segs[1].first_seq).is_ok());
}

#[test]
fn checkpoints_persist_and_consumed_segments_go() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut j, _) = Journal::open(dir.path(), 2048).expect("open");
    fill(&mut j, 40, 200, 1);
    assert_eq!(j.checkpoint("archive").expect("new consumer"), 1);
    j.save_checkpoint("archive", 25).expect("save");
    j.save_checkpoint("budget", 31).expect("save");
    assert!(matches!(
        j.save_checkpoint("../x", 1),
        Err(JournalError::ConsumerName(_))
    ));
    let before = segments(dir.path());
    let slowest = j
        .checkpoints()
        .expect("checkpoints")
        .into_iter()
        .map(|(_, s)| s)
        .min()
        .unwrap_or(1);
    assert_eq!(slowest, 25);
    let removed = j.remove_consumed(slowest).expect("remove");
    let after = segments(dir.path());
    assert_eq!(before.len() - after.len(), removed);
    assert!(removed > 0);
    // Every record from the slowest checkpoint on is still there.
    assert!(after[0].first_seq <= 25);
    let seqs: Vec<u64> = j.read_from(25).expect("read").iter().map(|r| r.0).collect();
    assert_eq!(seqs, (25..=40).collect::<Vec<_>>());
    drop(j);
    let (j, _) = Journal::open(dir.path(), 2048).expect("reopen");
    assert_eq!(j.checkpoint("archive").expect("checkpoint"), 25);
    assert_eq!(j.checkpoint("budget").expect("checkpoint"), 31);
}

#[test]
fn numbering_goes_on_after_every_segment_was_consumed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut j, _) = Journal::open(dir.path(), 1 << 20).expect("open");
    fill(&mut j, 5, 10, 1);
    j.save_checkpoint("archive", 6).expect("save");
    drop(j);
    for s in segments(dir.path()) {
        std::fs::remove_file(s.path).expect("remove");
    }
    let (j, _) = Journal::open(dir.path(), 1 << 20).expect("reopen");
    assert_eq!(j.next_seq(), 6);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Whatever byte a crash stops at, what survives is exactly the records that were whole.
    #[test]
    fn a_crash_anywhere_keeps_exactly_the_whole_records(
        sizes in proptest::collection::vec(0usize..300, 1..40),
        cut_fraction in 0.0f64..1.0,
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut j, _) = Journal::open(dir.path(), 1 << 20).expect("open");
        let mut ends = Vec::new();
        let mut end = HEADER_BYTES;
        for (i, len) in sizes.iter().enumerate() {
            j.append(&payload(i as u64 + 1, *len));
            end += segment::RECORD_HEADER_BYTES + *len as u64;
            ends.push(end);
        }
        j.commit().expect("commit");
        drop(j);
        let path = segments(dir.path())[0].path.clone();
        let cut = (end as f64 * cut_fraction) as u64;
        OpenOptions::new().write(true).open(&path).and_then(|f| f.set_len(cut)).expect("cut");
        let (j, rec) = Journal::open(dir.path(), 1 << 20).expect("reopen");
        let whole = ends.iter().filter(|e| **e <= cut).count();
        let got = j.read_from(1).expect("read");
        prop_assert_eq!(got.len(), whole);
        for (seq, p) in &got {
            prop_assert_eq!(p, &payload(*seq, sizes[*seq as usize - 1]));
        }
        prop_assert_eq!(j.next_seq(), whole as u64 + 1);
        let last_whole = ends.iter().rev().find(|e| **e <= cut).copied().unwrap_or(HEADER_BYTES);
        let expected_cut = if cut < HEADER_BYTES { cut } else { cut - last_whole };
        prop_assert_eq!(rec.cut_bytes, expected_cut);
    }
}

mod live {
    use super::*;
    use crate::journal::head::JournalHead;
    use crate::journal::tail::{Record, Tail};
    use crate::journal::writer::{GroupCommit, JournalWriter};
    use std::sync::Arc;
    use std::time::Duration;

    fn start(
        dir: &Path,
        segment_bytes: u64,
        consumers: &[&str],
    ) -> (JournalWriter, Arc<JournalHead>, Vec<Tail>) {
        let (journal, _) = Journal::open(dir, segment_bytes).expect("open");
        let head = Arc::new(JournalHead::new(
            journal.next_seq(),
            journal.disk_bytes(),
            u64::MAX,
        ));
        let tails = consumers
            .iter()
            .map(|c| Tail::open(dir, c, Arc::clone(&head)).expect("tail"))
            .collect();
        let config = GroupCommit {
            interval: Duration::from_millis(1),
            group_bytes: 1 << 20,
            max_bytes: u64::MAX,
            queue: 1024,
        };
        let (writer, _thread) =
            JournalWriter::spawn(journal, config, Arc::clone(&head)).expect("writer");
        (writer, head, tails)
    }

    /// Reads until `n` records arrived or the writer stopped and nothing is left.
    fn read_all(tail: &mut Tail, n: usize) -> Vec<(u64, Vec<u8>)> {
        let mut got = Vec::new();
        while got.len() < n {
            let batch = tail
                .read(7, 1 << 20, Duration::from_secs(10), |_| None::<()>)
                .expect("read");
            if batch.is_empty() && tail.head().is_closed() {
                break;
            }
            got.extend(batch.into_iter().map(|(seq, record)| match record {
                Record::Payload(p) => (seq, p),
                Record::Taken(()) => unreachable!("nothing is had"),
            }));
        }
        got
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tail_follows_the_writer_across_segments_and_resumes_at_its_checkpoint() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (writer, _head, mut tails) = start(dir.path(), 2048, &["a"]);
        let mut tail = tails.remove(0);
        let reader = std::thread::spawn(move || {
            let got = read_all(&mut tail, 200);
            (tail, got)
        });
        for i in 0..200u64 {
            let seq = writer.append(payload(i + 1, 100)).await.expect("append");
            assert_eq!(seq, i + 1);
        }
        let (tail, got) = reader.join().expect("reader");
        assert_eq!(got.len(), 200);
        for (i, (seq, p)) in got.iter().enumerate() {
            assert_eq!(*seq, i as u64 + 1);
            assert_eq!(*p, payload(*seq, 100));
        }
        assert!(
            segments(dir.path()).len() > 5,
            "the reader crossed segments"
        );
        tail.save_checkpoint(151).expect("checkpoint");
        drop(tail);
        drop(writer);

        // A new process: the tail resumes at its checkpoint.
        let (writer, _head, mut tails) = start(dir.path(), 2048, &["a"]);
        let mut tail = tails.remove(0);
        assert_eq!(tail.next_seq(), 151);
        writer.append(payload(201, 100)).await.expect("append");
        let got = read_all(&mut tail, 51);
        let seqs: Vec<u64> = got.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, (151..=201).collect::<Vec<_>>());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tail_passes_over_records_it_has_and_reads_the_others() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (writer, _head, mut tails) = start(dir.path(), 2048, &["a", "b"]);
        for i in 0..60u64 {
            writer.append(payload(i + 1, 100)).await.expect("append");
        }
        // The payloads of records 1..=20 are damaged on disk: a tail that has them never reads
        // them, a tail that reads them finds the damage.
        let first = segments(dir.path()).remove(0).path;
        let mut bytes = std::fs::read(&first).expect("segment");
        let at = segment::HEADER_BYTES as usize + segment::RECORD_HEADER_BYTES as usize + 5;
        bytes[at] ^= 0xff;
        std::fs::write(&first, &bytes).expect("damage");
        let mut tail = tails.remove(0);
        let mut got = Vec::new();
        while got.len() < 60 {
            let batch = tail
                .read(7, 1 << 20, Duration::from_secs(10), |seq| {
                    (seq <= 20 || seq % 2 == 0).then_some(seq * 1000)
                })
                .expect("read");
            got.extend(batch);
        }
        assert_eq!(got.len(), 60);
        for (i, (seq, record)) in got.iter().enumerate() {
            assert_eq!(*seq, i as u64 + 1);
            match record {
                Record::Taken(v) => {
                    assert!(*seq <= 20 || seq % 2 == 0, "{seq}");
                    assert_eq!(*v, seq * 1000);
                }
                Record::Payload(p) => {
                    assert!(*seq > 20 && seq % 2 == 1, "{seq}");
                    assert_eq!(*p, payload(*seq, 100));
                }
            }
        }
        // Read, the damaged record is an error, never data.
        let err = tails[0]
            .read(7, 1 << 20, Duration::from_secs(1), |_| None::<u64>)
            .err()
            .expect("damage found");
        assert!(err.to_string().contains("checksum"), "{err}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn segments_go_once_every_consumer_passed_them_and_not_before() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (writer, head, tails) = start(dir.path(), 2048, &["fast", "slow"]);
        for i in 0..100u64 {
            writer.append(payload(i + 1, 100)).await.expect("append");
        }
        let before = segments(dir.path()).len();
        assert!(before > 4);
        tails[0]
            .save_checkpoint(101)
            .expect("fast passed everything");
        // The writer removes on its housekeeping rounds (every 500 ms, idle or not).
        let two_more_rounds = || {
            let rounds = head.housekeeping_rounds() + 2;
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while head.housekeeping_rounds() < rounds {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no housekeeping round"
                );
                // Woken by each round.
                head.wait_past(u64::MAX, Duration::from_millis(100));
            }
        };
        two_more_rounds();
        // The slow consumer still holds everything.
        assert_eq!(segments(dir.path()).first().map(|s| s.first_seq), Some(1));
        tails[1].save_checkpoint(60).expect("slow passed some");
        two_more_rounds();
        // Only segments wholly before record 60 went.
        let first = segments(dir.path()).first().map_or(0, |s| s.first_seq);
        assert!(
            first > 1 && first <= 60,
            "first kept segment starts at {first}"
        );
        assert!(head.disk_bytes() < 2048 * before as u64);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_tail_reading_while_the_writer_writes_never_sees_a_torn_record() {
        // The reader keeps catching up with a writer that is mid-write: a record past the
        // length it last saw must not look torn (it once stopped the archive under load).
        let dir = tempfile::tempdir().expect("tempdir");
        let (writer, _head, mut tails) = start(dir.path(), 1 << 20, &["a"]);
        let mut tail = tails.remove(0);
        let reader = std::thread::spawn(move || read_all(&mut tail, 4000));
        let mut tasks = tokio::task::JoinSet::new();
        for t in 0..4u64 {
            let w = writer.clone();
            tasks.spawn(async move {
                for i in 0..1000u64 {
                    w.append(payload(t * 1000 + i, 3000)).await.expect("append");
                }
            });
        }
        while let Some(r) = tasks.join_next().await {
            r.expect("writer task");
        }
        let got = reader.join().expect("reader");
        let seqs: Vec<u64> = got.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, (1..=4000).collect::<Vec<_>>());
    }
}
