//! What a drill sends: its n-th unique event, signed for its provider, and
//! what the books must show once the first `sent` events are applied.
//!
//! Every id of run `R` carries the prefix `drill_R_`: events are
//! `evt_drill_R_n`, wallets `drill_R_u` (one of `--users`), payments
//! `pi_`/`ch_`/`pay_drill_R_n`. With `--mix` the events come in groups of ten
//! (the last one may be shorter): five Stripe credits, one `charge.succeeded`
//! of one of them, one `charge.refunded` of another (half its amount), one
//! `customer.subscription.updated` and two Razorpay `payment.captured`. Even
//! groups list the credits first, odd groups the refund, so that some
//! refunds arrive before their credit even when sent one at a time.
//!
//! With `--checkout` a group of ten is three Stripe Checkout payments and one
//! plain credit: each payment's `checkout.session.completed` (the owner in
//! `client_reference_id`), its `payment_intent.succeeded` (no metadata: its
//! owner is the one the session teaches) and its `charge.succeeded`. Even
//! groups list each session before its intent, odd groups the intent first,
//! which then waits for the session to name its owner.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::providers::{razorpay, stripe};

/// Events per group of the mix; the drill only stops between groups.
pub const GROUP: u64 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Credit,
    Charge,
    Refund,
    Subscription,
    Captured,
    /// A Checkout payment's `checkout.session.completed`.
    Session,
    /// A Checkout payment's `payment_intent.succeeded`, without metadata.
    Paid,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Credit => "payment_intent.succeeded",
            Kind::Charge => "charge.succeeded",
            Kind::Refund => "charge.refunded",
            Kind::Subscription => "customer.subscription.updated",
            Kind::Captured => "payment.captured",
            Kind::Session => "checkout.session.completed",
            Kind::Paid => "payment_intent.succeeded",
        }
    }

    /// How the drill's report names it: its event type, and which kind of
    /// `payment_intent.succeeded` it is.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Paid => "payment_intent.succeeded (checkout)",
            other => other.as_str(),
        }
    }

    pub fn provider(self) -> &'static str {
        match self {
            Kind::Captured => razorpay::PROVIDER,
            _ => stripe::PROVIDER,
        }
    }
}

use Kind::{Captured, Charge, Credit, Paid, Refund, Session, Subscription};

/// The slots of an even group, with the credits its charge and refund are
/// of (slots 1 and 0).
const EVEN: [Kind; 10] = [
    Credit,
    Credit,
    Credit,
    Credit,
    Credit,
    Charge,
    Refund,
    Subscription,
    Captured,
    Captured,
];
/// The slots of an odd group: the refund first, of the credit in slot 5;
/// the charge of slot 6.
const ODD: [Kind; 10] = [
    Refund,
    Captured,
    Charge,
    Subscription,
    Captured,
    Credit,
    Credit,
    Credit,
    Credit,
    Credit,
];

/// The slots of an even group of the Checkout mix: three payments (their
/// numbers are those of their sessions: slots 0, 3 and 6), each session
/// before its intent, then a plain credit.
const EVEN_CHECKOUT: [Kind; 10] = [
    Session, Paid, Charge, Session, Paid, Charge, Session, Paid, Charge, Credit,
];
/// An odd group of the Checkout mix: each intent before its session.
const ODD_CHECKOUT: [Kind; 10] = [
    Paid, Session, Charge, Paid, Session, Charge, Paid, Session, Charge, Credit,
];

/// What a run sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Stripe credits only.
    Credits,
    /// `--mix`.
    Mix,
    /// `--checkout`.
    Checkout,
}

impl Shape {
    pub fn as_str(self) -> &'static str {
        match self {
            Shape::Credits => "credits",
            Shape::Mix => "mix",
            Shape::Checkout => "checkout",
        }
    }
}

/// One drill run's events.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub run_id: u128,
    /// The most events the run sends: the last group may be cut short.
    pub events: u64,
    pub users: u64,
    pub shape: Shape,
}

