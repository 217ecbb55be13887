//! `toolwatch serve`: wires the stages together and runs them until a stop signal.
//!
//! Start-up order: state and archive first, then the listeners, then ready. Shutdown order:
//! not ready, stop accepting and finish in-flight requests, drain the queue into the
//! archive and complete every file, then let assembly summarize what is open and complete the
//! `requests` files, let the budget stage save its windows and complete the `alarms` files,
//! give alarm deliveries a few seconds to finish, then stop the admin server. Everything acknowledged
//! before the signal is in a completed Parquet file when `run` returns.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::admin::AdminState;
use crate::archive::partition::Table;
use crate::archive::{self, Archive, ArchiveError, ArchiveTotals, Forward};
use crate::assemble::{self, Assembler, PricesError};
use crate::budget::deliver::Delivery;
use crate::budget::evaluate::BudgetEvaluator;
use crate::budget::{state, BudgetStage};
use crate::config::Config;
use crate::metrics::{BudgetMetrics, Metrics};
use crate::pipeline::Intake;
use crate::protect::engine::RuleError;
use crate::protect::{KeyError, Protector};
use crate::receive::{grpc, http, ReceiverContext};

/// Archived batches waiting for assembly; beyond this assembly skips batches (counted).
const ASSEMBLE_QUEUE_BATCHES: usize = 1024;

/// Archived batches waiting for the budget stage; beyond this it skips batches (counted).
const BUDGET_QUEUE_BATCHES: usize = 4096;

/// Longest time an alarm waits in an open file before `query` can see it.
const ALARM_FILE_MAX_AGE: Duration = Duration::from_secs(60);

/// How long shutdown waits for alarm deliveries still being retried.
const DELIVERY_DEADLINE: Duration = Duration::from_secs(5);

/// How long shutdown waits for in-flight requests before closing connections.
const DRAIN_DEADLINE: Duration = Duration::from_secs(10);

