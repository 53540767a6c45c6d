//! `webhookd send stripe`: a Stripe-shaped event (API version 2024-06-20),
//! one builder per object it carries: payment intents, charges, invoices,
//! subscriptions, Checkout Sessions and customers, with the fields Stripe
//! sends that the effects read; with `--thin`, the same event as a thin
//! one ([`thin`]).

use clap::Args;
use serde_json::{Value, json};

use super::SendArgs;

/// What `send stripe` adds to the common options.
#[derive(Debug, Clone, Default, Args)]
pub struct StripeSendArgs {
    /// The customer (`cus_…`) the object names: a Checkout Session's, a
    /// payment intent's, an invoice's or subscription's (default
    /// `cus_send`), the one `customer.created/updated` teaches the owner of
    /// (default: a fresh id). Sessions and intents name none unless told.
    #[arg(long)]
    pub customer: Option<String>,
    /// Send the payment intent (and its charges) as Checkout creates them:
    /// without `metadata.user_id`, so that the owner comes from the
    /// Checkout Session's `client_reference_id` (`--payment` names the
    /// intent both carry). The intent waits (`deferred`) until the session
    /// is received.
    #[arg(long)]
    pub checkout: bool,
    /// Send it as a thin event, as an event destination of thin payloads
    /// does (`object: "v2.core.event"`, type `v1.<event type>`, the object
    /// named in `related_object`, no data): the server fetches the object
    /// from Stripe's API with its STRIPE_API_KEY (at
    /// WEBHOOKD_STRIPE_API_BASE), so it must exist there. A type named
    /// `v1.…` or `v2.…` is sent as it is.
    #[arg(long)]
    pub thin: bool,
}

/// The parts of a sample that every object takes from the options.
struct Sample<'a> {
    args: &'a SendArgs,
    amount: i64,
    currency: String,
    t: i64,
    unique: u128,
}

impl Sample<'_> {
    /// `--payment`, else a fresh id with `prefix`.
    fn payment_or(&self, prefix: &str) -> String {
        self.args
            .payment
            .clone()
            .unwrap_or_else(|| format!("{prefix}_send_{}", self.unique))
    }

    /// The owner's metadata, which an object Checkout creates has not.
    fn metadata(&self) -> Value {
        if self.args.stripe.checkout {
            json!({})
        } else {
            json!({ "user_id": self.args.user })
        }
    }

    /// `--customer`, else `default` (`None`: null).
    fn customer(&self, default: Option<&str>) -> Value {
        match (&self.args.stripe.customer, default) {
            (Some(customer), _) => customer.as_str().into(),
            (None, Some(default)) => default.into(),
            (None, None) => Value::Null,
        }
    }
}

/// A Stripe event of `args.event_type` for `amount` at `t`.
pub fn event(args: &SendArgs, amount: i64, t: i64, unique: u128) -> Value {
    let sample = Sample {
        args,
        amount,
        currency: args
            .currency
            .as_deref()
            .unwrap_or("usd")
            .to_ascii_lowercase(),
        t,
        unique,
    };
    let object = match args.event_type.as_str() {
        "payment_intent.succeeded" => payment_intent(&sample),
        kind @ ("charge.succeeded" | "charge.refunded") => {
            charge(&sample, kind == "charge.refunded")
        }
        "invoice.paid" => invoice(&sample),
        kind if kind.starts_with("customer.subscription.") => {
            subscription(&sample, kind.ends_with("deleted"))
        }
        "checkout.session.completed" | "checkout.session.async_payment_succeeded" => {
            checkout_session(&sample, true)
        }
        "checkout.session.async_payment_failed" => checkout_session(&sample, false),
        "customer.created" | "customer.updated" => customer(&sample),
        _ => json!({ "id": format!("obj_send_{unique}"), "metadata": sample.metadata() }),
    };
    json!({
        "id": format!("evt_send_{unique}"), "object": "event", "api_version": "2024-06-20",
        "created": t, "data": { "object": object }, "livemode": false, "pending_webhooks": 1,
        "request": { "id": null, "idempotency_key": null }, "type": args.event_type,
    })
}

