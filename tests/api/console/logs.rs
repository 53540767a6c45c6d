//! What the real binary logs of the console: never the token, a guess at
//! it or a session cookie; an attack on the token once, not per guess. The
//! binary runs with everything logged, its output read; a console on a
//! non-loopback address is warned of at start-up.

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header;
use sqlx::PgPool;

use super::{TOKEN, no_redirects};
use crate::helpers::SECRET;
use crate::service::lifecycle::{database_url, free_port};

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

/// The binary with the console on, its admin listener on `admin_ip`,
/// logging everything as JSON.
struct Binary {
    server: Running,
    logs: [std::thread::JoinHandle<String>; 2],
    /// The admin listener's base URL, on loopback.
    base: String,
}

impl Binary {
    /// Starts it, and waits until it is ready.
    async fn start(pool: &PgPool, admin_ip: &str) -> Binary {
        let admin_port = free_port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_webhookd"));
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("OTEL_") {
                command.env_remove(name);
            }
        }
        let mut child = command
            .env("DATABASE_URL", database_url(pool))
            .env("WEBHOOKD_LISTEN", format!("127.0.0.1:{}", free_port()))
            .env("WEBHOOKD_ADMIN_LISTEN", format!("{admin_ip}:{admin_port}"))
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
        let binary = Binary {
            server: Running(child),
            logs,
            base: format!("http://127.0.0.1:{admin_port}"),
        };
        let client = no_redirects();
        for _ in 0..400 {
            let answer = client.get(format!("{}/readyz", binary.base)).send().await;
            if answer.is_ok_and(|r| r.status() == StatusCode::OK) {
                return binary;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the server never became ready");
    }

    /// Stops it with SIGTERM; everything it logged.
    async fn stop(self) -> String {
        let sent = Command::new("kill")
            .args(["-TERM", &self.server.0.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let server = self.server;
        let status = tokio::task::spawn_blocking(move || {
            let mut server = server;
            server.0.wait().unwrap()
        })
        .await
        .unwrap();
        assert!(status.success(), "{status:?}");
        self.logs.into_iter().map(|l| l.join().unwrap()).collect()
    }
}

#[sqlx::test]
async fn neither_the_token_nor_a_guess_nor_a_session_reaches_the_log(pool: PgPool) {
    let binary = Binary::start(&pool, "127.0.0.1").await;
    let base = binary.base.clone();
    let client = no_redirects();

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

    let logs = binary.stop().await;

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

#[sqlx::test]
async fn guesses_from_many_addresses_are_reported_as_an_attack_once_not_per_guess(pool: PgPool) {
    let binary = Binary::start(&pool, "127.0.0.1").await;
    let mut refused = 0;
    for n in 1..=70u8 {
        // Each from an address of its own (any 127/8 address is this host's).
        let answer = reqwest::Client::builder()
            .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 2, n)))
            .build()
            .unwrap()
            .get(format!("{}/console", binary.base))
            .bearer_auth(format!("guess-{n}"))
            .send()
            .await
            .unwrap();
        refused += usize::from(answer.status() == StatusCode::TOO_MANY_REQUESTS);
    }
    assert!(refused >= 15, "{refused} refused");
    let logs = binary.stop().await;
    let warnings: Vec<&str> = logs
        .lines()
        .filter(|line| line.contains("used up the attempts of all"))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("\"level\":\"WARN\""),
        "{}",
        warnings[0]
    );
}

#[sqlx::test]
async fn a_console_on_a_non_loopback_address_warns_at_start_up_that_it_is_plain_http(pool: PgPool) {
    const WARNING: &str = "the console is served over plain http";
    let open = Binary::start(&pool, "0.0.0.0").await;
    let logs = open.stop().await;
    let warnings: Vec<&str> = logs.lines().filter(|l| l.contains(WARNING)).collect();
    assert_eq!(warnings.len(), 1, "{logs}");
    assert!(
        warnings[0].contains("\"level\":\"WARN\""),
        "{}",
        warnings[0]
    );
    assert!(warnings[0].contains("0.0.0.0:"), "{}", warnings[0]);

    let loopback = Binary::start(&pool, "127.0.0.1").await;
    let logs = loopback.stop().await;
    assert!(!logs.contains(WARNING), "not on loopback");
}
