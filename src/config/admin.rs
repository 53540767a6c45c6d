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
    /// /metrics, /healthz and /readyz. `off`: no admin listener. Keep it
    /// off the internet: the console shows payloads and money.
    #[arg(long, env = "WEBHOOKD_ADMIN_LISTEN", default_value = "127.0.0.1:9090")]
    pub admin_listen: AdminListen,

    /// The console's token: sent as `Authorization: Bearer <token>`, or
    /// typed into its login form. Unset: the console is off (404). At least
    /// 16 characters (`openssl rand -hex 32`).
    #[arg(long, env = "WEBHOOKD_ADMIN_TOKEN", hide_env_values = true, value_parser = parse_token, default_value = "")]
    pub admin_token: AdminToken,

    /// How long a console login lasts.
    #[arg(long, env = "WEBHOOKD_ADMIN_SESSION_TTL", value_parser = humantime::parse_duration, default_value = "12h")]
    pub admin_session_ttl: Duration,
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

/// The shortest token accepted.
pub const MIN_TOKEN_CHARS: usize = 16;

/// An empty value leaves the console off; a short one is refused (it would
/// be guessed), without quoting it.
fn parse_token(s: &str) -> Result<AdminToken, String> {
    let token = SecretString::from(s.trim().to_owned());
    match token.expose_secret().chars().count() {
        0 => Ok(AdminToken(None)),
        n if n < MIN_TOKEN_CHARS => Err(format!(
            "too short ({n} characters): use at least {MIN_TOKEN_CHARS}, e.g. `openssl rand -hex 32`"
        )),
        _ => Ok(AdminToken(Some(token))),
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
    fn a_short_token_is_refused_without_being_quoted() {
        let error = parse_token("hunter2").unwrap_err();
        assert!(error.contains("too short"));
        assert!(!error.contains("hunter2"));
        assert!(parse_token("").unwrap().0.is_none());
        assert!(parse_token("0123456789abcdef").unwrap().0.is_some());
        assert_eq!(
            format!("{:?}", parse_token("0123456789abcdef").unwrap()),
            "AdminToken(redacted)"
        );
    }
}
