//! TLS and mTLS on the receivers, with certificates made here (rcgen): the official Python
//! exporters over gRPC and HTTP and the Rust `opentelemetry-otlp` exporter, client
//! certificates that name senders, expired and untrusted ones, and a server certificate
//! rotated by SIGHUP.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde_json::Value;

use crate::auth::rust_export_with;
use crate::harness::{read_table, run_python_env, wait_for, Daemon, DaemonOptions};

const TOKEN: &str = "tw-tls-token-5e0b8f1c2d";
const CLIENT_NAME: &str = "executor-eu.clients.example";

/// A certificate authority made for the test.
struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("key");
        let cert = p.self_signed(&key).expect("CA certificate");
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(p, key),
        }
    }

    /// A leaf certificate and its key, PEM: for a server (`localhost`, `127.0.0.1`) or a
    /// client (the given names); `expired` for one that ended in 2021.
    fn leaf(&self, names: &[&str], client: bool, expired: bool) -> (String, String) {
        let mut p = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .expect("params");
        p.distinguished_name.push(DnType::CommonName, names[0]);
        p.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        if expired {
            p.not_before = rcgen::date_time_ymd(2020, 1, 1);
            p.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().expect("key");
        let cert = p.signed_by(&key, &self.issuer).expect("leaf certificate");
        (cert.pem(), key.serialize_pem())
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write pem");
    p
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// One run through the Python exporters over TLS; the export results.
fn send_tls(
    protocol: &str,
    endpoint: &str,
    request: &str,
    env: &[(&str, &str)],
) -> (String, String) {
    let out = run_python_env(
        "send_auth.py",
        &[
            "--protocol",
            protocol,
            "--endpoint",
            endpoint,
            "--request",
            request,
            "--tls",
        ],
        env,
    );
    let v: Value = serde_json::from_str(&out).expect("sender output");
    (
        v["spans"].as_str().unwrap_or("").to_string(),
        v["logs"].as_str().unwrap_or("").to_string(),
    )
}

#[test]
fn tls_and_client_certificates_name_senders_and_bad_certificates_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d_path = dir.path();
    let ca = Ca::new("toolwatch test CA");
    let other = Ca::new("someone else's CA");
    let (server_pem, server_key) = ca.leaf(&["localhost", "127.0.0.1"], false, false);
    let (client_pem, client_key) = ca.leaf(&[CLIENT_NAME], true, false);
    let (expired_pem, expired_key) = ca.leaf(&[CLIENT_NAME], true, true);
    let (stranger_pem, stranger_key) = other.leaf(&[CLIENT_NAME], true, false);
    let ca_file = write(d_path, "ca.pem", &ca.pem);
    let server_file = write(d_path, "server.pem", &server_pem);
    let server_key_file = write(d_path, "server.key", &server_key);
    let client = (
        write(d_path, "client.pem", &client_pem),
        write(d_path, "client.key", &client_key),
    );
    let expired = (
        write(d_path, "expired.pem", &expired_pem),
        write(d_path, "expired.key", &expired_key),
    );
    let stranger = (
        write(d_path, "stranger.pem", &stranger_pem),
        write(d_path, "stranger.key", &stranger_key),
    );
    let config = write(
        d_path,
        "toolwatch.toml",
        &format!(
            "[auth]\nmode = \"required\"\n\n[[auth.senders]]\nname = \"executor-eu\"\nclient_names = [\"{CLIENT_NAME}\"]\ntenants = [\"acme\"]\n\n[[auth.senders]]\nname = \"token-sender\"\ntoken_sha256 = \"{}\"\ntenants = [\"globex\"]\n\n[receive.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\nclient_ca_file = \"{}\"\n\n[admin]\nopen_metrics = true\n",
            toolwatch::receive::auth::token_sha256(TOKEN),
            path(&server_file),
            path(&server_key_file),
            path(&ca_file),
        ),
    );
    let mut d = Daemon::start_with(DaemonOptions {
        config: Some(config),
        ..Default::default()
    });
    let ok = ("SUCCESS".to_string(), "SUCCESS".to_string());
    let refused = ("FAILURE".to_string(), "FAILURE".to_string());
    let headers = format!("authorization=Bearer%20{TOKEN}");
    for protocol in ["grpc", "http"] {
        let port = if protocol == "grpc" {
            d.grpc.port()
        } else {
            d.http.port()
        };
        let endpoint = format!("https://localhost:{port}");
        // `requests` lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE (set on many machines, this one
        // too) override the CA the SDK's HTTP exporter is given: clear them, as a user must.
        let base = [
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", path(&ca_file)),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "3"),
            ("REQUESTS_CA_BUNDLE", ""),
            ("CURL_CA_BUNDLE", ""),
        ];
        let with = |extra: &[(&'static str, &str)]| -> Vec<(&str, String)> {
            base.iter()
                .chain(extra)
                .map(|(k, v)| (*k, v.to_string()))
                .collect()
        };
        let run = |request: &str, env: Vec<(&str, String)>| {
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            send_tls(protocol, &endpoint, &format!("{protocol}-{request}"), &env)
        };
        let cert = |pair: &(PathBuf, PathBuf)| {
            with(&[
                ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", path(&pair.0)),
                ("OTEL_EXPORTER_OTLP_CLIENT_KEY", path(&pair.1)),
            ])
        };
        assert_eq!(
            run("token", with(&[("OTEL_EXPORTER_OTLP_HEADERS", &headers)])),
            ok,
            "{protocol}: token over TLS"
        );
        assert_eq!(
            run("mtls", cert(&client)),
            ok,
            "{protocol}: client certificate"
        );
        assert_eq!(
            run("expired", cert(&expired)),
            refused,
            "{protocol}: expired certificate"
        );
        assert_eq!(
            run("stranger", cert(&stranger)),
            refused,
            "{protocol}: untrusted CA"
        );
        assert_eq!(
            run("nothing", with(&[])),
            refused,
            "{protocol}: no credential"
        );
    }
    let (_, metrics) = d.admin_get("/metrics");
    for listener in ["otlp_grpc", "otlp_http"] {
        // How a failed handshake reads depends on which side gives up first; each counts.
        let failed: f64 = ["bad_certificate", "no_client_certificate", "protocol", "timeout"]
            .iter()
            .filter_map(|reason| {
                crate::harness::metric_text(
                    &metrics,
                    &format!("toolwatch_tls_handshake_failures_total{{listener=\"{listener}\",reason=\"{reason}\"}}"),
                )
            })
            .sum();
        assert!(
            failed >= 2.0,
            "{listener}: expired and untrusted\n{metrics}"
        );
    }

    // The Rust exporter, its client certificate in tonic's TLS settings.
    let rust_tls = |ca_pem: &str| {
        tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(ca_pem))
            .identity(tonic::transport::Identity::from_pem(
                &client_pem,
                &client_key,
            ))
            .domain_name("localhost")
    };
    let grpc = format!("https://localhost:{}", d.grpc.port());
    assert!(rust_export_with(
        &grpc,
        None,
        Some(rust_tls(&ca.pem)),
        "rust-mtls"
    ));

    // A new server certificate from another CA, put in force by SIGHUP.
    let ca2 = Ca::new("toolwatch test CA, rotated");
    let (server2_pem, server2_key) = ca2.leaf(&["localhost", "127.0.0.1"], false, false);
    std::fs::write(&server_file, server2_pem).expect("rotate cert");
    std::fs::write(&server_key_file, server2_key).expect("rotate key");
    // SAFETY: a signal to our own child process.
    unsafe {
        libc::kill(d.pid() as libc::pid_t, libc::SIGHUP);
    }
    wait_for("the certificates to be reloaded", || {
        d.log_text()
            .contains("SIGHUP: TLS certificates reloaded")
            .then_some(())
    });
    assert!(
        !rust_export_with(&grpc, None, Some(rust_tls(&ca.pem)), "rust-old-ca"),
        "the old CA no longer verifies the server"
    );
    assert!(rust_export_with(
        &grpc,
        None,
        Some(rust_tls(&ca2.pem)),
        "rust-rotated"
    ));
    d.stop();

    let spans = read_table(&d.data_dir, "spans");
    let mut filed: Vec<(String, String, String)> = spans
        .iter()
        .map(|r| {
            (
                r["request_id"].as_str().unwrap_or("-").to_string(),
                r["tenant"].as_str().unwrap_or("").to_string(),
                r["sender"].as_str().unwrap_or("").to_string(),
            )
        })
        .filter(|(r, _, _)| r != "-")
        .collect();
    filed.sort();
    let row = |r: &str, t: &str, s: &str| (r.to_string(), t.to_string(), s.to_string());
    assert_eq!(
        filed,
        [
            row("grpc-mtls", "acme", "executor-eu"),
            row("grpc-token", "globex", "token-sender"),
            row("http-mtls", "acme", "executor-eu"),
            row("http-token", "globex", "token-sender"),
            row("rust-mtls", "acme", "executor-eu"),
            row("rust-rotated", "acme", "executor-eu"),
        ]
    );
    assert_eq!(
        spans.len(),
        10,
        "two spans per Python run, one per Rust run"
    );
}

/// The admin port with auth required: health stays open, the rest needs the admin token
/// (a sender's token is not it), over TLS; `query` reaches it with TOOLWATCH_ADMIN_TOKEN and
/// TOOLWATCH_ADMIN_CA and reads the buffered rows.
#[test]
fn the_admin_port_speaks_tls_and_wants_its_own_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d_path = dir.path();
    let ca = Ca::new("toolwatch admin CA");
    let (server_pem, server_key) = ca.leaf(&["localhost", "127.0.0.1"], false, false);
    let ca_file = write(d_path, "ca.pem", &ca.pem);
    let cert = write(d_path, "server.pem", &server_pem);
    let key = write(d_path, "server.key", &server_key);
    let admin_token = "tw-admin-token-91d2c4e6";
    let config = write(
        d_path,
        "toolwatch.toml",
        &format!(
            "[auth]\nmode = \"required\"\n\n[[auth.senders]]\nname = \"eu\"\ntoken_sha256 = \"{}\"\ntenants = [\"acme\"]\n\n[receive.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n\n[admin]\ntls = true\ntoken_sha256 = \"{}\"\n",
            toolwatch::receive::auth::token_sha256(TOKEN),
            path(&cert),
            path(&key),
            toolwatch::receive::auth::token_sha256(admin_token),
        ),
    );
    let mut d = Daemon::start_with(DaemonOptions {
        config: Some(config),
        ..Default::default()
    });
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem.as_bytes()).expect("ca"))
        .build()
        .expect("client");
    let get = |path: &str, token: Option<&str>| -> u16 {
        rt.block_on(async {
            let mut req = client.get(format!("https://localhost:{}{path}", d.admin.port()));
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            req.send()
                .await
                .expect("admin answers over TLS")
                .status()
                .as_u16()
        })
    };
    assert_eq!(get("/healthz", None), 200);
    assert_eq!(get("/readyz", None), 200);
    assert_eq!(get("/metrics", None), 401);
    assert_eq!(
        get("/v1/budgets", Some(TOKEN)),
        401,
        "a sender's token is not the admin's"
    );
    assert_eq!(get("/metrics", Some(admin_token)), 200);
    assert_eq!(get("/v1/budgets", Some(admin_token)), 200);
    // Plain HTTP to the TLS admin port gets no answer.
    assert!(crate::harness::try_get(&format!("http://{}/healthz", d.admin)).is_none());

    // Data in, then read back fresh by query with the admin token and CA.
    let env = [
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", path(&ca_file).to_string()),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            format!("authorization=Bearer%20{TOKEN}"),
        ),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let endpoint = format!("https://localhost:{}", d.grpc.port());
    assert_eq!(
        send_tls("grpc", &endpoint, "admin-fresh", &env).0,
        "SUCCESS"
    );
    let query = |extra: &[(&str, &str)]| {
        let mut cmd = crate::harness::toolwatch();
        cmd.args(["query", "--format", "json", "--data-dir"])
            .arg(&d.data_dir)
            .arg("SELECT count(*) AS n FROM spans WHERE request_id = 'admin-fresh'");
        for (k, v) in extra {
            cmd.env(k, v);
        }
        cmd.output().expect("query")
    };
    let fresh = query(&[
        ("TOOLWATCH_ADMIN_TOKEN", admin_token),
        ("TOOLWATCH_ADMIN_CA", path(&ca_file)),
    ]);
    assert!(
        fresh.status.success(),
        "{}",
        String::from_utf8_lossy(&fresh.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&fresh.stdout).trim(), "[{\"n\":1}]");
    assert!(!String::from_utf8_lossy(&fresh.stderr).contains("warning"));
    let without = query(&[("TOOLWATCH_ADMIN_CA", path(&ca_file))]);
    assert!(
        String::from_utf8_lossy(&without.stderr).contains("401"),
        "without the token the query says what it missed: {}",
        String::from_utf8_lossy(&without.stderr)
    );
    let metrics = rt.block_on(async {
        client
            .get(format!("https://localhost:{}/metrics", d.admin.port()))
            .bearer_auth(admin_token)
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text")
    });
    let refused = |reason: &str| {
        crate::harness::metric_text(
            &metrics,
            &format!("toolwatch_auth_refused_total{{transport=\"admin\",reason=\"{reason}\"}}"),
        )
    };
    assert_eq!(
        refused("missing"),
        Some(2.0),
        "/metrics and the query's request without a token"
    );
    assert_eq!(refused("unknown_token"), Some(1.0), "the sender's token");
    assert!(!metrics.contains(admin_token) && !metrics.contains(TOKEN));
    d.stop();
}
