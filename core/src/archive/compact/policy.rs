//! When files are merged: the [`Policy`] of an archive configuration, and the merge groups it
//! picks among a partition's files (`select`): small files that have aged all together,
//! younger ones `min_files` at a time with files of their size tier.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use super::files::FileInfo;
use crate::archive::config::{file_settings, ArchiveConfig};
use crate::archive::layout::partition::is_completed;
use crate::archive::retention::RetentionConfig;
use crate::archive::table::encoding::FileSettings;

/// When files are merged.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Files younger than this are left alone.
    pub older_than: Duration,
    /// Aged small files needed to merge in an hour still being written.
    pub min_files: usize,
    /// Most input bytes merged into one file; files of half this or more are not small.
    pub max_bytes: u64,
    /// How often the daemon looks (background only).
    pub every: Duration,
    /// Writer settings for the merged files.
    pub settings: FileSettings,
    /// The key that signs the manifest entries of a compaction (empty: unsigned).
    pub signing_key_file: PathBuf,
    /// Retention, applied after each pass by the daemon's compactor.
    pub retention: RetentionConfig,
}

impl Policy {
    /// The policy of an archive configuration.
    pub fn from_config(c: &ArchiveConfig) -> Policy {
        Policy {
            older_than: c.compact_after.0,
            min_files: c.compact_min_files.0.max(2),
            max_bytes: c.compact_max_bytes.0,
            every: c.compact_every.0,
            settings: file_settings(c),
            signing_key_file: c.manifest_signing_key_file.clone(),
            retention: c.retention.clone(),
        }
    }
}

/// Young files are merged with others of their size tier: files under this are tier 0, and
/// each tier above holds files up to four times larger.
const TIER_BASE: u64 = 64 * 1024;

/// The size tier of a file of `bytes`: files in one tier are within a factor of four.
fn tier(bytes: u64) -> u32 {
    if bytes < TIER_BASE {
        0
    } else {
        (bytes / TIER_BASE).ilog(4) + 1
    }
}

/// The merge groups among a partition's `files` (see `compact`'s rules). Small files that
/// have aged are merged all together, as before; younger ones (a flush for a reader writes
/// one per partition, up to twice a second) are merged `min_files` at a time with files of
/// their size tier, so a partition read in a loop holds a few files per tier instead of one
/// per flush, and each row is rewritten about once per tier, not once per merge.
pub(super) fn select(
    files: Vec<FileInfo>,
    policy: &Policy,
    hour_start_ns: Option<i64>,
    now: SystemTime,
) -> Vec<Vec<FileInfo>> {
    let aged_before = now
        .checked_sub(policy.older_than)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let small = policy.max_bytes / 2;
    let mut candidates: Vec<FileInfo> = files
        .into_iter()
        .filter(|f| is_completed(&f.name) && f.bytes < small)
        .collect();
    candidates.sort_by(|a, b| a.name.cmp(&b.name));
    let (aged, young): (Vec<FileInfo>, Vec<FileInfo>) = candidates
        .into_iter()
        .partition(|f| f.modified <= aged_before);
    let hour_closed = hour_start_ns.is_some_and(|start| {
        let end = SystemTime::UNIX_EPOCH
            + Duration::from_nanos(u64::try_from(start).unwrap_or(0))
            + Duration::from_secs(3600);
        end <= aged_before
    });
    let needed = if hour_closed { 2 } else { policy.min_files };
    let mut groups = Vec::new();
    if aged.len() >= needed {
        groups.extend(by_bytes(aged, policy.max_bytes));
    }
    let mut tiers: std::collections::BTreeMap<u32, Vec<FileInfo>> = Default::default();
    for f in young {
        tiers.entry(tier(f.bytes)).or_default().push(f);
    }
    for (_, files) in tiers {
        if files.len() >= policy.min_files {
            groups.extend(by_bytes(files, policy.max_bytes));
        }
    }
    groups.retain(|g| g.len() >= 2);
    groups
}

