//! The security headers on every console answer, whoever asked and
//! whatever it was: pages, errors, the login, the static files.

use reqwest::header;
use sqlx::PgPool;
use webhookd::clock::Clock;

use super::{Browser, Credentials, console_app};

#[sqlx::test]
async fn every_console_answer_carries_the_security_headers(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    let anonymous = Browser::anonymous(&app);
    let bearer = Browser::bearer(&app);
    let wrong = Browser {
        credentials: Credentials::Bearer("wrong".to_owned()),
        ..Browser::anonymous(&app)
    };
    let answers = [
        ("login page", anonymous.get("/console/login").await),
        (
            "failed login",
            anonymous.post("/console/login", &[("token", "no")]).await,
        ),
        ("redirect to login", anonymous.get("/console/events").await),
        (
            "unauthorized post",
            anonymous.post("/console/outbox/retry", &[]).await,
        ),
        ("wrong bearer", wrong.get("/console").await),
        ("overview", bearer.get("/console").await),
        ("live", bearer.get("/console/live").await),
        ("events", bearer.get("/console/events").await),
        (
            "unknown event",
            bearer.get("/console/events/stripe/evt_no").await,
        ),
        ("no such page", anonymous.get("/console/no-such-page").await),
        (
            "bad request",
            bearer.get("/console/events?from=yesterday").await,
        ),
        (
            "stylesheet",
            anonymous.get("/console/static/console.css").await,
        ),
        ("script", anonymous.get("/console/static/console.js").await),
    ];
    for (what, page) in &answers {
        let headers = &page.headers;
        let csp = headers
            .get(header::CONTENT_SECURITY_POLICY)
            .unwrap_or_else(|| panic!("{what}: no CSP"))
            .to_str()
            .unwrap();
        assert!(csp.contains("default-src 'self'"), "{what}: {csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{what}: {csp}");
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{what}");
        assert_eq!(headers[header::X_FRAME_OPTIONS], "DENY", "{what}");
        assert_eq!(headers[header::CACHE_CONTROL], "no-store", "{what}");
    }
    let statuses: Vec<u16> = answers.iter().map(|(_, p)| p.status.as_u16()).collect();
    assert_eq!(
        statuses,
        [
            200, 401, 303, 401, 401, 200, 200, 200, 404, 404, 400, 200, 200
        ]
    );
    assert!(
        answers[11].1.headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
}