/// `snapshot` (an event [`event`] built) as a thin event: its type `v1.`
/// and the type (a type already `v1.…` or `v2.…` as it is), its object
/// named by id, type and the path Stripe's API serves it at.
pub fn thin(snapshot: &Value, t: i64) -> Value {
    let kind = snapshot["type"].as_str().unwrap_or_default();
    let kind = match kind.starts_with("v1.") || kind.starts_with("v2.") {
        true => kind.to_owned(),
        false => format!("v1.{kind}"),
    };
    let object = &snapshot["data"]["object"];
    let related = match (object["id"].as_str(), object["object"].as_str()) {
        (Some(id), Some(object_type)) => {
            let collection = match object_type {
                "checkout.session" => "checkout/sessions".to_owned(),
                other => format!("{other}s"),
            };
            json!({ "id": id, "type": object_type, "url": format!("/v1/{collection}/{id}") })
        }
        _ => Value::Null,
    };
    let created = std::time::UNIX_EPOCH + std::time::Duration::from_secs(t.unsigned_abs());
    json!({
        "id": snapshot["id"], "object": "v2.core.event", "type": kind,
        "created": humantime::format_rfc3339_millis(created).to_string(),
        "livemode": false, "context": null, "related_object": related,
        "reason": { "type": "request", "request": { "id": null, "idempotency_key": null } },
    })
}

/// A succeeded PaymentIntent: `--payment`, its owner in its metadata
/// unless `--checkout`.
fn payment_intent(s: &Sample) -> Value {
    let intent = s.payment_or("pi");
    json!({
        "id": intent, "object": "payment_intent", "amount": s.amount,
        "amount_received": s.amount, "currency": s.currency, "status": "succeeded",
        "customer": s.customer(None), "latest_charge": format!("ch_{}", intent.trim_start_matches("pi_")),
        "metadata": s.metadata(), "created": s.t,
    })
}

/// A charge of the intent `--payment`, refunded in full or not at all.
fn charge(s: &Sample, refunded: bool) -> Value {
    let intent = s.payment_or("pi");
    json!({
        "id": format!("ch_{}", intent.trim_start_matches("pi_")), "object": "charge",
        "amount": s.amount, "amount_captured": s.amount,
        "amount_refunded": if refunded { s.amount } else { 0 },
        "refunded": refunded, "currency": s.currency, "payment_intent": intent,
        "status": "succeeded", "metadata": s.metadata(), "created": s.t,
    })
}

fn invoice(s: &Sample) -> Value {
    json!({
        "id": format!("in_send_{}", s.unique), "object": "invoice",
        "customer": s.customer(Some("cus_send")), "subscription": "sub_send",
        "amount_paid": s.amount, "currency": s.currency, "metadata": s.metadata(),
    })
}

/// `--payment` names the subscription (default `sub_send`).
fn subscription(s: &Sample, deleted: bool) -> Value {
    json!({
        "id": s.args.payment.clone().unwrap_or_else(|| "sub_send".to_owned()),
        "object": "subscription", "customer": s.customer(Some("cus_send")),
        "status": if deleted { "canceled" } else { "active" },
        "metadata": s.metadata(),
        "items": { "object": "list", "data": [
            { "id": "si_send", "price": { "id": "price_send" }, "current_period_end": s.t + 2_592_000 }
        ]},
    })
}

/// A completed one-off (`payment` mode) Checkout Session of `--amount`:
/// `client_reference_id` is `--user`, `payment_intent` is `--payment` (the
/// intent Checkout created for it), paid unless its delayed payment
/// failed.
fn checkout_session(s: &Sample, paid: bool) -> Value {
    let id = format!("cs_send_{}", s.unique);
    json!({
        "id": id, "object": "checkout.session", "mode": "payment", "status": "complete",
        "payment_status": if paid { "paid" } else { "unpaid" },
        "client_reference_id": s.args.user, "customer": s.customer(None),
        "customer_creation": "if_required", "payment_intent": s.payment_or("pi"),
        "amount_subtotal": s.amount, "amount_total": s.amount, "currency": s.currency,
        "metadata": {}, "livemode": false, "payment_link": null, "subscription": null,
        "invoice": null, "payment_method_types": ["card"], "ui_mode": "hosted",
        "success_url": "https://example.com/success", "cancel_url": "https://example.com/cancel",
        "created": s.t - 60, "expires_at": s.t + 86_340, "url": null,
        "total_details": { "amount_discount": 0, "amount_shipping": 0, "amount_tax": 0 },
    })
}

