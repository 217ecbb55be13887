//! Training the key-context judgment ([`super::judgment`]): the data and the fit.
//!
//! Reproducible on any machine that runs the test suite: the same inputs give the same
//! weights bit for bit (one pass in a fixed order, f64 arithmetic without reordering, a seeded
//! generator written here). The inputs, none of them a public collection of leaked
//! credentials:
//! - the *tuning* halves of `../shared/corpora/` (gitleaks' rule samples, CredSweeper's
//!   samples; split by the same row hash as `tests/it/corpora.rs`, the held-out halves only
//!   reported);
//! - generated credentials of realistic shapes planted in realistic lines, and generated
//!   harmless values under credential names (labels in many languages, code, markup);
//! - real code: every candidate in the sources of [`CODE_CRATES`] (the versions in
//!   `Cargo.lock`, from Cargo's registry) and [`CODE_PACKAGES`] (the test venv's pinned Python
//!   packages), labeled harmless, less the values checked by hand and excluded
//!   (`training_excluded.txt`).
//!
//! The fit is a logistic regression by Newton's method with an L2 pull toward the hand-set
//! scores ([`JudgmentModel::prior`]), so a feature the data says little about keeps the weight
//! a person gave it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::judgment::{FeatureVector, JudgmentModel, FEATURE_COUNT};
use super::key_context::{candidates, keyword_hits};

/// Where a training example comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// gitleaks' samples, tuning half.
    Gitleaks,
    /// CredSweeper's samples, tuning half.
    CredSweeper,
    /// Generated here.
    Generated,
    /// Real code on this machine.
    Code,
}

/// One candidate with its label.
#[derive(Debug, Clone)]
pub struct Example {
    /// The model's inputs.
    pub features: FeatureVector,
    /// True for a credential.
    pub secret: bool,
    /// Where it comes from.
    pub source: Source,
    /// The line it was found in (for reports).
    pub line: String,
    /// The value.
    pub value: String,
}

/// Why training data could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TrainingError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A corpus row is not the JSON it should be.
    #[error("{path} line {line}: {message}")]
    Row {
        /// The file.
        path: PathBuf,
        /// 1-based.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A source named here is not on this machine.
    #[error("training source {0} not found (run scripts/test once: it builds the crates and installs the venv)")]
    Missing(String),
}

fn read(path: &Path) -> Result<String, TrainingError> {
    std::fs::read_to_string(path).map_err(|source| TrainingError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// True for a row of the tuning half: the first bit of the SHA-256 of the row's line is 0
/// (the split `tests/it/corpora.rs` reports by).
pub fn is_tuning_row(row: &str) -> bool {
    Sha256::digest(row.as_bytes())[0] & 1 == 0
}

/// The judged candidates of `line` (those a precise reason keeps are no question for the
/// model), with their values.
fn judged(line: &str) -> Vec<(FeatureVector, String)> {
    candidates(line, &keyword_hits(line))
        .into_iter()
        .filter(|c| c.judgment.decided_by.is_none())
        .map(|c| (c.judgment.features, line[c.value].to_string()))
        .collect()
}

fn overlaps(value: &str, secret: &str) -> bool {
    value.contains(secret) || (value.len() >= 6 && secret.contains(value))
}

/// The tuning half of a JSON-lines corpus: each row's `field` and the row.
fn tuning_rows(
    path: &Path,
    field: &str,
) -> Result<Vec<(String, serde_json::Value)>, TrainingError> {
    let mut out = Vec::new();
    for (i, row) in read(path)?.lines().enumerate() {
        if !is_tuning_row(row) {
            continue;
        }
        let error = |message: String| TrainingError::Row {
            path: path.to_path_buf(),
            line: i + 1,
            message,
        };
        let d: serde_json::Value = serde_json::from_str(row).map_err(|e| error(e.to_string()))?;
        let text = d[field]
            .as_str()
            .ok_or_else(|| error(format!("no {field}")))?
            .to_string();
        out.push((text, d));
    }
    Ok(out)
}

/// The candidates of `line` labeled by `secrets` (the values the row says must go): a
/// candidate that holds one is a credential; in a row labeled true (`true_row`), the others
/// say nothing and are left out.
fn push_labeled(
    out: &mut Vec<Example>,
    source: Source,
    line: &str,
    true_row: bool,
    secrets: &[&str],
) {
    for (features, value) in judged(line) {
        let secret = secrets.iter().any(|s| overlaps(&value, s));
        if true_row && !secret {
            continue;
        }
        out.push(Example {
            features,
            secret,
            source,
            line: line.to_string(),
            value,
        });
    }
}

/// The labeled candidates of the corpora's tuning halves in `corpora`.
pub fn corpus_examples(corpora: &Path) -> Result<Vec<Example>, TrainingError> {
    let mut out = Vec::new();
    for (sample, d) in tuning_rows(&corpora.join("gitleaks_labeled.jsonl"), "sample")? {
        let secrets: Vec<&str> = d["expected_secrets"]
            .as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str()).collect())
            .unwrap_or_default();
        push_labeled(
            &mut out,
            Source::Gitleaks,
            &sample,
            d["label"] == "tp",
            &secrets,
        );
    }
    for (text, d) in tuning_rows(&corpora.join("credsweeper_samples.jsonl"), "text")? {
        let t = d["label"] == "T";
        // The scanner's own ML verdicts are no labels (the corpus README: half look real).
        if !t
            && !matches!(
                d["basis"].as_str(),
                Some("fp_marked_line" | "fp_marked_finding" | "keyword")
            )
        {
            continue;
        }
        let labeled = d["value"].as_str().filter(|v| t && !v.is_empty());
        push_labeled(&mut out, Source::CredSweeper, &text, t, labeled.as_slice());
    }
    Ok(out)
}

