//! `toolwatch serve`: wires the stages together and runs them until a stop signal.
//!
//! Start-up order: the journal (a torn tail cut and counted), every consumer's position, the
//! journal writer, the consumers (archive, assembly, budgets, one per export endpoint; each
//! replays from its checkpoint), then the listeners, then ready. Shutdown order: not ready,
//! stop accepting and finish in-flight requests (each is in the journal or refused), let the
//! archive, assembly and budgets catch up with the journal and complete their files, then the
//! export endpoints (so the last alarms go out too), all within `journal.shutdown_deadline`;
//! give alarm deliveries a few seconds, then stop the admin server. Everything acknowledged
//! is in the journal; what a consumer did not reach by the deadline is replayed at the next
//! start.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::admin::AdminState;
use crate::archive::table::Table;
use crate::archive::write::consumer::{ArchiveConsumer, ArchiveSink, RecentSpans};
use crate::archive::write::flush::FlushPoint;
use crate::archive::{Archive, ArchiveError, ArchiveTotals};
use crate::assemble::{AssembleConsumer, Assembler, PricesError};
use crate::budget::deliver::Delivery;
use crate::budget::evaluate::BudgetEvaluator;
use crate::budget::{state, AlarmJournal, BudgetConsumer, BudgetStage};
use crate::config::Config;
use crate::export::config::EndpointConfig;
use crate::export::consumer::{EndpointSlot, ExportConsumer, ExportTotals};
use crate::export::endpoint::Endpoint;
use crate::journal::consume::{Consumer, DecodedRecords, Stop};
use crate::journal::head::JournalHead;
use crate::journal::tail::Tail;
use crate::journal::writer::{GroupCommit, JournalWriter};
use crate::journal::{Journal, JournalError};
use crate::memory::{Holder, MemoryBudget};
use crate::metrics::Metrics;
use crate::pipeline::Intake;
use crate::protect::engine::RuleError;
use crate::protect::{KeyError, Protector};
use crate::receive::auth::{AdminAccess, AuthConfigError, SenderDirectory, SharedDirectory};
use crate::receive::tls::{OtlpListener, Peer, SharedTls, TlsError};
use crate::receive::{grpc, http, ReceiverContext};

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
    /// The object store the archive uploads to cannot be used.
    #[error("archive upload: {0}")]
    Upload(String),
    /// A stage's thread could not start or died.
    #[error("thread: {0}")]
    Thread(String),
    /// The journal could not be opened.
    #[error("journal: {0}")]
    Journal(#[from] JournalError),
    /// An export endpoint could not be set up.
    #[error("export: {0}")]
    Export(String),
    /// The budget configuration cannot work.
    #[error(transparent)]
    Budget(#[from] crate::budget::config::BudgetError),
    /// The `[auth]` section cannot work.
    #[error("auth: {0}")]
    Auth(#[from] AuthConfigError),
    /// TLS cannot be set up.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The `[admin]` section cannot work.
    #[error("admin: {0}")]
    Admin(String),
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

/// How SIGHUP reads the configuration again (the same file, environment and flags as at
/// start); `None` leaves SIGHUP without effect.
pub type ConfigSource =
    Option<Box<dyn Fn() -> Result<Config, crate::config::ConfigError> + Send + Sync>>;

/// Pages served beside the admin API (the console): built once the daemon's admin state
/// exists, from that state and the archive's folder; behind the same admin access.
pub type AdminPages = Option<Box<dyn FnOnce(AdminState, PathBuf) -> axum::Router + Send>>;

/// Runs the daemon until `stop` completes, with `pages` served on the admin listener;
/// returns what the archive wrote.
pub async fn run(
    config: Config,
    stop: impl Future<Output = ()> + Send + 'static,
    reload: ConfigSource,
    pages: AdminPages,
) -> Result<ArchiveTotals, ServeError> {
    // Polled once now: a stop signal's handlers are installed on its first poll, and until
    // then SIGTERM kills the process outright. A SIGTERM soon after "ready" (a supervisor, a
    // test) must find them installed.
    let mut stop = Box::pin(stop);
    let stopped_early =
        std::future::poll_fn(|cx| std::task::Poll::Ready(stop.as_mut().poll(cx).is_ready())).await;
    let data_dir = config.storage.data_dir.clone();
    let archive_dir = config.storage.archive_root();
    for dir in [&data_dir, &archive_dir] {
        std::fs::create_dir_all(dir).map_err(|source| ServeError::DataDir {
            path: dir.clone(),
            source,
        })?;
    }
    let metrics = Arc::new(Metrics::new());
    let memory = MemoryBudget::with_resident_limit(
        config.pipeline.memory_limit.as_usize(),
        config
            .pipeline
            .resident_limit
            .map_or(0, crate::units::ByteSize::as_usize),
    );
    metrics.watch_memory(Arc::clone(&memory));
    // Under a resident limit, what no holder counts comes out of the holders' pool.
    crate::memory::ResidentWatch::new(Arc::clone(&memory))
        .spawn()
        .map_err(|e| ServeError::Thread(e.to_string()))?;
    // The window fills within minutes and stays full: held from the start.
    memory.set(
        Holder::Windows,
        RecentSpans::memory_bytes(config.archive.dedup_spans.0),
    );
    let senders = Arc::new(SharedDirectory::new(SenderDirectory::from_config(
        &config.auth,
    )?));
    let admin_access = Arc::new(std::sync::RwLock::new(Arc::new(
        AdminAccess::from_config(&config.auth, &config.admin).map_err(ServeError::Admin)?,
    )));
    let hasher = config.hashing.current(&data_dir)?;
    let rules_in_force = (config.redaction.clone(), hasher.key_id().to_string());
    let protector = Protector::from_config(&config.redaction, hasher)?;
    let instance_id = crate::archive::layout::names::new_instance_id();
    // The manifest's signing key: the daemon creates it if absent (commands only read it).
    let key_file = &config.archive.manifest_signing_key_file;
    if !key_file.as_os_str().is_empty() {
        crate::archive::manifest::load_or_create_signing_key(key_file).map_err(|source| {
            ArchiveError::Io {
                path: key_file.clone(),
                source,
            }
        })?;
    }
    let uploader = start_upload(&config, &archive_dir, &instance_id, &metrics)?;
    let runtime = tokio::runtime::Handle::current();

    let journal = open_journal(&config, &data_dir, &metrics)?;
    let head = Arc::clone(&journal.head);
    // Every consumer registers its position before the writer may remove a segment.
    let tail = |name: &str| Tail::open(&journal.dir, name, Arc::clone(&head));
    let archive_tail = tail(ARCHIVE_CONSUMER)?;
    let assemble_tail = tail(ASSEMBLE_CONSUMER)?;
    let budget_tail = tail(BUDGET_CONSUMER)?;
    let endpoints = export_endpoints(&config, &metrics)?;
    let mut export_tails = Vec::new();
    for endpoint in &endpoints {
        export_tails.push(tail(&format!("export-{}", endpoint.name()))?);
    }
    let decoded = Arc::new(DecodedRecords::new(DECODED_RECORDS).with_memory(Arc::clone(&memory)));
    let (writer, writer_thread) = JournalWriter::spawn_publishing(
        journal.journal,
        GroupCommit {
            interval: config.journal.group_commit.0,
            group_bytes: config.journal.group_bytes.0,
            max_bytes: config.journal.max_bytes.0,
            queue: config.limits.queue_batches.0,
        },
        Arc::clone(&head),
        Some(Arc::clone(&decoded)),
    )
    .map_err(|e| ServeError::Thread(e.to_string()))?;

    // Records before this one were read, or may have been, by an earlier process.
    let replay_before = head.committed();
    let behind = std::iter::once(&archive_tail)
        .chain([&assemble_tail, &budget_tail])
        .chain(&export_tails)
        .any(|t| t.next_seq() < replay_before);
    if behind {
        append_start_marker(&writer).await;
    }
    let held_budget = crate::archive::write::buffer::SharedBudget::for_data_dir(
        &archive_dir,
        config.archive.buffer_bytes.as_usize(),
    );
    // Every archive writer of this directory shares it, held items included.
    held_budget.under_memory(Arc::clone(&memory));
    let shared = Shared {
        metrics: Arc::clone(&metrics),
        decoded,
        tenancy: config.tenancy.clone(),
        replay_before,
        held_budget,
    };
    let stop_consumers = Stop::default();
    // Export endpoints stop after the budget stage: its last alarms go out too.
    let stop_export = Stop {
        drained: CancellationToken::new(),
        give_up: stop_consumers.give_up.clone(),
    };

    let mut recent = RecentSpans::new(config.archive.dedup_spans.0);
    let seeded = recent.seed_from_journal(&journal.dir, archive_tail.next_seq());
    let writers = config.pipeline.archive_writers();
    let flush_points = crate::admin::FlushPoints {
        archive: (0..writers).map(archive_flush_point).collect(),
        requests: FlushPoint::new("requests"),
        alarms: FlushPoint::new("alarms"),
        head: Arc::clone(&head),
    };
    let archives = span_log_archives(&config, &archive_dir, &instance_id, &metrics, &flush_points)?;
    let replay = head.committed().saturating_sub(archive_tail.next_seq());
    if replay > 0 {
        tracing::info!(
            records = replay,
            remembered_spans = seeded,
            "replaying journal records the archive had not completed"
        );
    }
    let sink = ArchiveSink::of(archives, &journal.id, archive_tail.next_seq())
        .map_err(|e| ServeError::Thread(e.to_string()))?;
    tracing::info!(writers, "archive writers");
    let archive_consumer = ArchiveConsumer::new(
        sink,
        &archive_dir,
        &journal.id,
        replay_before,
        recent,
        config.archive.pause_per_record.0,
        Arc::clone(&metrics),
    );
    let archive_thread = spawn_consumer(
        "toolwatch-archive",
        archive_tail,
        archive_consumer,
        stop_consumers.clone(),
        true,
        &shared,
    )?;

    let requests_archive = Archive::open(
        &archive_dir,
        &[Table::Requests, Table::Findings],
        &config.archive,
        instance_id.clone(),
        Arc::clone(&metrics),
    )?
    .with_flush(Arc::clone(&flush_points.requests));
    let assembler = Assembler::new(config.assemble.clone(), config.assemble.prices()?)
        .with_findings(config.findings.clone())
        .with_memory(Arc::clone(&memory));
    let stop_delivery = CancellationToken::new();
    let (mut budget_stage, skip_before, delivery_tasks) = budget_stage(
        &config,
        (&data_dir, &archive_dir),
        instance_id.clone(),
        (Arc::clone(&metrics), Arc::clone(&memory)),
        stop_delivery.clone(),
    )?;
    budget_stage.archive = budget_stage
        .archive
        .with_flush(Arc::clone(&flush_points.alarms));
    let evaluator = Arc::clone(&budget_stage.evaluator);
    let reload_budgets = Arc::clone(&budget_stage.evaluator);
    let alarm_export = (!endpoints.is_empty()).then(|| AlarmJournal {
        writer: writer.clone(),
        runtime: runtime.clone(),
    });
    // Findings go to the same targets as alarms.
    let finding_alarms = crate::assemble::FindingAlarms {
        delivery: budget_stage.delivery.clone(),
        export: (!endpoints.is_empty()).then(|| AlarmJournal {
            writer: writer.clone(),
            runtime: runtime.clone(),
        }),
    };
    let assemble_thread = spawn_consumer(
        "toolwatch-assemble",
        assemble_tail,
        AssembleConsumer::new(assembler, requests_archive, Arc::clone(&metrics))
            .with_alarms(finding_alarms),
        stop_consumers.clone(),
        true,
        &shared,
    )?;
    let budget_thread = spawn_consumer(
        "toolwatch-budget",
        budget_tail,
        BudgetConsumer::new(budget_stage, skip_before, alarm_export),
        stop_consumers.clone(),
        true,
        &shared,
    )?;

    let mut export_threads = Vec::new();
    let mut export_slots = Vec::new();
    for ((endpoint, tail), cfg) in endpoints
        .into_iter()
        .zip(export_tails)
        .zip(&config.export.endpoints)
    {
        let consumer = ExportConsumer::new(
            endpoint,
            runtime.clone(),
            stop_export.give_up.clone(),
            Arc::clone(&metrics),
        );
        export_slots.push((cfg.clone(), consumer.replacement()));
        export_threads.push(spawn_consumer(
            "toolwatch-export",
            tail,
            consumer,
            stop_export.clone(),
            false,
            &shared,
        )?);
    }

    let learned_stats = protector.learned_stats();
    let trace_tenants = Arc::new(crate::tenancy::TraceTenants::with_spaces(
        config.tenancy.remembered_traces.0,
        crate::tenancy::SenderSpaces::new(
            config.tenancy.naming_memory.0,
            Some(crate::tenancy::SenderSpaces::file_in(&data_dir)),
        ),
    ));
    let intake = Arc::new(Intake::new(
        protector,
        Arc::clone(&trace_tenants),
        (writer, Arc::clone(&head)),
        config.limits.retry_after.0,
        Arc::clone(&metrics),
    ));
    // The reloader reaches the intake without keeping it (and its journal writer) alive.
    let reload_intake = Arc::downgrade(&intake);
    let ctx = Arc::new(ReceiverContext {
        intake,
        metrics: Arc::clone(&metrics),
        max_body_bytes: config.limits.max_request_bytes.as_usize(),
        retry_after: config.limits.retry_after.0,
        senders: Arc::clone(&senders),
        rates: Arc::new(crate::receive::admission::RateLimiter::new(
            config.limits.rate.clone(),
        )),
        structure: config.limits.structure,
        memory: Arc::clone(&memory),
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
    let tls = crate::receive::tls::server_config(&config.receive.tls)?
        .map(|c| Arc::new(SharedTls::new(c)));
    let failed = |listener: &'static str| -> crate::receive::tls::HandshakeFailed {
        let m = Arc::clone(&metrics);
        Arc::new(move |reason| m.tls_failed(listener, reason))
    };
    let otlp_listener = |tcp, name| {
        OtlpListener::new(tcp, tls.clone(), failed(name)).map_err(|source| ServeError::Bind {
            what: name,
            addr: config.listen.otlp_grpc,
            source,
        })
    };
    let grpc_server = tokio::spawn(serve_until(
        otlp_listener(grpc_listener, "otlp_grpc")?,
        grpc::router(Arc::clone(&ctx)),
        stop_receivers.clone(),
    ));
    let http_server = tokio::spawn(serve_until(
        otlp_listener(http_listener, "otlp_http")?,
        http::router(Arc::clone(&ctx)),
        stop_receivers.clone(),
    ));
    let admin_tls = if config.admin.tls {
        crate::receive::tls::admin_config(&config.receive.tls)?.map(|c| Arc::new(SharedTls::new(c)))
    } else {
        None
    };
    let admin_listener = OtlpListener::new(admin_listener, admin_tls.clone(), failed("admin"))
        .map_err(|source| ServeError::Bind {
            what: "admin",
            addr: config.listen.admin,
            source,
        })?;
    let admin_state = AdminState {
        metrics: Arc::clone(&metrics),
        budgets: evaluator,
        flush: Some(flush_points),
        access: Arc::clone(&admin_access),
    };
    let pages = pages.map(|build| build(admin_state.clone(), archive_dir.clone()));
    let admin_server = tokio::spawn(serve_until(
        admin_listener,
        crate::admin::router(admin_state, pages),
        stop_admin.clone(),
    ));
    // The receivers own the intake (and its journal writer) from here on.
    drop(ctx);
    let journal_gauges = tokio::spawn(observe_gauges(
        Arc::clone(&head),
        learned_stats,
        Arc::clone(&metrics),
    ));
    let spaces_saver = {
        let tenants = Arc::clone(&trace_tenants);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(10));
            loop {
                every.tick().await;
                tenants.save_spaces(false);
            }
        })
    };

    // Readers of this data directory (`query`, `trace`) find the daemon here to flush; readers
    // of a shared archive folder find every instance writing it there.
    let mut address_files = vec![(crate::archive::write::flush::address_file(&data_dir), false)];
    if archive_dir != data_dir {
        address_files.push((
            crate::archive::write::flush::instance_address_file(&archive_dir, &journal.id),
            true,
        ));
    }
    let _address_files: Vec<_> = address_files
        .into_iter()
        .filter_map(|(path, with_host)| {
            crate::archive::write::flush::publish_address_at(path, addrs.admin, with_host)
                .inspect_err(|e| tracing::warn!(error = %e, "admin address not recorded; query and trace will not ask this daemon for its buffered rows"))
                .ok()
        })
        .collect();
    let reloader = tokio::spawn(reload_on_hangup(
        reload,
        Reloadable {
            senders,
            tls,
            admin_tls,
            admin: Arc::clone(&admin_access),
            intake: reload_intake,
            data_dir: data_dir.clone(),
            budgets: Arc::clone(&reload_budgets),
            exports: export_slots,
            metrics: Arc::clone(&metrics),
            rules: rules_in_force,
        },
    ));
    metrics.set_ready(true);
    tracing::info!(
        otlp_grpc = %addrs.otlp_grpc,
        otlp_http = %addrs.otlp_http,
        admin = %addrs.admin,
        data_dir = %data_dir.display(),
        instance_id = %instance_id,
        journal_id = %journal.id,
        "toolwatch ready"
    );

    if !stopped_early {
        stop.await;
    }
    reloader.abort();
    tracing::info!("stopping: refusing new data, finishing what was accepted");
    metrics.set_ready(false);
    stop_receivers.cancel();
    for server in [grpc_server, http_server] {
        let abort = server.abort_handle();
        if tokio::time::timeout(DRAIN_DEADLINE, server).await.is_err() {
            tracing::warn!("in-flight requests did not finish in time; closing their connections");
            abort.abort();
        }
    }
    // Everything acknowledged is in the journal. Consumers catch up until the deadline; what
    // they do not reach is replayed at the next start.
    stop_consumers.drained.cancel();
    let deadline = config.journal.shutdown_deadline.0;
    let give_up = stop_consumers.give_up.clone();
    let deadline_timer = tokio::spawn(async move {
        tokio::time::sleep(deadline).await;
        tracing::warn!(
            deadline = %humantime::format_duration(deadline),
            "consumers did not catch up with the journal in time; the rest is replayed at the next start"
        );
        give_up.cancel();
    });
    let totals = join(archive_thread, "archive").await?;
    let assembled = join(assemble_thread, "assembly").await?;
    let budgeted = join(budget_thread, "budget").await?;
    stop_export.drained.cancel();
    let mut exported = ExportTotals::default();
    for t in export_threads {
        let e = join(t, "export").await?;
        exported.spans += e.spans;
        exported.logs += e.logs;
        exported.rejected_requests += e.rejected_requests;
    }
    deadline_timer.abort();
    // The budget thread dropped the delivery queues: each target sends what is queued.
    let delivery_deadline = tokio::time::Instant::now() + DELIVERY_DEADLINE;
    for task in delivery_tasks {
        let abort = task.abort_handle();
        if tokio::time::timeout_at(delivery_deadline, task)
            .await
            .is_err()
        {
            stop_delivery.cancel();
            tracing::warn!(
                "alarm delivery did not finish in time; undelivered alarms are in the archive"
            );
            abort.abort();
        }
    }
    // Every writer handle goes with the receivers and the budget stage; a connection still
    // open past the drain deadline can hold one, so the wait is bounded (all data acknowledged
    // is durable already).
    let written = if wait_finished(&writer_thread, DELIVERY_DEADLINE).await {
        join(writer_thread, "journal writer").await?.1
    } else {
        tracing::warn!("the journal writer is still held by an open connection; exiting anyway");
        crate::journal::writer::WriterTotals::default()
    };
    journal_gauges.abort();
    spaces_saver.abort();
    trace_tenants.save_spaces(true);
    // Every archive file is written: the last upload pass takes them all.
    if let Some(u) = uploader {
        tokio::task::spawn_blocking(move || u.stop())
            .await
            .map_err(|e| ServeError::Thread(e.to_string()))?;
    }
    metrics.journal.observe(head.state());
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
        journal_records = written.records,
        journal_commits = written.commits,
        exported_spans = exported.spans,
        exported_logs = exported.logs,
        "toolwatch stopped"
    );
    Ok(totals)
}

