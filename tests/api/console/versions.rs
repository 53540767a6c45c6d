//! Stripe API versions (`WEBHOOKD_SOURCE_<NAME>_API_VERSION`): each
//! snapshot event's `api_version` is stored; an event of another version
//! than its source expects is applied, counted in
//! `webhookd_stripe_api_version_events_total`, and shown on the console's
//! overview and event page, so that an upgrade with two endpoints can be
//! watched.

use serde_json::Value;
use sqlx::PgPool;
use webhookd::clock::Clock;
use webhookd::config::sources_from_env;
use webhookd::providers::stripe::signature_header;

use super::{Browser, TOKEN};
use crate::helpers::{TestApp, now, payment_intent_succeeded, spawn_app_with};

const NEXT_SECRET: &str = "whsec_the_next_version";

/// The console's app, the source `stripe` pinned to 2024-06-20 and the
/// source `stripe_next` to 2025-03-31.basil.
async fn app(pool: PgPool) -> TestApp {
    let sources = sources_from_env(
        [
            ("WEBHOOKD_SOURCE_STRIPE_API_VERSION", "2024-06-20"),
            ("WEBHOOKD_SOURCE_STRIPE_NEXT_SCHEME", "stripe"),
            ("WEBHOOKD_SOURCE_STRIPE_NEXT_SECRET", NEXT_SECRET),
            (
                "WEBHOOKD_SOURCE_STRIPE_NEXT_API_VERSION",
                "2025-03-31.basil",
            ),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    )
    .expect("the sources are valid");
    spawn_app_with(pool, Clock::System, |settings| {
        settings.admin.admin_token = webhookd::config::AdminToken::new(TOKEN);
        settings.sources.extend(sources);
    })
    .await
}

/// A payment intent's event rendered in `version`.
fn in_version(event_id: &str, intent: &str, version: &str) -> String {
    let mut body: Value =
        serde_json::from_str(&payment_intent_succeeded(event_id, intent, "user_1", 100)).unwrap();
    body["api_version"] = version.into();
    body.to_string()
}

async fn post_next(app: &TestApp, body: &str) -> String {
    let header = signature_header(NEXT_SECRET, now(), body.as_bytes());
    let headers = [("stripe-signature".to_owned(), header)];
    let response = app
        .post_to("stripe_next", body.as_bytes().to_vec(), &headers)
        .await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    answer["outcome"].as_str().unwrap().to_owned()
}

#[sqlx::test]
async fn events_of_another_api_version_are_applied_counted_and_shown(pool: PgPool) {
    let app = app(pool).await;
    app.deliver(&in_version("evt_old", "pi_old", "2024-06-20"), "processed")
        .await;
    // The new version reaching the old endpoint: applied all the same.
    app.deliver(
        &in_version("evt_new_on_old", "pi_new_on_old", "2025-03-31.basil"),
        "processed",
    )
    .await;
    assert_eq!(
        post_next(&app, &in_version("evt_new", "pi_new", "2025-03-31.basil")).await,
        "processed"
    );
    // Not a version: stored as none, counted nowhere.
    app.deliver(&in_version("evt_odd", "pi_odd", "<script>"), "processed")
        .await;
    assert_eq!(app.balance("user_1", "USD").await, Some(400));

    let versions: Vec<(String, Option<String>)> =
        sqlx::query_as("select event_id, api_version from processed_events order by event_id")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        versions,
        [
            ("evt_new".into(), Some("2025-03-31.basil".into())),
            ("evt_new_on_old".into(), Some("2025-03-31.basil".into())),
            ("evt_odd".into(), None),
            ("evt_old".into(), Some("2024-06-20".into())),
        ]
    );

    let metrics = app.metrics().await;
    for line in [
        r#"webhookd_stripe_api_version_events_total{source="stripe",api_version="2024-06-20",expected="yes"} 1"#,
        r#"webhookd_stripe_api_version_events_total{source="stripe",api_version="2025-03-31.basil",expected="no"} 1"#,
        r#"webhookd_stripe_api_version_events_total{source="stripe_next",api_version="2025-03-31.basil",expected="yes"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }

    let browser = Browser::bearer(&app);
    let overview = browser.page("/console").await;
    assert!(
        overview.body.contains("Stripe API versions received"),
        "{}",
        overview.body
    );
    assert!(
        overview
            .body
            .contains("<td>stripe</td><td>2025-03-31.basil</td><td class=\"bad\">another version</td><td>1</td>"),
        "{}",
        overview.body
    );
    let event = browser
        .page("/console/event?provider=stripe&id=evt_new_on_old")
        .await;
    assert!(
        event.body.contains(
            "2025-03-31.basil <span class=\"bad\">(the source expects 2024-06-20)</span>"
        ),
        "{}",
        event.body
    );
    let expected = browser
        .page("/console/event?provider=stripe&id=evt_new")
        .await;
    assert!(
        expected
            .body
            .contains("<dt>API version</dt><dd>2025-03-31.basil</dd>")
    );
    app.assert_consistent().await;
}

#[test]
fn an_api_version_that_is_not_one_is_refused_at_start_up() {
    for (source, value) in [
        ("WEBHOOKD_SOURCE_STRIPE_API_VERSION", "latest"),
        ("WEBHOOKD_SOURCE_STRIPE_API_VERSION", "2024-6-20"),
    ] {
        let error = sources_from_env([(source.to_owned(), value.to_owned())]).unwrap_err();
        assert!(
            error.to_string().contains("a Stripe API version"),
            "{error}"
        );
    }
    let error = sources_from_env(
        [
            ("WEBHOOKD_SOURCE_GH_SCHEME", "github"),
            ("WEBHOOKD_SOURCE_GH_SECRET", "s"),
            ("WEBHOOKD_SOURCE_GH_API_VERSION", "2024-06-20"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    )
    .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("only a Stripe source has this setting"),
        "{error}"
    );
}
