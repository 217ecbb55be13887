//! Who may send: bearer tokens on both receivers, each naming a sender and the tenants it
//! may write.
//!
//! Senders present `authorization: Bearer <token>` (OTLP/HTTP header, gRPC metadata: the
//! conventions every OTLP exporter speaks through `OTEL_EXPORTER_OTLP_HEADERS`). The
//! configuration holds only the SHA-256 of each token, so neither the file nor `check-config`
//! holds a usable credential; a presented token is hashed and looked up, and the token itself
//! is never stored, logged or counted. The directory is replaced whole on SIGHUP: a request
//! holds the directory it was authenticated against, so rotation never affects one in flight.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError, RwLock};

use axum::http::HeaderMap;
use serde::{Deserialize, Deserializer, Serialize};
use sha2::{Digest, Sha256};

pub use crate::event::{Sender, SenderTenants};

/// The `[auth]` section of the config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// `off` (the default: only allowed while every listener is loopback) or `required`.
    pub mode: AuthMode,
    /// The senders that may write.
    pub senders: Vec<SenderConfig>,
}

/// Whether senders must authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// Anyone who reaches a receiver may write as any tenant it names.
    #[default]
    Off,
    /// Every OTLP request needs a known bearer token.
    Required,
}

/// One `[[auth.senders]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SenderConfig {
    /// The sender's name: in the `sender` column, metric labels and alarms.
    pub name: String,
    /// Hex SHA-256 of the sender's bearer token, or a list of them (an old and a new token
    /// while a rotation rolls out).
    #[serde(default, deserialize_with = "one_or_many")]
    pub token_sha256: Vec<String>,
    /// Names a verified client certificate may carry (a SAN DNS or URI name, or the
    /// subject's CN) to authenticate as this sender over mTLS (`receive.tls.client_ca_file`).
    #[serde(default)]
    pub client_names: Vec<String>,
    /// Tenants this sender may write; `["*"]` for any. The first is where a claim outside the
    /// list is filed.
    pub tenants: Vec<String>,
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

/// What is wrong with an `[auth]` section.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthConfigError {
    /// `mode = "required"` with nobody allowed in.
    #[error("auth.mode is \"required\" but auth.senders is empty: no sender could write")]
    NoSenders,
    /// A sender without a usable name.
    #[error("auth.senders[{index}].name {name:?} must be 1-64 letters, digits, '.', '_' or '-'")]
    BadName {
        /// Position in the list.
        index: usize,
        /// The name given.
        name: String,
    },
    /// Two senders with one name.
    #[error("auth.senders: the name {0:?} is used twice")]
    DuplicateName(String),
    /// A hash that is not 64 hex digits (the value itself is not repeated).
    #[error("auth.senders[{index}] ({name}): token_sha256 entry {entry} is not 64 hex digits (the hex SHA-256 of the token, e.g. `printf %s \"$TOKEN\" | sha256sum`), optionally followed by ` until <RFC 3339 time>`")]
    BadHash {
        /// Position in the list.
        index: usize,
        /// The sender's name.
        name: String,
        /// Position in its hash list.
        entry: usize,
    },
    /// A sender without a credential.
    #[error("auth.senders[{index}] ({name}): neither token_sha256 nor client_names is set")]
    NoHash {
        /// Position in the list.
        index: usize,
        /// The sender's name.
        name: String,
    },
    /// One client certificate name for two senders.
    #[error("auth.senders: {first} and {second} both list the client name {name:?}")]
    SharedClientName {
        /// The first sender.
        first: String,
        /// The second.
        second: String,
        /// The name.
        name: String,
    },
    /// One token for two senders: it could not say which one sent.
    #[error("auth.senders: {first} and {second} have the same token hash; each sender needs its own token")]
    SharedHash {
        /// The first sender.
        first: String,
        /// The second.
        second: String,
    },
    /// A sender with no tenants, or a bad tenant name.
    #[error("auth.senders[{index}] ({name}): {message}")]
    BadTenants {
        /// Position in the list.
        index: usize,
        /// The sender's name.
        name: String,
        /// What is wrong.
        message: String,
    },
}