/// A customer whose metadata names `--user` as its owner: `--customer`,
/// else a fresh id.
fn customer(s: &Sample) -> Value {
    let id = s
        .args
        .stripe
        .customer
        .clone()
        .unwrap_or_else(|| format!("cus_send_{}", s.unique));
    json!({
        "id": id, "object": "customer", "created": s.t, "email": null, "livemode": false,
        "metadata": { "user_id": s.args.user }, "name": null,
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        send: SendArgs,
    }

    fn sent(extra: &[&str]) -> Value {
        let args = Command::try_parse_from(["send", "stripe"].iter().chain(extra))
            .unwrap()
            .send;
        event(&args, 2500, 1_700_000_000, 7)
    }

    #[test]
    fn a_thin_event_names_its_object_and_carries_no_data() {
        let snapshot = sent(&["payment_intent.succeeded", "--payment", "pi_7", "--thin"]);
        let sent_thin = thin(&snapshot, 1_700_000_000);
        assert_eq!(sent_thin["object"], "v2.core.event");
        assert_eq!(sent_thin["type"], "v1.payment_intent.succeeded");
        assert_eq!(sent_thin["created"], "2023-11-14T22:13:20.000Z");
        assert_eq!(sent_thin["id"], snapshot["id"]);
        assert_eq!(
            sent_thin["related_object"],
            json!({ "id": "pi_7", "type": "payment_intent", "url": "/v1/payment_intents/pi_7" })
        );
        assert!(sent_thin.get("data").is_none());
        let session = thin(&sent(&["checkout.session.completed"]), 1);
        assert_eq!(
            session["related_object"]["url"],
            format!(
                "/v1/checkout/sessions/{}",
                session["related_object"]["id"].as_str().unwrap()
            )
        );
        let ping = thin(&sent(&["v2.core.event_destination.ping"]), 1);
        assert_eq!(ping["type"], "v2.core.event_destination.ping");
    }

    #[test]
    fn a_checkout_session_names_its_owner_intent_and_customer() {
        let event = sent(&[
            "checkout.session.completed",
            "--user",
            "u_1",
            "--payment",
            "pi_1",
            "--customer",
            "cus_1",
        ]);
        let session = &event["data"]["object"];
        assert_eq!(event["type"], "checkout.session.completed");
        assert_eq!(session["object"], "checkout.session");
        assert_eq!(session["mode"], "payment");
        assert_eq!(session["payment_status"], "paid");
        assert_eq!(session["client_reference_id"], "u_1");
        assert_eq!(session["payment_intent"], "pi_1");
        assert_eq!(session["customer"], "cus_1");
        assert_eq!(session["amount_total"], 2500);
        assert_eq!(session["currency"], "usd");
        let failed = sent(&["checkout.session.async_payment_failed"]);
        assert_eq!(failed["data"]["object"]["payment_status"], "unpaid");
        assert_eq!(failed["data"]["object"]["customer"], Value::Null);
    }

    #[test]
    fn a_checkout_payment_intent_has_no_owner_metadata() {
        let plain = sent(&["payment_intent.succeeded", "--user", "u_1"]);
        assert_eq!(plain["data"]["object"]["metadata"]["user_id"], "u_1");
        let checkout = sent(&[
            "payment_intent.succeeded",
            "--checkout",
            "--payment",
            "pi_1",
        ]);
        let intent = &checkout["data"]["object"];
        assert_eq!(intent["id"], "pi_1");
        assert_eq!(intent["metadata"], json!({}));
        assert_eq!(intent["amount_received"], 2500);
    }

    #[test]
    fn a_customer_names_its_owner_in_its_metadata() {
        let event = sent(&["customer.created", "--user", "u_1", "--customer", "cus_9"]);
        let customer = &event["data"]["object"];
        assert_eq!(customer["id"], "cus_9");
        assert_eq!(customer["metadata"]["user_id"], "u_1");
        let fresh = sent(&["customer.updated"]);
        assert_eq!(fresh["data"]["object"]["id"], "cus_send_7");
    }
}