/// Starts uploading the archive to `storage.url`, when one is set.
fn start_upload(
    config: &Config,
    archive_dir: &std::path::Path,
    instance_id: &str,
    metrics: &Arc<Metrics>,
) -> Result<Option<crate::archive::store::upload::Background>, ServeError> {
    use crate::archive::store::upload;
    let storage = &config.storage;
    let Some(remote) = storage
        .remote()
        .map_err(|e| ServeError::Upload(e.to_string()))?
    else {
        return Ok(None);
    };
    let uploader = upload::Uploader::new(
        archive_dir,
        remote,
        storage.upload_settings(),
        Arc::clone(metrics),
    )
    .with_offload(upload::OffloadSettings {
        keep: storage.local_keep.0,
        instance: instance_id.to_string(),
        signing_key_file: config.archive.manifest_signing_key_file.clone(),
    });
    let background = upload::Background::start(uploader, storage.upload_every.0)
        .map_err(|e| ServeError::Upload(e.to_string()))?;
    tracing::info!(url = %storage.url, "archive uploads to object storage");
    Ok(Some(background))
}

/// What every consumer thread shares.
struct Shared {
    metrics: Arc<Metrics>,
    decoded: Arc<DecodedRecords>,
    tenancy: crate::tenancy::TenancyConfig,
    /// The first record this process appended (see `append_start_marker`).
    replay_before: u64,
    /// The archive's memory budget, which held items count in.
    held_budget: Arc<crate::archive::write::buffer::SharedBudget>,
}

