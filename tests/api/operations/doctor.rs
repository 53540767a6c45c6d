//! `webhookd doctor`: each check against what it looks at (a fake of
//! Stripe's API, a receiver that answers or none, a database migrated or
//! not, a clock set ahead), its status and its fix; and the binary's JSON
//! and exit code.

use std::process::Command;

use axum::Router;
use axum::http::StatusCode;
use serde_json::Value;
use sqlx::PgPool;
use webhookd::arrivals::Arrivals;
use webhookd::clock::Clock;
use webhookd::config::{AdminListen, ServeSettings};
use webhookd::doctor::{Check, Status};
use webhookd::effects::stripe::HANDLED_TYPES;
use webhookd::http::metrics::Scraped;
use webhookd::secrets::parse_secrets;

use crate::fakes::stripe::{FakeStripe, webhook_endpoint};
use crate::helpers::{SECRET, now};
use crate::service::lifecycle::database_url;

const KEY: &str = "sk_test_doctor";
const PUBLIC: &str = "https://hooks.example.com";
const OURS: &str = "https://hooks.example.com/webhooks/stripe";

/// A set-up with the source `stripe`, its API on `api`, this service at
/// [`PUBLIC`], the admin listener on loopback with a console.
fn settings(api: &str) -> ServeSettings {
    let mut settings = ServeSettings {
        stripe_webhook_secret: parse_secrets(SECRET).unwrap(),
        public_url: Some(PUBLIC.to_owned()),
        ..ServeSettings::default()
    };
    settings.sweep.stripe.stripe_api_key = Some(KEY.into());
    settings.sweep.stripe.stripe_api_base = api.to_owned();
    settings.admin.admin_listen = Some(AdminListen(Some("127.0.0.1:9090".parse().unwrap())));
    settings.admin.admin_token = webhookd::config::AdminToken::new("0123456789abcdef0123");
    settings
}

async fn doctor(settings: &ServeSettings, pool: &PgPool, clock: &Clock) -> Vec<Check> {
    webhookd::startup::examine(settings, pool, clock).await
}

fn find<'a>(checks: &'a [Check], name: &str) -> &'a Check {
    (checks.iter().find(|c| c.check == name))
        .unwrap_or_else(|| panic!("no check {name} in {checks:#?}"))
}

