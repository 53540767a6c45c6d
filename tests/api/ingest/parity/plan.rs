//! What a history is about (users, wallets, payments, subscriptions,
//! invoices, sources, malformed events), drawn at random, and its events
//! in their natural order.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{select, subsequence};
use serde_json::json;
use webhookd::providers::Event;

use super::bodies::{
    T0, event, payment_intent, razorpay_event, razorpay_payment_entity, stripe_charge, stripe_event,
};
use super::checkout::{Flow, flows};
use super::history::Variant;

/// Wallet currencies, as Stripe spells them (Razorpay upper-cases them).
const CURRENCIES: [&str; 2] = ["usd", "inr"];

const STRIPE_STATUSES: [&str; 6] = [
    "incomplete",
    "trialing",
    "active",
    "past_due",
    "unpaid",
    "canceled",
];
const RAZORPAY_STATUSES: [&str; 6] = [
    "authenticated",
    "active",
    "pending",
    "halted",
    "cancelled",
    "completed",
];
const PLANS: [&str; 2] = ["plan_basic", "plan_pro"];
const SOURCES: [(&str, &str); 2] = [("svix", "user.created"), ("gh", "push")];

#[derive(Debug, Clone)]
struct StripePayment {
    user: usize,
    currency: usize,
    amount: i64,
    /// A `charge.succeeded` (the receipt).
    charge: bool,
    /// Each `charge.refunded`'s cumulative `amount_refunded`.
    refunded: Vec<i64>,
    /// A second event id carrying the same credit.
    again: bool,
}

#[derive(Debug, Clone)]
struct RazorpayPayment {
    user: usize,
    currency: usize,
    amount: i64,
    /// Each `refund.processed`'s own amount.
    refunds: Vec<i64>,
    /// A second event id carrying the same capture.
    again: bool,
}

/// One subscription change: status, time slot, plan.
#[derive(Debug, Clone)]
struct Change {
    status: usize,
    slot: i64,
    plan: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Malformed {
    /// A credit without `metadata.user_id`.
    MissingUser,
    /// A Stripe refund in another currency than its credit.
    StripeCurrencyMismatch,
    /// A Razorpay refund in another currency than its payment's credit.
    RazorpayCurrencyMismatch,
    /// A payment intent id over 255 characters.
    OverlongIntent,
    /// A Razorpay payment id over 255 characters.
    OverlongPayment,
}

const MALFORMED: [Malformed; 5] = [
    Malformed::MissingUser,
    Malformed::StripeCurrencyMismatch,
    Malformed::RazorpayCurrencyMismatch,
    Malformed::OverlongIntent,
    Malformed::OverlongPayment,
];

#[derive(Debug, Clone)]
pub(super) struct Plan {
    variant: Variant,
    users: usize,
    currencies: usize,
    stripe: Vec<StripePayment>,
    razorpay: Vec<RazorpayPayment>,
    stripe_subscription: (usize, Vec<Change>),
    razorpay_subscription: (usize, Vec<Change>),
    /// Each invoice, and whether a second event announces it.
    invoices: Vec<bool>,
    /// Which source each generic event comes from.
    sources: Vec<usize>,
    malformed: Vec<Malformed>,
    /// Two credits of one wallet that its balance cannot hold together:
    /// the second to arrive is refused by the database (`rejected`).
    overflow: bool,
    /// Stripe Checkout flows.
    checkout: Vec<Flow>,
}

pub(super) fn plan(variant: Variant) -> impl Strategy<Value = Plan> {
    let exact = variant == Variant::Exact;
    let races = |p: f64| prop::bool::weighted(if exact { p } else { 0.0 });
    let stripe_payment = (
        0..4usize,
        0..2usize,
        1..=25i64,
        prop::bool::weighted(0.75),
        vec(select(vec![1i64, 2, 4]), if exact { 0..=3 } else { 0..=1 }),
        races(0.3),
    )
        .prop_map(|(user, currency, quarters, charge, refunds, again)| {
            let amount = 400 * quarters;
            StripePayment {
                user,
                currency,
                amount,
                charge,
                refunded: refunds.into_iter().map(|q| amount * q / 4).collect(),
                again,
            }
        });
    let razorpay_payment = (
        0..4usize,
        0..2usize,
        1..=25i64,
        // Each refund a quarter or a half: two stay within the payment.
        vec(select(vec![1i64, 2]), if exact { 0..=3 } else { 0..=2 }),
        races(0.25),
    )
        .prop_map(|(user, currency, quarters, refunds, again)| {
            let amount = 400 * quarters;
            RazorpayPayment {
                user,
                currency,
                amount,
                refunds: refunds.into_iter().map(|q| amount * q / 4).collect(),
                again,
            }
        });
    let changes = |most: usize| {
        vec(
            (0..6usize, 0..3i64, 0..2usize).prop_map(|(status, slot, plan)| Change {
                status,
                slot,
                plan,
            }),
            1..=most,
        )
    };
    (
        2..=4usize,
        1..=2usize,
        vec(stripe_payment, 2..=3),
        vec(razorpay_payment, 1..=2),
        (0..4usize, changes(4)),
        (0..4usize, changes(3)),
        vec(races(0.4), 1..=2),
        vec(0..SOURCES.len(), 1..=2),
        subsequence(MALFORMED.to_vec(), 1..=3),
        races(0.3),
        flows(variant),
    )
        .prop_map(
            move |(
                users,
                currencies,
                stripe,
                razorpay,
                stripe_subscription,
                razorpay_subscription,
                invoices,
                sources,
                malformed,
                overflow,
                checkout,
            )| {
                let mut plan = Plan {
                    variant,
                    users,
                    currencies,
                    stripe,
                    razorpay,
                    stripe_subscription,
                    razorpay_subscription,
                    invoices,
                    sources,
                    malformed,
                    overflow,
                    checkout,
                };
                // Two event ids for one payment intent in every exact history.
                if exact {
                    plan.stripe[0].again = true;
                }
                plan
            },
        )
}

impl Plan {
    fn user(&self, user: usize) -> String {
        format!("user_{}", user % self.users)
    }

