//! Recall and false positives of the default catalogue on the labeled corpora in
//! `../shared/corpora/` (read at test time, never copied in). Prints the tables that
//! BENCHMARKS.md records ("Protect: redaction quality on the shared corpora"):
//!
//!     cargo test --test it corpora -- --nocapture --test-threads 1
//!
//! Each sample is redacted three ways: as a plain string attribute; as a string value inside a
//! JSON document (how tool arguments arrive); and JSON-escaped inside a plain log line (where
//! no JSON parse can help). A secret counts as found when neither it nor its JSON-escaped form
//! survives. The assertions are floors just under today's figures, so a regression fails.
//!
//! Every corpus is split by a fixed hash of each row ([`part_of`]: the first bit of the
//! SHA-256 of the row's line) into a tuning part and a held-out part, and both are reported.
//! Rules are tuned on the tuning part only: the per-rule detail and the `CORPUS_MISSES` file
//! cover only its rows, and the held-out part is reported as totals.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;
use toolwatch::event::Redactions;
use toolwatch::protect::engine::Redactor;
use toolwatch::protect::rules::RedactionConfig;
use toolwatch::protect::walk::redact_string;
use toolwatch::protect::KeyedHasher;

fn corpus(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/corpora")
        .join(name);
    assert!(
        p.exists(),
        "corpus {} not found beside the repository",
        p.display()
    );
    p
}

/// The part of a corpus a row belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    /// Rows the rules may be tuned on.
    Tuning,
    /// Rows only reported.
    HeldOut,
}

/// The part of the row whose text (its whole line in the corpus file) is `row`: fixed, so the
/// split never moves between runs or builds.
fn part_of(row: &str) -> Part {
    if toolwatch::protect::training::is_tuning_row(row) {
        Part::Tuning
    } else {
        Part::HeldOut
    }
}

fn redactor() -> Redactor {
    Redactor::new(&RedactionConfig::default(), KeyedHasher::new(b"corpus")).expect("rules")
}

#[derive(Clone, Copy, Debug)]
enum Form {
    Plain,
    InJson,
    EscapedInLine,
}

const FORMS: [Form; 3] = [Form::Plain, Form::InJson, Form::EscapedInLine];

/// The redacted text, in the form the secret would appear in it.
fn redact(r: &Redactor, sample: &str, form: Form) -> String {
    let mut hits = Redactions::new();
    match form {
        Form::Plain => {
            let mut s = sample.to_string();
            redact_string(r, &mut s, &mut hits, 0);
            s
        }
        Form::InJson => {
            let mut s =
                serde_json::json!({"tool": "deploy", "arguments": {"input": sample}}).to_string();
            redact_string(r, &mut s, &mut hits, 0);
            let v: Value = serde_json::from_str(&s).expect("still JSON");
            v["arguments"]["input"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        }
        Form::EscapedInLine => {
            let escaped = serde_json::to_string(sample).expect("escape");
            let mut s = format!("tool call failed: args={{\"input\":{escaped}}} (retrying)");
            redact_string(r, &mut s, &mut hits, 0);
            s
        }
    }
}

fn survives(out: &str, secret: &str) -> bool {
    let escaped = serde_json::to_string(secret).expect("escape");
    out.contains(secret) || out.contains(&escaped[1..escaped.len() - 1])
}

#[derive(Default, Clone, Copy)]
struct Tally {
    found: u64,
    total: u64,
}

impl Tally {
    /// `12.3% (found/total)`, as the tables print it.
    fn cell(&self) -> String {
        format!("{:.1}% ({}/{})", self.pct(), self.found, self.total)
    }

    fn pct(&self) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        100.0 * self.found as f64 / self.total as f64
    }
}

/// Rules that fire on a value because of the name it is assigned to, not its shape.
const KEY_CONTEXT_RULES: &[&str] = &[
    "secret_key_assignment",
    "env_secret_assignment",
    "credential_key",
    "secret_named_key",
    "cli_secret_flag",
    "connection_string_password",
    "high_entropy_near_keyword",
];

