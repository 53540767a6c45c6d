//! Stripe-shaped Checkout events, with the fields Stripe sends (API version
//! 2024-06-20 unless a test says otherwise): Checkout Sessions, payment
//! intents without metadata, customers, invoices, invoice payments and
//! subscriptions of a customer. Each object is also built at a given time
//! (`*_at`), for tests whose bodies must be the same on every run.

use serde_json::{Value, json};

use crate::helpers::{event_of_type, now};

/// A Checkout Session's parts that differ between flows.
#[derive(Debug, Clone, Copy)]
pub struct Session<'a> {
    pub id: &'a str,
    pub mode: &'a str,
    pub payment_status: &'a str,
    pub payment_intent: Option<&'a str>,
    pub client_reference_id: Option<&'a str>,
    pub customer: Option<&'a str>,
    pub subscription: Option<&'a str>,
    pub amount_total: i64,
    pub payment_link: Option<&'a str>,
}

impl<'a> Session<'a> {
    /// A one-off `payment` session, paid.
    pub fn paid(id: &'a str, intent: &'a str, owner: &'a str, amount_total: i64) -> Self {
        Session {
            id,
            mode: "payment",
            payment_status: "paid",
            payment_intent: Some(intent),
            client_reference_id: Some(owner),
            customer: None,
            subscription: None,
            amount_total,
            payment_link: None,
        }
    }

    pub fn object(&self) -> Value {
        self.object_at(now())
    }

    /// The session as Stripe sends it, created a minute before `at`.
    pub fn object_at(&self, at: i64) -> Value {
        json!({
            "id": self.id,
            "object": "checkout.session",
            "after_expiration": null,
            "allow_promotion_codes": null,
            "amount_subtotal": self.amount_total,
            "amount_total": self.amount_total,
            "automatic_tax": { "enabled": false, "liability": null, "status": null },
            "billing_address_collection": null,
            "cancel_url": "https://example.com/cancel",
            "client_reference_id": self.client_reference_id,
            "created": at - 60,
            "currency": "usd",
            "customer": self.customer,
            "customer_creation": "if_required",
            "customer_details": {
                "address": { "country": "US", "postal_code": "94103" },
                "email": "jenny@example.com",
                "name": "Jenny Rosen",
                "phone": null,
                "tax_exempt": "none",
                "tax_ids": []
            },
            "customer_email": null,
            "expires_at": at + 86_340,
            "invoice": null,
            "livemode": false,
            "locale": null,
            "metadata": {},
            "mode": self.mode,
            "payment_intent": self.payment_intent,
            "payment_link": self.payment_link,
            "payment_method_types": ["card"],
            "payment_status": self.payment_status,
            "setup_intent": null,
            "status": "complete",
            "submit_type": null,
            "subscription": self.subscription,
            "success_url": "https://example.com/success",
            "total_details": { "amount_discount": 0, "amount_shipping": 0, "amount_tax": 0 },
            "ui_mode": "hosted",
            "url": null
        })
    }

    /// The event `event_type` about this session.
    pub fn event(&self, event_id: &str, event_type: &str) -> String {
        event_of_type(event_id, event_type, self.object())
    }

    pub fn completed(&self, event_id: &str) -> String {
        self.event(event_id, "checkout.session.completed")
    }
}

/// A succeeded payment intent that Checkout (or an invoice) created: no
/// metadata.
pub fn intent(event_id: &str, intent: &str, customer: Option<&str>, amount: i64) -> String {
    event_of_type(
        event_id,
        "payment_intent.succeeded",
        intent_object(intent, customer, amount),
    )
}

pub fn intent_object(intent: &str, customer: Option<&str>, amount: i64) -> Value {
    intent_object_at(intent, customer, amount, now())
}