/// Why a request was not let in; the label of `toolwatch_auth_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthFailure {
    /// No `authorization` header or metadata.
    #[error("authentication required: send `authorization: Bearer <token>`")]
    Missing,
    /// A header that is not `Bearer <token>`.
    #[error("authentication failed: the authorization header is not `Bearer <token>`")]
    Malformed,
    /// A token no sender has.
    #[error("authentication failed: the token is not one toolwatch knows")]
    Unknown,
    /// A sender's token past the time its entry gave (`<hash> until <time>`).
    #[error("authentication failed: the token has expired")]
    Expired,
    /// A console reader's token, on an admin endpoint that is not the console.
    #[error("authentication failed: this token reads the console (/ui/) only")]
    ConsoleOnly,
}

impl AuthFailure {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthFailure::Missing => "missing",
            AuthFailure::Malformed => "malformed",
            AuthFailure::Unknown => "unknown_token",
            AuthFailure::Expired => "expired_token",
            AuthFailure::ConsoleOnly => "console_only_token",
        }
    }
}

/// The senders of one configuration, by token hash.
#[derive(Debug, Default)]
pub struct SenderDirectory {
    required: bool,
    /// Each token hash's sender, and the time (ns since the epoch) it stops working.
    by_hash: BTreeMap<[u8; 32], (Arc<Sender>, Option<i64>)>,
    by_client_name: BTreeMap<String, Arc<Sender>>,
}

impl SenderDirectory {
    /// Checks and compiles `[auth]`.
    pub fn from_config(config: &AuthConfig) -> Result<SenderDirectory, AuthConfigError> {
        let required = config.mode == AuthMode::Required;
        if required && config.senders.is_empty() {
            return Err(AuthConfigError::NoSenders);
        }
        let mut names = BTreeSet::new();
        let mut by_hash: BTreeMap<[u8; 32], (Arc<Sender>, Option<i64>)> = BTreeMap::new();
        let mut by_client_name: BTreeMap<String, Arc<Sender>> = BTreeMap::new();
        for (index, s) in config.senders.iter().enumerate() {
            if !valid_name(&s.name) {
                return Err(AuthConfigError::BadName {
                    index,
                    name: s.name.clone(),
                });
            }
            if !names.insert(s.name.as_str()) {
                return Err(AuthConfigError::DuplicateName(s.name.clone()));
            }
            let sender = Arc::new(Sender {
                name: s.name.as_str().into(),
                tenants: tenants_of(index, s)?,
            });
            if s.token_sha256.is_empty() && s.client_names.is_empty() {
                return Err(AuthConfigError::NoHash {
                    index,
                    name: s.name.clone(),
                });
            }
            for n in &s.client_names {
                if let Some(other) = by_client_name.insert(n.clone(), Arc::clone(&sender)) {
                    if other.name != sender.name {
                        return Err(AuthConfigError::SharedClientName {
                            first: other.name.to_string(),
                            second: s.name.clone(),
                            name: n.clone(),
                        });
                    }
                }
            }
            for (entry, h) in s.token_sha256.iter().enumerate() {
                let (hash, until) = parse_entry(h).ok_or_else(|| AuthConfigError::BadHash {
                    index,
                    name: s.name.clone(),
                    entry,
                })?;
                if let Some((other, _)) = by_hash.insert(hash, (Arc::clone(&sender), until)) {
                    if other.name != sender.name {
                        return Err(AuthConfigError::SharedHash {
                            first: other.name.to_string(),
                            second: s.name.clone(),
                        });
                    }
                }
            }
        }
        Ok(SenderDirectory {
            required,
            by_hash,
            by_client_name,
        })
    }

    /// True when requests must authenticate.
    pub fn required(&self) -> bool {
        self.required
    }