#[sqlx::test]
async fn each_wrong_stripe_endpoint_is_a_failure_with_its_fix(pool: PgPool) {
    let every: Vec<&str> = HANDLED_TYPES.to_vec();
    let but_checkout: Vec<&str> = (every.iter().copied())
        .filter(|t| *t != "checkout.session.completed")
        .collect();
    let staging = "https://staging.example.com/webhooks/stripe";
    #[allow(clippy::type_complexity)]
    let cases: [(&str, Vec<Value>, Option<&str>, Status, &[&str], &[&str]); 6] = [
        (
            "no endpoint for this URL",
            vec![webhook_endpoint(
                "we_staging",
                staging,
                "enabled",
                &["*"],
                None,
            )],
            None,
            Status::Fail,
            &[
                "points at https://hooks.example.com/webhooks/stripe",
                "staging.example.com",
            ],
            &[
                "Add endpoint",
                "STRIPE_WEBHOOK_SECRET",
                "webhookd sweep stripe --since",
            ],
        ),
        (
            "a disabled endpoint",
            vec![webhook_endpoint("we_off", OURS, "disabled", &["*"], None)],
            None,
            Status::Fail,
            &["we_off", "disabled"],
            &["disabled=false", "webhookd sweep stripe --since 72h"],
        ),
        (
            "an endpoint missing checkout.session.completed",
            vec![webhook_endpoint(
                "we_some",
                OURS,
                "enabled",
                &but_checkout,
                None,
            )],
            None,
            Status::Fail,
            &["not subscribed to checkout.session.completed"],
            &["add them", "webhookd sweep stripe"],
        ),
        (
            "the wrong API version",
            vec![webhook_endpoint(
                "we_old",
                OURS,
                "enabled",
                &every,
                Some("2023-10-16"),
            )],
            Some("2024-06-20"),
            Status::Fail,
            &[
                "2023-10-16",
                "expects 2024-06-20",
                "WEBHOOKD_SOURCE_STRIPE_API_VERSION",
            ],
            &["agree"],
        ),
        (
            "everything right",
            vec![
                webhook_endpoint("we_staging", staging, "enabled", &["*"], None),
                webhook_endpoint(
                    "we_good",
                    &format!("{OURS}/"),
                    "enabled",
                    &every,
                    Some("2024-06-20"),
                ),
            ],
            Some("2024-06-20"),
            Status::Ok,
            &["we_good is enabled", "API version 2024-06-20"],
            &[],
        ),
        (
            "one disabled, one right: the right one is enough",
            vec![
                webhook_endpoint("we_off", OURS, "disabled", &["*"], None),
                webhook_endpoint("we_all", OURS, "enabled", &["*"], None),
            ],
            None,
            Status::Ok,
            &["we_all", "every event (`*`)", "2 endpoints point here"],
            &[],
        ),
    ];
    for (case, endpoints, expected_version, status, details, fixes) in cases {
        let stripe = FakeStripe::start(KEY, Vec::new()).await;
        endpoints
            .into_iter()
            .for_each(|e| stripe.add_webhook_endpoint(e));
        let mut settings = settings(&stripe.base_url());
        if let Some(version) = expected_version {
            let mut source = webhookd::config::SourceSettings::new(
                "stripe",
                webhookd::config::SourceScheme::Stripe,
                Default::default(),
            );
            source.api_version = Some(version.to_owned());
            settings.sources.push(source);
        }
        let checks = doctor(&settings, &pool, &Clock::System).await;
        let check = find(&checks, "endpoint.stripe");
        assert_eq!(check.status, status, "{case}: {check:#?}");
        for said in details {
            assert!(
                check.detail.contains(said),
                "{case}: {said:?} in {check:#?}"
            );
        }
        for said in fixes {
            assert!(check.fix.contains(said), "{case}: {said:?} in {check:#?}");
        }
        assert_eq!(status == Status::Ok, check.fix.is_empty(), "{case}");
        let listed = (stripe.requests().into_iter())
            .filter(|r| r.path == "/v1/webhook_endpoints")
            .collect::<Vec<_>>();
        assert!(
            listed.iter().all(|r| r.authorized),
            "{case}: the key on every request"
        );
        assert_eq!(
            find(&checks, "clock").status,
            Status::Ok,
            "{case}: Stripe's Date agrees"
        );
        assert!(find(&checks, "clock").detail.contains("Stripe's"), "{case}");
    }
}

#[sqlx::test]
async fn the_endpoints_are_read_page_after_page_and_a_refused_key_says_so(pool: PgPool) {
    let stripe = FakeStripe::start(KEY, Vec::new()).await;
    // 150 endpoints elsewhere, then ours last in list order: the second page.
    for n in 0..150 {
        let mut endpoint = webhook_endpoint(
            &format!("we_{n:03}"),
            "https://x.example/h",
            "enabled",
            &["*"],
            None,
        );
        endpoint["created"] = (1_800_000_000 - n).into();
        stripe.add_webhook_endpoint(endpoint);
    }
    stripe.add_webhook_endpoint(webhook_endpoint("we_ours", OURS, "enabled", &["*"], None));
    let checks = doctor(&settings(&stripe.base_url()), &pool, &Clock::System).await;
    assert_eq!(
        find(&checks, "endpoint.stripe").status,
        Status::Ok,
        "{checks:#?}"
    );
    let pages = stripe
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/webhook_endpoints")
        .count();
    assert_eq!(pages, 2);

    let mut refused = settings(&stripe.base_url());
    refused.sweep.stripe.stripe_api_key = Some("sk_test_wrong".into());
    let checks = doctor(&refused, &pool, &Clock::System).await;
    let check = find(&checks, "endpoint.stripe");
    assert_eq!(check.status, Status::Fail, "{check:#?}");
    assert!(check.fix.contains("Webhook Endpoints"), "{check:#?}");
    assert!(
        !check.detail.contains("sk_test_wrong"),
        "the key is never shown"
    );

    let mut unset = settings(&stripe.base_url());
    unset.public_url = None;
    let checks = doctor(&unset, &pool, &Clock::System).await;
    let check = find(&checks, "endpoint.stripe");
    assert_eq!(check.status, Status::Warn, "{check:#?}");
    assert!(check.fix.contains("WEBHOOKD_PUBLIC_URL"), "{check:#?}");
}

