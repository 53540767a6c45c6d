//! `webhookd send <provider> <event-type>`: signs a realistic sample event
//! with the configured secret (PayPal: a private key, [`paypal`]) and POSTs
//! it, like `stripe trigger` but offline.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use secrecy::ExposeSecret;
use serde_json::{Value, json};

use super::{MAX_SHOWN_TEXT_BYTES, id, shown};
use crate::providers::{self, razorpay};
use crate::secrets::{Secrets, parse_secrets};

pub mod paypal;
pub mod stripe;

#[derive(Debug, Clone, Args)]
pub struct SendArgs {
    /// `stripe`, `razorpay` or `paypal`.
    pub provider: String,
    /// e.g. payment_intent.succeeded, charge.refunded, invoice.paid,
    /// customer.subscription.updated, checkout.session.completed,
    /// checkout.session.async_payment_succeeded, customer.created;
    /// payment.captured, refund.processed; PAYMENT.CAPTURE.COMPLETED,
    /// PAYMENT.CAPTURE.REFUNDED, BILLING.SUBSCRIPTION.ACTIVATED,
    /// BILLING.SUBSCRIPTION.CANCELLED.
    pub event_type: String,
    /// The wallet owner (`metadata.user_id` / `notes.user_id` /
    /// `custom_id`; a Checkout Session's `client_reference_id`).
    #[arg(long, default_value = "user_123")]
    pub user: String,
    /// Amount: in the currency's minor unit for Stripe and Razorpay
    /// (default 2000), as PayPal writes it for PayPal (default 20.00).
    #[arg(long, value_parser = parse_amount)]
    pub amount: Option<String>,
    /// ISO 4217 code (default: usd for Stripe, INR for Razorpay, USD for
    /// PayPal).
    #[arg(long, value_parser = parse_currency)]
    pub currency: Option<String>,
    /// The payment the event is about (default: a fresh id); a refund names
    /// the payment (PayPal: the capture) it refunds, a Checkout Session the
    /// payment intent it created.
    #[arg(long, alias = "capture")]
    pub payment: Option<String>,
    /// Base URL of the running webhookd.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    #[arg(long, env = "STRIPE_WEBHOOK_SECRET", hide_env_values = true, value_parser = parse_secrets, default_value = "")]
    pub stripe_webhook_secret: Secrets,
    #[arg(long, env = "RAZORPAY_WEBHOOK_SECRET", hide_env_values = true, value_parser = parse_secrets, default_value = "")]
    pub razorpay_webhook_secret: Secrets,
    #[command(flatten)]
    pub stripe: stripe::StripeSendArgs,
    #[command(flatten)]
    pub paypal: paypal::PaypalSendArgs,
}

pub async fn run(args: &SendArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?;
    let t = i64::try_from(now.as_secs())?;
    let unique = now.as_nanos();
    let (path, body, headers) = match args.provider.as_str() {
        providers::stripe::PROVIDER => {
            let secret = first_secret(&args.stripe_webhook_secret, "STRIPE_WEBHOOK_SECRET")?;
            let event = stripe::event(args, minor_amount(args)?, t, unique);
            let body = match args.stripe.thin {
                true => stripe::thin(&event, t),
                false => event,
            }
            .to_string();
            let header = providers::stripe::signature_header(secret, t, body.as_bytes());
            (
                providers::stripe::PROVIDER,
                body,
                vec![(providers::stripe::SIGNATURE_HEADER, header)],
            )
        }
        razorpay::PROVIDER => {
            let secret = first_secret(&args.razorpay_webhook_secret, "RAZORPAY_WEBHOOK_SECRET")?;
            let body = razorpay_event(args, minor_amount(args)?, t, unique).to_string();
            let signature = razorpay::signature(secret, body.as_bytes());
            let headers = vec![
                (razorpay::SIGNATURE_HEADER, signature),
                (razorpay::EVENT_ID_HEADER, format!("evt_send_{unique}")),
            ];
            (razorpay::PROVIDER, body, headers)
        }
        providers::paypal::PROVIDER => {
            let (body, headers) = paypal::delivery(args, UNIX_EPOCH + now, unique)?;
            (providers::paypal::PROVIDER, body, headers)
        }
        other => anyhow::bail!(
            "cannot send samples for `{}`: stripe, razorpay or paypal",
            id(other)
        ),
    };
    let url = format!("{}/webhooks/{path}", args.url.trim_end_matches('/'));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let mut request = client
        .post(&url)
        .header("content-type", "application/json")
        .body(body.clone());
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = request
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{} did not answer: {}", id(&url), e.without_url()))?;
    let status = response.status();
    let answer = response.text().await.unwrap_or_default();
    // The answer comes from the network; the body quotes what was typed.
    writeln!(
        out,
        "POST {}: {status} {}",
        id(&url),
        shown(&answer, MAX_SHOWN_TEXT_BYTES)
    )?;
    writeln!(out, "sent: {}", shown(&body, usize::MAX))?;
    anyhow::ensure!(status.is_success(), "webhookd answered {status}");
    Ok(())
}

