//! The token, a wrong guess at it and the session cookie never reach the
//! log: the real binary, logging everything at debug, its output read.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header;
use sqlx::PgPool;

use super::{TOKEN, no_redirects};
use crate::helpers::SECRET;
use crate::lifecycle::{database_url, free_port};

/// A server killed if the test fails before it stopped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn read_all(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut logs = Vec::new();
        let _ = pipe.read_to_end(&mut logs);
        String::from_utf8_lossy(&logs).into_owned()
    })
}

#[sqlx::test]
async fn neither_the_token_nor_a_guess_nor_a_session_reaches_the_log(pool: PgPool) {
    let admin_port = free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_webhookd"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("OTEL_") {
            command.env_remove(name);
        }
    }
    let mut child = command
        .env("DATABASE_URL", database_url(&pool))
        .env("WEBHOOKD_LISTEN", format!("127.0.0.1:{}", free_port()))
        .env("WEBHOOKD_ADMIN_LISTEN", format!("127.0.0.1:{admin_port}"))
        .env("WEBHOOKD_ADMIN_TOKEN", TOKEN)
        .env("STRIPE_WEBHOOK_SECRET", SECRET)
        .env("WEBHOOKD_LOG_FORMAT", "json")
        .env("RUST_LOG", "trace,h2=info,hyper=info,rustls=info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let logs = [
        read_all(child.stdout.take().unwrap()),
        read_all(child.stderr.take().unwrap()),
    ];
    let server = Running(child);
    let base = format!("http://127.0.0.1:{admin_port}");
    let client = no_redirects();
    let mut ready = false;
    for _ in 0..400 {
        let answer = client.get(format!("{base}/readyz")).send().await;
        if answer.is_ok_and(|r| r.status() == StatusCode::OK) {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(ready, "the server never became ready");

    let guess = "a-wrong-guess-at-the-console-token";
    let wrong = client
        .post(format!("{base}/console/login"))
        .form(&[("token", guess), ("next", "/console")])
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let wrong_bearer = client
        .get(format!("{base}/console"))
        .bearer_auth(guess)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_bearer.status(), StatusCode::UNAUTHORIZED);
    let login = client
        .post(format!("{base}/console/login"))
        .form(&[("token", TOKEN), ("next", "/console/events")])
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::SEE_OTHER);
    let set = login.headers()[header::SET_COOKIE].to_str().unwrap();
    let cookie = set.split(';').next().unwrap().to_owned();
    let session = cookie.split_once('=').unwrap().1.to_owned();
    let page = client
        .get(format!("{base}/console/events"))
        .header(header::COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let bearer = client
        .get(format!("{base}/console/outbox"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), StatusCode::OK);

    let sent = Command::new("kill")
        .args(["-TERM", &server.0.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = tokio::task::spawn_blocking(move || {
        let mut server = server;
        server.0.wait().unwrap()
    })
    .await
    .unwrap();
    assert!(status.success(), "{status:?}");
    let logs: String = logs.into_iter().map(|l| l.join().unwrap()).collect();

    // What was logged is there: the capture works.
    for expected in [
        "console: a login with a wrong token was refused",
        "console: a request with a wrong bearer token was refused",
        "console: logged in",
        "/console/login",
    ] {
        assert!(logs.contains(expected), "{expected} not in the log");
    }
    for secret in [TOKEN, guess, &session, &session[..32]] {
        assert!(!logs.contains(secret), "{secret} is in the log:\n{logs}");
    }
}