#[sqlx::test(migrations = false)]
async fn a_database_without_migrations_fails_and_its_traffic_is_not_read(pool: PgPool) {
    let stripe = FakeStripe::start(KEY, Vec::new()).await;
    let checks = doctor(&settings(&stripe.base_url()), &pool, &Clock::System).await;
    assert_eq!(find(&checks, "database").status, Status::Ok);
    let migrations = find(&checks, "migrations");
    assert_eq!(migrations.status, Status::Fail, "{migrations:#?}");
    assert!(migrations.detail.contains("not applied"), "{migrations:#?}");
    assert!(
        migrations.fix.contains("webhookd migrate"),
        "{migrations:#?}"
    );
    assert!(
        !checks
            .iter()
            .any(|c| c.check.starts_with("outbox") || c.check.starts_with("deliveries")),
        "{checks:#?}"
    );
}

#[sqlx::test]
async fn a_clock_past_the_tolerance_fails_and_one_within_it_passes(pool: PgPool) {
    let stripe = FakeStripe::start(KEY, Vec::new()).await;
    stripe.add_webhook_endpoint(webhook_endpoint("we_ours", OURS, "enabled", &["*"], None));
    let settings = settings(&stripe.base_url());
    let tolerance = i64::try_from(settings.tolerance_secs).unwrap();
    for (skew, status, said) in [
        (
            tolerance + 60,
            Status::Fail,
            "6 min ahead of the database's",
        ),
        (-(tolerance + 60), Status::Fail, "behind Stripe's"),
        (tolerance / 2, Status::Warn, "ahead of"),
        (0, Status::Ok, "5 min either way"),
    ] {
        let clock = Clock::Fixed(now() + skew);
        let checks = doctor(&settings, &pool, &clock).await;
        let check = find(&checks, "clock");
        assert_eq!(check.status, status, "{skew}: {check:#?}");
        assert!(
            check.detail.contains(said),
            "{skew}: {said:?} in {check:#?}"
        );
        if status != Status::Ok {
            assert!(check.fix.contains("NTP"), "{check:#?}");
        }
    }
}

/// A receiver that answers every request 204, on a free port.
async fn receiver() -> String {
    answering(StatusCode::NO_CONTENT).await
}

