//! Random histories over every provider and event kind, as the ingest path
//! receives them: verified events, some event ids more than once (identical
//! copies), in any order (refunds before their credits, a subscription's
//! changes out of time order).
//!
//! A plan is drawn first ([`plan`]: users, wallets, payments,
//! subscriptions, invoices, sources, malformed events, Checkout flows:
//! [`super::checkout`]); it is written out
//! as events in their natural order, each event is copied 1 to 3 times,
//! and the whole list shuffled. Bodies carry fixed times, so a seed always
//! builds byte-identical events.
//!
//! [`Variant::Concurrent`] leaves out every pair of distinct events whose
//! effects depend on which one commits first ([`History::races`] names
//! them); copies, shuffles and refunds before credits stay.

use std::collections::{HashMap, HashSet};
use std::fmt;

use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::Value;
use webhookd::providers::Event;

use super::plan::plan;

/// Longest history (events with their copies).
pub const MAX_EVENTS: usize = 48;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Everything, races included: two event ids crediting one payment,
    /// several cumulative refunds of one charge, refunds beyond their
    /// payment, subscription changes at the same second, two events for
    /// one invoice, a credit the wallet's balance cannot hold; of
    /// Checkout, a session completed under two event ids, a delayed
    /// payment whose intent and `async_payment_succeeded` may each credit,
    /// a customer claimed by two owners, invoices and subscriptions
    /// announced before or after their customer's owner is taught.
    Exact,
    /// Only what ends the same whichever of two racing transactions
    /// commits first: subscription changes at distinct times, one crediting
    /// event per payment, at most one `charge.refunded` per charge, refunds
    /// within their payment, one event per charge receipt and per invoice;
    /// of Checkout, one owner claimed per customer and payment, and no
    /// invoice or subscription without an owner of its own whose customer
    /// another event teaches (its announcement would name the owner or
    /// not, by order). A paid session and its intent without metadata do
    /// not race: the intent waits for the owner the session brings, so the
    /// session credits first whatever the order.
    Concurrent,
}

/// A history: the events in arrival order.
#[derive(Clone)]
pub struct History {
    pub events: Vec<Event>,
}

impl fmt::Debug for History {
    /// One line per event: provider, event id, type.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (position, event) in self.events.iter().enumerate() {
            writeln!(
                f,
                "{position:>3} {} {} {}",
                event.provider(),
                bounded(event.event_id()),
                event.event_type()
            )?;
        }
        Ok(())
    }
}

fn bounded(id: &str) -> String {
    match id.len() {
        0..=60 => id.to_owned(),
        len => format!("{}...({len} chars)", &id[..40]),
    }
}

/// A history of `variant`, 10 to [`MAX_EVENTS`] events.
pub fn history(variant: Variant) -> impl Strategy<Value = History> {
    plan(variant)
        .prop_flat_map(|plan| {
            let events = plan.events();
            let copies = vec(
                prop_oneof![7 => Just(1usize), 2 => Just(2), 1 => Just(3)],
                events.len(),
            );
            (Just(events), copies)
        })
        .prop_flat_map(|(events, copies)| {
            let order: Vec<usize> = copies
                .iter()
                .enumerate()
                .flat_map(|(event, &n)| std::iter::repeat_n(event, n))
                .collect();
            (Just(events), Just(order).prop_shuffle())
        })
        .prop_map(|(events, order)| History {
            events: order
                .into_iter()
                .take(MAX_EVENTS)
                .map(|event| events[event].clone())
                .collect(),
        })
}

