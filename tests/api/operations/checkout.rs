//! The operator's commands for Checkout: `send` plays a Checkout payment
//! against a served app (session, intent, customer, a delayed payment),
//! and `explain` tells a user's story from the session to the credit,
//! with the owners learned and the payments that wait for an owner.

use serde_json::Value;
use sqlx::PgPool;
use webhookd::cli;
use webhookd::cli::events::EventsCommand;
use webhookd::cli::send::SendArgs;
use webhookd::cli::send::paypal::{DEFAULT_CERT_URL, PaypalSendArgs};
use webhookd::cli::send::stripe::StripeSendArgs;
use webhookd::ingest::owner_wait::{DEFAULT_OWNER_WAIT, expire};
use webhookd::secrets::Secrets;

use crate::helpers::{SECRET, TestApp, now, spawn_app};

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
            thin: false,
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

#[sqlx::test]
async fn explain_tells_a_users_checkout_story_from_session_to_credit(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    let session = send(&naming("pi_x", Some("cus_x"), false)(sample(
        &app,
        "checkout.session.completed",
        "user_x",
    )))
    .await;
    let session_id = session["event_id"].as_str().unwrap().to_owned();
    // A session whose delayed payment failed credits nothing, but teaches
    // the owner of its intent: it is in the user's story all the same.
    let failed = send(&naming("pi_failed", None, false)(sample(
        &app,
        "checkout.session.async_payment_failed",
        "user_x",
    )))
    .await;
    let failed_id = failed["event_id"].as_str().unwrap().to_owned();
    // Another user's session claims the same customer: a conflict.
    send(&naming("pi_y", Some("cus_x"), false)(sample(
        &app,
        "checkout.session.completed",
        "user_y",
    )))
    .await;
    // A payment of that customer without an owner: it waits for the
    // owner of its own intent (the default rule reads no customer).
    let lost = send(&naming("pi_lost", Some("cus_x"), true)(sample(
        &app,
        "payment_intent.succeeded",
        "ignored",
    )))
    .await;
    assert_eq!(lost["outcome"], "deferred");
    let lost_id = lost["event_id"].as_str().unwrap().to_owned();

    let story = explain(&pool, "user_x").await;
    for expected in [
        format!(
            "event stripe {session_id} (checkout.session.completed, API version 2024-06-20) received, signature verified, claimed: processed"
        ),
        format!("owner of stripe payment pi_x learned: user user_x, by event {session_id}"),
        format!(
            "owner of stripe customer cus_x learned: user user_x, by event {session_id} (CONFLICT: claimed for another user 1 time(s) since; the first owner stays)"
        ),
        format!("credit 2500 USD for wallet user_x/USD (natural key pi_x) by event {session_id}"),
        format!("wallet.credited written by event {session_id}"),
        format!(
            "event stripe {failed_id} (checkout.session.async_payment_failed, API version 2024-06-20) received, signature verified, claimed: processed"
        ),
        format!("checkout.failed written by event {failed_id}"),
        format!("owner of stripe payment pi_failed learned: user user_x, by event {failed_id}"),
        format!(
            "event stripe {lost_id} (payment_intent.succeeded) waits for the owner of payment pi_lost; its customer cus_x is user user_x's (by event {session_id})"
        ),
        "wallet user_x/USD balance 2500".to_owned(),
    ] {
        assert!(
            story.contains(&expected),
            "missing {expected:?} in:\n{story}"
        );
    }
    // The payment's own story says what it waits for.
    let waiting = explain(&pool, "pi_lost").await;
    assert!(
        waiting.contains(&format!(
            "event stripe {lost_id} deferred: waits for the owner of payment pi_lost"
        )),
        "{waiting}"
    );

    // No owner came in time: rejected, announced, and still in the user's
    // story, with what would apply it.
    assert_eq!(
        expire(&pool, now() + 73 * 3600, DEFAULT_OWNER_WAIT)
            .await
            .unwrap(),
        1
    );
    let story = explain(&pool, "user_x").await;
    let rejected = format!(
        "event stripe {lost_id} (payment_intent.succeeded) rejected: no owner came for payment pi_lost (2500 USD) in time"
    );
    assert!(story.contains(&rejected), "{story}");
    assert!(
        story.contains(&format!(
            "Its customer cus_x is user user_x's (by event {session_id}): with `customer` in the source's owner rule, a replay credits it"
        )),
        "{story}"
    );
    // Its session comes late: it credits the payment itself, and the story
    // says so.
    let late = send(&naming("pi_lost", None, false)(sample(
        &app,
        "checkout.session.completed",
        "user_x",
    )))
    .await;
    let late_id = late["event_id"].as_str().unwrap().to_owned();
    let story = explain(&pool, "user_x").await;
    assert!(
        story.contains(&format!(
            "Its payment pi_lost is user user_x's (by event {late_id}); credited since by event {late_id}"
        )),
        "{story}"
    );
    assert_eq!(app.balance("user_x", "USD").await, Some(5000));
    // The other user's story has their own session and credit, not user_x's.
    let other = explain(&pool, "user_y").await;
    assert!(other.contains("natural key pi_y"), "{other}");
    assert!(!other.contains("pi_x"), "{other}");
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_payment_rejected_as_no_owner_is_applied_by_a_replay_once_its_owner_is_known(
    pool: PgPool,
) {
    let app = spawn_app(pool.clone()).await;
    let lost = send(&naming("pi_r", None, true)(sample(
        &app,
        "payment_intent.succeeded",
        "ignored",
    )))
    .await;
    let lost_id = lost["event_id"].as_str().unwrap().to_owned();
    let later = |hours: i64| now() + hours * 3600;
    assert_eq!(
        expire(&pool, later(73), DEFAULT_OWNER_WAIT).await.unwrap(),
        1
    );
    let replay = EventsCommand::Replay {
        provider: "stripe".into(),
        event_id: lost_id.clone(),
        stripe: Box::default(),
    };
    // Replayed while its owner is still unknown, it waits again.
    let mut out = Vec::new();
    cli::events::run(&pool, &replay, &[], &mut out)
        .await
        .unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("stored outcome changed from rejected to deferred"),
        "{out}"
    );
    assert_eq!(
        expire(&pool, later(146), DEFAULT_OWNER_WAIT).await.unwrap(),
        1
    );
    assert_eq!(app.event(&lost_id).await.0, "rejected");

    // A session that was never paid teaches its owner and credits nothing:
    // the user's story says to replay the payment, and the replay credits.
    send(&naming("pi_r", None, false)(sample(
        &app,
        "checkout.session.async_payment_failed",
        "user_r",
    )))
    .await;
    assert_eq!(app.balance("user_r", "USD").await, None);
    let story = explain(&pool, "user_r").await;
    assert!(
        story.contains("rejected: no owner came for payment pi_r (2500 USD) in time")
            && story.contains(&format!(
                ": replay it (webhookd events replay stripe {lost_id})"
            )),
        "{story}"
    );
    let mut out = Vec::new();
    cli::events::run(&pool, &replay, &[], &mut out)
        .await
        .unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("stored outcome changed from rejected to processed"),
        "{out}"
    );
    assert_eq!(app.balance("user_r", "USD").await, Some(2500));
    let story = explain(&pool, "user_r").await;
    assert!(story.contains("; replayed since: processed"), "{story}");
    let announced: i64 =
        sqlx::query_scalar("select count(*) from outbox where topic = 'payment.unowned'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(announced, 1, "announced once");
    app.assert_consistent().await;
}

async fn explain(pool: &PgPool, subject: &str) -> String {
    let mut out = Vec::new();
    assert!(cli::explain::run(pool, subject, &mut out).await.unwrap());
    String::from_utf8(out).unwrap()
}