/// A receiver that answers every request `status`, on a free port.
async fn answering(status: StatusCode) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = Router::new().fallback(move || async move { status });
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}/hooks")
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[sqlx::test]
async fn the_binary_prints_one_stable_object_a_check_and_exits_1_on_a_failure(pool: PgPool) {
    let stripe = FakeStripe::start(KEY, Vec::new()).await;
    stripe.add_webhook_endpoint(webhook_endpoint("we_ours", OURS, "enabled", &["*"], None));
    let up = receiver().await;
    let down = format!("http://127.0.0.1:{}/hooks", closed_port());
    // The binary runs on a thread of its own: this runtime's thread serves
    // the fake and the receiver meanwhile.
    let run = async |sink: &str, json: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_webhookd"));
        command.env_clear().args(["doctor"]).envs([
            ("DATABASE_URL", database_url(&pool).as_str()),
            ("STRIPE_WEBHOOK_SECRET", SECRET),
            ("STRIPE_API_KEY", KEY),
            ("WEBHOOKD_STRIPE_API_BASE", &stripe.base_url()),
            ("WEBHOOKD_PUBLIC_URL", PUBLIC),
            ("WEBHOOKD_SOURCE_STRIPE_LIVEMODE", "false"),
            ("WEBHOOKD_SINK_URL", sink),
            (
                "WEBHOOKD_SINK_SECRET",
                "whsec_Y2hhb3Mtc2luay1zaWduaW5nLWtleQ==",
            ),
            ("WEBHOOKD_ADMIN_TOKEN", "0123456789abcdef0123"),
        ]);
        if json {
            command.arg("--json");
        }
        let output = tokio::task::spawn_blocking(move || command.output().unwrap());
        let output = output.await.unwrap();
        (
            output.status.code(),
            String::from_utf8(output.stdout).unwrap(),
        )
    };

    let (code, stdout) = run(&up, true).await;
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<&str> = lines.iter().map(|l| l["check"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "config",
            "database",
            "migrations",
            "clock",
            "admin",
            "mode.stripe",
            "sink.default",
            "endpoint.stripe",
            "deliveries.stripe",
            "waiting",
            "outbox.default",
            "sweep.stripe",
        ],
        "{stdout}"
    );
    for line in &lines {
        let keys: Vec<&String> = line.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["check", "detail", "fix", "status"], "{line}");
        assert!(
            ["ok", "warn", "fail"].contains(&line["status"].as_str().unwrap()),
            "{line}"
        );
    }
    let status = |name: &str| lines.iter().find(|l| l["check"] == name).unwrap()["status"].clone();
    assert_eq!(status("sink.default"), "ok", "{stdout}");
    assert_eq!(status("endpoint.stripe"), "ok", "{stdout}");
    assert_eq!(
        status("deliveries.stripe"),
        "warn",
        "nothing has arrived: {stdout}"
    );
    assert_eq!(code, Some(0), "warnings only: {stdout}");

    let (code, stdout) = run(&down, true).await;
    let sink = (stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()))
    .find(|l| l["check"] == "sink.default")
    .unwrap();
    assert_eq!(sink["status"], "fail", "{stdout}");
    assert!(
        sink["detail"].as_str().unwrap().contains("did not answer"),
        "{sink}"
    );
    assert!(
        sink["fix"].as_str().unwrap().contains("WEBHOOKD_SINK_URL"),
        "{sink}"
    );
    assert!(
        !stdout.contains("/hooks"),
        "the URL's path is not shown: {stdout}"
    );
    assert_eq!(code, Some(1), "a failure exits 1");

    let (code, text) = run(&down, false).await;
    assert_eq!(code, Some(1));
    assert!(
        text.lines().any(|l| l.starts_with("fail  sink.default")),
        "{text}"
    );
    assert!(text.contains("fix: start the receiver"), "{text}");
    assert!(
        text.ends_with("fail\n") && text.contains(" ok, "),
        "the summary last: {text}"
    );
}

