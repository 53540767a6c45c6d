//! Who may use the console: the token as a bearer or through the login
//! form's session cookie; sessions that expire, end, and cannot be forged;
//! logins that cannot send the browser elsewhere or guess the token fast.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header;
use sqlx::PgPool;
use webhookd::clock::Clock;

use super::{Browser, Credentials, Page, TOKEN, console_app, encoded, session_cookie};
use crate::helpers::{now, payment_intent_succeeded};

const TWELVE_HOURS: u64 = 12 * 3600;

/// The `Set-Cookie` of a login answer, its attributes apart.
fn cookie_attributes(login: &Page) -> Vec<String> {
    let set = login.headers[header::SET_COOKIE].to_str().unwrap();
    set.split(';')
        .skip(1)
        .map(|a| a.trim().to_owned())
        .collect()
}

#[sqlx::test]
async fn without_credentials_a_page_redirects_to_the_login_and_a_post_is_refused_holding_no_data(
    pool: PgPool,
) {
    let app = console_app(pool, Clock::System).await;
    app.deliver(
        &payment_intent_succeeded("evt_secret_1", "pi_secret_1", "user_secret", 2000),
        "processed",
    )
    .await;
    let anonymous = Browser::anonymous(&app);

    for path in [
        "/console",
        "/console/events/stripe/evt_secret_1",
        "/console/events?q=user_secret&outcome=processed",
        "/console/users/user_secret",
        "/console/outbox?state=pending",
    ] {
        let page = anonymous.get(path).await;
        page.assert_status(StatusCode::SEE_OTHER, path);
        assert_eq!(
            page.location(),
            format!("/console/login?next={}", encoded(path)),
            "back to {path} after the login"
        );
        for secret in ["evt_secret_1", "user_secret", "pi_secret_1"] {
            assert!(!page.body.contains(secret), "{path}: {}", page.body);
        }
    }
    // The login page it leads to keeps the way back.
    let login = anonymous
        .page(&format!(
            "/console/login?next={}",
            encoded("/console/events/stripe/evt_secret_1")
        ))
        .await;
    assert_eq!(
        login.input("next").as_deref(),
        Some("/console/events/stripe/evt_secret_1")
    );

    let outbox_id: i64 = sqlx::query_scalar("select id from outbox")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    for path in [
        format!("/console/outbox/{outbox_id}/retry"),
        "/console/events/stripe/evt_secret_1/replay".to_owned(),
        "/console/outbox/retry".to_owned(),
        "/console/logout".to_owned(),
    ] {
        let page = anonymous.post(&path, &[("max_id", "999")]).await;
        page.assert_status(StatusCode::UNAUTHORIZED, &path);
        for secret in ["evt_secret_1", "user_secret", "pi_secret_1"] {
            assert!(!page.body.contains(secret), "{path}: {}", page.body);
        }
    }
}

