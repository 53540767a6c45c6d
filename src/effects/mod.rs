//! Which event does what (the README's effects tables), in two halves that
//! meet in one value:
//! - **decoding**, once per event: each scheme's decoder ([`stripe`],
//!   [`razorpay`], [`paypal`]; a generic source forwards) turns the
//!   verified payload into an [`Effect`], validated, owned, with the
//!   [`Plan`] of the locks it needs: a [`Decoded`];
//! - **applying**, by the effect alone ([`apply`], or a [`Set`] of one
//!   kind's events at once: [`apply_set`]),
//!   inside the ingest transaction, with the plan's locks held. Appliers
//!   take `&mut PgConnection`; they never open, commit or roll back a
//!   transaction, never lock, and never read the payload.

mod checkout;
mod credits;
mod effect;
mod fields;
mod invoices;
mod learning;
mod owner;
pub mod paypal;
pub mod razorpay;
mod receipts;
mod refunds;
mod source;
pub mod stripe;
mod subscription;
mod teach;
mod waits;

use sqlx::PgConnection;

use crate::outbox;
use crate::owners::{self, Candidate, Subject};
use crate::providers::{Event, Kind};

pub use credits::apply_credits;
pub use effect::{
    Applied, CheckoutSession, Effect, Error, Owed, Owing, OwnRefund, PaymentRecord, PlainCredit,
    Reason, RefundRow, StripeCharge, StripeInvoice,
};

/// An event with what it does and the locks it needs, decoded once
/// ([`decode`]): what the engine, the fallback, a replay and a sweep apply.
#[derive(Debug, Clone)]
pub struct Decoded {
    event: Event,
    effect: Effect,
    plan: Plan,
}

impl Decoded {
    pub fn event(&self) -> &Event {
        &self.event
    }

