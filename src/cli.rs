//! The `toolwatch` command line: parses, then calls one function per command. In the library
//! (not the binary) so that its code is compiled once, with the rest.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::config::{Config, LogFormat};
use crate::loadgen::{
    self, BlastLength, BlastOptions, LoadgenError, LoadgenOptions, Protocol, TenantOn,
};
use clap::{Args, Parser, Subcommand};

/// Audit daemon for LLM tool-call executors: OTLP in, protected Parquet archive out.
#[derive(Parser)]
#[command(name = "toolwatch", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon: OTLP receivers, archive, admin endpoints.
    Serve(ServeArgs),
    /// Validate a configuration and print the effective configuration as TOML.
    CheckConfig(ConfigArg),
    /// Send realistic executor traffic to a running toolwatch.
    Loadgen(LoadgenArgs),
    /// Send OTLP files to a running toolwatch, through the same protect and journal path as
    /// live exporters: the OpenTelemetry Collector `file` exporter's output (JSON lines, plain
    /// or gzip; length-prefixed protobuf or JSON, zstd or not). Run the same command again to
    /// resume after the last message the daemon took. Exits 1 if anything was refused (each
    /// refusal listed with its file, message number and reason), 2 if it had to stop or a file could not be read to its end.
    Replay(ReplayArgs),
    /// Apply the effective redaction rules to text or JSON and print the result.
    Redact(RedactArgs),
    /// Print the hash toolwatch stores for a raw idempotency key (under the current key and
    /// every previous key), to search the archive for it.
    HashKey(HashKeyArgs),
    /// Run SQL over the archive (tables spans, logs, requests; partition columns tenant,
    /// date, hour). Reads only completed files, so it is safe while the daemon writes.
    Query(QueryArgs),
    /// Show one request (by request id or trace id) as a tree of agent, model turns, tool
    /// calls and downstream calls, with its summary.
    Trace(TraceArgs),
    /// Serve the responder's console (read-only pages in a browser, under /ui/) over an
    /// archive no daemon serves: a data directory, e.g. one copied off a host after an
    /// incident, or object storage (--url). `serve` serves the same console on its admin
    /// listener.
    Console(ConsoleArgs),
    /// Merge each partition's small archive files into one sorted file, atomically for
    /// readers; safe while the daemon runs (it waits for a partition the daemon is writing).
    Compact(CompactArgs),
    /// Check the archive against its manifests: every file recorded is there with the bytes
    /// recorded, no file is there unrecorded, and every manifest's hash chain is whole. Names
    /// each problem; exits 1 if there is any.
    Verify(VerifyArgs),
    /// Delete the archive partitions older than `[archive.retention]` keeps (the daemon does
    /// this with each compaction pass), each removal recorded in a manifest first.
    Retention(RetentionArgs),
    /// Apply a redaction rule learned after the fact (or one leaked value, read from stdin)
    /// to every archive file already written: each file it changes is replaced atomically
    /// for readers and recorded in a manifest. Prints how many values in how many files it
    /// removed.
    Scrub(ScrubArgs),
    /// Upload the archive to object storage (`storage.url`, or `--url`) now: every manifest
    /// line not there yet, each after the files it adds, then the objects removed longer
    /// than `storage.delete_delay` ago. A daemon with `storage.url` does this every
    /// `storage.upload_every` for every manifest in its archive folder (those of `compact`,
    /// `scrub` and `retention` runs too); this is for an archive no daemon serves.
    Upload(UploadArgs),
    /// Print the table definitions (column types, Hive partitions) that let Apache Spark SQL
    /// or Trino read the archive where it lies.
    Ddl(DdlArgs),
}

#[derive(Args)]
struct UploadArgs {
    #[command(flatten)]
    data_dir: DataDirArg,
    /// The configuration file with `[storage]` (`url`, `delete_delay`, `multipart_bytes`)
    /// [default: the embedded defaults].
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    #[command(flatten)]
    store: StoreArg,
    /// Delete every removed object now, without waiting for `storage.delete_delay` (a
    /// reader that listed one just before fails and lists again).
    #[arg(long)]
    delete_now: bool,
    /// Check every manifest's whole chain in the store and put again the lines after its
    /// last unbroken line, with their files: after the store lost lines (a manifest stopped
    /// with "the object store lacks lines"; check the store is the right one first).
    #[arg(long)]
    resync: bool,
}

#[derive(Args)]
struct DdlArgs {
    /// The engine.
    #[arg(long, value_enum)]
    engine: crate::query::ddl::Engine,
    /// Where the tables' folders are, as the engine names it (a path or `s3://bucket/prefix`)
    /// [default: the data directory, absolute].
    #[arg(long, value_name = "URL")]
    location: Option<String>,
    #[command(flatten)]
    data_dir: DataDirArg,
    /// Only this table (spans, logs, requests, alarms, findings) [default: all].
    #[arg(long, value_name = "T")]
    table: Option<String>,
}

#[derive(Args)]
struct ScrubArgs {
    #[command(flatten)]
    data_dir: DataDirArg,
    /// The configuration file whose `[redaction]` rules the rule is looked up in (built-in
    /// rules are always found) [default: the embedded defaults].
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// The id of the rule to apply.
    #[arg(long, value_name = "ID", required_unless_present = "value_from_stdin")]
    rule: Option<String>,
    /// Remove one value, read from stdin (one line; never give it on the command line,
    /// where process listings and shell history keep it).
    #[arg(long, conflicts_with = "rule")]
    value_from_stdin: bool,
    /// Only this tenant's partitions.
    #[arg(long, value_name = "T")]
    tenant: Option<String>,
    /// Only partitions of this date (YYYY-MM-DD) or later.
    #[arg(long, value_name = "DATE")]
    since: Option<String>,
    /// Only this table (spans, logs, requests, alarms, findings) [default: all].
    #[arg(long, value_name = "T")]
    table: Option<String>,
    /// Count what would be removed without changing anything.
    #[arg(long)]
    dry_run: bool,
    /// Partitions scrubbed at once [default: the number of CPUs].
    #[arg(long, value_name = "N")]
    threads: Option<std::num::NonZeroUsize>,
}

