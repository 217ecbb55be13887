//! Scrub: a rule learned after the fact applied to what the archive already holds.
//!
//! `toolwatch scrub --rule ID` (or `--value-from-stdin`, for one leaked value) rewrites every
//! archive file in which the rule removes something, one partition at a time, through
//! [`Compactor::rewrite`]: the changed files are written under new names in the work area,
//! swapped in together with the untouched ones in one rename, and recorded in the manifest
//! (the old file `remove`d with the hash it had when read, the new one `add`ed, reason
//! `scrub`). Readers list the old folder or the new one, so they never see a row twice or
//! miss one; a crash (`kill -9` included) leaves one of the two whole, and scrubbing again
//! finishes the rest (a scrubbed file holds nothing more to remove).
//!
//! Every text column is scanned the way protect scans a string, JSON inside included (a rule
//! on keys applies to the attribute names in the JSON columns), except identifiers that never
//! carry free text ([`SKIPPED_COLUMNS`]); each changed row's `redactions` counts gain the
//! rule's hits. A value that only the rule's placeholder now names is gone from the archive's
//! files; the journal, downstream exports and copies made meanwhile are not touched.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, MapArray, StringArray};
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;

use super::Compactor;
use crate::archive::error::ArchiveError;
use crate::archive::layout::lock;
use crate::archive::layout::offloaded::read_marker;
use crate::archive::layout::partition::{encode_partition_value, partitions, PartitionDir};
use crate::archive::manifest::Reason;
use crate::archive::store::offload;
use crate::archive::store::remote::RemoteArchive;
use crate::archive::table::schema::CountsColumn;
use crate::archive::table::Table;
use crate::event::Redactions;
use crate::protect::engine::{Redactor, RuleError};
use crate::protect::rules::{Action, DetectorSpec, RedactionConfig};
use crate::protect::{walk, KeyedHasher};

/// Columns never scanned: identifiers toolwatch or the trace context makes, and hashes.
pub const SKIPPED_COLUMNS: &[&str] = &[
    "trace_id",
    "span_id",
    "parent_span_id",
    "idempotency_key_hash",
    "alarm_id",
    "finding_id",
];

/// The rule id a value given on stdin is removed under: `[REDACTED:scrubbed_value]`.
pub const VALUE_RULE: &str = "scrubbed_value";

/// Shortest value `--value-from-stdin` accepts: a shorter one would remove too much.
pub const MIN_VALUE_BYTES: usize = 8;

/// What a scrub removes.
pub enum Target {
    /// A configured or built-in rule, by id.
    Rule(String),
    /// One exact value (never shown in errors or logs).
    Value(String),
}

/// Why a scrub cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ScrubError {
    /// No configured or built-in rule has this id.
    #[error("no redaction rule {0:?} in the configuration or the built-in catalogue")]
    UnknownRule(String),
    /// The rule does not compile.
    #[error("{0}")]
    Rule(#[from] RuleError),
    /// The value is too short to remove safely.
    #[error("the value is {0} bytes; at least {MIN_VALUE_BYTES} are needed (a shorter one would remove too much)")]
    ValueTooShort(usize),
}

/// One rule, compiled to be applied to archived values.
pub struct Scrubber {
    redactor: Redactor,
}

impl Scrubber {
    /// The scrubber of `target` under the rules of `config` (its allowlists apply; the
    /// built-in catalogue is looked up even when `default_rules` is off). `hasher` is the
    /// daemon's key, needed by a `hash` rule so its hashes join the ones protect made.
    pub fn new(
        config: &RedactionConfig,
        target: &Target,
        hasher: KeyedHasher,
    ) -> Result<Scrubber, ScrubError> {
        let mut only = RedactionConfig {
            default_rules: false,
            disabled_rules: Vec::new(),
            detectors: Vec::new(),
            key_rules: Vec::new(),
            tenants: Default::default(),
            // Archived JSON sits a level or two deeper than protect saw it (an attribute
            // value inside the attributes column): room so nothing is removed for depth.
            max_depth: config.max_depth + 4,
            ..config.clone()
        };
        match target {
            Target::Rule(id) => {
                let (detector, key_rule) = find_rule(config, id);
                if detector.is_none() && key_rule.is_none() {
                    return Err(ScrubError::UnknownRule(id.clone()));
                }
                only.detectors.extend(detector);
                only.key_rules.extend(key_rule);
            }
            Target::Value(v) => {
                if v.len() < MIN_VALUE_BYTES {
                    return Err(ScrubError::ValueTooShort(v.len()));
                }
                // A value known to have leaked goes wherever it is, allowlisted keys included.
                only.allow_values.clear();
                only.allow_keys.clear();
                only.detectors.push(value_detector(v));
            }
        }
        let redactor = Redactor::new(&only, hasher).map_err(|e| match target {
            // The value's own text must not reach an error message.
            Target::Value(_) => ScrubError::Rule(RuleError::Keywords(
                "the value cannot be compiled into a matcher".into(),
            )),
            Target::Rule(_) => ScrubError::Rule(e),
        })?;
        Ok(Scrubber { redactor })
    }

