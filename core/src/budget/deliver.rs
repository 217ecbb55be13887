//! Alarm delivery to webhook targets: toolwatch's JSON, or Prometheus Alertmanager's
//! `POST /api/v2/alerts`.
//!
//! Each target has its own task and queue. The budget stage hands alarms over without waiting:
//! a slow or dead target fills its own queue, and warnings and limits past its size are dropped
//! and counted, so delivery never holds up evaluation, the archive or ingestion. Resolutions are
//! never dropped (a lost one would leave an alert firing for good), and one queue keeps every
//! alarm in the order it was raised. A batch is retried
//! with exponential backoff (honouring `Retry-After`) up to `max_attempts`; an answer that
//! says the request itself is wrong (4xx other than 408 and 429) is not retried.

use crate::retry::{failure_kind, retry_after, Backoff};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::config::{WebhookFormat, WebhookTarget};
use super::evaluate::{Alarm, FindingEvidence, Level};
use crate::clock::now_ns;
use crate::metrics::Metrics;

/// Alarms in one request to a target.
const MAX_BATCH: usize = 500;

/// How often a target whose queue is full may log that it dropped alarms.
const DROP_LOG_EVERY: Duration = Duration::from_secs(10);

/// One target's queue, in the order alarms were raised. Only warnings and limits count
/// against its size; resolutions always go in (there are never more of them than episodes the
/// evaluator holds).
struct AlarmQueue {
    tx: mpsc::UnboundedSender<Arc<Alarm>>,
    /// Warnings and limits queued now.
    firing: Arc<AtomicUsize>,
    capacity: usize,
}

impl AlarmQueue {
    fn new(capacity: usize) -> (AlarmQueue, QueueReceiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        let firing = Arc::new(AtomicUsize::new(0));
        let queue = AlarmQueue {
            tx,
            firing: Arc::clone(&firing),
            capacity: capacity.max(1),
        };
        (queue, QueueReceiver { rx, firing })
    }

    /// Queues an alarm; false when it was dropped (a warning or limit over the size).
    fn offer(&self, a: &Arc<Alarm>) -> bool {
        if a.level != Level::Resolved {
            if self.firing.load(Ordering::Relaxed) >= self.capacity {
                return false;
            }
            self.firing.fetch_add(1, Ordering::Relaxed);
        }
        self.tx.send(Arc::clone(a)).is_ok()
    }

    fn len(&self) -> usize {
        self.firing.load(Ordering::Relaxed)
    }
}

/// The target task's end of an [`AlarmQueue`].
struct QueueReceiver {
    rx: mpsc::UnboundedReceiver<Arc<Alarm>>,
    firing: Arc<AtomicUsize>,
}

impl QueueReceiver {
    fn taken(&self, a: &Alarm) {
        if a.level != Level::Resolved {
            self.firing.fetch_sub(1, Ordering::Relaxed);
        }
    }

    async fn recv(&mut self) -> Option<Arc<Alarm>> {
        let a = self.rx.recv().await?;
        self.taken(&a);
        Some(a)
    }

    fn try_recv(&mut self) -> Option<Arc<Alarm>> {
        let a = self.rx.try_recv().ok()?;
        self.taken(&a);
        Some(a)
    }

    fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    fn len(&self) -> usize {
        self.firing.load(Ordering::Relaxed)
    }
}

/// One target: its queue, and when dropping was last logged with the drops since.
struct TargetQueue {
    name: String,
    /// Whether findings go to this target.
    findings: bool,
    queue: AlarmQueue,
    drops: std::sync::Mutex<(Option<std::time::Instant>, u64)>,
}

/// The senders of every configured target; clones share them (the budget stage sends
/// alarms, assembly sends findings).
#[derive(Clone)]
pub struct Delivery {
    targets: Arc<[TargetQueue]>,
    metrics: Arc<Metrics>,
}

