//! Stripe Checkout flows in the histories, with the objects Stripe sends
//! (`effects::checkout::objects`) at fixed times: a paid session and its
//! intent without metadata, a delayed payment that succeeds or fails, a
//! subscription bought through Checkout with its invoice and the intent
//! that paid it, customers that teach their owner, and the charge and
//! cumulative refunds of a Checkout-paid intent (or of one never paid).
//!
//! Flow `n` names its objects `cs_{n}`, `pi_cs{n}`, `ch_cs{n}`, `cus_cs{n}`,
//! `sub_cs{n}`, `in_cs{n}`; its owners are `buyer_{b}`, nobody else's.
//! [`Variant::Concurrent`] leaves out what races (two events that could
//! each credit the intent, two owners claimed for one customer, an
//! invoice or subscription announced without an owner that another event
//! teaches: `History::races`).

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Value, json};
use webhookd::providers::Event;

use super::bodies::{T0, stripe_charge, stripe_event};
use super::history::Variant;
use crate::effects::checkout::objects::{
    Session, customer_object, intent_object_at, invoice_object, invoice_payment_object,
    subscription_object,
};

/// Owners of Checkout flows.
const BUYERS: usize = 3;

#[derive(Debug, Clone)]
pub(super) struct Flow {
    buyer: usize,
    amount: i64,
    kind: Kind,
    customer: Customer,
    /// A `charge.succeeded` of the intent (the receipt).
    receipt: bool,
    /// Each `charge.refunded`'s cumulative `amount_refunded`.
    refunded: Vec<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `checkout.session.completed`, paid; `intent`: its
    /// `payment_intent.succeeded` (no metadata); `again`: a second event id
    /// completing the same session.
    Paid { intent: bool, again: bool },
    /// Completed unpaid, then `async_payment_succeeded` and/or the intent.
    Delayed { succeeded: bool, intent: bool },
    /// Completed unpaid, then `async_payment_failed`: never paid (a refund
    /// of it waits for ever).
    Failed,
    /// A `subscription` session, its `customer.subscription.created`
    /// without metadata, its first invoice's `invoice.paid` and the intent
    /// that paid it, joined by `invoice_payment.paid` or, with `older_api`,
    /// named on the intent (`invoice`) and on the invoice (`payment_intent`).
    Subscription {
        older_api: bool,
        subscription: bool,
        invoice: bool,
    },
}

/// The flow's customer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Customer {
    /// Guest checkout: none.
    Guest,
    /// On the session and the intent.
    Named,
    /// Named, and a `customer.created` whose metadata names the same owner.
    Taught,
    /// Named, and a `customer.created` that names another owner (exact
    /// histories only: the first claim stays).
    Conflicting,
}

pub(super) fn flows(variant: Variant) -> impl Strategy<Value = Vec<Flow>> {
    let exact = variant == Variant::Exact;
    let kind = prop_oneof![
        4 => (prop::bool::weighted(0.8), prop::bool::weighted(if exact { 0.3 } else { 0.0 }))
            .prop_map(|(intent, again)| Kind::Paid { intent, again }),
        2 => (0..if exact { 3 } else { 2 }).prop_map(|both| match both {
            0 => Kind::Delayed { succeeded: true, intent: false },
            1 => Kind::Delayed { succeeded: false, intent: true },
            _ => Kind::Delayed { succeeded: true, intent: true },
        }),
        1 => Just(Kind::Failed),
        2 => (any::<bool>(), prop::bool::weighted(if exact { 0.7 } else { 0.0 }),
              prop::bool::weighted(if exact { 0.7 } else { 0.0 }))
            .prop_map(|(older_api, subscription, invoice)| Kind::Subscription {
                // The older API's invoice.paid names the intent; without
                // the invoice only `invoice_payment.paid` joins them.
                older_api: older_api && invoice,
                subscription,
                invoice,
            }),
    ];
    let customer = prop_oneof![
        2 => Just(Customer::Guest),
        2 => Just(Customer::Named),
        2 => Just(Customer::Taught),
        1 => Just(if exact { Customer::Conflicting } else { Customer::Taught }),
    ];
    let flow = (
        0..BUYERS,
        1..=25i64,
        kind,
        customer,
        prop::bool::weighted(0.5),
        vec(select(vec![1i64, 2, 4]), if exact { 0..=2 } else { 0..=1 }),
        prop::bool::weighted(0.3),
    )
        .prop_map(
            |(buyer, quarters, kind, customer, receipt, refunds, stray)| {
                let amount = 400 * quarters;
                let customer = match kind {
                    // A subscription always has its customer.
                    Kind::Subscription { .. } if customer == Customer::Guest => Customer::Named,
                    _ => customer,
                };
                let refunded = match kind {
                    // An invoice's intent's refunds move no wallet.
                    Kind::Paid { .. } | Kind::Delayed { .. } | Kind::Subscription { .. } => refunds,
                    // Of a payment never made: a stray refund, sometimes.
                    Kind::Failed if stray => vec![1],
                    _ => Vec::new(),
                };
                Flow {
                    buyer,
                    amount,
                    kind,
                    customer,
                    receipt: receipt && matches!(kind, Kind::Paid { .. } | Kind::Delayed { .. }),
                    refunded: refunded.into_iter().map(|q| amount * q / 4).collect(),
                }
            },
        );
    vec(flow, 1..=3)
}