    /// Number of senders.
    pub fn senders(&self) -> usize {
        self.by_hash
            .values()
            .map(|(s, _)| s)
            .chain(self.by_client_name.values())
            .map(|s| &*s.name)
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// The sender a request's headers name: `Ok(None)` when auth is off and nothing was
    /// presented. With auth off a presented token is still honoured, so senders can be
    /// configured before auth is switched on.
    ///
    /// A bearer token decides when one is sent; otherwise the names of a verified client
    /// certificate (`client_names`, from [`super::tls`]) may name a sender.
    pub fn authenticate(
        &self,
        headers: &HeaderMap,
        client_names: &[String],
    ) -> Result<Option<Arc<Sender>>, AuthFailure> {
        let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else {
            if let Some(s) = client_names.iter().find_map(|n| self.by_client_name.get(n)) {
                return Ok(Some(Arc::clone(s)));
            }
            return if self.required {
                Err(AuthFailure::Missing)
            } else {
                Ok(None)
            };
        };
        let token = bearer_token(value.as_bytes()).ok_or(AuthFailure::Malformed)?;
        let hash: [u8; 32] = Sha256::digest(token).into();
        match self.by_hash.get(&hash) {
            Some((_, Some(until))) if crate::clock::now_ns() >= *until => Err(AuthFailure::Expired),
            Some((s, _)) => Ok(Some(Arc::clone(s))),
            None if self.required => Err(AuthFailure::Unknown),
            None => Ok(None),
        }
    }
}

/// The directory in force; SIGHUP swaps in a new one.
#[derive(Debug, Default)]
pub struct SharedDirectory(RwLock<Arc<SenderDirectory>>);

impl SharedDirectory {
    /// A shared directory starting with `d`.
    pub fn new(d: SenderDirectory) -> SharedDirectory {
        SharedDirectory(RwLock::new(Arc::new(d)))
    }

    /// The directory now.
    pub fn current(&self) -> Arc<SenderDirectory> {
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Puts `d` in force for requests that start from now on.
    pub fn replace(&self, d: SenderDirectory) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(d);
    }
}

/// The token of `Bearer <token>` (scheme case-insensitive, one or more blanks).
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = rest.trim_ascii();
    (rest.first().is_some_and(|c| *c == b' ' || *c == b'\t') && !token.is_empty()).then_some(token)
}

/// A `token_sha256` entry: `<hex>`, or `<hex> until <RFC 3339 time>` for a token that stops
/// working then (the old token of a rotation).
fn parse_entry(entry: &str) -> Option<([u8; 32], Option<i64>)> {
    match entry.split_once(" until ") {
        None => Some((parse_hash(entry)?, None)),
        Some((h, t)) => {
            let until = chrono::DateTime::parse_from_rfc3339(t.trim()).ok()?;
            // Past the nanosecond range (1677 to 2262): long ended, or never ends.
            let ns = until
                .timestamp_nanos_opt()
                .or_else(|| (until.timestamp() < 0).then_some(i64::MIN));
            Some((parse_hash(h)?, ns))
        }
    }
}

fn parse_hash(h: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(h.trim(), &mut out).ok()?;
    Some(out)
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

fn tenants_of(index: usize, s: &SenderConfig) -> Result<SenderTenants, AuthConfigError> {
    let bad = |message: String| AuthConfigError::BadTenants {
        index,
        name: s.name.clone(),
        message,
    };
    match s.tenants.as_slice() {
        [] => Err(bad(
            "tenants is empty: list the tenants it may write, or [\"*\"] for any".into(),
        )),
        [any] if any == "*" => Ok(SenderTenants::Any),
        list => {
            for t in list {
                if t == "*" {
                    return Err(bad("\"*\" must be the only entry of tenants".into()));
                }
                if t.is_empty() || t.len() > 128 || t.chars().any(char::is_control) {
                    return Err(bad(format!(
                        "tenant {t:?} is not a tenant name (1-128 characters, no control characters)"
                    )));
                }
            }
            Ok(SenderTenants::Listed(list.to_vec()))
        }
    }
}

/// `[admin]`: TLS and a token for the admin port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Serve the admin port over TLS with `receive.tls`'s certificate and key.
    pub tls: bool,
    /// Hex SHA-256 of the admin token. With `auth.mode = "required"`, every admin endpoint but
    /// `/healthz` and `/readyz` (and `/metrics` with `open_metrics`) needs
    /// `authorization: Bearer <token>`; without a token configured, they answer 401 to all.
    pub token_sha256: String,
    /// Leave `/metrics` open without a token (as many Prometheus setups expect).
    pub open_metrics: bool,
    /// Tokens that read the console (`/ui/`) only, each for some tenants.
    pub readers: Vec<ConsoleReaderConfig>,
}