/// A seeded generator (SplitMix64): the same numbers on every machine and every version.
#[derive(Debug, Clone)]
pub struct Draw(u64);

impl Draw {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Draw {
        Draw(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// One of `items`.
    pub fn pick<'a, T: ?Sized>(&mut self, items: &[&'a T]) -> &'a T {
        items[self.below(items.len())]
    }

    fn chars(&mut self, alphabet: &[u8], len: usize) -> String {
        (0..len)
            .map(|_| char::from(alphabet[self.below(alphabet.len())]))
            .collect()
    }
}

const LOWER: &[u8] = b"abcdefghijklmnopqrstuvwxyz";
const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const HEX: &[u8] = b"0123456789abcdef";
const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const SYMBOLS: &[u8] = b"!@#$%^&*?_-+=.~";

/// A credential of one of the shapes people and services make.
/// Words a passphrase is drawn from (diceware-style: common, concrete).
const PASSPHRASE_WORDS: &[&str] = &[
    "correct",
    "horse",
    "battery",
    "staple",
    "purple",
    "monkey",
    "dishwasher",
    "lamp",
    "river",
    "candle",
    "mosaic",
    "thunder",
    "orbit",
    "velvet",
    "garden",
    "copper",
    "lantern",
    "meadow",
    "glacier",
    "pencil",
    "harbor",
    "walnut",
    "saddle",
    "quartz",
    "ribbon",
    "canyon",
    "tunnel",
    "marble",
    "oyster",
    "violin",
    "blanket",
    "ember",
    "pickle",
    "rocket",
    "cactus",
    "anchor",
    "biscuit",
    "falcon",
    "pepper",
    "salmon",
];

/// Keys a passphrase is written under.
const PASSPHRASE_KEYS: &[&str] = &[
    "password",
    "passphrase",
    "DB_PASSWORD",
    "pass",
    "passwd",
    "adminPassword",
    "ssh_passphrase",
    "REDIS_PASSWORD",
];

fn secret_value(d: &mut Draw) -> String {
    let words = [
        "summer", "winter", "dragon", "monkey", "sunshine", "football", "shadow", "master",
        "tiger", "orange", "purple", "falcon", "silver", "rocket", "kitten", "pepper",
    ];
    match d.below(13) {
        // A passphrase of common words (`correct horse battery staple`).
        12 => {
            let n = 3 + d.below(3);
            (0..n)
                .map(|_| d.pick(PASSPHRASE_WORDS))
                .collect::<Vec<_>>()
                .join(" ")
        }
        // A person's password: a word, digits, a symbol.
        0 => {
            let mut w = d.pick(&words).to_string();
            if d.below(2) == 0 {
                w[..1].make_ascii_uppercase();
            }
            let n = 1 + d.below(4);
            let digits = d.chars(b"0123456789", n);
            let sym = if d.below(2) == 0 {
                d.chars(SYMBOLS, 1)
            } else {
                String::new()
            };
            format!("{w}{digits}{sym}")
        }
        // Short lowercase (`yiwzi`, `djqnnwu`).
        1 => {
            let n = 5 + d.below(6);
            d.chars(LOWER, n)
        }
        // Random with symbols.
        2 => {
            let n = 8 + d.below(17);
            let mut alphabet = ALNUM.to_vec();
            alphabet.extend_from_slice(SYMBOLS);
            d.chars(&alphabet, n)
        }
        // Alphanumeric, 8-40.
        3 => {
            let n = 8 + d.below(33);
            d.chars(ALNUM, n)
        }
        // Hex: 16, 32, 40, 64.
        4 => {
            let n = *d.pick(&[&16usize, &32, &40, &64]);
            d.chars(HEX, n)
        }
        // Base64, padded.
        5 => {
            let n = 4 * (5 + d.below(12));
            let mut s = d.chars(B64, n - 1);
            s.push('=');
            s
        }
        // Digits (numeric application keys, PINs of six or more).
        6 => {
            let n = 6 + d.below(11);
            d.chars(b"0123456789", n)
        }
        // A UUID (API keys of many services).
        7 => format!(
            "{}-{}-{}-{}-{}",
            d.chars(HEX, 8),
            d.chars(HEX, 4),
            d.chars(HEX, 4),
            d.chars(HEX, 4),
            d.chars(HEX, 12)
        ),
        // A token with a prefix and separators.
        8 => {
            let prefix = d.pick(&["tok_", "key-", "sk_", "pat_", "app-", "svc."]);
            let n = 16 + d.below(24);
            format!("{prefix}{}", d.chars(ALNUM, n))
        }
        // NATS-style seeds: two capitals then base32.
        9 => format!(
            "S{}{}",
            d.chars(b"UAN", 1),
            d.chars(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 56)
        ),
        // Leetspeak.
        10 => {
            let w = d.pick(&[
                "p4ssw0rd", "s3cr3t", "adm1n", "l3tm31n", "pa55word", "w3lc0me",
            ]);
            let n = 1 + d.below(3);
            format!("{w}{}", d.chars(b"0123456789!#", n))
        }
        // Lowercase with digits (`cz80juk3z9i6fzq`).
        _ => {
            let n = 8 + d.below(12);
            d.chars(b"abcdefghijklmnopqrstuvwxyz0123456789", n)
        }
    }
}

