//! The responder's console: the archive in a browser, under `/ui/`.
//!
//! Read-only pages rendered on the server from the archive's protected rows (never anything
//! else), with no script and no asset from elsewhere: requests (filtered, paged), one request
//! as a tree with its findings, alarms and summary versions, findings, alarms, budgets, and
//! search. `toolwatch serve` serves it on the admin listener, behind the admin access; the
//! rows the daemon buffers are read beside its files, so what it acknowledged a moment ago is
//! there. `toolwatch console` serves it over an archive no daemon serves (a data directory,
//! or object storage). A tenant-scoped console reads only its tenants' partitions: another
//! tenant's request is "not found", exactly as a missing one.

mod budgets;
pub mod html;
mod lists;
mod login;
mod request;
mod requests;
mod search;

use std::path::PathBuf;
use std::sync::Arc;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use datafusion::execution::context::SessionContext;

use crate::admin::{FlushPoints, SharedAdminAccess};
use crate::archive::store::remote::RemoteArchive;
use crate::budget::SharedEvaluator;
use crate::protect::KeyedHasher;

use crate::query::{QueryError, TenantScope};

/// Where the console reads the archive.
pub enum ArchiveSource {
    /// The archive under a data directory; a daemon serving it (if one does) is asked for
    /// copies of the rows it buffers, as `toolwatch trace` asks.
    Local(PathBuf),
    /// Inside the daemon: its writers' buffers are copied directly.
    Daemon {
        /// The daemon's data directory.
        data_dir: PathBuf,
        /// Its archive writers.
        points: FlushPoints,
    },
    /// The archive in object storage: the files its uploaded manifests record.
    Remote(RemoteArchive),
}

/// What the console's pages read.
#[derive(Clone)]
pub struct Console {
    source: Arc<ArchiveSource>,
    scope: TenantScope,
    budgets: Option<SharedEvaluator>,
    hashers: Arc<Vec<KeyedHasher>>,
    login: Option<Login>,
}

/// How a browser signs in: the access that checks a token, and whether the login cookie
/// travels over TLS only.
#[derive(Clone)]
pub struct Login {
    /// Who may get in (the admin token, the console readers' tokens).
    pub access: SharedAdminAccess,
    /// The listener is TLS: the cookie is marked `Secure`.
    pub tls: bool,
}

/// The console as one request may read it: narrowed to the tenants its sign-in grants.
pub struct Reader(pub Console);

impl axum::extract::FromRequestParts<Console> for Reader {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        console: &Console,
    ) -> Result<Reader, Self::Rejection> {
        let mut c = console.clone();
        if let Some(crate::receive::auth::AdminGrant::Tenants(t)) = parts.extensions.get() {
            c.scope = c.scope.within(t);
        }
        Ok(Reader(c))
    }
}

impl Console {
    /// A console over `source`, reading the tenants `scope` admits; with the daemon's live
    /// budget state where there is one, and the keys idempotency keys are hashed under
    /// (current first), to search by a raw key.
    pub fn new(
        source: ArchiveSource,
        scope: TenantScope,
        budgets: Option<SharedEvaluator>,
        hashers: Vec<KeyedHasher>,
    ) -> Console {
        Console {
            source: Arc::new(source),
            scope,
            budgets,
            hashers: Arc::new(hashers),
            login: None,
        }
    }

    /// The console with a sign-in page for browsers (`/ui/login`), for access that needs
    /// a token.
    pub fn with_login(mut self, login: Login) -> Console {
        self.login = Some(login);
        self
    }

