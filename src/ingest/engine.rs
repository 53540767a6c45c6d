//! THE transaction, for one event or many: claim the event ids, take every
//! lock the events need in one global order, apply each event's effects in
//! arrival order (consecutive credits sharing their statements), record the
//! outcomes, commit. One event is a transaction of one: the batch, the
//! fallback, a sweep and `events replay` all run this code.
//!
//! Locks, in the order every transaction takes them, so none can deadlock
//! with another: the event claims sorted by `(provider, event_id)`; then the
//! effects' keys ([`effects::plan`]) and the wallets, each class sorted by
//! hash. Effects run with all of them held.

use sqlx::{PgConnection, PgPool};

use crate::effects::plan::KEY_LOCK_CLASS;
use crate::effects::{self, Applied, Plan};
use crate::events::{self, Claim, Lock, Outcome, Recorded};
use crate::providers::Event;
use crate::{db, ledger, outbox};

use super::Error;

/// How a transaction of many events begins (one round trip):
/// - it waits at most 1 s for any one lock (a row another session holds, a
///   claim of a copy in flight), then fails and its events are applied one
///   by one, each waiting as long as the statement timeout allows: one hot
///   key never stalls the batches behind it;
/// - its statements run on generic plans, planned once per connection: a
///   custom plan of a set-based statement costs more than running it for a
///   dozen events. Every lookup in them is by key, so they are planned with
///   sequential scans disabled: a plan made while a table was nearly empty
///   must not keep scanning it as it grows.
pub(super) const BEGIN_BATCH: &str = "begin; set local lock_timeout = '1s'; \
    set local plan_cache_mode = force_generic_plan; set local enable_seqscan = off";

/// How a transaction of one event begins: as [`BEGIN_BATCH`], but it waits
/// for locks as long as the statement timeout allows.
pub(super) const BEGIN_ONE: &str = "begin; \
    set local plan_cache_mode = force_generic_plan; set local enable_seqscan = off";

/// How the drainer learns that outbox rows were committed.
#[derive(Debug, Clone, Default)]
pub enum Wake {
    /// `pg_notify` once per commit, for a drainer in another process (it
    /// also polls).
    #[default]
    Notify,
    /// The drainer lives in this process: woken directly after the commit,
    /// without `pg_notify`.
    InProcess(outbox::Waker),
}

/// Applies `events` in one transaction begun with `begin`. Returns each
/// event's outcome, in order: `duplicate` for an event recorded before and
/// for a later copy of one in `events`. Returns `None` after rolling back,
/// without committing anything, when `all_wanted()` turned false (a request
/// gave up). Any error rolls everything back. `committing()` runs once the
/// statements are done, as the commit is sent (the next batch may start
/// while this one waits for its WAL flush).
pub(super) async fn commit(
    pool: &PgPool,
    events: &[&Event],
    begin: &'static str,
    wake: &Wake,
    all_wanted: impl Fn() -> bool,
    committing: impl FnOnce(),
) -> Result<Option<Vec<Outcome>>, Error> {
    let mut outcomes = vec![Outcome::Duplicate; events.len()];
    if events.is_empty() {
        return Ok(Some(outcomes));
    }
    let plans: Vec<Plan> = events.iter().map(|event| effects::plan(event)).collect();
    let claims: Vec<Claim<'_>> = events.iter().map(|event| Claim::of(event)).collect();
    let all: Vec<(&Event, &Plan)> = events.iter().copied().zip(&plans).collect();
    let mut tx = db::begin_with(pool, begin).await?;
    let claimed = lock(&mut tx, &claims, &all).await?;
    if claimed.is_empty() {
        tx.rollback().await?;
        return Ok(Some(outcomes));
    }
    let units: Vec<(&Event, &Plan)> = claimed.iter().map(|&i| all[i]).collect();
    let applied = apply_in_order(&mut tx, &units).await?;
    if applied.len() != units.len() {
        // Never commit a claimed event without its outcome.
        return Err(Error::Invariant("a claimed event has no outcome"));
    }
    let recorded: Vec<Recorded<'_>> = units
        .iter()
        .zip(&applied)
        .map(|((event, _), applied)| Recorded {
            provider: event.provider(),
            event_id: event.event_id(),
            outcome: applied.outcome,
            detail: &applied.detail,
        })
        .collect();
    events::record_claimed(&mut tx, &recorded).await?;
    if let Wake::Notify = wake {
        outbox::notify(&mut tx).await?;
    }
    if !all_wanted() {
        tx.rollback().await?;
        return Ok(None);
    }
    committing();
    tx.commit().await?;
    if let Wake::InProcess(drainer) = wake {
        drainer.wake();
    }
    for (&i, applied) in claimed.iter().zip(&applied) {
        outcomes[i] = applied.outcome;
    }
    Ok(Some(outcomes))
}

