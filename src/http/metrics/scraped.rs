//! What each scrape reads from the database (the outbox's rows, the
//! deferred events and those of them waiting for an owner, the owners
//! learned and their conflicting claims, each provider's last successful
//! sweep by any process, when each source's deliveries arrive), rendered
//! from a recorder of the scrape's own: a read that failed or took too
//! long leaves its gauges out rather than showing their last values.

use std::time::Duration;

use metrics::Label;
use metrics_exporter_prometheus::PrometheusBuilder;
use sqlx::PgPool;

use super::catalogue::*;
use super::gauge;
use crate::http::health::read_within;
use crate::sweep::last_successes;
use crate::{arrivals, events, outbox, owners};

/// How long a scrape waits for each read (they run at once).
const WITHIN: Duration = Duration::from_secs(2);

/// The database's gauges, as far as they could be read.
#[derive(Debug, Clone, Default)]
pub struct Scraped {
    /// By sink.
    pub outbox: Option<Vec<(String, outbox::Depth)>>,
    /// Events waiting for a dependency: how many, the oldest's age (s).
    pub deferred: Option<(i64, f64)>,
    /// Those of them waiting for an owner.
    pub owner_waits: Option<(i64, f64)>,
    pub owners: Option<owners::Counts>,
    /// Each provider's last successful sweep (Unix seconds).
    pub last_successes: Vec<(String, i64)>,
    /// When each source's deliveries arrive.
    pub arrivals: Vec<arrivals::Seen>,
    /// Whether `/readyz` would answer 200 (read by the caller).
    pub ready: Option<bool>,
}

impl Scraped {
    /// Reads every gauge at once, each within [`WITHIN`].
    pub async fn read(pool: &PgPool) -> Scraped {
        let (outbox, deferred, owner_waits, owners, swept, seen) = tokio::join!(
            read_within(WITHIN, outbox_depth(pool.clone())),
            read_within(WITHIN, deferred_depth(pool.clone())),
            read_within(WITHIN, owner_waits(pool.clone())),
            read_within(WITHIN, owner_counts(pool.clone())),
            read_within(WITHIN, sweeps(pool.clone())),
            read_within(WITHIN, seen(pool.clone())),
        );
        Scraped {
            outbox,
            deferred,
            owner_waits,
            owners,
            last_successes: swept.unwrap_or_default(),
            arrivals: seen.unwrap_or_default(),
            ready: None,
        }
    }

    /// The text exposition of what was read; empty when nothing was.
    pub fn render(&self) -> String {
        let recorder = PrometheusBuilder::new().build_recorder();
        describe(&recorder);
        let mut values = Vec::new();
        for (sink, depth) in self.outbox.iter().flatten() {
            for (name, value) in [
                (OUTBOX_DEPTH, depth.pending as f64),
                (OLDEST_PENDING, depth.oldest_pending_secs),
                (OUTBOX_DEAD, depth.dead as f64),
            ] {
                gauge(&recorder, name, vec![Label::new("sink", sink.clone())]).set(value);
            }
        }
        if let Some((count, oldest)) = self.deferred {
            values.extend([(DEFERRED_DEPTH, count as f64), (DEFERRED_OLDEST, oldest)]);
        }
        if let Some((count, oldest)) = self.owner_waits {
            values.extend([(OWNER_WAITS, count as f64), (OWNER_WAIT_OLDEST, oldest)]);
        }
        if let Some(counts) = self.owners {
            values.extend([
                (OWNERS_LEARNED, counts.learned as f64),
                (OWNER_CONFLICTS, counts.conflicts as f64),
            ]);
        }
        if let Some(ready) = self.ready {
            values.push((READY, if ready { 1.0 } else { 0.0 }));
        }
        if values.is_empty()
            && self.last_successes.is_empty()
            && self.outbox.is_none()
            && self.arrivals.is_empty()
        {
            return String::new();
        }
        for (name, value) in values {
            gauge(&recorder, name, Vec::new()).set(value);
        }
        for (provider, at) in &self.last_successes {
            let labels = vec![Label::new("provider", provider.clone())];
            gauge(&recorder, SWEEP_LAST_SUCCESS, labels).set(*at as f64);
        }
        for seen in &self.arrivals {
            let labels = || vec![Label::new("source", seen.source.clone())];
            gauge(&recorder, SOURCE_LAST_EVENT, labels()).set(seen.last_at as f64);
            if let Some(gap) = seen.usual_gap {
                gauge(&recorder, SOURCE_USUAL_GAP, labels()).set(gap as f64);
            }
        }
        recorder.handle().render()
    }
}

// The reads own their pool (each runs on a task of its own).

async fn outbox_depth(pool: PgPool) -> Result<Vec<(String, outbox::Depth)>, sqlx::Error> {
    outbox::depth_by_sink(&pool).await
}

async fn deferred_depth(pool: PgPool) -> Result<(i64, f64), sqlx::Error> {
    events::deferred_depth(&pool).await
}

async fn owner_waits(pool: PgPool) -> Result<(i64, f64), sqlx::Error> {
    events::owner_waits(&pool).await
}

async fn owner_counts(pool: PgPool) -> Result<owners::Counts, sqlx::Error> {
    owners::counts(&pool).await
}

async fn sweeps(pool: PgPool) -> Result<Vec<(String, i64)>, sqlx::Error> {
    last_successes(&pool).await
}

async fn seen(pool: PgPool) -> Result<Vec<arrivals::Seen>, sqlx::Error> {
    arrivals::seen(&pool).await
}