/// Decoded records the consumers share (about 1 MiB each at 500 spans per batch).
const DECODED_RECORDS: usize = 32;

/// Consumer names (checkpoint files in `journal/checkpoints/`).
const ARCHIVE_CONSUMER: &str = "archive";
const ASSEMBLE_CONSUMER: &str = "assemble";
const BUDGET_CONSUMER: &str = "budgets";

/// The opened journal, before its writer starts.
struct OpenJournal {
    journal: Journal,
    dir: PathBuf,
    id: String,
    head: Arc<JournalHead>,
}

fn open_journal(
    config: &Config,
    data_dir: &std::path::Path,
    metrics: &Metrics,
) -> Result<OpenJournal, ServeError> {
    let dir = data_dir.join("journal");
    let started = std::time::Instant::now();
    let (journal, recovery) = Journal::open(&dir, config.journal.segment_bytes.0)?;
    let id = crate::journal::journal_id(&dir)?;
    if recovery.cut_bytes > 0 {
        metrics.journal.cut(recovery.cut_bytes);
    }
    tracing::info!(
        next_record = journal.next_seq(),
        bytes = journal.disk_bytes(),
        cut_bytes = recovery.cut_bytes,
        cut_reason = recovery.cut_reason.unwrap_or("none"),
        took_ms = started.elapsed().as_millis() as u64,
        "journal opened"
    );
    let head = Arc::new(JournalHead::new(
        journal.next_seq(),
        journal.disk_bytes(),
        config.journal.max_bytes.0,
    ));
    Ok(OpenJournal {
        journal,
        dir,
        id,
        head,
    })
}

