//! `webhookd sweep paypal` when PayPal refuses or misleads it: wrong client
//! credentials, tokens that expire or are revoked, hostile `next` links;
//! and the periodic sweep of PayPal.

use std::process::Command;

use serde_json::{Value, json};
use sqlx::PgPool;
use webhookd::clock::Clock;
use webhookd::config::ServeSettings;
use webhookd::sweep::schedule::{Sweeper, Target};

use crate::fakes::paypal::{FakePaypal, Next};
use crate::helpers::{now, spawn_app};
use crate::sweep::paypal::{CLIENT_ID, CLIENT_SECRET, api_args, captured, counts, recorded, sweep};

/// `count` capture events, a second apart, an hour ago.
fn captures(count: i64) -> Vec<Value> {
    let t = now() - 3600;
    (0..count)
        .map(|n| captured(&format!("WH-{n:04}"), t + n, "user_1"))
        .collect()
}

async fn paypal_rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from processed_events where provider = 'paypal'")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test]
async fn wrong_paypal_credentials_stop_at_once_and_the_secret_is_never_shown(pool: PgPool) {
    let fake = FakePaypal::start(CLIENT_ID, CLIENT_SECRET, captures(1)).await;
    let wrong = "EKwrong-secret-never-to-be-shown-9931";
    let command = |args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_webhookd"));
        command
            .args(args)
            .env(
                "DATABASE_URL",
                crate::service::lifecycle::database_url(&pool),
            )
            .env("PAYPAL_CLIENT_ID", CLIENT_ID)
            .env("PAYPAL_CLIENT_SECRET", wrong)
            .env("WEBHOOKD_PAYPAL_API_BASE", fake.base_url())
            .env("RUST_LOG", "debug")
            .env("WEBHOOKD_LOG_FORMAT", "json");
        // The fake answers on this runtime: wait for the process elsewhere.
        tokio::task::spawn_blocking(move || command.output().unwrap())
    };
    let swept = command(&["sweep", "paypal", "--since", "2h"])
        .await
        .unwrap();
    let help = command(&["sweep", "paypal", "--help"]).await.unwrap();
    let shown = |output: &std::process::Output| {
        String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr)
    };
    let (said, help) = (shown(&swept), shown(&help));
    assert_eq!(swept.status.code(), Some(1), "{said}");
    assert!(said.contains("paypal refused the API key (401)"), "{said}");
    assert!(said.contains("PAYPAL_CLIENT_ID"), "{said}");
    use base64::Engine;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{CLIENT_ID}:{wrong}"));
    for output in [&said, &help] {
        assert!(
            !output.contains(wrong) && !output.contains(&basic),
            "{output}"
        );
    }
    assert!(help.contains("PAYPAL_CLIENT_SECRET"), "{help}");
    let requests = fake.requests();
    assert_eq!(requests.len(), 1, "the refusal is not retried");
    assert_eq!(requests[0].path, "/v1/oauth2/token");
    assert_eq!(paypal_rows(&pool).await, 0);
}

#[sqlx::test]
async fn an_expired_paypal_token_is_bought_again_once(pool: PgPool) {
    let app = spawn_app(pool).await;
    let fake = FakePaypal::start(CLIENT_ID, CLIENT_SECRET, captures(150)).await;
    fake.expire_tokens_after(1);
    let summary = sweep(&app, &fake, false).await.unwrap();
    assert_eq!(counts(&summary), (150, 150, 0, 0), "{summary}");
    let requests = fake.requests();
    let asked: Vec<(&str, u16)> = (requests.iter())
        .map(|r| {
            (
                if r.path.ends_with("token") {
                    "token"
                } else {
                    "list"
                },
                r.status,
            )
        })
        .collect();
    let expected = [
        ("token", 200),
        ("list", 200),
        ("list", 401),
        ("token", 200),
        ("list", 200),
    ];
    assert_eq!(asked, expected);
    let listings = fake.listings();
    assert_eq!(listings[1].query, listings[2].query, "the same page again");
    assert_ne!(listings[1].authorization, listings[2].authorization);

    // A token refused again, however new: no third try.
    fake.revoke_every_token();
    let before = fake.requests().len();
    let error = sweep(&app, &fake, false).await.unwrap_err();
    assert!(
        format!("{error:#}").contains("paypal refused the API key (401)"),
        "{error:#}"
    );
    let statuses: Vec<u16> = fake.requests()[before..].iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 401, 200, 401], "token, list, token, list");
    app.assert_consistent().await;
}

