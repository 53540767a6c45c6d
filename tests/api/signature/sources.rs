//! Named sources of every scheme (`WEBHOOKD_SOURCE_<NAME>_*`), through the
//! app's router: a second Stripe endpoint shares Stripe's dedupe space and
//! records which endpoint received each event; a `record` source of any
//! scheme stores and forwards its events and moves no money; each source
//! verifies with its own secrets; a source configured badly stops
//! start-up with the variable named.

use hmac::{Hmac, Mac};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::Sha256;
use sqlx::PgPool;
use webhookd::clock::Clock;
use webhookd::config::{SourceSettings, StripeApiArgs, sources_from_env};
use webhookd::ingest::ReplayRefused;
use webhookd::providers::stripe::signature_header;

use crate::helpers::{TestApp, now, payment_intent_succeeded, route_app_with};

const CONNECTED_SECRET: &str = "whsec_connected_endpoint_secret";
const RECORD_RAZORPAY_SECRET: &str = "rzp_record_secret";
const RECORD_GITHUB_SECRET: &str = "github record secret";

fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The sources `pairs` configure, read as `serve` reads its environment.
fn configured(pairs: &[(&str, &str)]) -> Vec<SourceSettings> {
    sources_from_env(vars(pairs)).expect("the sources are valid")
}

/// The test app with `sources` mounted beside its usual ones.
async fn app_with(pool: PgPool, sources: Vec<SourceSettings>) -> TestApp {
    route_app_with(pool, Clock::System, move |settings| {
        settings.sources.extend(sources);
    })
    .await
}