/// `files` cut into groups of at most `max_bytes` of input each (a file over it alone).
fn by_bytes(files: Vec<FileInfo>, max_bytes: u64) -> Vec<Vec<FileInfo>> {
    let mut groups: Vec<Vec<FileInfo>> = Vec::new();
    let mut current: Vec<FileInfo> = Vec::new();
    let mut bytes = 0u64;
    for f in files {
        if !current.is_empty() && bytes + f.bytes > max_bytes {
            groups.push(std::mem::take(&mut current));
            bytes = 0;
        }
        bytes += f.bytes;
        current.push(f);
    }
    groups.push(current);
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::compact::background::AFTER_FLUSHES;

    const MIB: u64 = 1024 * 1024;

    fn policy() -> Policy {
        Policy {
            older_than: Duration::from_secs(300),
            min_files: 4,
            max_bytes: 64 * MIB,
            every: Duration::from_secs(60),
            settings: file_settings(&crate::config::ArchiveConfig::default()),
            signing_key_file: PathBuf::new(),
            retention: Default::default(),
        }
    }

    fn file(n: u32, bytes: u64, age_s: u64, now: SystemTime) -> FileInfo {
        let name = format!("part-{n:04}.parquet");
        FileInfo {
            path: PathBuf::from(&name),
            name,
            bytes,
            modified: now - Duration::from_secs(age_s),
            sha256: String::new(),
        }
    }

    fn names(groups: &[Vec<FileInfo>]) -> Vec<Vec<&str>> {
        groups
            .iter()
            .map(|g| g.iter().map(|f| f.name.as_str()).collect())
            .collect()
    }

    #[test]
    fn tiers_are_factors_of_four() {
        assert_eq!(tier(0), 0);
        assert_eq!(tier(TIER_BASE - 1), 0);
        assert_eq!(tier(TIER_BASE), 1);
        assert_eq!(tier(4 * TIER_BASE - 1), 1);
        assert_eq!(tier(4 * TIER_BASE), 2);
        assert_eq!(tier(16 * TIER_BASE), 3);
    }

    #[test]
    fn young_files_merge_by_tier_aged_ones_all_together() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10 * 86_400);
        // An hour still being written (it starts now).
        let hour = Some(
            i64::try_from(
                now.duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos(),
            )
            .unwrap(),
        );
        let files = vec![
            // Three young tier-0 files: one short of a merge.
            file(1, 10_000, 1, now),
            file(2, 20_000, 2, now),
            file(3, 30_000, 3, now),
            // Four young tier-2 files (256 KiB..1 MiB): merged.
            file(4, 300_000, 5, now),
            file(5, 400_000, 6, now),
            file(6, 500_000, 7, now),
            file(7, 600_000, 8, now),
            // A large file is never an input.
            file(8, 40 * MIB, 9, now),
            // Four aged files of mixed sizes: merged together whatever their tiers.
            file(9, 10_000, 400, now),
            file(10, 2 * MIB, 400, now),
            file(11, 100_000, 500, now),
            file(12, 5 * MIB, 600, now),
        ];
        let groups = select(files.clone(), &policy(), hour, now);
        assert_eq!(
            names(&groups),
            vec![
                vec![
                    "part-0009.parquet",
                    "part-0010.parquet",
                    "part-0011.parquet",
                    "part-0012.parquet"
                ],
                vec![
                    "part-0004.parquet",
                    "part-0005.parquet",
                    "part-0006.parquet",
                    "part-0007.parquet"
                ],
            ]
        );
        // One more young tier-0 file makes four of them.
        let mut more = files;
        more.push(file(13, 5_000, 0, now));
        let groups = select(more, &policy(), hour, now);
        assert_eq!(groups.len(), 3);
        // Tiers in order: the tier-0 group comes before the tier-2 one.
        assert_eq!(
            names(&groups)[1],
            vec![
                "part-0001.parquet",
                "part-0002.parquet",
                "part-0003.parquet",
                "part-0013.parquet"
            ]
        );
    }

    /// A partition flushed once a second for ten minutes, with a compaction pass every
    /// [`AFTER_FLUSHES`], holds a few dozen files at any time, not one per flush.
    #[test]
    fn a_partition_read_in_a_loop_stays_at_a_few_files() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(10 * 86_400);
        let hour = Some(
            i64::try_from(
                start
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos(),
            )
            .unwrap(),
        );
        let mut files: Vec<(u64, SystemTime)> = Vec::new();
        let mut most = 0;
        let mut rewritten = 0u64;
        for s in 0..600u64 {
            let now = start + Duration::from_secs(s);
            files.push((30_000, now));
            most = most.max(files.len());
            // The daemon looks every AFTER_FLUSHES while files are flushed.
            if (s + 1) % AFTER_FLUSHES.as_secs() != 0 {
                continue;
            }
            let infos: Vec<FileInfo> = files
                .iter()
                .enumerate()
                .map(|(i, &(bytes, modified))| FileInfo {
                    name: format!("part-{i:06}.parquet"),
                    path: PathBuf::new(),
                    bytes,
                    modified,
                    sha256: String::new(),
                })
                .collect();
            let groups = select(infos, &policy(), hour, now);
            let mut merged: Vec<usize> = Vec::new();
            let mut out = Vec::new();
            for g in &groups {
                let bytes: u64 = g.iter().map(|f| f.bytes).sum();
                rewritten += bytes;
                out.push((bytes, now));
                merged.extend(g.iter().map(|f| f.name[5..11].parse::<usize>().unwrap()));
            }
            files = files
                .into_iter()
                .enumerate()
                .filter(|(i, _)| !merged.contains(i))
                .map(|(_, f)| f)
                .chain(out)
                .collect();
            most = most.max(files.len());
        }
        let total = 600 * 30_000u64;
        // Without the tiers, one file per flush until they age: about 300 at a time.
        assert_eq!((most, files.len()), (19, 9));
        // Each byte rewritten under three times (once per tier it passes, and once more when
        // aged), not once per flush.
        assert_eq!(rewritten, 49_200_000);
        assert!(rewritten < 3 * total);
    }
}
