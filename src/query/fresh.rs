//! Fresh reads: ask the daemon serving the data directory (if one does) for copies of the rows
//! it buffers (`GET /v1/archive/buffered`; see `archive::write::snapshot`), which `query` and `trace`
//! read beside the completed files, or to write them out first
//! (`POST /v1/archive/flush`; see `archive::write::flush`), so what it acknowledged a moment ago is
//! read either way.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use crate::archive::write::flush::{recorded_addresses, RecordedDaemon};
use crate::archive::write::snapshot::BufferedSet;

/// How long to try reaching the daemon: it is local, so a refusal comes at once.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// The daemon waits up to 10 s for its writers; a little more here.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(12);

/// What asking the daemon gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freshness {
    /// No daemon recorded its address in the data directory, or it does not answer: the
    /// archive is read as it is on disk.
    NoDaemon,
    /// Every writer wrote out (or copied) what the journal held when asked.
    Flushed,
    /// The daemon answered, but not every writer got there in time (or the answer was not
    /// understood); the reason, for a warning.
    Partial(String),
}

/// How a reader takes what the daemon has not written yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshen {
    /// Read the archive as it is on disk.
    Disk,
    /// Ask the daemon for copies of its buffers and read them beside the files (the default).
    Copies,
    /// Ask the daemon to write its buffers out first.
    Flush,
}

/// The admin token sent to the daemon, from `TOOLWATCH_ADMIN_TOKEN` (needed when its auth
/// is required).
pub const ADMIN_TOKEN_ENV: &str = "TOOLWATCH_ADMIN_TOKEN";
/// A PEM file of the CA that signed the daemon's certificate, from `TOOLWATCH_ADMIN_CA`: set,
/// the admin port is reached over https (`admin.tls`).
pub const ADMIN_CA_ENV: &str = "TOOLWATCH_ADMIN_CA";

/// An HTTP client for the daemon at `addr`, or why there is none; and the URL scheme to use.
/// The admin token goes over https, or to a loopback address, never in clear over a network.
fn client(addr: SocketAddr) -> Result<(reqwest::Client, &'static str), String> {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(ANSWER_TIMEOUT)
        .no_proxy();
    let mut scheme = "http";
    if let Some(ca) = std::env::var_os(ADMIN_CA_ENV) {
        let pem = std::fs::read(&ca).map_err(|e| {
            format!(
                "{ADMIN_CA_ENV} {}: {e}",
                std::path::Path::new(&ca).display()
            )
        })?;
        let cert = reqwest::Certificate::from_pem(&pem)
            .map_err(|e| format!("{ADMIN_CA_ENV}: not a PEM certificate: {e}"))?;
        // Only this CA: a publicly trusted certificate for some address must not receive
        // the token.
        builder = builder
            .tls_built_in_root_certs(false)
            .add_root_certificate(cert);
        scheme = "https";
    }
    let token = std::env::var(ADMIN_TOKEN_ENV).ok();
    if token.is_some() && scheme == "http" && !reachable(addr).ip().is_loopback() {
        return Err(format!(
            "{ADMIN_TOKEN_ENV} is set but the daemon's admin port {addr} is not on this host and {ADMIN_CA_ENV} is not set: the token is not sent in clear"
        ));
    }
    if let Some(token) = token {
        let mut headers = reqwest::header::HeaderMap::new();
        let mut v = reqwest::header::HeaderValue::from_str(&format!("Bearer {}", token.trim()))
            .map_err(|_| format!("{ADMIN_TOKEN_ENV} holds characters a header cannot carry"))?;
        v.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, v);
        builder = builder.default_headers(headers);
    }
    let client = builder
        .build()
        .map_err(|e| format!("no HTTP client: {e}"))?;
    Ok((client, scheme))
}

/// How several daemons' answers add up: every one that answered flushed or copied, or the
/// first reason one did not; no daemon when none answered.
fn combined(outcomes: Vec<Freshness>) -> Freshness {
    let mut all = Freshness::NoDaemon;
    for o in outcomes {
        match o {
            Freshness::Partial(why) => return Freshness::Partial(why),
            Freshness::Flushed => all = Freshness::Flushed,
            Freshness::NoDaemon => {}
        }
    }
    all
}

/// Asks every daemon serving the archive under `data_dir` (its own, or each instance writing
/// it as a shared folder) for copies of what its archive writers buffer: `None` with how it
/// went when there is no daemon or no usable answer.
pub async fn buffered_rows(data_dir: &Path) -> (Option<BufferedSet>, Freshness) {
    let answers = ask_each(data_dir, buffered_rows_of).await;
    let mut merged: Option<BufferedSet> = None;
    let mut outcomes = Vec::new();
    for (set, how) in answers {
        if let Some(set) = set {
            let m = merged.get_or_insert_with(BufferedSet::default);
            m.records = m.records.max(set.records);
            for f in set.files {
                // Paths carry each process's instance id: the same path twice would make
                // one copy hide the other.
                if m.files.iter().any(|g| g.entry.path == f.entry.path) {
                    outcomes.push(Freshness::Partial(format!(
                        "two daemons buffer {}; one copy left out",
                        f.entry.path
                    )));
                    continue;
                }
                m.files.push(f);
            }
        }
        outcomes.push(how);
    }
    (merged, combined(outcomes))
}