impl History {
    /// The pairs of distinct events in this history whose effects depend on
    /// which commits first, one line each: none in a
    /// [`Variant::Concurrent`] history. Read from the events themselves,
    /// not from the plan, so that it checks the generator.
    pub fn races(&self) -> Vec<String> {
        let mut races = Vec::new();
        let mut seen: HashSet<(&str, &str)> = HashSet::new();
        let mut keyed: HashMap<String, Vec<&str>> = HashMap::new();
        let mut refunded: HashMap<&str, (i64, i64)> = HashMap::new();
        let mut credited: HashMap<(&str, &str), i128> = HashMap::new();
        let events: Vec<&Event> = self
            .events
            .iter()
            .filter(|event| seen.insert((event.provider(), event.event_id())))
            .collect();
        let owners = Owners::of(&events);
        for (subject, users) in &owners.claimed {
            if users.len() > 1 {
                races.push(format!("owners of {subject}: {users:?}"));
            }
        }
        for (payment, invoices) in &owners.invoices {
            if invoices.len() > 1 {
                races.push(format!("invoices paid by {payment}: {invoices:?}"));
            }
        }
        for &event in &events {
            let object = event.object();
            let str_at = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
            if let (
                "stripe",
                "payment_intent.succeeded",
                Some(user),
                Some(currency),
                Some(amount),
            ) = (
                event.provider(),
                event.event_type(),
                str_at("/metadata/user_id"),
                str_at("/currency"),
                object.pointer("/amount").and_then(Value::as_i64),
            ) {
                *credited.entry((user, currency)).or_default() += i128::from(amount);
            }
            if let Some(race) = owners.unowned_announcement(event) {
                races.push(race);
            }
            let key = match (event.provider(), event.event_type()) {
                ("stripe", "payment_intent.succeeded") => str_at("/id")
                    .filter(|_| owners.may_credit(event))
                    .map(|id| format!("credit {id}")),
                ("stripe", kind) if kind.starts_with("checkout.session.") => {
                    paid_session(event).map(|pi| format!("credit {pi}"))
                }
                ("stripe", "charge.succeeded") => str_at("/id").map(|id| format!("receipt {id}")),
                ("stripe", "charge.refunded") => str_at("/id").map(|id| format!("refund {id}")),
                ("stripe", "invoice.paid") => str_at("/id").map(|id| format!("invoice {id}")),
                ("stripe", kind) if kind.starts_with("customer.subscription.") => {
                    str_at("/id").map(|id| format!("subscription {id} at {:?}", event.created()))
                }
                ("razorpay", "payment.captured") => {
                    str_at("/payment/entity/id").map(|id| format!("credit {id}"))
                }
                ("razorpay", kind) if kind.starts_with("subscription.") => {
                    str_at("/subscription/entity/id")
                        .map(|id| format!("subscription {id} at {:?}", event.created()))
                }
                ("razorpay", "refund.processed") => {
                    if let (Some(payment), Some(amount), Some(of)) = (
                        str_at("/refund/entity/payment_id"),
                        object
                            .pointer("/refund/entity/amount")
                            .and_then(Value::as_i64),
                        object
                            .pointer("/payment/entity/amount")
                            .and_then(Value::as_i64),
                    ) {
                        let total = refunded.entry(payment).or_insert((0, of));
                        total.0 += amount;
                    }
                    None
                }
                _ => None,
            };
            if let Some(key) = key {
                keyed.entry(key).or_default().push(event.event_id());
            }
        }
        for (key, event_ids) in keyed {
            if event_ids.len() > 1 {
                races.push(format!("{key}: {event_ids:?}"));
            }
        }
        for ((user, currency), total) in credited {
            if total > i128::from(i64::MAX) {
                races.push(format!("credits of {user}'s {currency} wallet: {total}"));
            }
        }
        for (payment, (total, amount)) in refunded {
            if total > amount {
                races.push(format!("refunds of {payment}: {total} of {amount}"));
            }
        }
        races.sort();
        races
    }
}

/// The intent a Checkout Session event credits, if it credits one: a paid
/// (or asynchronously succeeded) `payment` session.
pub fn paid_session(event: &Event) -> Option<&str> {
    let object = event.object();
    let str_at = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
    let pays = str_at("/mode") == Some("payment")
        && match event.event_type() {
            "checkout.session.completed" => str_at("/payment_status") == Some("paid"),
            "checkout.session.async_payment_succeeded" => true,
            _ => false,
        };
    str_at("/payment_intent").filter(|_| pays)
}