    /// True when the rule of `id` hashes what it finds (the daemon's key is then needed).
    pub fn rule_hashes(config: &RedactionConfig, id: &str) -> bool {
        let (d, k) = find_rule(config, id);
        d.is_some_and(|d| d.action == Action::Hash) || k.is_some_and(|k| k.action == Action::Hash)
    }

    /// `batches` with the rule applied, or `None` when it removes nothing from them; adds the
    /// values it changed to `values`.
    pub fn batches(
        &self,
        batches: Vec<RecordBatch>,
        values: &mut u64,
    ) -> Result<Option<Vec<RecordBatch>>, ArchiveError> {
        let mut changed = false;
        let mut out = Vec::with_capacity(batches.len());
        for b in batches {
            match self.batch(&b)? {
                Some((new, n)) => {
                    changed = true;
                    *values += n;
                    out.push(new);
                }
                None => out.push(b),
            }
        }
        Ok(changed.then_some(out))
    }

    /// One batch with the rule applied and the values changed, or `None`.
    fn batch(&self, b: &RecordBatch) -> Result<Option<(RecordBatch, u64)>, ArchiveError> {
        let schema = b.schema();
        let mut columns: Vec<ArrayRef> = b.columns().to_vec();
        let mut row_hits: Vec<Redactions> = vec![Redactions::new(); b.num_rows()];
        let mut values = 0u64;
        for (i, field) in schema.fields().iter().enumerate() {
            if field.data_type() != &DataType::Utf8
                || SKIPPED_COLUMNS.contains(&field.name().as_str())
            {
                continue;
            }
            if let Some((new, n)) = self.text_column(columns[i].as_string::<i32>(), &mut row_hits) {
                columns[i] = Arc::new(new);
                values += n;
            }
        }
        if values == 0 {
            return Ok(None);
        }
        if let Ok(i) = schema.index_of("redactions") {
            if let Some(counted) = columns[i]
                .as_map_opt()
                .map(|map| add_counts(map, &row_hits))
                .transpose()?
                .flatten()
            {
                columns[i] = counted;
            }
        }
        Ok(Some((RecordBatch::try_new(schema, columns)?, values)))
    }

    /// A text column with the rule applied, and the values changed; `None` if none changed.
    fn text_column(
        &self,
        column: &StringArray,
        row_hits: &mut [Redactions],
    ) -> Option<(StringArray, u64)> {
        let mut changed: Vec<(usize, String)> = Vec::new();
        for (row, value) in column.iter().enumerate() {
            let Some(value) = value else { continue };
            let mut s = value.to_string();
            let mut found = walk::redact_string(&self.redactor, &mut s, &mut row_hits[row], 0);
            // Bytes values are archived as hex, where no rule can see what protect saw.
            if s.contains(BYTES_KEY) {
                found |= self.bytes_values(&mut s, &mut row_hits[row]);
            }
            if found {
                changed.push((row, s));
            }
        }
        if changed.is_empty() {
            return None;
        }
        let n = changed.len() as u64;
        let mut next = changed.into_iter().peekable();
        let new: StringArray = column
            .iter()
            .enumerate()
            .map(|(row, v)| match next.next_if(|(r, _)| *r == row) {
                Some((_, s)) => Some(s),
                None => v.map(str::to_string),
            })
            .collect();
        Some((new, n))
    }
}

/// The key under which the archive writes a bytes value (`{"bytes_hex": "…"}`).
const BYTES_KEY: &str = "\"bytes_hex\"";

impl Scrubber {
    /// Scans the bytes values of a JSON text as the text protect read them as (UTF-8); one
    /// the rule changes becomes the redacted text. True if any changed.
    fn bytes_values(&self, s: &mut String, hits: &mut Redactions) -> bool {
        let Ok(mut v) = serde_json::from_str::<serde_json::Value>(s) else {
            return false;
        };
        if !self.bytes_in(&mut v, hits, 0) {
            return false;
        }
        *s = v.to_string();
        true
    }