impl Delivery {
    /// Starts one task per target on `runtime`; they stop when `stop` is cancelled and their
    /// queue is drained (or at once, once cancelled, if the target is unreachable).
    ///
    /// `still_firing` are alarms of episodes active before a restart: Alertmanager targets
    /// keep re-sending them (without sending them as new) until they resolve.
    pub fn start(
        targets: &[WebhookTarget],
        still_firing: &[Alarm],
        runtime: &tokio::runtime::Handle,
        metrics: Arc<Metrics>,
        stop: CancellationToken,
    ) -> (Delivery, Vec<tokio::task::JoinHandle<()>>) {
        let mut senders = Vec::new();
        let mut tasks = Vec::new();
        for target in targets {
            let (queue, rx) = AlarmQueue::new(target.queue_alarms);
            let Ok(url) = target.endpoint() else {
                // validate() refused this configuration already; nothing to send to.
                continue;
            };
            // No redirects: a redirect could carry the configured headers to another host.
            let client = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default();
            let mut firing = FiringAlerts::default();
            if target.format == WebhookFormat::Alertmanager {
                let seed: Vec<Arc<Alarm>> = still_firing.iter().cloned().map(Arc::new).collect();
                firing.update(&seed);
            }
            let sender = TargetSender {
                target: target.clone(),
                url,
                client,
                metrics: Arc::clone(&metrics),
                firing,
            };
            metrics.budget.set_delivery_queue(&target.name, 0);
            tasks.push(runtime.spawn(sender.run(rx, stop.clone())));
            senders.push(TargetQueue {
                name: target.name.clone(),
                findings: target.findings,
                queue,
                drops: std::sync::Mutex::new((None, 0)),
            });
        }
        (
            Delivery {
                targets: senders.into(),
                metrics,
            },
            tasks,
        )
    }

    /// Queues alarms for every target without waiting.
    pub fn offer(&self, alarms: &[Alarm]) {
        if alarms.is_empty() {
            return;
        }
        let shared: Vec<Arc<Alarm>> = alarms.iter().cloned().map(Arc::new).collect();
        for q in self.targets.iter() {
            let dropped = shared
                .iter()
                .filter(|a| q.findings || a.finding.is_none())
                .filter(|a| !q.queue.offer(a))
                .count() as u64;
            if dropped > 0 {
                self.metrics.budget.delivery(&q.name, "dropped", dropped);
                q.log_drops(dropped);
            }
            self.metrics
                .budget
                .set_delivery_queue(&q.name, q.queue.len());
        }
    }
}

impl TargetQueue {
    /// Logs drops at most every [`DROP_LOG_EVERY`], so an alarm storm is not a log storm.
    fn log_drops(&self, dropped: u64) {
        let mut d = self
            .drops
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        d.1 += dropped;
        let now = std::time::Instant::now();
        if d.0
            .is_none_or(|last| now.duration_since(last) >= DROP_LOG_EVERY)
        {
            tracing::warn!(
                target_name = %self.name,
                alarms = d.1,
                "alarm delivery queue full; alarms dropped for this target"
            );
            *d = (Some(now), 0);
        }
    }
}

/// What one attempt came to.
enum Attempt {
    Delivered,
    /// Worth trying again, after at least this long if the server said so.
    Retry(Option<Duration>, String),
    Rejected(String),
}

struct TargetSender {
    target: WebhookTarget,
    url: reqwest::Url,
    client: reqwest::Client,
    metrics: Arc<Metrics>,
    /// Alertmanager: what is firing, re-sent until resolved.
    firing: FiringAlerts,
}

/// The alerts firing at an Alertmanager, by (alarm id, level).
#[derive(Default)]
pub struct FiringAlerts(BTreeMap<(String, Level), Arc<Alarm>>);

impl FiringAlerts {
    /// Takes in new alarms; returns the alerts to post: each warning or limit as it fires,
    /// and for a resolution every level of its episode that fired, now ended.
    pub fn update(&mut self, batch: &[Arc<Alarm>]) -> Vec<AlertmanagerAlert> {
        let mut alerts = Vec::with_capacity(batch.len());
        for a in batch {
            if a.finding.is_some() {
                // A finding is sent once, active for a while; its withdrawal (same labels)
                // resolves it. Nothing to re-send.
                alerts.push(AlertmanagerAlert {
                    fired: Arc::clone(a),
                    resolution: (a.level == Level::Resolved).then(|| Arc::clone(a)),
                });
            } else if a.level == Level::Resolved {
                for level in [Level::Warning, Level::Limit] {
                    if let Some(fired) = self.0.remove(&(a.alarm_id.clone(), level)) {
                        alerts.push(AlertmanagerAlert {
                            fired,
                            resolution: Some(Arc::clone(a)),
                        });
                    }
                }
            } else {
                self.0.insert((a.alarm_id.clone(), a.level), Arc::clone(a));
                alerts.push(AlertmanagerAlert {
                    fired: Arc::clone(a),
                    resolution: None,
                });
            }
        }
        alerts
    }