/// Credential names as code and configuration write them.
const SECRET_KEYS: &[&str] = &[
    "password",
    "db_password",
    "DB_PASS",
    "pwd",
    "passwd",
    "MYSQL_ROOT_PASSWORD",
    "secret",
    "client_secret",
    "api_key",
    "apiKey",
    "X-API-KEY",
    "token",
    "access_token",
    "auth_token",
    "AMQP_PASSWORD",
    "private_key",
    "secret_key",
    "signing_key",
    "session_id",
    "webhook_secret",
    "passphrase",
    "AUTH_TOKEN",
    "adminPassword",
    "smtp_pass",
    "OVH_APPLICATION_KEY",
    "key",
    "encryption_key",
    "refresh_token",
    "app_secret",
    "REDIS_PASSWORD",
    "pass",
    "credentials",
];

/// Lines that hold a key and its value, in the syntaxes of code, configuration, command lines,
/// URLs, headers and logs. `{k}` is the key, `{v}` the value.
const LINES: &[&str] = &[
    "{k}={v}",
    "export {k}={v}",
    "{k}: {v}",
    "  {k}: \"{v}\"",
    "{k} = \"{v}\"",
    "{k} = '{v}'",
    "const {k} = '{v}';",
    "let {k} = \"{v}\";",
    "\"{k}\": \"{v}\",",
    "{\"{k}\": \"{v}\", \"host\": \"db.internal\"}",
    "  {k}: '{v}',",
    "<{k}>{v}</{k}>",
    "mytool --{k} {v} --verbose",
    "{k} := \"{v}\"",
    "${k} = \"{v}\";",
    "'{k}' => '{v}',",
    "# {k} = {v}",
    "// {k}: \"{v}\"",
    "{k}={v} \\",
    "{user: bob, {k}: {v}}",
    "https://api.example.com/v1/items?{k}={v}&limit=10",
    "[{k}]\nvalue = \"{v}\"",
    "set {k}={v}",
    "{k} {v}",
    "INFO connecting with {k}={v} to db.internal:5432",
    "<add key=\"{k}\" value=\"{v}\" />",
    "{k}: {v}  # rotate monthly",
    "    \"{k}\" => \"{v}\",",
    "config.{k} = \"{v}\"",
    "os.environ[\"{k}\"] = \"{v}\"",
    // Sentences: what an assistant or a tool's message says.
    "Your temporary {k} is {v}, change it after the first login.",
    "The new {k} is {v}.",
    "{k} was {v} before the rotation",
    "Login: admin, {k} is {v}",
    "To set auth {k} {v}",
    "Done. The {k} changed to {v} and the service restarted.",
];

