//! The responder's console (`/ui/`), over real sockets: served by `serve` on its admin
//! listener and by `toolwatch console` over a data directory (tenant-scoped) and over object
//! storage. From an alarm raised by `loadgen --profile runaway` and a finding raised by
//! `loadgen --profile faults` to the request and its evidence span, with the exact text each
//! page shows; a request acknowledged a moment ago is there before any file holds it; a raw
//! idempotency key is found by its hash and repeated nowhere; no canary planted upstream
//! reaches any page.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

use serde_json::{json, Value};

use crate::auth::sha;
use crate::harness::{loadgen, toolwatch, wait_for, Daemon, DaemonOptions};
use crate::otlp_json::post_accepted;
use crate::protect_e2e::{assert_clean, canary_request, kv, s};

/// A raw idempotency key sent once; only its hash may be stored or shown.
const RAW_KEY: &str = "idem-console-Kq7Zr2Wn4Xm1";

/// An HTTP client that does not follow redirects (their targets are asserted).
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// GET: (status, body).
async fn get(base: &str, path: &str) -> (u16, String) {
    let resp = client()
        .get(format!("{base}{path}"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

/// The search form posted: (status, Location header, body).
async fn search(base: &str, q: &str) -> (u16, String, String) {
    let resp = client()
        .post(format!("{base}/ui/search"))
        .form(&[("q", q)])
        .send()
        .await
        .expect("POST /ui/search");
    let status = resp.status().as_u16();
    let location = resp
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (status, location, resp.text().await.expect("body"))
}

/// Every `href` of a page that starts with `prefix`, in page order.
fn links(page: &str, prefix: &str) -> Vec<String> {
    let needle = format!("href=\"{prefix}");
    let mut out = Vec::new();
    let mut rest = page;
    while let Some(at) = rest.find(&needle) {
        let from = at + "href=\"".len();
        let end = rest[from..].find('"').map_or(rest.len(), |e| from + e);
        out.push(rest[from..end].replace("&amp;", "&"));
        rest = &rest[end..];
    }
    out
}

/// The table rows (`<tr>…</tr>`) of a page that hold `needle`.
fn rows_with<'a>(page: &'a str, needle: &str) -> Vec<&'a str> {
    page.split("<tr>")
        .skip(1)
        .map(|r| r.split("</tr>").next().unwrap_or(""))
        .filter(|r| r.contains(needle))
        .collect()
}

/// A tool call carrying [`RAW_KEY`], in tenant `keys`, request `req-key-1`.
fn keyed_call() -> Value {
    json!({ "resourceSpans": [{
        "resource": { "attributes": [
            kv("service.name", s("key-executor")),
            kv("executor.tenant_id", s("keys")),
        ]},
        "scopeSpans": [{ "spans": [{
            "traceId": "5c1e2d3f4a5b6c7d8e9f0a1b2c3d4e5f", "spanId": "7a6b5c4d3e2f1a0b",
            "name": "execute_tool refund_order", "kind": 1,
            "startTimeUnixNano": "1767225600000000000", "endTimeUnixNano": "1767225600400000000",
            "attributes": [
                kv("gen_ai.operation.name", s("execute_tool")),
                kv("gen_ai.tool.name", s("refund_order")),
                kv("executor.request_id", s("req-key-1")),
                kv("executor.idempotency_key", s(RAW_KEY)),
            ],
        }]}]
    }]})
}

/// A daemon that summarizes a request 1 s after it goes quiet.
pub fn quick_daemon() -> Daemon {
    Daemon::start_with(DaemonOptions {
        env: vec![("TOOLWATCH_ASSEMBLE__QUIET_PERIOD".into(), "1s".into())],
        ..Default::default()
    })
}

/// Eight `--profile faults` runs (tenant-0, runs 0 and 4 faulty) and two `--profile runaway`
/// runs (tenant ops-0: a turn loop and a tool loop), with the seeds given.
fn send_faults_and_runaway(d: &Daemon, faults_seed: u64, runaway_seed: u64) {
    let (faults_seed, runaway_seed) = (faults_seed.to_string(), runaway_seed.to_string());
    let target = d.grpc_url();
    let faults = loadgen(&[
        "--target",
        &target,
        "--profile",
        "faults",
        "--requests",
        "8",
        "--seed",
        &faults_seed,
    ]);
    assert_eq!(faults["failed_batches"], 0);
    let runaway = loadgen(&[
        "--target",
        &target,
        "--profile",
        "runaway",
        "--requests",
        "2",
        "--seed",
        &runaway_seed,
        "--tenant-prefix",
        "ops-",
    ]);
    assert_eq!(runaway["failed_batches"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_serves_the_console_from_an_alarm_and_a_finding_to_the_evidence() {
    let mut d = quick_daemon();
    let base = format!("http://{}", d.admin);

    // Acknowledged a moment ago, in no file yet: the console reads the daemon's buffers.
    let (spans, logs) = canary_request("0af7651916cd43dd8448eb211c80319c", "canary-http");
    post_accepted(&d, "/v1/traces", &spans).await;
    post_accepted(&d, "/v1/logs", &logs).await;
    let (status, fresh) = get(
        &base,
        "/ui/requests/canary-http/0af7651916cd43dd8448eb211c80319c",
    )
    .await;
    assert_eq!(status, 200, "{fresh}");
    assert!(
        fresh.contains("<span class=\"class\">tool</span> refund_order"),
        "{fresh}"
    );
    assert!(
        fresh.contains("<li id=\"span-1a2b3c4d5e6f7081\""),
        "{fresh}"
    );
    assert_clean(&fresh, "a fresh request's page");

    post_accepted(&d, "/v1/traces", &keyed_call()).await;
    send_faults_and_runaway(&d, 31, 32);
    // 8 + 2 loadgen runs, the canary trace and the keyed call.
    d.wait_for_complete_summaries(12);

    // Requests, newest summaries first; the filters narrow them exactly.
    let (status, page) = get(&base, "/ui/?tenant=tenant-0&findings=1").await;
    assert_eq!(status, 200);
    let requests: Vec<String> = links(&page, "/ui/requests/");
    assert_eq!(
        requests,
        [
            "/ui/requests/tenant-0/req-31-00000004",
            "/ui/requests/tenant-0/req-31-00000000"
        ],
        "the two faulty runs, newest first"
    );
    let (_, page) = get(&base, "/ui/?alarms=1").await;
    let mut alarmed = links(&page, "/ui/requests/");
    alarmed.sort();
    assert_eq!(
        alarmed,
        [
            "/ui/requests/ops-0/req-32-00000000",
            "/ui/requests/ops-0/req-32-00000001"
        ],
        "the turn loop and the tool loop"
    );
    let (_, page) = get(&base, "/ui/?tool=search_orders&tenant=ops-0").await;
    assert_eq!(
        links(&page, "/ui/requests/"),
        ["/ui/requests/ops-0/req-32-00000001"]
    );
    let (status, page) = get(&base, "/ui/?since=last+tuesday").await;
    assert_eq!(status, 400);
    assert!(
        page.contains("From: &quot;last tuesday&quot; is neither an age"),
        "{page}"
    );

    // From an alarm to its request: the turn loop's model_turns limit.
    let (status, alarms) = get(&base, "/ui/alarms?rule=model_turns").await;
    assert_eq!(status, 200);
    let limit_rows = rows_with(&alarms, "<span class=\"bad\">limit</span>");
    assert_eq!(limit_rows.len(), 1, "{alarms}");
    assert!(
        limit_rows[0].contains("<td>ops-0</td><td>model_turns</td>"),
        "{}",
        limit_rows[0]
    );
    assert!(
        limit_rows[0].contains("<td>25 of 25</td>"),
        "{}",
        limit_rows[0]
    );
    let target = links(limit_rows[0], "/ui/requests/");
    assert_eq!(target, ["/ui/requests/ops-0/req-32-00000000"]);
    let (status, loop_page) = get(&base, &target[0]).await;
    assert_eq!(status, 200);
    for fact in [
        "<dt>Tenant</dt><dd>ops-0</dd>",
        "<dt>Model turns</dt><dd>30</dd>",
        "<dt>Tool calls</dt><dd>0</dd>",
        "<dt>Summary</dt><dd>version 1, complete</dd>",
    ] {
        assert!(loop_page.contains(fact), "{fact} in {loop_page}");
    }
    let alarm_rows = rows_with(&loop_page, "model_turns");
    assert_eq!(alarm_rows.len(), 2, "warning and limit: {loop_page}");
    assert!(alarm_rows[0].contains("<td>warning</td><td>warning:model_turns</td><td>20 of 25</td>"));
    assert!(alarm_rows[1]
        .contains("<td>limit</td><td>budget_exhausted:model_turns</td><td>25 of 25</td>"));
    assert_eq!(
        loop_page
            .matches("<span class=\"class\">model</span>")
            .count(),
        30
    );

    // From a finding to its evidence span.
    let (status, findings) = get(&base, "/ui/findings?rule=write_without_allow").await;
    assert_eq!(status, 200);
    let rows = rows_with(&findings, "write_without_allow");
    assert_eq!(rows.len(), 1, "run 0's fault: {findings}");
    assert!(
        rows[0].contains("<td>tenant-0</td><td>write_without_allow</td><td>high</td><td>open</td>")
    );
    let evidence = links(rows[0], "/ui/requests/tenant-0/req-31-00000000#span-");
    assert_eq!(evidence.len(), 1, "{}", rows[0]);
    let span = evidence[0]
        .rsplit("#span-")
        .next()
        .expect("span id")
        .to_string();
    let (status, faulty) = get(&base, "/ui/requests/tenant-0/req-31-00000000").await;
    assert_eq!(status, 200);
    assert!(
        faulty.contains(&format!("<li id=\"span-{span}\" class=\"marked\">")),
        "the evidence span is marked: {faulty}"
    );
    assert!(faulty.contains("<span class=\"warn\">finding: write_without_allow</span>"));
    assert!(faulty.contains(&format!("<a href=\"#span-{span}\">{span}</a>")));
    let (_, all) = get(&base, "/ui/findings?tenant=tenant-0").await;
    let open: Vec<&str> = rows_with(&all, "<td>open</td>");
    assert_eq!(open.len(), 2, "runs 0 and 4: {all}");
    assert!(open[0].contains("<td>high_impact_without_confirmation</td>"));
    assert!(open[1].contains("<td>write_without_allow</td>"));
    // The canary and the keyed call are single spans that name no stop reason.
    let (_, all) = get(&base, "/ui/findings?rule=loop_without_stop_reason").await;
    assert_eq!(rows_with(&all, "<td>open</td>").len(), 2, "{all}");

    // Search: a request id, a span id, a trace id and a raw idempotency key.
    let (status, location, _) = search(&base, "req-31-00000004").await;
    assert_eq!(
        (status, location.as_str()),
        (303, "/ui/requests/tenant-0/req-31-00000004")
    );
    let (status, location, _) = search(&base, &span).await;
    assert_eq!(
        (status, location),
        (
            303,
            format!("/ui/requests/tenant-0/req-31-00000000#span-{span}")
        )
    );
    let (status, location, _) = search(&base, "0af7651916cd43dd8448eb211c80319c").await;
    assert_eq!(
        (status, location.as_str()),
        (
            303,
            "/ui/requests/canary-http/0af7651916cd43dd8448eb211c80319c"
        )
    );
    let (status, location, body) = search(&base, RAW_KEY).await;
    assert_eq!(
        (status, location.as_str()),
        (303, "/ui/requests/keys/req-key-1#span-7a6b5c4d3e2f1a0b")
    );
    assert!(!body.contains(RAW_KEY));
    let (status, location, body) = search(&base, "idem-nobody-sent-this").await;
    assert_eq!((status, location.as_str()), (404, ""));
    assert!(body.contains("<h1>Nothing found</h1>"), "{body}");
    assert!(!body.contains("idem-nobody-sent-this"));

    // Budgets: live usage of the daemon's budget stage.
    let (status, budgets) = get(&base, "/ui/budgets?tenant=ops-0").await;
    assert_eq!(status, 200);
    assert!(budgets.contains("<h2>Tenant ops-0</h2>"), "{budgets}");
    let turns = rows_with(&budgets, "<td>model_turns</td>");
    assert!(
        turns
            .iter()
            .any(|r| r.contains("req-32-00000000")
                && r.contains("<td>30</td><td>20</td><td>25</td>")),
        "{budgets}"
    );

    // No canary on any page, nor the raw key in the daemon's log.
    let mut pages = Vec::new();
    for path in [
        "/ui/",
        "/ui/?tenant=canary-http",
        "/ui/requests/canary-http/0af7651916cd43dd8448eb211c80319c",
        "/ui/requests/keys/req-key-1",
        "/ui/findings",
        "/ui/alarms",
        "/ui/budgets",
        "/ui/search",
    ] {
        let (status, page) = get(&base, path).await;
        assert_eq!(status, 200, "{path}");
        assert_clean(&page, path);
        assert!(!page.contains(RAW_KEY), "{path}");
        pages.push(page);
    }
    assert!(
        pages[3].contains("idempotency_key_hash"),
        "the hash is shown"
    );
    let (_, css) = get(&base, "/ui/style.css").await;
    assert!(css.contains("--accent"));
    d.stop();
    assert!(
        !d.log_text().contains(RAW_KEY),
        "the raw key reached the log"
    );
    assert_clean(&d.log_text(), "the daemon's log");
}

/// A `toolwatch console` child and its base URL (from the line it prints once listening).
fn console(args: &[&str]) -> (Child, String) {
    console_with_env(args, &[], |_| {})
}

/// [`console`] with extra environment; `seen` is shown each line the console prints before
/// it listens.
pub fn console_with_env(
    args: &[&str],
    env: &[(String, String)],
    mut seen: impl FnMut(&str),
) -> (Child, String) {
    let mut child = toolwatch()
        .arg("console")
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start toolwatch console");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let base = wait_for("the console to say where it listens", || {
        let line = lines.next()?.ok()?;
        seen(&line);
        line.strip_prefix("toolwatch console: ")
            .and_then(|u| u.strip_suffix("/ui/"))
            .map(str::to_string)
    });
    (child, base)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_over_a_copied_archive_sees_only_its_tenants_and_reads_object_storage() {
    let mut d = quick_daemon();
    let report = loadgen(&[
        "--target",
        &d.grpc_url(),
        "--requests",
        "6",
        "--tenants",
        "2",
        "--seed",
        "41",
        "--profile",
        "faults",
    ]);
    assert_eq!(report["failed_batches"], 0);
    d.wait_for_complete_summaries(6);
    d.stop();
    let data = d.data_dir.to_str().expect("utf-8 path").to_string();

    // Scoped to tenant-1: tenant-0's request is "not found", word for word as a missing one.
    let (mut child, base) = console(&["--data-dir", &data, "--tenant", "tenant-1"]);
    let (status, page) = get(&base, "/ui/").await;
    assert_eq!(status, 200);
    assert_eq!(
        links(&page, "/ui/requests/"),
        [
            "/ui/requests/tenant-1/req-41-00000005",
            "/ui/requests/tenant-1/req-41-00000003",
            "/ui/requests/tenant-1/req-41-00000001",
        ]
    );
    let (other, other_page) = get(&base, "/ui/requests/tenant-0/req-41-00000000").await;
    let (missing, missing_page) = get(&base, "/ui/requests/tenant-1/req-41-00000000").await;
    assert_eq!((other, missing), (404, 404));
    assert_eq!(other_page, missing_page);
    let (_, page) = get(&base, "/ui/?tenant=tenant-0").await;
    assert!(page.contains("No request matches."), "{page}");
    let (_, findings) = get(&base, "/ui/findings").await;
    assert!(
        findings.contains("No finding matches."),
        "run 0 and 4 are tenant-0's: {findings}"
    );
    let (status, _, body) = search(&base, "req-41-00000000").await;
    assert_eq!(status, 404);
    assert!(body.contains("Nothing found"));
    let (status, location, _) = search(&base, "req-41-00000003").await;
    assert_eq!(
        (status, location.as_str()),
        (303, "/ui/requests/tenant-1/req-41-00000003")
    );
    let (_, budgets) = get(&base, "/ui/budgets").await;
    assert!(
        budgets.contains("this console reads an archive alone"),
        "{budgets}"
    );
    child.kill().ok();
    child.wait().ok();

    // The same archive uploaded to object storage, read there.
    let store = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}", store.path().display());
    let out = toolwatch()
        .args(["upload", "--data-dir", &data, "--url", &url])
        .output()
        .expect("upload");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (mut child, base) = console(&["--url", &url]);
    let (_, page) = get(&base, "/ui/").await;
    assert_eq!(links(&page, "/ui/requests/").len(), 6, "{page}");
    let (status, page) = get(&base, "/ui/requests/tenant-0/req-41-00000004").await;
    assert_eq!(status, 200);
    assert!(
        page.contains("<span class=\"warn\">finding: high_impact_without_confirmation</span>"),
        "{page}"
    );
    assert!(
        !page.contains("role=\"status\""),
        "nothing missing yet: {page}"
    );
    child.kill().ok();
    child.wait().ok();

    // A file the store's manifests record, deleted from it: every page says rows are missing.
    let mut request_files: Vec<std::path::PathBuf> = Vec::new();
    let mut dirs = vec![store.path().to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).expect("read store").flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet")
                && p.components().any(|c| c.as_os_str() == "requests")
            {
                request_files.push(p);
            }
        }
    }
    request_files.sort();
    let gone = request_files.first().expect("a requests file in the store");
    std::fs::remove_file(gone).expect("delete a requests file");
    let (mut child, base) = console(&["--url", &url]);
    let (status, page) = get(&base, "/ui/").await;
    assert_eq!(status, 200);
    assert!(
        page.contains(
            "<p class=\"warn\" role=\"status\">1 files the store&#39;s manifests record are not in it"
        ),
        "{page}"
    );
    child.kill().ok();
    child.wait().ok();
}

