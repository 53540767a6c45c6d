//! THE transaction, for one event or many: claim the event ids, take every
//! lock the events need in one global order, apply the events' effects
//! kind by kind where arrival order allows ([`Schedule`]: each kind's
//! events sharing their statements, and the events one releases right
//! after it: [`release`]), record
//! the outcomes; the caller then commits ([`Prepared::commit`]) or, when a
//! request gave up meanwhile, rolls back. One event is a transaction of
//! one: the batch, the fallback, a sweep and `events replay` all run this
//! code.

use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use super::schedule::Schedule;
use super::{Error, locks, release};
use crate::effects::{self, Applied, Decoded};
use crate::events::{self, Claim, Outcome};
use crate::{db, ledger, outbox, owners};

/// How a transaction of many events begins (one round trip):
/// - it waits at most 1 s for any one lock (a row another session holds, a
///   claim of a copy in flight), then fails and its events are applied one
///   by one, each waiting as long as the statement timeout allows: one hot
///   key never stalls the batches behind it;
/// - its statements run on generic plans, planned once per connection: a
///   custom plan of a set-based statement costs more than running it for a
///   dozen events. Every lookup in them is by key, so they are planned with
///   sequential scans disabled: a plan made while a table was nearly empty
///   must not keep scanning it as it grows. The one table they do scan,
///   the outbox's few routes (`outbox_sinks`), then costs the plan a
///   disabled scan's penalty, which would make Postgres compile it (JIT,
///   some 600 ms on every run): JIT is off, as it always should be for
///   statements of milliseconds.
pub(super) const BEGIN_BATCH: &str = "begin; set local lock_timeout = '1s'; \
    set local plan_cache_mode = force_generic_plan; set local enable_seqscan = off; \
    set local jit = off";

/// How a transaction of one event begins: as [`BEGIN_BATCH`], but it waits
/// for locks as long as the statement timeout allows.
pub(super) const BEGIN_ONE: &str = "begin; \
    set local plan_cache_mode = force_generic_plan; set local enable_seqscan = off; \
    set local jit = off";

/// How the drainer learns that outbox rows were committed.
#[derive(Debug, Clone, Default)]
pub enum Wake {
    /// `pg_notify` once per commit, for a drainer in another process (it
    /// also polls).
    #[default]
    Notify,
    /// The drainers live in this process, one a sink: woken directly after
    /// the commit, without `pg_notify`; while the only one accepts them, the
    /// rows the transaction writes are leased to it at insert and handed
    /// over in memory ([`outbox::handoff`]).
    InProcess(outbox::Wakers),
}

impl Wake {
    /// The lease the transaction's outbox rows are written with, if they
    /// are handed to this process's drainer.
    fn lease(&self) -> Option<outbox::Lease> {
        match self {
            Wake::Notify => None,
            Wake::InProcess(drainers) => drainers.lease(),
        }
    }
}

/// A transaction whose statements are done, not yet committed: each
/// event's outcome once it commits.
pub(super) struct Prepared {
    /// `None` when nothing was claimed (every event a duplicate).
    tx: Option<Transaction<'static, Postgres>>,
    outcomes: Vec<Outcome>,
    /// How its outbox rows were written leased to this process's drainer
    /// (decided once, before its statements), and those rows, handed over
    /// once it committed.
    leased: Option<outbox::Lease>,
    handed: Vec<outbox::handoff::Written>,
}

impl Prepared {
    /// Commits, waking the drainer as `wake` says; each event's outcome in
    /// order.
    pub(super) async fn commit(self, wake: &Wake) -> Result<Vec<Outcome>, Error> {
        let Some(mut tx) = self.tx else {
            return Ok(self.outcomes);
        };
        if let Wake::Notify = wake {
            outbox::notify(&mut tx).await?;
        }
        tx.commit().await?;
        if let Wake::InProcess(drainers) = wake {
            drainers.hand(self.leased.as_ref(), self.handed);
        }
        Ok(self.outcomes)
    }

    /// Leaves nothing behind.
    pub(super) async fn rollback(self) -> Result<(), Error> {
        if let Some(tx) = self.tx {
            tx.rollback().await?;
        }
        Ok(())
    }
}

