//! PayPal's resources as its events carry them, validated: a capture, a
//! refund, a subscription. Amounts are decimal strings (`amount.value`, in
//! `amount.currency_code`), read into the currency's minor unit exactly
//! ([`minor_units`]).

use serde_json::{Value, json};

use super::PROVIDER;
use crate::effects::effect::{OwnRefund, PaymentRecord, PlainCredit, Reason};
use crate::effects::fields::{currency_at, loose_ident_at, owner_at, required_ident, str_at};
use crate::money::minor_units;
use crate::providers::{self, paypal::parse_time};
use crate::subscriptions::Subscription;

/// Where a refund's `up` link names its capture.
const CAPTURES: &str = "/v2/payments/captures/";
/// Where a capture's `up` link names its order.
const ORDERS: &str = "/v2/checkout/orders/";

/// The resource's `amount` in minor units, and its currency; `what` names the
/// resource in the reason.
fn amount(resource: &Value, what: &str) -> Result<(i64, &'static str), Reason> {
    let currency = currency_at(resource, "/amount/currency_code", what)?;
    let value = resource
        .pointer("/amount/value")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{what} has no amount.value string"))?;
    let minor =
        minor_units(value, currency).map_err(|reason| format!("{what} amount.value: {reason}"))?;
    Ok((minor, currency))
}

/// The id that the resource's one `rel: "up"` link names below `segment`:
/// its `href` must be exactly `https://{host}{segment}{id}`, the id made of
/// letters, digits, `-` and `_`. `None` without such a link, or with more
/// than one `up` link.
fn up_id<'a>(resource: &'a Value, segment: &str) -> Option<&'a str> {
    let links = resource.get("links")?.as_array()?;
    let mut up = links
        .iter()
        .filter(|link| link.get("rel").and_then(Value::as_str) == Some("up"));
    let href = up.next()?.get("href")?.as_str()?;
    if up.next().is_some() {
        return None;
    }
    let (origin, id) = href.split_once(segment)?;
    let host = origin.strip_prefix("https://")?;
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:".contains(&b));
    let id_ok = providers::is_identifier(id)
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
    (host_ok && id_ok).then_some(id)
}

/// A capture resource (`PAYMENT.CAPTURE.*`), validated: its row. Its
/// status is lower-cased (`completed`, `pending`, `declined`):
/// `resource.status`, else the event type's last word; its user is
/// `custom_id` when that is an identifier.
pub(super) fn capture(resource: &Value, event_type: &str) -> Result<PaymentRecord, Reason> {
    let id = required_ident(resource, "/id", "capture id", "capture has no id")?;
    let (amount_minor, currency) = amount(resource, "capture")?;
    let status = loose_ident_at(resource, "/status")
        .or_else(|| event_type.rsplit('.').next())
        .unwrap_or_default()
        .to_ascii_lowercase();
    Ok(PaymentRecord {
        payment_id: id.to_owned(),
        payment_ref: loose_ident_at(resource, "/supplementary_data/related_ids/order_id")
            .or_else(|| up_id(resource, ORDERS))
            .map(str::to_owned),
        user_id: loose_ident_at(resource, "/custom_id").map(str::to_owned),
        amount_minor,
        currency,
        status,
        refunded_minor: 0,
        created: str_at(resource, "/create_time").and_then(parse_time),
    })
}

/// The credit of a completed capture (`capture` of `resource`): its amount
/// to `custom_id`, which must be there and be an identifier.
pub(super) fn capture_credit(
    resource: &Value,
    capture: &PaymentRecord,
) -> Result<PlainCredit, Reason> {
    let user_id = owner_at(resource, "/custom_id")?.ok_or("capture has no custom_id")?;
    if capture.amount_minor <= 0 {
        return Err("capture has no positive amount".into());
    }
    Ok(PlainCredit {
        user_id: user_id.to_owned(),
        currency: capture.currency.to_owned(),
        amount_minor: capture.amount_minor,
        source_ref: capture.payment_id.clone(),
        context: json!({ "capture_id": capture.payment_id, "order_id": capture.payment_ref }),
        customer: None,
    })
}