    fn bytes_in(&self, v: &mut serde_json::Value, hits: &mut Redactions, depth: usize) -> bool {
        use serde_json::Value;
        if depth > self.redactor.max_depth {
            return false;
        }
        match v {
            Value::Object(m) if m.len() == 1 && m.contains_key("bytes_hex") => {
                let Some(Value::String(h)) = m.get("bytes_hex") else {
                    return false;
                };
                let Some(mut text) = hex::decode(h).ok().and_then(|b| String::from_utf8(b).ok())
                else {
                    return false;
                };
                let changed = walk::redact_string(&self.redactor, &mut text, hits, 0);
                if changed {
                    *v = Value::String(text);
                }
                changed
            }
            Value::Object(m) => m
                .values_mut()
                .fold(false, |any, x| self.bytes_in(x, hits, depth + 1) | any),
            Value::Array(a) => a
                .iter_mut()
                .fold(false, |any, x| self.bytes_in(x, hits, depth + 1) | any),
            _ => false,
        }
    }
}

/// The detector and key rule named `id`: configured ones (tenant overrides included) first,
/// then the built-in catalogue.
fn find_rule(
    config: &RedactionConfig,
    id: &str,
) -> (
    Option<DetectorSpec>,
    Option<crate::protect::rules::KeyRuleSpec>,
) {
    use crate::protect::catalogue;
    let detectors = config
        .detectors
        .iter()
        .chain(config.tenants.values().flat_map(|t| t.detectors.iter()))
        .cloned()
        .chain(catalogue::default_detectors());
    let key_rules = config
        .key_rules
        .iter()
        .chain(config.tenants.values().flat_map(|t| t.key_rules.iter()))
        .cloned()
        .chain(catalogue::default_key_rules());
    let detector = detectors.into_iter().find(|d| d.id == id);
    let key_rule = if detector.is_some() {
        None
    } else {
        key_rules.into_iter().find(|k| k.id == id)
    };
    (detector, key_rule)
}

/// A detector of exactly `value`, placeholders included (a leaked value is what it is).
fn value_detector(value: &str) -> DetectorSpec {
    DetectorSpec {
        id: VALUE_RULE.to_string(),
        description: "a value given to `toolwatch scrub --value-from-stdin`".to_string(),
        regex: regex::escape(value),
        keywords: Vec::new(),
        group: 0,
        alternate_groups: Vec::new(),
        validator: None,
        action: Action::Mask,
        skip_placeholders: false,
        min_digits: 0,
        signals: Vec::new(),
        keys: Vec::new(),
        except_keys: Vec::new(),
        except_context: Vec::new(),
        judged: false,
        gate: None,
    }
}

/// The `redactions` column with each row's new hits added; `None` when the column is not
/// the map this release writes (a file of another schema keeps its counts).
fn add_counts(map: &MapArray, row_hits: &[Redactions]) -> Result<Option<ArrayRef>, ArchiveError> {
    let mut out = CountsColumn::default();
    let (Some(keys), Some(values)) = (
        map.keys().as_string_opt::<i32>(),
        map.values()
            .as_primitive_opt::<arrow::datatypes::Int64Type>(),
    ) else {
        return Ok(None);
    };
    let offsets = map.value_offsets();
    for (row, hits) in row_hits.iter().enumerate() {
        let mut counts: std::collections::BTreeMap<String, i64> = std::collections::BTreeMap::new();
        let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
        for e in start..end {
            *counts.entry(keys.value(e).to_string()).or_default() += values.value(e);
        }
        for (rule, n) in hits {
            *counts.entry(rule.clone()).or_default() += i64::from(*n);
        }
        out.append(counts.iter().map(|(k, v)| (k.as_str(), *v)))?;
    }
    let column = out.finish();
    Ok((column.data_type() == map.data_type()).then_some(column))
}

/// Which partitions a scrub looks at.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// Tables [default: all].
    pub tables: Vec<Table>,
    /// Only this tenant's partitions.
    pub tenant: Option<String>,
    /// Only partitions of this date (`YYYY-MM-DD`) or later.
    pub since: Option<String>,
}