/// A browser signs in with a token; a console reader's token sees its tenant only, on the
/// console only; a refused token is not repeated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_required_a_browser_signs_in_and_a_reader_sees_only_its_tenant() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("toolwatch.toml");
    std::fs::write(
        &config,
        format!(
            "[auth]\nmode = \"required\"\n\n[[auth.senders]]\nname = \"executor\"\n\
             token_sha256 = \"{}\"\ntenants = [\"tenant-0\", \"tenant-1\"]\n\n\
             [admin]\ntoken_sha256 = \"{}\"\nopen_metrics = true\n\n\
             [[admin.readers]]\nname = \"t1-oncall\"\ntoken_sha256 = [\"{}\"]\ntenants = [\"tenant-1\"]\n\n\
             [assemble]\nquiet_period = \"1s\"\n",
            sha("sender-tok-5b1e"),
            sha("admin-tok-93aa"),
            sha("reader+tok/77")
        ),
    )
    .expect("config");
    let token_file = dir.path().join("sender.token");
    std::fs::write(&token_file, "sender-tok-5b1e\n").expect("token file");
    let mut d = Daemon::start_with(DaemonOptions {
        config: Some(config),
        ..Default::default()
    });
    let report = loadgen(&[
        "--target",
        &d.grpc_url(),
        "--requests",
        "4",
        "--tenants",
        "2",
        "--seed",
        "51",
        "--token-file",
        token_file.to_str().expect("utf-8"),
    ]);
    assert_eq!(report["failed_batches"], 0);
    d.wait_for_complete_summaries(4);
    let base = format!("http://{}", d.admin);

    // No sign-in: the pages send a browser to the login form; the style sheet is open.
    let (status, _) = get(&base, "/ui/login").await;
    assert_eq!(status, 200);
    let resp = client()
        .get(format!("{base}/ui/"))
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status().as_u16(), 303);
    assert_eq!(resp.headers()["location"], "/ui/login");
    assert_eq!(get(&base, "/ui/style.css").await.0, 200);

    // A wrong token: refused, and not repeated.
    let resp = client()
        .post(format!("{base}/ui/login"))
        .form(&[("token", "wrong-tok-c0ffee")])
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status().as_u16(), 401);
    assert!(resp.headers().get("set-cookie").is_none());
    let body = resp.text().await.expect("body");
    assert!(body.contains("That token is not one toolwatch knows."));
    assert!(!body.contains("wrong-tok-c0ffee"));

    // The reader's token: a cookie for /ui only, and tenant-1's rows only.
    let resp = client()
        .post(format!("{base}/ui/login"))
        .form(&[("token", "reader+tok/77")])
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status().as_u16(), 303);
    let cookie = resp.headers()["set-cookie"]
        .to_str()
        .expect("ascii")
        .to_string();
    assert_eq!(
        cookie,
        "toolwatch_token=reader%2Btok%2F77; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=43200"
    );
    let with_cookie = |path: &str| {
        let url = format!("{base}{path}");
        let pair = cookie.split(';').next().unwrap_or_default().to_string();
        async move {
            let resp = client()
                .get(url)
                .header("cookie", pair)
                .send()
                .await
                .expect("GET");
            let status = resp.status().as_u16();
            (status, resp.text().await.expect("body"))
        }
    };
    let (status, page) = with_cookie("/ui/").await;
    assert_eq!(status, 200);
    assert_eq!(
        links(&page, "/ui/requests/"),
        [
            "/ui/requests/tenant-1/req-51-00000003",
            "/ui/requests/tenant-1/req-51-00000001"
        ]
    );
    assert_eq!(
        with_cookie("/ui/requests/tenant-0/req-51-00000000").await.0,
        404
    );
    assert_eq!(
        with_cookie("/ui/requests/tenant-1/req-51-00000001").await.0,
        200
    );
    let (_, budgets) = with_cookie("/ui/budgets").await;
    assert!(budgets.contains("<h2>Tenant tenant-1</h2>"), "{budgets}");
    assert!(!budgets.contains("tenant-0"), "{budgets}");
    // Signing out clears the cookie.
    let resp = client()
        .post(format!("{base}/ui/logout"))
        .header("cookie", cookie.split(';').next().unwrap_or_default())
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status().as_u16(), 303);
    assert_eq!(
        resp.headers()["set-cookie"],
        "toolwatch_token=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0"
    );
    // The reader's token is for the console only; the cookie counts nowhere else.
    let resp = client()
        .get(format!("{base}/v1/budgets"))
        .bearer_auth("reader+tok/77")
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status().as_u16(), 401);
    // The admin token, as a bearer header, reads every tenant.
    let resp = client()
        .get(format!("{base}/ui/"))
        .bearer_auth("admin-tok-93aa")
        .send()
        .await
        .expect("GET");
    let page = resp.text().await.expect("body");
    assert_eq!(links(&page, "/ui/requests/").len(), 4, "{page}");
    d.stop();
    for secret in [
        "reader+tok/77",
        "reader%2Btok%2F77",
        "admin-tok-93aa",
        "wrong-tok-c0ffee",
    ] {
        assert!(!d.log_text().contains(secret), "{secret} in the log");
    }
}