#[derive(Args)]
struct RetentionArgs {
    #[command(flatten)]
    data_dir: DataDirArg,
    /// The configuration file with `[archive.retention]` [default: the embedded defaults,
    /// which keep everything].
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// List what would be deleted without deleting it.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Args)]
struct VerifyArgs {
    #[command(flatten)]
    data_dir: DataDirArg,
    /// Compare only files of partitions of this date (YYYY-MM-DD) or later (chains are
    /// always checked whole).
    #[arg(long, value_name = "DATE")]
    since: Option<String>,
    /// Also print each manifest's last line hash, to keep outside the data directory: a cut
    /// at the end of a manifest (with the files it named) shows only against a kept head.
    #[arg(long)]
    print_heads: bool,
    /// Heads kept from an earlier `--print-heads` (a file of its `head …` lines): each
    /// manifest must still be there, at least that long, with that line unchanged.
    #[arg(long, value_name = "FILE")]
    heads: Option<std::path::PathBuf>,
    /// Ed25519 public key (64 hex digits) the manifest entries must be signed with: an entry
    /// without a signature, or with one this key does not verify, is a problem.
    #[arg(long, value_name = "HEX")]
    public_key: Option<String>,
    /// Print the public key of the signing key (--key-file, else
    /// archive.manifest_signing_key_file) and exit.
    #[arg(long)]
    print_public_key: bool,
    /// The signing key file for --print-public-key.
    #[arg(long, value_name = "FILE")]
    key_file: Option<std::path::PathBuf>,
    /// Keep where each manifest was verified up to, and the files in scope it booked, in
    /// FILE (outside the data directory), and continue from there next time: an hourly run
    /// reads only the manifest lines appended since. Needs --since (no earlier than the
    /// checkpoint's); not advanced past a problem of the manifests.
    #[arg(long, value_name = "FILE", requires = "since")]
    checkpoint: Option<std::path::PathBuf>,
    /// Record every `extra` file (one no manifest knows: written before manifests existed,
    /// or by a writer that crashed before its line) as added, reason `adopted`, in a new
    /// manifest; from then on `verify` expects those files as they are now.
    #[arg(long)]
    adopt_unrecorded: bool,
    #[command(flatten)]
    store: StoreArg,
    /// The configuration file (its `archive.manifest_signing_key_file` signs what
    /// --adopt-unrecorded records) [default: the embedded defaults].
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
}

#[derive(Args)]
struct CompactArgs {
    #[command(flatten)]
    data_dir: DataDirArg,
    /// The configuration file (its `[archive]` settings: file sizes, the manifest's signing
    /// key) [default: the embedded defaults].
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Only this table (spans, logs, requests, alarms, findings) [default: all].
    #[arg(long, value_name = "T")]
    table: Option<String>,
    /// Merge files older than this, e.g. "10m" or "0s" [default: archive.compact_after].
    #[arg(long, value_name = "DUR")]
    older_than: Option<String>,
    /// Merge once this many small files have aged, even in an hour still being written
    /// (at least 2) [default: archive.compact_min_files; 2 in an hour that has ended].
    #[arg(long, value_name = "N")]
    min_files: Option<usize>,
    /// Print what would be merged without changing anything.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Args)]
struct StoreArg {
    /// Read the archive in object storage instead (`s3://bucket/prefix`, credentials and
    /// endpoint from the `AWS_*` environment variables, or `file:///folder`): the files its
    /// uploaded manifests record. Rows not uploaded yet are not there.
    #[arg(long, value_name = "URL")]
    url: Option<String>,
}

impl StoreArg {
    /// The store named, if one is.
    fn remote(&self) -> Result<Option<crate::archive::store::remote::RemoteArchive>, ExitCode> {
        self.url
            .as_deref()
            .map(crate::archive::store::remote::RemoteArchive::open)
            .transpose()
            .map_err(usage_error)
    }
}

/// Runs `work` on a session over the archive: in object storage when `remote` is given,
/// else under `dir` (fresh as `freshen` asks, warning when not).
async fn on_archive<T, F, Fut>(
    dir: &std::path::Path,
    remote: Option<&crate::archive::store::remote::RemoteArchive>,
    freshen: crate::query::fresh::Freshen,
    scope: &crate::query::TenantScope,
    work: F,
) -> Result<T, crate::query::QueryError>
where
    F: FnMut(datafusion::execution::context::SessionContext) -> Fut,
    Fut: std::future::Future<Output = Result<T, crate::query::QueryError>>,
{
    match remote {
        Some(r) => {
            let (t, missing) = crate::query::with_remote_session(r, scope, work).await?;
            if !missing.is_empty() {
                eprintln!(
                    "warning: {} files the store's manifests record are not in it (verify --url names them); their rows are missing from this answer: {}",
                    missing.len(),
                    missing.join(", ")
                );
            }
            Ok(t)
        }
        None => warn_unfresh(crate::query::with_session(dir, freshen, scope, work).await),
    }
}

#[derive(Args)]
struct FreshArg {
    /// Read the archive as it is on disk: do not ask the daemon serving the data directory
    /// for the rows it buffers (by default it is asked for copies of them, read beside the
    /// files, so what it acknowledged up to now is read).
    #[arg(long, conflicts_with = "flush")]
    no_flush: bool,
    /// Ask the daemon to write the rows it buffers out to files first, instead of reading
    /// copies of them (for readers of the files other than toolwatch that run after it).
    #[arg(long)]
    flush: bool,
}

impl FreshArg {
    fn freshen(&self) -> crate::query::fresh::Freshen {
        use crate::query::fresh::Freshen;
        match (self.no_flush, self.flush) {
            (true, _) => Freshen::Disk,
            (false, true) => Freshen::Flush,
            (false, false) => Freshen::Copies,
        }
    }
}

#[derive(Args)]
struct DataDirArg {
    /// Data directory holding the archive (or the shared archive folder, `storage.archive_dir`)
    /// [default: TOOLWATCH_STORAGE__ARCHIVE_DIR, else TOOLWATCH_STORAGE__DATA_DIR, else
    /// ./toolwatch-data].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
}

#[derive(Args)]
struct QueryArgs {
    #[command(flatten)]
    data_dir: DataDirArg,
    #[command(flatten)]
    store: StoreArg,
    #[command(flatten)]
    fresh: FreshArg,
    /// Output format.
    #[arg(long, value_enum, default_value_t = crate::query::output::Format::Table)]
    format: crate::query::output::Format,
    /// Read only this tenant's rows (repeat for several): other tenants' files and buffered
    /// rows are not listed, and no file outside the listing can be opened.
    #[arg(long = "tenant", value_name = "TENANT")]
    tenants: Vec<String>,
    /// The SQL, e.g. "SELECT tool_name, count(*) FROM spans WHERE date = '2026-11-30' GROUP BY 1".
    #[arg(value_name = "SQL")]
    sql: String,
}

#[derive(Args)]
struct TraceArgs {
    #[command(flatten)]
    data_dir: DataDirArg,
    #[command(flatten)]
    store: StoreArg,
    #[command(flatten)]
    fresh: FreshArg,
    /// Print the request as one JSON document instead of a tree.
    #[arg(long)]
    json: bool,
    /// The tenant whose request this is (request ids are per tenant; a trace id names its
    /// own tenant). Given, nothing of any other tenant is read.
    #[arg(long, value_name = "ID")]
    tenant: Option<String>,
    /// A request id (executor.request_id) or a 32-hex-digit trace id.
    #[arg(value_name = "ID")]
    id: String,
}

#[derive(Args)]
struct ConsoleArgs {
    #[command(flatten)]
    config: ConfigArg,
    #[command(flatten)]
    data_dir: DataDirArg,
    #[command(flatten)]
    store: StoreArg,
    /// Address to serve the console on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9465")]
    listen: std::net::SocketAddr,
    /// Show only this tenant (repeat for more): nothing of any other tenant is read, and its
    /// requests answer "not found".
    #[arg(long, value_name = "ID")]
    tenant: Vec<String>,
}

#[derive(Args)]
struct HashKeyArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Data directory whose state/hash.key is the key (when the config names no other)
    /// [default: ./toolwatch-data].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// The raw value, e.g. an idempotency key.
    #[arg(value_name = "RAW")]
    raw: String,
}

#[derive(Args)]
struct RedactArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// List each hit (rule id, JSON path, byte range) on stderr-free stdout instead of the
    /// redacted text, to test a rule before deploying it.
    #[arg(long)]
    explain: bool,
    /// Apply this tenant's rules (its `[redaction.tenants.<id>]` override).
    #[arg(long, value_name = "ID")]
    tenant: Option<String>,
    /// Input file; `-` or nothing reads standard input.
    #[arg(value_name = "FILE")]
    input: Option<PathBuf>,
}

#[derive(Args)]
struct ConfigArg {
    /// Configuration file (TOML). Without it the embedded defaults apply;
    /// TOOLWATCH_SECTION__KEY environment variables override either.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(Args)]
struct ServeArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Data directory for the archive and state [default: ./toolwatch-data].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// OTLP/gRPC listen address [default: 127.0.0.1:4317].
    #[arg(long, value_name = "ADDR")]
    otlp_grpc: Option<SocketAddr>,
    /// OTLP/HTTP listen address [default: 127.0.0.1:4318].
    #[arg(long, value_name = "ADDR")]
    otlp_http: Option<SocketAddr>,
    /// Admin HTTP listen address (/healthz, /readyz, /metrics) [default: 127.0.0.1:9464].
    #[arg(long, value_name = "ADDR")]
    admin: Option<SocketAddr>,
}