    pub fn effect(&self) -> &Effect {
        &self.effect
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Whether crediting is all it does: it may share statements with other
    /// credits ([`apply_credits`]).
    pub fn is_credit(&self) -> bool {
        matches!(self.effect, Effect::Credit { .. })
    }

    /// The keys events deferred before it may wait for, that applying it
    /// may release, as its provider's `waits_for`: a credit's payment, and
    /// the owner wait of each subject it may teach (a customer, a
    /// Checkout Session's payment intent). Each is covered by a key of its
    /// plan, so a transaction holding those locks knows what waits.
    pub fn awaited(&self) -> Vec<String> {
        let owner =
            |subject, id: &Option<String>| id.as_deref().map(|id| owners::wait_key(subject, id));
        match &self.effect {
            Effect::Credit { credit, .. } => [Some(credit.source_ref.clone())]
                .into_iter()
                .chain([owner(Subject::Customer, &credit.customer)])
                .flatten()
                .collect(),
            Effect::Checkout(session) => [
                session.payment_intent.clone(),
                owner(Subject::Payment, &session.payment_intent),
                owner(Subject::Customer, &session.customer),
            ]
            .into_iter()
            .flatten()
            .collect(),
            Effect::Unowned { credit, .. } => learning::released_keys(credit),
            Effect::LearnCustomer { customer, .. } => {
                vec![owners::wait_key(Subject::Customer, customer)]
            }
            Effect::LearnPayment { payment, .. } => {
                vec![owners::wait_key(Subject::Payment, payment)]
            }
            _ => Vec::new(),
        }
    }

    /// What it waits for when it cannot apply yet (`deferred`), as its
    /// provider's `waits_for`, when that is an owner: a credit whose owner
    /// is learned, an invoice that credits its customer's owner.
    pub fn may_wait_for(&self) -> Option<String> {
        match &self.effect {
            Effect::Unowned {
                credit, candidates, ..
            } => Some(learning::wait_for(candidates, &credit.source_ref)),
            Effect::InvoicePaid(invoice) if invoice.credit.is_some() => invoice
                .customer_id
                .as_deref()
                .map(|customer| owners::wait_key(Subject::Customer, customer)),
            _ => None,
        }
    }

    /// The events it may share statements with: those of its kind.
    pub fn set(&self) -> Set {
        match &self.effect {
            Effect::Credit { .. } => Set::Credits,
            Effect::Receipt(_) => Set::Receipts,
            Effect::ChargeRefund(_) => Set::ChargeRefunds,
            Effect::Subscription { .. } => Set::Subscriptions,
            Effect::Refund { .. } => Set::Refunds,
            Effect::Status(_) => Set::Statuses,
            Effect::Forward | Effect::Thin => Set::Forwarded,
            Effect::Checkout(_) => Set::Checkouts,
            Effect::Unowned { .. } => Set::Learned,
            Effect::LearnCustomer { .. } | Effect::LearnPayment { .. } => Set::Owners,
            other => Set::Each(std::mem::discriminant(other)),
        }
    }

    /// The users whose wallets its effect may move, as far as the event
    /// says: the owner it credits or teaches (the credits waiting for that
    /// owner are released with it). A refund's is its credit's, and a
    /// learned owner is found under the locks: neither is known here.
    pub fn named_users(&self) -> Vec<&str> {
        fn named(owner: &[Candidate]) -> Vec<&str> {
            owners::first_named(owner).into_iter().collect()
        }
        match &self.effect {
            Effect::Credit { credit, .. } => vec![credit.user_id.as_str()],
            Effect::Checkout(session) => named(&session.owner),
            Effect::InvoicePaid(invoice) => named(&invoice.owner),
            Effect::LearnPayment { user_id, .. } | Effect::LearnCustomer { user_id, .. } => {
                vec![user_id.as_str()]
            }
            Effect::Subscription { next, .. } => next.user_id.as_deref().into_iter().collect(),
            _ => Vec::new(),
        }
    }
}

/// Events that apply together ([`apply_set`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Set {
    /// Credits: in order, many to a statement, two of one payment or one
    /// wallet among them ([`apply_credits`]).
    Credits,
    /// Stripe charges' receipts: in order, many to a statement
    /// ([`receipts::record_charges`]).
    Receipts,
    /// Stripe's cumulative charge refunds: many to a statement, as long as
    /// no two debit one payment ([`refunds::debit_charge_refunds`]).
    ChargeRefunds,
    /// Refunds that carry their own amount and id (Razorpay's, PayPal's):
    /// many to a statement, as long as no two debit one payment
    /// ([`refunds::debit_own_refunds`]).
    Refunds,
    /// Subscriptions' states: many to a statement, as long as no two share
    /// a subscription or a customer ([`subscription::apply_all`]).
    Subscriptions,
    /// Payment rows that only record a status: many to a statement
    /// ([`credits::record_statuses`]).
    Statuses,
    /// Events forwarded as they are (generic and `record` sources): many
    /// to a statement ([`source::forward_all`]).
    Forwarded,
    /// Checkout Sessions: many to a statement, as long as no two share a
    /// payment intent or a customer ([`checkout::apply_all`]).
    Checkouts,
    /// Credits whose owner is learned: many to a statement, as long as no
    /// two share a payment, a customer or a learned owner
    /// ([`learning::credit_unowned_all`]).
    Learned,
    /// Events that only name an owner: many to a statement
    /// ([`teach::learn_all`]).
    Owners,
    /// Any other kind: one event after another, in order.
    Each(std::mem::Discriminant<Effect>),
}

/// Applies events of one [`Set`], in order, with their plans' locks held:
/// the answers for a prefix, never empty when `units` is not (a set stops
/// after an event that releases others, which apply before the rest).
pub async fn apply_set(
    conn: &mut PgConnection,
    set: Set,
    units: &[&Decoded],
) -> Result<Vec<Applied>, Error> {
    match set {
        Set::Credits => apply_credits(conn, units).await,
        Set::Receipts => receipts::record_charges(conn, units).await,
        Set::ChargeRefunds => refunds::debit_charge_refunds(conn, units).await,
        Set::Subscriptions => subscription::apply_all(conn, units).await,
        Set::Refunds => refunds::debit_own_refunds(conn, units).await,
        Set::Statuses => credits::record_statuses(conn, units).await,
        Set::Forwarded => source::forward_all(conn, units).await,
        Set::Checkouts => checkout::apply_all(conn, units).await,
        Set::Learned => learning::credit_unowned_all(conn, units).await,
        Set::Owners => teach::learn_all(conn, units).await,
        Set::Each(_) => match units.first() {
            Some(unit) => Ok(vec![apply(conn, unit).await?]),
            None => Ok(Vec::new()),
        },
    }
}