#[sqlx::test]
async fn a_source_silent_for_longer_than_usual_is_said_and_exported(pool: PgPool) {
    let start = 1_800_000_000; // on the hour
    let clock = Clock::manual(start);
    let arrivals = Arrivals::new(clock.clone());
    let minutes = |n: u64| std::time::Duration::from_secs(n * 60);
    // Deliveries at :10 and :50 of every hour for a day (each hour written
    // in two flushes, so that the rows merge), then none until 2 h 50 min
    // after the last: the longest silence of the fortnight, measured from
    // the last delivery to the next (the hours' starts would say 3 h).
    clock.advance(minutes(10));
    for _ in 0..24 {
        arrivals.note("stripe");
        arrivals.flush(&pool).await;
        clock.advance(minutes(40));
        arrivals.note("stripe");
        arrivals.flush(&pool).await;
        clock.advance(minutes(20));
    }
    clock.advance(minutes(170 - 20));
    arrivals.note("stripe");
    arrivals.flush(&pool).await;
    let last = clock.now();

    let scraped = Scraped::read(&pool).await.render();
    assert!(
        scraped.contains(&format!(
            "webhookd_source_last_event_timestamp_seconds{{source=\"stripe\"}} {last}"
        )),
        "{scraped}"
    );
    assert!(
        scraped.contains("webhookd_source_usual_gap_seconds{source=\"stripe\"} 10200"),
        "{scraped}"
    );

    let stripe = FakeStripe::start(KEY, Vec::new()).await;
    let settings = settings(&stripe.base_url());
    let hours = |n: i64| n * 3_600;
    for (silent_for, status) in [
        (hours(1), Status::Ok),
        (hours(5), Status::Warn),
        (hours(9), Status::Fail),
        // Past the fortnight the gap is still known: never an all-clear.
        (hours(15 * 24), Status::Fail),
    ] {
        let at = Clock::Fixed(last + silent_for);
        let checks = doctor(&settings, &pool, &at).await;
        let check = find(&checks, "deliveries.stripe");
        assert_eq!(check.status, status, "{silent_for}: {check:#?}");
        assert!(
            check
                .detail
                .contains("its longest silence was 2 h 50 min (49 deliveries)"),
            "{check:#?}"
        );
        if status != Status::Ok {
            assert!(
                check.fix.contains("webhookd sweep stripe --since"),
                "{check:#?}"
            );
        }
    }
    let counted: i64 = sqlx::query_scalar("select sum(deliveries)::bigint from source_arrivals")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(counted, 49, "every delivery counted once");
}

