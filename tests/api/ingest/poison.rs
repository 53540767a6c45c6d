//! Verified deliveries that would fail the same way on every retry (poison
//! messages) and money that does not add up: each is answered 200 with an
//! outcome the provider will not retry, its retry is a `duplicate`, and
//! nothing but the event's own row is written. Called through the app's
//! router, without a socket.

use hmac::{Hmac, Mac};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::Sha256;
use sqlx::PgPool;

use crate::helpers::{
    GITHUB_SECRETS, RAZORPAY_SECRETS, TestApp, charge, event_of_type, now,
    payment_intent_succeeded, route_app,
};

/// A number serde_json reads (as 0) that Postgres `numeric` cannot hold,
/// and a 17,000-digit fraction: both in one field list.
fn junk_numbers() -> String {
    format!(r#""junk":1e-20000,"fraction":0.{}1,"#, "0".repeat(17_000))
}

/// `body` (a JSON object) with the junk numbers as its first fields.
fn with_junk(body: &str) -> String {
    format!("{{{}{}", junk_numbers(), &body[1..])
}

/// ~3 KB of random-looking id characters.
fn long_id(prefix: &str) -> String {
    let mut id = prefix.to_owned();
    let mut x: u32 = 0x9e37_79b9;
    while id.len() < 3000 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        id.push(char::from(b'A' + (x % 26) as u8));
    }
    id
}

fn razorpay_envelope(event: &str, payload: Value) -> String {
    json!({
        "entity": "event", "account_id": "acc_1", "event": event,
        "contains": payload.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()),
        "payload": payload, "created_at": now(),
    })
    .to_string()
}

fn razorpay_payment(id: &str, amount: i64, currency: &str) -> Value {
    json!({ "entity": {
        "id": id, "entity": "payment", "amount": amount, "currency": currency,
        "status": "captured", "order_id": "order_1", "amount_refunded": 0,
        "notes": { "user_id": "user_r" }, "created_at": now(),
    }})
}

fn razorpay_refund(id: &str, payment: &str, amount: i64, currency: &str) -> Value {
    json!({ "entity": {
        "id": id, "entity": "refund", "amount": amount, "currency": currency,
        "payment_id": payment, "status": "processed",
    }})
}

/// A Stripe charge object with every field given.
fn charge_object(id: &str, intent: &str, amount: i64, refunded: i64, currency: &str) -> Value {
    json!({
        "id": id, "object": "charge", "amount": amount, "amount_refunded": refunded,
        "currency": currency, "payment_intent": intent, "metadata": { "user_id": "user_1" },
        "status": "succeeded", "created": now(),
    })
}

impl TestApp {
    async fn answer(&self, response: reqwest::Response) -> Value {
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.unwrap()
    }

    /// Delivers a Stripe event twice: the first answer's outcome, then a
    /// `duplicate`.
    async fn stripe_twice(&self, body: &str) -> String {
        let first = self.answer(self.post_stripe(body).await).await;
        let again = self.answer(self.post_stripe(body).await).await;
        assert_eq!(again["outcome"], "duplicate", "the retry of {first}");
        first["outcome"].as_str().unwrap().to_owned()
    }

    async fn post_razorpay(&self, body: &str, event_id: &str) -> Value {
        let signature =
            webhookd::providers::razorpay::signature(RAZORPAY_SECRETS.0, body.as_bytes());
        let headers = [
            ("x-razorpay-signature".to_owned(), signature),
            ("x-razorpay-event-id".to_owned(), event_id.to_owned()),
        ];
        let response = self
            .post_to("razorpay", body.as_bytes().to_vec(), &headers)
            .await;
        self.answer(response).await
    }

    async fn razorpay_twice(&self, body: &str, event_id: &str) -> String {
        let first = self.post_razorpay(body, event_id).await;
        let again = self.post_razorpay(body, event_id).await;
        assert_eq!(again["outcome"], "duplicate", "the retry of {first}");
        first["outcome"].as_str().unwrap().to_owned()
    }

    /// Delivers a GitHub-signed body to the `gh` source.
    async fn post_github(&self, body: &str, delivery: &str) -> Value {
        let mut mac = Hmac::<Sha256>::new_from_slice(GITHUB_SECRETS.0.as_bytes()).unwrap();
        mac.update(body.as_bytes());
        let signature = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        let headers = [
            ("x-hub-signature-256".to_owned(), signature),
            ("x-github-delivery".to_owned(), delivery.to_owned()),
            ("x-github-event".to_owned(), "push".to_owned()),
        ];
        let response = self.post_to("gh", body.as_bytes().to_vec(), &headers).await;
        self.answer(response).await
    }