/// Harmless values written under credential names: labels and messages in several
/// languages, code, markup and settings.
fn harmless_value(d: &mut Draw) -> String {
    const LABELS: &[&str] = &[
        "Password",
        "Confirm your current password",
        "Enter your password",
        "Forgot password?",
        "The password is too short.",
        "Mot de passe",
        "Passwort vergessen?",
        "Contraseña",
        "Wachtwoord",
        "Senha atual",
        "Parola",
        "Hasło",
        "Lösenord",
        "Пароль",
        "Введите пароль",
        "パスワード",
        "密码",
        "비밀번호",
        "كلمة المرور",
        "รหัสผ่าน",
        "Şifre",
        "Heslo",
        "Specified key was too long; max key length is 767 bytes",
        "Invalid token",
        "Token expired, please sign in again.",
        "Your API key",
        "Secret key (keep it safe)",
        "Access token for the registry",
        "Please enter a valid password.",
        "Die Sitzung ist abgelaufen.",
        "La clé est invalide",
        "Clave de acceso",
        "Geheimer Schlüssel",
        "Nouveau mot de passe",
        "Пароль не совпадает",
        // Validation messages as forms and frameworks write them, lowercase.
        "must be at least eight characters",
        "is too short",
        "does not match the confirmation",
        "enter your password",
        "the password field is required",
        "cannot be blank",
        "should contain a digit",
        "is required when signing in",
    ];
    const CODE: &[&str] = &[
        "$this->getSupportedToken();",
        "$this->createMock(TokenInterface::class)",
        "u.password === password",
        "\"SA_PASSWORD=\" + pw",
        "user.getPassword() != null",
        "request.headers['Authorization'] || ''",
        "hash_password(raw, salt)",
        "Token::new(kind, span)",
        "self.key == other.key",
        "config.get('secret') or ''",
        "args.password && args.user",
        "new Secret(value, options)",
        "{ type: String }",
        "props.token ?? null",
        "crypto.randomBytes(32).toString('hex')",
        "$(openssl rand -base64 6)",
        "keyof typeof tokens",
        "secretsManager.getValue(id)",
        "%(password)s",
        "{0}",
        "%s",
        "sha256:%x",
        "<token>",
        "&lt;secret&gt;",
    ];
    const SETTINGS: &[&str] = &[
        "/account/settings/custom",
        "Access-Control-Allow-Origin",
        ",optional",
        "0xf1",
        "application/json",
        "required",
        "optional",
        "string",
        "password",
        "text",
        "hidden",
        "bearer",
        "oauth2",
        "login_and_password_removed",
        "some-password",
        "not-a-real-token",
        "redacted",
        "Authorization",
        "X-Api-Key",
        "api_key",
        "primary",
        "session",
        "cookie",
        "enabled",
        "file",
        "env",
        "vault",
        "keychain",
        "default",
        // Names of settings and attributes that hold a credential, not the credential.
        "spring.datasource.password",
        "gen_ai.request.seed",
        "auth.token.header",
        "app.secret_name",
        "http.request.header.authorization",
        // What sentences say a credential is.
        "hashed",
        "invalid",
        "expired",
        "incorrect",
        "missing",
        "rotated",
        "encrypted",
        "case-sensitive",
        "valid",
        "empty",
        "wrong",
        "unchanged",
    ];
    match d.below(3) {
        0 => d.pick(LABELS).to_string(),
        1 => d.pick(CODE).to_string(),
        _ => d.pick(SETTINGS).to_string(),
    }
}

/// Lines where credential names hold harmless values: UI strings, code, settings.
const HARMLESS_LINES: &[&str] = &[
    "\"{k}\": \"{v}\",",
    "'{k}' => '{v}',",
    "{k}: \"{v}\"",
    "{k} = {v}",
    "const {k} = {v}",
    "  {k}: '{v}',",
    "<input name=\"{k}\" placeholder=\"{v}\">",
    "{k}={v}",
    "{k}: {v}",
    "LABEL_{K} = \"{v}\"",
];

fn plant(template: &str, key: &str, value: &str) -> String {
    template
        .replace("{K}", &key.to_ascii_uppercase())
        .replace("{k}", key)
        .replace("{v}", value)
}

/// `n` generated credentials and `n` generated harmless values, each planted in a line.
pub fn generated_examples(seed: u64, n: usize) -> Vec<Example> {
    let mut d = Draw::new(seed);
    let mut out = Vec::new();
    for i in 0..2 * n {
        let secret = i % 2 == 0;
        let mut key = d.pick(SECRET_KEYS);
        let (template, value) = if secret {
            (d.pick(LINES), secret_value(&mut d))
        } else {
            (d.pick(HARMLESS_LINES), harmless_value(&mut d))
        };
        let passphrase = secret && value.contains(' ');
        if passphrase {
            // A passphrase is a password's; an API key is never one.
            key = d.pick(PASSPHRASE_KEYS);
        }
        let line = plant(template, key, &value);
        for (features, found) in judged(&line) {
            // A passphrase counts only where the line quotes it whole: a bare one's first
            // word alone is no secret to learn from.
            if overlaps(&found, &value) && (!passphrase || found == value) {
                out.push(Example {
                    features,
                    secret,
                    source: Source::Generated,
                    line: line.clone(),
                    value: found,
                });
            }
        }
    }
    out
}