    /// Runs `work` on a fresh session over the archive, in scope.
    /// Also says what the answer may lack, for the page to show.
    async fn read<T, F, Fut>(&self, work: F) -> Result<(T, Notice), QueryError>
    where
        F: FnMut(SessionContext) -> Fut,
        Fut: std::future::Future<Output = Result<T, QueryError>>,
    {
        match &*self.source {
            ArchiveSource::Local(dir) => {
                let (t, how) = crate::query::with_session(
                    dir,
                    crate::query::fresh::Freshen::Copies,
                    &self.scope,
                    work,
                )
                .await?;
                let notice = match how {
                    crate::query::fresh::Freshness::Partial(why) => Notice(Some(format!(
                        "The daemon serving this archive did not hand over all it buffers \
                         ({why}): rows it acknowledged in the last moments may be missing."
                    ))),
                    _ => Notice(None),
                };
                Ok((t, notice))
            }
            ArchiveSource::Daemon { data_dir, points } => {
                let late = std::sync::Mutex::new(None);
                let t = crate::query::with_session_copying(
                    data_dir,
                    &self.scope,
                    || async {
                        // A writer that does not answer in time: its files are read as they
                        // are (the rows are safe in the journal), and the page says so.
                        match points.copies().await {
                            Ok(set) => Some(set),
                            Err(writer) => {
                                *late
                                    .lock()
                                    .unwrap_or_else(std::sync::PoisonError::into_inner) =
                                    Some(writer);
                                None
                            }
                        }
                    },
                    work,
                )
                .await?;
                let late = late
                    .into_inner()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let notice = Notice(late.map(|w| {
                    format!(
                        "The archive writer {w} did not answer within 10 s: rows acknowledged \
                         in the last moments may be missing (they are safe in the journal)."
                    )
                }));
                Ok((t, notice))
            }
            ArchiveSource::Remote(r) => {
                let (t, missing) = crate::query::with_remote_session(r, &self.scope, work).await?;
                let notice = Notice((!missing.is_empty()).then(|| {
                    format!(
                        "{} files the store's manifests record are not in it \
                         (`toolwatch verify --url` names them): their rows are missing here.",
                        missing.len()
                    )
                }));
                Ok((t, notice))
            }
        }
    }
}

/// What a page's answer may lack (rows the daemon did not hand over in time, files missing
/// from object storage), shown above it.
#[derive(Debug, Default)]
pub struct Notice(Option<String>);

impl Notice {
    /// The notice as HTML, or nothing.
    fn html(&self) -> String {
        match &self.0 {
            Some(n) => format!("<p class=\"warn\" role=\"status\">{}</p>", html::esc(n)),
            None => String::new(),
        }
    }
}

/// The console's routes, each answer with headers that keep a page to itself (no script, no
/// framing, no referrer, not cached).
pub fn router(console: Console) -> Router {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(requests::page))
        .route("/ui/style.css", get(style))
        .route("/ui/requests/{tenant}/{request_id}", get(request::page))
        .route("/ui/findings", get(lists::findings))
        .route("/ui/alarms", get(lists::alarms))
        .route("/ui/budgets", get(budgets::page))
        .route("/ui/search", get(search::form).post(search::find))
        .route("/ui/login", get(login::form).post(login::sign_in))
        .route("/ui/logout", axum::routing::post(login::sign_out))
        .layer(axum::middleware::map_response(page_headers))
        .with_state(console)
}

async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        html::STYLE,
    )
        .into_response()
}

async fn page_headers(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// A rendered page.
fn html_page(status: StatusCode, section: html::Section, title: &str, body: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        html::page(section, title, body),
    )
        .into_response()
}

/// The answer for a read that failed: "not found" for what is not there or not in scope,
/// else a page that says the archive could not be read. The error is logged by its kind
/// only: its text may hold what was searched for.
fn failed(section: html::Section, e: QueryError) -> Response {
    match e {
        QueryError::NotFound(_) => not_found(section),
        QueryError::NoDataDir(_) => html_page(
            StatusCode::SERVICE_UNAVAILABLE,
            section,
            "No archive",
            "<p>The data directory holds no archive yet.</p>",
        ),
        e => {
            let kind = match e {
                QueryError::Sql(_) => "sql",
                _ => "output",
            };
            tracing::warn!(kind, "console: the archive could not be read");
            html_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                section,
                "The archive could not be read",
                "<p>The archive could not be read just now; the daemon's log says why. Try again.</p>",
            )
        }
    }
}

fn not_found(section: html::Section) -> Response {
    html_page(
        StatusCode::NOT_FOUND,
        section,
        "Not found",
        "<p>Nothing in the archive matches this address.</p>",
    )
}

/// A form field: `None` when absent or blank.
fn field(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

/// The filters a page keeps in its links to other pages: `k=v&` for each one set,
/// percent-encoded (not yet escaped for an attribute).
fn kept_filters(filters: &[(&str, &Option<String>)]) -> String {
    let mut out = String::new();
    for (k, v) in filters {
        if let Some(v) = field(v) {
            out.push_str(&format!("{k}={}&", html::url_part(v)));
        }
    }
    out
}
