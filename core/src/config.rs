//! Configuration model: every key, its default, and its validation.
//!
//! A config comes from three layers, later ones winning: the TOML file (or the embedded
//! defaults when there is none), `TOOLWATCH_*` environment variables, then command-line
//! flags. Values are validated while they are deserialized, so an error from the file names
//! the key and its line; an error from the environment names the variable.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::archive::config::ArchiveConfig;
pub use crate::units::{ByteSize, HumanDuration, LimitDuration, PositiveUsize, ZstdLevel};

/// Prefix of environment variables that override configuration keys.
pub const ENV_PREFIX: &str = "TOOLWATCH_";

/// The whole daemon configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Listening addresses.
    pub listen: ListenConfig,
    /// Where the archive and the daemon's own state live.
    pub storage: StorageConfig,
    /// Limits applied to what receivers accept.
    pub limits: LimitsConfig,
    /// Who may send, and which tenants each sender may write.
    pub auth: crate::receive::auth::AuthConfig,
    /// How the OTLP receivers talk: TLS.
    pub receive: ReceiveConfig,
    /// The admin port's TLS and token.
    pub admin: crate::receive::auth::AdminConfig,
    /// Which executor-checklist rules run, per tenant, and how much they matter.
    pub findings: crate::findings::FindingsConfig,
    /// How the stages after the journal use the machine's cores.
    pub pipeline: PipelineConfig,
    /// Parquet archive settings.
    pub archive: ArchiveConfig,
    /// The write-ahead journal between `protect` and the consumers.
    pub journal: JournalConfig,
    /// Request assembly: completion, memory limits, prices.
    pub assemble: crate::assemble::AssembleConfig,
    /// Which tenant items without a claim of their own are filed under.
    pub tenancy: crate::tenancy::TenancyConfig,
    /// Redaction rules applied by `protect`.
    pub redaction: crate::protect::rules::RedactionConfig,
    /// The key for idempotency-key and `hash`-action HMACs.
    pub hashing: crate::protect::HashingConfig,
    /// Budgets, alarms and their delivery.
    pub budget: crate::budget::config::BudgetConfig,
    /// Downstream OTLP endpoints the protected stream is forwarded to.
    pub export: crate::export::config::ExportConfig,
    /// The daemon's own logs.
    pub log: LogConfig,
    /// `[retention]`: the same as `[archive.retention]` (one of the two, not both).
    #[serde(skip_serializing_if = "crate::archive::retention::RetentionConfig::is_empty")]
    pub retention: crate::archive::retention::RetentionConfig,
}

/// Listening addresses of the three servers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenConfig {
    /// OTLP/gRPC (trace and logs services).
    pub otlp_grpc: SocketAddr,
    /// OTLP/HTTP (`POST /v1/traces`, `POST /v1/logs`).
    pub otlp_http: SocketAddr,
    /// Admin HTTP: `/healthz`, `/readyz`, `/metrics`.
    pub admin: SocketAddr,
}

impl Default for ListenConfig {
    fn default() -> Self {
        ListenConfig {
            otlp_grpc: SocketAddr::from(([127, 0, 0, 1], 4317)),
            otlp_http: SocketAddr::from(([127, 0, 0, 1], 4318)),
            admin: SocketAddr::from(([127, 0, 0, 1], 9464)),
        }
    }
}

/// The `[receive]` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ReceiveConfig {
    /// TLS on both OTLP receivers (and mTLS senders).
    pub tls: crate::receive::tls::TlsConfig,
}