/// A unique event as sent: its body, and what its signature needs.
#[derive(Debug)]
pub struct Delivery {
    pub kind: Kind,
    pub event_id: String,
    pub body: String,
}

/// What the books must hold after the first `sent` events, per provider.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    pub stripe_events: i64,
    pub razorpay_events: i64,
    pub stripe_credits: i64,
    pub stripe_refunds: i64,
    pub razorpay_credits: i64,
    pub receipts: i64,
    pub subscription_changes: i64,
    /// Stripe credits less refunds (USD).
    pub usd_minor: i64,
    /// Razorpay credits (INR).
    pub inr_minor: i64,
}

impl Plan {
    /// The prefix of every user id of the run (`drill_{run}_`).
    pub fn prefix(&self) -> String {
        format!("drill_{}_", self.run_id)
    }

    /// How many events a run stopped early may end at: whole groups.
    pub fn group(&self) -> u64 {
        match self.shape {
            Shape::Credits => 1,
            Shape::Mix | Shape::Checkout => GROUP,
        }
    }

    pub fn kind(&self, n: u64) -> Kind {
        let kind = match self.shape {
            Shape::Credits => return Credit,
            Shape::Mix => layout(n)[slot(n)],
            Shape::Checkout => checkout_layout(n)[slot(n)],
        };
        match kind {
            // A refund whose credit the run never sends (a short last
            // group) is a credit instead, and so is an intent whose session
            // it never sends.
            Refund | Paid if self.credit_of(n).is_none() => Credit,
            kind => kind,
        }
    }

    /// The credit a refund or a charge at `n` is of, when the run sends it;
    /// of a Checkout payment's events, the number of its session.
    fn credit_of(&self, n: u64) -> Option<u64> {
        let group = n - n % GROUP;
        let m = match self.shape {
            Shape::Credits => return None,
            Shape::Mix => {
                let slot = match (even(n), layout(n)[slot(n)]) {
                    (true, Refund) => 0,
                    (true, Charge) => 1,
                    (false, Refund) => 5,
                    (false, Charge) => 6,
                    _ => return None,
                };
                group + slot
            }
            Shape::Checkout => {
                let triple = group + (n % GROUP) / 3 * 3;
                match (even(n), checkout_layout(n)[slot(n)]) {
                    (_, Credit) => return None,
                    (true, _) => triple,
                    (false, _) => triple + 1,
                }
            }
        };
        (m < self.events).then_some(m)
    }

    /// The wallet owner of event `n`: a charge or refund's is its credit's.
    fn user(&self, n: u64) -> String {
        let owner = self.credit_of(n).unwrap_or(n);
        format!("{}{}", self.prefix(), spread(owner) % self.users)
    }

