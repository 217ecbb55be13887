//! Admission: how much each tenant and each sender may send, and how large one span or log
//! record may be.
//!
//! Rates are token buckets of requests and bytes (as sent) per second, one per sender and
//! one per tenant, each holding `burst` seconds of its rate. A sender's bucket is charged
//! when its request body has been read, before anything is decoded; a tenant's when the
//! request's items have been filed under their tenants, before they are protected (the
//! costly part), each tenant in a request paying one request and its items' share of the
//! bytes. A request that one bucket cannot pay is refused whole and charges none (429 with
//! `Retry-After` / gRPC `RESOURCE_EXHAUSTED` with RetryInfo, saying when the bucket will hold
//! enough), so one tenant's or sender's flood spends only its own share. Structural limits
//! refuse a request holding a span or record over them (400 / `INVALID_ARGUMENT`, naming the
//! limit and where).

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use serde::{Deserialize, Serialize};

use crate::maps::FastMap;
use crate::units::{ByteSize, HumanDuration};

/// One rate: requests and bytes per second; 0 means no limit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RateConfig {
    /// OTLP export requests per second.
    pub requests_per_second: f64,
    /// Request bytes per second, as sent (before decompression); absent: no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_second: Option<ByteSize>,
    /// The bucket holds this long of the rate: how far a quiet tenant may go over at once.
    pub burst: HumanDuration,
}

impl Default for RateConfig {
    fn default() -> Self {
        RateConfig {
            requests_per_second: 0.0,
            bytes_per_second: None,
            burst: HumanDuration(Duration::from_secs(2)),
        }
    }
}

impl RateConfig {
    fn bytes_rate(&self) -> f64 {
        self.bytes_per_second.map_or(0.0, |b| b.0 as f64)
    }

    fn unlimited(&self) -> bool {
        self.requests_per_second <= 0.0 && self.bytes_rate() <= 0.0
    }
}

/// `[limits.rate]`: every tenant's and every sender's rate, and exceptions by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RatesConfig {
    /// Each tenant's rate (all senders together).
    pub tenant: RateConfig,
    /// Each authenticated sender's rate (all its tenants together).
    pub sender: RateConfig,
    /// Rates of named tenants, instead of `tenant`.
    pub tenants: BTreeMap<String, RateConfig>,
    /// Rates of named senders, instead of `sender`.
    pub senders: BTreeMap<String, RateConfig>,
}

impl RatesConfig {
    /// Checks the rates are numbers a bucket can hold.
    pub fn validate(&self) -> Result<(), String> {
        let all = [("tenant", &self.tenant), ("sender", &self.sender)]
            .into_iter()
            .map(|(k, r)| (k.to_string(), r))
            .chain(
                self.tenants
                    .iter()
                    .map(|(k, r)| (format!("tenants.{k}"), r)),
            )
            .chain(
                self.senders
                    .iter()
                    .map(|(k, r)| (format!("senders.{k}"), r)),
            );
        for (key, r) in all {
            if !r.requests_per_second.is_finite() || r.requests_per_second < 0.0 {
                return Err(format!(
                    "limits.rate.{key}.requests_per_second must be 0 (no limit) or more"
                ));
            }
            if r.burst.0.is_zero() && !r.unlimited() {
                return Err(format!("limits.rate.{key}.burst must be more than 0"));
            }
        }
        Ok(())
    }
}

/// `[limits.structure]`: the largest span or log record accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StructureLimits {
    /// Attributes of one span, event, link, log record, resource or scope.
    pub max_attributes: usize,
    /// Events of one span.
    pub max_events: usize,
    /// Links of one span.
    pub max_links: usize,
    /// Nesting of arrays and maps in one attribute value or log body.
    pub max_value_depth: usize,
    /// Bytes of one string (attribute value, body, name) or bytes value.
    pub max_string_bytes: ByteSize,
    /// Spans and log records in one request.
    pub max_items_per_request: usize,
}

impl Default for StructureLimits {
    fn default() -> Self {
        StructureLimits {
            max_attributes: 1024,
            max_events: 1024,
            max_links: 1024,
            max_value_depth: 32,
            max_string_bytes: ByteSize(4 * 1024 * 1024),
            max_items_per_request: 100_000,
        }
    }
}

/// A request over a structural limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{location}: {found} {what}, over limits.structure.{limit} = {max}")]
pub struct StructureError {
    /// The limit's key.
    pub limit: &'static str,
    /// What was counted.
    pub what: &'static str,
    /// Where, e.g. `resourceSpans[0].scopeSpans[0].spans[3]`.
    pub location: String,
    /// How many there were.
    pub found: usize,
    /// The limit.
    pub max: usize,
}

