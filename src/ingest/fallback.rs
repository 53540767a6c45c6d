//! The one fallback after a failed batch: its events one by one, those
//! that share a key in arrival order.

use std::collections::HashMap;

use futures_util::future::join_all;
use sqlx::PgPool;
use tokio::sync::{Semaphore, oneshot};

use super::Error;
use super::batch::Answer;
use super::engine::Wake;
use crate::providers::Event;
use crate::{effects, ledger, telemetry};

/// The one fallback, after a failed batch: each event whose request still
/// waits in a transaction of its own ([`super::ingest`]: data the database
/// refuses rejects that event alone), answered as soon as it is done. A
/// request that gives up meanwhile has its transaction dropped, so that its
/// 503 leaves nothing behind. Not when the database itself is lost: one by
/// one would only wait for it again.
///
/// Events that share a key (an event id, a payment, a subscription, an
/// invoice, a wallet: [`effects::plan`]) run in arrival order, one after
/// the other, so a failed batch ends as it would have committed; groups
/// that share nothing run concurrently, at most [`FALLBACK_GROUPS`] at once,
/// so one hot key holds one connection, never the pool.
pub(super) async fn one_by_one(
    pool: &PgPool,
    wake: &Wake,
    pending: Vec<Pending<'_>>,
    error: &Error,
) {
    if error.is_connection_failure() {
        for (_, reply) in pending {
            if let Some(reply) = reply {
                let _ = reply.send(Err(error.clone()));
            }
        }
        return;
    }
    tracing::warn!(
        error = %telemetry::bounded_to(&error.to_string(), telemetry::MAX_LOGGED_ERROR_BYTES),
        events = pending.len(),
        "a batch failed: applying its events one by one"
    );
    let groups = Semaphore::new(FALLBACK_GROUPS);
    let one = |event: &Event, reply: Option<oneshot::Sender<Answer>>| {
        let event = event.clone();
        async move {
            let Some(mut reply) = reply.filter(|reply| !reply.is_closed()) else {
                return;
            };
            tokio::select! {
                answer = super::ingest_waking(pool, &event, wake) => {
                    let _ = reply.send(answer);
                }
                () = reply.closed() => {}
            }
        }
    };
    let mut by_group: Vec<Vec<Pending<'_>>> = Vec::new();
    let group_of = sharing_groups(pending.iter().map(|(event, _)| *event));
    for ((event, reply), group) in pending.into_iter().zip(group_of) {
        if by_group.len() <= group {
            by_group.resize_with(group + 1, Vec::new);
        }
        by_group[group].push((event, reply));
    }
    join_all(by_group.into_iter().map(|group| {
        let (groups, one) = (&groups, &one);
        async move {
            let Ok(_turn) = groups.acquire().await else {
                return;
            };
            for (event, reply) in group {
                one(event, reply).await;
            }
        }
    }))
    .await;
}

/// An event of a failed batch and its reply, if its request still waits.
pub(super) type Pending<'a> = (&'a Event, Option<oneshot::Sender<Answer>>);

/// How many groups of a failed batch are applied at once.
const FALLBACK_GROUPS: usize = 4;

/// The group of each event: events that share an event id or any key of
/// their plans are in one group. Groups are numbered in order of their
/// first event.
fn sharing_groups<'a>(events: impl Iterator<Item = &'a Event>) -> Vec<usize> {
    let mut owner: HashMap<String, usize> = HashMap::new();
    let mut parent: Vec<usize> = Vec::new();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for (i, event) in events.enumerate() {
        parent.push(i);
        let plan = effects::plan(event);
        let keys = plan
            .keys
            .into_iter()
            .chain(plan.wallets.iter().map(|(u, c)| ledger::wallet_key(u, c)))
            .chain([format!("{}:{}", event.provider(), event.event_id())]);
        for key in keys {
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
