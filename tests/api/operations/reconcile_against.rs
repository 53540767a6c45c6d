//! `webhookd reconcile --against stripe|razorpay`: the ledger compared with
//! the provider's payments and refunds, against fakes of their APIs.

use serde_json::{Value, json};
use sqlx::PgPool;
use webhookd::cli::args::RetentionArgs;
use webhookd::cli::reconcile::{Against, ReconcileArgs};
use webhookd::cli::sweep::{RazorpaySweepArgs, SweepCommand};
use webhookd::clock::Clock;
use webhookd::config::{RazorpayApiArgs, StripeApiArgs};

use crate::effects::checkout::objects::Session;
use crate::fakes::razorpay::{FakeRazorpay, payment, refund};
use crate::fakes::stripe::FakeStripe;
use crate::helpers::{RAZORPAY_SECRETS, TestApp, now, payment_intent_succeeded, spawn_app};

const STRIPE_KEY: &str = "rk_test_audit";
const RZP: (&str, &str) = ("rzp_test_audit", "audit_secret");

fn args(stripe_base: &str, razorpay_base: &str) -> ReconcileArgs {
    ReconcileArgs {
        retention: RetentionArgs { retention_days: 30 },
        against: None,
        since: std::time::Duration::from_secs(7 * 86_400),
        stripe: StripeApiArgs {
            stripe_api_key: Some(STRIPE_KEY.into()),
            stripe_api_base: stripe_base.to_owned(),
            rate: 100,
            stripe_refresh_on_tie: None,
            scope: Default::default(),
        },
        razorpay: RazorpayApiArgs {
            razorpay_key_id: Some(RZP.0.to_owned()),
            razorpay_key_secret: Some(RZP.1.into()),
            razorpay_api_base: razorpay_base.to_owned(),
        },
    }
}

/// Runs `reconcile --against`: whether it passed, its finding lines, its JSON.
async fn reconcile(
    app: &TestApp,
    args: &ReconcileArgs,
    against: Against,
) -> (bool, Vec<String>, Value) {
    let mut out = Vec::new();
    let ok = webhookd::cli::reconcile::against(&app.pool, args, against, &Clock::System, &mut out)
        .await
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let report = serde_json::from_str(&lines.pop().unwrap()).unwrap();
    (ok, lines, report)
}

fn intent(id: &str, user: Option<&str>, amount: i64, status: &str, created: i64) -> Value {
    let metadata = user.map_or(json!({}), |user| json!({ "user_id": user }));
    json!({ "id": id, "object": "payment_intent", "amount": amount, "amount_received": amount,
            "currency": "usd", "metadata": metadata, "status": status, "created": created })
}

#[sqlx::test]
async fn the_ledger_is_compared_with_stripes_payments_and_every_difference_reported(pool: PgPool) {
    let app = spawn_app(pool).await;
    let t = now() - 3600;
    let fake = FakeStripe::start(STRIPE_KEY, vec![]).await;
    for intent in [
        intent("pi_ok", Some("user_1"), 1000, "succeeded", t),
        intent("pi_missing", Some("user_1"), 500, "succeeded", t + 1),
        intent("pi_refunded", Some("user_2"), 800, "succeeded", t + 2),
        intent("pi_no_owner", None, 400, "succeeded", t + 3),
        intent("pi_ghost", Some("user_3"), 900, "canceled", t + 4),
        // Paid through Checkout: its owner is the session's, learned.
        intent("pi_cs_ok", None, 1200, "succeeded", t + 6),
        // An older API's intent of an invoice: the invoice's, no wallet's.
        {
            let mut paying = intent("pi_invoice", None, 700, "succeeded", t + 7);
            paying["invoice"] = "in_audit".into();
            paying
        },
    ] {
        fake.add_payment_intent(intent);
    }
    let session = Session::paid("cs_audit", "pi_cs_ok", "user_cs", 1200);
    app.deliver(&session.completed("evt_cs_audit"), "processed")
        .await;
    // Stripe refunded 300 of pi_refunded; that refund was never delivered.
    fake.add_refund(json!({ "id": "re_1", "object": "refund", "amount": 300, "currency": "usd",
                            "payment_intent": "pi_refunded", "status": "succeeded", "created": t + 5 }));
    for (event, pi, user, amount) in [
        ("evt_ok", "pi_ok", "user_1", 1000),
        ("evt_refunded", "pi_refunded", "user_2", 800),
        ("evt_ghost", "pi_ghost", "user_3", 900),
    ] {
        app.deliver(
            &payment_intent_succeeded(event, pi, user, amount),
            "processed",
        )
        .await;
    }
    let args = args(&fake.base_url(), "http://127.0.0.1:9");
    let (ok, findings, report) = reconcile(&app, &args, Against::Stripe).await;
    assert!(!ok);
    assert_eq!(
        (
            &report["payments"],
            &report["matched"],
            &report["missing"],
            &report["mismatched"],
            &report["extra"]
        ),
        (&json!(5), &json!(2), &json!(2), &json!(1), &json!(1)),
        "{report}"
    );
    assert_eq!(report["users_mismatched"], 3, "{findings:?}");
    let has = |prefix: &str| findings.iter().any(|f| f.starts_with(prefix));
    assert!(
        has("MISSING stripe pi_missing: 500 USD to user_1"),
        "{findings:?}"
    );
    assert!(
        has("MISSING stripe pi_no_owner: 400 USD to (no owner) succeeded"),
        "money taken that no event names an owner for: {findings:?}"
    );
    assert!(!has("MISSING stripe pi_cs_ok"), "{findings:?}");
    assert!(
        !findings.iter().any(|f| f.contains("pi_invoice")),
        "{findings:?}"
    );
    assert!(has("MISMATCH stripe pi_refunded:"), "{findings:?}");
    assert!(
        has("EXTRA stripe pi_ghost: credited 900 USD to user_3, but stripe reports it as canceled"),
        "{findings:?}"
    );
    assert!(
        has("USER user_1 USD: stripe nets 1500, the ledger 1000"),
        "{findings:?}"
    );
}