/// Why the daemon could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The data directory could not be created.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A listener could not be bound.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        /// Which server.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// The hash key could not be loaded.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// A redaction rule does not compile.
    #[error(transparent)]
    Rules(#[from] RuleError),
    /// The price table could not be loaded.
    #[error(transparent)]
    Prices(#[from] PricesError),
    /// The archive could not be opened.
    #[error("archive: {0}")]
    Archive(#[from] ArchiveError),
    /// The archive thread could not start or died.
    #[error("archive thread: {0}")]
    ArchiveThread(String),
    /// The budget configuration cannot work.
    #[error(transparent)]
    Budget(#[from] crate::budget::config::BudgetError),
}

/// Addresses actually bound (useful when a configured port is 0).
#[derive(Debug, Clone, Copy)]
pub struct BoundAddrs {
    /// OTLP/gRPC.
    pub otlp_grpc: SocketAddr,
    /// OTLP/HTTP.
    pub otlp_http: SocketAddr,
    /// Admin.
    pub admin: SocketAddr,
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { what, addr, source })
}

fn bound(l: &TcpListener, fallback: SocketAddr) -> SocketAddr {
    l.local_addr().unwrap_or(fallback)
}

/// Runs the daemon until `stop` completes; returns what the archive wrote.
pub async fn run(
    config: Config,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<ArchiveTotals, ServeError> {
    let data_dir = config.storage.data_dir.clone();
    std::fs::create_dir_all(&data_dir).map_err(|source| ServeError::DataDir {
        path: data_dir.clone(),
        source,
    })?;
    let metrics = Arc::new(Metrics::new());
    let hasher = config.hashing.current(&data_dir)?;
    let protector = Protector::from_config(&config.redaction, hasher)?;
    let instance_id = hex::encode(rand::random::<[u8; 4]>());
    let archive = Archive::open(
        &data_dir,
        &[Table::Spans, Table::Logs],
        &config.archive,
        instance_id.clone(),
        Arc::clone(&metrics),
    )?;
    let requests_archive = Archive::open(
        &data_dir,
        &[Table::Requests],
        &config.archive,
        instance_id.clone(),
        Arc::clone(&metrics),
    )?;
    let assembler = Assembler::new(config.assemble.clone(), config.assemble.prices()?);
    let (assemble_tx, assemble_rx) = std::sync::mpsc::sync_channel(ASSEMBLE_QUEUE_BATCHES);
    let assemble_thread = assemble::spawn(
        assembler,
        requests_archive,
        assemble_rx,
        Arc::clone(&metrics),
    )
    .map_err(|e| ServeError::ArchiveThread(e.to_string()))?;

    let stop_delivery = CancellationToken::new();
    let (budget_stage, delivery_tasks) = budget_stage(
        &config,
        &data_dir,
        instance_id.clone(),
        Arc::clone(&metrics),
        stop_delivery.clone(),
    )?;
    let evaluator = Arc::clone(&budget_stage.evaluator);
    let (budget_tx, budget_rx) = std::sync::mpsc::sync_channel(BUDGET_QUEUE_BATCHES);
    let budget_thread = crate::budget::spawn(budget_stage, budget_rx)
        .map_err(|e| ServeError::ArchiveThread(e.to_string()))?;

    let (queue_tx, queue_rx) = mpsc::channel(config.limits.queue_batches.0);
    let archive_thread = archive::spawn(
        archive,
        queue_rx,
        vec![
            Forward {
                tx: assemble_tx,
                on_full: Metrics::assemble_skipped,
            },
            Forward {
                tx: budget_tx,
                on_full: BudgetMetrics::skipped,
            },
        ],
        tokio::runtime::Handle::current(),
        Arc::clone(&metrics),
    )
    .map_err(|e| ServeError::ArchiveThread(e.to_string()))?;

    let intake = Arc::new(Intake::new(
        protector,
        queue_tx,
        config.limits.enqueue_timeout.0,
        Arc::clone(&metrics),
    ));
    let ctx = Arc::new(ReceiverContext {
        intake,
        metrics: Arc::clone(&metrics),
        max_body_bytes: config.limits.max_request_bytes.as_usize(),
        retry_after: config.limits.retry_after.0,
    });

    let grpc_listener = bind("OTLP/gRPC", config.listen.otlp_grpc).await?;
    let http_listener = bind("OTLP/HTTP", config.listen.otlp_http).await?;
    let admin_listener = bind("admin", config.listen.admin).await?;
    let addrs = BoundAddrs {
        otlp_grpc: bound(&grpc_listener, config.listen.otlp_grpc),
        otlp_http: bound(&http_listener, config.listen.otlp_http),
        admin: bound(&admin_listener, config.listen.admin),
    };

    let stop_receivers = CancellationToken::new();
    let stop_admin = CancellationToken::new();
    let grpc_server = tokio::spawn(serve_until(
        grpc_listener,
        grpc::router(Arc::clone(&ctx)),
        stop_receivers.clone(),
    ));
    let http_server = tokio::spawn(serve_until(
        http_listener,
        http::router(Arc::clone(&ctx)),
        stop_receivers.clone(),
    ));
    let admin_server = tokio::spawn(serve_until(
        admin_listener,
        crate::admin::router(AdminState {
            metrics: Arc::clone(&metrics),
            budgets: evaluator,
        }),
        stop_admin.clone(),
    ));
    // The receivers own the only queue sender from here on.
    drop(ctx);

    metrics.set_ready(true);
    tracing::info!(
        otlp_grpc = %addrs.otlp_grpc,
        otlp_http = %addrs.otlp_http,
        admin = %addrs.admin,
        data_dir = %data_dir.display(),
        instance_id = %instance_id,
        "toolwatch ready"
    );

    stop.await;
    tracing::info!("stopping: refusing new data, draining what was accepted");
    metrics.set_ready(false);
    stop_receivers.cancel();
    for server in [grpc_server, http_server] {
        let abort = server.abort_handle();
        if tokio::time::timeout(DRAIN_DEADLINE, server).await.is_err() {
            tracing::warn!("in-flight requests did not finish in time; closing their connections");
            abort.abort();
        }
    }
    let totals = tokio::task::spawn_blocking(move || archive_thread.join())
        .await
        .map_err(|e| ServeError::ArchiveThread(e.to_string()))?
        .map_err(|_| ServeError::ArchiveThread("the archive thread panicked".into()))?;
    // The archive thread held the only sender to assembly: assembly now drains and stops.
    let assembled = tokio::task::spawn_blocking(move || assemble_thread.join())
        .await
        .map_err(|e| ServeError::ArchiveThread(e.to_string()))?
        .map_err(|_| ServeError::ArchiveThread("the assembly thread panicked".into()))?;
    // The archive thread held the only sender to the budget stage too.
    let budgeted = tokio::task::spawn_blocking(move || budget_thread.join())
        .await
        .map_err(|e| ServeError::ArchiveThread(e.to_string()))?
        .map_err(|_| ServeError::ArchiveThread("the budget thread panicked".into()))?;
    // The budget thread dropped the delivery queues: each target sends what is queued.
    let deadline = tokio::time::Instant::now() + DELIVERY_DEADLINE;
    for task in delivery_tasks {
        let abort = task.abort_handle();
        if tokio::time::timeout_at(deadline, task).await.is_err() {
            stop_delivery.cancel();
            tracing::warn!(
                "alarm delivery did not finish in time; undelivered alarms are in the archive"
            );
            abort.abort();
        }
    }
    let totals = ArchiveTotals {
        request_rows: assembled.request_rows,
        alarm_rows: budgeted.alarm_rows,
        files: totals.files + assembled.files + budgeted.files,
        ..totals
    };
    stop_admin.cancel();
    let _ = admin_server.await;
    tracing::info!(
        span_rows = totals.span_rows,
        log_rows = totals.log_rows,
        request_rows = totals.request_rows,
        request_summaries = assembled.summaries,
        alarm_rows = totals.alarm_rows,
        alarms = budgeted.alarms,
        files = totals.files,
        failed_rows = totals.failed_rows,
        "toolwatch stopped"
    );
    Ok(totals)
}

/// The budget stage: its evaluator restored from saved window state, its archive, its
/// delivery tasks.
fn budget_stage(
    config: &Config,
    data_dir: &std::path::Path,
    instance_id: String,
    metrics: Arc<Metrics>,
    stop_delivery: CancellationToken,
) -> Result<(BudgetStage, Vec<tokio::task::JoinHandle<()>>), ServeError> {
    config.budget.validate()?;
    let mut evaluator = BudgetEvaluator::new(config.budget.clone(), config.assemble.prices()?);
    let state_file = state::state_file(data_dir);
    match state::load(&state_file) {
        Ok(saved) => {
            let n = evaluator.restore_windows(saved);
            if n > 0 {
                tracing::info!(windows = n, "budget windows restored");
            }
        }
        Err(e) => {
            // Refusing to start would stop ingestion; start with empty windows and keep the
            // unreadable file for inspection.
            let aside =
                state_file.with_extension(format!("unreadable-{}", crate::budget::now_ns()));
            let _ = std::fs::rename(&state_file, &aside);
            tracing::error!(error = %e, kept_as = %aside.display(), "budget window state unreadable; windows start empty");
        }
    }
    // Alarms are few and wanted soon: their files complete within a minute.
    let mut alarm_files = config.archive.clone();
    alarm_files.max_file_age.0 = alarm_files.max_file_age.0.min(ALARM_FILE_MAX_AGE);
    let archive = Archive::open(
        data_dir,
        &[Table::Alarms],
        &alarm_files,
        instance_id,
        Arc::clone(&metrics),
    )?;
    let still_firing = evaluator.active_window_alarms(crate::budget::now_ns());
    let (delivery, tasks) = Delivery::start(
        &config.budget.webhooks,
        &still_firing,
        &tokio::runtime::Handle::current(),
        Arc::clone(&metrics),
        stop_delivery,
    );
    let stage = BudgetStage {
        evaluator: Arc::new(std::sync::Mutex::new(evaluator)),
        archive,
        delivery,
        state_file,
        metrics,
    };
    Ok((stage, tasks))
}

async fn serve_until(listener: TcpListener, router: axum::Router, stop: CancellationToken) {
    let result = axum::serve(listener, router)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "server stopped with an error");
    }
}

/// Completes on SIGTERM or SIGINT.
pub async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
