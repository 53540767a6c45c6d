//! The real binary in transaction-pooler mode (`WEBHOOKD_DB_POOLER=transaction`):
//! what it does without a session, and with one. Run through PgBouncer when
//! `WEBHOOKD_TEST_POOLER_URL` is set (`scripts/test.sh` does), else
//! against Postgres itself, which the mode works on too.

use std::process::Command;

use reqwest::StatusCode;
use sqlx::PgPool;

use crate::helpers::payment_intent_succeeded;
use crate::service::lifecycle::{Server, balance, database_url};

/// The URL webhookd is given: the test database through the pooler when
/// one is set up, else the database itself.
fn pooled_url(pool: &PgPool) -> String {
    let direct = database_url(pool);
    match std::env::var("WEBHOOKD_TEST_POOLER_URL") {
        Ok(pooler) => {
            let database = pool.connect_options().get_database().unwrap().to_owned();
            format!("{}/{database}", pooler.trim_end_matches('/'))
        }
        Err(_) => direct,
    }
}

fn webhookd(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_webhookd"))
        .args(args)
        .env_remove("WEBHOOKD_DIRECT_DATABASE_URL")
        .envs(env.iter().copied())
        .env("WEBHOOKD_ADMIN_LISTEN", "off")
        .env("WEBHOOKD_LISTEN", "127.0.0.1:0")
        .output()
        .unwrap()
}

#[sqlx::test(migrations = false)]
async fn without_a_session_serve_refuses_pending_migrations_and_migrate_asks_for_a_direct_url(
    pool: PgPool,
) {
    let url = pooled_url(&pool);
    let pooled = [
        ("DATABASE_URL", url.as_str()),
        ("WEBHOOKD_DB_POOLER", "transaction"),
    ];

    let serve = webhookd(&["serve"], &pooled);
    let said = String::from_utf8_lossy(&serve.stderr);
    assert!(!serve.status.success(), "serve started: {said}");
    assert!(
        said.contains("migrations pending") && said.contains("webhookd migrate"),
        "says what to do: {said}"
    );
    let migrate = webhookd(&["migrate"], &pooled);
    let said = String::from_utf8_lossy(&migrate.stderr);
    assert!(!migrate.status.success(), "migrated without a session");
    assert!(
        said.contains("WEBHOOKD_DIRECT_DATABASE_URL"),
        "says what to do: {said}"
    );
    assert!(!webhookd::db::migrations_applied(&pool).await.unwrap());

    let direct = database_url(&pool);
    let migrate = webhookd(
        &["migrate"],
        &[
            pooled[0],
            pooled[1],
            ("WEBHOOKD_DIRECT_DATABASE_URL", direct.as_str()),
        ],
    );
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    assert!(webhookd::db::migrations_applied(&pool).await.unwrap());

    // Migrated: serve starts, still without a session, and the drainer
    // polls.
    let server = Server::start_with(&url, &[pooled[1]]).await;
    let response = server
        .post(payment_intent_succeeded(
            "evt_pooled",
            "pi_pooled",
            "user_pooled",
            700,
        ))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(balance(&pool, "user_pooled").await, Some(700));
    server.signal("-TERM");
    let (status, logs) = server.wait().await;
    assert!(status.success(), "{logs}");
    assert!(
        logs.contains("the outbox drainer polls"),
        "says it polls: {logs}"
    );
}

#[sqlx::test(migrations = false)]
async fn with_a_direct_url_serve_migrates_on_it_and_listens_there(pool: PgPool) {
    let url = pooled_url(&pool);
    let direct = database_url(&pool);
    let server = Server::start_with(
        &url,
        &[
            ("WEBHOOKD_DB_POOLER", "transaction"),
            ("WEBHOOKD_DIRECT_DATABASE_URL", direct.as_str()),
        ],
    )
    .await;
    assert!(webhookd::db::migrations_applied(&pool).await.unwrap());
    let response = server
        .post(payment_intent_succeeded(
            "evt_direct",
            "pi_direct",
            "user_direct",
            900,
        ))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(balance(&pool, "user_direct").await, Some(900));
    // The drainer LISTENs on the direct URL, a session of its own there
    // (it connects once the server is up: waited for, bounded).
    let mut listening: i64 = 0;
    for _ in 0..400 {
        listening = sqlx::query_scalar(
            "select count(*) from pg_stat_activity
             where datname = current_database() and application_name = $1
               and query ilike 'listen %'",
        )
        .bind(webhookd::db::LISTEN_APPLICATION_NAME)
        .fetch_one(&pool)
        .await
        .unwrap();
        if listening > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    server.signal("-TERM");
    let (status, logs) = server.wait().await;
    assert!(status.success(), "{logs}");
    assert!(!logs.contains("the outbox drainer polls"), "{logs}");
    assert_eq!(listening, 1, "one LISTEN session: {logs}");
}

/// The premise of the rule that every statement runs in a transaction,
/// and a check of the pooler the tests run on (`server_round_robin`): a
/// statement outside one is prepared on one server connection and bound on
/// another, and fails, where the same statement inside one never does.
/// Only behind the test pooler.
#[sqlx::test]
async fn outside_a_transaction_the_pooler_hands_a_statement_to_another_server(pool: PgPool) {
    if std::env::var("WEBHOOKD_TEST_POOLER_URL").is_err() {
        return;
    }
    let pooled = crate::helpers::app_pool(&pool);
    // Two server connections at least: two transactions open at once.
    let first = webhookd::db::begin(&pooled).await.unwrap();
    let second = webhookd::db::begin(&pooled).await.unwrap();
    drop((first, second));
    let mut outside = 0;
    for n in 0..40_i64 {
        let answer: Result<i64, _> = sqlx::query_scalar("select $1::int8")
            .bind(n)
            .fetch_one(&pooled)
            .await;
        if answer.is_err() {
            outside += 1;
        }
        let mut tx = webhookd::db::begin(&pooled).await.unwrap();
        let inside: i64 = sqlx::query_scalar("select $1::int8")
            .bind(n)
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(inside, n);
    }
    assert!(outside > 0, "every statement outside a transaction worked");
}