    fn currency(&self, currency: usize) -> &'static str {
        CURRENCIES[currency % self.currencies]
    }

    /// A subscription change's event time: slots may coincide in exact
    /// histories; in concurrent ones every change has its own second.
    fn changed_at(&self, n: usize, change: &Change) -> i64 {
        match self.variant {
            Variant::Exact => T0 + 100 + 10 * change.slot,
            Variant::Concurrent => T0 + 100 + 10 * n as i64,
        }
    }

    /// Every event once, in natural order.
    pub(super) fn events(&self) -> Vec<Event> {
        let mut events = Vec::new();
        for (n, payment) in self.stripe.iter().enumerate() {
            self.stripe_payment(n, payment, &mut events);
        }
        for (n, payment) in self.razorpay.iter().enumerate() {
            self.razorpay_payment(n, payment, &mut events);
        }
        // A payment that failed (recorded only), and an order paid (ignored:
        // the capture carries the credit).
        let failed = razorpay_payment_entity("pay_failed", "user_0", "INR", 900, 0, "failed");
        events.push(razorpay_event(
            "rzp_pay_failed",
            "payment.failed",
            json!({ "payment": failed }),
            T0 + 40,
        ));
        let paid = &self.razorpay[0];
        let payment = razorpay_payment_entity(
            "pay_0",
            &self.user(paid.user),
            &self.currency(paid.currency).to_ascii_uppercase(),
            paid.amount,
            0,
            "captured",
        );
        let order = json!({ "entity": { "id": "order_0", "entity": "order", "amount": paid.amount,
                                        "status": "paid" } });
        events.push(razorpay_event(
            "rzp_order_0_paid",
            "order.paid",
            json!({ "payment": payment, "order": order }),
            T0 + 41,
        ));
        self.subscriptions(&mut events);
        for (n, &again) in self.invoices.iter().enumerate() {
            let (user, currency) = (self.user(n), self.currency(n));
            let invoice = json!({
                "id": format!("in_{n}"), "object": "invoice", "customer": format!("cus_{user}"),
                "subscription": "sub_s", "amount_paid": 1500 + n as i64, "currency": currency,
                "metadata": { "user_id": user },
            });
            let id = format!("evt_in{n}_paid");
            events.push(stripe_event(&id, "invoice.paid", T0 + 60, invoice.clone()));
            if again {
                let id = format!("{id}_again");
                events.push(stripe_event(&id, "invoice.paid", T0 + 61, invoice));
            }
        }
        for (n, &source) in self.sources.iter().enumerate() {
            let (provider, event_type) = SOURCES[source];
            let body = json!({ "type": event_type, "data": { "n": n, "user_id": self.user(n) } });
            events.push(event(
                provider,
                &format!("msg_{n}"),
                event_type,
                body.to_string(),
            ));
        }
        // A customer whose metadata names its owner teaches it.
        events.push(stripe_event(
            "evt_cus_user_0_created",
            "customer.created",
            T0 + 70,
            json!({ "id": "cus_user_0", "object": "customer", "metadata": { "user_id": "user_0" } }),
        ));
        for (n, flow) in self.checkout.iter().enumerate() {
            flow.events(n, self.currency(n), &mut events);
        }
        for &malformed in &self.malformed {
            events.push(self.malformed(malformed));
        }
        if self.overflow {
            for (n, amount) in [(0, 1000), (1, i64::MAX - 500)] {
                let intent = payment_intent(&format!("pi_whale{n}"), "user_whale", "usd", amount);
                let id = format!("evt_whale{n}_credit");
                events.push(stripe_event(
                    &id,
                    "payment_intent.succeeded",
                    T0 + 80,
                    intent,
                ));
            }
        }
        events
    }

