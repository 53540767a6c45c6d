//! A transaction pooler behind `DATABASE_URL` while `WEBHOOKD_DB_POOLER` is
//! left unset (`none`), on a PgBouncer that accepts the startup parameters
//! webhookd then sends (`bouncer`): the real binary refuses to start
//! through one, starts through a session pooler and on Postgres itself, and
//! turns not ready, with the fix, when its pooler switches to transaction
//! mode under it.

use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection, PgPool};
use webhookd::db::detection::{self, FIX};

use crate::helpers::payment_intent_succeeded;
use crate::pooler::bouncer::{Bouncer, Mode, Order};
use crate::service::lifecycle::{Server, balance, database_url};
use crate::signature::paypal_certs::temp_dir;

/// What the refusal says, whatever saw the pooler.
const REFUSAL: &str = "DATABASE_URL reaches Postgres through a transaction pooler";

/// Runs the real binary with `DATABASE_URL=url` (no pooler configured) to
/// its end, for at most 30 s: a `serve` that starts instead of refusing is
/// killed then (`None`). Its exit status and everything it wrote.
async fn run(args: &[&str], url: &str) -> (Option<ExitStatus>, String) {
    let dir = temp_dir("pooler-detect");
    let output = std::fs::File::create(dir.join("output")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_webhookd"))
        .args(args)
        .env_remove("WEBHOOKD_DB_POOLER")
        .env_remove("WEBHOOKD_DIRECT_DATABASE_URL")
        .env("DATABASE_URL", url)
        .env("WEBHOOKD_ADMIN_LISTEN", "off")
        .env("WEBHOOKD_LISTEN", "127.0.0.1:0")
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(output.try_clone().unwrap())
        .stderr(output)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    let said = std::fs::read_to_string(dir.join("output")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (status, said)
}

#[sqlx::test(migrations = false)]
async fn serve_and_the_commands_refuse_a_transaction_pooler_nobody_configured(pool: PgPool) {
    for order in [Order::Lifo, Order::RoundRobin] {
        let Some(bouncer) = Bouncer::start(&pool, Mode::Transaction, order).await else {
            return;
        };
        let url = bouncer.url(&pool);
        for args in [&["serve"][..], &["migrate"], &["outbox", "list"]] {
            let (status, said) = run(args, &url).await;
            assert!(
                status.is_some_and(|status| !status.success()),
                "{order:?}, {args:?} did not refuse ({status:?}): {said}"
            );
            assert!(
                said.contains(REFUSAL) && said.contains(FIX),
                "{order:?}, {args:?} says why and what to do: {said}"
            );
            assert!(
                !said.contains("pooler_password_that_must_not_leak"),
                "{said}"
            );
        }
        // Refused before migrating through the pooler: nothing written.
        assert!(!webhookd::db::migrations_applied(&pool).await.unwrap());
    }
}

#[sqlx::test(migrations = false)]
async fn serve_starts_through_a_session_pooler_and_on_postgres_itself(pool: PgPool) {
    let Some(bouncer) = Bouncer::start(&pool, Mode::Session, Order::Lifo).await else {
        return;
    };
    for (n, url) in [bouncer.url(&pool), database_url(&pool)].iter().enumerate() {
        let server = Server::start_with(url, &[]).await;
        let (event, user) = (format!("evt_session_{n}"), format!("user_session_{n}"));
        let body = payment_intent_succeeded(&event, &format!("pi_session_{n}"), &user, 300);
        assert_eq!(server.post(body).await.unwrap().status(), StatusCode::OK);
        assert_eq!(balance(&pool, &user).await, Some(300));
        server.signal("-TERM");
        let (status, logs) = server.wait().await;
        assert!(status.success(), "{logs}");
        assert!(!logs.contains("transaction pooler"), "{logs}");
        let (status, said) = run(&["outbox", "list"], url).await;
        assert!(status.is_some_and(|s| s.success()), "{said}");
    }
}

#[sqlx::test]
async fn a_pooler_turned_to_transaction_mode_under_serve_makes_it_not_ready_with_the_fix(
    pool: PgPool,
) {
    let Some(mut bouncer) = Bouncer::start(&pool, Mode::Session, Order::RoundRobin).await else {
        return;
    };
    let server = Server::start_with(&bouncer.url(&pool), &[]).await;
    let body = payment_intent_succeeded("evt_before", "pi_before", "user_switch", 100);
    assert_eq!(server.post(body).await.unwrap().status(), StatusCode::OK);
    // Two sessions at least (ingest, the drainer, /readyz), each with the
    // statements it prepared, for transactions to move between.
    until_sessions(&pool, 2).await;
    bouncer.switch_to(Mode::Transaction).await;

    let readyz = format!("{}/readyz", server.base);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut answers = Vec::new();
    let reason = loop {
        let n = answers.len();
        let body = payment_intent_succeeded(&format!("evt_{n}"), &format!("pi_{n}"), "u", 1);
        answers.push(server.post(body).await.unwrap().status());
        let ready = server.client.get(&readyz).send().await.unwrap();
        let body: serde_json::Value = ready.json().await.unwrap();
        // Until then, other errors of the pooler's make it 503 at times
        // ("database unavailable"), as they would without the check.
        let reason = body["reason"].as_str().unwrap_or_default();
        if reason.contains("transaction pooler") {
            break reason.to_owned();
        }
        assert!(Instant::now() < deadline, "not seen after {n} webhooks");
    };
    assert!(
        reason.starts_with(REFUSAL) && reason.ends_with(FIX),
        "{reason}"
    );
    assert!(reason.contains("SQLSTATE 26000") || reason.contains("SQLSTATE 42P05"));
    // Not ready for good, however the database answers now; webhooks are
    // still answered, never with a 500.
    for n in 0..5 {
        let body = payment_intent_succeeded(&format!("evt_after_{n}"), "pi_after", "u", 1);
        answers.push(server.post(body).await.unwrap().status());
        let ready = server.client.get(&readyz).send().await.unwrap();
        assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    assert!(
        answers
            .iter()
            .all(|s| *s == StatusCode::OK || *s == StatusCode::SERVICE_UNAVAILABLE),
        "{answers:?}"
    );
    server.signal("-TERM");
    let (_, logs) = server.wait().await;
    let said = logs.lines().filter(|l| l.contains(REFUSAL)).count();
    assert_eq!(said, 1, "logged once: {logs}");
    assert!(!logs.contains("pooler_password_that_must_not_leak"));
}

/// Waits (bounded) until webhookd holds `n` sessions of the test database.
async fn until_sessions(pool: &PgPool, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let sessions: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity
             where datname = current_database() and application_name = 'webhookd'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        if sessions >= n {
            return;
        }
        assert!(Instant::now() < deadline, "{sessions} sessions, not {n}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[sqlx::test(migrations = false)]
async fn the_probe_sees_a_transaction_pooler_in_either_order_however_many_sessions_idle(
    pool: PgPool,
) {
    for order in [Order::Lifo, Order::RoundRobin] {
        let bouncer = Bouncer::start(&pool, Mode::Transaction, order).await;
        let connect = match (&bouncer, std::env::var("WEBHOOKD_TEST_POOLER_URL")) {
            (Some(bouncer), _) => bouncer.connect_options(&pool),
            // The suite's own PgBouncer (round robin), which refuses the
            // startup parameter sqlx sends by default.
            (None, Ok(url)) if order == Order::RoundRobin => {
                let database = pool.connect_options().get_database().unwrap().to_owned();
                let url = format!("{}/{database}", url.trim_end_matches('/'));
                url.parse::<PgConnectOptions>()
                    .unwrap()
                    .extra_float_digits(None)
            }
            (None, _) => continue,
        };
        for idle in 0..6 {
            given_back(&connect, idle).await;
            let found = detection::probe(&connect).await.unwrap();
            assert!(found.is_some(), "{order:?}, {idle} sessions idle");
        }
    }
    // Sessions, through a pooler and directly: never.
    let Some(bouncer) = Bouncer::start(&pool, Mode::Session, Order::Lifo).await else {
        return;
    };
    for connect in [
        bouncer.connect_options(&pool),
        (*pool.connect_options()).clone(),
    ] {
        for idle in 0..3 {
            given_back(&connect, idle).await;
            assert_eq!(detection::probe(&connect).await.unwrap(), None);
        }
    }
}

/// Has `n` server sessions of the pooler busy at once, then given back.
async fn given_back(connect: &PgConnectOptions, n: usize) {
    let mut clients = Vec::new();
    for _ in 0..n {
        let mut client = PgConnection::connect_with(connect).await.unwrap();
        sqlx::raw_sql("begin; select 1")
            .execute(&mut client)
            .await
            .unwrap();
        clients.push(client);
    }
    for mut client in clients {
        sqlx::raw_sql("commit").execute(&mut client).await.unwrap();
        client.close().await.unwrap();
    }
}
