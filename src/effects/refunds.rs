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

/// Debits each refund ([`Effect::Refund`]) by its own amount, never more
/// than is left of the credit, once per refund id, in a handful of
/// statements whatever their number; deferred until the payment is
/// credited. A refund larger than its payment or in another currency than
/// its credit is rejected before anything is written. Answers a prefix of
/// `units` (never empty when `units` is not): it stops before a refund of
/// a payment that one before it debits, or of another provider. Call with
/// their plans' locks held.
pub(super) async fn debit_own_refunds(
    conn: &mut PgConnection,
    units: &[&Decoded],
) -> Result<Vec<Applied>, Error> {
    let mut refunds = units
        .iter()
        .map(|unit| match unit.effect() {
            Effect::Refund { refund, row } => Ok((unit.event(), refund, row)),
            _ => Err(Error::Invariant("a set of refunds holds another event")),
        })
        .collect::<Result<Vec<(&Event, &OwnRefund, &RefundRow)>, Error>>()?;
    refunds.truncate(apart(refunds.iter().map(|(event, refund, _)| {
        (event.provider(), refund.payment_id.as_str())
    })));
    let Some((first, _, _)) = refunds.first() else {
        return Ok(Vec::new());
    };
    let provider = first.provider();
    let paid: Vec<&str> = refunds
        .iter()
        .map(|(_, r, _)| r.payment_id.as_str())
        .collect();
    let mut credits = ledger::find_many(conn, provider, EntryKind::Credit, &paid).await?;
    let mut settled: Vec<Option<Applied>> = Vec::with_capacity(refunds.len());
    let mut found: Vec<Option<Entry>> = Vec::with_capacity(refunds.len());
    for (event, refund, _) in &refunds {
        let credit = credits.remove(&refund.payment_id);
        let looked_up = settle(conn, event, &refund.payment_id, refund.currency, credit).await?;
        let (outcome, credit) = match looked_up.settled(&refund.payment_id) {
            Ok(credit) if refund.amount_minor > credit.amount_minor => (
                Some(Applied::rejected("the refund is larger than its payment")),
                None,
            ),
            Ok(credit) => (None, Some(credit)),
            Err(outcome) => (Some(outcome), None),
        };
        settled.push(outcome);
        found.push(credit);
    }
    // The rows the refunds carry, of those with a credit to debit.
    let carried: Vec<(usize, Payment<'_>)> = refunds
        .iter()
        .enumerate()
        .filter(|(k, _)| settled[*k].is_none())
        .filter_map(|(k, (event, _, row))| match row {
            RefundRow::Carried(Some(payment)) => Some((k, payment.row(event.provider()))),
            _ => None,
        })
        .collect();
    reject_differing(conn, &carried, &mut settled).await?;
    let open = |settled: &[Option<Applied>]| -> Vec<usize> {
        (0..refunds.len())
            .filter(|&k| settled[k].is_none())
            .collect()
    };
    let wanted: Vec<&str> = open(&settled)
        .iter()
        .map(|&k| refunds[k].1.id.as_str())
        .collect();
    let debited = ledger::find_many(conn, provider, EntryKind::Refund, &wanted).await?;
    for k in open(&settled) {
        if let Some(owner) = debited.get(&refunds[k].1.id) {
            settled[k] = Some(Applied::owned_by(
                "this refund was already debited",
                &owner.event_id,
            ));
        }
    }
    let pending = open(&settled);
    let sums: Vec<(&str, Option<&str>)> = pending.iter().map(|&k| (paid[k], None)).collect();
    let refunded = ledger::refunded_many(conn, provider, &sums).await?;
    // (refund, amount to debit, what its payment has refunded after it)
    let mut amounts: Vec<(usize, i64, i64)> = Vec::with_capacity(pending.len());
    for (&k, refunded) in pending.iter().zip(refunded) {
        let credit = found[k]
            .as_ref()
            .ok_or(Error::Invariant("a refund to debit has no credit"))?;
        let amount_minor = refunds[k]
            .1
            .amount_minor
            .min(credit.amount_minor - refunded.total_minor);
        if amount_minor <= 0 {
            settled[k] = Some(Applied::ignored("the credit is already fully refunded"));
            continue;
        }
        amounts.push((k, amount_minor, refunded.total_minor + amount_minor));
    }
    // The credited payments' rows, moved to what the ledger has refunded of
    // them, for the refunds that carry none.
    let mut moved: Vec<(usize, Payment<'_>)> = Vec::new();
    for &(k, _, refunded_minor) in &amounts {
        let (event, refund, row) = refunds[k];
        if let (RefundRow::FromLedger, Some(credit)) = (row, &found[k]) {
            moved.push((k, refunded_row(event, refund, credit, refunded_minor)?));
        }
    }
    reject_differing(conn, &moved, &mut settled).await?;
    let mut at = Vec::with_capacity(amounts.len());
    let mut debits = Vec::with_capacity(amounts.len());
    for (k, amount_minor, _) in amounts {
        let (event, refund, _) = refunds[k];
        let Some(credit) = found[k].as_ref().filter(|_| settled[k].is_none()) else {
            continue;
        };
        at.push(k);
        debits.push(Debit {
            event,
            credit,
            parent_ref: &refund.payment_id,
            source_ref: &refund.id,
            amount_minor,
            context: refund.context.clone(),
        });
    }
    for (k, posted) in at.into_iter().zip(post_debits(conn, &debits).await?) {
        settled[k] = Some(posted);
    }
    settled
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or(Error::Invariant("a refund has no outcome"))
}

/// How many refunds, from the first, may share their statements: of one
/// provider, and no two debiting one payment (`(provider, payment)` each).
fn apart<'a>(debits: impl Iterator<Item = (&'a str, &'a str)>) -> usize {
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for debit in debits {
        if seen
            .first()
            .is_some_and(|(provider, _)| *provider != debit.0)
            || seen.contains(&debit)
        {
            break;
        }
        seen.push(debit);
    }
    seen.len()
}

/// Upserts `rows` (the payments of the refunds at their indexes) and
/// rejects each refund whose payment was stored with another amount or
/// currency.
async fn reject_differing(
    conn: &mut PgConnection,
    rows: &[(usize, Payment<'_>)],
    settled: &mut [Option<Applied>],
) -> Result<(), Error> {
    let upserts: Vec<(&Payment<'_>, Option<&str>)> =
        rows.iter().map(|(_, row)| (row, None)).collect();
    let recorded = payments::upsert_many(conn, &upserts).await?;
    for ((k, _), recorded) in rows.iter().zip(recorded) {
        if recorded == Recorded::Differs {
            settled[*k] = Some(Applied::rejected(payments::DIFFERS));
        }
    }
    Ok(())
}

/// The credited payment's row moved to `refunded_minor` refunded (its
/// status `partially_refunded` or `refunded`).
fn refunded_row<'a>(
    event: &'a Event,
    refund: &'a OwnRefund,
    credit: &'a Entry,
    refunded_minor: i64,
) -> Result<Payment<'a>, Error> {
    Ok(Payment {
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
    let mut charges = units
        .iter()
        .map(|unit| match unit.effect() {
            Effect::ChargeRefund(charge) => charge
                .payment_intent()
                .map(|intent| (unit.event(), charge, intent))
                .ok_or(Error::Invariant("a charge refund has no payment intent")),
            _ => Err(Error::Invariant(
                "a set of charge refunds holds another event",
            )),
        })
        .collect::<Result<Vec<(&Event, &StripeCharge, &str)>, Error>>()?;
    charges.truncate(apart(
        charges
            .iter()
            .map(|(event, _, intent)| (event.provider(), *intent)),
    ));
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
    reject_differing(conn, &rows, &mut settled).await?;
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

/// The credit of payment `source_ref` (`credit`, as looked up), provided it
/// is in `currency`; when there is none yet, parks `event` until it exists,
/// unless the payment pays an invoice (it is never credited). Call with the credit's lock held
/// (the engine takes it; [`super::learning::link_invoice`] holds it too, and
/// releases what waits here).
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
