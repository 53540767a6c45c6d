//! The operator's commands for Checkout: `send` plays a Checkout payment
//! against a served app (session, intent, customer, a delayed payment).

use serde_json::Value;
use sqlx::PgPool;
use webhookd::cli;
use webhookd::cli::send::SendArgs;
use webhookd::cli::send::paypal::{DEFAULT_CERT_URL, PaypalSendArgs};
use webhookd::cli::send::stripe::StripeSendArgs;
use webhookd::secrets::Secrets;

use crate::helpers::{SECRET, TestApp, spawn_app};

/// `webhookd send stripe <event_type> --amount 2500` against `app`, for
/// `user`.
fn sample(app: &TestApp, event_type: &str, user: &str) -> SendArgs {
    SendArgs {
        provider: "stripe".into(),
        event_type: event_type.into(),
        user: user.into(),
        amount: Some("2500".into()),
        currency: None,
        payment: None,
        url: app.address.clone(),
        stripe_webhook_secret: Secrets::new([SECRET]),
        razorpay_webhook_secret: Secrets::default(),
        stripe: StripeSendArgs::default(),
        paypal: PaypalSendArgs {
            paypal_key: None,
            paypal_cert_url: DEFAULT_CERT_URL.into(),
            paypal_webhook_id: None,
        },
    }
}

fn naming(payment: &str, customer: Option<&str>, checkout: bool) -> impl Fn(SendArgs) -> SendArgs {
    let (payment, customer) = (payment.to_owned(), customer.map(str::to_owned));
    move |args| SendArgs {
        payment: Some(payment.clone()),
        stripe: StripeSendArgs {
            customer: customer.clone(),
            checkout,
        },
        ..args
    }
}

/// Sends `args` and returns webhookd's answer.
async fn send(args: &SendArgs) -> Value {
    let mut out = Vec::new();
    cli::send::run(args, &mut out).await.unwrap();
    let out = String::from_utf8(out).unwrap();
    let answer = out.lines().next().unwrap();
    serde_json::from_str(&answer[answer.find('{').unwrap()..]).unwrap()
}

async fn owner(app: &TestApp, subject: &str, id: &str) -> Option<(String, String, i64)> {
    sqlx::query_as(
        "select user_id, event_id, conflicts from owners
         where provider = 'stripe' and subject = $1 and subject_id = $2",
    )
    .bind(subject)
    .bind(id)
    .fetch_optional(&app.pool)
    .await
    .unwrap()
}

async fn credits(app: &TestApp, payment: &str) -> Vec<(String, i64, String)> {
    sqlx::query_as(
        "select user_id, amount_minor, event_id from wallet_entries
         where kind = 'credit' and source_ref = $1",
    )
    .bind(payment)
    .fetch_all(&app.pool)
    .await
    .unwrap()
}

#[sqlx::test]
async fn send_plays_a_checkout_payment_that_credits_the_sessions_owner_once(pool: PgPool) {
    let app = spawn_app(pool).await;
    // The intent Checkout created, without metadata: it waits for its owner.
    let paid = naming("pi_co", Some("cus_co"), true);
    let intent = send(&paid(sample(&app, "payment_intent.succeeded", "ignored"))).await;
    assert_eq!(intent["outcome"], "deferred", "{intent}");
    let intent_id = intent["event_id"].as_str().unwrap().to_owned();
    let (_, detail) = app.event(&intent_id).await;
    assert_eq!(detail["waits_for"], "owner:payment:pi_co");

    // The session names its owner: it credits under the intent's key and
    // teaches the owner of the intent and of the customer.
    let session = send(&paid(sample(&app, "checkout.session.completed", "user_co"))).await;
    assert_eq!(session["outcome"], "processed", "{session}");
    let session_id = session["event_id"].as_str().unwrap();
    assert_eq!(
        credits(&app, "pi_co").await,
        [("user_co".to_owned(), 2500, session_id.to_owned())]
    );
    let (outcome, detail) = app.event(&intent_id).await;
    assert_eq!(outcome, "ignored", "{detail}");
    assert_eq!(detail["applied_by"], session_id);
    for (subject, id) in [("payment", "pi_co"), ("customer", "cus_co")] {
        let learned = owner(&app, subject, id).await;
        assert_eq!(
            learned,
            Some(("user_co".to_owned(), session_id.to_owned(), 0))
        );
    }
    // Sent again, the session is another event and credits nothing more.
    let again = send(&paid(sample(&app, "checkout.session.completed", "user_co"))).await;
    assert_eq!(again["outcome"], "ignored", "{again}");

    // A customer whose metadata names its owner teaches it.
    let customer = naming("unused", Some("cus_co2"), false);
    let created = send(&customer(sample(&app, "customer.created", "user_co"))).await;
    assert_eq!(created["outcome"], "processed", "{created}");
    let created_id = created["event_id"].as_str().unwrap().to_owned();
    assert_eq!(
        owner(&app, "customer", "cus_co2").await,
        Some(("user_co".to_owned(), created_id, 0))
    );

    // A delayed payment method: the session's async success credits it.
    let delayed = naming("pi_co_async", None, false);
    let succeeded = send(&delayed(sample(
        &app,
        "checkout.session.async_payment_succeeded",
        "user_co",
    )))
    .await;
    assert_eq!(succeeded["outcome"], "processed", "{succeeded}");
    assert_eq!(credits(&app, "pi_co_async").await.len(), 1);

    assert_eq!(app.balance("user_co", "USD").await, Some(5000));
    app.assert_consistent().await;
}
