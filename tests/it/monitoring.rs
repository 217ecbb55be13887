//! The monitoring stack the budget tests talk to: Debian's real `prometheus-alertmanager` and
//! `prometheus` binaries on free loopback ports, and a webhook receiver that records what
//! toolwatch posts.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::harness::{collect_stderr, try_get, wait_for};

/// A child process that is killed and reaped when dropped, with its stderr kept.
struct Process {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `program` with `args` (which may name files in `dir`) and returns it with the
/// address it logs after "Listening on" (both programs bind port 0 and print the port).
fn start_listening(
    program: &str,
    args: &[String],
    dir: tempfile::TempDir,
) -> (Process, SocketAddr) {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run {program} ({e}): scripts/test installs it with apt-get (Debian package prometheus / prometheus-alertmanager)")
        });
    let log = collect_stderr(&mut child);
    let addr = wait_for(&format!("{program} to listen"), || {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{program} exited with {status}:\n{}",
                log.lock().expect("log").join("\n")
            );
        }
        let lines = log.lock().expect("log");
        lines.iter().find_map(|l| {
            let at = l.find("Listening on")?;
            let rest = &l[at..];
            let addr = rest.split("address=").nth(1)?;
            addr.split_whitespace().next()?.parse::<SocketAddr>().ok()
        })
    });
    let p = Process {
        child,
        log,
        _dir: dir,
    };
    wait_for(&format!("{program} to be ready"), || {
        try_get(&format!("http://{addr}/-/ready")).filter(|(code, _)| *code == 200)
    });
    (p, addr)
}

/// A real Alertmanager, clustering off, one receiver that sends nowhere.
pub struct Alertmanager {
    process: Process,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Alertmanager {
    /// Starts `prometheus-alertmanager` on a free port.
    pub fn start() -> Alertmanager {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("alertmanager.yml");
        // The receiver's name is quoted: a bare null is YAML's null.
        std::fs::write(
            &config,
            "route:\n  receiver: \"null\"\nreceivers:\n  - name: \"null\"\n",
        )
        .expect("write alertmanager config");
        let args = vec![
            format!("--config.file={}", config.display()),
            format!("--storage.path={}", dir.path().join("data").display()),
            "--web.listen-address=127.0.0.1:0".to_string(),
            "--cluster.listen-address=".to_string(),
        ];
        let (process, addr) = start_listening("prometheus-alertmanager", &args, dir);
        Alertmanager { process, addr }
    }

    /// `http://host:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The alerts it holds (`GET /api/v2/alerts`; resolved alerts are not listed).
    pub fn alerts(&self) -> Vec<Value> {
        let (code, body) = try_get(&format!("{}/api/v2/alerts", self.url()))
            .unwrap_or_else(|| panic!("alertmanager: {}", self.log_text()));
        assert_eq!(code, 200, "{body}");
        serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .expect("alert list")
    }

    /// Its stderr.
    pub fn log_text(&self) -> String {
        self.process.log.lock().expect("log").join("\n")
    }
}

/// A real Prometheus scraping one target every second.
pub struct Prometheus {
    process: Process,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Prometheus {
    /// Starts `prometheus` scraping `target` (`host:port`, path `/metrics`).
    pub fn start(target: SocketAddr) -> Prometheus {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                 scrape_configs:\n  - job_name: toolwatch\n    metrics_path: /metrics\n    \
                 static_configs: [{{targets: [\"{target}\"]}}]\n"
            ),
        )
        .expect("write prometheus config");
        let args = vec![
            format!("--config.file={}", config.display()),
            format!("--storage.tsdb.path={}", dir.path().join("tsdb").display()),
            "--web.listen-address=127.0.0.1:0".to_string(),
        ];
        let (process, addr) = start_listening("prometheus", &args, dir);
        Prometheus { process, addr }
    }

    /// Runs an instant query: `Ok(result)` on success, `Err(error)` when Prometheus refuses it.
    pub fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let mut url =
            reqwest::Url::parse(&format!("http://{}/api/v1/query", self.addr)).expect("query url");
        url.query_pairs_mut().append_pair("query", expr);
        let (code, body) = try_get(url.as_str()).unwrap_or_else(|| {
            panic!(
                "prometheus: {}",
                self.process.log.lock().expect("log").join("\n")
            )
        });
        let v: Value = serde_json::from_str(&body).map_err(|e| format!("HTTP {code}: {e}"))?;
        if v["status"] != "success" {
            return Err(format!("HTTP {code}: {} {}", v["errorType"], v["error"]));
        }
        Ok(match &v["data"]["result"] {
            Value::Array(a) => a.clone(),
            // A scalar or string result: one value.
            other => vec![other.clone()],
        })
    }
}

/// A webhook receiver on a free port that records every POST and answers 503 to the first
/// `refuse_first` of them (to make toolwatch retry).
pub struct WebhookReceiver {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The JSON bodies that arrived, in order (refused posts not included).
    pub received: Arc<Mutex<Vec<Value>>>,
    /// POSTs answered 503.
    pub refused: Arc<AtomicUsize>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl WebhookReceiver {
    /// Starts the receiver.
    pub fn start(refuse_first: usize) -> WebhookReceiver {
        let received = Arc::new(Mutex::new(Vec::new()));
        let refused = Arc::new(AtomicUsize::new(0));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (rec, refd) = (Arc::clone(&received), Arc::clone(&refused));
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind receiver");
                addr_tx
                    .send(listener.local_addr().expect("addr"))
                    .expect("send addr");
                let app = axum::Router::new().route(
                    "/{*path}",
                    axum::routing::post(move |body: axum::body::Bytes| {
                        let (rec, refd) = (Arc::clone(&rec), Arc::clone(&refd));
                        async move {
                            if refd.load(Ordering::SeqCst) < refuse_first {
                                refd.fetch_add(1, Ordering::SeqCst);
                                return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                            }
                            let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                            rec.lock().expect("received").push(body);
                            axum::http::StatusCode::OK
                        }
                    }),
                );
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stop_rx.await;
                    })
                    .await;
            });
        });
        let addr = addr_rx.recv().expect("receiver address");
        WebhookReceiver {
            addr,
            received,
            refused,
            _stop: stop_tx,
        }
    }

    /// `http://host:port/hook`.
    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// Every alarm received so far, in arrival order.
    pub fn alarms(&self) -> Vec<Value> {
        self.received
            .lock()
            .expect("received")
            .iter()
            .flat_map(|body| body["alarms"].as_array().cloned().unwrap_or_default())
            .collect()
    }
}

/// Keeps `PathBuf` in the API for callers writing config files next to the daemon.
pub fn write_file(dir: &std::path::Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write file");
    path
}