/// Crates whose sources are real code for the harmless side (the version `Cargo.lock` holds;
/// all are built on Linux, so a machine that ran the tests has them).
pub const CODE_CRATES: &[&str] = &[
    "sqlparser",
    "url",
    "object_store",
    "rustls",
    "reqwest",
    "tokio-util",
    "tower-http",
    "time",
    "uuid",
    "toml_parser",
    "arrow-schema",
    "datafusion-sql",
    "hyper",
    "tonic",
    "http",
    "axum",
    "parquet",
    "ring",
    "ed25519-dalek",
    "ipnet",
    "tokio",
    "prost",
    "serde_json",
    "regex",
    "cc",
    "log",
    "opentelemetry-proto",
    "h2",
    "rustls-pki-types",
];

/// Python packages of the test venv (pinned by `tests/python/requirements.txt`).
pub const CODE_PACKAGES: &[&str] = &[
    "moto",
    "pyspark",
    "openai",
    "mcp",
    "logfire",
    "opentelemetry",
    "duckdb",
    "pyarrow",
    "agents",
    "openinference",
];

/// Files of these kinds are read, up to [`CODE_FILE_MAX`] bytes.
const CODE_EXTENSIONS: &[&str] = &[
    "rs", "py", "toml", "md", "json", "yaml", "yml", "cfg", "ini",
];
const CODE_FILE_MAX: u64 = 512 * 1024;
/// Longer lines of code (minified, generated) are not read.
const CODE_LINE_MAX: usize = 400;
/// At most this many examples from one file (generated tables would drown the rest).
const CODE_PER_FILE: usize = 12;

/// The source folders of [`CODE_CRATES`] and [`CODE_PACKAGES`]: `cargo_home` holds the
/// registry, `lock` is `Cargo.lock`'s text, `site_packages` the venv's.
pub fn code_roots(
    cargo_home: &Path,
    lock: &str,
    site_packages: &Path,
) -> Result<Vec<PathBuf>, TrainingError> {
    let mut versions: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut name = None;
    for line in lock.lines() {
        if let Some(n) = line.strip_prefix("name = \"") {
            name = n.strip_suffix('"');
        } else if let (Some(v), Some(n)) = (line.strip_prefix("version = \""), name) {
            if let Some(v) = v.strip_suffix('"') {
                versions.entry(n).or_default().push(v);
            }
        }
    }
    let registry = cargo_home.join("registry/src");
    let indexes: Vec<PathBuf> = sorted_dir(&registry)?;
    let mut roots = Vec::new();
    for krate in CODE_CRATES {
        let v = versions
            .get(krate)
            .and_then(|v| v.iter().max())
            .ok_or_else(|| TrainingError::Missing(format!("{krate} in Cargo.lock")))?;
        let dir = indexes
            .iter()
            .map(|i| i.join(format!("{krate}-{v}")))
            .find(|d| d.is_dir())
            .ok_or_else(|| {
                TrainingError::Missing(format!("{krate}-{v} in {}", registry.display()))
            })?;
        roots.push(dir);
    }
    for p in CODE_PACKAGES {
        let dir = site_packages.join(p);
        if !dir.is_dir() {
            return Err(TrainingError::Missing(dir.display().to_string()));
        }
        roots.push(dir);
    }
    Ok(roots)
}

fn sorted_dir(dir: &Path) -> Result<Vec<PathBuf>, TrainingError> {
    let entries = std::fs::read_dir(dir).map_err(|source| TrainingError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut out: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    out.sort();
    Ok(out)
}

/// Every file under `root` of the kinds read, in a fixed order.
fn code_files(root: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = sorted_dir(root) else {
        return;
    };
    for p in entries {
        if p.is_dir() {
            code_files(&p, out);
        } else if p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| CODE_EXTENSIONS.contains(&e))
            && p.metadata().is_ok_and(|m| m.len() <= CODE_FILE_MAX)
        {
            out.push(p);
        }
    }
}

/// The hex SHA-256 of a value, as `training_excluded.txt` lists them.
pub fn value_digest(value: &str) -> String {
    hex::encode(&Sha256::digest(value.as_bytes())[..8])
}

/// Values of the code sources checked by hand and excluded: they look like real secrets
/// (test fixtures written as a real password would be), so they are no harmless example.
fn excluded_values() -> std::collections::BTreeSet<&'static str> {
    include_str!("training_excluded.txt")
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|l| !l.starts_with('#'))
        .collect()
}

/// The text of every code file under `roots`, in order (files that are not UTF-8 left out).
fn code_texts(roots: &[PathBuf]) -> impl Iterator<Item = String> + '_ {
    roots.iter().flat_map(|root| {
        let mut files = Vec::new();
        code_files(root, &mut files);
        files
            .into_iter()
            .filter_map(|f| std::fs::read_to_string(f).ok())
    })
}