/// Decodes `event`, once: its scheme's reading of its payload. An event its
/// source does not take (another mode, a connected account:
/// [`Event::refusal`]) is rejected, touching nothing.
pub fn decode(event: Event) -> Decoded {
    #[cfg(feature = "test-support")]
    testing::count(&event);
    let effect = match event.refusal() {
        Some(reason) => Effect::rejected(reason),
        None if event.record_only() => Effect::Forward,
        None => match event.kind() {
            Kind::Stripe => stripe::decode(&event),
            Kind::Razorpay => razorpay::decode(&event),
            Kind::Paypal => paypal::decode(&event),
            Kind::Source => Effect::Forward,
        },
    };
    let plan = Plan::of(event.provider(), &effect);
    Decoded {
        event,
        effect,
        plan,
    }
}

// Plans.
//
// What an event will touch, known before it is applied: the locks the
// ingest engine takes for it, all at once and in one global order, before
// any event of a transaction is applied. Effects themselves take no lock:
// they run with their plan's locks held.
//
// Every row an effect writes is covered by one of its keys: a credit, the
// refunds that debit it and the payment rows of that payment by
// `credit:{payment}`; a subscription by `subscription:{id}`; an invoice's
// `invoice.paid` by `invoice:{id}`; an owner learned for a payment by the
// payment's credit key, for a customer by `customer:{id}`; a wallet by its
// own lock (taken after all keys, since a refund's wallet is its credit's,
// and a learned owner's is known once the owner's key is held). So two
// transactions never wait for each other's rows while holding keys the
// other needs.

/// The lock class of [`Plan::keys`]: before wallets
/// ([`crate::ledger::WALLET_LOCK_CLASS`]).
pub const KEY_LOCK_CLASS: i16 = 1;

/// The locks of one event's effect.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Advisory lock keys (`{provider}:{kind}:{id}`), class [`KEY_LOCK_CLASS`].
    pub keys: Vec<String>,
    /// Wallets it credits, `(user_id, currency)`.
    pub wallets: Vec<(String, String)>,
    /// The payment whose credit it debits (a refund): its wallet is locked
    /// too, once the credit's key is held.
    pub debits: Option<String>,
    /// A credit whose owner is learned, not written on it: the wallet in
    /// this currency of the first candidate that yields an owner
    /// ([`owners::resolve`]) is locked too, once the keys are held.
    pub finds_owner: Option<(Vec<Candidate>, String)>,
}

