//! Trains the key-context judgment and writes its files (run by `scripts/train-judgment`):
//!
//!     cargo run --release -p toolwatch-core --example train_judgment -- words
//!     cargo run --release -p toolwatch-core --example train_judgment -- weights
//!
//! `words` writes the dictionary (`core/src/protect/judgment_words.txt`), `weights` the model
//! (`judgment_weights.json`) trained with the dictionary compiled in, so a changed dictionary
//! takes a build between the two. `report` prints, per source, what the trained model and the
//! hand-set prior remove; `report diff` adds each example they judge apart, `report all`
//! also each the model gets wrong (to check by hand).

use std::path::PathBuf;

use anyhow::Context;
use toolwatch::protect::judgment::JudgmentModel;
use toolwatch::protect::training::{self, Inputs};

fn main() -> anyhow::Result<()> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = repo.join("core/src/protect");
    let inputs = Inputs::beside(&repo).context("training inputs")?;
    match std::env::args().nth(1).as_deref() {
        Some("words") => {
            let words = training::dictionary(
                &inputs.code_roots,
                training::DICTIONARY_MIN_FILES,
                training::DICTIONARY_MAX_WORDS,
            );
            std::fs::write(
                out.join("judgment_words.txt"),
                training::dictionary_file(&words),
            )?;
            eprintln!("{} words", words.len());
        }
        Some("weights") => {
            let examples = inputs.examples()?;
            let model = training::train(&examples);
            std::fs::write(
                out.join("judgment_weights.json"),
                training::weights_file(&model, &examples),
            )?;
            eprintln!("{} examples", examples.len());
        }
        Some("report") => {
            let examples = inputs.examples()?;
            let trained = &*toolwatch::protect::judgment::MODEL;
            let prior = JudgmentModel::prior();
            for (name, m) in [("prior", &prior), ("trained", trained)] {
                for (source, a) in training::agreement(m, &examples) {
                    println!(
                        "{name}\t{source:?}\tsecrets removed {}/{}\tharmless removed {}/{}",
                        a.secrets_removed, a.secrets, a.harmless_removed, a.harmless
                    );
                }
            }
            let verbose = std::env::args().nth(2);
            if verbose.is_none() {
                return Ok(());
            }
            for e in &examples {
                let t = trained.margin(&e.features) >= 0.0;
                let p = prior.margin(&e.features) >= 0.0;
                if t != p || (verbose.as_deref() == Some("all") && t != e.secret) {
                    println!(
                        "{}\t{:?}\t{}\ttrained {t} prior {p}\t{}\t{:?}\t{:?}",
                        training::value_digest(&e.value),
                        e.source,
                        if e.secret { "secret" } else { "harmless" },
                        trained.score(&e.features),
                        e.value,
                        e.line.chars().take(160).collect::<String>()
                    );
                }
            }
        }
        Some("code") => {
            // `code ROOT… [--list]`: the judgment on code outside the training's sources.
            let args: Vec<String> = std::env::args().skip(2).collect();
            let roots: Vec<PathBuf> = args
                .iter()
                .filter(|a| *a != "--list")
                .map(PathBuf::from)
                .collect();
            let (judged, removed) = training::code_removals(&roots);
            println!("candidates judged {judged}\tremoved {}", removed.len());
            if args.iter().any(|a| a == "--list") {
                for (line, value) in removed {
                    println!("{value:?}\t{:?}", line.trim());
                }
            }
        }
        _ => anyhow::bail!(
            "usage: train_judgment words|weights|report [diff|all]|code ROOT… [--list]"
        ),
    }
    Ok(())
}
