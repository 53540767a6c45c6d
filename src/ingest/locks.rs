//! The locks of a transaction, in the order every transaction takes them,
//! so none can deadlock with another: the event claims sorted by
//! `(provider, event_id)`; then the effects' keys ([`effects::Plan`]) and
//! the wallets, each class sorted by hash. Effects run with all of them
//! held. An event released by another ([`super::release`]) takes its own
//! the same way, after those of the event that released it.

use std::collections::HashSet;

use sqlx::PgConnection;

use crate::effects::{Decoded, KEY_LOCK_CLASS};
use crate::events::{self, Claim, Lock};
use crate::{ledger, owners};

/// Claims `claims` (none: a replay) and takes the locks of `units` (the
/// claims' events, or the replayed one): of the claimed events only, when
/// claiming. The wallets are locked in the same statement when every one
/// is known up front; a refund's wallet is its credit's, found once the
/// credit's key is held, so a transaction with a refund locks all its
/// wallets in a second statement (never some in each: the wallet class is
/// taken in one sorted sweep).
pub(super) async fn claim_and_lock(
    conn: &mut PgConnection,
    claims: &[Claim<'_>],
    units: &[&Decoded],
) -> Result<Locked, sqlx::Error> {
    let claiming = !claims.is_empty();
    let debits = units.iter().any(|unit| {
        let plan = unit.plan();
        plan.debits.is_some() || plan.finds_owner.is_some()
    });
    let owner = |i: usize| claiming.then_some(i);
    let locks = locks(units, owner, !debits);
    // Read once the locks are held: what the effects would ask next.
    let awaited: Vec<Vec<String>> = match claiming {
        true => units.iter().map(|unit| unit.awaited()).collect(),
        false => Vec::new(),
    };
    let probes: Vec<(&str, &str)> = units
        .iter()
        .zip(&awaited)
        .flat_map(|(unit, keys)| {
            keys.iter()
                .map(|key| (unit.event().provider(), key.as_str()))
        })
        .collect();
    let events::Claimed { claimed, waiting } =
        events::claim_and_lock(conn, claims, &locks, &probes).await?;
    // Whether events wait for what each claimed event may release.
    let awaited_by: Vec<bool> = claimed
        .iter()
        .map(|&i| {
            let provider = units[i].event().provider();
            awaited.get(i).is_some_and(|keys| {
                keys.iter()
                    .any(|key| waiting.contains(&(provider.to_owned(), key.clone())))
            })
        })
        .collect();
    // Only the claimed events' keys are locked: only they are known.
    let nothing_waits = claimed
        .iter()
        .filter_map(|&i| Some((units[i].event().provider(), awaited.get(i)?)))
        .flat_map(|(provider, keys)| {
            keys.iter()
                .map(move |key| (provider.to_owned(), key.clone()))
        })
        .filter(|probe| !waiting.contains(probe))
        .collect();
    let locked: Vec<&Decoded> = match claiming {
        true => claimed.iter().map(|&i| units[i]).collect(),
        false => units.to_vec(),
    };
    let owners = match debits {
        true => lock_wallets(conn, &locked).await?,
        false => vec![None; locked.len()],
    };
    Ok(Locked {
        claimed,
        owners,
        nothing_waits,
        awaited_by,
    })
}

/// What [`claim_and_lock`] took.
pub(super) struct Locked {
    /// The indexes of the claimed events (none for a replay).
    pub claimed: Vec<usize>,
    /// For each claimed event in that order (each unit, for a replay): the
    /// owner whose wallet a refund or
    /// a credit with a learned owner moves, when the lock found one.
    pub owners: Vec<Option<String>>,
    /// The claimed events' keys that nothing waits for
    /// ([`events::knowing_nothing_waits`]), read with their locks held.
    pub nothing_waits: HashSet<(String, String)>,
    /// For each claimed event in that order: whether events waited, when
    /// the locks were taken, for something it may release.
    pub awaited_by: Vec<bool>,
}

/// The key locks of `units` (and their wallets' when `with_wallets`), each
/// owned by `owner(index)`.
fn locks(
    units: &[&Decoded],
    owner: impl Fn(usize) -> Option<usize>,
    with_wallets: bool,
) -> Vec<Lock> {
    let mut locks = Vec::new();
    for (i, unit) in units.iter().enumerate() {
        let plan = unit.plan();
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

/// Locks every wallet `units` credit or debit, in one sorted sweep: a
/// learned owner's is found first, with its key held. Returns, for each
/// unit, the owner of the wallet it debits or whose owner it learns, when
/// one is known.
async fn lock_wallets(
    conn: &mut PgConnection,
    units: &[&Decoded],
) -> Result<Vec<Option<String>>, sqlx::Error> {
    let lists: Vec<(&str, &[owners::Candidate])> = units
        .iter()
        .map(|unit| {
            let candidates = unit.plan().finds_owner.as_ref().map(|(c, _)| c.as_slice());
            (unit.event().provider(), candidates.unwrap_or_default())
        })
        .collect();
    let mut owners = owners::resolve_many(conn, &lists).await?;
    let wallets: Vec<(&str, &str)> = units
        .iter()
        .flat_map(|unit| {
            let wallets = &unit.plan().wallets;
            wallets.iter().map(|(u, c)| (u.as_str(), c.as_str()))
        })
        .chain(units.iter().zip(&owners).filter_map(|(unit, owner)| {
            let (_, currency) = unit.plan().finds_owner.as_ref()?;
            Some((owner.as_deref()?, currency.as_str()))
        }))
        .collect();
    let debited: Vec<(&str, &str)> = units
        .iter()
        .filter_map(|unit| Some((unit.event().provider(), unit.plan().debits.as_deref()?)))
        .collect();
    if wallets.is_empty() && debited.is_empty() {
        return Ok(owners);
    }
    let credited = ledger::lock_wallets(conn, &wallets, &debited).await?;
    for (unit, owner) in units.iter().zip(&mut owners) {
        let provider = unit.event().provider();
        if let Some(payment) = unit.plan().debits.as_deref() {
            *owner = credited
                .iter()
                .find(|c| c.provider == provider && c.source_ref == payment)
                .map(|c| c.user_id.clone());
        }
    }
    Ok(owners)
}