/// Who a history's events say owns what, and which invoice each payment
/// pays, read from the Stripe events themselves.
#[derive(Debug, Default)]
pub struct Owners<'a> {
    /// `customer {id}` / `payment {id}`: the owners claimed for it.
    pub claimed: HashMap<String, HashSet<&'a str>>,
    /// The intents whose owner a session teaches without crediting them
    /// (completed unpaid, or failed).
    pub taught_unpaid: HashSet<&'a str>,
    /// Each intent: the invoices it is said to pay.
    pub invoices: HashMap<&'a str, HashSet<&'a str>>,
}

impl<'a> Owners<'a> {
    pub fn of(events: &[&'a Event]) -> Self {
        let mut owners = Owners::default();
        for event in events.iter().filter(|event| event.provider() == "stripe") {
            let object: &'a Value = event.object();
            let str_at = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
            let claimed = &mut owners.claimed;
            let mut claim = |subject: &str, id: Option<&'a str>, user: Option<&'a str>| {
                if let (Some(id), Some(user)) = (id, user) {
                    let claims = claimed.entry(format!("{subject} {id}"));
                    claims.or_default().insert(user);
                }
            };
            let user = str_at("/metadata/user_id");
            let kind = event.event_type();
            match kind {
                _ if kind.starts_with("checkout.session.") => {
                    let owner = str_at("/client_reference_id");
                    claim("payment", str_at("/payment_intent"), owner);
                    claim("customer", str_at("/customer"), owner);
                    if owner.is_some()
                        && paid_session(event).is_none()
                        && let Some(pi) = str_at("/payment_intent")
                    {
                        owners.taught_unpaid.insert(pi);
                    }
                }
                "customer.created" | "customer.updated" => claim("customer", str_at("/id"), user),
                _ if kind.starts_with("customer.subscription.") => {
                    claim("customer", str_at("/customer"), user)
                }
                "payment_intent.succeeded" => {
                    claim("customer", str_at("/customer"), user);
                    if let (Some(pi), Some(invoice)) = (str_at("/id"), str_at("/invoice")) {
                        owners.invoices.entry(pi).or_default().insert(invoice);
                    }
                }
                "invoice.paid" | "invoice_payment.paid" => {
                    let invoice = str_at("/invoice").or(str_at("/id"));
                    let pi = str_at("/payment_intent").or(str_at("/payment/payment_intent"));
                    if let (Some(pi), Some(invoice)) = (pi, invoice) {
                        owners.invoices.entry(pi).or_default().insert(invoice);
                    }
                }
                _ => {}
            }
        }
        owners
    }

    /// Whether `payment_intent.succeeded` `event` may be the one that
    /// credits its intent: its owner is written on it, or a session that
    /// credits nothing teaches it (a paid session always credits first:
    /// the intent waits for the owner it brings).
    pub fn may_credit(&self, event: &Event) -> bool {
        let object = event.object();
        let str_at = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
        if str_at("/invoice").is_some() {
            return false;
        }
        str_at("/metadata/user_id").is_some()
            || str_at("/id").is_some_and(|pi| self.taught_unpaid.contains(pi))
    }

    /// An announcement whose owner depends on whether another event taught
    /// its customer first: an invoice or subscription without an owner of
    /// its own, whose customer some event claims.
    fn unowned_announcement(&self, event: &Event) -> Option<String> {
        let object = event.object();
        let str_at = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
        let kind = event.event_type();
        let announces = event.provider() == "stripe"
            && (kind == "invoice.paid" || kind.starts_with("customer.subscription."));
        let customer = str_at("/customer")?;
        (announces
            && str_at("/metadata/user_id").is_none()
            && self.claimed.contains_key(&format!("customer {customer}")))
        .then(|| {
            format!(
                "{kind} {}: its customer's owner is taught",
                event.event_id()
            )
        })
    }
}