impl Scope {
    /// The partitions in scope under `data_dir`, table by table.
    fn partitions(&self, data_dir: &Path) -> Result<Vec<PartitionDir>, ArchiveError> {
        let tables: &[Table] = if self.tables.is_empty() {
            &Table::ALL
        } else {
            &self.tables
        };
        let mut out = Vec::new();
        for &table in tables {
            out.extend(
                partitions(data_dir, table)?
                    .into_iter()
                    .filter(|p| self.covers(p)),
            );
        }
        Ok(out)
    }

    fn covers(&self, part: &PartitionDir) -> bool {
        self.tenant
            .as_deref()
            .is_none_or(|t| encode_partition_value(t) == part.tenant)
            && self
                .since
                .as_deref()
                .is_none_or(|d| part.date.as_str() >= d)
    }
}

/// What a scrub did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Partitions looked at.
    pub partitions: u64,
    /// Files read.
    pub files_read: u64,
    /// Files rewritten.
    pub files_rewritten: u64,
    /// Values changed (a value holding the secret twice counts once).
    pub values: u64,
    /// Partitions another process held throughout, or whose files changed meanwhile
    /// (scrub them again).
    pub busy: u64,
    /// Partitions not looked at: the folder holds a folder.
    pub skipped: u64,
    /// Partitions that failed (an unreadable file, a write error): logged; the others
    /// were scrubbed.
    pub failed: u64,
    /// Files only in object storage (offloaded) that a dry run did not read; the scrub
    /// itself brings them back to read them.
    pub offloaded_unread: u64,
}

impl Report {
    /// Adds another part's counts.
    fn add(&mut self, o: &Report) {
        self.partitions += o.partitions;
        self.files_read += o.files_read;
        self.files_rewritten += o.files_rewritten;
        self.values += o.values;
        self.busy += o.busy;
        self.skipped += o.skipped;
        self.failed += o.failed;
        self.offloaded_unread += o.offloaded_unread;
    }

    /// True when every partition in scope was looked at and is done.
    pub fn complete(&self) -> bool {
        self.busy == 0 && self.skipped == 0 && self.failed == 0
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "removed {} values from {} files ({} files in {} partitions read); {} partitions busy, {} skipped, {} failed",
            self.values,
            self.files_rewritten,
            self.files_read,
            self.partitions,
            self.busy,
            self.skipped,
            self.failed
        )?;
        if self.offloaded_unread > 0 {
            write!(
                f,
                "; {} files only in object storage not read",
                self.offloaded_unread
            )?;
        }
        Ok(())
    }
}

/// Applies `scrubber` to the partitions of `scope` under `data_dir`, one partition at a time
/// per compactor in `compactors` (each on a thread of its own; their instances name the new
/// files and the manifests they are recorded in).
/// Files of the partitions in scope that only the object store `remote` holds (see
/// [`offload`]) are brought back for the scrub and go again after it (those it
/// replaced are removed from the store with their removal); without `remote`, such a
/// partition is an error before anything is changed.
pub fn run(
    compactors: Vec<Compactor>,
    data_dir: &Path,
    scope: &Scope,
    scrubber: &Scrubber,
    remote: Option<&RemoteArchive>,
) -> Result<Report, ArchiveError> {
    let mut compactors = compactors;
    let Some(first) = compactors.first_mut() else {
        return Ok(Report::default());
    };
    // One scrub at a time owns the rewrite work area; what a killed one left there goes.
    let _scrub = lock::ScrubLock::acquire(data_dir)?;
    let work = lock::rewrite_work_dir(data_dir);
    if let Err(e) = std::fs::remove_dir_all(&work) {
        if e.kind() != std::io::ErrorKind::NotFound {
            return Err(ArchiveError::Io {
                path: work,
                source: e,
            });
        }
    }
    let parts = scope.partitions(data_dir)?;
    // Offloaded files need the store: refused before anything changes.
    if remote.is_none() {
        for part in &parts {
            if !read_marker(&part.dir(data_dir))?.is_empty() {
                return Err(ArchiveError::Io {
                    path: part.dir(data_dir),
                    source: std::io::Error::other(
                        "files of this partition are only in object storage; give the configuration with storage.url (--config)",
                    ),
                });
            }
        }
    }
    let mut tables: Vec<Table> = parts.iter().map(|p| p.table).collect();
    tables.dedup();
    for table in tables {
        if let Err(e) = first.clean_up_table(table) {
            tracing::error!(table = table.as_str(), error = %e, "interrupted rewrites not cleaned up");
        }
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let total = std::sync::Mutex::new(Report::default());
    std::thread::scope(|threads| {
        for mut compactor in compactors {
            let (next, total, parts) = (&next, &total, &parts);
            threads.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(part) = parts.get(i) else {
                    break;
                };
                let one = scrub_offloaded_too(&mut compactor, data_dir, part, scrubber, remote);
                let mut t = total
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                t.add(&one);
            });
        }
    });
    Ok(total
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner))
}

