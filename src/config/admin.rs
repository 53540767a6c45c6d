//! The admin listener: the console, and health and metrics beside it.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use clap::Args;
use secrecy::{ExposeSecret, SecretString};

#[derive(Debug, Clone, Args)]
pub struct AdminArgs {
    /// Address of the admin listener: /console (with WEBHOOKD_ADMIN_TOKEN),
    /// /metrics, /healthz and /readyz; `off`: none. Unset: 127.0.0.1:9090,
    /// or none (with a warning) when another process holds that port. Keep
    /// it off the internet: the console shows payloads and money.
    #[arg(long, env = "WEBHOOKD_ADMIN_LISTEN")]
    pub admin_listen: Option<AdminListen>,

    /// The console's token: sent as `Authorization: Bearer <token>`, or
    /// typed into its login form. Unset: the console is off (404). At least
    /// 16 characters (`openssl rand -hex 32`).
    #[arg(long, env = "WEBHOOKD_ADMIN_TOKEN", hide_env_values = true, value_parser = parse_token, default_value = "")]
    pub admin_token: AdminToken,

    /// How long a console login lasts.
    #[arg(long, env = "WEBHOOKD_ADMIN_SESSION_TTL", value_parser = humantime::parse_duration, default_value = "12h")]
    pub admin_session_ttl: Duration,
}

/// The admin listener's address when WEBHOOKD_ADMIN_LISTEN is unset.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9090";

impl AdminArgs {
    /// Where the admin listener binds (`None`: off), and whether that was
    /// asked for: only an address left at its default may be skipped when
    /// another process holds it.
    pub fn listen(&self) -> (Option<SocketAddr>, bool) {
        match self.admin_listen {
            Some(AdminListen(address)) => (address, true),
            None => (DEFAULT_ADMIN_LISTEN.parse().ok(), false),
        }
    }
}

/// Where the admin listener binds, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminListen(pub Option<SocketAddr>);

impl FromStr for AdminListen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "off" | "" => Ok(AdminListen(None)),
            address => address
                .parse()
                .map(|address| AdminListen(Some(address)))
                .map_err(|_| "expected an address such as 127.0.0.1:9090, or `off`".to_owned()),
        }
    }
}

/// The console's token, if set. Debug output never shows it.
#[derive(Clone, Default)]
pub struct AdminToken(pub Option<SecretString>);

impl AdminToken {
    pub fn new(token: &str) -> Self {
        AdminToken(Some(SecretString::from(token.to_owned())))
    }
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(_) => f.write_str("AdminToken(redacted)"),
            None => f.write_str("AdminToken(unset)"),
        }
    }
}

/// The shortest token accepted (checked by `startup::validate`, whose
/// message never quotes it: clap's would).
pub const MIN_TOKEN_CHARS: usize = 16;

/// An empty value leaves the console off. Never fails: clap would quote
/// the value in its error.
#[allow(clippy::unnecessary_wraps)]
fn parse_token(s: &str) -> Result<AdminToken, std::convert::Infallible> {
    let token = s.trim();
    Ok(if token.is_empty() {
        AdminToken(None)
    } else {
        AdminToken(Some(SecretString::from(token.to_owned())))
    })
}

impl AdminToken {
    /// The token's length in characters, if set.
    pub fn chars(&self) -> Option<usize> {
        self.0.as_ref().map(|t| t.expose_secret().chars().count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_takes_an_address_or_off() {
        assert_eq!("off".parse::<AdminListen>().unwrap(), AdminListen(None));
        assert_eq!(
            "127.0.0.1:9090".parse::<AdminListen>().unwrap(),
            AdminListen(Some("127.0.0.1:9090".parse().unwrap()))
        );
        assert!("localhost".parse::<AdminListen>().is_err());
    }

    #[test]
    fn a_token_is_kept_secret_and_an_empty_one_is_none() {
        assert!(parse_token("").unwrap().0.is_none());
        assert!(parse_token("  ").unwrap().0.is_none());
        let token = parse_token(" 0123456789abcdef ").unwrap();
        assert_eq!(token.chars(), Some(16));
        assert_eq!(format!("{token:?}"), "AdminToken(redacted)");
    }
}