/// Where data is kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// Data directory: holds the journal and the daemon's state, and the archive unless
    /// `archive_dir` names another place.
    pub data_dir: PathBuf,
    /// Where the archive's tables, manifests and work area live, when not in `data_dir`:
    /// one folder several instances (each with its own `data_dir`) write together.
    /// Empty: `data_dir`.
    pub archive_dir: PathBuf,
    /// Object storage the archive is uploaded to as it is written: `s3://bucket/prefix`
    /// (credentials, region and endpoint from the `AWS_*` environment variables) or
    /// `file:///folder`. Each file goes up whole before the manifest lines naming it, so a
    /// reader of the store (`toolwatch query --url`) sees only complete files. Empty: none.
    pub url: String,
    /// How often the daemon uploads what the manifests recorded since its last upload.
    pub upload_every: HumanDuration,
    /// How long an object stays in the store after the line removing it (compaction,
    /// scrub, retention) is uploaded: a reader that listed it just before still finds it.
    pub delete_delay: LimitDuration,
    /// Local copies of uploaded files are deleted once their partition hour ended longer ago
    /// than this: the store then holds them alone (`toolwatch query --url` reads them;
    /// retention and scrub reach them there). `0s`: every local copy is kept.
    pub local_keep: LimitDuration,
    /// Files at least this large are uploaded in parts of 8 MiB (the last smaller), a
    /// failed part aborting the whole upload.
    pub multipart_bytes: ByteSize,
}

impl StorageConfig {
    /// The object store `url` names (`None` when empty). Builds the client only: nothing is
    /// sent, so a store down now is not an error here.
    pub fn remote(
        &self,
    ) -> Result<
        Option<crate::archive::store::remote::RemoteArchive>,
        crate::archive::store::remote::RemoteError,
    > {
        if self.url.is_empty() {
            return Ok(None);
        }
        crate::archive::store::remote::RemoteArchive::open(&self.url).map(Some)
    }
    /// How the uploader works, from these settings.
    pub fn upload_settings(&self) -> crate::archive::store::upload::UploadSettings {
        crate::archive::store::upload::UploadSettings {
            delete_delay: self.delete_delay.0,
            multipart_bytes: self.multipart_bytes.0,
            segment_lines: 10_000,
            consolidate_after: 64,
            consolidate_min: 8,
        }
    }

    /// The archive's root folder.
    pub fn archive_root(&self) -> PathBuf {
        if self.archive_dir.as_os_str().is_empty() {
            self.data_dir.clone()
        } else {
            self.archive_dir.clone()
        }
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            data_dir: PathBuf::from("./toolwatch-data"),
            archive_dir: PathBuf::new(),
            url: String::new(),
            upload_every: HumanDuration(Duration::from_secs(5)),
            delete_delay: LimitDuration(Duration::from_secs(15 * 60)),
            multipart_bytes: ByteSize(32 << 20),
            local_keep: LimitDuration(Duration::ZERO),
        }
    }
}

/// Limits on what the receivers accept; everything is bounded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest request body accepted, as sent (compressed) and after decompression.
    pub max_request_bytes: ByteSize,
    /// Batches waiting for the journal writer; beyond this receivers answer "retry later".
    pub queue_batches: PositiveUsize,
    /// No longer used: receivers refuse at once when the journal writer's queue is full.
    /// Still read, so configuration files written for earlier versions load.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enqueue_timeout: Option<HumanDuration>,
    /// The `Retry-After` / RetryInfo delay suggested to clients when refusing.
    pub retry_after: HumanDuration,
    /// Requests and bytes per second per tenant and per sender.
    pub rate: crate::receive::admission::RatesConfig,
    /// The largest span and log record accepted.
    pub structure: crate::receive::admission::StructureLimits,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_request_bytes: ByteSize(8 * 1024 * 1024),
            queue_batches: PositiveUsize(1024),
            enqueue_timeout: None,
            retry_after: HumanDuration(Duration::from_secs(1)),
            rate: Default::default(),
            structure: Default::default(),
        }
    }
}

