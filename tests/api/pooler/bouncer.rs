//! A PgBouncer of a test's own, in front of the test database's server,
//! with the settings the test needs (`pool_mode`, `server_round_robin`),
//! accepting the startup parameters webhookd sends without a pooler
//! configured (`ignore_startup_parameters = extra_float_digits,options`, as
//! a pooler set up for other clients may). Without `pgbouncer` installed
//! [`Bouncer::start`] says the test is skipped, unless
//! `WEBHOOKD_POOLER_TESTS=required` (as `scripts/test.sh` sets), which
//! makes it fail instead.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection, PgPool};

use crate::service::lifecycle::free_port;
use crate::signature::paypal_certs::temp_dir;

/// How PgBouncer lends server connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `pool_mode = session`: a client keeps its server connection.
    Session,
    /// `pool_mode = transaction`: a client has one only from BEGIN to COMMIT.
    Transaction,
}

/// Which idle server connection PgBouncer lends next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// The one given back last (`server_round_robin = 0`, the default).
    Lifo,
    /// The one idle longest (`server_round_robin = 1`).
    RoundRobin,
}

pub struct Bouncer {
    child: Child,
    config: Config,
}

/// Where PgBouncer listens and what it lends.
struct Config {
    dir: PathBuf,
    port: u16,
    order: Order,
    /// The test database's server: host, port and user.
    server: (String, u16, String),
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.config.dir);
    }
}

/// `pgbouncer`'s path, if it is installed.
fn installed() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("pgbouncer"));
    on_path
        .chain([PathBuf::from("/usr/sbin/pgbouncer")])
        .find(|path| path.is_file())
}

impl Bouncer {
    /// PgBouncer in `mode` and `order` in front of `pool`'s server, once it
    /// accepts clients; `None` when it is not installed (and not required).
    pub async fn start(pool: &PgPool, mode: Mode, order: Order) -> Option<Bouncer> {
        let Some(binary) = installed() else {
            if std::env::var("WEBHOOKD_POOLER_TESTS").as_deref() == Ok("required") {
                panic!("WEBHOOKD_POOLER_TESTS=required, but pgbouncer is not installed");
            }
            eprintln!(
                "pooler test skipped: pgbouncer is not installed; set WEBHOOKD_POOLER_TESTS=required to fail instead"
            );
            return None;
        };
        let options = pool.connect_options();
        let server = (
            options.get_host().to_owned(),
            options.get_port(),
            options.get_username().to_owned(),
        );
        let dir = temp_dir("pgbouncer");
        std::fs::write(dir.join("users.txt"), format!("\"{}\" \"\"\n", server.2)).unwrap();
        let config = Config {
            dir,
            port: free_port(),
            order,
            server,
        };
        config.write(mode);
        let mut command = Command::new(binary);
        // PgBouncer refuses to run as root: as root, as an unprivileged user.
        if std::fs::metadata("/proc/self").is_ok_and(|me| me.uid() == 0) {
            command.args(["-u", unprivileged_user()]);
        }
        let log = std::fs::File::create(config.dir.join("pgbouncer.log")).unwrap();
        let child = command
            .arg(config.dir.join("pgbouncer.ini"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut bouncer = Bouncer { child, config };
        bouncer.until_accepting(pool).await;
        Some(bouncer)
    }

    /// The test database of `pool` through this PgBouncer, with a password
    /// that PgBouncer (trusting loopback clients) never checks.
    pub fn url(&self, pool: &PgPool) -> String {
        let database = pool.connect_options().get_database().unwrap().to_owned();
        format!(
            "postgres://{}:pooler_password_that_must_not_leak@127.0.0.1:{}/{database}",
            self.config.server.2, self.config.port
        )
    }

    /// Connection options of the test database through this PgBouncer.
    pub fn connect_options(&self, pool: &PgPool) -> PgConnectOptions {
        self.url(pool).parse().unwrap()
    }

    /// Rewrites the configuration with `mode` and has PgBouncer read it
    /// again (`RELOAD` on its admin console, which answers once it has):
    /// the mode applies to the clients already connected too.
    pub async fn switch_to(&mut self, mode: Mode) {
        self.config.write(mode);
        let admin = PgConnectOptions::new()
            .host("127.0.0.1")
            .port(self.config.port)
            .username(&self.config.server.2)
            .database("pgbouncer")
            .extra_float_digits(None);
        let mut console = PgConnection::connect_with(&admin).await.unwrap();
        sqlx::raw_sql("reload").execute(&mut console).await.unwrap();
        console.close().await.unwrap();
    }

    /// Waits (bounded) until a client gets through to the server.
    async fn until_accepting(&mut self, pool: &PgPool) {
        let connect = self.connect_options(pool);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(conn) = PgConnection::connect_with(&connect).await {
                conn.close().await.unwrap();
                return;
            }
            let exited = self.child.try_wait().unwrap();
            if exited.is_some() || Instant::now() > deadline {
                let log = std::fs::read_to_string(self.config.dir.join("pgbouncer.log"));
                panic!("PgBouncer did not start ({exited:?}): {log:?}");
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

impl Config {
    /// Writes `pgbouncer.ini` with `mode`.
    fn write(&self, mode: Mode) {
        let (host, port, user) = &self.server;
        let dir = self.dir.display();
        let pool_mode = match mode {
            Mode::Session => "session",
            Mode::Transaction => "transaction",
        };
        let round_robin = u8::from(self.order == Order::RoundRobin);
        let ini = format!(
            "[databases]\n\
             * = host={host} port={port} user={user}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {dir}/users.txt\n\
             admin_users = {user}\n\
             pool_mode = {pool_mode}\n\
             server_round_robin = {round_robin}\n\
             ignore_startup_parameters = extra_float_digits,options\n\
             server_login_retry = 1\n\
             query_wait_timeout = 10\n",
            self.port
        );
        std::fs::write(self.dir.join("pgbouncer.ini"), ini).unwrap();
    }
}

/// Debian's `postgres` user when there is one, else `nobody`.
fn unprivileged_user() -> &'static str {
    let users = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    if users.lines().any(|line| line.starts_with("postgres:")) {
        "postgres"
    } else {
        "nobody"
    }
}
