//! The command line: help, check-config, exit codes.

use std::process::Output;

use crate::harness::toolwatch;

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = toolwatch();
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run toolwatch")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn help_explains_every_command_and_flag() {
    let out = run(&["--help"], &[]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for cmd in ["serve", "check-config", "loadgen", "redact", "hash-key"] {
        assert!(help.contains(cmd), "{help}");
    }
    let serve = text(&run(&["serve", "--help"], &[]).stdout);
    for flag in [
        "--config",
        "--data-dir",
        "--otlp-grpc",
        "--otlp-http",
        "--admin",
    ] {
        assert!(serve.contains(flag), "{serve}");
    }
    let redact = text(&run(&["redact", "--help"], &[]).stdout);
    for flag in ["--config", "--explain", "[FILE]"] {
        assert!(redact.contains(flag), "{redact}");
    }
    let lg = text(&run(&["loadgen", "--help"], &[]).stdout);
    for flag in [
        "--target",
        "--http",
        "--requests",
        "--rate",
        "--tenants",
        "--seed",
    ] {
        assert!(lg.contains(flag), "{lg}");
    }
}

#[test]
fn check_config_prints_the_effective_configuration() {
    let out = run(&["check-config"], &[("TOOLWATCH_ARCHIVE__ZSTD_LEVEL", "9")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let toml = text(&out.stdout);
    assert!(toml.contains("otlp_grpc = \"127.0.0.1:4317\""), "{toml}");
    assert!(toml.contains("zstd_level = 9"), "{toml}");
    assert!(toml.contains("max_request_bytes = \"8MiB\""), "{toml}");
    // The documented file is valid and equals the defaults.
    let documented = concat!(env!("CARGO_MANIFEST_DIR"), "/config/toolwatch.toml");
    let out = run(&["check-config", "--config", documented], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn check_config_errors_name_key_and_line_and_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = [
        (
            "[archive]\nzstd_level = 3\n\n[limits]\nqueue_batchs = 3\n",
            &["line 5", "queue_batchs"][..],
        ),
        (
            "[archive]\nmax_file_age = \"soon\"\n",
            &["line 2", "max_file_age", "not a duration"][..],
        ),
        (
            "[listen]\notlp_http = \"127.0.0.1:9464\"\n",
            &["listen.otlp_http and listen.admin"][..],
        ),
        ("[archive\n", &["line 1"][..]),
        (
            "[budget]\nwarning_ratio = 1.5\n",
            &["budget.warning_ratio must be above 0 and at most 1, got 1.5"][..],
        ),
        (
            "[budget.request]\nmodel_turns = 5\ntool_callz = 3\n",
            &["line 3", "tool_callz"][..],
        ),
        (
            "[[budget.webhooks]]\nname = \"pager\"\nurl = \"https://pager.example/hook\"\n",
            &["budget.webhooks[0] (pager)", "https", "use http://"][..],
        ),
        (
            "[[budget.webhooks]]\nname = \"am\"\nurl = \"http://a:9093\"\nformat = \"opsgenie\"\n",
            &["line 4", "opsgenie", "alertmanager"][..],
        ),
    ];
    for (i, (content, expected)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("c{i}.toml"));
        std::fs::write(&path, content).expect("write");
        let p = path.to_str().expect("utf-8");
        for cmd in [
            &["check-config", "--config", p][..],
            &["serve", "--config", p][..],
        ] {
            let out = run(cmd, &[]);
            assert_eq!(out.status.code(), Some(2), "{cmd:?} on {content:?}");
            let err = text(&out.stderr);
            for e in *expected {
                assert!(err.contains(e), "{err:?} should contain {e:?}");
            }
        }
    }
    let out = run(&["check-config"], &[("TOOLWATCH_LIMITS__QUEUE", "3")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("TOOLWATCH_LIMITS__QUEUE"));
    let out = run(
        &["check-config", "--config", "/nonexistent/toolwatch.toml"],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("/nonexistent/toolwatch.toml"));
}

#[test]
fn check_config_masks_webhook_credentials_and_takes_budget_overrides() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("hooks.toml");
    std::fs::write(
        &path,
        "[[budget.webhooks]]\nname = \"oncall\"\nurl = \"http://bot:pw-Zk3q9XbT2m@hooks.example:8080/in/T0/B1/Xq7secretPath?token=qs-Zk3q9\"\n\
         headers = { Authorization = \"Bearer tok-Qm9vYmFyQmF6\" }\n",
    )
    .expect("write");
    let out = run(
        &["check-config", "--config", path.to_str().expect("utf-8")],
        &[("TOOLWATCH_BUDGET__REQUEST__TOOL_CALLS", "7")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    for secret in [
        "pw-Zk3q9XbT2m",
        "tok-Qm9vYmFyQmF6",
        "Xq7secretPath",
        "qs-Zk3q9",
        "bot:",
    ] {
        assert!(!shown.contains(secret), "{secret} printed:\n{shown}");
    }
    assert!(shown.contains("Authorization = \"<masked>\""), "{shown}");
    assert!(
        shown.contains("url = \"http://hooks.example:8080/<masked>\""),
        "{shown}"
    );
    assert!(shown.contains("tool_calls = 7"), "{shown}");
}

#[test]
fn redact_prints_redacted_text_and_explains_hits() {
    use std::io::Write;
    let mut child = toolwatch()
        .args(["redact", "--explain"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("redact");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(
            b"{\"db\": \"postgres://app:S3cretPw@db/x\", \"note\": \"ok\", \"password\": \"${DB_PW}\", \"cfg\": \"token = get_token(user)\\nPASS=QWERTYZXCV\"}",
        )
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success());
    // Removals and kept key-context candidates, each with its reason.
    assert_eq!(
        text(&out.stdout),
        concat!(
            "removed\tsecret_key_assignment\t$.cfg\t29..39\tscore +1.4 (removed at 0 or more; baseline -6.1): key names a credential (+5.4); a bare value in configuration syntax (+2.3); its length (log scale) (-0.3); letters no language strings together (few vowels, or four consonants running) (+0.2); key is an environment-style CONSTANT (-0.2); its letters all uppercase (+0.2)\n",
            "kept\tsecret_key_assignment\t$.cfg\t8..23\ta call\n",
            "removed\turl_userinfo_password\t$.db\t15..23\tmatched the rule's pattern\n",
            "kept\tkey_context\t$.password\t0..8\ta template reference (${X}, {{x}}, %(x)s, #{x})\n",
        )
    );
    let dir = tempfile::tempdir().expect("tempdir");
    // Text holding nothing any rule looks at says so instead of printing nothing.
    let clean = dir.path().join("clean.txt");
    std::fs::write(&clean, "all orders shipped").expect("write");
    let out = run(
        &["redact", "--explain", clean.to_str().expect("utf-8")],
        &[],
    );
    assert_eq!(
        text(&out.stdout),
        "kept\t-\t$\t0..18\tnothing to judge: no rule matched, and no credential name has a value after it\n"
    );
    let file = dir.path().join("in.txt");
    std::fs::write(&file, "mail jane@example.com now").expect("write");
    let out = run(&["redact", file.to_str().expect("utf-8")], &[]);
    assert_eq!(text(&out.stdout), "mail [REDACTED:email_address] now");
    // A tenant's override applies with --tenant.
    let quiet = dir.path().join("quiet.toml");
    std::fs::write(
        &quiet,
        "[redaction.tenants.quiet]\ndisabled_rules = [\"email_address\"]\n",
    )
    .expect("write");
    let q = quiet.to_str().expect("utf-8");
    let f = file.to_str().expect("utf-8");
    let out = run(&["redact", "--config", q, "--tenant", "quiet", f], &[]);
    assert_eq!(text(&out.stdout), "mail jane@example.com now");
    let out = run(&["redact", "--config", q, f], &[]);
    assert_eq!(text(&out.stdout), "mail [REDACTED:email_address] now");
    // A rule that does not compile is refused, naming it.
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        "[[redaction.detectors]]\nid = \"broken\"\nregex = \"(unclosed\"\n",
    )
    .expect("write");
    let out = run(
        &[
            "redact",
            "--config",
            cfg.to_str().expect("utf-8"),
            file.to_str().expect("utf-8"),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("redaction rule broken: invalid regex"),
        "{}",
        text(&out.stderr)
    );
}

/// `toolwatch redact FILE | head -c 64`: the reader leaves early; redact ends by the pipe's
/// signal, as `cat` would, and writes nothing to its error stream (it used to panic on the
/// closed pipe and print "internal error").
#[cfg(unix)]
#[test]
fn redact_into_a_pipe_closed_early_ends_quietly() {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("big.txt");
    let line = "order 42 shipped to jane.doe@example.com, token ghp_T3stOnlyT0ken7f3a9c2e1d5b8a4c6e0f2d9\n";
    std::fs::write(&file, line.repeat(200_000)).expect("write");
    let mut child = toolwatch()
        .args(["redact", file.to_str().expect("utf-8")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut head = [0u8; 64];
    let mut stdout = child.stdout.take().expect("stdout");
    stdout.read_exact(&mut head).expect("the first bytes");
    drop(stdout);
    let out = child.wait_with_output().expect("wait");
    assert_eq!(
        text(&head),
        "order 42 shipped to [REDACTED:email_address], token [REDACTED:gi"
    );
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}", out.status);
    assert_eq!(text(&out.stderr), "");
}