/// The candidates of real code under `roots`, labeled harmless.
pub fn code_examples(roots: &[PathBuf]) -> Vec<Example> {
    let excluded = excluded_values();
    let mut out = Vec::new();
    for text in code_texts(roots) {
        let mut taken = 0;
        for line in text.lines().filter(|l| l.len() <= CODE_LINE_MAX) {
            if taken >= CODE_PER_FILE {
                break;
            }
            for (features, value) in judged(line) {
                if excluded.contains(value_digest(&value).as_str()) {
                    continue;
                }
                taken += 1;
                out.push(Example {
                    features,
                    secret: false,
                    source: Source::Code,
                    line: line.to_string(),
                    value,
                });
            }
        }
    }
    out
}

/// What the key-context judgment does to the lines of real code under `roots` (code no
/// example is drawn from, to measure the judgment on code it never saw): how many
/// candidates it judges, and each line with the value it removes.
pub fn code_removals(roots: &[PathBuf]) -> (usize, Vec<(String, String)>) {
    let (mut judged, mut removed) = (0, Vec::new());
    let mut seen = std::collections::BTreeSet::new();
    for text in code_texts(roots) {
        for line in text.lines().filter(|l| l.len() <= CODE_LINE_MAX) {
            if !seen.insert(line.trim().to_string()) {
                continue;
            }
            for c in candidates(line, &keyword_hits(line)) {
                judged += 1;
                if c.judgment.removed {
                    removed.push((line.to_string(), line[c.value].to_string()));
                }
            }
        }
    }
    (judged, removed)
}

/// Common words of the code comments under `roots`: lowercase words of 3-14 letters found in
/// comments of at least `min_files` files, the `max` most widespread.
pub fn dictionary(roots: &[PathBuf], min_files: usize, max: usize) -> Vec<String> {
    let mut files_with: BTreeMap<String, usize> = BTreeMap::new();
    for text in code_texts(roots) {
        let mut seen = std::collections::BTreeSet::new();
        for line in text.lines() {
            let t = line.trim_start();
            let comment = t.strip_prefix("//").or_else(|| t.strip_prefix('#'));
            let Some(c) = comment else { continue };
            for w in c.split(|ch: char| !ch.is_ascii_alphabetic()) {
                if (3..=14).contains(&w.len()) && w.bytes().all(|b| b.is_ascii_lowercase()) {
                    seen.insert(w.to_string());
                }
            }
        }
        for w in seen {
            *files_with.entry(w).or_default() += 1;
        }
    }
    let mut words: Vec<(usize, String)> = files_with
        .into_iter()
        .filter(|(_, n)| *n >= min_files)
        .map(|(w, n)| (n, w))
        .collect();
    words.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    words.truncate(max);
    let mut out: Vec<String> = words.into_iter().map(|(_, w)| w).collect();
    out.sort();
    out
}

/// How the training weighs its sources: each (source, label) group gets this share of the
/// total, whatever its size.
fn group_share(source: Source, secret: bool) -> f64 {
    match (source, secret) {
        (Source::Gitleaks, true) => 1.5,
        (Source::CredSweeper, true) => 1.5,
        (Source::Generated, true) => 2.0,
        (Source::Gitleaks, false) => 0.5,
        (Source::CredSweeper, false) => 1.0,
        (Source::Generated, false) => 1.0,
        (Source::Code, false) => 1.0,
        (Source::Code, true) => 0.0,
    }
}

/// An example as the fit reads it: its weight, its label (1 or 0), its non-zero inputs.
type Row = (f64, f64, Vec<(usize, f64)>);

/// Newton steps: the fit converges in a few; a fixed count keeps it the same everywhere.
const NEWTON_STEPS: usize = 30;

/// The pull toward the prior, against a total sample weight of [`TOTAL_WEIGHT`].
pub const PRIOR_PULL: f64 = 8.0;
const TOTAL_WEIGHT: f64 = 1000.0;

