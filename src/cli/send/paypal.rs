//! `webhookd send paypal`: a PayPal-shaped event, signed the way PayPal
//! signs a delivery: RSA PKCS#1 v1.5 with SHA-256 over
//! [`providers::paypal::signed_message`], with the private key whose
//! certificate `PAYPAL-CERT-URL` names. PayPal's own key is PayPal's: for
//! tests and local development, a key pair of one's own, whose certificate
//! webhookd finds in `WEBHOOKD_PAYPAL_CERT_DIR` as `<CERT-id>.pem` (the
//! README says how to make one).

use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use base64::Engine;
use clap::Args;
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};

use super::{SendArgs, id};
use crate::providers::paypal::signed_message;

/// The certificate a sample names unless told otherwise.
pub const DEFAULT_CERT_URL: &str =
    "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-webhookd-test";

pub use crate::providers::paypal::header::{
    AUTH_ALGO, CERT_URL, TRANSMISSION_ID, TRANSMISSION_SIG, TRANSMISSION_TIME,
};

/// Links in samples point at the sandbox, like the default certificate.
const API: &str = "https://api.sandbox.paypal.com";

/// How `send paypal` signs.
#[derive(Debug, Clone, Args)]
pub struct PaypalSendArgs {
    /// The PEM RSA private key (PKCS#8 `PRIVATE KEY`, or `RSA PRIVATE
    /// KEY`) of the certificate `--paypal-cert-url` names.
    #[arg(long)]
    pub paypal_key: Option<std::path::PathBuf>,
    /// The certificate URL the delivery names; its last path segment is
    /// the certificate's id.
    #[arg(long, default_value = DEFAULT_CERT_URL)]
    pub paypal_cert_url: String,
    /// The webhook's id, which PayPal signs (the first of a comma-separated
    /// list).
    #[arg(long, env = "PAYPAL_WEBHOOK_ID")]
    pub paypal_webhook_id: Option<String>,
}

/// The body and headers of a signed delivery of `args.event_type`, sent at
/// `now`.
pub fn delivery(
    args: &SendArgs,
    now: SystemTime,
    unique: u128,
) -> anyhow::Result<(String, Vec<(&'static str, String)>)> {
    let paypal = &args.paypal;
    let webhook_id = paypal
        .paypal_webhook_id
        .iter()
        .flat_map(|ids| ids.split(','))
        .map(str::trim)
        .find(|id| !id.is_empty())
        .context("set PAYPAL_WEBHOOK_ID (or --paypal-webhook-id): the webhook webhookd verifies")?;
    let key = paypal
        .paypal_key
        .as_deref()
        .context("--paypal-key FILE: the private key of the certificate --paypal-cert-url names")?;
    let body = event(args, now, unique).to_string();
    let transmission_id = transmission_id()?;
    let time = humantime::format_rfc3339_seconds(now).to_string();
    let message = signed_message(&transmission_id, &time, webhook_id, body.as_bytes());
    let signature = sign(key, &message)?;
    let headers = vec![
        (TRANSMISSION_ID, transmission_id),
        (TRANSMISSION_TIME, time),
        (TRANSMISSION_SIG, signature),
        (CERT_URL, paypal.paypal_cert_url.clone()),
        (AUTH_ALGO, crate::providers::paypal::SIGNING_ALGO.to_owned()),
    ];
    Ok((body, headers))
}

/// `PAYPAL-TRANSMISSION-SIG` for `message`: the base64 of its RSA PKCS#1
/// v1.5 SHA-256 signature under the key in the PEM file at `key`.
pub fn sign(key: &Path, message: &str) -> anyhow::Result<String> {
    let key = signing_key(key)?;
    let mut signature = vec![0; key.public().modulus_len()];
    key.sign(
        &RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        message.as_bytes(),
        &mut signature,
    )
    .map_err(|_| anyhow::anyhow!("the PayPal key cannot sign"))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(signature))
}