#[sqlx::test]
async fn a_razorpay_ledger_that_a_sweep_completed_reconciles(pool: PgPool) {
    let app = spawn_app(pool).await;
    let t = now() - 3600;
    let fake = FakeRazorpay::start(
        RZP.0,
        RZP.1,
        vec![
            payment("pay_a", 5000, "captured", Some("user_1"), t),
            payment("pay_b", 2000, "captured", Some("user_1"), t + 1),
            payment("pay_c", 700, "failed", Some("user_1"), t + 2),
        ],
        vec![refund("rfnd_a", "pay_a", 1000, t + 3)],
    )
    .await;
    // Only pay_a and its refund were delivered.
    for (event, body) in [
        (
            "payment.captured",
            json!({ "payment": { "entity": payment("pay_a", 5000, "captured", Some("user_1"), t) } }),
        ),
        (
            "refund.processed",
            json!({ "refund": { "entity": refund("rfnd_a", "pay_a", 1000, t + 3) } }),
        ),
    ] {
        let contains: Vec<String> = body.as_object().unwrap().keys().cloned().collect();
        let body = json!({ "entity": "event", "event": event, "contains": contains,
                           "payload": body, "created_at": now() })
        .to_string();
        let signature =
            webhookd::providers::razorpay::signature(RAZORPAY_SECRETS.0, body.as_bytes());
        let headers = [
            ("x-razorpay-signature".to_owned(), signature),
            ("x-razorpay-event-id".to_owned(), format!("evt_{event}")),
        ];
        let response = app.post_to("razorpay", body.into_bytes(), &headers).await;
        assert_eq!(response.status(), reqwest::StatusCode::OK);
    }
    let args = args("http://127.0.0.1:9", &fake.base_url());
    let (ok, findings, report) = reconcile(&app, &args, Against::Razorpay).await;
    assert!(!ok);
    assert_eq!(
        (&report["matched"], &report["missing"]),
        (&json!(1), &json!(1)),
        "{report}"
    );
    assert_eq!(
        findings[0],
        "MISSING razorpay pay_b: 2000 INR to user_1 succeeded, never credited"
    );

    // The sweep applies what was missing; then the books agree.
    let sweep = SweepCommand::Razorpay(RazorpaySweepArgs {
        since: std::time::Duration::from_secs(24 * 3600),
        dry_run: false,
        api: args.razorpay.clone(),
    });
    webhookd::cli::sweep::sweep(&app.pool, &sweep, &[], &Clock::System, &mut Vec::new())
        .await
        .unwrap();
    let (ok, findings, report) = reconcile(&app, &args, Against::Razorpay).await;
    assert!(ok, "{findings:?} {report}");
    assert_eq!(
        (&report["matched"], &report["users_mismatched"]),
        (&json!(2), &json!(0))
    );
    app.assert_consistent().await;
}