/// The configured export endpoints.
fn export_endpoints(config: &Config, metrics: &Arc<Metrics>) -> Result<Vec<Endpoint>, ServeError> {
    config
        .export
        .endpoints
        .iter()
        .map(|c| {
            Endpoint::new(c, Arc::clone(metrics)).map_err(|e| ServeError::Export(e.to_string()))
        })
        .collect()
}

/// The flush point of archive writer `i` of the spans and logs: the first keeps the name
/// readers and dashboards know.
fn archive_flush_point(i: usize) -> Arc<FlushPoint> {
    match i {
        0 => FlushPoint::new("spans_logs"),
        // Named once per writer for the life of the process.
        i => FlushPoint::new(Box::leak(format!("spans_logs.{i}").into_boxed_str())),
    }
}

/// One archive of spans and logs per writer (`[pipeline] workers`), each taking readers'
/// flushes at its own point; only the first compacts (they share the partitions' folders).
fn span_log_archives(
    config: &Config,
    archive_dir: &std::path::Path,
    instance_id: &str,
    metrics: &Arc<Metrics>,
    points: &crate::admin::FlushPoints,
) -> Result<Vec<Archive>, ServeError> {
    let mut without_compaction = config.archive.clone();
    without_compaction.compact_every = crate::units::LimitDuration(Duration::ZERO);
    let mut archives = Vec::with_capacity(points.archive.len());
    for (i, point) in points.archive.iter().enumerate() {
        let settings = if i == 0 {
            &config.archive
        } else {
            &without_compaction
        };
        let archive = Archive::open(
            archive_dir,
            &[Table::Spans, Table::Logs],
            settings,
            instance_id.to_string(),
            Arc::clone(metrics),
        )?
        .with_flush(Arc::clone(point));
        archives.push(archive);
    }
    Ok(archives)
}

