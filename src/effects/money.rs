//! The money effects every provider shares: a credit keyed by its payment,
//! which then applies the refunds that were waiting for it, and a debit
//! against a known credit. Each posts one ledger entry (natural key, balance
//! in the same statement) and announces it in the outbox.

use serde_json::{Value, json};
use sqlx::PgConnection;

use super::{Applied, Reason};
use crate::ledger::{self, Entry, EntryKind, NewEntry, Posted};
use crate::providers::VerifiedEvent;
use crate::{db, events, outbox};

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

/// Serialises a credit with the refunds that wait for it, until commit.
pub(super) async fn lock_credit(
    conn: &mut PgConnection,
    provider: &str,
    source_ref: &str,
) -> Result<(), sqlx::Error> {
    db::lock_key(conn, provider, &credit_lock(source_ref)).await
}

/// The advisory lock key ([`db::lock_key`]) of payment `source_ref`'s credit.
pub fn credit_lock(source_ref: &str) -> String {
    format!("credit:{source_ref}")
}

/// Credits the wallet once per payment, announces `wallet.credited`, then
/// applies the events deferred until this credit existed.
pub(super) async fn credit(
    conn: &mut PgConnection,
    event: &VerifiedEvent,
    credit: Credit<'_>,
) -> Result<Applied, sqlx::Error> {
    lock_credit(conn, event.provider(), credit.source_ref).await?;
    let entry = NewEntry {
        user_id: credit.user_id,
        currency: credit.currency,
        amount_minor: credit.amount_minor,
        kind: EntryKind::Credit,
        provider: event.provider(),
        source_ref: credit.source_ref,
        event_id: event.event_id(),
        parent_ref: None,
    };
    let announced =
        match post_and_announce(conn, event, &entry, "wallet.credited", credit.context).await? {
            Ok(announced) => announced,
            Err(owner) => {
                return Ok(Applied::owned_by(
                    "this payment was already credited",
                    &owner,
                ));
            }
        };
    let applied =
        super::apply_waiting(conn, event.provider(), credit.source_ref, event.event_id()).await?;
    Ok(Applied::processed(json!({
        "entry_id": announced.entry_id,
        "balance_minor": announced.balance_minor,
        "outbox_id": announced.outbox_id,
        "applied_deferred": applied,
    })))
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
/// lock held ([`lock_credit`]).
pub(super) async fn credit_or_defer(
    conn: &mut PgConnection,
    event: &VerifiedEvent,
    source_ref: &str,
    currency: &str,
) -> Result<Found, sqlx::Error> {
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
    event: &VerifiedEvent,
    debit: Debit<'_>,
) -> Result<Applied, sqlx::Error> {
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

/// Posts `entry` and writes its `topic` outbox row: `{user_id, currency,
/// amount_minor (positive), balance_minor, entry_id}` plus `context`.
/// `Err(owner event id)` when the entry's natural key was already taken.
async fn post_and_announce(
    conn: &mut PgConnection,
    event: &VerifiedEvent,
    entry: &NewEntry<'_>,
    topic: &str,
    context: Value,
) -> Result<Result<Announced, String>, sqlx::Error> {
    let (entry_id, balance_minor) = match ledger::post(conn, entry).await? {
        Posted::Posted {
            entry_id,
            balance_minor,
        } => (entry_id, balance_minor),
        Posted::AlreadyPosted { owner_event_id } => return Ok(Err(owner_event_id)),
    };
    let mut payload = json!({
        "user_id": entry.user_id,
        "currency": entry.currency,
        "amount_minor": entry.amount_minor.abs(),
        "balance_minor": balance_minor,
        "entry_id": entry_id,
    });
    if let (Value::Object(fields), Value::Object(extra)) = (&mut payload, context) {
        fields.extend(extra);
    }
    let outbox_id =
        outbox::enqueue(conn, topic, event.provider(), event.event_id(), &payload).await?;
    Ok(Ok(Announced {
        entry_id,
        balance_minor,
        outbox_id,
    }))
}