struct Walk<'a> {
    limits: &'a StructureLimits,
    items: usize,
}

impl Walk<'_> {
    fn over(
        &self,
        limit: &'static str,
        what: &'static str,
        found: usize,
        max: usize,
        at: &dyn Fn() -> String,
    ) -> Result<(), StructureError> {
        if found > max {
            return Err(StructureError {
                limit,
                what,
                location: at(),
                found,
                max,
            });
        }
        Ok(())
    }

    fn attributes(&self, kvs: &[KeyValue], at: &dyn Fn() -> String) -> Result<(), StructureError> {
        self.over(
            "max_attributes",
            "attributes",
            kvs.len(),
            self.limits.max_attributes,
            at,
        )?;
        for kv in kvs {
            self.string(&kv.key, at)?;
            if let Some(v) = &kv.value {
                self.value(v, 1, at)?;
            }
        }
        Ok(())
    }

    fn string(&self, s: &str, at: &dyn Fn() -> String) -> Result<(), StructureError> {
        self.over(
            "max_string_bytes",
            "bytes in a string",
            s.len(),
            self.limits.max_string_bytes.as_usize(),
            at,
        )
    }

    fn value(
        &self,
        v: &AnyValue,
        depth: usize,
        at: &dyn Fn() -> String,
    ) -> Result<(), StructureError> {
        use any_value::Value as V;
        match &v.value {
            Some(V::StringValue(s)) => self.string(s, at),
            Some(V::BytesValue(b)) => self.over(
                "max_string_bytes",
                "bytes in a bytes value",
                b.len(),
                self.limits.max_string_bytes.as_usize(),
                at,
            ),
            Some(V::ArrayValue(a)) => {
                self.over(
                    "max_value_depth",
                    "levels of nested values",
                    depth,
                    self.limits.max_value_depth,
                    at,
                )?;
                a.values
                    .iter()
                    .try_for_each(|x| self.value(x, depth + 1, at))
            }
            Some(V::KvlistValue(m)) => {
                self.over(
                    "max_value_depth",
                    "levels of nested values",
                    depth,
                    self.limits.max_value_depth,
                    at,
                )?;
                self.over(
                    "max_attributes",
                    "entries in a map value",
                    m.values.len(),
                    self.limits.max_attributes,
                    at,
                )?;
                m.values.iter().try_for_each(|kv| {
                    self.string(&kv.key, at)?;
                    kv.value
                        .as_ref()
                        .map_or(Ok(()), |x| self.value(x, depth + 1, at))
                })
            }
            _ => Ok(()),
        }
    }

    fn count_items(&mut self, n: usize) -> Result<(), StructureError> {
        self.items += n;
        self.over(
            "max_items_per_request",
            "spans and log records",
            self.items,
            self.limits.max_items_per_request,
            &|| "request".to_string(),
        )
    }
}

/// Checks a traces request against `limits`.
pub fn check_traces(
    req: &ExportTraceServiceRequest,
    limits: &StructureLimits,
) -> Result<(), StructureError> {
    let mut w = Walk { limits, items: 0 };
    for (r, rs) in req.resource_spans.iter().enumerate() {
        let at_r = || format!("resourceSpans[{r}].resource");
        if let Some(res) = &rs.resource {
            w.attributes(&res.attributes, &at_r)?;
        }
        for (s, ss) in rs.scope_spans.iter().enumerate() {
            w.count_items(ss.spans.len())?;
            if let Some(scope) = &ss.scope {
                w.attributes(&scope.attributes, &|| {
                    format!("resourceSpans[{r}].scopeSpans[{s}].scope")
                })?;
            }
            for (i, span) in ss.spans.iter().enumerate() {
                let at = || format!("resourceSpans[{r}].scopeSpans[{s}].spans[{i}]");
                w.string(&span.name, &at)?;
                w.attributes(&span.attributes, &at)?;
                w.over(
                    "max_events",
                    "events",
                    span.events.len(),
                    limits.max_events,
                    &at,
                )?;
                w.over(
                    "max_links",
                    "links",
                    span.links.len(),
                    limits.max_links,
                    &at,
                )?;
                for e in &span.events {
                    w.string(&e.name, &at)?;
                    w.attributes(&e.attributes, &at)?;
                }
                for l in &span.links {
                    w.attributes(&l.attributes, &at)?;
                }
                if let Some(st) = &span.status {
                    w.string(&st.message, &at)?;
                }
            }
        }
    }
    Ok(())
}

