//! What a completed file's name says: the writer instance and buffer it came from
//! (`-<instance>-<sequence>`, [`buffer_mark`]) and, per journal, the records it holds
//! (`_j<id>_<first>-<last>`, [`records_suffix`]), read back after a crash to skip what is
//! complete.

/// A new writer instance's id (4 random bytes, hex): it names the instance's files and its
/// manifest. Each daemon start and each command that writes the archive is an instance.
pub fn new_instance_id() -> String {
    hex::encode(rand::random::<[u8; 4]>())
}

/// The part of a completed file's name that says which buffer it was: `-<instance>-<sequence>`,
/// followed in the name by `_` or `.parquet`.
pub fn buffer_mark(instance_id: &str, sequence: u64) -> String {
    format!("-{instance_id}-{sequence:06}")
}

/// True when the completed file `name` is the buffer marked `mark` ([`buffer_mark`]) written out.
pub fn is_written_buffer(name: &str, mark: &str) -> bool {
    name.starts_with("part-")
        && name.match_indices(mark).any(|(at, _)| {
            let rest = &name[at + mark.len()..];
            rest.starts_with('_') || rest == ".parquet"
        })
}

/// The file-name suffix of a file holding journal `records` (first, last) of journal `id`:
/// `_j<id>_<first>-<last>`. After a crash the archive reads it back to skip what is complete.
pub fn records_suffix(id: &str, (first, last): (u64, u64)) -> String {
    format!("_j{id}_{first}-{last}")
}

/// The last journal record of journal `id` in a completed file named `name`, if it has one.
/// A compacted file names each journal its rows came from: `_j<id>_<first>-<last>` once per
/// journal id, with the first and last record of its inputs.
pub fn last_record_in(name: &str, id: &str) -> Option<u64> {
    let stem = name.strip_suffix(".parquet")?;
    let marker = format!("_j{id}_");
    stem.match_indices(&marker)
        .filter_map(|(at, _)| {
            let range = &stem[at + marker.len()..];
            let range = range.split('_').next()?;
            let (_, last) = range.split_once('-')?;
            last.parse::<u64>().ok()
        })
        .max()
}

/// Every `(journal id, first, last)` a completed file's name claims (journal ids never hold
/// `_`: they are hex).
pub fn record_ranges(name: &str) -> Vec<(String, u64, u64)> {
    let Some(stem) = name.strip_suffix(".parquet") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut parts = stem.split('_').skip(1);
    while let (Some(j), Some(range)) = (parts.next(), parts.next()) {
        let Some(id) = j.strip_prefix('j') else {
            break;
        };
        let Some((first, last)) = range.split_once('-') else {
            break;
        };
        match (first.parse(), last.parse()) {
            (Ok(f), Ok(l)) => out.push((id.to_string(), f, l)),
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compacted_names_keep_every_journal_range() {
        let name = "part-20261130T120000000Z-0a0b0c0d-c000001_j0000aaaa_3-9_jfeedf00d_1-42.parquet";
        assert_eq!(last_record_in(name, "feedf00d"), Some(42));
        assert_eq!(last_record_in(name, "0000aaaa"), Some(9));
        assert_eq!(last_record_in(name, "ffffffff"), None);
        assert_eq!(
            record_ranges(name),
            vec![
                ("0000aaaa".to_string(), 3, 9),
                ("feedf00d".to_string(), 1, 42)
            ]
        );
        assert!(record_ranges("part-x-y-000001.parquet").is_empty());
    }
}
