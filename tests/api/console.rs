//! The console on the admin listener, over real HTTP (redirects not
//! followed) against a real database, its effects asserted in the tables:
//! where it is served here; each area of the console in its own module.

mod auth;
mod bounds;
mod browser;
mod chromium;
mod cookie;
mod csrf;
mod escaping;
mod events;
mod fixtures;
mod headers;
mod hostile;
mod ids;
mod logs;
mod outbox;
mod owners;
mod pages;
mod replay;
mod search;
mod throttle;
mod versions;

use reqwest::StatusCode;
use sqlx::PgPool;
use webhookd::clock::Clock;
use webhookd::config::{AdminListen, AdminToken};

pub use browser::{Browser, Credentials, Page, encoded, no_redirects, session_cookie};
pub use fixtures::{
    dead_ids, deferred_refund_with_its_credit_repaired, deliver_razorpay, kill_due_rows,
    razorpay_captured, razorpay_refund, repaired_deferred_refund,
};

use crate::helpers::{TestApp, spawn_app, spawn_app_with};

pub const TOKEN: &str = "console-token-for-the-tests-0123";

/// An app whose console is on, with the token above.
pub async fn console_app(pool: PgPool, clock: Clock) -> TestApp {
    spawn_app_with(pool, clock, |settings| {
        settings.admin.admin_token = AdminToken::new(TOKEN);
    })
    .await
}

impl TestApp {
    pub fn admin(&self, path: &str) -> String {
        format!(
            "{}{path}",
            self.admin_address
                .as_deref()
                .expect("the admin listener is on")
        )
    }
}

#[sqlx::test]
async fn the_console_is_on_the_admin_listener_only_and_off_without_a_token(pool: PgPool) {
    let app = console_app(pool.clone(), Clock::System).await;
    let client = no_redirects();
    let public = client
        .get(format!("{}/console", app.address))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(
        public.status(),
        StatusCode::NOT_FOUND,
        "never on the public listener"
    );
    let admin = client
        .get(app.admin("/console"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(admin.status(), StatusCode::OK);
    for path in ["/healthz", "/readyz", "/metrics"] {
        let response = client.get(app.admin(path)).send().await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "{path} on the admin listener"
        );
    }

    let off = spawn_app(pool.clone()).await;
    let response = client
        .get(off.admin("/console"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::NOT_FOUND,
        "no token: no console"
    );
    let response = client.get(off.admin("/healthz")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    let none = spawn_app_with(pool, Clock::System, |s| {
        s.admin.admin_listen = Some(AdminListen(None))
    })
    .await;
    assert!(none.admin_address.is_none());
}