    fn stripe_payment(&self, n: usize, payment: &StripePayment, events: &mut Vec<Event>) {
        let (user, currency) = (self.user(payment.user), self.currency(payment.currency));
        let (intent, charge) = (format!("pi_{n}"), format!("ch_{n}"));
        let credit = payment_intent(&intent, &user, currency, payment.amount);
        let id = format!("evt_pi{n}_credit");
        events.push(stripe_event(
            &id,
            "payment_intent.succeeded",
            T0 + 10,
            credit.clone(),
        ));
        if payment.again {
            let id = format!("{id}_again");
            events.push(stripe_event(
                &id,
                "payment_intent.succeeded",
                T0 + 12,
                credit,
            ));
        }
        let charge_object = |refunded: i64| {
            stripe_charge(&charge, &intent, &user, currency, payment.amount, refunded)
        };
        if payment.charge {
            let id = format!("evt_ch{n}_succeeded");
            events.push(stripe_event(
                &id,
                "charge.succeeded",
                T0 + 11,
                charge_object(0),
            ));
        }
        for (k, &refunded) in payment.refunded.iter().enumerate() {
            let id = format!("evt_ch{n}_refund{k}");
            events.push(stripe_event(
                &id,
                "charge.refunded",
                T0 + 20 + k as i64,
                charge_object(refunded),
            ));
        }
    }

    fn razorpay_payment(&self, n: usize, payment: &RazorpayPayment, events: &mut Vec<Event>) {
        let user = self.user(payment.user);
        let currency = self.currency(payment.currency).to_ascii_uppercase();
        let id = format!("pay_{n}");
        let entity = |refunded: i64| {
            let status = if refunded > 0 { "refunded" } else { "captured" };
            razorpay_payment_entity(&id, &user, &currency, payment.amount, refunded, status)
        };
        let captured = json!({ "payment": entity(0) });
        let event_id = format!("rzp_pay{n}_captured");
        events.push(razorpay_event(
            &event_id,
            "payment.captured",
            captured.clone(),
            T0 + 30,
        ));
        if payment.again {
            let event_id = format!("{event_id}_again");
            events.push(razorpay_event(
                &event_id,
                "payment.captured",
                captured,
                T0 + 32,
            ));
        }
        let mut refunded = 0;
        for (k, &amount) in payment.refunds.iter().enumerate() {
            // The payment entity as of this refund, never past its amount.
            refunded = (refunded + amount).min(payment.amount);
            let refund = json!({ "entity": {
                "id": format!("rfnd_{n}_{k}"), "entity": "refund", "amount": amount,
                "currency": currency, "payment_id": id, "status": "processed",
            }});
            events.push(razorpay_event(
                &format!("rzp_rfnd{n}_{k}"),
                "refund.processed",
                json!({ "refund": refund, "payment": entity(refunded) }),
                T0 + 35 + k as i64,
            ));
        }
    }

