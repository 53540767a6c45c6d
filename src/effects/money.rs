//! The money effects every provider shares: a credit keyed by its payment,
//! which then applies the refunds that were waiting for it, and a debit
//! against a known credit. Each posts one ledger entry (natural key, balance
//! in the same statement) and announces it in the outbox.

use super::Error;
use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};
use sqlx::PgConnection;

use super::{Applied, Reason};
use crate::ledger::{self, Entry, EntryKind, NewEntry};
use crate::providers::Event;
use crate::{events, outbox};

/// A credit to apply: `source_ref` is the payment's id (its natural key).
pub(super) struct Credit<'a> {
    pub user_id: &'a str,
    pub currency: &'a str,
    pub amount_minor: i64,
    pub source_ref: &'a str,
    /// Provider-specific fields for the `wallet.credited` payload.
    pub context: Value,
}

/// A [`Credit`] that owns its fields, to be applied later (in a batch).
#[derive(Debug, Clone, PartialEq)]
pub struct PlainCredit {
    pub user_id: String,
    pub currency: String,
    pub amount_minor: i64,
    pub source_ref: String,
    pub context: Value,
}

impl From<Credit<'_>> for PlainCredit {
    fn from(credit: Credit<'_>) -> Self {
        PlainCredit {
            user_id: credit.user_id.to_owned(),
            currency: credit.currency.to_owned(),
            amount_minor: credit.amount_minor,
            source_ref: credit.source_ref.to_owned(),
            context: credit.context,
        }
    }
}

/// Credits the wallet once per payment, announces `wallet.credited`, then
/// applies the events deferred until this credit existed.
pub(super) async fn credit(
    conn: &mut PgConnection,
    event: &Event,
    credit: Credit<'_>,
) -> Result<Applied, Error> {
    let credit = PlainCredit::from(credit);
    let mut applied = credit_all(conn, &[(event, &credit)]).await?;
    applied
        .pop()
        .ok_or(Error::Invariant("a credit has no outcome"))
}

/// Applies many credits in order, in a handful of statements whatever their
/// number: the entries and wallets in one, the `wallet.credited` rows (each
/// with the balance right after its entry) in one. Of two events crediting
/// one payment, the first in `credits` (or before) owns the credit; the
/// other is `ignored` with the owner. A credit that events were deferred
/// for applies them before the credits after it are posted, exactly as one
/// credit per transaction would. Call with the credits' and wallets' locks
/// held (the engine takes them), so that every credit and deferred refund
/// committed before is seen.
pub(crate) async fn credit_all(
    conn: &mut PgConnection,
    credits: &[(&Event, &PlainCredit)],
) -> Result<Vec<Applied>, Error> {
    let entries: Vec<NewEntry<'_>> = credits
        .iter()
        .map(|(event, credit)| NewEntry {
            user_id: &credit.user_id,
            currency: &credit.currency,
            amount_minor: credit.amount_minor,
            kind: EntryKind::Credit,
            provider: event.provider(),
            source_ref: &credit.source_ref,
            event_id: event.event_id(),
            parent_ref: None,
        })
        .collect();
    let waiting = waiting_for(conn, &entries).await?;
    let mut applied = Vec::with_capacity(credits.len());
    let mut rest = &entries[..];
    while !rest.is_empty() {
        // Up to and including the next credit that events wait for.
        let end = rest
            .iter()
            .position(|e| waiting.contains(&(e.provider, e.source_ref)))
            .map_or(rest.len(), |i| i + 1);
        let (chunk, after) = rest.split_at(end);
        let contexts = &credits[applied.len()..applied.len() + chunk.len()];
        applied.extend(post_credits(conn, chunk, contexts, &waiting).await?);
        rest = after;
    }
    Ok(applied)
}