/// Checks a logs request against `limits`.
pub fn check_logs(
    req: &ExportLogsServiceRequest,
    limits: &StructureLimits,
) -> Result<(), StructureError> {
    let mut w = Walk { limits, items: 0 };
    for (r, rl) in req.resource_logs.iter().enumerate() {
        if let Some(res) = &rl.resource {
            w.attributes(&res.attributes, &|| format!("resourceLogs[{r}].resource"))?;
        }
        for (s, sl) in rl.scope_logs.iter().enumerate() {
            w.count_items(sl.log_records.len())?;
            if let Some(scope) = &sl.scope {
                w.attributes(&scope.attributes, &|| {
                    format!("resourceLogs[{r}].scopeLogs[{s}].scope")
                })?;
            }
            for (i, rec) in sl.log_records.iter().enumerate() {
                let at = || format!("resourceLogs[{r}].scopeLogs[{s}].logRecords[{i}]");
                w.attributes(&rec.attributes, &at)?;
                if let Some(body) = &rec.body {
                    w.value(body, 1, &at)?;
                }
            }
        }
    }
    Ok(())
}

/// A bucket: what is left of each measure, as of `at`.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    requests: f64,
    bytes: f64,
    at: Instant,
}

impl Bucket {
    fn full(rate: &RateConfig, now: Instant) -> Bucket {
        let burst = rate.burst.0.as_secs_f64();
        Bucket {
            requests: rate.requests_per_second * burst,
            bytes: rate.bytes_rate() * burst,
            at: now,
        }
    }

    /// Refilled to `now`.
    fn refill(&mut self, rate: &RateConfig, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        let burst = rate.burst.0.as_secs_f64();
        self.requests =
            (self.requests + dt * rate.requests_per_second).min(rate.requests_per_second * burst);
        self.bytes = (self.bytes + dt * rate.bytes_rate()).min(rate.bytes_rate() * burst);
        // Callers read the clock before the lock: a later caller may have refilled already.
        self.at = self.at.max(now);
    }

    /// How long until it holds `requests` and `bytes`; zero when it does now. A request
    /// larger than the whole bucket waits for a full bucket, then goes (into debt).
    fn wait_for(&self, rate: &RateConfig, requests: f64, bytes: f64) -> Duration {
        let burst = rate.burst.0.as_secs_f64();
        let short = |have: f64, want: f64, per_second: f64| {
            // A hair under `want` counts as enough: refills are sums of floating products.
            if per_second <= 0.0 || have >= want - 1e-9 {
                0.0
            } else {
                (want - have) / per_second
            }
        };
        let rps = rate.requests_per_second;
        let bps = rate.bytes_rate();
        let r = short(self.requests, requests.min(rps * burst), rps);
        let b = short(self.bytes, bytes.min(bps * burst), bps);
        Duration::from_secs_f64(r.max(b))
    }

    fn take(&mut self, rate: &RateConfig, requests: f64, bytes: f64) {
        if rate.requests_per_second > 0.0 {
            self.requests -= requests;
        }
        if rate.bytes_rate() > 0.0 {
            self.bytes -= bytes;
        }
    }
}

/// Buckets kept at most per kind; past it, the full ones (idle long enough) are dropped.
const MAX_BUCKETS: usize = 100_000;

/// Who a bucket belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateScope {
    /// A tenant.
    Tenant,
    /// An authenticated sender.
    Sender,
}

impl RateScope {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RateScope::Tenant => "tenant",
            RateScope::Sender => "sender",
        }
    }
}

/// A request refused for a rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateRefusal {
    /// Tenant or sender.
    pub scope: RateScope,
    /// Its name.
    pub name: String,
    /// When its bucket will hold what the request needs.
    pub retry_after: Duration,
}

/// The buckets of every tenant and sender seen.
#[derive(Debug)]
pub struct RateLimiter {
    config: RatesConfig,
    tenants: Mutex<FastMap<String, Bucket>>,
    senders: Mutex<FastMap<String, Bucket>>,
}

impl RateLimiter {
    /// Buckets for `config`.
    pub fn new(config: RatesConfig) -> RateLimiter {
        RateLimiter {
            config,
            tenants: Mutex::new(FastMap::default()),
            senders: Mutex::new(FastMap::default()),
        }
    }

    /// True when no rate is set anywhere (nothing to count).
    pub fn is_unlimited(&self) -> bool {
        self.config.tenant.unlimited()
            && self.config.sender.unlimited()
            && self.config.tenants.values().all(RateConfig::unlimited)
            && self.config.senders.values().all(RateConfig::unlimited)
    }