pub fn intent_object_at(intent: &str, customer: Option<&str>, amount: i64, at: i64) -> Value {
    json!({
        "id": intent,
        "object": "payment_intent",
        "amount": amount,
        "amount_capturable": 0,
        "amount_received": amount,
        "capture_method": "automatic_async",
        "client_secret": format!("{intent}_secret_x"),
        "confirmation_method": "automatic",
        "created": at - 30,
        "currency": "usd",
        "customer": customer,
        "description": null,
        "latest_charge": format!("ch_of_{intent}"),
        "livemode": false,
        "metadata": {},
        "payment_method": "pm_1",
        "payment_method_types": ["card"],
        "status": "succeeded"
    })
}

/// A customer whose metadata names its owner (or not).
pub fn customer(event_id: &str, customer: &str, owner: Option<&str>) -> String {
    event_of_type(
        event_id,
        "customer.created",
        customer_object(customer, owner, now()),
    )
}

pub fn customer_object(customer: &str, owner: Option<&str>, at: i64) -> Value {
    let metadata = match owner {
        Some(owner) => json!({ "user_id": owner }),
        None => json!({}),
    };
    json!({
        "id": customer,
        "object": "customer",
        "created": at - 10,
        "email": "jenny@example.com",
        "livemode": false,
        "metadata": metadata,
        "name": "Jenny Rosen"
    })
}

/// `invoice.paid` of a subscription's invoice; `intent` is named as older
/// API versions name it (current ones leave it to `invoice_payment.paid`).
pub fn invoice(
    event_id: &str,
    invoice: &str,
    customer: &str,
    subscription: Option<&str>,
    intent: Option<&str>,
    amount: i64,
) -> String {
    event_of_type(
        event_id,
        "invoice.paid",
        invoice_object(invoice, customer, subscription, intent, amount),
    )
}

pub fn invoice_object(
    invoice: &str,
    customer: &str,
    subscription: Option<&str>,
    intent: Option<&str>,
    amount: i64,
) -> Value {
    let mut object = json!({
        "id": invoice,
        "object": "invoice",
        "amount_due": amount,
        "amount_paid": amount,
        "amount_remaining": 0,
        "billing_reason": if subscription.is_some() { "subscription_cycle" } else { "manual" },
        "currency": "usd",
        "customer": customer,
        "customer_email": "jenny@example.com",
        "livemode": false,
        "metadata": {},
        "paid": true,
        "status": "paid",
        "subscription": subscription,
        "total": amount
    });
    if let Some(intent) = intent {
        object["payment_intent"] = intent.into();
    }
    object
}

/// `invoice_payment.paid`: current API versions' join of an invoice and the
/// payment intent that paid it.
pub fn invoice_payment(event_id: &str, invoice: &str, intent: &str, amount: i64) -> String {
    event_of_type(
        event_id,
        "invoice_payment.paid",
        invoice_payment_object(invoice, intent, amount, now()),
    )
}

pub fn invoice_payment_object(invoice: &str, intent: &str, amount: i64, at: i64) -> Value {
    json!({
            "id": format!("inpay_{intent}"),
            "object": "invoice_payment",
            "amount_paid": amount,
            "amount_requested": amount,
            "currency": "usd",
            "invoice": invoice,
            "is_default": true,
            "livemode": false,
            "payment": { "type": "payment_intent", "payment_intent": intent },
            "status": "paid",
        "status_transitions": { "canceled_at": null, "paid_at": at }
    })
}

/// `customer.subscription.created` of a customer's subscription, without
/// metadata (Checkout puts the owner on the session).
pub fn subscription(event_id: &str, subscription: &str, customer: &str) -> String {
    event_of_type(
        event_id,
        "customer.subscription.created",
        subscription_object(subscription, customer, now()),
    )
}

pub fn subscription_object(subscription: &str, customer: &str, at: i64) -> Value {
    json!({
            "id": subscription,
            "object": "subscription",
            "customer": customer,
            "status": "active",
            "metadata": {},
            "items": { "object": "list", "data": [
            { "id": "si_1", "price": { "id": "price_pro" }, "current_period_end": at + 2_592_000 }
        ]}
    })
}