/// Posts and announces `entries`, then applies what waits for them.
async fn post_credits(
    conn: &mut PgConnection,
    entries: &[NewEntry<'_>],
    credits: &[(&Event, &PlainCredit)],
    waiting: &HashSet<(&str, &str)>,
) -> Result<Vec<Applied>, Error> {
    let posted = ledger::post(conn, entries).await?;
    let payloads: Vec<Option<Value>> = entries
        .iter()
        .zip(&posted)
        .zip(credits)
        .map(|((entry, posted), (_, credit))| {
            posted.map(|posted| announcement(entry, posted, credit.context.clone()))
        })
        .collect();
    let wallets: Vec<String> = entries
        .iter()
        .map(|e| ledger::wallet_key(e.user_id, e.currency))
        .collect();
    let messages: Vec<outbox::Message<'_>> = entries
        .iter()
        .zip(&payloads)
        .zip(&wallets)
        .filter_map(|((entry, payload), wallet)| {
            Some(outbox::Message {
                topic: "wallet.credited",
                provider: entry.provider,
                event_id: entry.event_id,
                payload: payload.as_ref()?,
                ordering_key: Some(wallet),
            })
        })
        .collect();
    let mut outbox_ids = outbox::enqueue(conn, &messages).await?.into_iter();
    let owners = owners_of_unposted(conn, entries, &posted).await?;
    let mut applied = Vec::with_capacity(entries.len());
    for (entry, posted) in entries.iter().zip(&posted) {
        let Some(posted) = posted else {
            let owner = owners
                .get(&(entry.provider, entry.source_ref))
                .ok_or(Error::Invariant(
                    "an entry that was not posted has no owner",
                ))?;
            applied.push(Applied::owned_by(
                "this payment was already credited",
                owner,
            ));
            continue;
        };
        let outbox_id = outbox_ids.next().flatten();
        let deferred = if waiting.contains(&(entry.provider, entry.source_ref)) {
            super::apply_waiting(conn, entry.provider, entry.source_ref, entry.event_id).await?
        } else {
            Vec::new()
        };
        applied.push(Applied::processed(json!({
            "entry_id": posted.entry_id,
            "balance_minor": posted.balance_minor,
            "outbox_id": outbox_id,
            "applied_deferred": deferred,
        })));
    }
    Ok(applied)
}

/// The events that own the natural keys of the entries that did not post.
async fn owners_of_unposted<'a>(
    conn: &mut PgConnection,
    entries: &[NewEntry<'a>],
    posted: &[Option<ledger::Posted>],
) -> Result<HashMap<(&'a str, &'a str), String>, Error> {
    let mut owners = HashMap::new();
    for (provider, kind, refs) in unposted_by_provider(entries, posted) {
        for (source_ref, owner) in ledger::owners(conn, provider, kind, &refs).await? {
            if let Some(key) = refs.iter().find(|r| **r == source_ref) {
                owners.insert((provider, *key), owner);
            }
        }
    }
    Ok(owners)
}

/// The unposted entries' keys, grouped by provider and kind.
fn unposted_by_provider<'a>(
    entries: &[NewEntry<'a>],
    posted: &[Option<ledger::Posted>],
) -> Vec<(&'a str, EntryKind, Vec<&'a str>)> {
    let mut groups: Vec<(&str, EntryKind, Vec<&str>)> = Vec::new();
    for (entry, _) in entries.iter().zip(posted).filter(|(_, p)| p.is_none()) {
        match groups
            .iter_mut()
            .find(|(p, k, _)| *p == entry.provider && *k == entry.kind)
        {
            Some((_, _, refs)) => refs.push(entry.source_ref),
            None => groups.push((entry.provider, entry.kind, vec![entry.source_ref])),
        }
    }
    groups
}

/// Which of the credits' payments have events waiting for them
/// (`(provider, key)`).
async fn waiting_for<'a>(
    conn: &mut PgConnection,
    entries: &[NewEntry<'a>],
) -> Result<HashSet<(&'a str, &'a str)>, Error> {
    let mut providers: Vec<&str> = entries.iter().map(|e| e.provider).collect();
    providers.sort_unstable();
    providers.dedup();
    let mut waiting = HashSet::new();
    for provider in providers {
        let refs: Vec<&str> = entries
            .iter()
            .filter(|e| e.provider == provider)
            .map(|e| e.source_ref)
            .collect();
        let found = events::waiting(conn, provider, &refs).await?;
        waiting.extend(
            refs.into_iter()
                .filter(|r| found.contains(*r))
                .map(|r| (provider, r)),
        );
    }
    Ok(waiting)
}

/// What a refund finds of the credit it debits.
pub(super) enum Found {
    Credit(Entry),
    /// Not credited yet: the refund waits for it.
    Deferred,
    /// Credited in another currency: the refund can never apply.
    Mismatch(Reason),
}

/// The credit of payment `source_ref`, provided it is in `currency`; when
/// there is none yet, parks `event` until it exists. Call with the credit's
/// lock held (the engine takes it).
pub(super) async fn credit_or_defer(
    conn: &mut PgConnection,
    event: &Event,
    source_ref: &str,
    currency: &str,
) -> Result<Found, Error> {
    Ok(
        match ledger::find(conn, event.provider(), EntryKind::Credit, source_ref).await? {
            Some(credit) if credit.currency != currency => Found::Mismatch(format!(
                "the refund is in {currency} but its payment was credited in {}",
                credit.currency
            )),
            Some(credit) => Found::Credit(credit),
            None => {
                events::defer(conn, event.provider(), event.event_id(), source_ref).await?;
                Found::Deferred
            }
        },
    )
}

/// A debit of `amount_minor` (positive) against `credit`.
pub(super) struct Debit<'a> {
    pub credit: &'a Entry,
    /// The credit's `source_ref`.
    pub parent_ref: &'a str,
    /// The refund's natural key.
    pub source_ref: &'a str,
    pub amount_minor: i64,
    /// Provider-specific fields for the `wallet.debited` payload.
    pub context: Value,
}