    pub fn delivery(&self, n: u64) -> Delivery {
        let run = self.run_id;
        let kind = self.kind(n);
        let event_id = format!("evt_drill_{run}_{n}");
        let user = self.user(n);
        let t = now();
        // A charge's payment is its credit's; one of no credit of the run
        // (a short last group) is of an intent the drill never sends.
        let payment = self.credit_of(n).unwrap_or(n);
        let object = match kind {
            Credit => json!({
                "id": format!("pi_drill_{run}_{n}"), "object": "payment_intent",
                "amount": amount(n), "amount_received": amount(n), "currency": "usd",
                "status": "succeeded", "metadata": { "user_id": user }, "created": t,
            }),
            Charge | Refund => json!({
                "id": format!("ch_drill_{run}_{payment}"), "object": "charge",
                "amount": amount(payment), "amount_captured": amount(payment),
                "amount_refunded": if kind == Refund { refund(payment) } else { 0 },
                "refunded": false, "currency": "usd",
                "payment_intent": format!("pi_drill_{run}_{payment}"),
                "status": "succeeded", "created": t,
                // Checkout's charges carry no metadata.
                "metadata": if self.shape == Shape::Checkout { json!({}) } else { json!({ "user_id": user }) },
            }),
            Session => json!({
                "id": format!("cs_drill_{run}_{payment}"), "object": "checkout.session",
                "mode": "payment", "payment_status": "paid", "status": "complete",
                "payment_intent": format!("pi_drill_{run}_{payment}"),
                "client_reference_id": user, "customer": null, "metadata": {},
                "amount_total": amount(payment), "currency": "usd", "created": t,
            }),
            Paid => json!({
                "id": format!("pi_drill_{run}_{payment}"), "object": "payment_intent",
                "amount": amount(payment), "amount_received": amount(payment),
                "currency": "usd", "status": "succeeded", "customer": null, "metadata": {},
                "created": t,
            }),
            Subscription => json!({
                "id": format!("sub_drill_{run}_{n}"), "object": "subscription",
                "customer": format!("cus_{user}"), "status": "active",
                "metadata": { "user_id": user },
                "items": { "object": "list", "data": [{
                    "id": format!("si_drill_{run}_{n}"), "price": { "id": "price_drill" },
                    "current_period_end": t + 2_592_000,
                }]},
            }),
            Captured => {
                let body = json!({
                    "entity": "event", "account_id": "acc_drill", "event": kind.as_str(),
                    "contains": ["payment"], "created_at": t,
                    "payload": { "payment": { "entity": {
                        "id": format!("pay_drill_{run}_{n}"), "entity": "payment",
                        "amount": amount(n), "currency": "INR", "status": "captured",
                        "order_id": format!("order_drill_{run}_{n}"), "method": "upi",
                        "amount_refunded": 0, "captured": true,
                        "notes": { "user_id": user }, "created_at": t,
                    }}},
                });
                return Delivery {
                    kind,
                    event_id,
                    body: body.to_string(),
                };
            }
        };
        let body = json!({
            "id": event_id, "object": "event", "api_version": "2024-06-20", "created": t,
            "type": kind.as_str(), "data": { "object": object }, "livemode": false,
            "pending_webhooks": 1,
        });
        Delivery {
            kind,
            event_id,
            body: body.to_string(),
        }
    }

    /// The books after events `0..sent`.
    pub fn expected(&self, sent: u64) -> Expected {
        let mut expected = Expected::default();
        for n in 0..sent {
            let kind = self.kind(n);
            match kind.provider() {
                razorpay::PROVIDER => expected.razorpay_events += 1,
                _ => expected.stripe_events += 1,
            }
            match kind {
                Credit => {
                    expected.stripe_credits += 1;
                    expected.usd_minor += amount(n);
                }
                Refund => {
                    expected.stripe_refunds += 1;
                    expected.usd_minor -= self.credit_of(n).map_or(0, refund);
                }
                Charge => expected.receipts += 1,
                // Credited once, by the session or by the intent it
                // releases: counted with the session.
                Session => {
                    expected.stripe_credits += 1;
                    expected.usd_minor += amount(n);
                }
                Paid => {}
                Subscription => expected.subscription_changes += 1,
                Captured => {
                    expected.razorpay_credits += 1;
                    expected.inr_minor += amount(n);
                }
            }
        }
        expected
    }
}

fn even(n: u64) -> bool {
    (n / GROUP).is_multiple_of(2)
}

fn layout(n: u64) -> &'static [Kind; 10] {
    if even(n) { &EVEN } else { &ODD }
}

fn checkout_layout(n: u64) -> &'static [Kind; 10] {
    if even(n) {
        &EVEN_CHECKOUT
    } else {
        &ODD_CHECKOUT
    }
}

fn slot(n: u64) -> usize {
    usize::try_from(n % GROUP).unwrap_or(0)
}

/// Event `n`'s amount in minor units.
fn amount(n: u64) -> i64 {
    100 + i64::try_from(n % 100).unwrap_or(0)
}