fn hmac_hex(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// POSTs a Stripe event to `/webhooks/{source}`, signed with `secret`.
async fn post_stripe_to(
    app: &TestApp,
    source: &str,
    secret: &str,
    body: &str,
) -> reqwest::Response {
    let header = signature_header(secret, now(), body.as_bytes());
    let headers = [("stripe-signature".to_owned(), header)];
    app.post_to(source, body.as_bytes().to_vec(), &headers)
        .await
}

/// The answer's `outcome`, expecting 200.
async fn outcome(response: reqwest::Response) -> String {
    assert_eq!(response.status(), StatusCode::OK);
    let answer: Value = response.json().await.unwrap();
    answer["outcome"].as_str().unwrap().to_owned()
}

/// `(provider, source)` of each stored event with `event_id`.
async fn stored(app: &TestApp, event_id: &str) -> Vec<(String, Option<String>)> {
    sqlx::query_as("select provider, source from processed_events where event_id = $1")
        .bind(event_id)
        .fetch_all(&app.pool)
        .await
        .unwrap()
}

/// The topics of the outbox rows of `event_id`.
async fn topics(app: &TestApp, event_id: &str) -> Vec<String> {
    sqlx::query_scalar("select topic from outbox where event_id = $1 order by id")
        .bind(event_id)
        .fetch_all(&app.pool)
        .await
        .unwrap()
}

async fn assert_no_money_moved(app: &TestApp) {
    for table in ["wallets", "wallet_entries", "payments", "subscriptions"] {
        assert_eq!(app.count(table).await, 0, "{table} has rows");
    }
}

fn connected() -> Vec<SourceSettings> {
    configured(&[
        ("WEBHOOKD_SOURCE_CONNECTED_SCHEME", "stripe"),
        ("WEBHOOKD_SOURCE_CONNECTED_SECRET", CONNECTED_SECRET),
    ])
}

#[sqlx::test]
async fn an_event_delivered_to_two_stripe_sources_applies_once_and_keeps_the_endpoint_that_received_it(
    pool: PgPool,
) {
    let app = app_with(pool, connected()).await;
    let body = payment_intent_succeeded("evt_both", "pi_both", "user_1", 1500);

    let first = post_stripe_to(&app, "connected", CONNECTED_SECRET, &body).await;
    assert_eq!(outcome(first).await, "processed");
    let second = post_stripe_to(&app, "stripe", crate::helpers::SECRET, &body).await;
    assert_eq!(outcome(second).await, "duplicate");
    let again = post_stripe_to(&app, "connected", CONNECTED_SECRET, &body).await;
    assert_eq!(outcome(again).await, "duplicate");

    assert_eq!(
        stored(&app, "evt_both").await,
        [("stripe".to_owned(), Some("connected".to_owned()))],
        "one row, in Stripe's dedupe space, naming the endpoint"
    );
    assert_eq!(app.balance("user_1", "USD").await, Some(1500));
    assert_eq!(app.count("wallet_entries").await, 1);

    // The built-in endpoint's own events keep a null source.
    let own = payment_intent_succeeded("evt_own", "pi_own", "user_1", 500);
    let response = post_stripe_to(&app, "stripe", crate::helpers::SECRET, &own).await;
    assert_eq!(outcome(response).await, "processed");
    assert_eq!(stored(&app, "evt_own").await, [("stripe".to_owned(), None)]);
    assert_eq!(app.balance("user_1", "USD").await, Some(2000));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn each_stripe_source_verifies_with_its_own_secrets_only(pool: PgPool) {
    let app = app_with(pool, connected()).await;
    let body = payment_intent_succeeded("evt_wrong", "pi_wrong", "user_1", 100);
    let wrong = post_stripe_to(&app, "connected", crate::helpers::SECRET, &body).await;
    assert_eq!(wrong.status(), StatusCode::BAD_REQUEST);
    let wrong = post_stripe_to(&app, "stripe", CONNECTED_SECRET, &body).await;
    assert_eq!(wrong.status(), StatusCode::BAD_REQUEST);
    let unknown = post_stripe_to(&app, "nobody", CONNECTED_SECRET, &body).await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    app.assert_nothing_written().await;
}

#[sqlx::test]
async fn a_named_stripe_source_takes_only_the_mode_it_is_given(pool: PgPool) {
    let live_only = configured(&[
        ("WEBHOOKD_SOURCE_LIVE_SCHEME", "stripe"),
        ("WEBHOOKD_SOURCE_LIVE_SECRET", CONNECTED_SECRET),
        ("WEBHOOKD_SOURCE_LIVE_LIVEMODE", "true"),
    ]);
    let app = app_with(pool, live_only).await;
    // The helpers' events are test-mode ones.
    let body = payment_intent_succeeded("evt_test_mode", "pi_t", "user_1", 100);
    let response = post_stripe_to(&app, "live", CONNECTED_SECRET, &body).await;
    assert_eq!(outcome(response).await, "rejected");
    assert_eq!(
        stored(&app, "evt_test_mode").await,
        [("stripe".to_owned(), Some("live".to_owned()))]
    );
    assert_no_money_moved(&app).await;
}

/// A Razorpay `payment.captured` of payment `pay_{id}` whose notes name
/// `user_1`.
fn razorpay_captured(id: &str) -> String {
    json!({
        "entity": "event",
        "account_id": "acc_BFQ7uQEaa7j2z7",
        "event": "payment.captured",
        "contains": ["payment"],
        "payload": {"payment": {"entity": {
            "id": format!("pay_{id}"), "entity": "payment", "amount": 5000, "currency": "INR",
            "status": "captured", "order_id": "order_1", "notes": {"user_id": "user_1"},
            "created_at": now(),
        }}},
        "created_at": now(),
    })
    .to_string()
}

#[sqlx::test]
async fn a_record_source_of_each_scheme_stores_and_forwards_its_events_and_moves_no_money(
    pool: PgPool,
) {
    let sources = configured(&[
        ("WEBHOOKD_SOURCE_LEDGERLESS_SCHEME", "stripe"),
        ("WEBHOOKD_SOURCE_LEDGERLESS_SECRET", CONNECTED_SECRET),
        ("WEBHOOKD_SOURCE_LEDGERLESS_EFFECTS", "record"),
        ("WEBHOOKD_SOURCE_RZP_AUDIT_SCHEME", "razorpay"),
        ("WEBHOOKD_SOURCE_RZP_AUDIT_SECRET", RECORD_RAZORPAY_SECRET),
        ("WEBHOOKD_SOURCE_RZP_AUDIT_EFFECTS", "record"),
        ("WEBHOOKD_SOURCE_AUDIT_SCHEME", "github"),
        ("WEBHOOKD_SOURCE_AUDIT_SECRET", RECORD_GITHUB_SECRET),
        ("WEBHOOKD_SOURCE_AUDIT_EFFECTS", "record"),
    ]);
    let app = app_with(pool, sources).await;

    // Stripe: a payment intent that names its user.
    let body = payment_intent_succeeded("evt_rec", "pi_rec", "user_1", 2500);
    let response = post_stripe_to(&app, "ledgerless", CONNECTED_SECRET, &body).await;
    assert_eq!(outcome(response).await, "processed");
    let again = post_stripe_to(&app, "ledgerless", CONNECTED_SECRET, &body).await;
    assert_eq!(outcome(again).await, "duplicate");
    let forged = post_stripe_to(&app, "ledgerless", "whsec_not_it", &body).await;
    assert_eq!(forged.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        stored(&app, "evt_rec").await,
        [("stripe".to_owned(), Some("ledgerless".to_owned()))]
    );
    assert_eq!(topics(&app, "evt_rec").await, ["source.ledgerless"]);
    let forwarded: Value =
        sqlx::query_scalar("select payload from outbox where event_id = 'evt_rec'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert!(
        forwarded.to_string().contains("pi_rec"),
        "the verified payload is forwarded: {forwarded}"
    );

    // Razorpay: a captured payment whose notes name its user.
    let body = razorpay_captured("rec");
    let signed = |secret: &str| {
        vec![
            (
                "x-razorpay-signature".to_owned(),
                hmac_hex(secret, body.as_bytes()),
            ),
            ("x-razorpay-event-id".to_owned(), "evt_rzp_rec".to_owned()),
        ]
    };
    for (headers, expected) in [
        (signed(RECORD_RAZORPAY_SECRET), "processed"),
        (signed(RECORD_RAZORPAY_SECRET), "duplicate"),
    ] {
        let response = app
            .post_to("rzp_audit", body.as_bytes().to_vec(), &headers)
            .await;
        assert_eq!(outcome(response).await, expected);
    }
    let forged = app
        .post_to("rzp_audit", body.as_bytes().to_vec(), &signed("not it"))
        .await;
    assert_eq!(forged.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        stored(&app, "evt_rzp_rec").await,
        [("razorpay".to_owned(), Some("rzp_audit".to_owned()))]
    );
    assert_eq!(topics(&app, "evt_rzp_rec").await, ["source.rzp_audit"]);

    // A generic scheme: stored under its own name, as before.
    let body = json!({"action": "paid", "metadata": {"user_id": "user_1"}}).to_string();
    let signed = |secret: &str| {
        vec![
            ("x-github-delivery".to_owned(), "d-rec".to_owned()),
            ("x-github-event".to_owned(), "push".to_owned()),
            (
                "x-hub-signature-256".to_owned(),
                format!("sha256={}", hmac_hex(secret, body.as_bytes())),
            ),
        ]
    };
    for expected in ["processed", "duplicate"] {
        let response = app
            .post_to(
                "audit",
                body.as_bytes().to_vec(),
                &signed(RECORD_GITHUB_SECRET),
            )
            .await;
        assert_eq!(outcome(response).await, expected);
    }
    let forged = app
        .post_to("audit", body.as_bytes().to_vec(), &signed("not it"))
        .await;
    assert_eq!(forged.status(), StatusCode::BAD_REQUEST);
    assert_eq!(stored(&app, "d-rec").await, [("audit".to_owned(), None)]);
    assert_eq!(topics(&app, "d-rec").await, ["source.audit"]);

    assert_no_money_moved(&app).await;
    assert_eq!(app.count("outbox").await, 3, "one row each, once");
    app.assert_consistent().await;
}

#[sqlx::test]
async fn the_built_in_stripe_source_can_be_set_to_record(pool: PgPool) {
    let record = configured(&[("WEBHOOKD_SOURCE_STRIPE_EFFECTS", "record")]);
    let app = app_with(pool, record).await;
    let body = payment_intent_succeeded("evt_builtin_rec", "pi_b", "user_1", 700);
    app.deliver(&body, "processed").await;
    app.deliver(&body, "duplicate").await;
    assert_eq!(
        stored(&app, "evt_builtin_rec").await,
        [("stripe".to_owned(), None)]
    );
    assert_eq!(topics(&app, "evt_builtin_rec").await, ["source.stripe"]);
    assert_no_money_moved(&app).await;
}

#[sqlx::test]
async fn a_replay_does_what_the_receiving_source_does_and_refuses_a_source_gone(pool: PgPool) {
    let record = configured(&[
        ("WEBHOOKD_SOURCE_LEDGERLESS_SCHEME", "stripe"),
        ("WEBHOOKD_SOURCE_LEDGERLESS_SECRET", CONNECTED_SECRET),
        ("WEBHOOKD_SOURCE_LEDGERLESS_EFFECTS", "record"),
    ]);
    let app = app_with(pool, record.clone()).await;
    let body = payment_intent_succeeded("evt_replayed", "pi_r", "user_1", 900);
    let response = post_stripe_to(&app, "ledgerless", CONNECTED_SECRET, &body).await;
    assert_eq!(outcome(response).await, "processed");

    let sources = webhookd::startup::registry(&StripeApiArgs::default(), &record).unwrap();
    let replayed =
        webhookd::ingest::replay_stored(&app.pool, &sources, None, "stripe", "evt_replayed")
            .await
            .unwrap()
            .unwrap();
    assert_eq!(replayed.replayed.applied.outcome.as_str(), "processed");
    assert_no_money_moved(&app).await;
    assert_eq!(topics(&app, "evt_replayed").await, ["source.ledgerless"]);

    let without = webhookd::startup::registry(&StripeApiArgs::default(), &[]).unwrap();
    let refused =
        webhookd::ingest::replay_stored(&app.pool, &without, None, "stripe", "evt_replayed")
            .await
            .unwrap()
            .unwrap_err();
    assert_eq!(
        refused,
        ReplayRefused::UnknownSource("ledgerless".to_owned())
    );
    assert_no_money_moved(&app).await;
}

#[sqlx::test]
async fn a_named_paypal_source_verifies_for_its_own_webhook_ids_in_paypal_s_dedupe_space(
    pool: PgPool,
) {
    use crate::signature::paypal::{LIVE_ID, Signed, capture_completed, cert_dir};
    use crate::signature::paypal_certs::NOW;
    const OWN_ID: &str = "5GP028458E2496506";
    let dir = cert_dir(&[(LIVE_ID, "live.pem")]);
    let sources = configured(&[
        ("WEBHOOKD_SOURCE_SHOP_EU_SCHEME", "paypal"),
        ("WEBHOOKD_SOURCE_SHOP_EU_WEBHOOK_ID", OWN_ID),
    ]);
    let app = route_app_with(pool, Clock::Fixed(NOW), move |settings| {
        settings.paypal.paypal_cert_dir = Some(dir);
        settings.sources.extend(sources);
    })
    .await;
    let body = capture_completed("WH-EU-1", "7GG279541U471931P", "user_pp", "4.00");
    let own = Signed {
        webhook_id: OWN_ID.into(),
        ..Signed::default()
    };
    let response = app
        .post_to("shop_eu", body.clone().into_bytes(), &own.headers(&body))
        .await;
    assert_eq!(outcome(response).await, "processed");
    // Signed for another endpoint's id: refused.
    let other = Signed::default().headers(&body);
    let refused = app
        .post_to("shop_eu", body.clone().into_bytes(), &other)
        .await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    // The built-in source has no webhook id here: not mounted.
    let absent = app
        .post_to("paypal", body.clone().into_bytes(), &other)
        .await;
    assert_eq!(absent.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        stored(&app, "WH-EU-1").await,
        [("paypal".to_owned(), Some("shop_eu".to_owned()))]
    );
    assert_eq!(app.balance("user_pp", "USD").await, Some(400));
    app.assert_consistent().await;
}

#[test]
fn a_source_configured_badly_is_refused_naming_the_variable_never_its_value() {
    for (pairs, variable) in [
        (
            vec![("WEBHOOKD_SOURCE_CONNECTED_SCHEME", "stripe")],
            "WEBHOOKD_SOURCE_CONNECTED_SECRET",
        ),
        (
            vec![
                ("WEBHOOKD_SOURCE_CONNECTED_SCHEME", "stripe"),
                ("WEBHOOKD_SOURCE_CONNECTED_SECRET", "whsec_hunter2"),
                ("WEBHOOKD_SOURCE_CONNECTED_EFFECTS", "bogus"),
            ],
            "WEBHOOKD_SOURCE_CONNECTED_EFFECTS",
        ),
        (
            vec![
                ("WEBHOOKD_SOURCE_CONNECTED_SCHEME", "stripe"),
                ("WEBHOOKD_SOURCE_CONNECTED_SECRET", "whsec_hunter2"),
                ("WEBHOOKD_SOURCE_CONNECTED_OWNER", "bogus"),
            ],
            "WEBHOOKD_SOURCE_CONNECTED_OWNER",
        ),
        (
            vec![("WEBHOOKD_SOURCE_STRIPE_OWNER", "bogus")],
            "WEBHOOKD_SOURCE_STRIPE_OWNER",
        ),
        (
            vec![("WEBHOOKD_SOURCE_PAYPAL_OWNER", "metadata.user_id")],
            "WEBHOOKD_SOURCE_PAYPAL_OWNER",
        ),
        (
            vec![(
                "WEBHOOKD_SOURCE_RAZORPAY_OWNER",
                "metadata.user_id,customer",
            )],
            "WEBHOOKD_SOURCE_RAZORPAY_OWNER",
        ),
        (
            vec![("WEBHOOKD_SOURCE_STRIPE_OWNER", "custom_id")],
            "WEBHOOKD_SOURCE_STRIPE_OWNER",
        ),
        (
            vec![("WEBHOOKD_SOURCE_STRIPE_SCHEME", "razorpay")],
            "WEBHOOKD_SOURCE_STRIPE_SCHEME",
        ),
        (
            vec![("WEBHOOKD_SOURCE_STRIPE_SECRET", "whsec_hunter2")],
            "STRIPE_WEBHOOK_SECRET",
        ),
        (
            vec![("WEBHOOKD_SOURCE_PAYPAL_WEBHOOK_ID", "WH1")],
            "PAYPAL_WEBHOOK_ID",
        ),
        (
            vec![("WEBHOOKD_SOURCE_PP2_SCHEME", "paypal")],
            "WEBHOOKD_SOURCE_PP2_WEBHOOK_ID",
        ),
        (
            vec![
                ("WEBHOOKD_SOURCE_PP2_SCHEME", "paypal"),
                ("WEBHOOKD_SOURCE_PP2_WEBHOOK_ID", "WEBHOOK_ID"),
            ],
            "WEBHOOKD_SOURCE_PP2_WEBHOOK_ID",
        ),
        (
            vec![
                ("WEBHOOKD_SOURCE_RZP2_SCHEME", "razorpay"),
                ("WEBHOOKD_SOURCE_RZP2_SECRET", "hunter2"),
                ("WEBHOOKD_SOURCE_RZP2_INVOICE_CREDITS", "true"),
            ],
            "WEBHOOKD_SOURCE_RZP2_INVOICE_CREDITS",
        ),
        (
            vec![
                ("WEBHOOKD_SOURCE_GH_SCHEME", "github"),
                ("WEBHOOKD_SOURCE_GH_SECRET", "hunter2"),
                ("WEBHOOKD_SOURCE_GH_EFFECTS", "apply"),
            ],
            "WEBHOOKD_SOURCE_GH_EFFECTS",
        ),
        (
            vec![("WEBHOOKD_SOURCE_GHOST_OWNER", "customer")],
            "WEBHOOKD_SOURCE_GHOST_SCHEME",
        ),
        (
            vec![("WEBHOOKD_SOURCE_GH_SECRETS", "hunter2")],
            "WEBHOOKD_SOURCE_GH_SECRETS",
        ),
        (
            vec![
                ("WEBHOOKD_SOURCE_LIVE_SCHEME", "stripe"),
                ("WEBHOOKD_SOURCE_LIVE_SECRET", "whsec_hunter2"),
                ("WEBHOOKD_SOURCE_LIVE_LIVEMODE", "maybe"),
            ],
            "WEBHOOKD_SOURCE_LIVE_LIVEMODE",
        ),
    ] {
        let error = sources_from_env(vars(&pairs)).unwrap_err().to_string();
        assert!(error.contains(variable), "{pairs:?}: {error}");
        assert_eq!(error.lines().count(), 1, "one line: {error}");
        for quoted in ["hunter2", "bogus", "maybe", "WH1"] {
            assert!(!error.contains(quoted), "{pairs:?} quoted a value: {error}");
        }
    }
}

#[test]
fn the_built_in_sources_take_their_settings_and_an_empty_variable_is_unset() {
    let sources = configured(&[
        (
            "WEBHOOKD_SOURCE_STRIPE_OWNER",
            "metadata.account_id,customer",
        ),
        ("WEBHOOKD_SOURCE_STRIPE_INVOICE_CREDITS", "true"),
        // Read by the built-in source's own flags, with the sweep's key.
        ("WEBHOOKD_SOURCE_STRIPE_LIVEMODE", "true"),
        ("WEBHOOKD_SOURCE_RAZORPAY_EFFECTS", ""),
        ("WEBHOOKD_SOURCE_CONNECTED_SCHEME", "stripe"),
        ("WEBHOOKD_SOURCE_CONNECTED_SECRET", "a, b"),
        ("WEBHOOKD_SOURCE_CONNECTED_CONNECT", "true"),
        ("WEBHOOKD_SOURCE_PP2_SCHEME", "paypal"),
        ("WEBHOOKD_SOURCE_PP2_WEBHOOK_ID", "8PT597110X687430LKGECATA"),
    ]);
    let summary: Vec<_> = sources
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.is_built_in(),
                s.owner.as_ref().map(ToString::to_string),
                s.invoice_credits,
                s.connect,
                s.secrets.iter().count(),
                s.webhook_ids.len(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("connected", false, None, false, true, 2, 0),
            ("pp2", false, None, false, false, 0, 1),
            (
                "stripe",
                true,
                Some("metadata.account_id,customer".to_owned()),
                true,
                false,
                0,
                0
            ),
        ]
    );
}