/// Posts the refund entry and announces `wallet.debited`.
pub(super) async fn debit(
    conn: &mut PgConnection,
    event: &Event,
    debit: Debit<'_>,
) -> Result<Applied, Error> {
    let entry = NewEntry {
        user_id: &debit.credit.user_id,
        currency: &debit.credit.currency,
        amount_minor: -debit.amount_minor,
        kind: EntryKind::Refund,
        provider: event.provider(),
        source_ref: debit.source_ref,
        event_id: event.event_id(),
        parent_ref: Some(debit.parent_ref),
    };
    match post_and_announce(conn, event, &entry, "wallet.debited", debit.context).await? {
        Ok(announced) => Ok(Applied::processed(json!({
            "entry_id": announced.entry_id,
            "debited_minor": debit.amount_minor,
            "balance_minor": announced.balance_minor,
            "outbox_id": announced.outbox_id,
        }))),
        Err(owner) => Ok(Applied::owned_by("this refund was already debited", &owner)),
    }
}

struct Announced {
    entry_id: i64,
    balance_minor: i64,
    outbox_id: Option<i64>,
}

/// The `wallet.*` payload of a posted entry: `{user_id, currency,
/// amount_minor (positive), balance_minor, entry_id}` plus `context`.
fn announcement(entry: &NewEntry<'_>, posted: ledger::Posted, context: Value) -> Value {
    let mut payload = json!({
        "user_id": entry.user_id,
        "currency": entry.currency,
        "amount_minor": entry.amount_minor.abs(),
        "balance_minor": posted.balance_minor,
        "entry_id": posted.entry_id,
    });
    if let (Value::Object(fields), Value::Object(extra)) = (&mut payload, context) {
        fields.extend(extra);
    }
    payload
}

/// Posts `entry` and writes its `topic` outbox row ([`announcement`]).
/// `Err(owner event id)` when the entry's natural key was already taken.
async fn post_and_announce(
    conn: &mut PgConnection,
    event: &Event,
    entry: &NewEntry<'_>,
    topic: &str,
    context: Value,
) -> Result<Result<Announced, String>, Error> {
    let Some(posted) = ledger::post(conn, std::slice::from_ref(entry))
        .await?
        .pop()
        .flatten()
    else {
        let owner = ledger::owners(conn, entry.provider, entry.kind, &[entry.source_ref])
            .await?
            .remove(entry.source_ref)
            .ok_or(Error::Invariant(
                "an entry that was not posted has no owner",
            ))?;
        return Ok(Err(owner));
    };
    let payload = announcement(entry, posted, context);
    let wallet = ledger::wallet_key(entry.user_id, entry.currency);
    let message = outbox::Message {
        topic,
        provider: event.provider(),
        event_id: event.event_id(),
        payload: &payload,
        ordering_key: Some(&wallet),
    };
    let outbox_id = outbox::enqueue_one(conn, message).await?;
    Ok(Ok(Announced {
        entry_id: posted.entry_id,
        balance_minor: posted.balance_minor,
        outbox_id,
    }))
}