/// Scrubs one partition, its offloaded files brought back for the time it takes (one
/// partition at a time: a scrub never holds more of the store on disk than that).
fn scrub_offloaded_too(
    compactor: &mut Compactor,
    data_dir: &Path,
    part: &PartitionDir,
    scrubber: &Scrubber,
    remote: Option<&RemoteArchive>,
) -> Report {
    let mut recalled = Vec::new();
    let back = offload::recall(data_dir, remote, part, &mut recalled);
    let report = match back {
        Ok(()) => scrub_partition(compactor, part, scrubber),
        Err(e) => {
            tracing::error!(table = part.table.as_str(), tenant = %part.tenant, date = %part.date, hour = %part.hour, error = %e, "partition not scrubbed: its offloaded files could not be brought back");
            Report {
                partitions: 1,
                failed: 1,
                ..Report::default()
            }
        }
    };
    // What came back and was not replaced goes again.
    if let Err(e) = offload::settle_recalled(data_dir, &recalled) {
        tracing::error!(table = part.table.as_str(), tenant = %part.tenant, date = %part.date, hour = %part.hour, error = %e, "files brought back for the scrub not removed again; the next offload pass removes them");
    }
    report
}

/// Scrubs one partition; its part of the report.
fn scrub_partition(compactor: &mut Compactor, part: &PartitionDir, scrubber: &Scrubber) -> Report {
    let mut report = Report {
        partitions: 1,
        ..Report::default()
    };
    let table = part.table.as_str();
    let mut values = 0u64;
    let done = compactor.rewrite(part, Reason::Scrub, &mut |batches| {
        scrubber.batches(batches, &mut values)
    });
    let done = match done {
        Ok(d) => d,
        // One partition that cannot be scrubbed does not stop the others. The error names
        // files and types, never values.
        Err(e) => {
            tracing::error!(table, tenant = %part.tenant, date = %part.date, hour = %part.hour, error = %e, "partition not scrubbed");
            report.failed = 1;
            return report;
        }
    };
    report.files_read = done.files_read;
    if done.skipped {
        tracing::warn!(table, tenant = %part.tenant, date = %part.date, hour = %part.hour, "partition not scrubbed: its folder holds a folder");
        report.skipped = 1;
    } else if done.busy {
        report.busy = 1;
    } else {
        report.files_rewritten = done.files_rewritten;
        report.values = values;
    }
    report
}

