//! Property: a verified delivery of any handled event type with arbitrary
//! JSON in any of its fields (NULs, control characters, 3 KB strings,
//! numbers `jsonb` cannot hold, extreme integers, wrong types) is never
//! answered 5xx and never panics; its retry is a `duplicate`; and the
//! ledger stays consistent.
//!
//! Every field of every template is replaced once alone, then random groups
//! of fields; the values come from a fixed seed (`PROPERTY_CASES` sets how
//! many random groups, `PROPERTY_SEED` picks another sequence); a failure
//! prints the body. PayPal's bodies are handed to `ingest` as its verified
//! deliveries are (no PayPal verifier is mounted here): never 5xx means
//! that ingest never fails, and a 400 that the envelope is refused.

use hmac::{Hmac, Mac};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Value, json};
use sha2::Sha256;
use sqlx::PgPool;
use webhookd::ingest;
use webhookd::providers::Event;

use crate::effects::paypal::bodies::{self as paypal, completed, refunded, subscription_event};
use crate::helpers::{
    GITHUB_SECRETS, RAZORPAY_SECRETS, TestApp, charge, invoice_paid, now, payment_intent_succeeded,
    spawn_app, subscription,
};

/// Stands for a number serde_json reads but Postgres `numeric` cannot hold;
/// written into the body after serialisation.
const HUGE: &str = "__huge_number__";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Debug, Clone, Copy)]
enum Provider {
    Stripe,
    Razorpay,
    Github,
    /// Applied as its verified delivery is handed on ([`paypal::bodies`]).
    Paypal,
}

impl Provider {
    /// Its event id is the body's `id`.
    fn ids_in_body(self) -> bool {
        matches!(self, Provider::Stripe | Provider::Paypal)
    }
}

/// What a delivery got: a refusal (400) with its error, an answer (200)
/// with its body, or a failure (5xx) with its status or error.
enum Answer {
    Refused(String),
    Answered(Value),
    Failed(String),
}

impl Answer {
    async fn of(response: reqwest::Response) -> Self {
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        match status.as_u16() {
            200..=299 => Answer::Answered(body),
            400 => Answer::Refused(body["error"].as_str().unwrap_or_default().to_owned()),
            _ => Answer::Failed(format!("{status} {body}")),
        }
    }
}

/// One handled event of each type, about shared objects, so that mutated
/// refunds meet real credits.
fn templates() -> Vec<(Provider, Value)> {
    let stripe = |body: String| (Provider::Stripe, serde_json::from_str(&body).unwrap());
    let razorpay = |event: &str, payload: Value| {
        let contains: Vec<String> = payload.as_object().unwrap().keys().cloned().collect();
        (
            Provider::Razorpay,
            json!({ "entity": "event", "account_id": "acc_1", "event": event,
                    "contains": contains, "payload": payload, "created_at": now() }),
        )
    };
    let payment = |status: &str, refunded: i64| {
        json!({ "entity": {
            "id": "pay_p", "entity": "payment", "amount": 5000, "currency": "INR",
            "status": status, "order_id": "order_p", "amount_refunded": refunded,
            "notes": { "user_id": "user_p" }, "created_at": now(),
        }})
    };
    let refund = json!({ "entity": {
        "id": "rfnd_p", "entity": "refund", "amount": 1000, "currency": "INR",
        "payment_id": "pay_p", "status": "processed",
    }});
    let subscription_entity = json!({ "entity": {
        "id": "sub_p", "entity": "subscription", "plan_id": "plan_p", "customer_id": "cust_p",
        "status": "active", "current_end": now() + 86_400, "notes": { "user_id": "user_p" },
    }});
    vec![
        stripe(payment_intent_succeeded("e", "pi_p", "user_p", 5000)),
        stripe(charge("e", "charge.succeeded", "ch_p", "pi_p", 5000, 0)),
        stripe(charge("e", "charge.refunded", "ch_p", "pi_p", 5000, 1200)),
        stripe(invoice_paid("e", "in_p")),
        stripe(subscription(
            "e",
            "customer.subscription.updated",
            "sub_p",
            "active",
            now(),
        )),
        razorpay(
            "payment.captured",
            json!({ "payment": payment("captured", 0) }),
        ),
        razorpay("payment.failed", json!({ "payment": payment("failed", 0) })),
        razorpay(
            "refund.processed",
            json!({ "refund": refund, "payment": payment("captured", 1000) }),
        ),
        razorpay(
            "subscription.activated",
            json!({ "subscription": subscription_entity }),
        ),
        (
            Provider::Github,
            json!({ "ref": "refs/heads/main", "commits": [{ "id": "c1" }] }),
        ),
        (Provider::Paypal, completed("e", "CAP-P", "50.00", "user_p")),
        (Provider::Paypal, pending_capture()),
        (Provider::Paypal, refunded("e", "REF-P", "CAP-P", "12.00")),
        (
            Provider::Paypal,
            subscription_event("e", "ACTIVATED", "I-P", "ACTIVE", now()),
        ),
    ]
}

