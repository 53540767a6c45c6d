//! The vocabulary of effects: what an event does ([`Effect`]), decoded
//! once from its payload by its scheme's decoder, and what applying it
//! did ([`Applied`]). Decoders only make these values; the appliers only
//! read them; nothing looks at the payload again.

use serde_json::{Value, json};

use crate::db;
use crate::events::Outcome;
use crate::owners::Candidate;
use crate::payments::Payment;
use crate::providers::Event;
use crate::subscriptions::Subscription;

/// Why an event can never be applied: the reason its `rejected` detail gives.
pub type Reason = String;

/// What one event does, everything its application needs read from its
/// payload and validated. Owned, so it travels with its event through a
/// batch, the fallback and a replay without being decoded again.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// It can never apply (a malformed payload, a source that does not take
    /// it): recorded `rejected` with the reason, touching nothing.
    Rejected(Reason),
    /// It has nothing to do: recorded `ignored` with the reason.
    Ignored(&'static str),
    /// Credits the owner's wallet once per payment, after recording the
    /// payment's row when the event carries one (a capture's).
    Credit {
        credit: PlainCredit,
        payment: Option<PaymentRecord>,
    },
    /// A credit whose owner is not written on it: found when it is applied,
    /// by its candidates in order (the owner learned for its payment or its
    /// customer); until one is known it waits (`deferred`).
    Unowned {
        credit: Owed,
        candidates: Vec<Candidate>,
        /// The payment's row, recorded once its owner is known (a
        /// Razorpay capture's).
        payment: Option<PaymentRecord>,
    },
    /// An object that names an owner for a payment (Razorpay's `order.paid`,
    /// whose order's notes name it).
    LearnPayment { payment: String, user_id: String },
    /// A payment that pays an invoice: the invoice's money, never a wallet
    /// top-up. Recorded `ignored` with the invoice.
    PaysInvoice { payment: String, invoice: String },
    /// A Checkout Session completed, or its delayed payment settled.
    Checkout(CheckoutSession),
    /// An object that names an owner for a customer (Stripe's
    /// `customer.created/updated` with the metadata key).
    LearnCustomer { customer: String, user_id: String },
    /// A payment that pays an invoice (`invoice_payment.paid`).
    InvoicePayment { payment: String, invoice: String },
    /// Records a payment's status only (failed, pending, declined).
    Status(PaymentRecord),
    /// Stripe's `charge.succeeded`: the charge's row and its receipt.
    Receipt(StripeCharge),
    /// Stripe's `charge.refunded`: debits what the charge's cumulative
    /// refunded amount adds to what was debited for it.
    ChargeRefund(StripeCharge),
    /// A refund that carries its own id and amount (Razorpay's, PayPal's).
    Refund { refund: OwnRefund, row: RefundRow },
    /// Stripe's `invoice.paid`: announced once per invoice.
    InvoicePaid(StripeInvoice),
    /// The guarded subscription upsert, ordered by `event_time`.
    Subscription { next: Subscription, event_time: i64 },
    /// A generic source's event: forwarded as one outbox row.
    Forward,
    /// A Stripe thin event of a type webhookd does not apply: recorded
    /// `ignored` and forwarded as outbox `stripe.thin` with the event its
    /// API served.
    Thin,
}

impl Effect {
    /// Rejected for `reason`.
    pub fn rejected(reason: impl Into<Reason>) -> Self {
        Effect::Rejected(reason.into())
    }

    /// The guarded upsert of `next`, ordered by `event`'s own time.
    pub(super) fn subscription(next: Subscription, event: &Event) -> Result<Effect, Reason> {
        let event_time = event
            .created()
            .ok_or("event has no created time to order it by")?;
        Ok(Effect::Subscription { next, event_time })
    }

    /// `decoded?` or its rejection: how decoders end.
    pub(super) fn from_result(decoded: Result<Effect, Reason>) -> Self {
        decoded.unwrap_or_else(Effect::Rejected)
    }
}