#[derive(Args)]
struct ReplayArgs {
    /// Files, or directories to replay every file under (in path order; hidden entries are
    /// skipped).
    #[arg(required = true, value_name = "FILE|DIR")]
    paths: Vec<PathBuf>,
    /// The daemon's OTLP/HTTP receiver.
    #[arg(long, default_value = "http://127.0.0.1:4318", value_name = "URL")]
    target: String,
    /// The tenant for spans and log records that name none (sent as `x-toolwatch-tenant`).
    #[arg(long, value_name = "T")]
    tenant: Option<String>,
    /// A file whose first line is the bearer token, when the daemon requires one.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Where progress is kept, one small JSON file per input file.
    #[arg(long, default_value = ".toolwatch-replay", value_name = "DIR")]
    state_dir: PathBuf,
    /// Start every file from its beginning, forgetting kept progress.
    #[arg(long)]
    restart: bool,
    /// What protobuf messages hold, when their content cannot tell (they are read as traces
    /// when every span has OTLP-sized ids, else as logs).
    #[arg(long, value_enum, value_name = "SIGNAL")]
    signal: Option<ReplaySignal>,
    /// Requests are split to stay under this size (the daemon refuses requests over its
    /// `limits.max_request_bytes`, 8MiB by default).
    #[arg(long, default_value = "4MiB", value_name = "BYTES")]
    max_request_bytes: crate::units::ByteSize,
    /// How long to keep retrying a daemon that refuses for load or cannot be reached before
    /// stopping (progress kept), in seconds.
    #[arg(long, default_value = "300", value_name = "SECS", value_parser = seconds)]
    retry_for: std::time::Duration,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// What protobuf messages in replayed files hold.
#[derive(Clone, Copy, clap::ValueEnum)]
enum ReplaySignal {
    Traces,
    Logs,
}

#[derive(Args)]
struct LoadgenArgs {
    /// Where toolwatch listens: the OTLP/gRPC address, or the OTLP/HTTP base URL with --http.
    #[arg(long, value_name = "URL")]
    target: Option<String>,
    /// Send OTLP/HTTP protobuf instead of OTLP/gRPC.
    #[arg(long)]
    http: bool,
    /// Requests (agent runs) to send.
    #[arg(long, default_value_t = 100, value_name = "N")]
    requests: u64,
    /// Requests per second; 0 sends as fast as toolwatch accepts.
    #[arg(long, default_value_t = 0, value_name = "N")]
    rate: u64,
    /// Tenants the requests are spread over (tenant-0 .. tenant-(N-1)) [default: 1; 20 with
    /// --blast].
    #[arg(long, value_name = "N")]
    tenants: Option<u32>,
    /// Seed: the same seed sends the same traffic.
    #[arg(long, default_value_t = 1, value_name = "N")]
    seed: u64,
    /// Export calls in flight at once.
    #[arg(long, default_value_t = 4, value_name = "N")]
    concurrency: usize,
    /// Agent runs per export call (about 10 spans each; SDK batch processors send up to 512
    /// spans per export, so 50 is close to what a busy executor sends).
    #[arg(long, default_value_t = 1, value_name = "N")]
    batch: u64,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// What the runs look like: `normal`, or `runaway` (runs that break the default
    /// per-request budgets: turn loops, tool loops, slow runs, token burns).
    #[arg(long, value_enum, default_value_t = crate::loadgen::Profile::Normal)]
    profile: crate::loadgen::Profile,
    /// After each acknowledged traces export, append one line per span of it,
    /// `<trace_id_hex> <span_id_hex>`, to FILE (flushed at once): exactly the spans toolwatch
    /// said it stored. Refusals and transport errors (connection refused or reset, as when
    /// the daemon restarts) are retried for up to 30 s per export before it counts as failed.
    #[arg(long, value_name = "FILE")]
    acked_file: Option<PathBuf>,
    /// Before each traces export is first sent, append one line per span of it,
    /// `<trace_id_hex> <span_id_hex>`, to FILE: every span that toolwatch may have stored.
    #[arg(long, value_name = "FILE")]
    sent_file: Option<PathBuf>,
    /// Blast mode, to measure the daemon's CPU per span: OTLP/HTTP protobuf batches of
    /// --requests-per-batch agent requests of 10 spans each (an `invoke_agent` root; 3 `chat`
    /// turns with token counts and model names; 3 `execute_tool` calls with 1-2.4 KiB of JSON
    /// arguments and results together, 20% of them with a planted fake e-mail and `sk_live_` key; 3
    /// downstream HTTP client spans under the tool calls, from a second service), about 950
    /// protobuf bytes a span. Each of --connections keep-alive connections sends the next
    /// batch as soon as the previous one is answered, for --duration or --batches. A few
    /// batch templates are encoded once; every send overwrites their trace ids, span ids,
    /// request ids and times in place (fresh for every send and every run, whatever the
    /// --seed), so the client costs little CPU. A refusal (HTTP 429/502/503/504) waits for
    /// its Retry-After and resends the same batch. --target is the OTLP/HTTP base URL
    /// [default: http://127.0.0.1:4318]; --seed fixes the content; --requests, --rate,
    /// --concurrency, --batch, --profile, --acked-file and --sent-file do not apply.
    #[arg(
        long,
        conflicts_with_all = [
            "requests", "rate", "concurrency", "batch", "profile", "acked_file", "sent_file",
        ]
    )]
    blast: bool,
    /// Send the bearer token in FILE's first line as `authorization: Bearer <token>` (for a
    /// daemon with auth.mode = "required"). A file, not a flag: a command line is readable by
    /// every user of the machine.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Tenants are named PREFIX0, PREFIX1, … (two loadgens with different prefixes send as
    /// different tenants).
    #[arg(long, default_value = crate::loadgen::DEFAULT_TENANT_PREFIX, value_name = "PREFIX")]
    tenant_prefix: String,
    /// With --blast: keep-alive connections, each with one batch in flight.
    #[arg(long, default_value_t = 2, value_name = "N", requires = "blast")]
    connections: usize,
    /// With --blast: send for this many seconds (no batch starts later; one still refused
    /// then is abandoned) [default: 10, unless --batches].
    #[arg(
        long,
        value_name = "SECS",
        requires = "blast",
        conflicts_with = "batches",
        value_parser = seconds
    )]
    duration: Option<std::time::Duration>,
    /// With --blast: send exactly N batches over all connections, each resent until it is
    /// acknowledged (exit status 1 if any fails for good).
    #[arg(long, value_name = "N", requires = "blast")]
    batches: Option<u64>,
    /// With --blast: agent requests (10 spans each) per batch.
    #[arg(long, default_value_t = 40, value_name = "N", requires = "blast")]
    requests_per_batch: u32,
    /// With --blast: where the tenant (`executor.tenant_id`) is named: `root`, on the
    /// `invoke_agent` span only (its model and tool spans carry the request id but no tenant,
    /// the downstream spans neither, as auto-instrumented spans would; all share the trace
    /// id); or `every` span, each with the request id too.
    #[arg(long, value_enum, default_value_t = TenantOn::Root, requires = "blast")]
    tenant_on: TenantOn,
}

/// A positive number of seconds, e.g. `10` or `2.5`.
fn seconds(s: &str) -> Result<std::time::Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    std::time::Duration::try_from_secs_f64(v)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{s:?}: the duration must be more than 0 seconds"))
}

/// Runs the command line.
pub fn main() -> ExitCode {
    std::panic::set_hook(Box::new(report_panic_without_data));
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Redact(_)
            | Command::HashKey(_)
            | Command::Query(_)
            | Command::Trace(_)
            | Command::Ddl(_)
            | Command::CheckConfig(_)
    ) {
        end_quietly_when_the_reader_leaves();
    }
    match cli.command {
        Command::Serve(args) => serve(args),
        Command::CheckConfig(args) => check_config(args),
        Command::Loadgen(args) => run_loadgen(args),
        Command::Replay(args) => replay(args),
        Command::Redact(args) => redact(args),
        Command::HashKey(args) => hash_key(args),
        Command::Query(args) => query(args),
        Command::Trace(args) => trace(args),
        Command::Console(args) => console(args),
        Command::Compact(args) => compact(args),
        Command::Verify(args) => verify(args),
        Command::Retention(args) => retention(args),
        Command::Scrub(args) => scrub(args),
        Command::Ddl(args) => ddl(args),
        Command::Upload(args) => upload(args),
    }
}