/// Starts `consumer` on its own thread. The archive, assembly and budgets are paced to share
/// decoded records (see `DecodedRecords`); export endpoints are not, since one that cannot
/// reach its collector falls behind for good.
fn spawn_consumer<C>(
    name: &str,
    tail: Tail,
    consumer: C,
    stop: Stop,
    paced: bool,
    shared: &Shared,
) -> Result<std::thread::JoinHandle<C::Totals>, ServeError>
where
    C: Consumer + Send + 'static,
    C::Totals: Send + 'static,
{
    let metrics = Arc::clone(&shared.metrics);
    let decoded = Arc::clone(&shared.decoded);
    let held = crate::tenancy::HeldItems::new(&shared.tenancy, shared.replay_before).counted_in(
        crate::tenancy::HeldBudget::of(Arc::clone(&shared.held_budget)),
    );
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            crate::journal::consume::run(tail, consumer, held, stop, &decoded, paced, &metrics)
        })
        .map_err(|e| ServeError::Thread(e.to_string()))
}

/// Appends an empty record at start, after the records an earlier process left unread.
///
/// Consumers release nothing for time or room while they replay what an earlier process
/// read (a release must never land earlier in the journal than before a crash, or the archive
/// would take the released rows for rows it completed then). Without a record past those, a
/// restart with no new traffic would keep every held item held: the marker is the first
/// record of this process, so replay ends on it whether or not data comes. A full journal
/// refuses it; then replay ends with the next record, as before.
async fn append_start_marker(writer: &JournalWriter) {
    let empty = crate::event::EventBatch::default();
    let appended = match crate::journal::codec::encode_events(&empty) {
        Ok(payload) => writer
            .append_decoded(payload, crate::journal::codec::JournalEntry::Events(empty))
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = appended {
        tracing::warn!(error = %e, "cannot journal the start marker; held items wait for the next record");
    }
}

async fn join<T: Send + 'static>(
    thread: std::thread::JoinHandle<T>,
    what: &'static str,
) -> Result<T, ServeError> {
    tokio::task::spawn_blocking(move || thread.join())
        .await
        .map_err(|e| ServeError::Thread(e.to_string()))?
        .map_err(|_| ServeError::Thread(format!("the {what} thread panicked")))
}