/// `--amount` as a whole number of the currency's minor unit (default 2000).
fn minor_amount(args: &SendArgs) -> anyhow::Result<i64> {
    let amount = args.amount.as_deref().unwrap_or("2000");
    amount.parse().map_err(|_| {
        anyhow::anyhow!(
            "--amount is in the currency's minor unit for {}: a whole number (2000 for 20.00)",
            args.provider
        )
    })
}

/// An amount as typed: digits, with an optional fraction (`2000`, `30.00`).
fn parse_amount(text: &str) -> Result<String, String> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, "0"));
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    if text.len() <= 32 && digits(whole) && digits(fraction) {
        Ok(text.to_owned())
    } else {
        Err("a decimal number such as 2000 or 30.00".to_owned())
    }
}

/// Three ASCII letters (`usd`, `INR`).
fn parse_currency(text: &str) -> Result<String, String> {
    if text.len() == 3 && text.bytes().all(|b| b.is_ascii_alphabetic()) {
        Ok(text.to_owned())
    } else {
        Err("an ISO 4217 code such as USD".to_owned())
    }
}

fn first_secret<'a>(secrets: &'a Secrets, variable: &str) -> anyhow::Result<&'a str> {
    secrets
        .iter()
        .next()
        .map(|s| s.expose_secret())
        .ok_or_else(|| anyhow::anyhow!("set {variable} (the secret webhookd verifies with)"))
}

/// A Razorpay event of `args.event_type` for `amount`, shaped like
/// Razorpay's own.
pub fn razorpay_event(args: &SendArgs, amount: i64, t: i64, unique: u128) -> Value {
    let payment_id = args
        .payment
        .clone()
        .unwrap_or_else(|| format!("pay_send_{unique}"));
    let currency = args
        .currency
        .as_deref()
        .unwrap_or("INR")
        .to_ascii_uppercase();
    let payment = |status: &str, refunded: i64| {
        json!({ "entity": {
            "id": payment_id, "entity": "payment", "amount": amount, "currency": currency,
            "status": status, "order_id": format!("order_send_{unique}"), "method": "upi",
            "amount_refunded": refunded, "captured": status == "captured",
            "notes": { "user_id": args.user }, "created_at": t,
        }})
    };
    let (contains, payload) = match args.event_type.as_str() {
        "payment.captured" | "order.paid" => (
            json!(["payment"]),
            json!({ "payment": payment("captured", 0) }),
        ),
        "payment.failed" => (
            json!(["payment"]),
            json!({ "payment": payment("failed", 0) }),
        ),
        "refund.processed" => (
            json!(["refund", "payment"]),
            json!({
                "refund": { "entity": {
                    "id": format!("rfnd_send_{unique}"), "entity": "refund", "amount": amount,
                    "currency": currency, "payment_id": payment_id, "status": "processed", "notes": [],
                }},
                "payment": payment("captured", amount),
            }),
        ),
        kind if kind.starts_with("subscription.") => (
            json!(["subscription"]),
            json!({ "subscription": { "entity": {
                "id": args.payment.clone().unwrap_or_else(|| "sub_send".to_owned()),
                "entity": "subscription", "plan_id": "plan_send", "customer_id": "cust_send",
                "status": razorpay_subscription_status(kind), "current_end": t + 2_592_000,
                "notes": { "user_id": args.user },
            }}}),
        ),
        _ => (json!([]), json!({})),
    };
    json!({
        "entity": "event", "account_id": "acc_send", "event": args.event_type,
        "contains": contains, "payload": payload, "created_at": t,
    })
}

/// The entity status that goes with a `subscription.*` event.
fn razorpay_subscription_status(event: &str) -> &str {
    match event.trim_start_matches("subscription.") {
        "activated" | "charged" | "resumed" | "updated" => "active",
        other => other,
    }
}