/// A pending PayPal capture of `CAP-P`.
fn pending_capture() -> Value {
    let resource = paypal::capture("CAP-P", "PENDING", "50.00", "USD", Some("user_p"));
    let created = paypal::rfc3339(now());
    paypal::envelope("e", "PAYMENT.CAPTURE.PENDING", &created, resource)
}

/// The JSON pointer of every value in `value` (objects and arrays too).
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(fields) => {
            for (key, field) in fields {
                pointers(field, format!("{at}/{key}"), out);
            }
        }
        Value::Array(items) => {
            for (n, item) in items.iter().enumerate() {
                pointers(item, format!("{at}/{n}"), out);
            }
        }
        _ => {}
    }
    if !at.is_empty() {
        out.push(at);
    }
}

fn hostile_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,12}",
        Just(String::new()),
        Just("a\u{0}b".to_owned()),
        Just("\u{7}\u{1b}[31m".to_owned()),
        Just("ünïcødé ✓".to_owned()),
        Just("\u{FFFD}".to_owned()),
        Just("x".repeat(3000)),
        Just("usd".to_owned()),
        Just("zzz".to_owned()),
        Just("pi_p".to_owned()),
        Just("pay_p".to_owned()),
        Just("ch_p:5".to_owned()),
        Just(HUGE.to_owned()),
    ]
}