/// The archive's folder from the flag, else the configuration's (`storage.archive_dir`, else
/// `storage.data_dir`; env overrides included).
fn data_dir(arg: &DataDirArg) -> Result<PathBuf, crate::config::ConfigError> {
    match &arg.data_dir {
        Some(d) => Ok(d.clone()),
        None => Config::load(None, std::env::vars()).map(|c| c.storage.archive_root()),
    }
}

/// The archive's folder for a command that works on an existing archive: the flag, else the
/// configuration's (`storage.archive_dir`, else `storage.data_dir`); a usage error when it is
/// not there.
fn existing_data_dir(arg: &DataDirArg, config: &Config) -> Result<PathBuf, ExitCode> {
    let dir = arg
        .data_dir
        .clone()
        .unwrap_or_else(|| config.storage.archive_root());
    if !dir.is_dir() {
        return Err(usage_error(format!(
            "data directory {} does not exist (set --data-dir)",
            dir.display()
        )));
    }
    Ok(dir)
}

/// Refuses a command that appends manifest entries without a signing key to an archive
/// whose manifests are signed.
fn check_signing(dir: &std::path::Path, config: &Config) -> Result<(), ExitCode> {
    if config
        .archive
        .manifest_signing_key_file
        .as_os_str()
        .is_empty()
        && crate::archive::manifest::archive_is_signed(dir)
    {
        return Err(usage_error(
            "the archive's manifests are signed: give --config with archive.manifest_signing_key_file, so this command signs what it records",
        ));
    }
    Ok(())
}

/// The configuration and the archive's folder of a command that works on an existing
/// archive (`compact`, `scrub`, `retention`).
fn archive_command(
    config: Option<&std::path::Path>,
    data_dir: &DataDirArg,
) -> Result<(Config, PathBuf), ExitCode> {
    let config = Config::load(config, std::env::vars()).map_err(usage_error)?;
    let dir = existing_data_dir(data_dir, &config)?;
    Ok((config, dir))
}

/// The async runtime every command that needs one runs on.
fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("toolwatch: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        })
}

fn query(args: QueryArgs) -> ExitCode {
    use std::io::IsTerminal;
    let dir = match data_dir(&args.data_dir) {
        Ok(d) => d,
        Err(e) => return usage_error(e),
    };
    let remote = match args.store.remote() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let runtime = match runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    // A spinner with the rows scanned so far, on a terminal only: piped output stays clean.
    let progress = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        bar.set_message("scanning the archive");
        // Drawn at once, so even a short query shows that it is working.
        bar.tick();
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        bar
    });
    let result = runtime.block_on(async {
        let scope = if args.tenants.is_empty() {
            crate::query::TenantScope::all()
        } else {
            crate::query::TenantScope::only(args.tenants.iter().cloned())
        };
        on_archive(&dir, remote.as_ref(), args.fresh.freshen(), &scope, |ctx| {
            let (sql, progress) = (&args.sql, &progress);
            async move {
                crate::query::run(&ctx, sql, |rows| {
                    if let Some(bar) = progress {
                        bar.set_message(format!("scanning the archive: {rows} result rows"));
                    }
                })
                .await
            }
        })
        .await
    });
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    let (schema, batches) = match result {
        Ok(r) => r,
        Err(e) => return usage_error(e),
    };
    let mut out = std::io::stdout().lock();
    match crate::query::output::write(&mut out, args.format, &schema, &batches) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("toolwatch: {e}");
            ExitCode::FAILURE
        }
    }
}

fn retention(args: RetentionArgs) -> ExitCode {
    use crate::archive::retention::expired;
    use crate::archive::table::Table;
    let (config, dir) = match archive_command(args.config.as_deref(), &args.data_dir) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let retention = &config.archive.retention;
    let found = match expired(&dir, retention, &Table::ALL, std::time::SystemTime::now()) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("toolwatch retention: {e}");
            return ExitCode::from(2);
        }
    };
    for e in &found {
        let bytes: u64 = e.files.iter().map(|(_, b)| b).sum::<u64>()
            + e.offloaded.iter().map(|f| f.bytes).sum::<u64>();
        println!(
            "{} {}/tenant={}/date={}/hour={} files {} bytes {bytes}",
            if args.dry_run {
                "would-delete"
            } else {
                "delete"
            },
            e.part.table.as_str(),
            e.part.tenant,
            e.part.date,
            e.part.hour,
            e.files.len() + e.offloaded.len(),
        );
    }
    if args.dry_run || found.is_empty() {
        eprintln!("{} partitions past their retention", found.len());
        return ExitCode::SUCCESS;
    }
    if let Err(code) = check_signing(&dir, &config) {
        return code;
    }
    let mut compactor = crate::archive::compact::Compactor::new(
        &dir,
        crate::archive::compact::policy::Policy::from_config(&config.archive),
        crate::archive::layout::names::new_instance_id(),
        std::sync::Arc::new(crate::metrics::Metrics::new()),
    );
    match compactor.delete_expired(&found) {
        Ok((files, bytes)) => {
            eprintln!(
                "deleted {} partitions: {files} files, {bytes} bytes (recorded in {})",
                found.len(),
                compactor.manifest_path().display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("toolwatch retention: {e}");
            ExitCode::from(2)
        }
    }
}