/// The RSA key in the PEM file at `path`.
fn signing_key(path: &Path) -> anyhow::Result<RsaKeyPair> {
    let shown = || id(&path.display().to_string()).into_owned();
    let pem = std::fs::read(path).with_context(|| format!("cannot read {}", shown()))?;
    let der = PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|_| anyhow::anyhow!("{} holds no PEM private key", shown()))?;
    let key = match &der {
        PrivateKeyDer::Pkcs8(key) => RsaKeyPair::from_pkcs8(key.secret_pkcs8_der()),
        PrivateKeyDer::Pkcs1(key) => RsaKeyPair::from_der(key.secret_pkcs1_der()),
        _ => anyhow::bail!("{} holds no RSA private key", shown()),
    };
    key.map_err(|e| anyhow::anyhow!("{}: not a usable RSA private key ({e})", shown()))
}

/// A fresh random id shaped like PayPal's (a UUID, version 4).
fn transmission_id() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| anyhow::anyhow!("no randomness for a transmission id"))?;
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = hex::encode(bytes);
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    ))
}

/// A PayPal event of `args.event_type` created at `now`, shaped like
/// PayPal's own: `custom_id` is `--user`, the amount `--amount` (default
/// 20.00) in `--currency` (default USD).
pub fn event(args: &SendArgs, now: SystemTime, unique: u128) -> Value {
    let tag = format!("{:017X}", unique % (1 << 68));
    let time = humantime::format_rfc3339_millis(now).to_string();
    let currency = args
        .currency
        .as_deref()
        .unwrap_or("USD")
        .to_ascii_uppercase();
    let value = args.amount.as_deref().unwrap_or("20.00");
    let sample = Sample {
        args,
        tag: &tag,
        time: &time,
        amount: json!({ "currency_code": currency, "value": value }),
    };
    let kind = args.event_type.as_str();
    let (resource_type, summary, resource) = match kind {
        "PAYMENT.CAPTURE.REFUNDED" => (
            "refund",
            format!("A {value} {currency} capture payment was refunded"),
            sample.refund(),
        ),
        _ if kind.starts_with("PAYMENT.CAPTURE.") => (
            "capture",
            format!(
                "Payment {} for {value} {currency}",
                sample.capture_status().to_lowercase()
            ),
            sample.capture(),
        ),
        _ if kind.starts_with("BILLING.SUBSCRIPTION.") => (
            "subscription",
            format!(
                "Subscription {}",
                kind.rsplit('.').next().unwrap_or_default().to_lowercase()
            ),
            sample.subscription(now),
        ),
        _ => (
            "checkout-order",
            format!("An event of type {kind}"),
            json!({ "id": tag, "custom_id": args.user, "create_time": time }),
        ),
    };
    let href = format!("{API}/v1/notifications/webhooks-events/WH-{tag}");
    json!({
        "id": format!("WH-{tag}"), "event_version": "1.0", "create_time": time,
        "resource_type": resource_type, "resource_version": "2.0", "event_type": kind,
        "summary": summary, "resource": resource,
        "links": [
            { "href": href, "rel": "self", "method": "GET" },
            { "href": format!("{href}/resend"), "rel": "resend", "method": "POST" },
        ],
    })
}

/// What the resources of one sample share.
struct Sample<'a> {
    args: &'a SendArgs,
    tag: &'a str,
    time: &'a str,
    amount: Value,
}