    fn rate(&self, scope: RateScope, name: &str) -> &RateConfig {
        match scope {
            RateScope::Tenant => self.config.tenants.get(name).unwrap_or(&self.config.tenant),
            RateScope::Sender => self.config.senders.get(name).unwrap_or(&self.config.sender),
        }
    }

    /// Charges `sender` one request of `bytes`, or says when to retry.
    pub fn admit_sender(&self, sender: &str, bytes: u64, now: Instant) -> Result<(), RateRefusal> {
        self.admit(RateScope::Sender, &[(sender, bytes)], now)
    }

    /// Gives `sender` back one request and `bytes` (its request was refused further on).
    pub fn refund_sender(&self, sender: &str, bytes: u64) {
        let rate = self.rate(RateScope::Sender, sender);
        let mut buckets = self.senders.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(b) = buckets.get_mut(sender) {
            let burst = rate.burst.0.as_secs_f64();
            if rate.requests_per_second > 0.0 {
                b.requests = (b.requests + 1.0).min(rate.requests_per_second * burst);
            }
            if rate.bytes_rate() > 0.0 {
                b.bytes = (b.bytes + bytes as f64).min(rate.bytes_rate() * burst);
            }
        }
    }

    /// Charges each tenant one request and its share of the bytes, all or none.
    pub fn admit_tenants(&self, shares: &[(&str, u64)], now: Instant) -> Result<(), RateRefusal> {
        self.admit(RateScope::Tenant, shares, now)
    }