fn hostile_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        prop_oneof![
            Just(i64::MAX),
            Just(i64::MIN),
            Just(-1i64),
            Just(0i64),
            Just(1i64),
            any::<i64>()
        ]
        .prop_map(Value::from),
        Just(json!(u64::MAX)),
        Just(json!(1.5e300)),
        Just(json!(-0.25)),
        hostile_string().prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
            proptest::collection::btree_map("[a-z_]{1,8}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A case: which template, and (pointer index, replacement) pairs.
fn case() -> impl Strategy<Value = (usize, Vec<(usize, Value)>)> {
    (
        0..templates().len(),
        proptest::collection::vec((any::<usize>(), hostile_value()), 1..4),
    )
}

fn mutate(template: &Value, replacements: &[(usize, Value)]) -> String {
    let mut body = template.clone();
    let mut at = Vec::new();
    pointers(template, String::new(), &mut at);
    for (index, value) in replacements {
        if let Some(slot) = body.pointer_mut(&at[index % at.len()]) {
            *slot = value.clone();
        }
    }
    body.to_string().replace(&format!("\"{HUGE}\""), "1e-20000")
}

impl TestApp {
    async fn deliver_signed(&self, provider: Provider, id: &str, body: &str) -> Answer {
        let response = match provider {
            Provider::Stripe => self.post_stripe(body).await,
            Provider::Razorpay => {
                let signature =
                    webhookd::providers::razorpay::signature(RAZORPAY_SECRETS.0, body.as_bytes());
                let headers = [
                    ("x-razorpay-signature".to_owned(), signature),
                    ("x-razorpay-event-id".to_owned(), id.to_owned()),
                ];
                self.post_to("razorpay", body.as_bytes().to_vec(), &headers)
                    .await
            }
            Provider::Github => {
                let mut mac = Hmac::<Sha256>::new_from_slice(GITHUB_SECRETS.0.as_bytes()).unwrap();
                mac.update(body.as_bytes());
                let headers = [
                    (
                        "x-hub-signature-256".to_owned(),
                        format!("sha256={}", hex::encode(mac.finalize().into_bytes())),
                    ),
                    ("x-github-delivery".to_owned(), id.to_owned()),
                    ("x-github-event".to_owned(), "push".to_owned()),
                ];
                self.post_to("gh", body.as_bytes().to_vec(), &headers).await
            }
            Provider::Paypal => return self.apply_paypal(id, body).await,
        };
        Answer::of(response).await
    }

    /// A PayPal body handed on as its verified delivery would be: refused
    /// when it is no event, else applied.
    async fn apply_paypal(&self, id: &str, body: &str) -> Answer {
        let bytes = bytes::Bytes::from(body.to_owned());
        match Event::from_stored("paypal", id, "", bytes) {
            Err(refusal) => Answer::Refused(refusal.to_string()),
            Ok(event) => match ingest::ingest(&self.pool, &event).await {
                Ok(receipt) => Answer::Answered(json!({ "outcome": receipt.outcome.as_str() })),
                Err(error) => Answer::Failed(error.to_string()),
            },
        }
    }
}

/// Delivers one case and its retry: never 5xx; answered (and then its retry
/// a `duplicate`), or refused 400 for want of a usable event id or type.
/// Returns whether it was answered.
async fn check(
    app: &TestApp,
    provider: Provider,
    template: &Value,
    n: usize,
    replacements: &[(usize, Value)],
) -> bool {
    let mut template = template.clone();
    // A fresh event id per case (unless a replacement takes it away).
    let id = format!("evt_arb_{n}");
    if provider.ids_in_body() {
        template["id"] = json!(id);
    }
    let body = mutate(&template, replacements);
    match app.deliver_signed(provider, &id, &body).await {
        Answer::Failed(failure) => panic!("{failure} for {body}"),
        Answer::Refused(error) => {
            assert!(
                error.starts_with("body is not a JSON event"),
                "{error} for {body}"
            );
            false
        }
        Answer::Answered(_) => match app.deliver_signed(provider, &id, &body).await {
            Answer::Answered(again) => {
                assert_eq!(again["outcome"], "duplicate", "the retry of {body}");
                true
            }
            Answer::Refused(failure) | Answer::Failed(failure) => {
                panic!("{failure} for the retry of {body}")
            }
        },
    }
}

#[sqlx::test]
async fn arbitrary_values_in_any_field_of_any_handled_event_never_answer_5xx(pool: PgPool) {
    let app = spawn_app(pool).await;
    let templates = templates();
    let seed = env_or("PROPERTY_SEED", 11);
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &key),
    );
    let (mut answered, mut refused) = (0, 0);
    let mut n = 0;
    // Each template as it is applies: a rejection below is the mutation's doing.
    for (provider, template) in &templates {
        n += 1;
        let mut template = template.clone();
        let id = format!("evt_arb_{n}");
        if provider.ids_in_body() {
            template["id"] = json!(id);
        }
        match app
            .deliver_signed(*provider, &id, &template.to_string())
            .await
        {
            Answer::Answered(answer) => assert_ne!(answer["outcome"], "rejected", "{template}"),
            Answer::Refused(failure) | Answer::Failed(failure) => panic!("{failure}: {template}"),
        }
    }
    // Every field of every template once, alone, then fields in random groups.
    for (provider, template) in &templates {
        let mut at = Vec::new();
        pointers(template, String::new(), &mut at);
        for field in 0..at.len() {
            let value = hostile_value().new_tree(&mut runner).unwrap().current();
            n += 1;
            match check(&app, *provider, template, n, &[(field, value)]).await {
                true => answered += 1,
                false => refused += 1,
            }
        }
    }
    for _ in 0..env_or("PROPERTY_CASES", 160) {
        let (template, replacements) = case().new_tree(&mut runner).unwrap().current();
        let (provider, template) = &templates[template];
        n += 1;
        match check(&app, *provider, template, n, &replacements).await {
            true => answered += 1,
            false => refused += 1,
        }
    }
    assert!(answered > refused, "{answered} answered, {refused} refused");
    app.assert_consistent().await;
}