/// Asks every daemon serving the archive under `data_dir` to flush, and waits for them.
pub async fn flush_daemon(data_dir: &Path) -> Freshness {
    let answers = ask_each(data_dir, |a| async move {
        (None::<()>, flush_daemon_at(a).await)
    });
    combined(answers.await.into_iter().map(|(_, how)| how).collect())
}

/// Asks every daemon recorded for the archive under `data_dir` at once with `ask`; a live
/// instance that does not answer, one on another machine and one whose address file is not
/// to be trusted each make a partial answer.
async fn ask_each<T, F, Fut>(data_dir: &Path, ask: F) -> Vec<(Option<T>, Freshness)>
where
    F: Fn(SocketAddr) -> Fut,
    Fut: std::future::Future<Output = (Option<T>, Freshness)>,
{
    let ask = &ask;
    let answers = recorded_addresses(data_dir).into_iter().map(|d| async move {
        match d {
            RecordedDaemon::Here(a) => ask(a).await,
            RecordedDaemon::Live(a) => match ask(a).await {
                (t, Freshness::NoDaemon) => (
                    t,
                    Freshness::Partial(format!(
                        "the daemon at {a} writes this archive but does not answer"
                    )),
                ),
                other => other,
            },
            RecordedDaemon::Elsewhere(host) => (
                None,
                Freshness::Partial(format!(
                    "a daemon on {host} writes this archive; its buffered rows cannot be read from this machine"
                )),
            ),
            RecordedDaemon::Untrusted(path) => (
                None,
                Freshness::Partial(format!(
                    "{} is not this user's or others may write it: that daemon was not asked",
                    path.display()
                )),
            ),
        }
    });
    futures_util::future::join_all(answers).await
}

/// One daemon's copies of what its archive writers buffer.
async fn buffered_rows_of(addr: SocketAddr) -> (Option<BufferedSet>, Freshness) {
    let (client, scheme) = match client(addr) {
        Ok(c) => c,
        Err(e) => return (None, Freshness::Partial(e)),
    };
    let url = format!("{scheme}://{}/v1/archive/buffered", host(addr, scheme));
    let answer = match client.get(url).send().await {
        Ok(r) if r.status().is_success() => r.bytes().await,
        Ok(r) => {
            let why = format!(
                "the daemon answered {} to a request for its buffered rows",
                r.status()
            );
            return (None, Freshness::Partial(why));
        }
        Err(e) if e.is_connect() => return (None, Freshness::NoDaemon),
        Err(e) => {
            return (
                None,
                Freshness::Partial(format!("the daemon did not answer: {e}")),
            )
        }
    };
    match answer
        .map_err(|e| e.to_string())
        .and_then(|b| BufferedSet::decode(b).map_err(|e| e.to_string()))
    {
        Ok(set) => (Some(set), Freshness::Flushed),
        Err(e) => (None, Freshness::Partial(e)),
    }
}

/// Asks one daemon to flush, and waits for it.
async fn flush_daemon_at(addr: SocketAddr) -> Freshness {
    let (client, scheme) = match client(addr) {
        Ok(c) => c,
        Err(e) => return Freshness::Partial(e),
    };
    let url = format!("{scheme}://{}/v1/archive/flush", host(addr, scheme));
    match client.post(url).send().await {
        Ok(r) if r.status().is_success() => Freshness::Flushed,
        Ok(r) => Freshness::Partial(format!("the daemon answered {}", r.status())),
        // A daemon killed without cleaning up leaves its file: nothing listens there.
        Err(e) if e.is_connect() => Freshness::NoDaemon,
        Err(e) => Freshness::Partial(format!("the daemon did not answer: {e}")),
    }
}

/// The host part of the daemon's URL: over https `localhost` (the name a certificate for a
/// loopback listener carries), else the address.
fn host(addr: SocketAddr, scheme: &str) -> String {
    let a = reachable(addr);
    if scheme == "https" && a.ip().is_loopback() {
        format!("localhost:{}", a.port())
    } else {
        a.to_string()
    }
}

/// Where to reach a listener bound to `addr`: a wildcard address is reached on loopback.
fn reachable(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_listeners_are_reached_on_loopback() {
        let a: SocketAddr = "0.0.0.0:4319".parse().expect("addr");
        assert_eq!(reachable(a), "127.0.0.1:4319".parse().expect("addr"));
        let a: SocketAddr = "[::]:4319".parse().expect("addr");
        assert_eq!(reachable(a), "[::1]:4319".parse().expect("addr"));
        let a: SocketAddr = "10.1.2.3:4319".parse().expect("addr");
        assert_eq!(reachable(a), a);
    }

    #[test]
    fn without_a_daemon_the_archive_is_read_as_it_is() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        assert_eq!(rt.block_on(flush_daemon(dir.path())), Freshness::NoDaemon);
        // A stale address: nothing listens on it.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        let _f = crate::archive::write::flush::publish_address(dir.path(), addr).expect("publish");
        assert_eq!(rt.block_on(flush_daemon(dir.path())), Freshness::NoDaemon);
    }
}