/// The write-ahead journal: accepted batches are durable here before receivers answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JournalConfig {
    /// A segment file is closed and the next begun once it holds this many bytes; segments
    /// are removed whole once every consumer has passed them.
    pub segment_bytes: ByteSize,
    /// The journal's bound on disk: past it, receivers refuse new data (HTTP 429, gRPC
    /// `RESOURCE_EXHAUSTED`) until the slowest consumer catches up.
    pub max_bytes: ByteSize,
    /// Longest a batch waits for others to share its fsync (`0s`: only batches already
    /// waiting share it).
    pub group_commit: LimitDuration,
    /// A group is committed early once this many bytes wait.
    pub group_bytes: ByteSize,
    /// On SIGTERM, how long consumers may take to catch up with the journal before the
    /// daemon stops; the rest is replayed at the next start.
    pub shutdown_deadline: HumanDuration,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            segment_bytes: ByteSize(64 * 1024 * 1024),
            max_bytes: ByteSize(4 * 1024 * 1024 * 1024),
            group_commit: LimitDuration(Duration::ZERO),
            group_bytes: ByteSize(4 * 1024 * 1024),
            shutdown_deadline: HumanDuration(Duration::from_secs(30)),
        }
    }
}

/// `[pipeline]`: how the stages after the journal use the machine's cores and memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PipelineConfig {
    /// Threads encoding and writing the archive's spans and logs, each with its own
    /// partitions; 0: one per core available to the process (at most 64).
    pub workers: usize,
    /// Memory for everything held between the receivers and the outputs together (see
    /// [`crate::memory`]).
    pub memory_limit: ByteSize,
    /// The process's resident memory to keep under: the holders give way by what the
    /// process holds beyond their counts (see [`crate::memory`]). None by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resident_limit: Option<ByteSize>,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            workers: 0,
            memory_limit: ByteSize(512 << 20),
            resident_limit: None,
        }
    }
}

/// The smallest `pipeline.memory_limit` accepted.
pub const MIN_MEMORY_LIMIT: u64 = 16 << 20;

impl PipelineConfig {
    /// The archive writer threads to run: `workers`, or the cores available when it is 0.
    pub fn archive_writers(&self) -> usize {
        let n = match self.workers {
            0 => std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            n => n,
        };
        n.clamp(1, crate::archive::write::writers::MAX_WRITERS)
    }
}

/// The daemon's own log output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `text` or `json`.
    pub format: LogFormat,
    /// A `tracing` filter such as `info` or `toolwatch=debug`.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Text,
            level: "info".to_string(),
        }
    }
}

/// Format of the daemon's own logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or a key or value is wrong; the message names the line.
    #[error("{origin}: {message}")]
    Invalid {
        /// The file name, or "embedded defaults".
        origin: String,
        /// The parser's message, with line, column and key.
        message: String,
    },
    /// An environment variable names no key or holds a bad value.
    #[error("environment variable {var}: {message}")]
    Env {
        /// The variable.
        var: String,
        /// What is wrong.
        message: String,
    },
}