impl Flow {
    /// Flow `n`'s events, once, in natural order, in `currency`.
    pub(super) fn events(&self, n: usize, currency: &str, events: &mut Vec<Event>) {
        let buyer = format!("buyer_{}", self.buyer);
        let (cs, pi, ch, cus, sub, inv) = (
            format!("cs_{n}"),
            format!("pi_cs{n}"),
            format!("ch_cs{n}"),
            format!("cus_cs{n}"),
            format!("sub_cs{n}"),
            format!("in_cs{n}"),
        );
        let id = |name: &str| format!("evt_cs{n}_{name}");
        let at = T0 + 200;
        let customer = (self.customer != Customer::Guest).then_some(cus.as_str());
        let in_currency = |mut object: Value| {
            object["currency"] = currency.into();
            object
        };
        if let Customer::Taught | Customer::Conflicting = self.customer {
            let owner = match self.customer {
                Customer::Taught => buyer.clone(),
                _ => format!("buyer_{}", (self.buyer + 1) % BUYERS),
            };
            let object = customer_object(&cus, Some(&owner), at);
            events.push(stripe_event(
                &id("customer"),
                "customer.created",
                at,
                object,
            ));
        }
        let session = Session {
            customer,
            ..Session::paid(&cs, &pi, &buyer, self.amount)
        };
        let session_event = |event_id: &str, event_type: &str, session: &Session, at: i64| {
            stripe_event(event_id, event_type, at, in_currency(session.object_at(at)))
        };
        let intent = |invoice: Option<&str>| {
            let mut object = in_currency(intent_object_at(&pi, customer, self.amount, at + 2));
            if let Some(invoice) = invoice {
                object["invoice"] = invoice.into();
            }
            stripe_event(&id("pi"), "payment_intent.succeeded", at + 2, object)
        };
        match self.kind {
            Kind::Paid {
                intent: paid,
                again,
            } => {
                let completed = "checkout.session.completed";
                events.push(session_event(&id("completed"), completed, &session, at + 1));
                if again {
                    let again = id("completed_again");
                    events.push(session_event(&again, completed, &session, at + 3));
                }
                if paid {
                    events.push(intent(None));
                }
            }
            Kind::Delayed {
                succeeded,
                intent: paid,
            } => {
                let unpaid = Session {
                    payment_status: "unpaid",
                    ..session
                };
                let completed = "checkout.session.completed";
                events.push(session_event(&id("completed"), completed, &unpaid, at + 1));
                if succeeded {
                    let succeeded = "checkout.session.async_payment_succeeded";
                    events.push(session_event(&id("succeeded"), succeeded, &session, at + 4));
                }
                if paid {
                    events.push(intent(None));
                }
            }
            Kind::Failed => {
                let unpaid = Session {
                    payment_status: "unpaid",
                    ..session
                };
                let completed = "checkout.session.completed";
                events.push(session_event(&id("completed"), completed, &unpaid, at + 1));
                let failed = "checkout.session.async_payment_failed";
                events.push(session_event(&id("failed"), failed, &unpaid, at + 4));
            }
            Kind::Subscription {
                older_api,
                subscription,
                invoice,
            } => {
                let bought = Session {
                    mode: "subscription",
                    payment_intent: None,
                    subscription: Some(&sub),
                    ..session
                };
                let completed = "checkout.session.completed";
                events.push(session_event(&id("completed"), completed, &bought, at + 1));
                if subscription {
                    let object = subscription_object(&sub, &cus, at + 3);
                    let created = "customer.subscription.created";
                    events.push(stripe_event(&id("sub"), created, at + 3, object));
                }
                let named = older_api.then_some(pi.as_str());
                if invoice {
                    let object =
                        in_currency(invoice_object(&inv, &cus, Some(&sub), named, self.amount));
                    events.push(stripe_event(&id("invoice"), "invoice.paid", at + 4, object));
                }
                if older_api {
                    events.push(intent(Some(&inv)));
                } else {
                    let object =
                        in_currency(invoice_payment_object(&inv, &pi, self.amount, at + 4));
                    let paid = "invoice_payment.paid";
                    events.push(stripe_event(&id("inpay"), paid, at + 4, object));
                    events.push(intent(None));
                }
            }
        }
        // Checkout's charges carry no metadata: the refund debits whoever
        // the intent's credit went to.
        let charge = |refunded: i64| {
            let mut object = stripe_charge(&ch, &pi, "", currency, self.amount, refunded);
            object["metadata"] = json!({});
            object
        };
        if self.receipt {
            let object = charge(0);
            events.push(stripe_event(
                &id("charge"),
                "charge.succeeded",
                at + 5,
                object,
            ));
        }
        for (k, &refunded) in self.refunded.iter().enumerate() {
            let (event_id, at) = (id(&format!("refund{k}")), at + 10 + k as i64);
            events.push(stripe_event(
                &event_id,
                "charge.refunded",
                at,
                charge(refunded),
            ));
        }
    }
}