    /// Everything still firing.
    pub fn refresh(&self) -> Vec<AlertmanagerAlert> {
        self.0
            .values()
            .map(|fired| AlertmanagerAlert {
                fired: Arc::clone(fired),
                resolution: None,
            })
            .collect()
    }
}

impl TargetSender {
    async fn run(mut self, mut rx: QueueReceiver, stop: CancellationToken) {
        let resend = self.target.resend_interval.0.max(Duration::from_secs(1));
        let mut resend_tick = tokio::time::interval(resend);
        // After a long retry, one refresh rather than a burst of them.
        resend_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        resend_tick.tick().await;
        loop {
            let first = tokio::select! {
                a = rx.recv() => a,
                _ = resend_tick.tick(), if self.target.format == WebhookFormat::Alertmanager => {
                    for (body, alerts) in self.refresh_bodies() {
                        self.send(&body, alerts, &stop).await;
                    }
                    continue;
                }
                _ = stop.cancelled(), if rx.is_empty() => None,
            };
            // The queue closed and drained, or stopping with nothing queued.
            let Some(first) = first else { break };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Some(a) => batch.push(a),
                    None => break,
                }
            }
            self.metrics
                .budget
                .set_delivery_queue(&self.target.name, rx.len());
            if let Some((body, alarms)) = self.body(&batch) {
                self.send(&body, alarms, &stop).await;
            }
        }
    }

    /// The body for a batch and how many alarms or alerts it carries (for Alertmanager,
    /// through its firing set).
    fn body(&mut self, batch: &[Arc<Alarm>]) -> Option<(Value, usize)> {
        if self.target.format == WebhookFormat::Json {
            return Some((json_body(batch), batch.len()));
        }
        let alerts = self.firing.update(batch);
        (!alerts.is_empty()).then(|| {
            let body = alertmanager_body(&alerts, now_ns(), &self.target);
            (body, alerts.len())
        })
    }

    /// Alertmanager: everything still firing, with a fresh expiry, in posts of at most
    /// [`MAX_BATCH`] alerts.
    fn refresh_bodies(&self) -> Vec<(Value, usize)> {
        let alerts = self.firing.refresh();
        alerts
            .chunks(MAX_BATCH)
            .map(|c| {
                let body = alertmanager_body(c, now_ns(), &self.target);
                (body, c.len())
            })
            .collect()
    }

    /// Posts a body of `alarms` alarms or alerts, retrying as configured.
    async fn send(&self, body: &Value, alarms: usize, stop: &CancellationToken) {
        let name = &self.target.name;
        let mut backoff = Backoff::new(self.target.initial_backoff.0, self.target.max_backoff.0);
        for attempt in 1..=self.target.max_attempts {
            match self.attempt(body).await {
                Attempt::Delivered => {
                    self.metrics.budget.delivery(name, "delivered", 1);
                    return;
                }
                Attempt::Rejected(why) => {
                    self.metrics.budget.delivery(name, "failed", 1);
                    tracing::error!(target_name = %name, error = %why, alarms, "alarm target refused the alarms; not retried");
                    return;
                }
                Attempt::Retry(hint, why) => {
                    if attempt == self.target.max_attempts {
                        self.metrics.budget.delivery(name, "failed", 1);
                        tracing::error!(target_name = %name, error = %why, attempts = attempt, alarms, "alarm delivery gave up");
                        return;
                    }
                    self.metrics.budget.delivery(name, "retried", 1);
                    tracing::warn!(target_name = %name, error = %why, attempt, "alarm delivery failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff.next_wait(hint)) => {}
                        // At shutdown, one last attempt rather than a long wait.
                        _ = stop.cancelled() => {}
                    }
                }
            }
        }
    }

    async fn attempt(&self, body: &Value) -> Attempt {
        let mut req = self
            .client
            .post(self.url.clone())
            .timeout(self.target.timeout.0)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        for (k, v) in &self.target.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        match req.send().await {
            Ok(r) if r.status().is_success() => Attempt::Delivered,
            Ok(r) => {
                let status = r.status();
                let hint = retry_after(r.headers());
                let why = format!("HTTP {}", status.as_u16());
                if status.is_server_error() || matches!(status.as_u16(), 408 | 429) {
                    Attempt::Retry(hint, why)
                } else {
                    Attempt::Rejected(why)
                }
            }
            Err(e) => Attempt::Retry(None, failure_kind(&e).into()),
        }
    }
}

