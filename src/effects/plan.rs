//! What an event will touch, known before it is applied: the locks the
//! ingest engine takes for it, all at once and in one global order, before
//! any event of a transaction is applied. Effects themselves take no lock:
//! they run with their plan's locks held.
//!
//! Every row an effect writes is covered by one of its keys: a credit, the
//! refunds that debit it and the payment rows of that payment by
//! `credit:{payment}`; a subscription by `subscription:{id}`; an invoice's
//! `invoice.paid` by `invoice:{id}`; a wallet by its own lock (taken after
//! all keys, since a refund's wallet is its credit's, known once the
//! credit's key is held). So two transactions never wait for each other's
//! rows while holding keys the other needs.

use super::PlainCredit;
use crate::providers::{Event, Kind};

/// The lock class of [`Plan::keys`]: before wallets
/// ([`crate::ledger::WALLET_LOCK_CLASS`]).
pub const KEY_LOCK_CLASS: i16 = 1;

/// The locks and the shape of one event's effects.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Advisory lock keys (`{provider}:{kind}:{id}`), class [`KEY_LOCK_CLASS`].
    pub keys: Vec<String>,
    /// Wallets it credits, `(user_id, currency)`.
    pub wallets: Vec<(String, String)>,
    /// The payment whose credit it debits (a refund): its wallet is locked
    /// too, once the credit's key is held.
    pub debits: Option<String>,
    /// Crediting is all it does: it may share statements with other credits
    /// ([`super::apply_credits`]).
    pub credit: Option<PlainCredit>,
    /// Its credit is a capture's that records its payment row first
    /// (Razorpay's, PayPal's): a payment stored with another amount or
    /// currency rejects the event instead of crediting it.
    pub records_payment: bool,
}

impl Plan {
    pub(super) fn keyed(keys: Vec<String>) -> Self {
        Plan {
            keys,
            ..Plan::default()
        }
    }

    /// A plain credit of payment `payment_id` (its key and wallet), which
    /// `records_payment` first when set.
    pub(super) fn crediting(
        provider: &str,
        payment_id: &str,
        credit: PlainCredit,
        records_payment: bool,
    ) -> Self {
        Plan {
            keys: vec![credit_key(provider, payment_id)],
            wallets: vec![(credit.user_id.clone(), credit.currency.clone())],
            credit: Some(credit),
            records_payment,
            ..Plan::default()
        }
    }

    /// A refund that debits payment `payment_id`'s credit, under its key.
    pub(super) fn debiting(provider: &str, payment_id: &str) -> Self {
        Plan {
            keys: vec![credit_key(provider, payment_id)],
            debits: Some(payment_id.to_owned()),
            ..Plan::default()
        }
    }
}

/// The plan of `event`. An event whose payload will be rejected (or that
/// its source does not take: [`Event::refusal`]) locks nothing.
pub fn plan(event: &Event) -> Plan {
    if event.refusal().is_some() {
        return Plan::default();
    }
    match event.kind() {
        Kind::Stripe => super::stripe::plan(event),
        Kind::Razorpay => super::razorpay::plan(event),
        Kind::Paypal => super::paypal::plan(event),
        // One outbox row keyed by the event itself.
        Kind::Source => Plan::default(),
    }
}

/// The key of payment `source_ref`'s credit, its refunds and its rows.
pub(super) fn credit_key(provider: &str, source_ref: &str) -> String {
    format!("{provider}:credit:{source_ref}")
}

pub(super) fn subscription_key(provider: &str, subscription_id: &str) -> String {
    format!("{provider}:subscription:{subscription_id}")
}

pub(super) fn invoice_key(provider: &str, invoice_id: &str) -> String {
    format!("{provider}:invoice:{invoice_id}")
}
