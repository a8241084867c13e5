//! Prometheus metrics (text exposition via the Prometheus project's `prometheus-client`).
//!
//! Requests by route, method and status; request latency by route; turns prepared; tokens kept
//! and dropped; tools refused; section-cache hits and misses; reloads by outcome; requests
//! refused at the concurrency limit.

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Metric, Registry};
use strata_assembler::assemble::{CacheStats, Report, SectionStatus};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: String,
    method: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

/// The service's metrics.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram>,
    turns: Counter,
    tokens_kept: Counter,
    tokens_dropped: Counter,
    sections_dropped: Counter,
    tools_refused: Counter,
    tools_definition_changed: Counter,
    cache_hits: Counter,
    cache_misses: Counter,
    cache_bytes: Gauge<u64, AtomicU64>,
    reloads: Family<OutcomeLabels, Counter>,
    shed: Counter,
    in_flight: Gauge,
    agent_unavailable: Gauge,
    last_cache: Mutex<(u64, u64)>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Register every metric (in the order `/metrics` lists them).
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("strata");
        Metrics {
            requests: registered(&mut registry, "http_requests", "HTTP requests by route, method and status"),
            latency: {
                let latency = Family::<RouteLabels, Histogram>::new_with_constructor(|| {
                    // 0.25 ms to about 8 s.
                    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
                });
                registry.register_with_unit(
                    "http_request_duration",
                    "HTTP request latency by route",
                    prometheus_client::registry::Unit::Seconds,
                    latency.clone(),
                );
                latency
            },
            turns: registered(&mut registry, "turns_prepared", "Turns prepared"),
            tokens_kept: registered(&mut registry, "tokens_kept", "Prompt tokens in prepared requests"),
            tokens_dropped: registered(&mut registry, "tokens_dropped", "Tokens of runtime sections dropped to fit the budget"),
            sections_dropped: registered(&mut registry, "sections_dropped", "Runtime sections dropped to fit the budget"),
            tools_refused: registered(&mut registry, "tools_refused", "Announced tools refused (not allowlisted, changed or narrowed away)"),
            tools_definition_changed: registered(&mut registry, "tools_definition_changed", "Announced tools refused because their description, schema or server differs from the signed pin (ADR-0041)"),
            cache_hits: registered(&mut registry, "section_cache_hits", "Rendered elements served from the assembler's cache"),
            cache_misses: registered(&mut registry, "section_cache_misses", "Rendered elements rendered and tokenized"),
            cache_bytes: registered(&mut registry, "section_cache_bytes", "Bytes held by the assembler's cache"),
            reloads: registered(&mut registry, "agent_reloads", "Agent definition reloads by outcome (ok, refused)"),
            shed: registered(&mut registry, "requests_shed", "Requests refused with 503 at the concurrency limit"),
            in_flight: registered(&mut registry, "requests_in_flight", "Requests being served"),
            agent_unavailable: registered(&mut registry, "agent_unavailable", "1 while the running agent is refused (a signing key revoked, or the trust store unreadable or not as pinned), else 0"),
            last_cache: Mutex::new((0, 0)),
            registry,
        }
    }

    /// Count one finished request.
    pub fn request(&self, route: &str, method: &str, status: u16, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                route: route.to_owned(),
                method: method.to_owned(),
                status,
            })
            .inc();
        self.latency
            .get_or_create(&RouteLabels {
                route: route.to_owned(),
            })
            .observe(seconds);
    }

    /// Count a prepared turn from its report.
    pub fn turn(&self, report: &Report) {
        self.turns.inc();
        self.tokens_kept.inc_by(report.used_tokens);
        let mut dropped = 0u64;
        let mut dropped_tokens = 0u64;
        for s in &report.sections {
            if matches!(s.status, SectionStatus::Dropped { .. }) {
                dropped += 1;
                dropped_tokens += s.tokens;
            }
        }
        self.sections_dropped.inc_by(dropped);
        self.tokens_dropped.inc_by(dropped_tokens);
        self.tools_refused.inc_by(report.tools.refused.len() as u64);
        let changed = report
            .tools
            .refused_tools()
            .iter()
            .filter(|t| t.cause == strata_assembler::assemble::RefusalCause::DefinitionChanged)
            .count();
        self.tools_definition_changed.inc_by(changed as u64);
    }

    /// Count a reload.
    pub fn reload(&self, ok: bool) {
        self.reloads
            .get_or_create(&OutcomeLabels {
                outcome: if ok { "ok" } else { "refused" }.to_owned(),
            })
            .inc();
    }

    /// Count a request refused at the concurrency limit.
    pub fn shed(&self) {
        self.shed.inc();
    }

    /// Whether the running agent is refused.
    pub fn agent_unavailable(&self, unavailable: bool) {
        self.agent_unavailable.set(i64::from(unavailable));
    }

    /// One more (or one fewer) request in flight.
    pub fn in_flight(&self, delta: i64) {
        self.in_flight.inc_by(delta);
    }

    /// Fold the assembler's cache counters in (they restart when the agent is reloaded).
    pub fn cache(&self, stats: CacheStats) {
        let mut last = self
            .last_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (h, m) = *last;
        let (h, m) = if stats.hits < h || stats.misses < m {
            (0, 0)
        } else {
            (h, m)
        };
        self.cache_hits.inc_by(stats.hits - h);
        self.cache_misses.inc_by(stats.misses - m);
        *last = (stats.hits, stats.misses);
        self.cache_bytes.set(stats.bytes as u64);
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "encoding metrics");
        }
        out
    }
}

/// A new metric, registered under `name` (after the registry's prefix) with `help`.
fn registered<M: Metric + Clone + Default>(registry: &mut Registry, name: &str, help: &str) -> M {
    let metric = M::default();
    registry.register(name, help, metric.clone());
    metric
}
