//! The configuration file, through the real binary: `serve` reads it under
//! the environment; `config show` and `config check`; a configuration
//! error is one line, exit 2, without a backtrace; the other commands read
//! the file's sources as `serve` does.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;

use reqwest::StatusCode;
use sqlx::PgPool;
use webhookd::providers::{Event, Receiver};

use crate::helpers::{SECRET, payment_intent_succeeded};
use crate::service::lifecycle::{Server, balance, database_url, free_port};

/// A file of `text` that is removed when dropped.
struct ConfigFile(PathBuf);

impl ConfigFile {
    fn new(name: &str, text: &str) -> ConfigFile {
        let path = std::env::temp_dir().join(format!(
            "webhookd-{name}-{}-{}.toml",
            std::process::id(),
            free_port()
        ));
        std::fs::write(&path, text).unwrap();
        ConfigFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The binary with `env` as its whole environment: the test's own
/// (`DATABASE_URL` among it) must not reach it.
fn webhookd(env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_webhookd"));
    command.env_clear().envs(env.iter().copied());
    command
}

fn run(command: &mut Command) -> (Option<i32>, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = command.output().unwrap();
    (
        status.code(),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

#[sqlx::test]
async fn serve_reads_the_file_and_the_environment_overrides_it(pool: PgPool) {
    let (in_file, in_environment) = (free_port(), free_port());
    let file = ConfigFile::new(
        "serve",
        &format!(
            "listen = \"127.0.0.1:{in_file}\"\n\
             database_url = \"{}\"\n\
             stripe_webhook_secret = [\"whsec_an_older_secret\", \"{SECRET}\"]\n\
             admin_listen = \"off\"\n\
             log_format = \"json\"\n",
            database_url(&pool)
        ),
    );
    let mut command = webhookd(&[("WEBHOOKD_LISTEN", &format!("127.0.0.1:{in_environment}"))]);
    command.args(["serve", "--config", file.path()]);
    let server = Server::spawn(command, in_environment).await;

    let body = payment_intent_succeeded("evt_file", "pi_file", "user_file", 700);
    let response = server.post(body).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "the file's secret list");
    assert_eq!(
        balance(&pool, "user_file").await,
        Some(700),
        "the file's database"
    );
    let refused = reqwest::get(format!("http://127.0.0.1:{in_file}/readyz")).await;
    assert!(
        refused.is_err(),
        "the environment's address, not the file's"
    );

    server.signal("-TERM");
    let (status, logs) = server.wait().await;
    assert!(status.success(), "{status:?}: {logs}");
    assert!(
        logs.contains("\"level\":\"INFO\""),
        "json logs, from the file: {logs}"
    );
}

#[test]
fn config_show_says_where_each_value_comes_from_and_never_shows_a_secret() {
    let file = ConfigFile::new(
        "show",
        "listen = \"127.0.0.1:9555\"\n\
         tolerance_secs = 99\n\
         stripe_webhook_secret = \"whsec_never_shown\"\n\
         [sources.gh]\n\
         scheme = \"github\"\n\
         secrets = [\"gh-never-shown\", \"gh-older\"]\n",
    );
    let (code, out, err) = run(webhookd(&[
        ("WEBHOOKD_TOLERANCE_SECS", "7"),
        (
            "DATABASE_URL",
            "postgres://app:pw-never-shown@db:5432/webhookd",
        ),
    ])
    .args(["config", "show", "--config", file.path()]));
    assert_eq!(code, Some(0), "{out}{err}");
    for line in [
        "listen = 127.0.0.1:9555  # file (WEBHOOKD_LISTEN)",
        "tolerance_secs = 7  # environment (WEBHOOKD_TOLERANCE_SECS)",
        "max_body_bytes = 2097152  # default (WEBHOOKD_MAX_BODY_BYTES)",
        "stripe_webhook_secret = ***  # file (STRIPE_WEBHOOK_SECRET)",
        "database_url = postgres://app:***@db:5432/webhookd  # environment (DATABASE_URL)",
        "sources.gh.scheme = github  # file (WEBHOOKD_SOURCE_GH_SCHEME)",
        "sources.gh.secrets = ***  # file (WEBHOOKD_SOURCE_GH_SECRET)",
        "sinks.default.url  # default: unset (WEBHOOKD_SINK_URL)",
    ] {
        assert!(
            out.lines().any(|l| l == line),
            "{line} missing from:\n{out}"
        );
    }
    for secret in [
        "whsec_never_shown",
        "pw-never-shown",
        "gh-never-shown",
        "gh-older",
    ] {
        assert!(
            !out.contains(secret) && !err.contains(secret),
            "{secret} shown"
        );
    }
}

#[test]
fn config_check_lists_every_problem_at_once_and_exits_1() {
    let file = ConfigFile::new(
        "check",
        "lisen = \"127.0.0.1:9555\"\n\
         tolerance_secs = \"soon-never-shown\"\n\
         admin_token = \"hunter2-never\"\n\
         [sources.gh]\n\
         scheme = \"github\"\n",
    );
    let env = [("DATABASE_URL", "postgres://app@db/webhookd")];
    let (code, out, err) = run(webhookd(&env).args(["config", "check", "--config", file.path()]));
    assert_eq!(code, Some(1), "{out}{err}");
    let problems: Vec<&str> = out.lines().collect();
    assert_eq!(problems.len(), 4, "one a line:\n{out}");
    for (problem, expected) in problems.iter().zip([
        "unknown key `lisen`",
        "tolerance_secs in ",
        "WEBHOOKD_SOURCE_GH_SCHEME is set but WEBHOOKD_SOURCE_GH_SECRET is not",
        "WEBHOOKD_ADMIN_TOKEN is too short (13 characters)",
    ]) {
        assert!(problem.contains(expected), "{expected}: {problem}");
    }
    assert!(
        err.contains("webhookd: 4 problems in the configuration"),
        "{err}"
    );
    for value in ["soon-never-shown", "hunter2", "127.0.0.1:9555"] {
        assert!(
            !out.contains(value) && !err.contains(value),
            "{value} shown"
        );
    }

    let good = ConfigFile::new("good", "listen = \"127.0.0.1:9555\"\n");
    let (code, out, err) = run(webhookd(&env).args(["config", "check", "--config", good.path()]));
    assert_eq!((code, out.as_str()), (Some(0), "ok\n"), "{err}");
}

#[test]
fn a_configuration_error_is_one_line_and_exit_2_without_a_backtrace() {
    let env = [
        ("RUST_BACKTRACE", "1"),
        ("RUST_LIB_BACKTRACE", "1"),
        ("DATABASE_URL", "postgres://app@127.0.0.1:1/webhookd"),
        ("PAYPAL_WEBHOOK_ID", "WEBHOOK_ID"),
    ];
    let missing = std::env::temp_dir().join("webhookd-no-such-config.toml");
    let runs = [
        (
            vec![],
            "invalid configuration: PAYPAL_WEBHOOK_ID lists WEBHOOK_ID",
        ),
        (
            vec!["serve"],
            "invalid configuration: PAYPAL_WEBHOOK_ID lists WEBHOOK_ID",
        ),
        (
            vec!["serve", "--config", missing.to_str().unwrap()],
            "invalid configuration: cannot read the configuration file",
        ),
    ];
    for (args, expected) in runs {
        let (code, out, err) = run(webhookd(&env).args(&args));
        assert_eq!(code, Some(2), "{args:?}: {out}{err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        assert!(
            lines[0].starts_with(&format!("webhookd: {expected}")),
            "{err}"
        );
        for output in [&out, &err] {
            assert!(!output.to_lowercase().contains("backtrace"), "{output}");
            assert!(!output.contains("   0: "), "no frames: {output}");
        }
    }
    // The environment's value too, though clap would quote it over lines.
    let (code, _, err) = run(webhookd(&[("WEBHOOKD_LISTEN", "nowhere")]).arg("serve"));
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err,
        "webhookd: invalid configuration: WEBHOOKD_LISTEN is not valid: invalid socket address syntax\n"
    );
}

/// `events replay` (as `sweep` and `import`) reads the sources of the
/// file as `serve` does: an event of a source that only the file names is
/// replayed under that source's owner rule, and ends its wait.
#[sqlx::test]
async fn events_replay_reads_the_sources_of_the_file(pool: PgPool) {
    let mut body: serde_json::Value =
        serde_json::from_str(&payment_intent_succeeded("evt_shop", "pi_shop", "", 900)).unwrap();
    body["data"]["object"]["metadata"] = serde_json::json!({ "account": "acct_shop" });
    let receiver = Receiver {
        name: "shop".into(),
        record_only: false,
        owner: None,
        invoice_credits: false,
        api_version: None,
    };
    let received = Event::from_stored(
        "stripe",
        "evt_shop",
        "payment_intent.succeeded",
        body.to_string().into(),
    )
    .unwrap()
    .received_by(Some(Arc::new(receiver)));
    let answer = webhookd::ingest::ingest(&pool, &received).await.unwrap();
    assert_eq!(answer.outcome.as_str(), "deferred", "waits for its owner");

    let url = database_url(&pool);
    let replay = ["events", "replay", "stripe", "evt_shop"];
    let (code, out, err) = run(webhookd(&[("DATABASE_URL", &url)]).args(replay));
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("the source `shop` that received it is not configured"),
        "{err}"
    );

    let file = ConfigFile::new(
        "replay",
        "[sources.shop]\nscheme = \"stripe\"\nsecrets = [\"whsec_shop\"]\n\
         owner = \"metadata.account\"\n",
    );
    let (code, out, err) = run(webhookd(&[("DATABASE_URL", &url)])
        .args(["--config", file.path()])
        .args(replay));
    assert_eq!(code, Some(0), "{out}{err}");
    let (outcome,): (String,) =
        sqlx::query_as("select outcome from processed_events where event_id = 'evt_shop'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(outcome, "processed");
    assert_eq!(balance(&pool, "acct_shop").await, Some(900));
    let waiting: i64 = sqlx::query_scalar("select count(*) from deferred_events")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(waiting, 0, "a replayed event that applied no longer waits");
}