/// Fits the model to `examples`: weighted logistic loss plus [`PRIOR_PULL`] times the squared
/// distance to the prior.
pub fn train(examples: &[Example]) -> JudgmentModel {
    let prior = JudgmentModel::prior();
    let counts = group_counts(examples);
    let share_total: f64 = counts.keys().map(|(s, l)| group_share(*s, *l)).sum();
    let weight_of = |e: &Example| {
        let n = counts[&(e.source, e.secret)] as f64;
        TOTAL_WEIGHT * group_share(e.source, e.secret) / share_total / n
    };
    // Parameters: the weights, then the bias.
    const D: usize = FEATURE_COUNT + 1;
    let mut theta0 = [0f64; D];
    theta0[..FEATURE_COUNT].copy_from_slice(&prior.weights);
    theta0[FEATURE_COUNT] = prior.bias;
    let mut theta = theta0;
    let pull = |i: usize| if i == FEATURE_COUNT { 0.01 } else { PRIOR_PULL };
    // Each example's non-zero inputs, the bias last.
    let rows: Vec<Row> = examples
        .iter()
        .map(|e| {
            let nz = e
                .features
                .iter()
                .enumerate()
                .filter(|(_, v)| **v != 0.0)
                .map(|(i, v)| (i, f64::from(*v)))
                .chain(std::iter::once((FEATURE_COUNT, 1.0)))
                .collect();
            (weight_of(e), if e.secret { 1.0 } else { 0.0 }, nz)
        })
        .collect();
    let loss = |theta: &[f64; D]| -> f64 {
        let mut l: f64 = (0..D)
            .map(|i| pull(i) * (theta[i] - theta0[i]).powi(2))
            .sum();
        for (w, y, nz) in &rows {
            let z: f64 = nz.iter().map(|(i, v)| theta[*i] * v).sum();
            // log(1 + e^-z) for a secret, log(1 + e^z) for a harmless value, stably.
            let m = if *y == 1.0 { -z } else { z };
            l += w * (m.max(0.0) + (-m.abs()).exp().ln_1p());
        }
        l
    };
    for _ in 0..NEWTON_STEPS {
        let mut grad = [0f64; D];
        let mut hess = vec![[0f64; D]; D];
        for i in 0..D {
            grad[i] = 2.0 * pull(i) * (theta[i] - theta0[i]);
            hess[i][i] = 2.0 * pull(i);
        }
        for (w, y, nz) in &rows {
            let z: f64 = nz.iter().map(|(i, v)| theta[*i] * v).sum();
            let p = 1.0 / (1.0 + (-z).exp());
            let r = w * (p - y);
            let h = w * p * (1.0 - p);
            for (i, vi) in nz {
                grad[*i] += r * vi;
                for (j, vj) in nz {
                    hess[*i][*j] += h * vi * vj;
                }
            }
        }
        let step = solve(hess, grad);
        // Backtracking: halve the step until the loss goes down (Newton alone can overshoot
        // where the data separate).
        let before = loss(&theta);
        let mut scale = 1.0;
        for _ in 0..30 {
            let mut next = theta;
            for i in 0..D {
                next[i] -= scale * step[i];
            }
            if loss(&next) <= before {
                theta = next;
                break;
            }
            scale /= 2.0;
        }
    }
    let round = |v: f64| (v * 1e4).round() / 1e4;
    let mut weights = [0f64; FEATURE_COUNT];
    for (w, t) in weights.iter_mut().zip(&theta) {
        *w = round(*t);
    }
    let mut model = JudgmentModel {
        weights,
        bias: round(theta[FEATURE_COUNT]),
        threshold: 0.0,
    };
    model.threshold = DECISION_LOGIT;
    model
}

/// The logit at and above which a candidate is removed: the model's odds of a credential 1 in
/// 5.6 or better (probability 0.15), as a credential kept is worse than a harmless value
/// removed. Fixed, not fitted: it was the quantile below which 0.8% of the training's
/// credentials scored, and that moved with every fact decided before the model is asked (each
/// takes credentials out of what it is asked), so values far from any change flipped between
/// trainings. Set where that quantile last stood (2026-12-05); `scripts/train-judgment`
/// reports the share of each source's credentials it removes.
pub const DECISION_LOGIT: f64 = -1.72;

/// Solves `a x = b` for a symmetric positive definite `a` (Cholesky). Written with indices as
/// the textbook has it: the order of every sum is fixed, so the result is too.
#[allow(clippy::needless_range_loop)]
fn solve<const D: usize>(mut a: Vec<[f64; D]>, b: [f64; D]) -> [f64; D] {
    for j in 0..D {
        let mut s = a[j][j];
        for k in 0..j {
            s -= a[j][k] * a[j][k];
        }
        let d = s.max(1e-12).sqrt();
        a[j][j] = d;
        for i in j + 1..D {
            let mut s = a[i][j];
            for k in 0..j {
                s -= a[i][k] * a[j][k];
            }
            a[i][j] = s / d;
        }
    }
    let mut y = [0f64; D];
    for i in 0..D {
        let mut s = b[i];
        for k in 0..i {
            s -= a[i][k] * y[k];
        }
        y[i] = s / a[i][i];
    }
    let mut x = [0f64; D];
    for i in (0..D).rev() {
        let mut s = y[i];
        for k in i + 1..D {
            s -= a[k][i] * x[k];
        }
        x[i] = s / a[i][i];
    }
    x
}

/// What the training reads on this machine.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// `../shared/corpora`.
    pub corpora: PathBuf,
    /// The sources of [`CODE_CRATES`] and [`CODE_PACKAGES`].
    pub code_roots: Vec<PathBuf>,
}

/// The generator's seed and how many credentials (and as many harmless values) it plants.
pub const GENERATED_SEED: u64 = 36;
/// See [`GENERATED_SEED`].
pub const GENERATED_PAIRS: usize = 3000;

