//! The real binary: `migrate`, `serve`, and a clean exit on SIGTERM.

use std::process::{Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use sqlx::PgPool;
use webhookd::db::MIGRATOR;
use webhookd::providers::stripe::signature_header;

use crate::helpers::{SECRET, now, payment_intent_succeeded};

fn database_url(pool: &PgPool) -> String {
    let options = pool.connect_options();
    format!(
        "postgres://{}@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        options
            .get_database()
            .expect("the test database has a name"),
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[sqlx::test]
async fn migrations_are_idempotent(pool: PgPool) {
    MIGRATOR.run(&pool).await.unwrap();
    MIGRATOR.run(&pool).await.unwrap();
    assert!(webhookd::db::migrations_applied(&pool).await.unwrap());
}

#[sqlx::test(migrations = false)]
async fn the_binary_migrates_serves_and_stops_cleanly_on_sigterm(pool: PgPool) {
    let url = database_url(&pool);
    let binary = env!("CARGO_BIN_EXE_webhookd");

    let migrate = Command::new(binary)
        .arg("migrate")
        .env("DATABASE_URL", &url)
        .output()
        .unwrap();
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    assert!(webhookd::db::migrations_applied(&pool).await.unwrap());

    let port = free_port();
    let mut server = Command::new(binary)
        .env("DATABASE_URL", &url)
        .env("WEBHOOKD_LISTEN", format!("127.0.0.1:{port}"))
        .env("STRIPE_WEBHOOK_SECRET", SECRET)
        .env("WEBHOOKD_LOG_FORMAT", "json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();

    // Wait (bounded) until it answers; this is start-up, not a correctness sleep.
    let mut ready = false;
    for _ in 0..200 {
        let response = client.get(format!("{base}/readyz")).send().await;
        if response.is_ok_and(|r| r.status() == StatusCode::OK) {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "the server did not become ready");

    let body = payment_intent_succeeded("evt_bin", "pi_bin", "user_bin", 4200);
    let response = client
        .post(format!("{base}/webhooks/stripe"))
        .header(
            "stripe-signature",
            signature_header(SECRET, now(), body.as_bytes()),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let balance: i64 =
        sqlx::query_scalar("select balance_minor from wallets where user_id = 'user_bin'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(balance, 4200);

    let killed = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let output = tokio::task::spawn_blocking(move || {
        let status = server.wait().unwrap();
        let mut logs = String::new();
        use std::io::Read;
        server
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut logs)
            .unwrap();
        server
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut logs)
            .unwrap();
        (status, logs)
    })
    .await
    .unwrap();
    assert!(
        output.0.success(),
        "exit status {:?}; logs:\n{}",
        output.0,
        output.1
    );
    assert!(
        output.1.contains("\"event_id\":\"evt_bin\""),
        "every webhook is logged with its event id:\n{}",
        output.1
    );
    assert!(!output.1.contains(SECRET), "the secret reached the logs");
}