impl Sample<'_> {
    /// The capture: `--payment` (`--capture`), else a fresh id.
    fn capture_id(&self) -> String {
        let fresh = || format!("CAP{}", &self.tag[3..]);
        self.args.payment.clone().unwrap_or_else(fresh)
    }

    fn capture_status(&self) -> &'static str {
        match self.args.event_type.as_str() {
            "PAYMENT.CAPTURE.DENIED" => "DECLINED",
            "PAYMENT.CAPTURE.PENDING" => "PENDING",
            "PAYMENT.CAPTURE.REVERSED" => "REVERSED",
            _ => "COMPLETED",
        }
    }

    /// Money with no fee: gross, fee and net of `self.amount`.
    fn breakdown(&self) -> Value {
        let zero = json!({ "currency_code": self.amount["currency_code"], "value": "0.00" });
        json!({ "gross_amount": self.amount, "paypal_fee": zero, "net_amount": self.amount })
    }

    fn capture(&self) -> Value {
        let (id, order) = (self.capture_id(), format!("ORD{}", &self.tag[3..]));
        let href = format!("{API}/v2/payments/captures/{id}");
        json!({
            "id": id, "status": self.capture_status(), "amount": self.amount, "final_capture": true,
            "seller_protection": { "status": "ELIGIBLE",
                "dispute_categories": ["ITEM_NOT_RECEIVED", "UNAUTHORIZED_TRANSACTION"] },
            "seller_receivable_breakdown": self.breakdown(), "custom_id": self.args.user,
            "supplementary_data": { "related_ids": { "order_id": order } },
            "create_time": self.time, "update_time": self.time,
            "links": [
                { "href": href, "rel": "self", "method": "GET" },
                { "href": format!("{href}/refund"), "rel": "refund", "method": "POST" },
                { "href": format!("{API}/v2/checkout/orders/{order}"), "rel": "up", "method": "GET" },
            ],
        })
    }

    /// A refund of the capture `--capture` (else a fresh id), named by its
    /// `up` link as PayPal does.
    fn refund(&self) -> Value {
        let id = format!("REF{}", &self.tag[3..]);
        let mut breakdown = self.breakdown();
        breakdown["total_refunded_amount"] = self.amount.clone();
        json!({
            "id": id, "status": "COMPLETED", "amount": self.amount, "custom_id": self.args.user,
            "seller_payable_breakdown": breakdown,
            "create_time": self.time, "update_time": self.time,
            "links": [
                { "href": format!("{API}/v2/payments/refunds/{id}"), "rel": "self", "method": "GET" },
                { "href": format!("{API}/v2/payments/captures/{}", self.capture_id()), "rel": "up", "method": "GET" },
            ],
        })
    }

    /// A subscription (`--payment`, else `I-…`) in the status its event says.
    fn subscription(&self, now: SystemTime) -> Value {
        let fresh = || format!("I-{}", &self.tag[5..]);
        let id = self.args.payment.clone().unwrap_or_else(fresh);
        let status = match self
            .args
            .event_type
            .trim_start_matches("BILLING.SUBSCRIPTION.")
        {
            "CREATED" => "APPROVAL_PENDING",
            "CANCELLED" => "CANCELLED",
            "SUSPENDED" => "SUSPENDED",
            "EXPIRED" => "EXPIRED",
            _ => "ACTIVE",
        };
        let next_billing = now + Duration::from_secs(30 * 86_400);
        json!({
            "id": id, "plan_id": "P-5ML4271244454362WXNWU5NQ", "status": status,
            "status_update_time": self.time, "start_time": self.time, "quantity": "1",
            "custom_id": self.args.user,
            "subscriber": { "email_address": "buyer@example.com", "payer_id": "SENDPAYER01",
                "name": { "given_name": "Sample", "surname": "Buyer" } },
            "billing_info": {
                "outstanding_balance": { "currency_code": self.amount["currency_code"], "value": "0.00" },
                "last_payment": { "amount": self.amount, "time": self.time },
                "next_billing_time": humantime::format_rfc3339_seconds(next_billing).to_string(),
                "failed_payments_count": 0,
            },
            "create_time": self.time, "update_time": self.time,
            "links": [{ "href": format!("{API}/v1/billing/subscriptions/{id}"), "rel": "self", "method": "GET" }],
        })
    }
}

#[cfg(test)]
mod tests;