/// Why an `fp` sample was touched. gitleaks labels a sample `fp` for one rule; for a
/// redactor, which must also remove what other rules find and any value a config assigns
/// to a credential name, most such touches are intended. The classes keep that visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum FpClass {
    /// The sample holds a string the corpus labels as a secret in some `tp` sample.
    LabelledSecretElsewhere,
    /// Every rule that fired is a key-context rule (`password = …`, `"…Token": "…"`).
    ValueUnderCredentialName,
    /// Every rule that fired is a personal-data rule (e-mail, IP address…), which gitleaks
    /// does not look for and toolwatch removes by default.
    PersonalData,
    /// Anything else: a shape rule fired on something that is not a labelled secret.
    Other,
}

fn fired_rules(out: &str) -> Vec<&str> {
    out.match_indices("[REDACTED:")
        .filter_map(|(i, _)| {
            let rest = &out[i + "[REDACTED:".len()..];
            rest.find(']').map(|end| &rest[..end])
        })
        .collect()
}

#[test]
fn gitleaks_corpus_recall_and_false_positives() {
    let r = redactor();
    let text = std::fs::read_to_string(corpus("gitleaks_labeled.jsonl")).expect("read");
    let samples: Vec<(Part, Value)> = text
        .lines()
        .map(|l| (part_of(l), serde_json::from_str(l).expect("jsonl")))
        .collect();
    let labelled: std::collections::HashSet<&str> = samples
        .iter()
        .map(|(_, d)| d)
        .filter(|d| d["label"] == "tp")
        .flat_map(|d| d["expected_secrets"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .filter(|s| s.len() >= 8)
        .collect();
    let mut recall: [Tally; 3] = Default::default();
    let mut fp: [Tally; 3] = Default::default();
    let mut fp_classes: BTreeMap<(FpClass, Part), u64> = BTreeMap::new();
    let mut by_rule: BTreeMap<String, [Tally; 3]> = BTreeMap::new();
    // Plain form, by part: (recall, fp touched).
    let mut by_part: BTreeMap<Part, (Tally, Tally)> = BTreeMap::new();
    // `CORPUS_MISSES=FILE` writes each missed secret and each touched fp sample of the tuning
    // part, for tuning.
    let mut misses = String::new();
    for (part, d) in &samples {
        let (part, tuning) = (*part, *part == Part::Tuning);
        let sample = d["sample"].as_str().expect("sample");
        let rule = d["rule_id"].as_str().unwrap_or("?").to_string();
        let secrets: Vec<&str> = d["expected_secrets"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (i, form) in FORMS.iter().enumerate() {
            let out = redact(&r, sample, *form);
            if d["label"] == "tp" {
                for s in &secrets {
                    let ok = !survives(&out, s);
                    if !ok && i == 0 && tuning {
                        misses
                            .push_str(&format!("MISS {rule} {s:?}\n  {sample:?}\n  -> {out:?}\n"));
                    }
                    recall[i].total += 1;
                    recall[i].found += u64::from(ok);
                    if i == 0 {
                        let t = &mut by_part.entry(part).or_default().0;
                        t.total += 1;
                        t.found += u64::from(ok);
                    }
                    if tuning {
                        let t = &mut by_rule.entry(rule.clone()).or_default()[i];
                        t.total += 1;
                        t.found += u64::from(ok);
                    }
                }
            } else {
                let unchanged = match form {
                    Form::Plain => out == sample,
                    Form::InJson => out == sample,
                    Form::EscapedInLine => {
                        let escaped = serde_json::to_string(sample).expect("escape");
                        out == format!("tool call failed: args={{\"input\":{escaped}}} (retrying)")
                    }
                };
                if i == 0 {
                    let t = &mut by_part.entry(part).or_default().1;
                    t.total += 1;
                    t.found += u64::from(!unchanged);
                }
                if !unchanged && i == 0 {
                    if tuning {
                        misses.push_str(&format!("FP {rule}\n  {sample:?}\n  -> {out:?}\n"));
                    }
                    let class = if labelled.iter().any(|s| sample.contains(s)) {
                        FpClass::LabelledSecretElsewhere
                    } else if fired_rules(&out)
                        .iter()
                        .all(|r| KEY_CONTEXT_RULES.contains(r))
                    {
                        FpClass::ValueUnderCredentialName
                    } else if fired_rules(&out)
                        .iter()
                        .all(|r| toolwatch::protect::catalogue::PERSONAL_DATA.contains(r))
                    {
                        FpClass::PersonalData
                    } else {
                        FpClass::Other
                    };
                    *fp_classes.entry((class, part)).or_default() += 1;
                }
                fp[i].total += 1;
                fp[i].found += u64::from(!unchanged);
            }
        }
    }
    if let Some(path) = std::env::var_os("CORPUS_MISSES") {
        std::fs::write(path, misses).expect("write misses");
    }
    println!(
        "\ngitleaks corpus: {} secrets in tp samples, {} fp samples",
        recall[0].total, fp[0].total
    );
    println!("| form | recall | fp samples touched |");
    println!("| --- | --- | --- |");
    for (i, form) in FORMS.iter().enumerate() {
        println!("| {form:?} | {} | {} |", recall[i].cell(), fp[i].cell());
    }
    println!("\nby part (plain form; split by the SHA-256 of each row):");
    println!("| part | recall | fp samples touched |");
    println!("| --- | --- | --- |");
    for (part, (rec, fp)) in &by_part {
        println!("| {part:?} | {} | {} |", rec.cell(), fp.cell());
    }
    println!("\nwhy fp samples were touched (plain form), by part:");
    println!("| class | Tuning | HeldOut |");
    println!("| --- | --- | --- |");
    let classes: std::collections::BTreeSet<FpClass> = fp_classes.keys().map(|k| k.0).collect();
    for class in classes {
        let cell = |part: Part| {
            let n = fp_classes.get(&(class, part)).copied().unwrap_or_default();
            let of = by_part.get(&part).map_or(0, |t| t.1.total);
            format!("{n} of {of} ({:.1}%)", 100.0 * n as f64 / of.max(1) as f64)
        };
        println!(
            "| {class:?} | {} | {} |",
            cell(Part::Tuning),
            cell(Part::HeldOut)
        );
    }
    println!(
        "\nper gitleaks rule below 100%, tuning part only (plain / in JSON / escaped in a line):"
    );
    for (rule, t) in &by_rule {
        if t[0].found < t[0].total || t[2].found < t[2].total {
            println!(
                "  {rule}: {:.0}% / {:.0}% / {:.0}% of {}",
                t[0].pct(),
                t[1].pct(),
                t[2].pct(),
                t[0].total
            );
        }
    }
    for (i, form) in FORMS.iter().enumerate() {
        assert!(
            recall[i].pct() >= 97.5,
            "{form:?} recall {:.1}%",
            recall[i].pct()
        );
    }
    assert!(fp[0].pct() <= 19.5, "fp {:.1}%", fp[0].pct());
    for (part, (rec, _)) in &by_part {
        assert!(rec.pct() >= 97.5, "{part:?} part recall {:.1}%", rec.pct());
    }
    let other: u64 = [Part::Tuning, Part::HeldOut]
        .into_iter()
        .filter_map(|part| fp_classes.get(&(FpClass::Other, part)))
        .sum();
    assert!(
        100.0 * other as f64 / fp[0].total as f64 <= 6.5,
        "{other} fp samples touched by shape rules"
    );
}

/// How a CredSweeper `F` row was labelled (see the corpus README): marked by the sample
/// itself, a keyword look-alike, or the scanner's ML verdict. Scored apart, as advised there.
fn f_group(basis: &str) -> &'static str {
    match basis {
        "fp_marked_line" | "fp_marked_finding" => "marked",
        "keyword" => "keyword",
        _ => "ml_rejected",
    }
}

#[test]
fn credsweeper_corpus_recall_and_false_positives() {
    let r = redactor();
    let text = std::fs::read_to_string(corpus("credsweeper_samples.jsonl")).expect("read");
    // By part: recall (plain, in JSON) and, by F group, lines touched (plain).
    // [plain, in JSON, plain without PEM key lines (one row per line of a key: the README
    // says to count keys, and a line of base64 alone is no key)].
    let mut recall: BTreeMap<Part, [Tally; 3]> = BTreeMap::new();
    let mut touched: BTreeMap<(Part, &str), Tally> = BTreeMap::new();
    let mut by_rule: BTreeMap<String, Tally> = BTreeMap::new();
    let mut misses = String::new();
    let mut keys: Vec<PemKey> = Vec::new();
    for line in text.lines() {
        let part = part_of(line);
        let d: Value = serde_json::from_str(line).expect("jsonl");
        if d["rule"] == "PEM Private Key" && d["label"] == "T" {
            collect_pem_key(&mut keys, &d, part);
        }
        let sample = d["text"].as_str().expect("text");
        let rule = d["rule"].as_str().unwrap_or("-").to_string();
        if d["label"] == "T" {
            let value = d["value"].as_str().expect("a T row has its value");
            for (i, form) in [Form::Plain, Form::InJson].into_iter().enumerate() {
                let out = redact(&r, sample, form);
                let ok = !survives(&out, value);
                let tallies = recall.entry(part).or_default();
                tallies[i].total += 1;
                tallies[i].found += u64::from(ok);
                if i == 0 && rule != "PEM Private Key" {
                    tallies[2].total += 1;
                    tallies[2].found += u64::from(ok);
                }
                if i == 0 && part == Part::Tuning {
                    let t = by_rule.entry(rule.clone()).or_default();
                    t.total += 1;
                    t.found += u64::from(ok);
                    if !ok {
                        misses.push_str(&format!(
                            "MISS {rule} {value:?}\n  {sample:?}\n  -> {out:?}\n"
                        ));
                    }
                }
            }
        } else {
            let out = redact(&r, sample, Form::Plain);
            let group = f_group(d["basis"].as_str().unwrap_or_default());
            let t = touched.entry((part, group)).or_default();
            t.total += 1;
            t.found += u64::from(out != sample);
            if out != sample && part == Part::Tuning {
                misses.push_str(&format!("FP {group}\n  {sample:?}\n  -> {out:?}\n"));
            }
        }
    }
    // Keys counted as keys, as the corpus README asks: each fed whole (its lines joined, as
    // a tool result carries a key file), found when every one of its lines is gone.
    let mut by_key: BTreeMap<Part, Tally> = BTreeMap::new();
    for key in &keys {
        let out = redact(&r, &key.text(), Form::Plain);
        let t = by_key.entry(key.part).or_default();
        t.total += 1;
        let found = key.values.iter().all(|v| !survives(&out, v));
        t.found += u64::from(found);
        if !found && key.part == Part::Tuning {
            misses.push_str(&format!(
                "MISS PEM key {} {}\n  {:?}\n  -> {out:?}\n",
                key.file,
                key.last_line,
                key.text()
            ));
        }
    }
    if let Some(path) = std::env::var_os("CORPUS_MISSES_CREDSWEEPER") {
        std::fs::write(path, misses).expect("write misses");
    }
    println!("\ncredsweeper corpus (CredSweeper's expected output over its samples; split by the SHA-256 of each row):");
    println!("| part | recall, plain | recall, in JSON | recall, plain, without PEM key lines | recall, plain, a PEM key counted once (fed whole) | F marked touched | F keyword look-alikes touched | F ML-rejected touched |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for part in [Part::Tuning, Part::HeldOut] {
        let rec = recall.get(&part).copied().unwrap_or_default();
        let f = |g| touched.get(&(part, g)).copied().unwrap_or_default();
        let k = by_key.get(&part).copied().unwrap_or_default();
        let keys_whole = Tally {
            found: rec[2].found + k.found,
            total: rec[2].total + k.total,
        };
        println!(
            "| {part:?} | {} | {} | {} | {} | {} | {} | {} |",
            rec[0].cell(),
            rec[1].cell(),
            rec[2].cell(),
            keys_whole.cell(),
            f("marked").cell(),
            f("keyword").cell(),
            f("ml_rejected").cell()
        );
    }
    println!("\nper CredSweeper rule below 100%, tuning part only (plain):");
    for (rule, t) in &by_rule {
        if t.found < t.total {
            println!("  {rule}: {:.0}% of {}", t.pct(), t.total);
        }
    }
    // Floors just under the figures of 2026-12-02 (in `git log -- BENCHMARKS.md`; the current
    // figures: BENCHMARKS.md, "Protect: redaction quality on the shared corpora").
    let floor = |part: Part| recall.get(&part).copied().unwrap_or_default()[0].pct();
    assert!(
        floor(Part::Tuning) >= TUNING_RECALL_FLOOR,
        "tuning recall {:.1}%",
        floor(Part::Tuning)
    );
    assert!(
        floor(Part::HeldOut) >= HELD_OUT_RECALL_FLOOR,
        "held-out recall {:.1}%",
        floor(Part::HeldOut)
    );
}

/// One PEM key of the CredSweeper corpus: its rows are consecutive lines of one sample.
struct PemKey {
    file: String,
    last_line: u64,
    lines: Vec<String>,
    values: Vec<String>,
    /// The part of the key's first row.
    part: Part,
}

impl PemKey {
    fn text(&self) -> String {
        self.lines.join("\n")
    }
}

/// Adds a PEM key row to the key it continues, or starts a key.
fn collect_pem_key(keys: &mut Vec<PemKey>, d: &Value, part: Part) {
    let file = d["file"].as_str().expect("file").to_string();
    let line = d["line"].as_u64().expect("line");
    let text = d["text"].as_str().expect("text").to_string();
    let value = d["value"].as_str().expect("value").to_string();
    match keys.last_mut() {
        // The corpus drops a blank line inside a PGP block: a gap of one line continues it.
        Some(k) if k.file == file && (k.last_line + 1..=k.last_line + 2).contains(&line) => {
            if line == k.last_line + 2 {
                k.lines.push(String::new());
            }
            k.last_line = line;
            k.lines.push(text);
            k.values.push(value);
        }
        _ => keys.push(PemKey {
            file,
            last_line: line,
            lines: vec![text],
            values: vec![value],
            part,
        }),
    }
}

/// CredSweeper corpus, plain form: recall floors per part.
const TUNING_RECALL_FLOOR: f64 = 57.0;
const HELD_OUT_RECALL_FLOOR: f64 = 50.0;

/// Presidio entities the catalogue claims to cover, and the rule family that covers each.
const COVERED: &[&str] = &[
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "CREDIT_CARD",
    "IBAN_CODE",
    "US_SSN",
    "IP_ADDRESS",
];

fn char_span(text: &str, start: usize, end: usize) -> String {
    text.chars()
        .skip(start)
        .take(end.saturating_sub(start))
        .collect()
}

#[test]
fn presidio_corpora_recall_and_false_positives() {
    let r = redactor();
    let mut per_entity: BTreeMap<String, (Tally, Tally)> = BTreeMap::new();
    // Entities the catalogue covers, by part: (recall, negatives touched).
    let mut covered_by_part: BTreeMap<Part, (Tally, Tally)> = BTreeMap::new();
    let text = std::fs::read_to_string(corpus("presidio_recognizer_cases.jsonl")).expect("read");
    for line in text.lines() {
        let part = part_of(line);
        let d: Value = serde_json::from_str(line).expect("jsonl");
        let entity = match &d["entity"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let sample = d["text"].as_str().unwrap_or_default();
        let out = redact(&r, sample, Form::Plain);
        let covered = COVERED.contains(&entity.as_str());
        let e = per_entity.entry(entity).or_default();
        let p = covered_by_part.entry(part).or_default();
        if d["label"] == "positive" {
            for span in d["spans"].as_array().into_iter().flatten() {
                let (Some(s), Some(t)) = (span[0].as_u64(), span[1].as_u64()) else {
                    continue;
                };
                let value = char_span(sample, s as usize, t as usize);
                let ok = u64::from(!out.contains(&value));
                e.0.total += 1;
                e.0.found += ok;
                if covered {
                    p.0.total += 1;
                    p.0.found += ok;
                }
            }
        } else {
            let changed = u64::from(out != sample);
            e.1.total += 1;
            e.1.found += changed;
            if covered {
                p.1.total += 1;
                p.1.found += changed;
            }
        }
    }
    let synth: Value = serde_json::from_str(
        &std::fs::read_to_string(corpus("presidio_synth_dataset_v2.json")).expect("read"),
    )
    .expect("json");
    let mut synth_entity: BTreeMap<String, Tally> = BTreeMap::new();
    for d in synth.as_array().expect("list") {
        let sample = d["full_text"].as_str().unwrap_or_default();
        let spans: Value = match &d["spans"] {
            Value::String(s) => serde_json::from_str(&s.replace('\'', "\"")).unwrap_or(Value::Null),
            other => other.clone(),
        };
        let out = redact(&r, sample, Form::Plain);
        for s in spans.as_array().into_iter().flatten() {
            let ty = s["entity_type"].as_str().unwrap_or("?").to_string();
            let value = s["entity_value"].as_str().unwrap_or_default();
            let t = synth_entity.entry(ty).or_default();
            t.total += 1;
            t.found += u64::from(!out.contains(value));
        }
    }
    println!("\npresidio recognizer cases, entities the catalogue covers:");
    println!("| entity | recall | negatives touched |");
    println!("| --- | --- | --- |");
    let mut covered_recall = Tally::default();
    let mut covered_fp = Tally::default();
    for (entity, (rec, fp)) in &per_entity {
        if COVERED.contains(&entity.as_str()) {
            println!(
                "| {entity} | {:.0}% ({}/{}) | {:.0}% ({}/{}) |",
                rec.pct(),
                rec.found,
                rec.total,
                fp.pct(),
                fp.found,
                fp.total
            );
            covered_recall.found += rec.found;
            covered_recall.total += rec.total;
            covered_fp.found += fp.found;
            covered_fp.total += fp.total;
        }
    }
    println!(
        "| all covered | {:.1}% | {:.1}% |",
        covered_recall.pct(),
        covered_fp.pct()
    );
    for (part, (rec, fp)) in &covered_by_part {
        println!(
            "| all covered, {part:?} part | {} | {} |",
            rec.cell(),
            fp.cell()
        );
    }
    let mut other_fp = Tally::default();
    let mut other_recall = Tally::default();
    for (entity, (rec, fp)) in &per_entity {
        if !COVERED.contains(&entity.as_str()) {
            other_fp.found += fp.found;
            other_fp.total += fp.total;
            other_recall.found += rec.found;
            other_recall.total += rec.total;
        }
    }
    println!(
        "entities not covered (national ids, licences, dates...): {:.1}% incidental recall, {:.1}% of their negatives touched",
        other_recall.pct(),
        other_fp.pct()
    );
    println!("\npresidio synthetic sentences, recall per entity (names, places, organisations need NER):");
    for (entity, t) in &synth_entity {
        println!("  {entity}: {:.0}% ({}/{})", t.pct(), t.found, t.total);
    }
    // Presidio counts loopback and documentation addresses (`::1`, `127.0.0.1`, `2001:db8::1`,
    // `192.0.2.1`) as personal data; toolwatch keeps them readable on purpose (they name no
    // one), which costs about a third of the IP_ADDRESS positives.
    assert!(
        covered_recall.pct() >= 55.0,
        "covered recall {:.1}%",
        covered_recall.pct()
    );
}