/// Waits up to `limit` for a thread to finish; true if it did.
async fn wait_finished<T>(thread: &std::thread::JoinHandle<T>, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while !thread.is_finished() {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

/// Refreshes the journal's and the learned values' gauges every second (off the intake's
/// path), and keeps `/readyz` at 503 while the journal is (nearly) full, not only right after
/// a refusal.
async fn observe_gauges(
    head: Arc<JournalHead>,
    learned: Arc<crate::protect::learned::LearnedStats>,
    metrics: Arc<Metrics>,
) {
    const EVERY: Duration = Duration::from_secs(1);
    let mut every = tokio::time::interval(EVERY);
    loop {
        every.tick().await;
        metrics.journal.observe(head.state());
        metrics.learned(&learned);
        if head.fill() >= JOURNAL_FULL {
            metrics.refusing_for(EVERY * 2);
        }
    }
}

/// A journal this full refuses most batches: report not ready.
const JOURNAL_FULL: f64 = 0.98;

/// The budget stage: its evaluator restored from saved window state, its archive, its
/// delivery tasks.
fn budget_stage(
    config: &Config,
    (data_dir, archive_dir): (&std::path::Path, &std::path::Path),
    instance_id: String,
    (metrics, memory): (Arc<Metrics>, Arc<MemoryBudget>),
    stop_delivery: CancellationToken,
) -> Result<(BudgetStage, u64, Vec<tokio::task::JoinHandle<()>>), ServeError> {
    config.budget.validate()?;
    let mut evaluator =
        BudgetEvaluator::new(config.budget.clone(), config.assemble.prices()?).with_memory(memory);
    let state_file = state::state_file(data_dir);
    let mut skip_before = 0;
    match state::load(&state_file) {
        Ok(saved) => {
            skip_before = saved.next_record;
            let n = evaluator.restore_windows(saved.windows);
            if n > 0 {
                tracing::info!(windows = n, "budget windows restored");
            }
        }
        Err(e) => {
            // Refusing to start would stop ingestion; start with empty windows and keep the
            // unreadable file for inspection.
            let aside = state_file.with_extension(format!("unreadable-{}", crate::clock::now_ns()));
            let _ = std::fs::rename(&state_file, &aside);
            tracing::error!(error = %e, kept_as = %aside.display(), "budget window state unreadable; windows start empty");
        }
    }
    // Alarms are few and wanted soon: their files complete within a minute.
    let mut alarm_files = config.archive.clone();
    alarm_files.max_file_age.0 = alarm_files.max_file_age.0.min(ALARM_FILE_MAX_AGE);
    let archive = Archive::open(
        archive_dir,
        &[Table::Alarms],
        &alarm_files,
        instance_id,
        Arc::clone(&metrics),
    )?
    .for_consumer("budget");
    let still_firing = evaluator.active_window_alarms(crate::clock::now_ns());
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
    Ok((stage, skip_before, tasks))
}

async fn serve_until(listener: OtlpListener, router: axum::Router, stop: CancellationToken) {
    // Handlers may ask who is calling (the admin port serves archive rows to local readers only).
    let service = router.into_make_service_with_connect_info::<Peer>();
    let result = axum::serve(listener, service)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "server stopped with an error");
    }
}