/// Re-runs a recorded event's effects under its locks, in one transaction
/// ([`super::replay`]): no claim. Effects that exist already are kept (their
/// natural keys make them no-ops). `record(applied)` says whether the new
/// outcome replaces the stored one.
pub(super) async fn reapply(
    pool: &PgPool,
    event: &Event,
    record: impl FnOnce(&Applied) -> bool,
) -> Result<(Applied, bool), Error> {
    let plan = effects::plan(event);
    let mut tx = db::begin_with(pool, BEGIN_ONE).await?;
    lock(&mut tx, &[], &[(event, &plan)]).await?;
    let applied = apply_in_order(&mut tx, &[(event, &plan)])
        .await?
        .pop()
        .ok_or(Error::Invariant("a replayed event has no outcome"))?;
    let recorded = record(&applied);
    if recorded {
        events::record_outcome(
            &mut tx,
            event.provider(),
            event.event_id(),
            applied.outcome,
            &applied.detail,
        )
        .await?;
    }
    outbox::notify(&mut tx).await?;
    tx.commit().await?;
    Ok((applied, recorded))
}

/// Claims `claims` (none: a replay) and takes the locks of `units` (the
/// claims' events, or the replayed one): of the claimed events only, when
/// claiming. The wallets are locked in the same statement when every one is
/// known up front; a refund's wallet is its credit's, found once the
/// credit's key is held, so a transaction with a refund locks all its
/// wallets in a second statement (never some in each: the wallet class is
/// taken in one sorted sweep).
async fn lock(
    conn: &mut PgConnection,
    claims: &[Claim<'_>],
    units: &[(&Event, &Plan)],
) -> Result<Vec<usize>, sqlx::Error> {
    let claiming = !claims.is_empty();
    let debits = units.iter().any(|(_, plan)| plan.debits.is_some());
    let owner = |i: usize| claiming.then_some(i);
    let locks = locks(units, owner, !debits);
    let claimed = events::claim_and_lock(conn, claims, &locks).await?;
    if debits {
        let locked: Vec<(&Event, &Plan)> = if claiming {
            claimed.iter().map(|&i| units[i]).collect()
        } else {
            units.to_vec()
        };
        lock_wallets(conn, &locked).await?;
    }
    Ok(claimed)
}

/// The key locks of `units` (and their wallets' when `with_wallets`), each
/// owned by `owner(index)`.
fn locks(
    units: &[(&Event, &Plan)],
    owner: impl Fn(usize) -> Option<usize>,
    with_wallets: bool,
) -> Vec<Lock> {
    let mut locks = Vec::new();
    for (i, (_, plan)) in units.iter().enumerate() {
        locks.extend(plan.keys.iter().map(|key| Lock {
            owner: owner(i),
            class: KEY_LOCK_CLASS,
            key: key.clone(),
        }));
        if with_wallets {
            locks.extend(plan.wallets.iter().map(|(user_id, currency)| Lock {
                owner: owner(i),
                class: ledger::WALLET_LOCK_CLASS,
                key: ledger::wallet_key(user_id, currency),
            }));
        }
    }
    locks
}

/// Locks every wallet `units` credit or debit, in one sorted sweep.
async fn lock_wallets(
    conn: &mut PgConnection,
    units: &[(&Event, &Plan)],
) -> Result<(), sqlx::Error> {
    let wallets: Vec<(&str, &str)> = units
        .iter()
        .flat_map(|(_, plan)| plan.wallets.iter().map(|(u, c)| (u.as_str(), c.as_str())))
        .collect();
    let debited: Vec<(&str, &str)> = units
        .iter()
        .filter_map(|(event, plan)| Some((event.provider(), plan.debits.as_deref()?)))
        .collect();
    if wallets.is_empty() && debited.is_empty() {
        return Ok(());
    }
    ledger::lock_wallets(conn, &wallets, &debited).await
}

/// Applies each event in order; consecutive plain credits share their
/// statements ([`effects::apply_credits`]), with the same result as one at a
/// time.
async fn apply_in_order(
    conn: &mut PgConnection,
    units: &[(&Event, &Plan)],
) -> Result<Vec<Applied>, effects::Error> {
    let mut applied = Vec::with_capacity(units.len());
    let mut rest = units;
    while let Some(((event, plan), after)) = rest.split_first() {
        if plan.credit.is_none() {
            applied.push(effects::apply(conn, event).await?);
            rest = after;
            continue;
        }
        let run = rest
            .iter()
            .position(|(_, plan)| plan.credit.is_none())
            .unwrap_or(rest.len());
        applied.extend(effects::apply_credits(conn, &rest[..run]).await?);
        rest = &rest[run..];
    }
    Ok(applied)
}