/// `[[admin.readers]]`: a token for the console that sees only some tenants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleReaderConfig {
    /// A name for the reader (logs and `check-config`).
    pub name: String,
    /// Hex SHA-256 of each of its tokens.
    pub token_sha256: Vec<String>,
    /// The tenants whose rows it may read (at least one).
    pub tenants: Vec<String>,
}

/// The name of the cookie that carries a console login (the token itself, `HttpOnly`,
/// `SameSite=Strict`, for `/ui` only), percent-encoded.
pub const CONSOLE_COOKIE: &str = "toolwatch_token";

/// What an admitted request may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminGrant {
    /// Everything: the admin token, or no auth required.
    All,
    /// The console only, for these tenants.
    Tenants(Vec<String>),
}

/// Who may use the admin endpoints.
#[derive(Debug, Clone, Default)]
pub struct AdminAccess {
    required: bool,
    token: Option<[u8; 32]>,
    open_metrics: bool,
    readers: Vec<([u8; 32], Vec<String>)>,
}

/// The console's pages (and its login), where a reader's token and the login cookie count.
pub fn is_console(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

/// The token of a console login cookie among `headers`' cookies.
fn cookie_token(headers: &HeaderMap) -> Option<Vec<u8>> {
    let prefix = format!("{CONSOLE_COOKIE}=");
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix(&prefix).map(str::to_string))
        .map(|v| percent_decode(v.as_bytes()))
        .filter(|t| !t.is_empty())
}