impl Config {
    /// Parses TOML text; `origin` names the source in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Invalid {
            origin: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })
    }

    /// Loads the file (or the embedded defaults) and applies `TOOLWATCH_*` variables from `env`.
    pub fn load(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let config = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                    path: p.to_path_buf(),
                    source,
                })?;
                Config::from_toml(&text, &p.display().to_string())?
            }
            None => Config::default(),
        };
        config.with_env_overrides(env)?.with_retention_moved()
    }

    /// `[retention]` moved under `[archive.retention]`, where the archive reads it.
    fn with_retention_moved(mut self) -> Result<Config, ConfigError> {
        if self.retention.is_empty() {
            return Ok(self);
        }
        if !self.archive.retention.is_empty() {
            return Err(ConfigError::Invalid {
                origin: "retention".into(),
                message: "give retention in [retention] or in [archive.retention], not both".into(),
            });
        }
        self.archive.retention = std::mem::take(&mut self.retention);
        Ok(self)
    }

    /// Applies `TOOLWATCH_SECTION__KEY=value` overrides; `__` separates the levels.
    pub fn with_env_overrides(
        self,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut vars: Vec<(String, String)> = env
            .into_iter()
            .filter(|(k, _)| k.starts_with(ENV_PREFIX))
            .collect();
        if vars.is_empty() {
            return Ok(self);
        }
        vars.sort();
        let mut table = toml::Table::try_from(&self).map_err(|e| ConfigError::Invalid {
            origin: "effective configuration".into(),
            message: e.to_string(),
        })?;
        for (var, raw) in vars {
            let path: Vec<String> = var[ENV_PREFIX.len()..]
                .split("__")
                .map(|s| s.to_ascii_lowercase())
                .collect();
            set_path(&mut table, &path, env_value(&raw)).map_err(|message| ConfigError::Env {
                var: var.clone(),
                message,
            })?;
            // Deserialize after each variable so an error names the variable that caused it.
            let candidate: Result<Config, _> = toml::Table::try_into(table.clone());
            if let Err(e) = candidate {
                return Err(ConfigError::Env {
                    var,
                    message: e.message().to_string(),
                });
            }
        }
        toml::Table::try_into(table).map_err(|e: toml::de::Error| ConfigError::Invalid {
            origin: "environment overrides".into(),
            message: e.message().to_string(),
        })
    }

    /// Checks that span several keys: the three servers need distinct addresses, and the
    /// redaction rules must compile.
    pub fn validate(&self) -> Result<(), ConfigError> {
        crate::protect::Protector::from_config(
            &self.redaction,
            crate::protect::KeyedHasher::new(b"validation only"),
        )
        .map_err(|e| ConfigError::Invalid {
            origin: "configuration".into(),
            message: e.to_string(),
        })?;
        self.assemble.prices().map_err(|e| ConfigError::Invalid {
            origin: "assemble.prices_file".into(),
            message: e.to_string(),
        })?;
        self.budget.validate().map_err(|e| ConfigError::Invalid {
            origin: "configuration".into(),
            message: e.to_string(),
        })?;
        self.export.validate().map_err(|e| ConfigError::Invalid {
            origin: "configuration".into(),
            message: e.to_string(),
        })?;
        self.archive.validate().map_err(|e| ConfigError::Invalid {
            origin: e.key.into(),
            message: e.message,
        })?;
        if self.storage.url.is_empty() && !self.storage.local_keep.0.is_zero() {
            return Err(ConfigError::Invalid {
                origin: "storage.local_keep".into(),
                message:
                    "local copies can only go once they are in object storage: set storage.url too"
                        .into(),
            });
        }
        let keep = self.storage.local_keep.0;
        let merged_by = self.archive.compact_after.0 + Duration::from_secs(3600);
        if !keep.is_zero() && keep < merged_by {
            return Err(ConfigError::Invalid {
                origin: "storage.local_keep".into(),
                message: format!(
                    "{} is shorter than archive.compact_after plus an hour ({}): files would leave before compaction merges their hour, and stay small in the store",
                    humantime::format_duration(keep),
                    humantime::format_duration(merged_by)
                ),
            });
        }
        self.storage.remote().map_err(|e| ConfigError::Invalid {
            origin: "storage.url".into(),
            message: e.to_string(),
        })?;
        if self.pipeline.memory_limit.0 < MIN_MEMORY_LIMIT {
            return Err(ConfigError::Invalid {
                origin: "pipeline.memory_limit".into(),
                message: format!(
                    "{} is under the least accepted, 16MiB",
                    self.pipeline.memory_limit.0
                ),
            });
        }
        let resident = self.pipeline.resident_limit.map_or(0, |b| b.0);
        if resident != 0 && resident < self.pipeline.memory_limit.0 {
            return Err(ConfigError::Invalid {
                origin: "pipeline.resident_limit".into(),
                message: format!(
                    "{resident} is under pipeline.memory_limit ({}): the resident memory holds the budget's and more; raise it, or leave it out",
                    self.pipeline.memory_limit.0
                ),
            });
        }
        let memory = crate::memory::MemoryBudget::new(self.pipeline.memory_limit.as_usize());
        let window =
            crate::archive::write::consumer::RecentSpans::memory_bytes(self.archive.dedup_spans.0);
        let share = memory.share(crate::memory::Holder::Windows);
        if window > share {
            return Err(ConfigError::Invalid {
                origin: "archive.dedup_spans".into(),
                message: format!(
                    "{} spans remembered take up to {window} bytes, more than their sixteenth of pipeline.memory_limit ({share}): lower archive.dedup_spans or raise pipeline.memory_limit",
                    self.archive.dedup_spans.0
                ),
            });
        }
        let j = &self.journal;
        if j.max_bytes.0 < j.segment_bytes.0.saturating_mul(4) {
            return Err(ConfigError::Invalid {
                origin: "journal.max_bytes".into(),
                message: format!(
                    "{} is less than 4 x journal.segment_bytes ({}): segments are removed whole, so the journal could fill for good",
                    j.max_bytes.0, j.segment_bytes.0
                ),
            });
        }
        if j.max_bytes.0 < self.limits.max_request_bytes.0.saturating_mul(2) {
            return Err(ConfigError::Invalid {
                origin: "journal.max_bytes".into(),
                message: format!(
                    "{} is less than 2 x limits.max_request_bytes ({}): a large request could never be journalled",
                    j.max_bytes.0, self.limits.max_request_bytes.0
                ),
            });
        }
        crate::receive::auth::SenderDirectory::from_config(&self.auth).map_err(|e| {
            ConfigError::Invalid {
                origin: "auth".into(),
                message: e.to_string(),
            }
        })?;
        crate::receive::auth::AdminAccess::from_config(&self.auth, &self.admin).map_err(
            |message| ConfigError::Invalid {
                origin: "admin".into(),
                message: message.to_string(),
            },
        )?;
        if self.admin.tls && !self.receive.tls.enabled() {
            return Err(ConfigError::Invalid {
                origin: "admin.tls".into(),
                message: "needs receive.tls.cert_file and key_file (the admin port serves that certificate)".into(),
            });
        }
        self.findings
            .validate()
            .map_err(|message| ConfigError::Invalid {
                origin: "findings".into(),
                message,
            })?;
        self.limits
            .rate
            .validate()
            .map_err(|message| ConfigError::Invalid {
                origin: "limits.rate".into(),
                message,
            })?;
        crate::receive::tls::server_config(&self.receive.tls).map_err(|e| {
            ConfigError::Invalid {
                origin: "receive.tls".into(),
                message: e.to_string(),
            }
        })?;
        let l = &self.listen;
        let named = [
            ("listen.otlp_grpc", l.otlp_grpc),
            ("listen.otlp_http", l.otlp_http),
            ("listen.admin", l.admin),
        ];
        for (i, (a_name, a)) in named.iter().enumerate() {
            for (b_name, b) in &named[i + 1..] {
                if a == b && a.port() != 0 {
                    return Err(ConfigError::Invalid {
                        origin: "configuration".into(),
                        message: format!(
                            "{a_name} and {b_name} are both {a}; each server needs its own address"
                        ),
                    });
                }
            }
        }
        if self.auth.mode == crate::receive::auth::AuthMode::Off {
            if let Some((name, addr)) = named.iter().find(|(_, a)| !a.ip().is_loopback()) {
                return Err(ConfigError::Invalid {
                    origin: "auth.mode".into(),
                    message: format!(
                        "is \"off\" but {name} is {addr}, which other machines can reach: anyone there could write as any tenant. Set auth.mode = \"required\" with [[auth.senders]], or listen on 127.0.0.1 / ::1 only"
                    ),
                });
            }
        }
        Ok(())
    }

    /// The configuration as TOML, every key present.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }

    /// The configuration as TOML for people to read: webhook and export header values are
    /// masked, and of their URLs only the scheme, host and port are shown (user, password,
    /// path and query often hold credentials, as in chat-webhook URLs).
    pub fn to_display_toml(&self) -> String {
        let mut shown = self.clone();
        for w in &mut shown.budget.webhooks {
            mask_headers(&mut w.headers);
            w.url = masked_url(&w.url);
        }
        for e in &mut shown.export.endpoints {
            mask_headers(&mut e.headers);
            e.url = masked_url(&e.url);
        }
        // A token's hash is no credential, but it lets anyone test a guess offline.
        if !shown.admin.token_sha256.is_empty() {
            shown.admin.token_sha256 = "<hidden>".into();
        }
        for s in &mut shown.auth.senders {
            for h in &mut s.token_sha256 {
                *h = "<hidden>".into();
            }
        }
        for r in &mut shown.admin.readers {
            for h in &mut r.token_sha256 {
                *h = "<hidden>".into();
            }
        }
        shown.to_toml()
    }
}

