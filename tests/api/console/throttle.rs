//! A guessing attack from many addresses: it empties the bucket of all
//! clients, which then refuses every presented token, the right one too (so
//! the guessing rate stays bounded), while sessions already open go on
//! working; the attack shows in `/metrics`.

use std::net::{IpAddr, Ipv4Addr};

use reqwest::StatusCode;
use reqwest::header;
use sqlx::PgPool;
use webhookd::clock::Clock;

use super::{Browser, Credentials, TOKEN, console_app, no_redirects};
use crate::helpers::{TestApp, now};

/// A client connecting from `127.0.1.{n}` (any 127/8 address is this
/// host's), so that the console sees another peer address.
fn client_from(n: u8) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 1, n)))
        .build()
        .unwrap()
}

/// `webhookd_console_auth_throttled_total{scope}` as `/metrics` says it.
async fn throttled(app: &TestApp, scope: &str) -> Option<u64> {
    let metrics = app.metrics().await;
    let prefix = format!("webhookd_console_auth_throttled_total{{scope=\"{scope}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|value| value.parse().unwrap())
}

#[sqlx::test]
async fn guesses_from_many_addresses_lock_out_new_tokens_but_never_an_open_session(pool: PgPool) {
    let clock = Clock::manual(now());
    let app = console_app(pool, clock).await;
    let operator = Browser::logged_in(&app).await;
    let Credentials::Cookie(session) = operator.credentials.clone() else {
        unreachable!()
    };
    assert_eq!(throttled(&app, "global").await, Some(0), "counted from 0");
    assert_eq!(throttled(&app, "client").await, Some(0));

    // 61 wrong tokens, one from each of 61 addresses, by the form and as
    // bearers: the first 50 are compared, the rest refused unchecked.
    let mut answers = Vec::new();
    for n in 1..=61u8 {
        let client = client_from(n);
        let answer = if n % 2 == 0 {
            client
                .post(app.admin("/console/login"))
                .form(&[("token", format!("guess-{n}"))])
                .send()
                .await
        } else {
            client
                .get(app.admin("/console"))
                .bearer_auth(format!("guess-{n}"))
                .send()
                .await
        };
        answers.push(answer.unwrap().status());
    }
    let refused = |status| answers.iter().filter(|s| **s == status).count();
    assert_eq!(refused(StatusCode::UNAUTHORIZED), 50);
    assert_eq!(refused(StatusCode::TOO_MANY_REQUESTS), 11);

    // The session opened before goes on: pages, and an action with its
    // CSRF token, even when the request also carries some bearer token.
    let page = operator.page("/console/outbox").await;
    let retried = operator
        .post(
            "/console/outbox/retry",
            &[("csrf", &page.csrf()), ("max_id", "0")],
        )
        .await;
    retried.assert_status(StatusCode::SEE_OTHER, "an action of the session");
    let with_bearer = no_redirects()
        .get(app.admin("/console/events"))
        .header(header::COOKIE, format!("webhookd_console={session}"))
        .bearer_auth("a-stale-token-a-proxy-adds")
        .send()
        .await
        .unwrap();
    assert_eq!(with_bearer.status(), StatusCode::OK, "the session counts");

    // A presented token, even the right one, waits: the guessing rate
    // stays bounded.
    let bearer = Browser::bearer(&app).get("/console").await;
    bearer.assert_status(StatusCode::TOO_MANY_REQUESTS, "the right bearer");
    assert!(bearer.headers.contains_key(header::RETRY_AFTER));
    let login = Browser::anonymous(&app)
        .post("/console/login", &[("token", TOKEN)])
        .await;
    login.assert_status(StatusCode::TOO_MANY_REQUESTS, "the right login");

    // The attack is counted: every refusal by the bucket of all.
    assert_eq!(throttled(&app, "global").await, Some(13));
    assert_eq!(throttled(&app, "client").await, Some(0));
}