/// What SIGHUP replaces.
struct Reloadable {
    senders: Arc<SharedDirectory>,
    tls: Option<Arc<SharedTls>>,
    admin_tls: Option<Arc<SharedTls>>,
    admin: Arc<std::sync::RwLock<Arc<AdminAccess>>>,
    intake: std::sync::Weak<Intake>,
    data_dir: std::path::PathBuf,
    budgets: crate::budget::SharedEvaluator,
    /// Each export endpoint's settings in force and where its consumer takes new ones.
    exports: Vec<(EndpointConfig, EndpointSlot)>,
    metrics: Arc<Metrics>,
    /// The `[redaction]` section and hashing key id in force.
    rules: (crate::protect::rules::RedactionConfig, String),
}

/// On each SIGHUP, reads the configuration again and puts in force: its `[auth]` senders for
/// requests that start from then on (requests in flight finish under the senders they were
/// authenticated by), TLS certificates for new connections, the admin token, and the
/// `[redaction]` rules and `[hashing]` key from a journal record on (logged), the budgets
/// (limits, windows, warning ratios; not `budget.webhooks`) before the next record the budget
/// stage takes, usage so far kept, and each export endpoint's changed settings at its next
/// send. A configuration
/// that does not load or validate is refused, logged, and everything in force stays. Other
/// sections take effect at the next start.
async fn reload_on_hangup(reload: ConfigSource, now: Reloadable) {
    let Reloadable {
        senders,
        tls,
        admin_tls,
        admin,
        intake,
        data_dir,
        budgets,
        mut exports,
        metrics,
        mut rules,
    } = now;
    let Some(reload) = reload else { return };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hangup = match signal(SignalKind::hangup()) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(error = %e, "SIGHUP cannot be watched; credentials reload only at a restart");
                return;
            }
        };
        while hangup.recv().await.is_some() {
            let loaded = match reload().and_then(|c| c.validate().map(|()| c)) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(error = %e, "SIGHUP: configuration refused; everything in force stays");
                    continue;
                }
            };
            if let Some(a) = &admin_tls {
                match crate::receive::tls::admin_config(&loaded.receive.tls) {
                    Ok(Some(c)) => a.replace(c),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::error!(error = %e, "SIGHUP: admin TLS refused; the certificate in force stays")
                    }
                }
            }
            if let Some(tls) = &tls {
                match crate::receive::tls::server_config(&loaded.receive.tls) {
                    Ok(Some(c)) => {
                        tls.replace(c);
                        tracing::info!("SIGHUP: TLS certificates reloaded");
                    }
                    Ok(None) => tracing::warn!(
                        "SIGHUP: receive.tls is now off; TLS stays on until a restart"
                    ),
                    Err(e) => {
                        tracing::error!(error = %e, "SIGHUP: TLS refused; the certificates in force stay")
                    }
                }
            }
            match AdminAccess::from_config(&loaded.auth, &loaded.admin) {
                Ok(a) => {
                    *admin
                        .write()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(a)
                }
                Err(e) => {
                    tracing::error!(error = %e, "SIGHUP: [admin] refused; the admin token in force stays")
                }
            }
            if let Some(intake) = intake.upgrade() {
                reload_redaction(&intake, &loaded, &data_dir, &mut rules).await;
            }
            budgets
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .schedule(loaded.budget.clone());
            reload_exports(&mut exports, &loaded.export.endpoints, &metrics);
            match SenderDirectory::from_config(&loaded.auth) {
                Ok(d) => {
                    let n = d.senders();
                    let required = d.required();
                    senders.replace(d);
                    tracing::info!(
                        senders = n,
                        auth_required = required,
                        "SIGHUP: senders reloaded"
                    );
                }
                Err(e) => {
                    tracing::error!(error = %e, "SIGHUP: [auth] refused; the senders in force stay")
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (
            reload, senders, intake, data_dir, budgets, exports, metrics, rules,
        );
    }
}