fn mask_headers(headers: &mut std::collections::BTreeMap<String, String>) {
    for v in headers.values_mut() {
        *v = "<masked>".into();
    }
}

/// A URL reduced to its scheme, host and port.
fn masked_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(url) => {
            let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
            let host = url.host_str().unwrap_or("");
            format!("{}://{host}{port}/<masked>", url.scheme())
        }
        Err(_) => "<masked>".into(),
    }
}

/// A value from the environment: TOML syntax where it parses (numbers, booleans), else a string.
fn env_value(raw: &str) -> toml::Value {
    let doc = format!("v = {raw}");
    match toml::from_str::<toml::Table>(&doc) {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(raw.to_string())),
        Err(_) => toml::Value::String(raw.to_string()),
    }
}

/// Keys without a default value (absent from the defaults' table), which the environment may
/// still set.
const OPTIONAL_KEYS: &[&str] = &["pipeline.resident_limit"];

fn set_path(table: &mut toml::Table, path: &[String], value: toml::Value) -> Result<(), String> {
    let (last, parents) = match path.split_last() {
        Some(split) => split,
        None => return Err("names no key".into()),
    };
    let mut current = table;
    for (i, part) in parents.iter().enumerate() {
        current = match current.get_mut(part) {
            Some(toml::Value::Table(t)) => t,
            _ => {
                return Err(format!(
                    "no configuration section `{}`",
                    path[..=i].join(".")
                ))
            }
        };
    }
    if !current.contains_key(last) && !OPTIONAL_KEYS.contains(&path.join(".").as_str()) {
        return Err(format!("no configuration key `{}`", path.join(".")));
    }
    current.insert(last.clone(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn without_auth_every_listener_must_be_loopback() {
        let mut c = Config::default();
        c.validate().expect("loopback defaults");
        c.listen.otlp_http = "0.0.0.0:4318".parse().expect("addr");
        let e = c.validate().expect_err("reachable without auth");
        assert!(
            e.to_string().contains("listen.otlp_http is 0.0.0.0:4318"),
            "{e}"
        );
        c.listen.otlp_http = "[::1]:4318".parse().expect("addr");
        c.validate().expect("::1 is loopback");
        c.listen.admin = "10.0.0.5:9464".parse().expect("addr");
        assert!(c.validate().is_err(), "the admin listener counts too");
        c.auth = toml::from_str(&format!(
            "mode = \"required\"\n[[senders]]\nname = \"eu\"\ntoken_sha256 = \"{}\"\ntenants = [\"acme\"]\n",
            crate::receive::auth::token_sha256("s3cret-token")
        ))
        .expect("auth");
        c.validate().expect("auth required");
        let shown = c.to_display_toml();
        assert!(!shown.contains(&crate::receive::auth::token_sha256("s3cret-token")));
        assert!(!shown.contains("s3cret-token"));
        c.auth.senders[0].token_sha256 = vec!["nothex".into()];
        let e = c.validate().expect_err("bad hash");
        assert!(
            e.to_string().contains("not 64 hex digits") && !e.to_string().contains("nothex"),
            "{e}"
        );
    }

    #[test]
    fn a_resident_limit_is_read_and_one_under_the_memory_limit_is_refused() {
        let c = Config::from_toml("[pipeline]\nresident_limit = \"640MiB\"\n", "r.toml")
            .expect("parses");
        assert_eq!(c.pipeline.resident_limit, Some(ByteSize(640 << 20)));
        c.validate().expect("above the memory limit");
        assert_eq!(Config::default().pipeline.resident_limit, None);
        let c = Config::from_toml("[pipeline]\nresident_limit = \"256MiB\"\n", "r.toml")
            .expect("parses");
        let err = c.validate().expect_err("under the memory limit");
        assert!(
            err.to_string()
                .starts_with("pipeline.resident_limit: 268435456 is under pipeline.memory_limit"),
            "{err}"
        );
    }

    #[test]
    fn a_journal_too_small_for_its_segments_is_refused() {
        let mut c = Config::default();
        c.journal.max_bytes = ByteSize(64 << 20);
        let err = c.validate().expect_err("max_bytes = segment_bytes");
        assert!(
            err.to_string()
                .starts_with("journal.max_bytes: 67108864 is less than 4 x journal.segment_bytes"),
            "{err}"
        );
        // A file written for an earlier version, with the retired key, still loads.
        let old = Config::from_toml("[limits]\nenqueue_timeout = \"2s\"\n", "old.toml");
        assert!(old.is_ok(), "{old:?}");
    }

    #[test]
    fn every_default_survives_an_environment_override() {
        // An override round-trips the whole effective configuration through TOML, so every
        // default must read back (a "0s" default once did not).
        let c = Config::default()
            .with_env_overrides([("TOOLWATCH_LOG__FORMAT".to_string(), "json".to_string())])
            .expect("defaults read back");
        assert_eq!(c.log.format, LogFormat::Json);
        assert_eq!(c.archive.pause_per_record.0, Duration::ZERO);
    }

    use super::*;

    #[test]
    fn embedded_defaults_match_the_documented_file() {
        let documented = include_str!("../../config/toolwatch.toml");
        let parsed = Config::from_toml(documented, "config/toolwatch.toml").expect("parses");
        assert_eq!(parsed, Config::default());
    }

    #[test]
    fn effective_config_round_trips() {
        let text = Config::default().to_toml();
        assert_eq!(
            Config::from_toml(&text, "x").expect("parses"),
            Config::default()
        );
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let err = Config::from_toml("[archive]\nzstd_level = 3\nmax_fle_bytes = 10\n", "f.toml")
            .expect_err("unknown key");
        let msg = err.to_string();
        assert!(msg.contains("line 3"), "{msg}");
        assert!(msg.contains("max_fle_bytes"), "{msg}");
    }

    #[test]
    fn bad_value_names_line() {
        let err = Config::from_toml("[archive]\n\nzstd_level = 40\n", "f.toml").expect_err("bad");
        let msg = err.to_string();
        assert!(msg.contains("line 3"), "{msg}");
        assert!(msg.contains("between 1 and 22"), "{msg}");
        let err = Config::from_toml("[listen]\notlp_grpc = \"nowhere\"\n", "f.toml")
            .expect_err("bad addr");
        assert!(err.to_string().contains("line 2"), "{err}");
    }

    #[test]
    fn retention_may_be_given_top_level_as_the_issue_names_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("c.toml");
        std::fs::write(
            &file,
            "[retention]\nspans = \"90d\"\ntenants.acme.spans = \"400d\"\n",
        )
        .expect("write");
        let c = Config::load(Some(&file), Vec::new()).expect("load");
        let day = std::time::Duration::from_secs(86_400);
        assert_eq!(c.archive.retention.spans.map(|d| d.0), Some(90 * day));
        assert_eq!(
            c.archive.retention.tenants["acme"].spans.map(|d| d.0),
            Some(400 * day)
        );
        assert!(c.retention.is_empty());
        std::fs::write(
            &file,
            "[retention]\nspans = \"90d\"\n[archive.retention]\nlogs = \"9d\"\n",
        )
        .expect("write");
        let e = Config::load(Some(&file), Vec::new()).expect_err("both");
        assert!(e.to_string().contains("not both"), "{e}");
    }

    #[test]
    fn sizes_parse() {
        assert_eq!("64MiB".parse::<ByteSize>(), Ok(ByteSize(64 << 20)));
        assert_eq!("512 KB".parse::<ByteSize>(), Ok(ByteSize(512_000)));
        assert_eq!("17".parse::<ByteSize>(), Ok(ByteSize(17)));
        assert!("0".parse::<ByteSize>().is_err());
        assert!("12 parsecs".parse::<ByteSize>().is_err());
        assert_eq!(ByteSize(64 << 20).to_string(), "64MiB");
        assert_eq!(ByteSize(1000).to_string(), "1000B");
    }

    #[test]
    fn display_masks_export_header_values_and_url_paths() {
        let text = "[[export.endpoints]]\nname = \"vendor\"\nprotocol = \"http\"\n\
            url = \"https://alice9:hunter2@otlp.vendor.example:4318/tenant/t0ken?key=k3y\"\n\
            headers = { authorization = \"Bearer s3cret\" }\n";
        let c = Config::from_toml(text, "t").expect("parses");
        let shown = c.to_display_toml();
        for secret in ["s3cret", "t0ken", "k3y", "alice9", "hunter2"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(
            shown.contains("url = \"https://otlp.vendor.example:4318/<masked>\""),
            "{shown}"
        );
        assert!(shown.contains("authorization = \"<masked>\""), "{shown}");
        // Only the display masks them.
        assert!(c.to_toml().contains("Bearer s3cret"));
    }

    #[test]
    fn env_overrides_apply_and_name_bad_variables() {
        let env = vec![
            ("TOOLWATCH_ARCHIVE__ZSTD_LEVEL".to_string(), "7".to_string()),
            (
                "TOOLWATCH_STORAGE__DATA_DIR".to_string(),
                "/tmp/tw".to_string(),
            ),
            ("PATH".to_string(), "/bin".to_string()),
        ];
        let c = Config::default().with_env_overrides(env).expect("applies");
        assert_eq!(c.archive.zstd_level, ZstdLevel(7));
        assert_eq!(c.storage.data_dir, PathBuf::from("/tmp/tw"));

        let err = Config::default()
            .with_env_overrides(vec![("TOOLWATCH_ARCHIVE__NOPE".into(), "1".into())])
            .expect_err("unknown");
        assert!(err.to_string().contains("TOOLWATCH_ARCHIVE__NOPE"), "{err}");
        let err = Config::default()
            .with_env_overrides(vec![("TOOLWATCH_ARCHIVE__ZSTD_LEVEL".into(), "99".into())])
            .expect_err("bad value");
        assert!(err.to_string().contains("between 1 and 22"), "{err}");
    }

    #[test]
    fn a_storage_url_that_cannot_be_written_to_is_refused_naming_the_key() {
        let mut c = Config::default();
        c.storage.url = "gs://bucket/prefix".into();
        let err = c.validate().expect_err("gs is not supported");
        assert_eq!(
            err.to_string(),
            "storage.url: storage.url \"gs://bucket/prefix\": unsupported scheme \"gs\" (s3 or file)"
        );
        c.storage.url = "s3://bucket/prefix".into();
        c.validate()
            .expect("an S3 URL builds a client without a request");
        c.storage.local_keep = LimitDuration(Duration::from_secs(600));
        let err = c.validate().expect_err("before compaction");
        assert!(
            err.to_string().starts_with(
                "storage.local_keep: 10m is shorter than archive.compact_after plus an hour"
            ),
            "{err}"
        );
        c.storage.local_keep = LimitDuration(Duration::from_secs(7 * 86_400));
        c.validate().expect("a week");
        c.storage.url.clear();
        let err = c.validate().expect_err("nowhere to keep them");
        assert!(err.to_string().contains("set storage.url too"), "{err}");
    }
}