/// What a refund of credit `n` debits: half of it.
fn refund(n: u64) -> i64 {
    amount(n) / 2
}

/// Spreads event numbers over the wallets (splitmix64's finaliser), so that
/// wallets do not line up with the slots of the mix.
fn spread(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|d| i64::try_from(d.as_secs()).ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(events: u64) -> Plan {
        Plan {
            run_id: 7,
            events,
            users: 50,
            shape: Shape::Mix,
        }
    }

    #[test]
    fn a_group_of_the_mix_holds_each_kind_in_its_share() {
        for start in [0, 10] {
            let kinds: Vec<Kind> = (start..start + 10).map(|n| plan(20).kind(n)).collect();
            let count = |kind| kinds.iter().filter(|k| **k == kind).count();
            assert_eq!(
                [Credit, Charge, Refund, Subscription, Captured].map(count),
                [5, 1, 1, 1, 2]
            );
        }
    }

    #[test]
    fn every_refund_is_of_a_credit_of_the_run_and_no_credit_is_refunded_twice() {
        for events in [1, 5, 6, 10, 15, 16, 17, 25, 100] {
            let plan = plan(events);
            let mut refunded = std::collections::HashSet::new();
            for n in (0..events).filter(|n| plan.kind(*n) == Refund) {
                let credit = plan.credit_of(n).expect("a refund has its credit");
                assert!(credit < events && plan.kind(credit) == Credit);
                assert!(refunded.insert(credit), "{credit} refunded twice");
                assert_eq!(plan.user(n), plan.user(credit));
            }
        }
        // Odd groups send the refund before its credit.
        assert!(plan(20).credit_of(10).unwrap() > 10);
    }

    #[test]
    fn the_expected_books_add_credits_and_subtract_refunds() {
        let expected = plan(10).expected(10);
        assert_eq!(expected.stripe_events, 8);
        assert_eq!(expected.razorpay_events, 2);
        // Credits 0..5 (100..104), less half of credit 0's 100.
        assert_eq!(expected.usd_minor, 510 - 50);
        assert_eq!(expected.inr_minor, 108 + 109);
        let credits_only = Plan {
            shape: Shape::Credits,
            ..plan(10)
        }
        .expected(10);
        assert_eq!(credits_only.stripe_credits, 10);
        assert_eq!(credits_only.usd_minor, (100..110).sum::<i64>());
    }

    #[test]
    fn a_checkout_payment_is_its_sessions_and_an_intent_without_one_is_a_credit() {
        let plan = |events| Plan {
            shape: Shape::Checkout,
            ..plan(events)
        };
        for events in [1, 2, 10, 11, 12, 20, 25, 33] {
            let plan = plan(events);
            for n in 0..events {
                match plan.kind(n) {
                    Paid | Charge => {
                        let session = plan.credit_of(n).expect("its session is sent");
                        assert_eq!(plan.kind(session), Session);
                        assert_eq!(plan.user(n), plan.user(session));
                    }
                    Session => assert_eq!(plan.credit_of(n), Some(n)),
                    _ => {}
                }
            }
        }
        // Odd groups send the intent first; a last group cut after it makes
        // it a plain credit.
        assert_eq!((plan(20).kind(10), plan(20).kind(11)), (Paid, Session));
        assert_eq!(plan(11).kind(10), Credit);
        let expected = plan(10).expected(10);
        assert_eq!(expected.stripe_credits, 4);
        assert_eq!(expected.receipts, 3);
        assert_eq!(expected.usd_minor, 100 + 103 + 106 + 109);
    }

    #[test]
    fn the_users_spread_over_the_wallets() {
        let plan = Plan {
            shape: Shape::Credits,
            users: 1000,
            ..plan(10_000)
        };
        let wallets: std::collections::HashSet<String> =
            (0..10_000).map(|n| plan.user(n)).collect();
        assert!(wallets.len() > 990, "{}", wallets.len());
    }
}