#[sqlx::test]
async fn a_wrong_bearer_token_is_refused_and_the_right_one_opens_the_page(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    app.deliver(
        &payment_intent_succeeded("evt_1", "pi_1", "user_1", 2000),
        "processed",
    )
    .await;
    let path = "/console/events/stripe/evt_1";
    for wrong in [
        Credentials::Bearer("not-the-token".to_owned()),
        Credentials::Bearer(format!("{TOKEN}x")),
        Credentials::Bearer(String::new()),
    ] {
        let browser = Browser {
            credentials: wrong.clone(),
            ..Browser::anonymous(&app)
        };
        let page = browser.get(path).await;
        page.assert_status(StatusCode::UNAUTHORIZED, &format!("{wrong:?}"));
        assert!(!page.body.contains("evt_1"), "{}", page.body);
    }
    // Not a bearer token at all (a proxy's Basic): left to the cookie, so
    // without one it is no credential, and the token in it opens nothing.
    let basic = Browser::anonymous(&app)
        .client
        .get(app.admin(path))
        .header(header::AUTHORIZATION, format!("Basic {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(basic.status(), StatusCode::SEE_OTHER);
    assert!(
        basic.headers()[header::LOCATION]
            .to_str()
            .unwrap()
            .starts_with("/console/login"),
    );
    assert!(!basic.text().await.unwrap().contains("evt_1"));

    let page = Browser::bearer(&app).page(path).await;
    assert!(page.body.contains("evt_1"));
    assert!(page.body.contains("payment_intent.succeeded"));
}

#[sqlx::test]
async fn logging_in_sets_a_strict_http_only_cookie_that_alone_opens_the_console(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    let anonymous = Browser::anonymous(&app);
    let wrong = anonymous
        .post("/console/login", &[("token", "not-the-token")])
        .await;
    wrong.assert_status(StatusCode::UNAUTHORIZED, "a wrong token");
    assert!(wrong.headers.get(header::SET_COOKIE).is_none());
    assert!(wrong.body.contains("That is not the admin token."));

    let login = anonymous
        .post(
            "/console/login",
            &[("token", TOKEN), ("next", "/console/outbox?state=dead")],
        )
        .await;
    login.assert_status(StatusCode::SEE_OTHER, "the right token");
    assert_eq!(login.location(), "/console/outbox?state=dead");
    let mut attributes = cookie_attributes(&login);
    attributes.sort();
    assert_eq!(
        attributes,
        [
            "HttpOnly",
            &format!("Max-Age={TWELVE_HOURS}"),
            "Path=/console",
            "SameSite=Strict",
        ],
        "no Secure over plain http"
    );
    let cookie = session_cookie(&login);
    assert!(!cookie.contains(TOKEN));

    let browser = Browser::with_cookie(&app, &cookie);
    let page = browser.page("/console/outbox?state=dead").await;
    assert!(page.body.contains("Log out"), "{}", page.body);
    assert!(!page.csrf().is_empty(), "a session's forms carry a token");

    // Behind a proxy that terminates TLS, the cookie is Secure.
    let behind_tls = anonymous
        .client
        .post(app.admin("/console/login"))
        .header("x-forwarded-proto", "https")
        .form(&[("token", TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(behind_tls.status(), StatusCode::SEE_OTHER);
    let set = behind_tls.headers()[header::SET_COOKIE].to_str().unwrap();
    assert!(
        set.split(';').any(|a| a.trim() == "Secure"),
        "Secure behind https: {set}"
    );
    assert_eq!(
        behind_tls.headers()[header::LOCATION],
        "/console",
        "no next: the overview"
    );
}

#[sqlx::test]
async fn a_tampered_or_forged_cookie_is_no_session(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    let good = match Browser::logged_in(&app).await.credentials {
        Credentials::Cookie(cookie) => cookie,
        other => panic!("{other:?}"),
    };
    let parts: Vec<&str> = good.split('.').collect();
    assert_eq!(parts.len(), 3, "{good}");
    let flipped_mac = {
        let mac = parts[2];
        let last = if mac.ends_with('0') { '1' } else { '0' };
        format!("{}.{}.{}{last}", parts[0], parts[1], &mac[..mac.len() - 1])
    };
    let later = parts[1].parse::<i64>().unwrap() + 86_400;
    let forged = [
        flipped_mac,
        format!("{}.{later}.{}", parts[0], parts[2]),
        format!("{}.{}.{}", "0".repeat(32), parts[1], parts[2]),
        format!("{}.{}", parts[0], parts[1]),
        format!("{good}.extra"),
        "garbage".to_owned(),
        String::new(),
    ];
    for cookie in forged {
        let browser = Browser::with_cookie(&app, &cookie);
        let page = browser.get("/console/outbox").await;
        page.assert_status(StatusCode::SEE_OTHER, &cookie);
        assert!(page.location().starts_with("/console/login?next="));
        let post = browser
            .post("/console/outbox/retry", &[("max_id", "999")])
            .await;
        post.assert_status(StatusCode::UNAUTHORIZED, &cookie);
    }
    Browser::with_cookie(&app, &good)
        .page("/console/outbox")
        .await;
}

#[sqlx::test]
async fn a_session_ends_when_its_ttl_has_passed(pool: PgPool) {
    let clock = Clock::manual(now());
    let app = console_app(pool, clock.clone()).await;
    let browser = Browser::logged_in(&app).await;
    clock.advance(Duration::from_secs(TWELVE_HOURS - 1));
    browser.page("/console/events").await;
    clock.advance(Duration::from_secs(1));
    let expired = browser.get("/console/events").await;
    expired.assert_status(StatusCode::SEE_OTHER, "expired");
    assert_eq!(
        expired.location(),
        format!("/console/login?next={}", encoded("/console/events"))
    );
    // A new login starts a new session.
    Browser::logged_in(&app).await.page("/console/events").await;
}

#[sqlx::test]
async fn logging_out_ends_the_session_and_needs_its_csrf_token(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    let browser = Browser::logged_in(&app).await;
    let other = Browser::logged_in(&app).await;
    let csrf = browser.page("/console").await.csrf();

    for form in [vec![], vec![("csrf", "0123abcd")]] {
        let refused = browser.post("/console/logout", &form).await;
        refused.assert_status(StatusCode::FORBIDDEN, "no or a wrong token");
    }
    let foreign = other.page("/console").await.csrf();
    browser
        .post("/console/logout", &[("csrf", &foreign)])
        .await
        .assert_status(StatusCode::FORBIDDEN, "another session's token");
    browser.page("/console").await;

    let out = browser.post("/console/logout", &[("csrf", &csrf)]).await;
    out.assert_status(StatusCode::SEE_OTHER, "logging out");
    assert_eq!(out.location(), "/console/login");
    assert!(
        cookie_attributes(&out).contains(&"Max-Age=0".to_owned()),
        "the browser drops the cookie"
    );
    // The cookie, kept anyway, no longer works.
    let after = browser.get("/console").await;
    after.assert_status(StatusCode::SEE_OTHER, "after logout");
    assert!(after.location().starts_with("/console/login"));
    browser
        .post("/console/outbox/retry", &[("csrf", &csrf), ("max_id", "9")])
        .await
        .assert_status(StatusCode::UNAUTHORIZED, "a post after logout");
    // Only that session ended.
    other.page("/console").await;
}

#[sqlx::test]
async fn the_login_never_sends_the_browser_off_site(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    let anonymous = Browser::anonymous(&app);
    for next in [
        "//evil.example",
        "https://evil.example",
        "http://evil.example/console",
        "/\\evil.example",
        "/console//evil.example",
        "/console/\\evil.example",
        "javascript:alert(1)",
        "evil.example",
        "",
        // Not even a header's worth: never a broken redirect.
        "/console\r\nSet-Cookie: webhookd_console=forged",
        "/console/events\u{0}",
        "/console/\u{7f}",
    ] {
        let login = anonymous
            .post("/console/login", &[("token", TOKEN), ("next", next)])
            .await;
        login.assert_status(StatusCode::SEE_OTHER, next);
        assert_eq!(login.location(), "/console", "next={next}");
        let form = anonymous
            .page(&format!("/console/login?next={}", encoded(next)))
            .await;
        assert_eq!(form.input("next").as_deref(), Some("/console"), "{next}");
    }
    let login = anonymous
        .post(
            "/console/login",
            &[("token", TOKEN), ("next", "/console/events?q=user_1")],
        )
        .await;
    assert_eq!(login.location(), "/console/events?q=user_1");
}

#[sqlx::test]
async fn wrong_tokens_are_rate_limited_until_the_bucket_refills(pool: PgPool) {
    let clock = Clock::manual(now());
    let app = console_app(pool, clock.clone()).await;
    let anonymous = Browser::anonymous(&app);
    for attempt in 0..5 {
        anonymous
            .post("/console/login", &[("token", &format!("guess-{attempt}"))])
            .await
            .assert_status(StatusCode::UNAUTHORIZED, "a wrong token");
    }
    let limited = anonymous.post("/console/login", &[("token", TOKEN)]).await;
    limited.assert_status(StatusCode::TOO_MANY_REQUESTS, "even the right token waits");
    assert!(limited.headers.get(header::SET_COOKIE).is_none());
    let wait: u64 = limited.headers[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=12).contains(&wait), "Retry-After: {wait}");
    // The bearer token is compared from the same bucket.
    Browser::bearer(&app)
        .get("/console")
        .await
        .assert_status(StatusCode::TOO_MANY_REQUESTS, "a bearer, limited");

    clock.advance(Duration::from_secs(wait));
    let login = anonymous.post("/console/login", &[("token", TOKEN)]).await;
    login.assert_status(StatusCode::SEE_OTHER, "after Retry-After");
    Browser::with_cookie(&app, &session_cookie(&login))
        .page("/console")
        .await;
    // One wrong token more spends the one refilled: limited again.
    anonymous
        .post("/console/login", &[("token", "guess-again")])
        .await
        .assert_status(StatusCode::UNAUTHORIZED, "one more guess");
    anonymous
        .post("/console/login", &[("token", "and-again")])
        .await
        .assert_status(StatusCode::TOO_MANY_REQUESTS, "no guess left");
}