/// Hands each export endpoint whose settings changed a client built from the new ones (its
/// consumer takes it before its next send, or abandons a send under way for it, at the same
/// journal position); an endpoint whose new settings do not build keeps its client. Settings
/// that read the same are left alone (a send under way is not abandoned for nothing), so a CA
/// file rotated in place under the same path waits for a restart. Endpoints added or removed take effect at the
/// next start (each has a journal position of its own).
fn reload_exports(
    exports: &mut [(EndpointConfig, EndpointSlot)],
    loaded: &[EndpointConfig],
    metrics: &Arc<Metrics>,
) {
    for (in_force, slot) in exports.iter_mut() {
        let Some(new) = loaded.iter().find(|c| c.name == in_force.name) else {
            tracing::warn!(endpoint = %in_force.name, "SIGHUP: export endpoint removed from the configuration; it stops at the next start");
            continue;
        };
        if new == in_force {
            continue;
        }
        match Endpoint::new(new, Arc::clone(metrics)) {
            Ok(client) => {
                slot.put(client);
                *in_force = new.clone();
            }
            Err(e) => {
                tracing::error!(error = %e, "SIGHUP: export endpoint refused; its settings in force stay")
            }
        }
    }
    for new in loaded {
        if !exports.iter().any(|(c, _)| c.name == new.name) {
            tracing::warn!(endpoint = %new.name, "SIGHUP: export endpoint added to the configuration; it starts at the next start");
        }
    }
}

/// Puts the reloaded `[redaction]` rules and `[hashing]` key in force at a journal record the
/// log names; rules that do not compile (or a key that does not load) are refused and the
/// ones in force stay.
async fn reload_redaction(
    intake: &Intake,
    loaded: &Config,
    data_dir: &std::path::Path,
    in_force: &mut (crate::protect::rules::RedactionConfig, String),
) {
    let hasher = match loaded.hashing.current(data_dir) {
        Ok(h) => h,
        Err(e) => {
            tracing::error!(error = %e, "SIGHUP: [hashing] refused; the redaction rules and key in force stay");
            return;
        }
    };
    // Unchanged: nothing to put in force, and no reason to make the intake wait.
    if loaded.redaction == in_force.0 && hasher.key_id() == in_force.1 {
        tracing::info!("SIGHUP: redaction rules and hashing key unchanged");
        return;
    }
    let key_id = hasher.key_id().to_string();
    match intake
        .protector()
        .await
        .reconfigured(&loaded.redaction, hasher)
    {
        Ok(p) => {
            let last_old = intake.replace_protector(p).await;
            *in_force = (loaded.redaction.clone(), key_id);
            tracing::info!(
                last_record_under_old_rules = last_old,
                "SIGHUP: redaction rules and hashing key reloaded; journal records after {last_old} are protected by them"
            );
        }
        Err(e) => {
            tracing::error!(error = %e, "SIGHUP: [redaction] refused; the rules in force stay")
        }
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