    fn admit(
        &self,
        scope: RateScope,
        shares: &[(&str, u64)],
        now: Instant,
    ) -> Result<(), RateRefusal> {
        let map = match scope {
            RateScope::Tenant => &self.tenants,
            RateScope::Sender => &self.senders,
        };
        let mut buckets = map.lock().unwrap_or_else(PoisonError::into_inner);
        for &(name, bytes) in shares {
            let rate = self.rate(scope, name);
            if rate.unlimited() {
                continue;
            }
            let b = buckets
                .entry(name.to_string())
                .or_insert_with(|| Bucket::full(rate, now));
            b.refill(rate, now);
            let wait = b.wait_for(rate, 1.0, bytes as f64);
            if !wait.is_zero() {
                return Err(RateRefusal {
                    scope,
                    name: name.to_string(),
                    retry_after: wait,
                });
            }
        }
        for &(name, bytes) in shares {
            let rate = self.rate(scope, name);
            if let Some(b) = buckets.get_mut(name) {
                b.take(rate, 1.0, bytes as f64);
            }
        }
        if buckets.len() > MAX_BUCKETS {
            // Full buckets are as good as none. If half the limit is still left, every bucket
            // goes (all start full again): the scan then runs at most once per MAX_BUCKETS / 2
            // new names, never on every request.
            buckets.retain(|name, b| {
                let rate = self.rate(scope, name);
                let mut now_b = *b;
                now_b.refill(rate, now);
                let full = Bucket::full(rate, now);
                now_b.requests < full.requests || now_b.bytes < full.bytes
            });
            if buckets.len() > MAX_BUCKETS / 2 {
                buckets.clear();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

    fn rate(rps: f64, bps: u64) -> RateConfig {
        RateConfig {
            requests_per_second: rps,
            bytes_per_second: (bps > 0).then_some(ByteSize(bps)),
            burst: HumanDuration(Duration::from_secs(2)),
        }
    }

    #[test]
    fn a_bucket_admits_its_burst_then_its_rate_and_says_when() {
        let l = RateLimiter::new(RatesConfig {
            tenant: rate(10.0, 0),
            ..Default::default()
        });
        let t0 = Instant::now();
        for _ in 0..20 {
            l.admit_tenants(&[("acme", 100)], t0)
                .expect("within the burst");
        }
        let refused = l
            .admit_tenants(&[("acme", 100)], t0)
            .expect_err("burst spent");
        assert_eq!(
            (refused.scope, refused.name.as_str()),
            (RateScope::Tenant, "acme")
        );
        assert_eq!(refused.retry_after, Duration::from_millis(100));
        l.admit_tenants(&[("globex", 100)], t0)
            .expect("another tenant's own bucket");
        l.admit_tenants(&[("acme", 100)], t0 + Duration::from_millis(100))
            .expect("refilled one request");
    }

    #[test]
    fn bytes_are_limited_too_and_all_tenants_of_a_request_pay_or_none() {
        let mut config = RatesConfig::default();
        config.tenants.insert("small".into(), rate(0.0, 1000));
        let l = RateLimiter::new(config);
        let t0 = Instant::now();
        l.admit_tenants(&[("free", 10_000), ("small", 1500)], t0)
            .expect("2000 in the bucket");
        let r = l
            .admit_tenants(&[("free", 1), ("small", 1000)], t0)
            .expect_err("500 left");
        assert_eq!(r.retry_after, Duration::from_millis(500));
        // A request larger than the whole bucket goes once the bucket is full.
        l.admit_tenants(&[("small", 5000)], t0 + Duration::from_secs(2))
            .expect("a full bucket");
        let r = l
            .admit_tenants(&[("small", 0)], t0 + Duration::from_secs(2))
            .expect_err("in debt");
        assert_eq!(r.retry_after, Duration::from_secs(3));
    }

    #[test]
    fn a_refund_gives_back_what_a_refused_request_took_and_zero_bytes_is_no_limit() {
        let l = RateLimiter::new(RatesConfig {
            sender: rate(1.0, 0),
            tenant: RateConfig {
                bytes_per_second: Some(ByteSize(0)),
                ..RateConfig::default()
            },
            ..Default::default()
        });
        assert!(!l.is_unlimited());
        let t0 = Instant::now();
        l.admit_sender("eu", 1, t0).expect("1");
        l.admit_sender("eu", 1, t0).expect("2");
        assert!(l.admit_sender("eu", 1, t0).is_err());
        l.refund_sender("eu", 1);
        l.admit_sender("eu", 1, t0).expect("given back");
        // A clock read before another caller's does not credit the time twice.
        l.admit_sender("eu", 1, t0 + Duration::from_secs(1))
            .expect("refilled one");
        assert!(l
            .admit_sender("eu", 1, t0 + Duration::from_millis(500))
            .is_err());
        assert!(l
            .admit_sender("eu", 1, t0 + Duration::from_secs(1))
            .is_err());
        for i in 0..1000 {
            l.admit_tenants(&[(&format!("t{i}"), 1_000_000)], t0)
                .expect("bytes 0: no limit");
        }
    }

    #[test]
    fn named_senders_have_their_own_rates() {
        let mut config = RatesConfig {
            sender: rate(1.0, 0),
            ..Default::default()
        };
        config.senders.insert("gateway".into(), rate(0.0, 0));
        let l = RateLimiter::new(config);
        let t0 = Instant::now();
        for _ in 0..1000 {
            l.admit_sender("gateway", 1, t0).expect("no limit");
        }
        l.admit_sender("eu", 1, t0).expect("1");
        l.admit_sender("eu", 1, t0).expect("2");
        assert!(l.admit_sender("eu", 1, t0).is_err());
    }

    #[test]
    fn structure_limits_name_the_limit_and_where() {
        let limits = StructureLimits {
            max_attributes: 2,
            max_value_depth: 2,
            ..Default::default()
        };
        let kv = |k: &str, v: AnyValue| KeyValue {
            key: k.into(),
            value: Some(v),
            ..Default::default()
        };
        let s = |x: &str| AnyValue {
            value: Some(any_value::Value::StringValue(x.into())),
        };
        let nested = |v: AnyValue| AnyValue {
            value: Some(any_value::Value::ArrayValue(
                opentelemetry_proto::tonic::common::v1::ArrayValue { values: vec![v] },
            )),
        };
        let req = |attrs: Vec<KeyValue>| ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![
                        Span::default(),
                        Span {
                            attributes: attrs,
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        check_traces(
            &req(vec![kv("a", s("1")), kv("b", nested(nested(s("x"))))]),
            &limits,
        )
        .expect("at the limits");
        let e = check_traces(
            &req(vec![kv("a", s("1")), kv("b", s("2")), kv("c", s("3"))]),
            &limits,
        )
        .expect_err("three attributes");
        assert_eq!(
            e.to_string(),
            "resourceSpans[0].scopeSpans[0].spans[1]: 3 attributes, over limits.structure.max_attributes = 2"
        );
        let e = check_traces(&req(vec![kv("b", nested(nested(nested(s("x")))))]), &limits)
            .expect_err("too deep");
        assert_eq!(e.limit, "max_value_depth");
        let few = StructureLimits {
            max_items_per_request: 1,
            ..Default::default()
        };
        assert_eq!(
            check_traces(&req(Vec::new()), &few).map_err(|e| e.limit),
            Err("max_items_per_request")
        );
        let short = StructureLimits {
            max_string_bytes: ByteSize(3),
            ..Default::default()
        };
        assert_eq!(
            check_traces(&req(vec![kv("k", s("four"))]), &short).map_err(|e| e.limit),
            Err("max_string_bytes")
        );
    }
}
