//! The session cookie behind https is a `__Host-` cookie: `Secure`, for the
//! whole host's paths, with no `Domain`, so a browser takes it only from an
//! https origin and never sends it over plain http, where another service
//! on a port of the same host name would see it (cookies are not kept apart
//! by port). Over plain http it keeps its name: `__Host-` needs `Secure`.

use reqwest::StatusCode;
use reqwest::header;
use sqlx::PgPool;
use webhookd::clock::Clock;

use super::{TOKEN, console_app, no_redirects};

const HOST_COOKIE: &str = "__Host-webhookd_console";

/// The cookie a `Set-Cookie` value sets: its name and value, and its
/// attributes sorted.
fn parsed(set: &str) -> ((String, String), Vec<String>) {
    let mut parts = set.split(';').map(|a| a.trim().to_owned());
    let pair = parts.next().unwrap();
    let (name, value) = pair.split_once('=').unwrap();
    let mut attributes: Vec<String> = parts.collect();
    attributes.sort();
    ((name.to_owned(), value.to_owned()), attributes)
}

#[sqlx::test]
async fn behind_https_the_session_is_a_host_cookie_that_opens_the_console(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    let client = no_redirects();
    let login = client
        .post(app.admin("/console/login"))
        .header("x-forwarded-proto", "https")
        .form(&[("token", TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::SEE_OTHER);
    let ((name, session), attributes) =
        parsed(login.headers()[header::SET_COOKIE].to_str().unwrap());
    assert_eq!(name, HOST_COOKIE);
    assert_eq!(
        attributes,
        [
            "HttpOnly",
            "Max-Age=43200",
            "Path=/",
            "SameSite=Strict",
            "Secure"
        ],
        "no Domain"
    );

    // It opens the console under that name, and logging out clears it.
    let page = client
        .get(app.admin("/console/outbox"))
        .header("x-forwarded-proto", "https")
        .header(header::COOKIE, format!("{HOST_COOKIE}={session}"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let body = page.text().await.unwrap();
    let csrf = body.split("name=\"csrf\" value=\"").nth(1).unwrap();
    let csrf = &csrf[..csrf.find('"').unwrap()];
    let out = client
        .post(app.admin("/console/logout"))
        .header("x-forwarded-proto", "https")
        .header(header::COOKIE, format!("{HOST_COOKIE}={session}"))
        .form(&[("csrf", csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    let cleared: Vec<_> = out
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|v| parsed(v.to_str().unwrap()))
        .collect();
    assert!(
        cleared
            .iter()
            .any(|((name, value), attributes)| name == HOST_COOKIE
                && value.is_empty()
                && attributes.contains(&"Max-Age=0".to_owned())
                && attributes.contains(&"Secure".to_owned())
                && attributes.contains(&"Path=/".to_owned())),
        "{cleared:?}"
    );
    let after = client
        .get(app.admin("/console/outbox"))
        .header(header::COOKIE, format!("{HOST_COOKIE}={session}"))
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), StatusCode::SEE_OTHER, "logged out");
}