    fn subscriptions(&self, events: &mut Vec<Event>) {
        let (user, changes) = &self.stripe_subscription;
        let user = self.user(*user);
        for (n, change) in changes.iter().enumerate() {
            let at = self.changed_at(n, change);
            let status = STRIPE_STATUSES[change.status];
            let event_type = match (n, status) {
                (_, "canceled") => "customer.subscription.deleted",
                (0, _) => "customer.subscription.created",
                _ => "customer.subscription.updated",
            };
            let subscription = json!({
                "id": "sub_s", "object": "subscription", "customer": format!("cus_{user}"),
                "status": status, "metadata": { "user_id": user },
                "items": { "object": "list", "data": [{
                    "id": "si_s", "price": { "id": PLANS[change.plan] },
                    "current_period_end": at + 2_592_000,
                }]},
            });
            events.push(stripe_event(
                &format!("evt_sub_s_{n}"),
                event_type,
                at,
                subscription,
            ));
        }
        let (user, changes) = &self.razorpay_subscription;
        let user = self.user(*user);
        for (n, change) in changes.iter().enumerate() {
            let at = self.changed_at(n, change);
            let status = RAZORPAY_STATUSES[change.status];
            let event_type = match status {
                "active" => "subscription.activated".to_owned(),
                status => format!("subscription.{status}"),
            };
            let entity = json!({ "entity": {
                "id": "sub_r", "entity": "subscription", "plan_id": PLANS[change.plan],
                "customer_id": format!("cust_{user}"), "status": status,
                "notes": { "user_id": user }, "current_end": at + 2_592_000, "created_at": T0,
            }});
            events.push(razorpay_event(
                &format!("rzp_sub_r_{n}"),
                &event_type,
                json!({ "subscription": entity }),
                at,
            ));
        }
    }

    fn malformed(&self, malformed: Malformed) -> Event {
        let overlong = "x".repeat(300);
        match malformed {
            Malformed::MissingUser => {
                let mut intent = payment_intent("pi_nouser", "user_0", "usd", 700);
                intent["metadata"] = json!({});
                stripe_event(
                    "evt_nouser_credit",
                    "payment_intent.succeeded",
                    T0 + 90,
                    intent,
                )
            }
            Malformed::StripeCurrencyMismatch => {
                // Refunds pi_0 (credited in a wallet currency) in pounds.
                let payment = &self.stripe[0];
                let user = self.user(payment.user);
                let charge = stripe_charge("ch_gbp", "pi_0", &user, "gbp", 400, 100);
                stripe_event("evt_ch_gbp_refund", "charge.refunded", T0 + 91, charge)
            }
            Malformed::RazorpayCurrencyMismatch => {
                let refund = json!({ "entity": {
                    "id": "rfnd_gbp", "entity": "refund", "amount": 100, "currency": "GBP",
                    "payment_id": "pay_0", "status": "processed",
                }});
                razorpay_event(
                    "rzp_rfnd_gbp",
                    "refund.processed",
                    json!({ "refund": refund }),
                    T0 + 92,
                )
            }
            Malformed::OverlongIntent => stripe_event(
                "evt_overlong_credit",
                "payment_intent.succeeded",
                T0 + 93,
                payment_intent(&format!("pi_{overlong}"), "user_0", "usd", 700),
            ),
            Malformed::OverlongPayment => {
                let entity = razorpay_payment_entity(
                    &format!("pay_{overlong}"),
                    "user_0",
                    "INR",
                    700,
                    0,
                    "captured",
                );
                razorpay_event(
                    "rzp_overlong_captured",
                    "payment.captured",
                    json!({ "payment": entity }),
                    T0 + 94,
                )
            }
        }
    }
}