impl Inputs {
    /// The inputs beside the repository at `repo`: the corpora in `../shared`, Cargo's
    /// registry (`$CARGO_HOME`, else `~/.cargo`) and the test venv (`.venv`).
    pub fn beside(repo: &Path) -> Result<Inputs, TrainingError> {
        let cargo_home = std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
            .ok_or_else(|| TrainingError::Missing("CARGO_HOME or HOME".into()))?;
        let lock = read(&repo.join("Cargo.lock"))?;
        let lib = repo.join(".venv/lib");
        let site_packages = sorted_dir(&lib)?
            .into_iter()
            .map(|p| p.join("site-packages"))
            .find(|p| p.is_dir())
            .ok_or_else(|| {
                TrainingError::Missing(format!("site-packages under {}", lib.display()))
            })?;
        Ok(Inputs {
            corpora: repo.join("../shared/corpora"),
            code_roots: code_roots(&cargo_home, &lock, &site_packages)?,
        })
    }

    /// Every labeled example: the corpora's tuning halves, the generated ones, real code.
    pub fn examples(&self) -> Result<Vec<Example>, TrainingError> {
        let mut out = corpus_examples(&self.corpora)?;
        out.extend(generated_examples(GENERATED_SEED, GENERATED_PAIRS));
        out.extend(code_examples(&self.code_roots));
        // A line met many times (generated tables, repeated fixtures) counts once.
        let mut seen = std::collections::BTreeSet::new();
        out.retain(|e| {
            seen.insert((
                e.source,
                e.secret,
                e.line.trim().to_string(),
                e.value.clone(),
            ))
        });
        Ok(out)
    }
}

/// The dictionary's settings: words in the comments of this many files or more, at most
/// this many words.
pub const DICTIONARY_MIN_FILES: usize = 20;
/// See [`DICTIONARY_MIN_FILES`].
pub const DICTIONARY_MAX_WORDS: usize = 6000;

/// The dictionary file's text for `words`.
pub fn dictionary_file(words: &[String]) -> String {
    let mut s = String::from(
        "# Common English words as code comments write them: written by scripts/train-judgment\n",
    );
    for w in words {
        s.push_str(w);
        s.push('\n');
    }
    s
}

/// How many examples each (source, label) group holds.
fn group_counts(examples: &[Example]) -> BTreeMap<(Source, bool), usize> {
    let mut counts = BTreeMap::new();
    for e in examples {
        *counts.entry((e.source, e.secret)).or_default() += 1;
    }
    counts
}

/// The weights file's text for `model`.
pub fn weights_file(model: &JudgmentModel, examples: &[Example]) -> String {
    let counts = group_counts(examples);
    let about = format!(
        "written by scripts/train-judgment from {}",
        counts
            .iter()
            .map(|((s, l), n)| format!("{n} {} {s:?}", if *l { "secret" } else { "harmless" }))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut text = serde_json::to_string_pretty(&model.to_file(&about)).unwrap_or_default();
    text.push('\n');
    text
}

/// Where the model and the labels (or the prior) part, per source: counts for a report.
#[derive(Debug, Default, Clone, Copy)]
pub struct Agreement {
    /// Credentials removed.
    pub secrets_removed: usize,
    /// Credentials.
    pub secrets: usize,
    /// Harmless values removed.
    pub harmless_removed: usize,
    /// Harmless values.
    pub harmless: usize,
}

/// How `model` judges `examples`, per source.
pub fn agreement(model: &JudgmentModel, examples: &[Example]) -> BTreeMap<Source, Agreement> {
    let mut out: BTreeMap<Source, Agreement> = BTreeMap::new();
    for e in examples {
        let removed = model.margin(&e.features) >= 0.0;
        let a = out.entry(e.source).or_default();
        if e.secret {
            a.secrets += 1;
            a.secrets_removed += usize::from(removed);
        } else {
            a.harmless += 1;
            a.harmless_removed += usize::from(removed);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_fixed() {
        // SplitMix64's first output from state 7, worked out by its reference algorithm: the
        // generated training data (and so the weights) hang on it.
        let mut d = Draw::new(7);
        assert_eq!(d.next(), 0x63cb_e1e4_5932_0dd7);
    }

    #[test]
    fn cholesky_solves() {
        let a = vec![[4.0, 2.0], [2.0, 3.0]];
        let x = solve(a, [2.0, 1.0]);
        assert!((x[0] - 0.5).abs() < 1e-12 && x[1].abs() < 1e-12, "{x:?}");
    }

    #[test]
    fn generated_lines_hold_their_values() {
        let ex = generated_examples(1, 200);
        let secrets = ex.iter().filter(|e| e.secret).count();
        // Harmless values a precise fact keeps (labels, placeholders, references) are not
        // judged, so not examples: about a third of those generated.
        assert!(
            secrets > 150 && ex.len() - secrets > 80,
            "{secrets} of {}",
            ex.len()
        );
    }
}
