//! Random histories over every provider and event kind, as the ingest path
//! receives them: verified events, some event ids more than once (identical
//! copies), in any order (refunds before their credits, a subscription's
//! changes out of time order).
//!
//! A plan is drawn first ([`plan`]: users, wallets, payments,
//! subscriptions, invoices, sources, malformed events); it is written out
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
pub const MAX_EVENTS: usize = 40;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Everything, races included: two event ids crediting one payment,
    /// several cumulative refunds of one charge, refunds beyond their
    /// payment, subscription changes at the same second, two events for
    /// one invoice, a credit the wallet's balance cannot hold.
    Exact,
    /// Only what ends the same whichever of two racing transactions
    /// commits first: subscription changes at distinct times, one crediting
    /// event per payment, at most one `charge.refunded` per charge, refunds
    /// within their payment, one event per charge receipt and per invoice.
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
        for event in &self.events {
            if !seen.insert((event.provider(), event.event_id())) {
                continue;
            }
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
            let key = match (event.provider(), event.event_type()) {
                ("stripe", "payment_intent.succeeded") => {
                    str_at("/id").map(|id| format!("credit {id}"))
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