/// `%XX` escapes decoded (a cookie value cannot hold every byte a token may).
fn percent_decode(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            v[i],
            v.get(i + 1).copied().and_then(hex),
            v.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

impl AdminAccess {
    /// From `[auth]` and `[admin]`; an error names what is wrong.
    pub fn from_config(auth: &AuthConfig, admin: &AdminConfig) -> Result<AdminAccess, String> {
        let token =
            if admin.token_sha256.is_empty() {
                None
            } else {
                Some(parse_hash(&admin.token_sha256).ok_or(
                    "admin.token_sha256 is not 64 hex digits (the hex SHA-256 of the token)",
                )?)
            };
        let mut readers = Vec::new();
        for r in &admin.readers {
            if !valid_name(&r.name) {
                return Err(format!(
                    "admin.readers: name {:?} is not 1-64 letters, digits, '.', '_' or '-'",
                    r.name
                ));
            }
            if r.tenants.is_empty() || r.tenants.iter().any(|t| t.is_empty() || t == "*") {
                return Err(format!(
                    "admin.readers {:?}: tenants must name at least one tenant (no \"*\": the admin token reads every tenant)",
                    r.name
                ));
            }
            if r.token_sha256.is_empty() {
                return Err(format!("admin.readers {:?}: no token_sha256", r.name));
            }
            for h in &r.token_sha256 {
                let hash = parse_hash(h).ok_or_else(|| {
                    format!(
                        "admin.readers {:?}: a token_sha256 is not 64 hex digits (the hex SHA-256 of the token)",
                        r.name
                    )
                })?;
                readers.push((hash, r.tenants.clone()));
            }
        }
        Ok(AdminAccess {
            required: auth.mode == AuthMode::Required,
            token,
            open_metrics: admin.open_metrics,
            readers,
        })
    }

    /// Whether a request for `path` with `headers` may be answered, and what it may read;
    /// the refusal's reason. On the console's pages a login cookie counts as the bearer
    /// token, and a reader's token admits them for its tenants.
    pub fn admit(&self, path: &str, headers: &HeaderMap) -> Result<AdminGrant, AuthFailure> {
        let open = matches!(path, "/healthz" | "/readyz" | "/ui/login" | "/ui/style.css")
            || (path == "/metrics" && self.open_metrics)
            || !self.required;
        if open {
            return Ok(AdminGrant::All);
        }
        let token = match headers.get(axum::http::header::AUTHORIZATION) {
            Some(value) => bearer_token(value.as_bytes())
                .ok_or(AuthFailure::Malformed)?
                .to_vec(),
            None if is_console(path) => cookie_token(headers).ok_or(AuthFailure::Missing)?,
            None => return Err(AuthFailure::Missing),
        };
        match self.grant_of(&token) {
            Some(AdminGrant::Tenants(_)) if !is_console(path) => Err(AuthFailure::ConsoleOnly),
            Some(grant) => Ok(grant),
            None => Err(AuthFailure::Unknown),
        }
    }

    /// What `token` may read: the admin token everything, a reader's its tenants.
    pub fn grant_of(&self, token: &[u8]) -> Option<AdminGrant> {
        let hash: [u8; 32] = Sha256::digest(token).into();
        if self.token == Some(hash) {
            return Some(AdminGrant::All);
        }
        self.readers
            .iter()
            .find(|(h, _)| *h == hash)
            .map(|(_, tenants)| AdminGrant::Tenants(tenants.clone()))
    }

    /// True when a token is needed (`auth.mode = "required"`).
    pub fn required(&self) -> bool {
        self.required
    }
}

/// Hex SHA-256 of a token, as `token_sha256` wants it.
pub fn token_sha256(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn config(mode: AuthMode) -> AuthConfig {
        AuthConfig {
            mode,
            senders: vec![
                SenderConfig {
                    name: "executor-eu".into(),
                    token_sha256: vec![token_sha256("tok-eu-1"), token_sha256("tok-eu-2")],
                    client_names: vec!["executor-eu.clients.example".into()],
                    tenants: vec!["acme".into(), "globex".into()],
                },
                SenderConfig {
                    name: "gateway".into(),
                    token_sha256: vec![token_sha256("tok-gw").to_uppercase()],
                    client_names: Vec::new(),
                    tenants: vec!["*".into()],
                },
            ],
        }
    }

    fn headers(auth: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(a) = auth {
            h.insert(
                axum::http::header::AUTHORIZATION,
                HeaderValue::from_str(a).expect("header"),
            );
        }
        h
    }

    #[test]
    fn tokens_name_their_sender_and_failures_their_reason() {
        let d = SenderDirectory::from_config(&config(AuthMode::Required)).expect("valid");
        assert_eq!(d.senders(), 2);
        let eu = d
            .authenticate(&headers(Some("Bearer tok-eu-2")), &[])
            .expect("ok");
        assert_eq!(eu.as_deref().map(|s| &*s.name), Some("executor-eu"));
        let gw = d
            .authenticate(&headers(Some("bearer   tok-gw ")), &[])
            .expect("ok");
        assert_eq!(
            gw.as_ref().map(|s| s.tenants.clone()),
            Some(SenderTenants::Any)
        );
        assert_eq!(
            d.authenticate(&headers(None), &[]),
            Err(AuthFailure::Missing)
        );
        assert_eq!(
            d.authenticate(&headers(Some("Bearer tok-eu-3")), &[]),
            Err(AuthFailure::Unknown)
        );
        for bad in [
            "Basic dG9rLWV1LTE=",
            "Bearer",
            "Bearer ",
            "Bearertok-eu-1",
            "tok-eu-1",
        ] {
            assert_eq!(
                d.authenticate(&headers(Some(bad)), &[]),
                Err(AuthFailure::Malformed),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_verified_client_certificate_names_its_sender_unless_a_token_is_sent() {
        let d = SenderDirectory::from_config(&config(AuthMode::Required)).expect("valid");
        let names = [
            "other.example".to_string(),
            "executor-eu.clients.example".to_string(),
        ];
        let s = d.authenticate(&headers(None), &names).expect("ok");
        assert_eq!(s.as_deref().map(|s| &*s.name), Some("executor-eu"));
        let s = d
            .authenticate(&headers(Some("Bearer tok-gw")), &names)
            .expect("ok");
        assert_eq!(
            s.as_deref().map(|s| &*s.name),
            Some("gateway"),
            "the token decides"
        );
        assert_eq!(
            d.authenticate(&headers(None), &["stranger.example".to_string()]),
            Err(AuthFailure::Missing)
        );
        let mut c = config(AuthMode::Required);
        c.senders[1].client_names = vec!["executor-eu.clients.example".into()];
        assert!(matches!(
            SenderDirectory::from_config(&c),
            Err(AuthConfigError::SharedClientName { .. })
        ));
        c.senders[1].client_names.clear();
        c.senders[1].token_sha256.clear();
        assert!(matches!(
            SenderDirectory::from_config(&c),
            Err(AuthConfigError::NoHash { .. })
        ));
    }

    #[test]
    fn the_admin_port_needs_its_own_token_when_auth_is_required() {
        let admin = AdminConfig {
            tls: false,
            token_sha256: token_sha256("admin-tok"),
            open_metrics: false,
            readers: Vec::new(),
        };
        let a = AdminAccess::from_config(&config(AuthMode::Required), &admin).expect("valid");
        for open in ["/healthz", "/readyz"] {
            assert_eq!(a.admit(open, &headers(None)), Ok(AdminGrant::All));
        }
        for closed in ["/metrics", "/v1/budgets", "/v1/archive/buffered"] {
            assert_eq!(a.admit(closed, &headers(None)), Err(AuthFailure::Missing));
            assert_eq!(
                a.admit(closed, &headers(Some("Bearer tok-eu-1"))),
                Err(AuthFailure::Unknown),
                "a sender's token is not the admin's"
            );
            assert_eq!(
                a.admit(closed, &headers(Some("Bearer admin-tok"))),
                Ok(AdminGrant::All)
            );
        }
        let open = AdminConfig {
            open_metrics: true,
            ..admin.clone()
        };
        let a = AdminAccess::from_config(&config(AuthMode::Required), &open).expect("valid");
        assert_eq!(a.admit("/metrics", &headers(None)), Ok(AdminGrant::All));
        let off = AdminAccess::from_config(&config(AuthMode::Off), &admin).expect("valid");
        assert_eq!(
            off.admit("/v1/budgets", &headers(None)),
            Ok(AdminGrant::All)
        );
        let none = AdminConfig::default();
        let a = AdminAccess::from_config(&config(AuthMode::Required), &none).expect("valid");
        assert_eq!(
            a.admit("/v1/budgets", &headers(Some("Bearer anything"))),
            Err(AuthFailure::Unknown),
            "no admin token configured: closed"
        );
        let bad = AdminConfig {
            token_sha256: "xyz".into(),
            ..none
        };
        assert!(AdminAccess::from_config(&config(AuthMode::Required), &bad).is_err());
    }

    #[test]
    fn a_console_reader_reads_its_tenants_pages_only_by_header_or_cookie() {
        let admin = AdminConfig {
            token_sha256: token_sha256("admin-tok"),
            readers: vec![ConsoleReaderConfig {
                name: "acme-oncall".into(),
                token_sha256: vec![token_sha256("read+acme/1")],
                tenants: vec!["acme".into()],
            }],
            ..Default::default()
        };
        let a = AdminAccess::from_config(&config(AuthMode::Required), &admin).expect("valid");
        let acme = Ok(AdminGrant::Tenants(vec!["acme".into()]));
        assert_eq!(a.admit("/ui/", &headers(Some("Bearer read+acme/1"))), acme);
        let mut cookie = headers(None);
        cookie.insert(
            axum::http::header::COOKIE,
            HeaderValue::from_static("theme=dark; toolwatch_token=read%2Bacme%2F1"),
        );
        assert_eq!(a.admit("/ui/requests/acme/r1", &cookie), acme);
        assert_eq!(
            a.admit("/v1/budgets", &cookie),
            Err(AuthFailure::Missing),
            "the cookie counts on the console only"
        );
        assert_eq!(
            a.admit("/v1/budgets", &headers(Some("Bearer read+acme/1"))),
            Err(AuthFailure::ConsoleOnly)
        );
        assert_eq!(
            a.admit("/ui/", &headers(Some("Bearer admin-tok"))),
            Ok(AdminGrant::All)
        );
        assert_eq!(a.admit("/ui/", &headers(None)), Err(AuthFailure::Missing));
        assert_eq!(a.admit("/ui/login", &headers(None)), Ok(AdminGrant::All));
        for (tenants, name) in [
            (vec![], "r"),
            (vec!["*".to_string()], "r"),
            (vec!["a".into()], "bad name!"),
        ] {
            let bad = AdminConfig {
                readers: vec![ConsoleReaderConfig {
                    name: name.into(),
                    token_sha256: vec![token_sha256("t")],
                    tenants,
                }],
                ..Default::default()
            };
            assert!(AdminAccess::from_config(&config(AuthMode::Required), &bad).is_err());
        }
    }

    #[test]
    fn a_token_with_an_end_stops_working_then() {
        let mut c = config(AuthMode::Required);
        c.senders[0].token_sha256 = vec![
            format!("{} until 2020-01-01T00:00:00Z", token_sha256("tok-old")),
            format!(
                "{} until 2999-01-01T00:00:00+02:00",
                token_sha256("tok-new")
            ),
        ];
        let d = SenderDirectory::from_config(&c).expect("valid");
        assert_eq!(
            d.authenticate(&headers(Some("Bearer tok-old")), &[]),
            Err(AuthFailure::Expired)
        );
        assert!(d
            .authenticate(&headers(Some("Bearer tok-new")), &[])
            .is_ok());
        c.senders[0].token_sha256 = vec![format!("{} until next tuesday", token_sha256("x"))];
        assert!(matches!(
            SenderDirectory::from_config(&c),
            Err(AuthConfigError::BadHash { .. })
        ));
    }

    #[test]
    fn with_auth_off_a_known_token_still_names_its_sender() {
        let d = SenderDirectory::from_config(&config(AuthMode::Off)).expect("valid");
        assert_eq!(d.authenticate(&headers(None), &[]), Ok(None));
        assert_eq!(d.authenticate(&headers(Some("Bearer nope")), &[]), Ok(None));
        let s = d
            .authenticate(&headers(Some("Bearer tok-eu-1")), &[])
            .expect("ok");
        assert!(s.is_some_and(|s| s.permits("globex") && !s.permits("initech")));
    }

    #[test]
    fn bad_sections_are_refused_with_what_is_wrong_and_no_hash_in_the_message() {
        let mut c = config(AuthMode::Required);
        c.senders[1].token_sha256 = vec!["deadbeef".into()];
        let e = SenderDirectory::from_config(&c).expect_err("short hash");
        assert!(matches!(e, AuthConfigError::BadHash { entry: 0, .. }));
        assert!(!e.to_string().contains("deadbeef"), "{e}");

        let mut c = config(AuthMode::Required);
        c.senders[1].token_sha256 = c.senders[0].token_sha256.clone();
        assert!(matches!(
            SenderDirectory::from_config(&c),
            Err(AuthConfigError::SharedHash { .. })
        ));

        let mut c = config(AuthMode::Required);
        c.senders[1].name = "executor-eu".into();
        assert!(matches!(
            SenderDirectory::from_config(&c),
            Err(AuthConfigError::DuplicateName(_))
        ));

        for tenants in [
            vec![],
            vec!["acme".to_string(), "*".to_string()],
            vec!["a\nb".into()],
        ] {
            let mut c = config(AuthMode::Required);
            c.senders[0].tenants = tenants;
            assert!(matches!(
                SenderDirectory::from_config(&c),
                Err(AuthConfigError::BadTenants { .. })
            ));
        }
        let c = AuthConfig {
            mode: AuthMode::Required,
            senders: Vec::new(),
        };
        assert_eq!(
            SenderDirectory::from_config(&c).err(),
            Some(AuthConfigError::NoSenders)
        );
    }

    #[test]
    fn a_single_hash_or_a_list_is_read() {
        let c: AuthConfig = toml::from_str(&format!(
            "mode = \"required\"\n[[senders]]\nname = \"a\"\ntoken_sha256 = \"{}\"\ntenants = [\"acme\"]\n",
            token_sha256("t")
        ))
        .expect("toml");
        assert_eq!(c.senders[0].token_sha256, [token_sha256("t")]);
    }
}