#[sqlx::test]
async fn a_verified_delivery_is_noted_and_a_dead_letter_fails(pool: PgPool) {
    let app = crate::helpers::spawn_app(pool.clone()).await;
    let body = crate::helpers::payment_intent_succeeded("evt_arrived", "pi_arrived", "user_a", 500);
    app.deliver(&body, "processed").await;
    // The first arrival of an hour is written at once, by the
    // application's own task: wait for it, not for a time.
    let mut written = 0;
    for _ in 0..500 {
        written = sqlx::query_scalar::<_, i64>(
            "select coalesce(sum(deliveries), 0)::bigint from source_arrivals where source = 'stripe'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if written > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(written, 1);

    let dead = sqlx::query("update outbox set dead_at = now() where delivered_at is null")
        .execute(&pool)
        .await
        .unwrap();
    assert!(dead.rows_affected() > 0, "the credit's row");
    let stripe = FakeStripe::start(KEY, Vec::new()).await;
    let checks = doctor(&settings(&stripe.base_url()), &pool, &Clock::System).await;
    assert_eq!(
        find(&checks, "deliveries.stripe").status,
        Status::Ok,
        "{checks:#?}"
    );
    let outbox = find(&checks, "outbox.default");
    assert_eq!(outbox.status, Status::Fail, "{outbox:#?}");
    assert!(
        outbox
            .fix
            .contains("webhookd outbox retry --all-dead --sink default"),
        "{outbox:#?}"
    );
}

#[sqlx::test]
async fn a_paypal_webhook_must_point_here_with_an_id_the_source_verifies_with(pool: PgPool) {
    use crate::fakes::paypal::FakePaypal;
    let ours = "https://hooks.example.com/webhooks/paypal";
    let capture_types = webhookd::effects::paypal::CAPTURE_TYPES.to_vec();
    #[allow(clippy::type_complexity)]
    let cases: [(&str, &str, &str, Vec<&str>, Status, &str); 4] = [
        (
            "right",
            "WH-1",
            ours,
            capture_types.clone(),
            Status::Ok,
            "WH-1 points here",
        ),
        (
            "another id",
            "WH-2",
            ours,
            vec!["*"],
            Status::Fail,
            "not among the ids",
        ),
        (
            "elsewhere",
            "WH-1",
            "https://staging.example.com/webhooks/paypal",
            vec!["*"],
            Status::Fail,
            "none of the REST app's 1 webhook(s) points at",
        ),
        (
            "no refunds",
            "WH-1",
            ours,
            vec!["PAYMENT.CAPTURE.COMPLETED"],
            Status::Fail,
            "PAYMENT.CAPTURE.REFUNDED",
        ),
    ];
    for (case, id, url, events, status, said) in cases {
        let paypal = FakePaypal::start("client", "secret", Vec::new()).await;
        paypal.add_webhook(id, url, &events);
        let mut settings = ServeSettings {
            public_url: Some(PUBLIC.to_owned()),
            ..ServeSettings::default()
        };
        settings.paypal.paypal_webhook_id = "WH-1".to_owned();
        settings.sweep.paypal.paypal_client_id = Some("client".to_owned());
        settings.sweep.paypal.paypal_client_secret = Some("secret".into());
        settings.sweep.paypal.paypal_api_base = paypal.base_url();
        let checks = doctor(&settings, &pool, &Clock::System).await;
        let check = find(&checks, "endpoint.paypal");
        assert_eq!(check.status, status, "{case}: {check:#?}");
        assert!(
            check.detail.contains(said),
            "{case}: {said:?} in {check:#?}"
        );
        let clock = find(&checks, "clock");
        assert!(clock.detail.contains("PayPal's"), "its Date: {clock:#?}");
        let listed = paypal
            .requests()
            .into_iter()
            .filter(|r| r.path == "/v1/notifications/webhooks");
        assert!(
            listed.map(|r| r.status).eq([200]),
            "{case}: one listing, with a token"
        );
    }
}

#[sqlx::test]
async fn a_sweep_that_recovers_events_or_fails_is_said(pool: PgPool) {
    let stripe = FakeStripe::start(KEY, Vec::new()).await;
    let settings = settings(&stripe.base_url());
    for (result, status, said) in [
        (
            r#"{"listed": 40, "recovered": 0}"#,
            Status::Ok,
            "40 event(s) listed, 0 recovered",
        ),
        (
            r#"{"listed": 40, "recovered": 3}"#,
            Status::Warn,
            "deliveries are failing",
        ),
        (
            r#"{"error": "stripe refused the API key (401)"}"#,
            Status::Fail,
            "failed: stripe refused",
        ),
    ] {
        sqlx::query(
            "insert into sweeps (provider, last_run_at, last_success_at, last_result)
             values ('stripe', now(), now(), $1::jsonb)
             on conflict (provider) do update set last_result = excluded.last_result",
        )
        .bind(result)
        .execute(&pool)
        .await
        .unwrap();
        let checks = doctor(&settings, &pool, &Clock::System).await;
        let check = find(&checks, "sweep.stripe");
        assert_eq!(check.status, status, "{result}: {check:#?}");
        assert!(check.detail.contains(said), "{said:?} in {check:#?}");
    }
    let mut unkeyed = settings.clone();
    unkeyed.sweep.stripe.stripe_api_key = None;
    let checks = doctor(&unkeyed, &pool, &Clock::System).await;
    let check = find(&checks, "sweep.stripe");
    assert_eq!(check.status, Status::Warn, "{check:#?}");
    assert!(check.fix.contains("STRIPE_API_KEY"), "{check:#?}");
}

#[sqlx::test]
async fn a_sink_that_answers_a_server_error_is_reached_but_troubled(pool: PgPool) {
    let stripe = FakeStripe::start(KEY, Vec::new()).await;
    let mut settings = settings(&stripe.base_url());
    settings.outbox.sink_url = Some(answering(StatusCode::BAD_GATEWAY).await.into());
    settings.outbox.sink_secret = Some("whsec_Y2hhb3Mtc2luay1zaWduaW5nLWtleQ==".into());
    let checks = doctor(&settings, &pool, &Clock::System).await;
    let check = find(&checks, "sink.default");
    assert_eq!(check.status, Status::Warn, "{check:#?}");
    assert!(check.detail.contains("502"), "{check:#?}");
}