#[sqlx::test]
async fn hostile_paypal_next_links_are_refused_before_anything_is_applied(pool: PgPool) {
    let app = spawn_app(pool).await;
    let fake = FakePaypal::start(CLIENT_ID, CLIENT_SECRET, captures(150)).await;
    fake.set_next(Next::On(
        "https://api-m.paypal.com.elsewhere.example".into(),
    ));
    let error = format!("{:#}", sweep(&app, &fake, false).await.unwrap_err());
    assert!(error.contains("another host"), "{error}");
    assert_eq!(
        fake.listings().len(),
        1,
        "nothing sent where the link points"
    );

    fake.set_next(Next::Stale);
    let error = format!("{:#}", sweep(&app, &fake, false).await.unwrap_err());
    assert!(error.contains("a page already read"), "{error}");
    assert_eq!(fake.listings().len(), 2, "never taken for the end");
    assert_eq!(paypal_rows(&app.pool).await, 0);

    // Links on PayPal's own host are followed, to the API base.
    fake.set_next(Next::On("https://api.paypal.com".into()));
    let summary = sweep(&app, &fake, false).await.unwrap();
    assert_eq!(counts(&summary), (150, 150, 0, 0), "{summary}");
}

#[sqlx::test]
async fn the_periodic_sweep_of_paypal_recovers_and_resumes_from_its_checkpoint(pool: PgPool) {
    let app = spawn_app(pool).await;
    let fake = FakePaypal::start(CLIENT_ID, CLIENT_SECRET, captures(1)).await;
    // `serve` sweeps PayPal once both credentials are set.
    let mut settings = ServeSettings::default();
    settings.sweep.paypal = api_args(&fake, CLIENT_SECRET);
    let configured = webhookd::startup::sweeper(&settings, app.pool.clone(), Clock::System);
    let providers: Vec<&str> = (configured.unwrap().unwrap().targets.iter())
        .map(|t| t.provider)
        .collect();
    assert_eq!(providers, ["paypal"]);

    let target = Target {
        provider: "paypal",
        api: webhookd::sweep::paypal::api(&api_args(&fake, CLIENT_SECRET)).unwrap(),
        window: webhookd::sweep::paypal::DEFAULT_WINDOW,
        source: webhookd::sweep::Swept::default(),
    };
    let interval = std::time::Duration::from_secs(600);
    let mut sweeper = Sweeper::new(app.pool.clone(), vec![target], interval, Clock::System);
    sweeper.run_once().await;
    assert_eq!(recorded(&app, "WH-0000").await.1, "sweep");
    let gap = app.delivery_gap().await;
    assert_eq!(
        (&gap["provider"], &gap["count"]),
        (&json!("paypal"), &json!(1))
    );
    let swept_until: i64 = sqlx::query_scalar(
        "select extract(epoch from swept_until)::bigint from sweeps where provider = 'paypal'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert!(
        (swept_until - (now() - 300)).abs() <= 5,
        "the last minutes are left alone"
    );

    // The next run starts at the checkpoint less the overlap, with the token it holds.
    sweeper.run_once().await;
    let last = fake.listings().pop().unwrap();
    let start = humantime::parse_rfc3339(&last.query[1].1).unwrap();
    let start = start
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert_eq!(start, swept_until - 600);
    let tokens = fake
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("token"))
        .count();
    assert_eq!(tokens, 1);
    app.assert_consistent().await;
}