/// Applies `units` in one transaction begun with `begin`, up to its commit:
/// each event's outcome is `duplicate` for an event recorded before and
/// for a later copy of one in `units`. Any error rolls everything back.
///
/// An event recorded after its claim by a transaction that takes none (an
/// import) is found when its row is written: the transaction rolls back
/// and runs once more, and that event is then a `duplicate`.
pub(super) async fn prepare(
    pool: &PgPool,
    units: &[&Decoded],
    begin: &'static str,
    wake: &Wake,
) -> Result<Prepared, Error> {
    let lease = wake.lease();
    let attempts = async {
        let mut arrival = false;
        for _ in 0..ATTEMPTS {
            let handed = outbox::handoff::mark();
            match apply(pool, units, begin, arrival).await? {
                Attempt::Prepared(prepared) => return Ok(prepared),
                Attempt::Recorded => outbox::handoff::forget_since(handed),
                Attempt::Crossed => {
                    outbox::handoff::forget_since(handed);
                    arrival = true;
                }
            }
        }
        Err(Error::Invariant(
            "events were recorded by another transaction after their claim, again and again",
        ))
    };
    let (prepared, handed) = outbox::leasing(lease.clone(), attempts).await;
    let mut prepared = prepared?;
    prepared.leased = lease;
    prepared.handed = handed;
    Ok(prepared)
}

/// How many times [`prepare`] runs a transaction that rolled back before
/// its commit ([`Attempt`]).
const ATTEMPTS: usize = 3;

/// How one run of a transaction ended.
enum Attempt {
    Prepared(Prepared),
    /// Rolled back: a claimed event was recorded meanwhile (it is a
    /// `duplicate` when run again).
    Recorded,
    /// Rolled back: an owner learned anew released credits after events
    /// had been moved past it ([`Schedule::crossed`]); it runs again in
    /// arrival order.
    Crossed,
}

/// [`prepare`], once its outbox rows' lease is decided: its events by kind
/// ([`Schedule::by_kind`]), or in `arrival` order.
async fn apply(
    pool: &PgPool,
    units: &[&Decoded],
    begin: &'static str,
    arrival: bool,
) -> Result<Attempt, Error> {
    let mut outcomes = vec![Outcome::Duplicate; units.len()];
    let nothing = |outcomes| {
        Attempt::Prepared(Prepared {
            tx: None,
            outcomes,
            leased: None,
            handed: Vec::new(),
        })
    };
    if units.is_empty() {
        return Ok(nothing(outcomes));
    }
    let claims: Vec<Claim<'_>> = units.iter().map(|unit| Claim::of(unit.event())).collect();
    let mut tx = db::begin_with(pool, begin).await?;
    let locked = locks::claim_and_lock(&mut tx, &claims, units).await?;
    let claimed = locked.claimed;
    if claimed.is_empty() {
        tx.rollback().await?;
        return Ok(nothing(outcomes));
    }
    let claimed_units: Vec<&Decoded> = claimed.iter().map(|&i| units[i]).collect();
    let schedule = match arrival {
        true => Schedule::arrival(&claimed_units),
        false => Schedule::by_kind(&claimed_units, &locked.owners, &locked.awaited_by),
    };
    // Claimed event `schedule.order[k]` is the `k`-th applied.
    let in_order: Vec<usize> = schedule.order.iter().map(|&k| claimed[k]).collect();
    let ordered: Vec<&Decoded> = in_order.iter().map(|&i| units[i]).collect();
    let mut unwritten = Unwritten {
        claims: in_order.iter().map(|&i| &claims[i]).collect(),
        written: 0,
    };
    let applying = apply_in_order(&mut tx, &ordered, &schedule, Some(&mut unwritten));
    let applied = match events::knowing_nothing_waits(locked.nothing_waits, applying).await? {
        Applying::Applied(applied) => applied,
        stopped => {
            tx.rollback().await?;
            return Ok(match stopped {
                Applying::Crossed => Attempt::Crossed,
                _ => Attempt::Recorded,
            });
        }
    };
    if applied.len() != ordered.len() {
        // Never commit a claimed event without its outcome.
        return Err(Error::Invariant("a claimed event has no outcome"));
    }
    if !unwritten.write(&mut tx, &applied).await? {
        tx.rollback().await?;
        return Ok(Attempt::Recorded);
    }
    for (&i, applied) in in_order.iter().zip(&applied) {
        outcomes[i] = applied.outcome;
    }
    Ok(Attempt::Prepared(Prepared {
        tx: Some(tx),
        outcomes,
        leased: None,
        handed: Vec::new(),
    }))
}

/// The claimed events of a transaction, in the order applied, and how many
/// of them have their row written: every one at the end, and those applied
/// before an event that releases others, so that a waiting one among them
/// is found.
struct Unwritten<'a> {
    claims: Vec<&'a Claim<'a>>,
    written: usize,
}

impl Unwritten<'_> {
    /// Writes the rows of the events applied so far (`applied`, in order)
    /// that are not written yet. `false`: one of them was recorded by
    /// another transaction meanwhile.
    async fn write(&mut self, conn: &mut PgConnection, applied: &[Applied]) -> Result<bool, Error> {
        let rows: Vec<(&Claim<'_>, Outcome, &serde_json::Value)> = self.claims[self.written..]
            .iter()
            .zip(&applied[self.written..])
            .map(|(claim, applied)| (*claim, applied.outcome, &applied.detail))
            .collect();
        self.written += rows.len();
        let written = events::record_claimed(conn, &rows).await?;
        Ok(written == rows.len() as u64)
    }
}