/// In Debian's headless Chromium, driven by selenium: from an alarm and from a finding to the
/// request and its evidence span, by clicks and by keyboard, with the exact text shown; no
/// canary and no script in any page's DOM. Screenshots of each page are kept under
/// `target/console-screenshots/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_real_browser_a_responder_clicks_from_an_alarm_and_a_finding_to_the_evidence() {
    let mut d = quick_daemon();
    let (spans, logs) = canary_request("0af7651916cd43dd8448eb211c80319c", "canary-http");
    post_accepted(&d, "/v1/traces", &spans).await;
    post_accepted(&d, "/v1/logs", &logs).await;
    send_faults_and_runaway(&d, 61, 62);
    d.wait_for_complete_summaries(11);

    let base = format!("http://{}", d.admin);
    let out_dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/console-screenshots");
    // Emptied first: a screenshot left by an earlier run must not pass for this one's.
    let _ = std::fs::remove_dir_all(&out_dir);
    let pages = json!({
        "canary": "/ui/requests/canary-http/0af7651916cd43dd8448eb211c80319c",
        "canary-list": "/ui/?tenant=canary-http",
    })
    .to_string();
    let script_base = base.clone();
    let dir = out_dir.to_str().expect("utf-8").to_string();
    let out = tokio::task::spawn_blocking(move || {
        crate::harness::run_python_env(
            "console_browser.py",
            &[&script_base, &dir, "req-61-00000004"],
            &[("CONSOLE_PAGES", &pages)],
        )
    })
    .await
    .expect("browser run");
    let seen: Value = serde_json::from_str(&out).expect("the script's JSON");

    assert_eq!(seen["alarm_to"], "/ui/requests/ops-0/req-62-00000000");
    assert_eq!(seen["alarm_h1"], "Request req-62-00000000");
    assert_eq!(seen["alarm_model_turns"], "30");
    let rows: Vec<&str> = seen["alarm_rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows[0].ends_with(" model_turns warning warning:model_turns 20 of 25"),
        "{rows:?}"
    );
    assert!(
        rows[1].ends_with(" model_turns limit budget_exhausted:model_turns 25 of 25"),
        "{rows:?}"
    );

    let to = seen["finding_to"].as_str().expect("url");
    assert!(
        to.starts_with("/ui/requests/tenant-0/req-61-00000000#span-"),
        "{to}"
    );
    assert_eq!(seen["evidence_class"], "marked");
    let line = seen["evidence_line"].as_str().expect("line");
    assert!(line.starts_with("tool "), "{line}");
    assert!(line.contains("finding: write_without_allow"), "{line}");
    assert_eq!(seen["evidence_open"], true);
    let columns: Vec<&str> = seen["evidence_columns"]
        .as_array()
        .expect("columns")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for c in ["span_id", "tool_name", "tool_arguments", "policy_decision"] {
        assert!(columns.contains(&c), "{c} in {columns:?}");
    }

    assert_eq!(
        seen["tab_first"],
        json!({"tag": "a", "text": "Skip to content", "href": "/ui/#main"})
    );
    assert_eq!(seen["after_skip"], "main");
    let order: Vec<(String, String)> = seen["tab_order"]
        .as_array()
        .expect("order")
        .iter()
        .map(|f| {
            (
                f["tag"].as_str().unwrap_or_default().to_string(),
                f["text"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("a", "Requests"),
        ("a", "Findings"),
        ("a", "Alarms"),
        ("a", "Budgets"),
        ("input", "q"),
        ("button", "Find"),
        ("a", "Sign in or out"),
        ("input", "tenant"),
    ]
    .iter()
    .map(|(t, x)| (t.to_string(), x.to_string()))
    .collect();
    assert_eq!(order, want);
    assert_eq!(seen["search_to"], "/ui/requests/tenant-0/req-61-00000004");

    let doms = seen["doms"].as_object().expect("doms");
    let mut names: Vec<&str> = doms.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "alarms",
            "budgets",
            "canary",
            "canary-list",
            "evidence",
            "findings",
            "request",
            "requests",
            "search"
        ]
    );
    for (name, dom) in doms {
        let dom = dom.as_str().expect("html");
        assert_clean(dom, name);
        assert!(!dom.contains("<script"), "{name} holds a script");
        assert!(out_dir.join(format!("{name}.png")).exists(), "{name}.png");
    }
    assert!(doms["canary"]
        .as_str()
        .unwrap_or_default()
        .contains("refund_order"));
    d.stop();
}