impl Plan {
    /// The plan of `effect`, an event of `provider`. An effect that is
    /// rejected or ignored locks nothing.
    pub fn of(provider: &str, effect: &Effect) -> Self {
        let keyed = |key: String| Plan {
            keys: vec![key],
            ..Plan::default()
        };
        let customer = |id: &Option<String>| {
            id.as_deref()
                .map(|id| owners::lock_key(provider, Subject::Customer, id))
        };
        match effect {
            Effect::Rejected(_) | Effect::Ignored(_) | Effect::Forward | Effect::Thin => {
                Plan::default()
            }
            Effect::Credit { credit, .. } => Plan {
                keys: [credit_key(provider, &credit.source_ref)]
                    .into_iter()
                    .chain(customer(&credit.customer))
                    .collect(),
                wallets: vec![(credit.user_id.clone(), credit.currency.clone())],
                ..Plan::default()
            },
            Effect::Unowned {
                credit, candidates, ..
            } => {
                let mut plan = keyed(credit_key(provider, &credit.source_ref));
                plan.learns(provider, candidates);
                // Its credit teaches its customer's owner, found or not
                // through that customer.
                if let Some(key) = customer(&credit.customer).filter(|k| !plan.keys.contains(k)) {
                    plan.keys.push(key);
                }
                plan.finds_owner = Some((candidates.clone(), credit.currency.clone()));
                plan
            }
            Effect::Checkout(session) => {
                let mut plan = Plan::default();
                plan.keys.extend(
                    session
                        .payment_intent
                        .as_deref()
                        .map(|intent| credit_key(provider, intent)),
                );
                plan.keys.extend(customer(&session.customer));
                plan.learns(provider, &session.owner);
                if let Some(credit) = &session.credit {
                    match owner::first_named(&session.owner) {
                        Some(user_id) => plan
                            .wallets
                            .push((user_id.to_owned(), credit.currency.clone())),
                        None => {
                            plan.finds_owner =
                                Some((session.owner.clone(), credit.currency.clone()))
                        }
                    }
                }
                plan
            }
            Effect::LearnCustomer { customer: id, .. } => {
                keyed(owners::lock_key(provider, Subject::Customer, id))
            }
            Effect::InvoicePayment { payment, .. }
            | Effect::PaysInvoice { payment, .. }
            | Effect::LearnPayment { payment, .. } => keyed(credit_key(provider, payment)),
            Effect::Status(payment) => keyed(credit_key(provider, &payment.payment_id)),
            // A charge's row is written under its intent's key, as its
            // refunds are.
            Effect::Receipt(charge) => keyed(credit_key(
                provider,
                charge.payment_intent().unwrap_or(charge.id()),
            )),
            Effect::ChargeRefund(charge) => {
                let intent = charge.payment_intent().unwrap_or(charge.id());
                debiting(provider, intent)
            }
            Effect::Refund { refund, .. } => debiting(provider, &refund.payment_id),
            Effect::InvoicePaid(invoice) => {
                let mut plan = keyed(invoice_key(provider, &invoice.id));
                plan.keys.extend(
                    invoice
                        .payment_intent
                        .as_deref()
                        .map(|intent| credit_key(provider, intent)),
                );
                if let Some(credit) = &invoice.credit {
                    plan.learns(provider, &invoice.owner);
                    match owner::first_named(&invoice.owner) {
                        Some(user_id) => plan
                            .wallets
                            .push((user_id.to_owned(), credit.currency.clone())),
                        None => {
                            plan.finds_owner =
                                Some((invoice.owner.clone(), credit.currency.clone()))
                        }
                    }
                }
                plan
            }
            Effect::Subscription { next, .. } => Plan {
                keys: [subscription_key(provider, &next.subscription_id)]
                    .into_iter()
                    .chain(customer(&next.customer_id))
                    .collect(),
                ..Plan::default()
            },
        }
    }

    /// Adds the keys of the learned owners `candidates` read.
    fn learns(&mut self, provider: &str, candidates: &[Candidate]) {
        for (subject, id) in candidates.iter().filter_map(Candidate::learned) {
            let key = owners::lock_key(provider, subject, id);
            if !self.keys.contains(&key) {
                self.keys.push(key);
            }
        }
    }
}

/// A refund that debits payment `payment_id`'s credit, under its key.
fn debiting(provider: &str, payment_id: &str) -> Plan {
    Plan {
        keys: vec![credit_key(provider, payment_id)],
        debits: Some(payment_id.to_owned()),
        ..Plan::default()
    }
}

/// The key of payment `source_ref`'s credit, its refunds and its rows.
fn credit_key(provider: &str, source_ref: &str) -> String {
    format!("{provider}:credit:{source_ref}")
}

pub(super) fn subscription_key(provider: &str, subscription_id: &str) -> String {
    format!("{provider}:subscription:{subscription_id}")
}

fn invoice_key(provider: &str, invoice_id: &str) -> String {
    format!("{provider}:invoice:{invoice_id}")
}