    /// The stored reason of a rejected event.
    async fn rejection(&self, provider: &str, event_id: &str) -> String {
        let (outcome, detail) = self.event_of(provider, event_id).await;
        assert_eq!(outcome, "rejected", "{detail}");
        detail["reason"].as_str().unwrap().to_owned()
    }

    /// Only event rows were written: no effect of any kind.
    async fn assert_only_events_written(&self) {
        for table in [
            "wallet_entries",
            "wallets",
            "payments",
            "subscriptions",
            "outbox",
            "deferred_events",
        ] {
            assert_eq!(self.count(table).await, 0, "{table} has rows");
        }
        self.assert_consistent().await;
    }
}

#[sqlx::test]
async fn numbers_jsonb_cannot_hold_are_stored_normalised_and_the_event_applies(pool: PgPool) {
    let app = route_app(pool).await;

    let credit = with_junk(&payment_intent_succeeded(
        "evt_junk", "pi_junk", "user_j", 700,
    ));
    assert_eq!(app.stripe_twice(&credit).await, "processed");
    assert_eq!(app.balance("user_j", "USD").await, Some(700));
    let stored: Value =
        sqlx::query_scalar("select payload from processed_events where event_id = 'evt_junk'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    // serde_json's reading of the numbers, the rest as sent.
    assert_eq!(stored["junk"], json!(0.0));
    assert_eq!(stored["fraction"], json!(0.0));
    assert_eq!(stored["data"]["object"]["id"], "pi_junk");

    let captured = with_junk(&razorpay_envelope(
        "payment.captured",
        json!({ "payment": razorpay_payment("pay_junk", 900, "INR") }),
    ));
    assert_eq!(
        app.razorpay_twice(&captured, "evt_rzp_junk").await,
        "processed"
    );
    assert_eq!(app.balance("user_r", "INR").await, Some(900));

    let pushed = with_junk(r#"{"ref":"refs/heads/main"}"#);
    assert_eq!(
        app.post_github(&pushed, "delivery-junk").await["outcome"],
        "processed"
    );
    assert_eq!(
        app.post_github(&pushed, "delivery-junk").await["outcome"],
        "duplicate"
    );
    let forwarded: Value =
        sqlx::query_scalar("select payload from outbox where topic = 'source.gh'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        forwarded,
        json!({"junk": 0.0, "fraction": 0.0, "ref": "refs/heads/main"})
    );
    app.assert_consistent().await;
}

#[sqlx::test]
async fn object_ids_over_the_limit_are_rejected_for_every_provider(pool: PgPool) {
    let app = route_app(pool).await;
    let long = |prefix| long_id(prefix);
    let stripe = [
        payment_intent_succeeded("evt_l1", &long("pi_"), "user_1", 100),
        charge("evt_l2", "charge.succeeded", &long("ch_"), "pi_1", 100, 0),
        charge("evt_l3", "charge.refunded", "ch_1", &long("pi_"), 100, 50),
        crate::helpers::subscription(
            "evt_l4",
            "customer.subscription.updated",
            &long("sub_"),
            "active",
            now(),
        ),
        crate::helpers::invoice_paid("evt_l5", &long("in_")),
    ];
    for (n, body) in stripe.iter().enumerate() {
        assert_eq!(app.stripe_twice(body).await, "rejected");
        let reason = app.rejection("stripe", &format!("evt_l{}", n + 1)).await;
        assert!(reason.contains("is not an identifier"), "{reason}");
    }
    let captured = razorpay_envelope(
        "payment.captured",
        json!({ "payment": razorpay_payment(&long("pay_"), 900, "INR") }),
    );
    assert_eq!(app.razorpay_twice(&captured, "evt_rl1").await, "rejected");
    let refund = razorpay_envelope(
        "refund.processed",
        json!({ "refund": razorpay_refund(&long("rfnd_"), "pay_1", 100, "INR") }),
    );
    assert_eq!(app.razorpay_twice(&refund, "evt_rl2").await, "rejected");
    assert!(
        app.rejection("razorpay", "evt_rl2")
            .await
            .contains("refund id is not an identifier")
    );
    assert_eq!(app.count("processed_events").await, 7);
    app.assert_only_events_written().await;
}

#[sqlx::test]
async fn ids_with_control_characters_are_rejected_never_rewritten(pool: PgPool) {
    let app = route_app(pool).await;
    // `pi_x\u0000` would have been stored as `pi_x\u{FFFD}`: a collision.
    for (n, id) in ["pi_x\u{0}", "pi_x\u{FFFD}", "pi_\u{7}x", "pi x"]
        .into_iter()
        .enumerate()
    {
        let event_id = format!("evt_c{n}");
        let body = payment_intent_succeeded(&event_id, id, "user_1", 100);
        assert_eq!(app.stripe_twice(&body).await, "rejected", "{id:?}");
        let reason = app.rejection("stripe", &event_id).await;
        assert!(
            reason.contains("payment intent id is not an identifier"),
            "{reason}"
        );
    }
    let owner = payment_intent_succeeded("evt_c_owner", "pi_ok", "user\u{0}1", 100);
    assert_eq!(app.stripe_twice(&owner).await, "rejected");
    app.assert_only_events_written().await;
    // The payload keeps the id readable (the NUL as U+FFFD): only storage changed.
    let stored: String = sqlx::query_scalar(
        "select payload -> 'data' -> 'object' ->> 'id' from processed_events where event_id = 'evt_c0'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(stored, "pi_x\u{FFFD}");
}

#[sqlx::test]
async fn a_credit_that_would_overflow_the_balance_is_rejected_and_its_retry_is_a_duplicate(
    pool: PgPool,
) {
    let app = route_app(pool).await;
    let full = payment_intent_succeeded("evt_full", "pi_full", "user_full", i64::MAX);
    assert_eq!(app.stripe_twice(&full).await, "processed");
    let over = payment_intent_succeeded("evt_over", "pi_over", "user_full", 1);
    assert_eq!(app.stripe_twice(&over).await, "rejected");
    let (_, detail) = app.event("evt_over").await;
    assert_eq!(detail["sqlstate"], "22003");
    assert!(
        detail["reason"]
            .as_str()
            .unwrap()
            .contains("a number out of range")
    );

    let captured = |id: &str, amount| {
        razorpay_envelope(
            "payment.captured",
            json!({ "payment": razorpay_payment(id, amount, "INR") }),
        )
    };
    assert_eq!(
        app.razorpay_twice(&captured("pay_full", i64::MAX), "evt_rfull")
            .await,
        "processed"
    );
    assert_eq!(
        app.razorpay_twice(&captured("pay_over", 1), "evt_rover")
            .await,
        "rejected"
    );
    // Neither the entry nor the payment row of the rejected credit exists.
    let written: i64 = sqlx::query_scalar(
        "select (select count(*) from wallet_entries where source_ref in ('pi_over', 'pay_over'))
              + (select count(*) from payments where payment_id = 'pay_over')",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(written, 0);
    assert_eq!(app.balance("user_full", "USD").await, Some(i64::MAX));
    assert_eq!(app.balance("user_r", "INR").await, Some(i64::MAX));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_refund_in_another_currency_than_its_credit_is_rejected(pool: PgPool) {
    let app = route_app(pool).await;
    app.deliver(
        &payment_intent_succeeded("evt_pi", "pi_1", "user_1", 1000),
        "processed",
    )
    .await;
    let yen = event_of_type(
        "evt_yen",
        "charge.refunded",
        charge_object("ch_1", "pi_1", 1000, 400, "jpy"),
    );
    assert_eq!(app.stripe_twice(&yen).await, "rejected");
    assert_eq!(
        app.rejection("stripe", "evt_yen").await,
        "the refund is in JPY but its payment was credited in USD"
    );
    assert_eq!(app.balance("user_1", "USD").await, Some(1000));
    assert_eq!(app.balance("user_1", "JPY").await, None);
    assert_eq!(app.count("payments").await, 0, "no JPY payment row");

    // A refund deferred before its credit is checked when the credit comes.
    let early = event_of_type(
        "evt_early",
        "charge.refunded",
        charge_object("ch_2", "pi_2", 500, 500, "eur"),
    );
    assert_eq!(app.stripe_twice(&early).await, "deferred");
    app.deliver(
        &payment_intent_succeeded("evt_pi2", "pi_2", "user_2", 500),
        "processed",
    )
    .await;
    assert_eq!(
        app.rejection("stripe", "evt_early").await,
        "the refund is in EUR but its payment was credited in USD"
    );
    assert_eq!(app.balance("user_2", "USD").await, Some(500));

    let captured = razorpay_envelope(
        "payment.captured",
        json!({ "payment": razorpay_payment("pay_1", 5000, "INR") }),
    );
    app.razorpay_twice(&captured, "evt_rc").await;
    let dollars = razorpay_envelope(
        "refund.processed",
        json!({ "refund": razorpay_refund("rfnd_1", "pay_1", 100, "USD") }),
    );
    assert_eq!(app.razorpay_twice(&dollars, "evt_rusd").await, "rejected");
    assert_eq!(
        app.rejection("razorpay", "evt_rusd").await,
        "the refund is in USD but its payment was credited in INR"
    );
    assert_eq!(app.balance("user_r", "INR").await, Some(5000));
    assert_eq!(app.count("wallet_entries").await, 3, "credits only");
    app.assert_consistent().await;
}

#[sqlx::test]
async fn currencies_outside_iso_4217_are_rejected(pool: PgPool) {
    let app = route_app(pool).await;
    for (n, currency) in ["zzz", "xau", "xxx", "us"].into_iter().enumerate() {
        let event_id = format!("evt_cur{n}");
        let mut object = json!({
            "id": format!("pi_{n}"), "amount": 100, "currency": currency,
            "metadata": { "user_id": "user_1" },
        });
        object["amount_received"] = json!(100);
        let body = event_of_type(&event_id, "payment_intent.succeeded", object);
        assert_eq!(app.stripe_twice(&body).await, "rejected", "{currency}");
        assert_eq!(
            app.rejection("stripe", &event_id).await,
            "payment intent has no ISO 4217 currency with a minor unit"
        );
    }
    let captured = razorpay_envelope(
        "payment.captured",
        json!({ "payment": razorpay_payment("pay_z", 100, "ZZZ") }),
    );
    assert_eq!(app.razorpay_twice(&captured, "evt_rz").await, "rejected");
    app.assert_only_events_written().await;
}

#[sqlx::test]
async fn refunds_of_one_charge_never_match_another_charge_by_prefix(pool: PgPool) {
    let app = route_app(pool).await;
    app.deliver(
        &payment_intent_succeeded("evt_pi", "pi_1", "user_1", 5000),
        "processed",
    )
    .await;
    // Two charges of one intent, one id a prefix of the other's key.
    let refund = |event_id: &str, charge: &str, refunded| {
        event_of_type(
            event_id,
            "charge.refunded",
            charge_object(charge, "pi_1", 2000, refunded, "usd"),
        )
    };
    assert_eq!(
        app.stripe_twice(&refund("evt_r1", "ch_x:5", 100)).await,
        "processed"
    );
    assert_eq!(
        app.stripe_twice(&refund("evt_r2", "ch_x", 300)).await,
        "processed"
    );
    let (_, detail) = app.event("evt_r2").await;
    assert_eq!(detail["debited_minor"], 300, "{detail}");
    // A larger cumulative refund of `ch_x` debits only the difference.
    assert_eq!(
        app.stripe_twice(&refund("evt_r3", "ch_x", 500)).await,
        "processed"
    );
    let (_, detail) = app.event("evt_r3").await;
    assert_eq!(detail["debited_minor"], 200, "{detail}");
    assert_eq!(app.balance("user_1", "USD").await, Some(5000 - 100 - 500));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn refunded_amounts_never_exceed_the_payment(pool: PgPool) {
    let app = route_app(pool).await;
    app.deliver(
        &payment_intent_succeeded("evt_pi", "pi_1", "user_1", 5000),
        "processed",
    )
    .await;
    // More refunded than the charge's amount: capped by nothing but the credit before.
    let over = event_of_type(
        "evt_over",
        "charge.refunded",
        charge_object("ch_1", "pi_1", 1000, 1500, "usd"),
    );
    assert_eq!(app.stripe_twice(&over).await, "rejected");
    assert_eq!(
        app.rejection("stripe", "evt_over").await,
        "charge has an amount_refunded larger than its amount"
    );
    // A refund that restates the charge with another amount changes nothing.
    app.deliver(
        &event_of_type(
            "evt_ch",
            "charge.succeeded",
            charge_object("ch_1", "pi_1", 1000, 0, "usd"),
        ),
        "ignored",
    )
    .await;
    let restated = event_of_type(
        "evt_restated",
        "charge.refunded",
        charge_object("ch_1", "pi_1", 3000, 2000, "usd"),
    );
    assert_eq!(app.stripe_twice(&restated).await, "rejected");
    assert_eq!(
        app.rejection("stripe", "evt_restated").await,
        "the payment was recorded with another amount or currency"
    );
    let (amount, refunded): (i64, i64) = sqlx::query_as(
        "select amount_minor, refunded_minor from payments where payment_id = 'ch_1'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!((amount, refunded), (1000, 0));
    assert_eq!(app.balance("user_1", "USD").await, Some(5000));

    // Razorpay: a refund larger than its payment.
    let captured = razorpay_envelope(
        "payment.captured",
        json!({ "payment": razorpay_payment("pay_1", 500, "INR") }),
    );
    app.razorpay_twice(&captured, "evt_rc").await;
    let larger = razorpay_envelope(
        "refund.processed",
        json!({ "refund": razorpay_refund("rfnd_1", "pay_1", 800, "INR") }),
    );
    assert_eq!(app.razorpay_twice(&larger, "evt_rbig").await, "rejected");
    assert_eq!(
        app.rejection("razorpay", "evt_rbig").await,
        "the refund is larger than its payment"
    );
    assert_eq!(app.balance("user_r", "INR").await, Some(500));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_razorpay_refund_only_touches_the_payment_it_refunds(pool: PgPool) {
    let app = route_app(pool).await;
    for (payment, amount, event_id) in [("pay_a", 5000, "evt_a"), ("pay_b", 3000, "evt_b")] {
        let captured = razorpay_envelope(
            "payment.captured",
            json!({ "payment": razorpay_payment(payment, amount, "INR") }),
        );
        app.razorpay_twice(&captured, event_id).await;
    }
    // Refunds pay_a, carrying pay_b's entity (fully refunded).
    let mut other = razorpay_payment("pay_b", 3000, "INR");
    other["entity"]["amount_refunded"] = json!(3000);
    let refund = razorpay_envelope(
        "refund.processed",
        json!({ "refund": razorpay_refund("rfnd_1", "pay_a", 100, "INR"), "payment": other }),
    );
    assert_eq!(app.razorpay_twice(&refund, "evt_cross").await, "rejected");
    assert_eq!(
        app.rejection("razorpay", "evt_cross").await,
        "the refund carries another payment's entity"
    );
    let refunded: Vec<(String, i64, String)> = sqlx::query_as(
        "select payment_id, refunded_minor, status from payments order by payment_id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        refunded,
        [
            ("pay_a".to_owned(), 0, "captured".to_owned()),
            ("pay_b".to_owned(), 0, "captured".to_owned())
        ]
    );
    assert_eq!(app.balance("user_r", "INR").await, Some(8000));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_waiting_refund_the_database_refuses_is_rejected_alone_and_its_credit_applies(
    pool: PgPool,
) {
    let app = route_app(pool).await;
    // A check only this refund's entry fails: data the database refuses.
    sqlx::query(
        "alter table wallet_entries add constraint refuses_one_refund check (source_ref <> 'rfnd_poison')",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let refund = razorpay_envelope(
        "refund.processed",
        json!({ "refund": razorpay_refund("rfnd_poison", "pay_w", 100, "INR") }),
    );
    assert_eq!(app.razorpay_twice(&refund, "evt_wait").await, "deferred");
    let captured = razorpay_envelope(
        "payment.captured",
        json!({ "payment": razorpay_payment("pay_w", 700, "INR") }),
    );
    assert_eq!(
        app.razorpay_twice(&captured, "evt_credit").await,
        "processed"
    );
    let (_, detail) = app.event_of("razorpay", "evt_credit").await;
    assert_eq!(detail["applied_deferred"], json!(["evt_wait"]));
    let reason = app.rejection("razorpay", "evt_wait").await;
    assert!(reason.contains("SQLSTATE 23514"), "{reason}");
    assert_eq!(app.balance("user_r", "INR").await, Some(700));
    assert_eq!(app.count("deferred_events").await, 0);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_payload_the_database_refuses_is_recorded_without_it_and_its_retry_is_a_duplicate(
    pool: PgPool,
) {
    let app = route_app(pool).await;
    // A check only these payloads fail: the claim itself is refused.
    sqlx::query(
        "alter table processed_events add constraint refuses_a_payload check (payload ->> 'poison' is null)",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let poisoned = |body: String| format!(r#"{{"poison":"x",{}"#, &body[1..]);
    let ignored = poisoned(event_of_type("evt_p1", "customer.created", json!({})));
    let credit = poisoned(payment_intent_succeeded("evt_p2", "pi_p", "user_p", 100));
    for (body, event_id) in [(ignored, "evt_p1"), (credit, "evt_p2")] {
        assert_eq!(app.stripe_twice(&body).await, "rejected");
        let (_, detail) = app.event(event_id).await;
        assert_eq!(detail["sqlstate"], "23514", "{detail}");
        assert_eq!(detail["payload_stored"], false, "{detail}");
    }
    app.assert_only_events_written().await;
}

#[sqlx::test]
async fn real_provider_payloads_with_free_text_in_their_optional_fields_apply(pool: PgPool) {
    let app = route_app(pool).await;
    // Stripe's metadata values are any text: only the credit's owner must
    // be an identifier.
    let metadata = json!({ "user_id": "user_1", "note": "Jane Doe's order ✓" });
    let intent = json!({
        "id": "pi_3MtwBwLkdIwHu7ix28a3tqPa", "object": "payment_intent", "amount": 2000,
        "amount_capturable": 0, "amount_received": 2000, "capture_method": "automatic",
        "client_secret": "pi_3MtwBwLkdIwHu7ix28a3tqPa_secret_YrKJUKribcBjcG8HVhfZluoGH",
        "confirmation_method": "automatic", "created": 1680800504, "currency": "ang",
        "customer": null, "description": null, "latest_charge": "ch_3MtwBwLkdIwHu7ix28a3tqPa",
        "livemode": false, "metadata": metadata, "payment_method_types": ["card"],
        "status": "succeeded", "transfer_data": null,
    });
    app.deliver(
        &event_of_type("evt_real1", "payment_intent.succeeded", intent),
        "processed",
    )
    .await;
    let mut refunded = charge_object(
        "ch_3MtwBwLkdIwHu7ix28a3tqPa",
        "pi_3MtwBwLkdIwHu7ix28a3tqPa",
        2000,
        500,
        "ang",
    );
    refunded["metadata"] = json!({ "user_id": "Jane Doe" });
    refunded["customer"] = json!({ "id": "cus_NffrFeUfNV2Hib", "object": "customer" });
    app.deliver(
        &event_of_type("evt_real2", "charge.refunded", refunded),
        "processed",
    )
    .await;
    assert_eq!(app.balance("user_1", "ANG").await, Some(1500));

    let mut deleted: Value = serde_json::from_str(&crate::helpers::subscription(
        "evt_real3",
        "customer.subscription.deleted",
        "sub_1MowQVLkdIwHu7ixeRlqHVzs",
        "canceled",
        now(),
    ))
    .unwrap();
    deleted["data"]["object"]["metadata"] = json!({ "user_id": "Jane Doe" });
    app.deliver(&deleted.to_string(), "processed").await;
    let (status, user_id): (String, Option<String>) =
        sqlx::query_as("select status, user_id from subscriptions")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!((status.as_str(), user_id), ("canceled", None));

    let mut invoice: Value = serde_json::from_str(&crate::helpers::invoice_paid(
        "evt_real4",
        "in_1MtHbELkdIwHu7ixl4OzzPMv",
    ))
    .unwrap();
    invoice["data"]["object"]["metadata"] = json!({ "user_id": "Jane Doe" });
    app.deliver(&invoice.to_string(), "processed").await;

    // Razorpay: a failed payment whose notes hold free text, and a refund
    // whose payment entity has no order.
    let mut failed = razorpay_payment("pay_29QQoUBi66xm2f", 5000, "INR");
    failed["entity"]["notes"] = json!({ "user_id": "Jane Doe", "address": "Mumbai, India" });
    failed["entity"]["status"] = json!("failed");
    let body = razorpay_envelope("payment.failed", json!({ "payment": failed }));
    assert_eq!(app.razorpay_twice(&body, "evt_real5").await, "processed");
    let captured = razorpay_envelope(
        "payment.captured",
        json!({ "payment": razorpay_payment("pay_29QQoUBi66xm2g", 5000, "INR") }),
    );
    assert_eq!(
        app.razorpay_twice(&captured, "evt_real6").await,
        "processed"
    );
    let mut entity = razorpay_payment("pay_29QQoUBi66xm2g", 5000, "INR");
    entity["entity"]["order_id"] = Value::Null;
    entity["entity"]["amount_refunded"] = json!(1000);
    let refund = razorpay_envelope(
        "refund.processed",
        json!({ "refund": razorpay_refund("rfnd_FP8QHiV938haTz", "pay_29QQoUBi66xm2g", 1000, "INR"), "payment": entity }),
    );
    assert_eq!(app.razorpay_twice(&refund, "evt_real7").await, "processed");
    assert_eq!(app.balance("user_r", "INR").await, Some(4000));
    app.assert_consistent().await;
}