/// A refund resource (`PAYMENT.CAPTURE.REFUNDED`, `.REVERSED`), validated:
/// what it debits (its own amount, keyed by its id), or `None` when its
/// status says it did not go through (`FAILED`, `CANCELLED`).
pub(super) fn refund(resource: &Value) -> Result<Option<OwnRefund>, Reason> {
    let id = required_ident(resource, "/id", "refund id", "refund has no id")?;
    let (amount_minor, currency) = amount(resource, "refund")?;
    if amount_minor <= 0 {
        return Err("refund has no positive amount".into());
    }
    let capture_id = up_id(resource, CAPTURES)
        .ok_or("refund has no up link to its capture (https://…/v2/payments/captures/{id})")?;
    let undone = str_at(resource, "/status").is_some_and(|status| {
        ["FAILED", "CANCELLED"]
            .iter()
            .any(|undone| status.eq_ignore_ascii_case(undone))
    });
    Ok((!undone).then(|| OwnRefund {
        id: id.to_owned(),
        payment_id: capture_id.to_owned(),
        amount_minor,
        currency,
        context: json!({ "capture_id": capture_id, "refund_id": id }),
    }))
}

/// A subscription resource (`BILLING.SUBSCRIPTION.*`), its status as
/// PayPal spells it (`ACTIVE`, `CANCELLED`).
pub(super) fn subscription(resource: &Value) -> Result<Subscription, Reason> {
    let missing = "subscription has no id or status";
    let status = required_ident(resource, "/status", "subscription status", missing)?;
    Ok(Subscription {
        provider: PROVIDER.to_owned(),
        subscription_id: required_ident(resource, "/id", "subscription id", missing)?.to_owned(),
        customer_id: loose_ident_at(resource, "/subscriber/payer_id").map(str::to_owned),
        user_id: loose_ident_at(resource, "/custom_id").map(str::to_owned),
        status: status.to_owned(),
        plan_id: loose_ident_at(resource, "/plan_id").map(str::to_owned),
        current_period_end: str_at(resource, "/billing_info/next_billing_time")
            .and_then(parse_time),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refund_up(href: Value) -> Value {
        json!({
            "id": "R1", "status": "COMPLETED",
            "amount": { "currency_code": "USD", "value": "1.00" },
            "links": [
                { "rel": "self", "href": "https://api.paypal.com/v2/payments/refunds/R1" },
                { "rel": "up", "href": href },
            ],
        })
    }

    #[test]
    fn a_refund_names_its_capture_by_its_up_link_read_strictly() {
        for (href, capture) in [
            (
                "https://api.paypal.com/v2/payments/captures/2GG279541U471931P",
                "2GG279541U471931P",
            ),
            (
                "https://api-m.sandbox.paypal.com/v2/payments/captures/C-1_x",
                "C-1_x",
            ),
        ] {
            let resource = refund_up(json!(href));
            assert_eq!(refund(&resource).unwrap().unwrap().payment_id, capture);
        }
        for href in [
            json!("https://api.paypal.com/v2/payments/captures/"),
            json!("https://api.paypal.com/v2/payments/captures/C1/refund"),
            json!("https://api.paypal.com/v2/payments/captures/C1?x=1"),
            json!("https://api.paypal.com/v2/payments/captures/C 1"),
            json!("https://api.paypal.com/v1/payments/captures/C1"),
            json!("https://api.paypal.com/v2/payments/authorizations/C1"),
            json!("https://api.paypal.com/x/v2/payments/captures/C1"),
            json!("http://api.paypal.com/v2/payments/captures/C1"),
            json!("https:///v2/payments/captures/C1"),
            json!("/v2/payments/captures/C1"),
            json!(format!(
                "https://api.paypal.com/v2/payments/captures/{}",
                "C".repeat(256)
            )),
            json!(7),
            Value::Null,
        ] {
            let resource = refund_up(href.clone());
            assert!(refund(&resource).is_err(), "{href}");
        }
        // Two `up` links are ambiguous; none is missing.
        let mut two = refund_up(json!("https://api.paypal.com/v2/payments/captures/C1"));
        two["links"][0]["rel"] = json!("up");
        assert!(refund(&two).is_err());
        let mut none = refund_up(json!("https://api.paypal.com/v2/payments/captures/C1"));
        none["links"] = json!([]);
        assert!(refund(&none).is_err());
    }

    #[test]
    fn amounts_are_decimal_strings_in_their_currency_s_minor_unit() {
        let resource = |value: Value, code: &str| json!({ "id": "C1", "amount": { "currency_code": code, "value": value }, "custom_id": "u1" });
        let parsed = |resource: &Value| {
            capture(resource, "PAYMENT.CAPTURE.COMPLETED").map(|c| c.amount_minor)
        };
        assert_eq!(parsed(&resource(json!("30.5"), "USD")), Ok(3050));
        assert_eq!(parsed(&resource(json!("1000"), "JPY")), Ok(1000));
        assert_eq!(parsed(&resource(json!("1.234"), "BHD")), Ok(1234));
        assert_eq!(
            parsed(&resource(json!("30.001"), "USD")).unwrap_err(),
            "capture amount.value: more decimals than USD has (2)"
        );
        assert_eq!(
            parsed(&resource(json!(30), "USD")).unwrap_err(),
            "capture has no amount.value string"
        );
        assert_eq!(
            parsed(&resource(json!("30"), "ZZZ")).unwrap_err(),
            "capture has no ISO 4217 currency with a minor unit"
        );
    }

    #[test]
    fn a_capture_credits_its_custom_id_and_its_status_is_lower_cased() {
        let resource = json!({
            "id": "C1", "status": "COMPLETED", "custom_id": "u1",
            "amount": { "currency_code": "USD", "value": "30.00" },
            "links": [{ "rel": "up", "href": "https://api.paypal.com/v2/checkout/orders/O1" }],
        });
        let completed = capture(&resource, "PAYMENT.CAPTURE.COMPLETED").unwrap();
        assert_eq!(
            (completed.status.as_str(), completed.payment_ref.as_deref()),
            ("completed", Some("O1"))
        );
        let credit = capture_credit(&resource, &completed).unwrap();
        assert_eq!((credit.user_id.as_str(), credit.amount_minor), ("u1", 3000));

        let mut pending = resource.clone();
        pending.as_object_mut().unwrap().remove("status");
        pending.as_object_mut().unwrap().remove("custom_id");
        let held = capture(&pending, "PAYMENT.CAPTURE.PENDING").unwrap();
        assert_eq!(held.status, "pending");
        assert_eq!(
            capture_credit(&pending, &held).err().unwrap(),
            "capture has no custom_id"
        );
        pending["custom_id"] = json!("u 1");
        let completed = capture(&pending, "PAYMENT.CAPTURE.COMPLETED").unwrap();
        assert!(
            capture_credit(&pending, &completed)
                .err()
                .unwrap()
                .starts_with("custom_id is not an identifier")
        );
    }

    #[test]
    fn a_subscription_s_status_is_kept_as_spelled_and_its_period_end_read() {
        let resource = json!({
            "id": "I-1", "plan_id": "P-1", "status": "CANCELLED", "custom_id": "u1",
            "subscriber": { "payer_id": "PAYER1" },
            "billing_info": { "next_billing_time": "2026-12-01T10:00:00Z" },
        });
        let subscription = subscription(&resource).unwrap();
        assert_eq!(subscription.status, "CANCELLED");
        assert!(crate::subscriptions::is_terminal(&subscription.status));
        assert_eq!(subscription.customer_id.as_deref(), Some("PAYER1"));
        assert_eq!(subscription.current_period_end, Some(1_796_119_200));
    }
}
