//! The key-context judgment's model is reproducible: training it again on this machine (the
//! corpora's tuning halves beside the repository, the generated examples, the crates of
//! `Cargo.lock` in Cargo's registry and the test venv's pinned packages) writes the committed
//! dictionary and weights byte for byte. `scripts/train-judgment` writes them; this test fails
//! when an input or the training changed and they were not written again.

use std::path::PathBuf;

use toolwatch::protect::training::{self, Inputs};

#[test]
fn training_reproduces_the_committed_dictionary_and_weights() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let inputs = Inputs::beside(&repo).expect("training inputs (scripts/test installs the venv)");
    let words = training::dictionary(
        &inputs.code_roots,
        training::DICTIONARY_MIN_FILES,
        training::DICTIONARY_MAX_WORDS,
    );
    assert_eq!(
        training::dictionary_file(&words),
        include_str!("../../core/src/protect/judgment_words.txt"),
        "the dictionary differs: run scripts/train-judgment"
    );
    let examples = inputs.examples().expect("examples");
    // Every source contributes: an input gone missing would train a different model quietly.
    let sources: std::collections::BTreeSet<_> = examples.iter().map(|e| e.source).collect();
    assert_eq!(sources.len(), 4, "{sources:?}");
    let model = training::train(&examples);
    assert_eq!(
        training::weights_file(&model, &examples),
        include_str!("../../core/src/protect/judgment_weights.json"),
        "the weights differ: run scripts/train-judgment"
    );
    // And what was committed is what the daemon scores with.
    let committed = &*toolwatch::protect::judgment::MODEL;
    assert_eq!(committed.weights, model.weights);
    assert_eq!(
        (committed.bias, committed.threshold),
        (model.bias, model.threshold)
    );
}