fn rfc3339(ns: i64) -> String {
    chrono::DateTime::from_timestamp_nanos(ns).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// One alarm as toolwatch's JSON webhook carries it.
pub fn alarm_json(a: &Alarm) -> Value {
    json!({
        "time": rfc3339(a.time_ns),
        "time_unix_nano": a.time_ns,
        "alarm_id": a.alarm_id,
        "tenant": a.tenant,
        "scope": a.scope.as_str(),
        "scope_id": a.scope_id,
        "budget": a.budget,
        "level": a.level.as_str(),
        "reason": a.reason,
        "observed": a.observed,
        "limit": a.limit,
        "request_id": a.request_id,
        "trace_id": a.trace_id,
        "finding": a.finding.as_ref().map(|f| json!({
            "finding_id": a.alarm_id,
            "rule": f.rule,
            "severity": f.severity,
            "status": if a.level == Level::Resolved { "withdrawn" } else { "open" },
            "span_ids": f.span_ids,
            "trace_ids": f.trace_ids,
        })),
    })
}

/// The generic webhook body.
pub fn json_body(alarms: &[Arc<Alarm>]) -> Value {
    json!({
        "source": "toolwatch",
        "version": 1,
        "alarms": alarms.iter().map(|a| alarm_json(a)).collect::<Vec<_>>(),
    })
}

/// An alert as Alertmanager knows it: the alarm that fired, and its resolution once there is
/// one.
pub struct AlertmanagerAlert {
    /// The warning or limit alarm; its labels identify the alert.
    pub fired: Arc<Alarm>,
    /// The episode's resolution.
    pub resolution: Option<Arc<Alarm>>,
}

/// Alertmanager's alert list. Labels identify an alert: one per (episode, fired level), so a
/// warning and the limit that follows are two alerts, and the resolution ends both. A firing
/// alert's `endsAt` lies three resend intervals ahead: if toolwatch stops re-sending, the alert
/// expires instead of firing forever. A finding is one alert (`ToolwatchFinding`, labelled with
/// its rule and severity), active for the target's `finding_alert_for` unless withdrawn first.
pub fn alertmanager_body(
    alerts: &[AlertmanagerAlert],
    now_ns: i64,
    target: &WebhookTarget,
) -> Value {
    let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    let expiry = nanos(target.resend_interval.0).saturating_mul(3);
    let alerts: Vec<Value> = alerts
        .iter()
        .map(|alert| {
            let a = &alert.fired;
            if let Some(f) = &a.finding {
                let ends = match &alert.resolution {
                    Some(r) => r.time_ns,
                    None => a.time_ns.saturating_add(nanos(target.finding_alert_for.0)),
                };
                return finding_alert(a, f, ends);
            }
            let severity = if a.level == Level::Limit {
                "critical"
            } else {
                "warning"
            };
            let latest = alert.resolution.as_ref().unwrap_or(a);
            let ends = alert
                .resolution
                .as_ref()
                .map_or(now_ns.saturating_add(expiry), |r| r.time_ns);
            json!({
                "labels": {
                    "alertname": "ToolwatchBudget",
                    "tenant": a.tenant,
                    "scope": a.scope.as_str(),
                    "scope_id": a.scope_id,
                    "budget": a.budget,
                    "severity": severity,
                    "alarm_id": a.alarm_id,
                },
                "annotations": {
                    "summary": format!(
                        "{} at {} of {} ({} {})",
                        a.budget, a.observed, a.limit, a.scope.as_str(), a.scope_id
                    ),
                    "reason": latest.reason,
                    "observed": latest.observed.to_string(),
                    "limit": a.limit.to_string(),
                    "request_id": a.request_id.clone().unwrap_or_default(),
                    "trace_id": a.trace_id.clone().unwrap_or_default(),
                },
                "startsAt": rfc3339(a.time_ns),
                "endsAt": rfc3339(ends),
            })
        })
        .collect();
    Value::Array(alerts)
}

/// One finding as an Alertmanager alert: the same labels when raised and when withdrawn.
fn finding_alert(a: &Alarm, f: &FindingEvidence, ends_ns: i64) -> Value {
    json!({
        "labels": {
            "alertname": "ToolwatchFinding",
            "tenant": a.tenant,
            "rule": f.rule,
            "severity": f.severity,
            "request_id": a.scope_id,
            "finding_id": a.alarm_id,
        },
        "annotations": {
            "summary": format!("{} in request {}", f.rule, a.scope_id),
            "reason": a.reason,
            "span_ids": f.span_ids.join(","),
            "trace_id": a.trace_id.clone().unwrap_or_default(),
        },
        "startsAt": rfc3339(a.time_ns),
        "endsAt": rfc3339(ends_ns),
    })
}

#[cfg(test)]
mod tests {
    use super::super::evaluate::Scope;
    use super::*;

    const T0: i64 = 1_700_000_000_000_000_000;

    fn alarm(level: Level, at: i64, observed: f64) -> Arc<Alarm> {
        Arc::new(Alarm {
            time_ns: at,
            alarm_id: "a1".into(),
            scope: Scope::Request,
            scope_id: "req-1".into(),
            tenant: "acme".into(),
            budget: "tool_calls".into(),
            level,
            reason: format!("{}:tool_calls", level.as_str()),
            observed,
            limit: 50.0,
            request_id: Some("req-1".into()),
            trace_id: None,
            finding: None,
        })
    }

    fn target() -> WebhookTarget {
        toml::from_str("name = \"am\"\nurl = \"http://127.0.0.1:9093\"\nformat = \"alertmanager\"\nresend_interval = \"60s\"\nfinding_alert_for = \"1h\"\n")
            .expect("target")
    }

    fn finding(level: Level, at: i64) -> Arc<Alarm> {
        let mut a = (*alarm(level, at, 0.0)).clone();
        a.alarm_id = "f00d".into();
        a.budget = "finding:write_without_allow".into();
        a.reason = "effect=write decision=none".into();
        a.finding = Some(Box::new(FindingEvidence {
            rule: "write_without_allow",
            severity: "high",
            span_ids: vec!["0202020202020202".into()],
            trace_ids: vec!["01010101010101010101010101010101".into()],
        }));
        Arc::new(a)
    }

    #[test]
    fn a_finding_is_one_alert_active_for_its_time_and_ended_by_its_withdrawal() {
        let mut f = FiringAlerts::default();
        let raised = f.update(&[finding(Level::Limit, T0)]);
        assert!(f.refresh().is_empty(), "findings are not re-sent");
        let body = alertmanager_body(&raised, T0 + 1, &target());
        let a = &body[0];
        assert_eq!(a["labels"]["alertname"], "ToolwatchFinding");
        assert_eq!(a["labels"]["rule"], "write_without_allow");
        assert_eq!(a["labels"]["severity"], "high");
        assert_eq!(a["labels"]["finding_id"], "f00d");
        assert_eq!(a["annotations"]["span_ids"], "0202020202020202");
        assert_eq!(a["endsAt"], rfc3339(T0 + 3_600_000_000_000));
        let withdrawn = f.update(&[finding(Level::Resolved, T0 + 5)]);
        let body = alertmanager_body(&withdrawn, T0 + 6, &target());
        assert_eq!(body[0]["labels"], a["labels"], "the same alert");
        assert_eq!(body[0]["endsAt"], rfc3339(T0 + 5));
        let json = alarm_json(&finding(Level::Resolved, T0 + 5));
        assert_eq!(json["finding"]["status"], "withdrawn");
        assert_eq!(json["finding"]["finding_id"], "f00d");
        assert_eq!(
            alarm_json(&alarm(Level::Limit, T0, 1.0))["finding"],
            Value::Null
        );
    }

    #[test]
    fn a_resolution_ends_every_level_that_fired_and_nothing_else() {
        let mut f = FiringAlerts::default();
        let warning = f.update(&[alarm(Level::Warning, T0, 40.0)]);
        let limit = f.update(&[alarm(Level::Limit, T0 + 1, 50.0)]);
        assert_eq!((warning.len(), limit.len(), f.refresh().len()), (1, 1, 2));
        let resolved = f.update(&[alarm(Level::Resolved, T0 + 2, 50.0)]);
        assert!(f.refresh().is_empty());
        let body = alertmanager_body(&resolved, T0 + 3, &target());
        let alerts = body.as_array().expect("array");
        let severities: Vec<&str> = alerts
            .iter()
            .filter_map(|a| a["labels"]["severity"].as_str())
            .collect();
        assert_eq!(severities, ["warning", "critical"]);
        for a in alerts {
            // Labels as fired (so Alertmanager matches them), ended at the resolution.
            assert_eq!(a["labels"]["alarm_id"], "a1");
            assert_eq!(a["endsAt"], rfc3339(T0 + 2));
            assert_eq!(a["annotations"]["reason"], "resolved:tool_calls");
        }
        assert_eq!(alerts[0]["startsAt"], rfc3339(T0));
        // A second resolution of the same episode sends nothing.
        assert!(f.update(&[alarm(Level::Resolved, T0 + 4, 50.0)]).is_empty());
    }

    #[tokio::test]
    async fn a_full_queue_drops_warnings_and_limits_but_keeps_resolutions_in_order() {
        let (q, mut rx) = AlarmQueue::new(2);
        let offered: Vec<bool> = [
            alarm(Level::Warning, T0, 40.0),
            alarm(Level::Limit, T0 + 1, 50.0),
            alarm(Level::Warning, T0 + 2, 40.0),
            alarm(Level::Resolved, T0 + 3, 50.0),
        ]
        .iter()
        .map(|a| q.offer(a))
        .collect();
        assert_eq!(offered, [true, true, false, true]);
        assert_eq!(q.len(), 2);
        let mut got = Vec::new();
        while let Some(a) = rx.try_recv() {
            got.push((a.level, a.time_ns));
        }
        assert_eq!(
            got,
            [
                (Level::Warning, T0),
                (Level::Limit, T0 + 1),
                (Level::Resolved, T0 + 3)
            ]
        );
        assert_eq!(rx.len(), 0);
        assert!(q.offer(&alarm(Level::Warning, T0 + 4, 40.0)), "room again");
    }

    #[test]
    fn a_firing_alert_expires_three_resends_ahead() {
        let mut f = FiringAlerts::default();
        let alerts = f.update(&[alarm(Level::Limit, T0, 50.0)]);
        let body = alertmanager_body(&alerts, T0 + 5, &target());
        assert_eq!(body[0]["endsAt"], rfc3339(T0 + 5 + 180_000_000_000));
        assert_eq!(body[0]["labels"]["severity"], "critical");
        assert_eq!(body[0]["annotations"]["request_id"], "req-1");
    }

    #[test]
    fn the_json_body_carries_every_field() {
        let body = json_body(&[alarm(Level::Warning, T0, 40.0)]);
        assert_eq!(body["source"], "toolwatch");
        let a = &body["alarms"][0];
        assert_eq!(a["time"], "2023-11-14T22:13:20.000Z");
        assert_eq!(a["time_unix_nano"], T0);
        assert_eq!(
            (&a["scope"], &a["level"], &a["observed"], &a["limit"]),
            (
                &Value::from("request"),
                &Value::from("warning"),
                &Value::from(40.0),
                &Value::from(50.0)
            )
        );
        assert_eq!(a["trace_id"], Value::Null);
    }
}