/// A credit to apply: `source_ref` is the payment's id (its natural key).
#[derive(Debug, Clone, PartialEq)]
pub struct PlainCredit {
    pub user_id: String,
    pub currency: String,
    pub amount_minor: i64,
    pub source_ref: String,
    /// Provider-specific fields for the `wallet.credited` payload.
    pub context: Value,
    /// The provider's customer the payment names: `user_id` is learned as
    /// its owner.
    pub customer: Option<String>,
}

/// What a payment owes its owner, before the owner is known.
#[derive(Debug, Clone, PartialEq)]
pub struct Owed {
    pub currency: String,
    pub amount_minor: i64,
    /// The payment's id: the credit's natural key.
    pub source_ref: String,
    pub context: Value,
    pub customer: Option<String>,
}

impl Owed {
    /// The credit once `user_id` is known to own it.
    pub fn to(&self, user_id: String) -> PlainCredit {
        PlainCredit {
            user_id,
            currency: self.currency.clone(),
            amount_minor: self.amount_minor,
            source_ref: self.source_ref.clone(),
            context: self.context.clone(),
            customer: self.customer.clone(),
        }
    }
}

/// A succeeded payment as the default owner rule reads it, for an audit
/// against the provider's own list: what it owes, its owner's candidates
/// (named on it, or learned for it or its customer), and the invoice it
/// pays when the payment names one (never a wallet credit then).
#[derive(Debug, Clone, PartialEq)]
pub struct Owing {
    pub owed: Owed,
    pub candidates: Vec<crate::owners::Candidate>,
    pub invoice: Option<String>,
}

impl Owing {
    /// The credit of the owner named on the payment, if its first
    /// candidate names one.
    pub fn named(&self) -> Option<PlainCredit> {
        crate::owners::first_named(&self.candidates).map(|owner| self.owed.to(owner.to_owned()))
    }
}

/// A Stripe Checkout Session event, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckoutSession {
    pub id: String,
    /// `payment`, `subscription` or `setup`.
    pub mode: String,
    pub payment_status: Option<String>,
    pub payment_intent: Option<String>,
    pub customer: Option<String>,
    pub subscription: Option<String>,
    /// The session's owner by its source's rule, in order.
    pub owner: Vec<Candidate>,
    /// What the session pays its owner (a paid `payment` session): keyed by
    /// its payment intent, as `payment_intent.succeeded` is.
    pub credit: Option<Owed>,
    /// The outbox topic it announces when it credits nothing
    /// (`checkout.completed`, `checkout.failed`).
    pub announces: &'static str,
    pub amount_total: Option<i64>,
    pub currency: Option<&'static str>,
}

/// A payment's row as its event carries it, validated: its refunded amount
/// never exceeds its amount.
#[derive(Debug, Clone, PartialEq)]
pub struct PaymentRecord {
    pub payment_id: String,
    /// Its parent: a Stripe PaymentIntent, a Razorpay order, a PayPal order.
    pub payment_ref: Option<String>,
    pub user_id: Option<String>,
    pub amount_minor: i64,
    pub currency: &'static str,
    pub status: String,
    pub refunded_minor: i64,
    /// Unix seconds.
    pub created: Option<i64>,
}

impl PaymentRecord {
    /// Its row in `payments`, as `provider`'s.
    pub fn row<'a>(&'a self, provider: &'a str) -> Payment<'a> {
        Payment {
            provider,
            payment_id: &self.payment_id,
            payment_ref: self.payment_ref.as_deref(),
            user_id: self.user_id.as_deref(),
            amount_minor: self.amount_minor,
            currency: self.currency,
            status: &self.status,
            refunded_minor: self.refunded_minor,
            created: self.created,
        }
    }
}

/// A Stripe charge (`charge.succeeded`, `charge.refunded`), validated.
#[derive(Debug, Clone, PartialEq)]
pub struct StripeCharge {
    /// Its row; `payment_ref` is its PaymentIntent.
    pub payment: PaymentRecord,
}

impl StripeCharge {
    pub fn id(&self) -> &str {
        &self.payment.payment_id
    }

    pub fn payment_intent(&self) -> Option<&str> {
        self.payment.payment_ref.as_deref()
    }
}

