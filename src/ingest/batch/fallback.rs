//! The one fallback after a failed batch: its events one by one, those
//! that share a key in arrival order.

use std::collections::HashMap;

use futures_util::future::join_all;
use sqlx::PgPool;
use tokio::sync::Semaphore;

use super::Job;
use crate::effects::Decoded;
use crate::ingest::engine::Wake;
use crate::ingest::{Error, engine, one};
use crate::telemetry;

/// The one fallback, after a failed batch: each event whose request still
/// waits in a transaction of its own ([`one::apply`]: data the database
/// refuses rejects that event alone), answered as soon as it is done. A
/// request that gives up meanwhile has its transaction dropped, so that its
/// 503 leaves nothing behind. Not when the database itself is lost: one by
/// one would only wait for it again.
///
/// Events that share a key (an event id, a payment, a subscription, an
/// invoice, a wallet: their plans) run in arrival order, one after the
/// other, so a failed batch ends as it would have committed; groups that
/// share nothing run concurrently, at most [`FALLBACK_GROUPS`] at once, so
/// one hot key holds one connection, never the pool. Nothing is decoded
/// again: each job carries its decoded event.
pub(super) async fn one_by_one(pool: &PgPool, wake: &Wake, jobs: Vec<Job>, error: &Error) {
    if error.is_connection_failure() {
        for job in jobs {
            let _ = job.reply.send(Err(error.clone()));
        }
        return;
    }
    tracing::warn!(
        error = %telemetry::bounded_to(&error.to_string(), telemetry::MAX_LOGGED_ERROR_BYTES),
        events = jobs.len(),
        "a batch failed: applying its events one by one"
    );
    let groups = Semaphore::new(FALLBACK_GROUPS);
    let mut by_group: Vec<Vec<Job>> = Vec::new();
    let group_of = sharing_groups(jobs.iter().map(|job| &job.unit));
    for (job, group) in jobs.into_iter().zip(group_of) {
        if by_group.len() <= group {
            by_group.resize_with(group + 1, Vec::new);
        }
        by_group[group].push(job);
    }
    join_all(by_group.into_iter().map(|group| {
        let groups = &groups;
        async move {
            let Ok(_turn) = groups.acquire().await else {
                return;
            };
            for job in group {
                if job.gave_up.is_cancelled() {
                    continue;
                }
                tokio::select! {
                    answer = one::apply(pool, &job.unit, wake) => {
                        let _ = job.reply.send(answer);
                    }
                    () = job.gave_up.cancelled() => {}
                }
            }
        }
    }))
    .await;
}

/// How many groups of a failed batch are applied at once.
const FALLBACK_GROUPS: usize = 4;

/// The group of each event: events that share an event id or any key of
/// their plans are in one group. Groups are numbered in order of their
/// first event.
fn sharing_groups<'a>(units: impl Iterator<Item = &'a Decoded>) -> Vec<usize> {
    let mut owner: HashMap<String, usize> = HashMap::new();
    let mut parent: Vec<usize> = Vec::new();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for (i, unit) in units.enumerate() {
        parent.push(i);
        for key in engine::shared_keys(unit) {
            match owner.get(&key) {
                Some(&other) => {
                    let (a, b) = (root(&mut parent, other), root(&mut parent, i));
                    parent[a.max(b)] = a.min(b);
                }
                None => {
                    owner.insert(key, i);
                }
            }
        }
    }
    let mut numbers: HashMap<usize, usize> = HashMap::new();
    (0..parent.len())
        .map(|i| {
            let group = root(&mut parent, i);
            let next = numbers.len();
            *numbers.entry(group).or_insert(next)
        })
        .collect()
}