/// Applies one decoded event. Call with its plan's locks held. A credit
/// applies as a run of one ([`apply_credits`]).
pub async fn apply(conn: &mut PgConnection, unit: &Decoded) -> Result<Applied, Error> {
    let event = &unit.event;
    match &unit.effect {
        Effect::Rejected(reason) => Ok(Applied::rejected(reason.as_str())),
        Effect::Ignored(reason) => Ok(Applied::ignored(reason)),
        Effect::Credit { .. } => apply_credits(conn, &[unit])
            .await?
            .pop()
            .ok_or(Error::Invariant("a credit has no outcome")),
        Effect::Unowned { .. } => one(learning::credit_unowned_all(conn, &[unit]).await?),
        Effect::LearnPayment { .. } | Effect::LearnCustomer { .. } => {
            one(teach::learn_all(conn, &[unit]).await?)
        }
        Effect::PaysInvoice { payment, invoice } => {
            let mut paid = learning::pays_invoice(invoice);
            paid.releases = learning::link_invoice(conn, event, payment, invoice).await?;
            Ok(paid)
        }
        Effect::Checkout(_) => one(checkout::apply_all(conn, &[unit]).await?),
        Effect::InvoicePayment { payment, invoice } => {
            let mut linked = Applied::processed(serde_json::json!({
                "payment_intent": payment,
                "invoice_id": invoice,
            }));
            linked.releases = learning::link_invoice(conn, event, payment, invoice).await?;
            Ok(linked)
        }
        Effect::Status(_) => one(credits::record_statuses(conn, &[unit]).await?),
        Effect::Receipt(_) => receipts::record_charges(conn, &[unit])
            .await?
            .pop()
            .ok_or(Error::Invariant("a receipt has no outcome")),
        Effect::ChargeRefund(_) => refunds::debit_charge_refunds(conn, &[unit])
            .await?
            .pop()
            .ok_or(Error::Invariant("a charge refund has no outcome")),
        Effect::Refund { .. } => refunds::debit_own_refunds(conn, &[unit])
            .await?
            .pop()
            .ok_or(Error::Invariant("a refund has no outcome")),
        Effect::InvoicePaid(invoice) => invoices::announce_paid(conn, event, invoice).await,
        Effect::Subscription { .. } => subscription::apply_all(conn, &[unit])
            .await?
            .pop()
            .ok_or(Error::Invariant("a subscription has no outcome")),
        Effect::Forward | Effect::Thin => one(source::forward_all(conn, &[unit]).await?),
    }
}

/// The one answer of a set of one.
fn one(mut applied: Vec<Applied>) -> Result<Applied, Error> {
    match (applied.pop(), applied.is_empty()) {
        (Some(applied), true) => Ok(applied),
        _ => Err(Error::Invariant("a set of one event answered none or many")),
    }
}

/// Writes one `topic` outbox row per event of `events`, each with its
/// payload and ordering key, in one statement: their outbox ids, in order.
async fn announce_each(
    conn: &mut PgConnection,
    topic: &str,
    events: &[&Event],
    payloads: &[serde_json::Value],
    keys: &[String],
) -> Result<Vec<Option<i64>>, Error> {
    let messages: Vec<outbox::Message<'_>> = events
        .iter()
        .zip(payloads)
        .zip(keys)
        .map(|((event, payload), key)| outbox::Message {
            topic,
            provider: event.provider(),
            event_id: event.event_id(),
            event_type: Some(event.event_type()),
            payload,
            ordering_key: Some(key),
            account: event.account(),
        })
        .collect();
    if messages.is_empty() {
        return Ok(Vec::new());
    }
    Ok(outbox::enqueue(conn, &messages).await?)
}

/// For this crate's tests only (the `test-support` feature): how many
/// times each event was decoded, so that a test can show it was once.
#[cfg(feature = "test-support")]
pub mod testing {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};

    use crate::providers::Event;

    fn decodes() -> &'static Mutex<HashMap<(String, String), usize>> {
        static DECODES: OnceLock<Mutex<HashMap<(String, String), usize>>> = OnceLock::new();
        DECODES.get_or_init(Mutex::default)
    }

    pub(super) fn count(event: &Event) {
        let key = (event.provider().to_owned(), event.event_id().to_owned());
        *decodes()
            .lock()
            .expect("never poisoned")
            .entry(key)
            .or_default() += 1;
    }

    /// How many times the event `provider`/`event_id` was decoded in this
    /// process.
    pub fn decodes_of(provider: &str, event_id: &str) -> usize {
        let key = (provider.to_owned(), event_id.to_owned());
        decodes()
            .lock()
            .expect("never poisoned")
            .get(&key)
            .copied()
            .unwrap_or(0)
    }
}