/// What [`run`] would do, without changing anything: `files_rewritten` counts the files
/// that would be.
pub fn count(data_dir: &Path, scope: &Scope, scrubber: &Scrubber) -> Result<Report, ArchiveError> {
    let mut report = Report::default();
    // Shared with our readers: a compaction does not swap a folder away mid-count.
    let _readers = lock::ReadersLock::shared(data_dir);
    for part in scope.partitions(data_dir)? {
        report.partitions += 1;
        report.offloaded_unread += read_marker(&part.dir(data_dir))?.len() as u64;
        let Some(files) = super::files::completed_files(&part.dir(data_dir))? else {
            report.skipped += 1;
            continue;
        };
        for path in files {
            let (_, batches, _) = super::files::read_whole(&path)?;
            report.files_read += 1;
            let before = report.values;
            scrubber.batches(batches, &mut report.values)?;
            if report.values > before {
                report.files_rewritten += 1;
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{Field, Schema};

    fn scrubber(target: Target) -> Scrubber {
        let mut config = RedactionConfig::default();
        config.detectors.push(DetectorSpec {
            id: "acme_token".into(),
            regex: "acme_[a-z0-9]{12}".into(),
            ..value_detector("unused-value")
        });
        Scrubber::new(&config, &target, KeyedHasher::new(&[7; 32])).expect("scrubber")
    }

    fn batch(texts: &[Option<&str>]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("trace_id", DataType::Utf8, false),
            Field::new("attributes", DataType::Utf8, true),
            crate::archive::table::schema::counts_map_field("redactions"),
        ]));
        let mut counts = CountsColumn::default();
        for _ in texts {
            counts.append([("email", 1)]).expect("counts");
        }
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["acme_aaaaaaaaaaaa"; texts.len()])),
                Arc::new(StringArray::from(texts.to_vec())),
                counts.finish(),
            ],
        )
        .expect("batch")
    }

    #[test]
    fn a_rule_removes_its_values_in_json_and_counts_them_per_row() {
        let s = scrubber(Target::Rule("acme_token".into()));
        let b = batch(&[
            Some(r#"{"note":"key acme_0123456789ab here","n":1}"#),
            None,
            Some(r#"{"clean":"nothing"}"#),
        ]);
        let mut values = 0;
        let out = s
            .batches(vec![b], &mut values)
            .expect("scrub")
            .expect("changed");
        assert_eq!(values, 1);
        let attrs = out[0].column(1).as_string::<i32>();
        assert_eq!(
            attrs.value(0),
            r#"{"note":"key [REDACTED:acme_token] here","n":1}"#
        );
        assert!(attrs.is_null(1));
        assert_eq!(attrs.value(2), r#"{"clean":"nothing"}"#);
        // Identifiers are not scanned even when they match.
        assert_eq!(
            out[0].column(0).as_string::<i32>().value(0),
            "acme_aaaaaaaaaaaa"
        );
        let map = out[0].column(2).as_map();
        let row0 = map.value(0);
        let keys: Vec<&str> = row0.column(0).as_string::<i32>().iter().flatten().collect();
        let counts: Vec<i64> = row0
            .column(1)
            .as_primitive::<arrow::datatypes::Int64Type>()
            .values()
            .to_vec();
        assert_eq!((keys, counts), (vec!["acme_token", "email"], vec![1, 1]));
        assert_eq!(map.value(1).len(), 1);
    }

    #[test]
    fn nothing_to_remove_is_none_and_a_value_from_stdin_is_removed_exactly() {
        let s = scrubber(Target::Rule("acme_token".into()));
        let mut values = 0;
        assert!(s
            .batches(vec![batch(&[Some("plain")])], &mut values)
            .expect("scrub")
            .is_none());
        let v = scrubber(Target::Value("hunter2-but-longer".into()));
        let out = v
            .batches(
                vec![batch(&[
                    Some("pw=hunter2-but-longer;"),
                    Some("hunter2-but-long"),
                ])],
                &mut values,
            )
            .expect("scrub")
            .expect("changed");
        let attrs = out[0].column(1).as_string::<i32>();
        assert_eq!(attrs.value(0), "pw=[REDACTED:scrubbed_value];");
        assert_eq!(attrs.value(1), "hunter2-but-long");
        assert_eq!(values, 1);
    }

    #[test]
    fn a_leaked_value_goes_from_allowlisted_keys_and_bytes_values_too() {
        let v = scrubber(Target::Value("hunter2-but-longer".into()));
        let hex = hex::encode("pw hunter2-but-longer end");
        let other = hex::encode("nothing here at all");
        let b = batch(&[
            Some(r#"{"service.version":"hunter2-but-longer"}"#),
            Some(&format!(
                r#"{{"blob":{{"bytes_hex":"{hex}"}},"keep":{{"bytes_hex":"{other}"}}}}"#
            )),
        ]);
        let mut values = 0;
        let out = v
            .batches(vec![b], &mut values)
            .expect("scrub")
            .expect("changed");
        let attrs = out[0].column(1).as_string::<i32>();
        assert_eq!(
            attrs.value(0),
            r#"{"service.version":"[REDACTED:scrubbed_value]"}"#
        );
        assert_eq!(
            attrs.value(1),
            format!(
                r#"{{"blob":"pw [REDACTED:scrubbed_value] end","keep":{{"bytes_hex":"{other}"}}}}"#
            )
        );
        assert_eq!(values, 2);
    }

    #[test]
    fn unknown_rules_and_short_values_are_refused_without_echoing_the_value() {
        let config = RedactionConfig::default();
        let key = || KeyedHasher::new(&[7; 32]);
        let e = Scrubber::new(&config, &Target::Rule("nope".into()), key())
            .err()
            .expect("unknown");
        assert!(e.to_string().contains("\"nope\""));
        let e = Scrubber::new(&config, &Target::Value("s3cr".into()), key())
            .err()
            .expect("short");
        assert!(!e.to_string().contains("s3cr"));
        // Built-in rules are found by id even though the scrubber compiles only one rule.
        assert!(Scrubber::new(&config, &Target::Rule("email_address".into()), key()).is_ok());
    }
}