/// A replayed event's effect applied under its locks, not yet committed
/// ([`reapply`]).
pub(super) struct Reapplied<'a> {
    tx: Transaction<'static, Postgres>,
    unit: &'a Decoded,
    pub(super) applied: Applied,
}

impl Reapplied<'_> {
    /// Commits, replacing the stored outcome with the new one when
    /// `record` (and ending the wait of an event that waited, once it no
    /// longer does).
    pub(super) async fn commit(mut self, record: bool) -> Result<Applied, Error> {
        if record {
            let event = self.unit.event();
            let (outcome, detail) = (self.applied.outcome, &self.applied.detail);
            events::record_outcome(
                &mut self.tx,
                event.provider(),
                event.event_id(),
                outcome,
                detail,
            )
            .await?;
            if outcome != Outcome::Deferred {
                events::undefer(&mut self.tx, event.provider(), event.event_id()).await?;
            }
        }
        outbox::notify(&mut self.tx).await?;
        self.tx.commit().await?;
        Ok(self.applied)
    }
}

/// Re-runs a recorded event's effect under its locks ([`super::replay`]):
/// no claim. Effects that exist already are kept (their natural keys make
/// them no-ops).
pub(super) async fn reapply<'a>(pool: &PgPool, unit: &'a Decoded) -> Result<Reapplied<'a>, Error> {
    let mut tx = db::begin_with(pool, BEGIN_ONE).await?;
    locks::claim_and_lock(&mut tx, &[], &[unit]).await?;
    let schedule = Schedule::arrival(&[unit]);
    let applied = match apply_in_order(&mut tx, &[unit], &schedule, None).await? {
        Applying::Applied(mut applied) => applied.pop(),
        _ => None,
    }
    .ok_or(Error::Invariant("a replayed event has no outcome"))?;
    Ok(Reapplied { tx, unit, applied })
}

/// How [`apply_in_order`] ended.
enum Applying {
    /// Each event's result, in the order applied.
    Applied(Vec<Applied>),
    /// One of the claimed events before a release was recorded meanwhile.
    Recorded,
    /// An owner learned anew would release credits past events moved
    /// across it ([`Schedule::crossed`]).
    Crossed,
}

/// Applies `units` (in `schedule`'s order) set by set
/// ([`effects::apply_set`]), with the same result as one at a time; the
/// events an event releases apply right after it, before anything else,
/// once the rows of the claimed events before it are written
/// (`unwritten`).
async fn apply_in_order(
    conn: &mut PgConnection,
    units: &[&Decoded],
    schedule: &Schedule,
    mut unwritten: Option<&mut Unwritten<'_>>,
) -> Result<Applying, Error> {
    let mut applied = Vec::with_capacity(units.len());
    while let Some((set, positions)) = schedule.next_set(applied.len()) {
        let rest = units
            .get(positions)
            .ok_or(Error::Invariant("a set runs past its events"))?;
        let done = effects::apply_set(conn, set, rest).await?;
        if done.is_empty() || done.len() > rest.len() {
            return Err(Error::Invariant(
                "a set of events answered none or too many",
            ));
        }
        for (unit, mut result) in rest.iter().zip(done) {
            if !result.releases.is_empty() {
                // Usually known without a statement (the claim's probes).
                let keys: Vec<&str> = result.releases.iter().map(String::as_str).collect();
                let waiting = events::waiting(conn, unit.event().provider(), &keys).await?;
                if !waiting.is_empty() {
                    // An owner learned anew that frees credits: rows of
                    // keys outside its plan.
                    let frees_credits = waiting.iter().any(|key| owners::is_wait_key(key));
                    if frees_credits && schedule.crossed(applied.len()) {
                        return Ok(Applying::Crossed);
                    }
                    if let Some(unwritten) = unwritten.as_deref_mut()
                        && !unwritten.write(conn, &applied).await?
                    {
                        return Ok(Applying::Recorded);
                    }
                }
                release::waiting(conn, unit.event(), &mut result, &waiting).await?;
            }
            applied.push(result);
        }
    }
    Ok(Applying::Applied(applied))
}

/// The keys `unit` shares with others: its event id, its plan's keys and
/// its wallets. Events that share one are applied in arrival order.
pub(super) fn shared_keys(unit: &Decoded) -> impl Iterator<Item = String> + '_ {
    let (event, plan) = (unit.event(), unit.plan());
    plan.keys
        .iter()
        .cloned()
        .chain(plan.wallets.iter().map(|(u, c)| ledger::wallet_key(u, c)))
        .chain([format!("{}:{}", event.provider(), event.event_id())])
}