fn verify(args: VerifyArgs) -> ExitCode {
    let config = match Config::load(args.config.as_deref(), std::env::vars()) {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    if args.print_public_key {
        let file = args
            .key_file
            .clone()
            .unwrap_or_else(|| config.archive.manifest_signing_key_file.clone());
        if file.as_os_str().is_empty() {
            return usage_error(
                "--print-public-key needs --key-file or archive.manifest_signing_key_file",
            );
        }
        if !file.is_file() {
            return usage_error(format!("{}: no signing key there", file.display()));
        }
        return match crate::archive::manifest::load_signing_key(&file) {
            Ok(k) => {
                println!("{}", hex::encode(k.verifying_key().to_bytes()));
                ExitCode::SUCCESS
            }
            Err(e) => usage_error(format!("{}: {e}", file.display())),
        };
    }
    let remote = match args.store.remote() {
        Ok(r) => r,
        Err(code) => return code,
    };
    if remote.is_some() && args.adopt_unrecorded {
        return usage_error("--adopt-unrecorded works on a local archive, not with --url");
    }
    let mut store_files = match remote.map(crate::archive::store::remote::StoreFiles::new) {
        None => None,
        Some(Ok(f)) => Some(f),
        Some(Err(e)) => {
            eprintln!("toolwatch verify: {e}");
            return ExitCode::from(2);
        }
    };
    let dir = match &store_files {
        Some(f) => {
            use crate::archive::manifest::verify::ArchiveFiles;
            f.manifest_root().to_path_buf()
        }
        None => match existing_data_dir(&args.data_dir, &config) {
            Ok(d) => d,
            Err(code) => return code,
        },
    };
    let shown = args
        .store
        .url
        .clone()
        .unwrap_or_else(|| dir.display().to_string());
    if let Err(code) = since_arg(args.since.as_deref()) {
        return code;
    }
    let key = match args
        .public_key
        .as_deref()
        .map(crate::archive::manifest::verify::parse_public_key)
    {
        None => None,
        Some(Ok(k)) => Some(k),
        Some(Err(e)) => return usage_error(format!("--public-key: {e}")),
    };
    let checkpoint = match load_checkpoint(args.checkpoint.as_deref(), args.since.as_deref()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Some(c) = &checkpoint {
        let this = key.map(|k| hex::encode(k.to_bytes())).unwrap_or_default();
        if c.public_key != this {
            return usage_error(format!(
                "--checkpoint: it was taken {}; delete it to start a new one",
                if c.public_key.is_empty() {
                    "without --public-key".to_string()
                } else {
                    format!("with public key {}", c.public_key)
                }
            ));
        }
    }
    let verified = match &mut store_files {
        Some(files) => crate::archive::manifest::verify::verify_files(
            files,
            args.since.as_deref(),
            key.as_ref(),
            checkpoint.as_ref(),
        ),
        None => crate::archive::manifest::verify::verify_from(
            &dir,
            args.since.as_deref(),
            key.as_ref(),
            checkpoint.as_ref(),
        ),
    };
    let (mut report, next) = match verified {
        Ok(r) => r,
        Err(e) => {
            eprintln!("toolwatch verify: {shown}: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(file) = &args.heads {
        let kept = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => return usage_error(format!("--heads {}: {e}", file.display())),
        };
        match crate::archive::manifest::verify::check_heads(&dir, &kept) {
            Ok(p) => report.problems.extend(p),
            Err(e) => {
                eprintln!("toolwatch verify: {shown}: {e}");
                return ExitCode::from(2);
            }
        }
    }
    // Neither a checkpoint nor an adoption goes past a problem of the manifests: a file they
    // no longer vouch for must not become expected.
    let manifests_sound = !report.problems.iter().any(|p| p.is_of_manifests());
    let mut failed = false;
    if let Some(file) = &args.checkpoint {
        if !manifests_sound {
            eprintln!(
                "checkpoint {} not advanced: the manifests have problems",
                file.display()
            );
        } else {
            let written = serde_json::to_vec(&next)
                .map_err(std::io::Error::other)
                .and_then(|bytes| crate::durable::replace_file(file, &bytes));
            if let Err(e) = written {
                eprintln!("toolwatch verify: checkpoint {}: {e}", file.display());
                failed = true;
            }
        }
    }
    if args.adopt_unrecorded {
        if !manifests_sound {
            eprintln!("nothing adopted: the manifests have problems");
        } else if adopt_unrecorded(&dir, &config, &mut report).is_err() {
            failed = true;
        }
    }
    for p in &report.problems {
        println!("{p}");
    }
    if args.print_heads {
        for (manifest, seq, hash) in &report.heads {
            println!("head {manifest} {seq} {hash}");
        }
    }
    eprintln!(
        "{} manifests, {} entries, {} files compared: {}",
        report.manifests,
        report.entries,
        report.files,
        if report.problems.is_empty() {
            "ok".to_string()
        } else {
            format!("{} problems", report.problems.len())
        }
    );
    if failed {
        ExitCode::from(2)
    } else if report.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// A usage error unless a `--since` flag, if given, is a date.
fn since_arg(since: Option<&str>) -> Result<(), ExitCode> {
    match since {
        Some(d) if chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d").is_err() => Err(usage_error(
            format!("--since {d:?}: expected a date, YYYY-MM-DD"),
        )),
        _ => Ok(()),
    }
}

/// The tables a `--table` flag names: all when absent.
fn tables_arg(arg: Option<&str>) -> Result<Vec<crate::archive::table::Table>, ExitCode> {
    use crate::archive::table::Table;
    match arg {
        None => Ok(Table::ALL.to_vec()),
        Some(t) => match Table::ALL.iter().find(|x| x.as_str() == t) {
            Some(&x) => Ok(vec![x]),
            None => Err(usage_error(format!(
                "unknown table {t:?} (spans, logs, requests, alarms or findings)"
            ))),
        },
    }
}

/// The value `scrub --value-from-stdin` removes: stdin's first line, without its line end.
fn value_from_stdin() -> Result<String, ExitCode> {
    let mut line = String::new();
    if let Err(e) = std::io::stdin().read_line(&mut line) {
        return Err(usage_error(format!(
            "cannot read the value from stdin: {e}"
        )));
    }
    let value = line.trim_end_matches(['\r', '\n']).to_string();
    if value.is_empty() {
        return Err(usage_error("no value on stdin"));
    }
    Ok(value)
}

fn ddl(args: DdlArgs) -> ExitCode {
    let tables = match tables_arg(args.table.as_deref()) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let location = match args.location {
        Some(l) => l,
        None => {
            let dir = match data_dir(&args.data_dir) {
                Ok(d) => d,
                Err(e) => return usage_error(e),
            };
            std::path::absolute(&dir)
                .unwrap_or(dir)
                .to_string_lossy()
                .into_owned()
        }
    };
    let location = location.trim_end_matches('/');
    for table in tables {
        let folder = format!("{location}/{}", table.as_str());
        match crate::query::ddl::definition(args.engine, table, &folder) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("toolwatch ddl: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

fn scrub(args: ScrubArgs) -> ExitCode {
    use crate::archive::compact::scrub::{self, Scrubber, Target};
    use crate::archive::compact::{policy::Policy, Compactor};
    let (config, dir) = match archive_command(args.config.as_deref(), &args.data_dir) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let tables = match tables_arg(args.table.as_deref()) {
        Ok(t) => t,
        Err(code) => return code,
    };
    if let Err(code) = since_arg(args.since.as_deref()) {
        return code;
    }
    let target = match (&args.rule, args.value_from_stdin) {
        (Some(id), _) => Target::Rule(id.clone()),
        (None, _) => match value_from_stdin() {
            Ok(v) => Target::Value(v),
            Err(code) => return code,
        },
    };
    // A hashing rule needs the daemon's key, so its hashes join the ones protect made; any
    // other rule never uses one.
    let hasher = match &target {
        Target::Rule(id) if Scrubber::rule_hashes(&config.redaction, id) => {
            // The key is in the daemon's data directory: the archive's, unless the archive
            // is a folder several instances share.
            let key_dir = if config.storage.archive_dir.as_os_str().is_empty() {
                dir.clone()
            } else {
                config.storage.data_dir.clone()
            };
            match config.hashing.existing(&key_dir) {
                Ok(Some(h)) => h,
                Ok(None) => {
                    return usage_error(format!(
                        "rule {id} hashes what it finds and there is no key at {}",
                        crate::protect::default_key_file(&key_dir).display()
                    ))
                }
                Err(e) => return usage_error(e),
            }
        }
        _ => crate::protect::KeyedHasher::new(&rand::random::<[u8; 32]>()),
    };
    let scrubber = match Scrubber::new(&config.redaction, &target, hasher) {
        Ok(s) => s,
        Err(e) => return usage_error(e),
    };
    if !args.dry_run {
        if let Err(code) = check_signing(&dir, &config) {
            return code;
        }
    }
    let scope = scrub::Scope {
        tables,
        tenant: args.tenant.clone(),
        since: args.since.clone(),
    };
    // A daemon serving the archive first writes out what it holds, rows journaled under
    // the old rules included, so those files are scrubbed too.
    let runtime = match runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    if let crate::query::fresh::Freshness::Partial(why) =
        runtime.block_on(crate::query::fresh::flush_daemon(&dir))
    {
        eprintln!(
            "warning: {why}; rows the daemon still holds are not scrubbed, run scrub again later"
        );
    }
    drop(runtime);
    let result = if args.dry_run {
        scrub::count(&dir, &scope, &scrubber)
    } else {
        let threads = args
            .threads
            .or_else(|| std::thread::available_parallelism().ok())
            .map_or(1, std::num::NonZeroUsize::get);
        let metrics = std::sync::Arc::new(crate::metrics::Metrics::new());
        // One compactor (an instance, with its manifest) per thread.
        let compactors: Vec<Compactor> = (0..threads)
            .map(|_| {
                Compactor::new(
                    &dir,
                    Policy::from_config(&config.archive),
                    crate::archive::layout::names::new_instance_id(),
                    std::sync::Arc::clone(&metrics),
                )
            })
            .collect();
        let remote = match config.storage.remote() {
            Ok(r) => r,
            Err(e) => return usage_error(e),
        };
        scrub::run(compactors, &dir, &scope, &scrubber, remote.as_ref())
    };
    match result {
        Ok(report) => {
            println!("{}{report}", if args.dry_run { "would have " } else { "" });
            if !report.complete() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("toolwatch scrub: {e}; files scrubbed so far stay scrubbed, run it again");
            ExitCode::FAILURE
        }
    }
}

/// The checkpoint `verify --checkpoint` continues from: none yet when the file is absent.
fn load_checkpoint(
    file: Option<&std::path::Path>,
    since: Option<&str>,
) -> Result<Option<crate::archive::manifest::verify::Checkpoint>, ExitCode> {
    let Some(file) = file else {
        return Ok(None);
    };
    let text = match std::fs::read(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(usage_error(format!("--checkpoint {}: {e}", file.display()))),
    };
    let c: crate::archive::manifest::verify::Checkpoint =
        serde_json::from_slice(&text).map_err(|e| {
            usage_error(format!(
                "--checkpoint {}: not a checkpoint: {e}",
                file.display()
            ))
        })?;
    if since.is_some_and(|s| s < c.since.as_str()) {
        return Err(usage_error(format!(
            "--checkpoint {} covers partitions from {} on: give --since {} or later, or verify without it",
            file.display(),
            c.since,
            c.since
        )));
    }
    Ok(Some(c))
}

/// `verify --adopt-unrecorded`: the report's `extra` files recorded in a new manifest and
/// taken off the report.
fn adopt_unrecorded(
    dir: &std::path::Path,
    config: &Config,
    report: &mut crate::archive::manifest::verify::Report,
) -> Result<(), ExitCode> {
    use crate::archive::manifest::verify::Problem;
    let extra: Vec<String> = report
        .problems
        .iter()
        .filter_map(|p| match p {
            Problem::Extra(path) => Some(path.clone()),
            _ => None,
        })
        .collect();
    if extra.is_empty() {
        return Ok(());
    }
    check_signing(dir, config)?;
    let instance_id = crate::archive::layout::names::new_instance_id();
    let adopted = crate::archive::manifest::Manifest::shared(
        dir,
        &instance_id,
        &config.archive.manifest_signing_key_file,
    )
    .and_then(|m| crate::archive::manifest::verify::adopt(dir, &extra, &m).map(|n| (n, m)));
    match adopted {
        Ok((n, m)) => {
            eprintln!(
                "adopted {n} unrecorded files (recorded in {})",
                m.path().display()
            );
            let adopted: std::collections::HashSet<&String> = extra.iter().collect();
            report
                .problems
                .retain(|p| !matches!(p, Problem::Extra(path) if adopted.contains(path)));
            Ok(())
        }
        Err(e) => {
            eprintln!("toolwatch verify: adopting unrecorded files: {e}");
            Err(ExitCode::from(2))
        }
    }
}

fn compact(args: CompactArgs) -> ExitCode {
    use crate::archive::compact::{policy::Policy, Compactor};
    let (config, dir) = match archive_command(args.config.as_deref(), &args.data_dir) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let tables = match tables_arg(args.table.as_deref()) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let mut policy = Policy::from_config(&config.archive);
    if let Some(d) = args.older_than.as_deref() {
        match humantime::parse_duration(d) {
            Ok(d) => policy.older_than = d,
            Err(e) => return usage_error(format!("--older-than {d:?}: {e}")),
        }
    }
    if let Some(n) = args.min_files {
        if n < 2 {
            return usage_error("--min-files must be at least 2");
        }
        policy.min_files = n;
    }
    if !args.dry_run {
        if let Err(code) = check_signing(&dir, &config) {
            return code;
        }
    }
    let instance_id = crate::archive::layout::names::new_instance_id();
    let metrics = std::sync::Arc::new(crate::metrics::Metrics::new());
    let mut compactor = Compactor::new(&dir, policy, instance_id, metrics).dry_run(args.dry_run);
    match compactor.run(&tables, std::time::SystemTime::now(), &|| false) {
        Ok(report) => {
            let verb = if args.dry_run {
                "would compact"
            } else {
                "compacted"
            };
            println!("{verb}: {report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("toolwatch: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The result of a read, with a warning when the daemon serving the archive was asked for
/// what it buffers and did not give it: the rows are safe in its journal, only the read may
/// miss the last seconds.
fn warn_unfresh<T, E>(result: Result<(T, crate::query::fresh::Freshness), E>) -> Result<T, E> {
    result.map(|(t, freshness)| {
        if let crate::query::fresh::Freshness::Partial(why) = freshness {
            eprintln!("warning: {why}; rows acknowledged in the last seconds may be missing");
        }
        t
    })
}

fn upload(args: UploadArgs) -> ExitCode {
    use crate::archive::store::{remote::RemoteArchive, upload::Uploader};
    let (config, dir) = match archive_command(args.config.as_deref(), &args.data_dir) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let url = args
        .store
        .url
        .clone()
        .unwrap_or_else(|| config.storage.url.clone());
    if url.is_empty() {
        return usage_error("no object store: set storage.url in --config, or --url");
    }
    let remote = match RemoteArchive::open(&url) {
        Ok(r) => r,
        Err(e) => return usage_error(e),
    };
    let runtime = match runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let metrics = std::sync::Arc::new(crate::metrics::Metrics::new());
    if !config.storage.local_keep.0.is_zero() {
        if let Err(code) = check_signing(&dir, &config) {
            return code;
        }
    }
    // Local copies go only once they are in the store readers, retention and scrub use.
    let configured = config.storage.remote().ok().flatten();
    let same_store = configured.is_some_and(|c| c.url() == remote.url());
    let mut uploader = Uploader::new(&dir, remote, config.storage.upload_settings(), metrics);
    if args.resync {
        uploader = uploader.with_resync();
    }
    if same_store && !config.storage.local_keep.0.is_zero() {
        let instance = match crate::archive::store::upload::offload_instance(&dir) {
            Ok(i) => i,
            Err(e) => {
                eprintln!("toolwatch upload: {e}");
                return ExitCode::from(2);
            }
        };
        uploader = uploader.with_offload(crate::archive::store::upload::OffloadSettings {
            keep: config.storage.local_keep.0,
            instance,
            signing_key_file: config.archive.manifest_signing_key_file.clone(),
        });
    }
    match runtime.block_on(uploader.pass(args.delete_now)) {
        Ok(r) => {
            if r.offloaded.0 > 0 {
                eprintln!(
                    "offloaded {} files ({} bytes): their local copies went (storage.local_keep)",
                    r.offloaded.0, r.offloaded.1
                );
            }
            eprintln!(
                "uploaded {} files ({} bytes) and {} manifest lines in {} segments to {url}; deleted {} objects; {} files already gone, {} differing from their entries (not uploaded); {} manifests uploaded by another process",
                r.files, r.bytes, r.lines, r.segments, r.deleted, r.gone, r.differs, r.held_elsewhere
            );
            if r.lost > 0 {
                eprintln!(
                    "toolwatch upload: {} offloaded files the store lost could not be put again (no local copy); verify --url names them",
                    r.lost
                );
            }
            for e in &r.stuck_errors {
                eprintln!("toolwatch upload: {e}");
            }
            if args.resync && r.held_elsewhere > 0 {
                eprintln!(
                    "toolwatch upload: {} manifests were not resynced: a running process (a daemon) holds them; stop the daemons writing this folder and run it again",
                    r.held_elsewhere
                );
                return ExitCode::from(2);
            }
            if r.stuck > 0 {
                ExitCode::from(2)
            } else if r.differs > 0 {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("toolwatch upload: {e}");
            ExitCode::from(2)
        }
    }
}

fn trace(args: TraceArgs) -> ExitCode {
    let dir = match data_dir(&args.data_dir) {
        Ok(d) => d,
        Err(e) => return usage_error(e),
    };
    let runtime = match runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let remote = match args.store.remote() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let view = runtime.block_on(async {
        let scope = match &args.tenant {
            Some(t) => crate::query::TenantScope::only([t.clone()]),
            None => crate::query::TenantScope::all(),
        };
        on_archive(&dir, remote.as_ref(), args.fresh.freshen(), &scope, |ctx| {
            let (id, tenant) = (&args.id, args.tenant.as_deref());
            async move { crate::query::trace::find(&ctx, id, tenant).await }
        })
        .await
    });
    match view {
        Ok(v) if args.json => {
            println!("{}", v.to_json());
            ExitCode::SUCCESS
        }
        Ok(v) => {
            let width = std::env::var("COLUMNS")
                .ok()
                .and_then(|c| c.parse().ok())
                .unwrap_or(160);
            print!("{}", v.to_text(width));
            ExitCode::SUCCESS
        }
        Err(crate::query::QueryError::NotFound(id)) => {
            eprintln!("toolwatch: no request or trace {id:?} in the archive");
            ExitCode::from(1)
        }
        Err(e) => usage_error(e),
    }
}

/// The keys idempotency keys were hashed under (current first), for the console's search:
/// none current when the data directory has no key (search by a raw key then finds nothing
/// it hashed); a key file that cannot be read is an error.
fn known_hashers(
    config: &Config,
    data_dir: &std::path::Path,
) -> Result<Vec<crate::protect::KeyedHasher>, crate::protect::KeyError> {
    let current = config.hashing.existing(data_dir)?;
    let previous = config.hashing.previous()?;
    Ok(current.into_iter().chain(previous).collect())
}

/// The console for `serve`: every tenant (the admin access decides who gets in), the
/// daemon's buffers and budget state read in the process.
fn daemon_console(config: &Config) -> crate::serve::AdminPages {
    let config = config.clone();
    Some(Box::new(
        move |state: crate::admin::AdminState, archive: PathBuf| {
            use crate::console::{ArchiveSource, Console};
            // The daemon loaded these keys at start; should one fail now, search by a raw
            // key finds nothing rather than the console going away.
            let hashers = known_hashers(&config, &config.storage.data_dir).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "console: idempotency keys unreadable; search by key is off");
                Vec::new()
            });
            let source = match state.flush.clone() {
                Some(points) => ArchiveSource::Daemon {
                    data_dir: archive,
                    points,
                },
                None => ArchiveSource::Local(archive),
            };
            let login = crate::console::Login {
                access: std::sync::Arc::clone(&state.access),
                tls: config.admin.tls,
            };
            crate::console::router(
                Console::new(
                    source,
                    crate::query::TenantScope::all(),
                    Some(state.budgets.clone()),
                    hashers,
                )
                .with_login(login),
            )
        },
    ))
}

fn console(args: ConsoleArgs) -> ExitCode {
    use crate::console::{ArchiveSource, Console};
    let config = match load_config(&args.config) {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    init_logging(&config);
    let runtime = match runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let remote = match args.store.remote() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let dir = match &args.data_dir.data_dir {
        Some(d) => d.clone(),
        None => config.storage.archive_root(),
    };
    let hashers = match known_hashers(
        &config,
        args.data_dir
            .data_dir
            .as_deref()
            .unwrap_or(&config.storage.data_dir),
    ) {
        Ok(h) => h,
        Err(e) => return usage_error(e),
    };
    let source = match remote {
        Some(r) => ArchiveSource::Remote(r),
        None if !dir.is_dir() => {
            return usage_error(format!(
                "data directory {} does not exist (set --data-dir, or --url for object storage)",
                dir.display()
            ))
        }
        None => ArchiveSource::Local(dir),
    };
    let scope = if args.tenant.is_empty() {
        crate::query::TenantScope::all()
    } else {
        crate::query::TenantScope::only(args.tenant.iter().cloned())
    };
    // The same access as the daemon's admin port: with auth required, the admin token or a
    // console reader's token signs in.
    let access = match crate::receive::auth::AdminAccess::from_config(&config.auth, &config.admin) {
        Ok(a) => std::sync::Arc::new(std::sync::RwLock::new(std::sync::Arc::new(a))),
        Err(e) => return usage_error(e),
    };
    let login = crate::console::Login {
        access: std::sync::Arc::clone(&access),
        tls: false,
    };
    let app = crate::admin::guarded(
        crate::console::router(Console::new(source, scope, None, hashers).with_login(login)),
        access,
        std::sync::Arc::new(crate::metrics::Metrics::new()),
    );
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(args.listen).await {
            Ok(l) => l,
            Err(e) => return usage_error(format!("cannot listen on {}: {e}", args.listen)),
        };
        let addr = listener.local_addr().unwrap_or(args.listen);
        eprintln!("toolwatch console: http://{addr}/ui/");
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(crate::serve::stop_signal())
            .await;
        match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("toolwatch: console: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

fn hash_key(args: HashKeyArgs) -> ExitCode {
    let mut config = match load_config(&args.config) {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    if let Some(d) = args.data_dir {
        config.storage.data_dir = d;
    }
    // Never create a key here: a new key would print hashes the archive cannot hold.
    let keys = config
        .hashing
        .existing(&config.storage.data_dir)
        .and_then(|c| config.hashing.previous().map(|p| (c, p)));
    let (current, previous) = match keys {
        Ok((Some(c), p)) => (c, p),
        Ok((None, _)) => {
            return usage_error(format!(
                "no key at {}: point --data-dir at the daemon's data directory",
                crate::protect::default_key_file(&config.storage.data_dir).display()
            ))
        }
        Err(e) => return usage_error(e),
    };
    println!("{}\tcurrent", current.hash(&args.raw));
    for (h, file) in previous.iter().zip(&config.hashing.previous_key_files) {
        println!("{}\tprevious ({file})", h.hash(&args.raw));
    }
    ExitCode::SUCCESS
}

fn redact(args: RedactArgs) -> ExitCode {
    use crate::protect::engine::Redactor;
    use crate::protect::{walk, KeyedHasher};
    use std::io::Read;
    let config = match load_config(&args.config).and_then(|c| c.validate().map(|()| c)) {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    // Hash actions use the daemon's key when its data directory has one, so the output
    // matches what the archive holds; otherwise a throwaway key.
    let key_path = config.storage.data_dir.join("state").join("hash.key");
    let configured = !config.hashing.key_env.is_empty() || !config.hashing.key_file.is_empty();
    let hasher = if configured || key_path.exists() {
        match config.hashing.current(&config.storage.data_dir) {
            Ok(h) => h,
            Err(e) => return usage_error(e),
        }
    } else {
        KeyedHasher::new(&rand::random::<[u8; 32]>())
    };
    let rules = match &args.tenant {
        Some(t) => config.redaction.for_tenant(t),
        None => config.redaction.clone(),
    };
    let redactor = match Redactor::new(&rules, hasher) {
        Ok(r) => r,
        Err(e) => return usage_error(e),
    };
    let mut input = String::new();
    let read = match args.input.as_deref() {
        None => std::io::stdin().read_to_string(&mut input).map(|_| ()),
        Some(p) if p == std::path::Path::new("-") => {
            std::io::stdin().read_to_string(&mut input).map(|_| ())
        }
        Some(p) => std::fs::read_to_string(p).map(|s| input = s),
    };
    if let Err(e) = read {
        eprintln!("toolwatch: cannot read input: {e}");
        return ExitCode::from(2);
    }
    if args.explain {
        let explained = walk::explain(&redactor, &input);
        // Silence would leave the user guessing whether --explain ran at all.
        if explained.is_empty() {
            println!(
                "kept\t-\t$\t0..{}\tnothing to judge: no rule matched, and no credential name has a value after it",
                input.len()
            );
        }
        for e in explained {
            let verdict = if e.removed { "removed" } else { "kept" };
            println!(
                "{verdict}\t{}\t{}\t{}..{}\t{}",
                e.rule, e.path, e.start, e.end, e.why
            );
        }
    } else {
        let mut hits = Default::default();
        print!("{}", walk::redact_document(&redactor, &input, &mut hits));
    }
    ExitCode::SUCCESS
}

/// `toolwatch redact FILE | head`: a command that only prints ends, quietly, when its reader
/// closes the pipe, as `cat` does. Rust ignores SIGPIPE, so the next print would fail and
/// panic, and the user read "internal error". Not for commands that speak to sockets (the
/// daemon, loadgen, replay, upload), where a closed peer is an error to handle.
fn end_quietly_when_the_reader_leaves() {
    #[cfg(unix)]
    // SAFETY: sets this process's disposition of one signal to its default; no memory is
    // touched and no handler runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Panic messages built at run time can quote the data being processed (a string slice
/// error prints the string), so only fixed messages and the location are reported.
fn report_panic_without_data(info: &std::panic::PanicHookInfo<'_>) {
    let location = info
        .location()
        .map_or_else(String::new, |l| format!(" at {}:{}", l.file(), l.line()));
    let message = info
        .payload()
        .downcast_ref::<&'static str>()
        .copied()
        .unwrap_or("message withheld: it may quote processed data");
    eprintln!("toolwatch: internal error{location}: {message}");
}

/// Reports a configuration or input error and gives the exit code for it (2).
fn usage_error(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("toolwatch: {e}");
    ExitCode::from(2)
}

fn load_config(arg: &ConfigArg) -> Result<Config, crate::config::ConfigError> {
    Config::load(arg.config.as_deref(), std::env::vars())
}

fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log.level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match config.log.format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    let mut config = match load_config(&args.config) {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    if let Some(d) = args.data_dir {
        config.storage.data_dir = d;
    }
    if let Some(a) = args.otlp_grpc {
        config.listen.otlp_grpc = a;
    }
    if let Some(a) = args.otlp_http {
        config.listen.otlp_http = a;
    }
    if let Some(a) = args.admin {
        config.listen.admin = a;
    }
    if let Err(e) = config.validate() {
        eprintln!("toolwatch: {e}");
        return ExitCode::from(2);
    }
    let config_data_dir = config.storage.data_dir.clone();
    let listen = config.listen.clone();
    init_logging(&config);
    // SIGHUP reads the same file and environment again, with the same flags applied.
    let reload: crate::serve::ConfigSource = Some(Box::new(move || {
        let mut c = load_config(&args.config)?;
        c.storage.data_dir.clone_from(&config_data_dir);
        c.listen = listen.clone();
        Ok(c)
    }));
    let runtime = match runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let pages = daemon_console(&config);
    match runtime.block_on(crate::serve::run(
        config,
        crate::serve::stop_signal(),
        reload,
        pages,
    )) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "toolwatch failed");
            eprintln!("toolwatch: {e}");
            ExitCode::FAILURE
        }
    }
}

fn check_config(args: ConfigArg) -> ExitCode {
    match load_config(&args).and_then(|c| c.validate().map(|()| c)) {
        Ok(c) => {
            print!("{}", c.to_display_toml());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("toolwatch: {e}");
            ExitCode::from(2)
        }
    }
}

/// The token in `--token-file`'s first line.
fn read_token(file: Option<&Path>) -> Result<Option<String>, String> {
    let Some(f) = file else { return Ok(None) };
    let text =
        std::fs::read_to_string(f).map_err(|e| format!("--token-file {}: {e}", f.display()))?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        return Err(format!(
            "--token-file {}: the first line is empty",
            f.display()
        ));
    }
    Ok(Some(token))
}

fn replay(args: ReplayArgs) -> ExitCode {
    use crate::replay::{self, input::Signal, ReplayOptions};
    use std::io::IsTerminal;
    let token = match read_token(args.token_file.as_deref()) {
        Ok(t) => t,
        Err(e) => return usage_error(e),
    };
    let options = ReplayOptions {
        paths: args.paths,
        target: args.target,
        tenant: args.tenant,
        token,
        state_dir: args.state_dir,
        restart: args.restart,
        signal: args.signal.map(|s| match s {
            ReplaySignal::Traces => Signal::Traces,
            ReplaySignal::Logs => Signal::Logs,
        }),
        max_request_bytes: usize::try_from(args.max_request_bytes.0).unwrap_or(usize::MAX),
        retry_for: args.retry_for,
        progress_bar: std::io::stderr().is_terminal(),
    };
    let report = match replay::run(&options) {
        Ok(r) => r,
        Err(e) => return usage_error(e),
    };
    for f in &report.files {
        let p = &f.progress;
        let resumed = if f.started_again {
            " (the file changed since its kept progress: read from its beginning)".to_string()
        } else if f.resumed_after > 0 {
            format!(" (resumed after message {})", f.resumed_after)
        } else {
            String::new()
        };
        let tail = if f.tail_pending {
            "; its last line or message is incomplete (still being written?): left for the next run"
        } else {
            ""
        };
        eprintln!(
            "{}: {} messages, {} spans and {} log records taken, {} skipped (not traces or logs), {} refused{resumed}{tail}",
            f.path,
            p.messages,
            p.spans,
            p.log_records,
            p.skipped,
            p.refused_count()
        );
        for r in &p.refused {
            eprintln!("  refused message {}: {}", r.message, r.reason);
        }
        if p.refused_more > 0 {
            eprintln!("  and {} more refused messages, not listed", p.refused_more);
        }
        if let Some(e) = &f.error {
            eprintln!("  could not be read on: {e}");
        }
    }
    if let Some(why) = &report.stopped {
        eprintln!("toolwatch: replay stopped: {why}");
    }
    if args.json {
        match serde_json::to_string(&report) {
            Ok(j) => println!("{j}"),
            Err(e) => return usage_error(format!("cannot print the report: {e}")),
        }
    }
    if report.stopped.is_some() || report.files_with_errors > 0 {
        ExitCode::from(2)
    } else if report.refused > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn run_loadgen(args: LoadgenArgs) -> ExitCode {
    let token = match read_token(args.token_file.as_deref()) {
        Ok(t) => t,
        Err(e) => return usage_error(e),
    };
    if args.blast {
        return run_blast(args, token);
    }
    let protocol = if args.http {
        Protocol::Http
    } else {
        Protocol::Grpc
    };
    let target = args.target.unwrap_or_else(|| match protocol {
        Protocol::Grpc => "http://127.0.0.1:4317".to_string(),
        Protocol::Http => "http://127.0.0.1:4318".to_string(),
    });
    let options = LoadgenOptions {
        target,
        protocol,
        requests: args.requests,
        rate: args.rate,
        tenants: args.tenants.unwrap_or(1).max(1),
        seed: args.seed,
        concurrency: args.concurrency.max(1),
        batch: args.batch.max(1),
        profile: args.profile,
        acked_file: args.acked_file,
        sent_file: args.sent_file,
        token,
        tenant_prefix: args.tenant_prefix.clone(),
    };
    let runtime = match runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    match runtime.block_on(loadgen::run(options)) {
        Ok(report) => {
            if args.json {
                println!("{}", report.to_json());
            } else {
                println!("{report}");
            }
            if report.failed_batches > 0 {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("toolwatch loadgen: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_blast(args: LoadgenArgs, token: Option<String>) -> ExitCode {
    let length = match (args.batches, args.duration) {
        (Some(n), _) => BlastLength::Batches(n),
        (None, d) => BlastLength::Duration(d.unwrap_or(std::time::Duration::from_secs(10))),
    };
    let options = BlastOptions {
        target: args
            .target
            .unwrap_or_else(|| "http://127.0.0.1:4318".to_string()),
        connections: args.connections,
        length,
        requests_per_batch: args.requests_per_batch,
        tenants: args.tenants.unwrap_or(20),
        tenant_on: args.tenant_on,
        seed: args.seed,
        token,
        tenant_prefix: args.tenant_prefix.clone(),
    };
    let runtime = match runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    match runtime.block_on(loadgen::blast(options)) {
        Ok(report) => {
            if args.json {
                println!("{}", report.to_json());
            } else {
                println!("{report}");
            }
            let short = matches!(length, BlastLength::Batches(n) if report.batches != n);
            if report.failed_batches > 0 || short {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(LoadgenError::Options(e)) => {
            eprintln!("toolwatch loadgen: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("toolwatch loadgen: {e}");
            ExitCode::FAILURE
        }
    }
}
