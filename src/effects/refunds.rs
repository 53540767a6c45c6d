//! Refunds: those that carry their own amount and id (Razorpay's
//! `rfnd_…`, PayPal's refunds), each debiting its amount once, and Stripe's
//! cumulative `charge.refunded`, debiting what its total adds. Never more
//! than is left of the payment's credit; each waits for that credit.

use serde_json::{Value, json};
use sqlx::PgConnection;

use super::Decoded;
use super::credits::post_announced;
use super::effect::{Applied, Effect, Error, OwnRefund, Reason, RefundRow, StripeCharge};
use super::fields::refund_status;
use crate::ledger::{self, Entry, EntryKind, NewEntry};
use crate::payments::{self, Payment, Recorded};
use crate::providers::Event;
use crate::{events, invoices};

/// Debits `refund` (its own amount, never more than is left of the
/// credit), once per refund id; deferred until the payment is credited. A
/// refund larger than its payment or in another currency than its credit
/// is rejected before anything is written.
pub(super) async fn debit_own_refund(
    conn: &mut PgConnection,
    event: &Event,
    refund: &OwnRefund,
    row: &RefundRow,
) -> Result<Applied, Error> {
    let found = credit_or_defer(conn, event, &refund.payment_id, refund.currency).await?;
    let credit = match found.settled(&refund.payment_id) {
        Ok(credit) => credit,
        Err(settled) => return Ok(settled),
    };
    if refund.amount_minor > credit.amount_minor {
        return Ok(Applied::rejected("the refund is larger than its payment"));
    }
    if let RefundRow::Carried(Some(payment)) = row
        && let Recorded::Differs =
            payments::upsert(conn, &payment.row(event.provider()), None).await?
    {
        return Ok(Applied::rejected(payments::DIFFERS));
    }
    let provider = event.provider();
    if let Some(owner) = ledger::find(conn, provider, EntryKind::Refund, &refund.id).await? {
        return Ok(Applied::owned_by(
            "this refund was already debited",
            &owner.event_id,
        ));
    }
    let refunded = ledger::refunded(conn, provider, &refund.payment_id, None).await?;
    let amount_minor = refund
        .amount_minor
        .min(credit.amount_minor - refunded.total_minor);
    if amount_minor <= 0 {
        return Ok(Applied::ignored("the credit is already fully refunded"));
    }
    if let RefundRow::FromLedger = row
        && let Some(rejected) = record_refunded(
            conn,
            event,
            refund,
            &credit,
            refunded.total_minor + amount_minor,
        )
        .await?
    {
        return Ok(rejected);
    }
    let debit = Debit {
        event,
        credit: &credit,
        parent_ref: &refund.payment_id,
        source_ref: &refund.id,
        amount_minor,
        context: refund.context.clone(),
    };
    post_debits(conn, std::slice::from_ref(&debit))
        .await?
        .pop()
        .ok_or(Error::Invariant("a refund has no outcome"))
}

/// Moves the credited payment's row to `refunded_minor` refunded (its
/// status to `partially_refunded` or `refunded`): `Some(rejected)` when the
/// row was stored with another amount or currency.
async fn record_refunded(
    conn: &mut PgConnection,
    event: &Event,
    refund: &OwnRefund,
    credit: &Entry,
    refunded_minor: i64,
) -> Result<Option<Applied>, Error> {
    let payment = Payment {
        provider: event.provider(),
        payment_id: &refund.payment_id,
        payment_ref: None,
        user_id: Some(&credit.user_id),
        amount_minor: credit.amount_minor,
        currency: &credit.currency,
        status: refund_status(credit.amount_minor, refunded_minor)
            .ok_or(Error::Invariant("a refund refunds nothing"))?,
        refunded_minor,
        created: None,
    };
    Ok(match payments::upsert(conn, &payment, None).await? {
        Recorded::Differs => Some(Applied::rejected(payments::DIFFERS)),
        Recorded::Recorded { .. } => None,
    })
}