/// A Stripe `invoice.paid` invoice, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct StripeInvoice {
    pub id: String,
    pub customer_id: Option<String>,
    pub subscription_id: Option<String>,
    /// Its owner by its source's rule, then its customer's learned owner.
    pub owner: Vec<Candidate>,
    /// The payment intent that paid it, when the API version names it.
    pub payment_intent: Option<String>,
    /// With invoice credits on (`WEBHOOKD_SOURCE_<NAME>_INVOICE_CREDITS`):
    /// what it credits its owner (`amount_paid`), keyed by the invoice.
    pub credit: Option<Owed>,
    pub amount_paid_minor: Option<i64>,
    pub currency: Option<&'static str>,
}

/// A validated refund of payment `payment_id`.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnRefund {
    /// Its natural key.
    pub id: String,
    /// The payment whose credit it debits.
    pub payment_id: String,
    /// Positive.
    pub amount_minor: i64,
    pub currency: &'static str,
    /// Provider-specific fields for the `wallet.debited` payload.
    pub context: Value,
}

/// How a refund keeps its payment's row: a row stored with another amount
/// or currency rejects the refund.
#[derive(Debug, Clone, PartialEq)]
pub enum RefundRow {
    /// As the refund event carries it (Razorpay's payment entity), if it
    /// does: recorded once the credit is found.
    Carried(Option<PaymentRecord>),
    /// The event carries no payment (PayPal's refunds): the credited
    /// payment's row moves to what the ledger has refunded of it, this
    /// refund included.
    FromLedger,
}

/// Why an event's effects were not applied. Either way its transaction
/// rolls back and nothing of it commits.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// What cannot happen did: a bug here, never the input's fault.
    #[error("invariant broken: {0}")]
    Invariant(&'static str),
}

impl Error {
    /// The database's refusal of the data, when that is the error.
    pub fn poison(&self) -> Option<db::Poison> {
        match self {
            Error::Database(error) => db::Poison::of(error),
            Error::Invariant(_) => None,
        }
    }
}

/// The result of applying one event: its outcome and the `detail` stored
/// with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub outcome: Outcome,
    pub detail: Value,
    /// The keys that events were deferred for and that this one brought (a
    /// credit that refunds wait for, an owner learned): the engine applies
    /// them next, in the same transaction, and lists them in
    /// `detail.applied_deferred`.
    pub releases: Vec<String>,
}

impl Applied {
    fn with(outcome: Outcome, detail: Value) -> Self {
        Applied {
            outcome,
            detail,
            releases: Vec::new(),
        }
    }

    pub fn processed(detail: Value) -> Self {
        Applied::with(Outcome::Processed, detail)
    }

    pub fn ignored(reason: &str) -> Self {
        Applied::with(Outcome::Ignored, json!({ "reason": reason }))
    }

    /// Ignored with more than a reason (`detail` holds it).
    pub fn ignored_with(detail: Value) -> Self {
        Applied::with(Outcome::Ignored, detail)
    }

    /// The effect's natural key belongs to another event.
    pub fn owned_by(reason: &str, owner_event_id: &str) -> Self {
        Applied::ignored_with(json!({ "reason": reason, "owner_event_id": owner_event_id }))
    }

    pub fn superseded(detail: Value) -> Self {
        Applied::with(Outcome::Superseded, detail)
    }

    /// `detail.<key>` = `value`, on an object detail.
    pub fn noting(mut self, key: &str, value: Value) -> Self {
        if let Value::Object(detail) = &mut self.detail {
            detail.insert(key.to_owned(), value);
        }
        self
    }

    pub fn deferred(waits_for: &str) -> Self {
        Applied::with(Outcome::Deferred, json!({ "waits_for": waits_for }))
    }

    pub fn rejected(reason: impl Into<String>) -> Self {
        Applied::with(Outcome::Rejected, json!({ "reason": reason.into() }))
    }

    /// Rejected with the database's refusal of its data as the detail.
    pub fn refused(poison: &db::Poison) -> Self {
        Applied::with(Outcome::Rejected, poison.detail())
    }
}
