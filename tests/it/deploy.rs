//! The files in `deploy/`: the systemd unit passes `systemd-analyze verify` (with its
//! `ExecStart` pointed at the built binary, since verify checks the program exists) without
//! a warning, and its command line and the Dockerfile's are ones the binary takes.

use std::process::Command;

use crate::harness::{binary, toolwatch};

const UNIT: &str = include_str!("../../deploy/toolwatch.service");
const DOCKERFILE: &str = include_str!("../../deploy/Dockerfile");
const INSTALLED: &str = "/usr/local/bin/toolwatch";

/// The `serve` arguments of a command line, with the configuration and data directory moved
/// somewhere this test may write.
fn checked_serve_args(line: &str) -> Vec<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[0], "serve", "{line}");
    assert_eq!(
        words[1..3],
        ["--config", "/etc/toolwatch/toolwatch.toml"],
        "{line}"
    );
    assert_eq!(words[3..5], ["--data-dir", "/var/lib/toolwatch"], "{line}");
    assert_eq!(words.len(), 5, "{line}");
    words.iter().map(|w| w.to_string()).collect()
}

#[test]
fn the_systemd_unit_verifies_and_runs_what_the_binary_takes() {
    let exec = UNIT
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let rest = exec.strip_prefix(INSTALLED).expect("the installed path");
    checked_serve_args(rest.trim());
    let dir = tempfile::tempdir().expect("tempdir");
    let unit = dir.path().join("toolwatch.service");
    std::fs::write(&unit, UNIT.replace(INSTALLED, binary())).expect("unit");
    // scripts/test installs systemd's tools where they are missing.
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("systemd-analyze (scripts/test installs the systemd package)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.trim().is_empty(), "warnings: {stderr}");
    // The configuration it names is the shipped one, which loads.
    let check = toolwatch()
        .args(["check-config", "--config"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/config/toolwatch.toml"
        ))
        .output()
        .expect("check-config");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn the_dockerfile_builds_the_readme_release_binary_and_runs_serve() {
    assert!(
        DOCKERFILE.contains("RUN cargo build --release --locked"),
        "the README's release build"
    );
    assert!(DOCKERFILE
        .contains("COPY --from=build /src/target/release/toolwatch /usr/local/bin/toolwatch"));
    assert!(DOCKERFILE.contains("COPY config/toolwatch.toml /etc/toolwatch/toolwatch.toml"));
    assert!(DOCKERFILE.contains("USER toolwatch"));
    let cmd = DOCKERFILE
        .lines()
        .find_map(|l| l.strip_prefix("CMD "))
        .expect("CMD");
    let words: Vec<String> = serde_json::from_str(cmd).expect("CMD in exec form");
    checked_serve_args(&words.join(" "));
    let entry = DOCKERFILE
        .lines()
        .find_map(|l| l.strip_prefix("ENTRYPOINT "))
        .expect("ENTRYPOINT");
    assert_eq!(entry, format!("[\"{INSTALLED}\"]"));
    // The Rust image is the toolchain the crate asks for or newer.
    let rust = DOCKERFILE
        .lines()
        .find_map(|l| l.strip_prefix("FROM rust:"))
        .and_then(|l| l.split('-').next())
        .expect("FROM rust:X.Y");
    let minor = |v: &str| v.split('.').nth(1).and_then(|m| m.parse::<u32>().ok());
    assert!(
        minor(rust) >= minor(env!("CARGO_PKG_RUST_VERSION")),
        "{rust}"
    );
}