/// Debits, for each charge ([`Effect::ChargeRefund`]), the wallet credited
/// for its PaymentIntent by `amount_refunded` minus what was already
/// debited for this charge (never negative, never more than what is left of
/// the credit), in a handful of statements whatever their number. Deferred
/// until that credit exists. A refund in another currency than its
/// credit's, or of a charge recorded with another amount or currency, is
/// rejected before anything is written. Answers a prefix of `units` (never
/// empty when `units` is not): it stops before a charge of a payment that
/// one before it debits, or of another provider. Call with their plans'
/// locks held.
pub(super) async fn debit_charge_refunds(
    conn: &mut PgConnection,
    units: &[&Decoded],
) -> Result<Vec<Applied>, Error> {
    let mut charges: Vec<(&Event, &StripeCharge, &str)> = Vec::with_capacity(units.len());
    for unit in units {
        let Effect::ChargeRefund(charge) = unit.effect() else {
            return Err(Error::Invariant(
                "a set of charge refunds holds another event",
            ));
        };
        let Some(intent) = charge.payment_intent() else {
            return Err(Error::Invariant("a charge refund has no payment intent"));
        };
        let event = unit.event();
        let apart = charges
            .iter()
            .all(|(other, _, paid)| other.provider() == event.provider() && *paid != intent);
        if !apart {
            break;
        }
        charges.push((event, charge, intent));
    }
    let Some((first, _, _)) = charges.first() else {
        return Ok(Vec::new());
    };
    let provider = first.provider();
    let intents: Vec<&str> = charges.iter().map(|(_, _, intent)| *intent).collect();
    let mut credits = ledger::find_many(conn, provider, EntryKind::Credit, &intents).await?;
    let mut settled: Vec<Option<Applied>> = Vec::with_capacity(charges.len());
    let mut found: Vec<Option<Entry>> = Vec::with_capacity(charges.len());
    for (event, charge, intent) in &charges {
        let credit = credits.remove(*intent);
        let currency = charge.payment.currency;
        match settle(conn, event, intent, currency, credit)
            .await?
            .settled(intent)
        {
            Ok(credit) => {
                settled.push(None);
                found.push(Some(credit));
            }
            Err(outcome) => {
                settled.push(Some(outcome));
                found.push(None);
            }
        }
    }
    // The charges' rows, of those with a credit to debit.
    let rows: Vec<(usize, Payment<'_>)> = charges
        .iter()
        .enumerate()
        .filter(|(k, _)| found[*k].is_some())
        .map(|(k, (event, charge, _))| (k, charge.payment.row(event.provider())))
        .collect();
    let upserts: Vec<(&Payment<'_>, Option<&str>)> =
        rows.iter().map(|(_, row)| (row, None)).collect();
    for ((k, _), recorded) in rows
        .iter()
        .zip(payments::upsert_many(conn, &upserts).await?)
    {
        if recorded == Recorded::Differs {
            settled[*k] = Some(Applied::rejected(payments::DIFFERS));
        }
    }
    let keys: Vec<String> = charges
        .iter()
        .map(|(_, charge, _)| charge_refund_key(charge.id(), charge.payment.refunded_minor))
        .collect();
    let open = |settled: &[Option<Applied>]| -> Vec<usize> {
        (0..charges.len())
            .filter(|&k| settled[k].is_none())
            .collect()
    };
    let wanted: Vec<&str> = open(&settled).iter().map(|&k| keys[k].as_str()).collect();
    let debited = ledger::find_many(conn, provider, EntryKind::Refund, &wanted).await?;
    for k in open(&settled) {
        if let Some(owner) = debited.get(&keys[k]) {
            settled[k] = Some(Applied::owned_by(
                "this refund was already debited",
                &owner.event_id,
            ));
        }
    }
    let pending = open(&settled);
    let sums: Vec<(&str, Option<&str>)> = pending
        .iter()
        .map(|&k| (charges[k].2, Some(charges[k].1.id())))
        .collect();
    let refunded = ledger::refunded_many(conn, provider, &sums).await?;
    let mut debits: Vec<(usize, Debit<'_>)> = Vec::with_capacity(pending.len());
    for (&k, refunded) in pending.iter().zip(refunded) {
        let (event, charge, intent) = charges[k];
        let credit = found[k]
            .as_ref()
            .ok_or(Error::Invariant("a refund to debit has no credit"))?;
        let outstanding = charge.payment.refunded_minor - refunded.matching_minor;
        if outstanding <= 0 {
            settled[k] = Some(Applied::superseded(json!({
                "reason": "a larger refund of this charge was already debited",
                "debited_minor": refunded.matching_minor,
            })));
            continue;
        }
        let amount_minor = outstanding.min(credit.amount_minor - refunded.total_minor);
        if amount_minor <= 0 {
            settled[k] = Some(Applied::ignored("the credit is already fully refunded"));
            continue;
        }
        debits.push((
            k,
            Debit {
                event,
                credit,
                parent_ref: intent,
                source_ref: &keys[k],
                amount_minor,
                context: json!({ "payment_intent": intent, "charge": charge.id() }),
            },
        ));
    }
    let (at, debits): (Vec<usize>, Vec<Debit<'_>>) = debits.into_iter().unzip();
    for (k, posted) in at.into_iter().zip(post_debits(conn, &debits).await?) {
        settled[k] = Some(posted);
    }
    settled
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or(Error::Invariant("a charge refund has no outcome"))
}

/// The natural key of a charge's refunds: `{charge id}:{amount_refunded}`
/// (cumulative, so each larger total is a new entry for the difference).
/// [`ledger::refunded`] matches exactly this shape, never a prefix.
fn charge_refund_key(charge: &str, amount_refunded_minor: i64) -> String {
    format!("{charge}:{amount_refunded_minor}")
}

/// What a refund finds of the credit it debits.
enum Found {
    Credit(Entry),
    /// Not credited yet: the refund waits for it.
    Deferred,
    /// Credited in another currency: the refund can never apply.
    Mismatch(Reason),
    /// Never credited, and never will be: the payment pays an invoice
    /// (whose effects are the invoice's), so its refund moves no wallet.
    Invoice(String),
}

impl Found {
    /// What a refund records when there is no credit to debit.
    fn settled(self, payment: &str) -> Result<Entry, Applied> {
        match self {
            Found::Credit(credit) => Ok(credit),
            Found::Deferred => Err(Applied::deferred(payment)),
            Found::Mismatch(reason) => Err(Applied::rejected(reason)),
            Found::Invoice(invoice) => Err(Applied::ignored_with(json!({
                "reason": "the payment pays an invoice: its refund moves no wallet",
                "invoice_id": invoice,
            }))),
        }
    }
}

/// The credit of payment `source_ref`, provided it is in `currency`; when
/// there is none yet, parks `event` until it exists, unless the payment
/// pays an invoice (it is never credited). Call with the credit's lock held
/// (the engine takes it; [`super::learning::link_invoice`] holds it too, and
/// releases what waits here).
async fn credit_or_defer(
    conn: &mut PgConnection,
    event: &Event,
    source_ref: &str,
    currency: &str,
) -> Result<Found, Error> {
    let provider = event.provider();
    let credit = ledger::find(conn, provider, EntryKind::Credit, source_ref).await?;
    settle(conn, event, source_ref, currency, credit).await
}

/// [`credit_or_defer`], once the credit of `source_ref` was looked up.
async fn settle(
    conn: &mut PgConnection,
    event: &Event,
    source_ref: &str,
    currency: &str,
    credit: Option<Entry>,
) -> Result<Found, Error> {
    let provider = event.provider();
    Ok(match credit {
        Some(credit) if credit.currency != currency => Found::Mismatch(format!(
            "the refund is in {currency} but its payment was credited in {}",
            credit.currency
        )),
        Some(credit) => Found::Credit(credit),
        None => match invoices::paid_by(conn, provider, source_ref).await? {
            Some(invoice) => Found::Invoice(invoice),
            None => {
                events::defer(conn, provider, event.event_id(), source_ref).await?;
                Found::Deferred
            }
        },
    })
}

/// A debit of `amount_minor` (positive) against `credit`, by `event`.
struct Debit<'a> {
    event: &'a Event,
    credit: &'a Entry,
    /// The credit's `source_ref`.
    parent_ref: &'a str,
    /// The refund's natural key.
    source_ref: &'a str,
    amount_minor: i64,
    /// Provider-specific fields for the `wallet.debited` payload.
    context: Value,
}

/// Posts the refund entries in order and announces each as
/// `wallet.debited` (with the balance right after it), in two statements
/// whatever their number.
async fn post_debits(conn: &mut PgConnection, debits: &[Debit<'_>]) -> Result<Vec<Applied>, Error> {
    let entries: Vec<NewEntry<'_>> = debits
        .iter()
        .map(|debit| NewEntry {
            user_id: &debit.credit.user_id,
            currency: &debit.credit.currency,
            amount_minor: -debit.amount_minor,
            kind: EntryKind::Refund,
            provider: debit.event.provider(),
            source_ref: debit.source_ref,
            event_id: debit.event.event_id(),
            parent_ref: Some(debit.parent_ref),
        })
        .collect();
    let events: Vec<&Event> = debits.iter().map(|debit| debit.event).collect();
    let contexts: Vec<Value> = debits.iter().map(|debit| debit.context.clone()).collect();
    let posted = post_announced(conn, &entries, "wallet.debited", &events, contexts).await?;
    let mut applied = Vec::with_capacity(debits.len());
    for ((entry, debit), posted) in entries.iter().zip(debits).zip(posted) {
        applied.push(match posted {
            Some((posted, outbox_id)) => Applied::processed(json!({
                "entry_id": posted.entry_id,
                "debited_minor": debit.amount_minor,
                "balance_minor": posted.balance_minor,
                "outbox_id": outbox_id,
            })),
            None => {
                let provider = entry.provider;
                let owner = ledger::find(conn, provider, EntryKind::Refund, entry.source_ref)
                    .await?
                    .ok_or(Error::Invariant(
                        "an entry that was not posted has no owner",
                    ))?;
                Applied::owned_by("this refund was already debited", &owner.event_id)
            }
        });
    }
    Ok(applied)
}
