//! Who may use the console: the admin token, given as `Authorization:
//! Bearer <token>` or typed once into the login form for a session cookie.
//!
//! Sessions are stateless: the cookie carries a random session id and its
//! expiry, signed with a key derived from the token (so a new token ends
//! every session). A logout is remembered until the session would have
//! expired (in this process's memory: a restart forgets it, and other
//! processes never knew it; changing the token ends every session). Forms
//! carry a CSRF token bound to the session. A presented token is compared
//! only as fast as [`super::throttle`] allows.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hmac::{Hmac, Mac};
use ring::rand::{SecureRandom, SystemRandom};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::throttle::{Refusal, Throttle};
use crate::clock::Clock;

type HmacSha256 = Hmac<Sha256>;

/// Who made a request, for the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    /// A browser session: the first 8 characters of its id.
    Session { id: String },
    /// A client that sent the token itself.
    Bearer,
}

impl Actor {
    pub fn describe(&self) -> String {
        match self {
            Actor::Session { id } => format!("session {}", &id[..8.min(id.len())]),
            Actor::Bearer => "bearer token".to_owned(),
        }
    }
}

/// What a login or a bearer comparison came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    Valid,
    Invalid,
    /// Too many wrong tokens lately: not even compared.
    Limited(Refusal),
}

/// The console's keys and state. Cheap to clone.
#[derive(Clone)]
pub struct Auth {
    /// SHA-256 of the token: compared in constant time, whatever the length.
    token_digest: [u8; 32],
    /// Signs cookies and CSRF tokens; derived from the token.
    key: [u8; 32],
    ttl: Duration,
    clock: Clock,
    throttle: Arc<Mutex<Throttle>>,
    /// Sessions logged out, until they would have expired.
    revoked: Arc<Mutex<HashMap<String, i64>>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl Auth {
    pub fn new(token: &SecretString, ttl: Duration, clock: Clock) -> Self {
        let token = token.expose_secret().as_bytes();
        let mut mac = HmacSha256::new_from_slice(token).expect("HMAC takes any key");
        mac.update(b"webhookd console session key v1");
        let now = clock.now();
        Auth {
            token_digest: Sha256::digest(token).into(),
            key: mac.finalize().into_bytes().into(),
            ttl,
            clock,
            throttle: Arc::new(Mutex::new(Throttle::new(now))),
            revoked: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Compares `candidate` with the token, unless too many comparisons
    /// failed lately, from `client` or from everyone; a failure spends from
    /// both buckets.
    pub fn check_token(&self, candidate: &str, client: Option<IpAddr>) -> Check {
        let now = self.clock.now();
        let mut throttle = self.throttle.lock().expect("never poisoned");
        if let Err(refusal) = throttle.admit(now, client) {
            return Check::Limited(refusal);
        }
        let digest: [u8; 32] = Sha256::digest(candidate.as_bytes()).into();
        if bool::from(digest.ct_eq(&self.token_digest)) {
            return Check::Valid;
        }
        throttle.failed(now, client);
        Check::Invalid
    }

    /// A new session: its cookie value, its lifetime and who it is.
    pub fn new_session(&self) -> (String, Duration, Actor) {
        let mut id = [0u8; 16];
        SystemRandom::new()
            .fill(&mut id)
            .expect("the system's random source works");
        let id = hex::encode(id);
        let expires = self.clock.now() + i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX / 2);
        let mac = self.sign(&format!("session|{id}|{expires}"));
        let cookie = format!("{id}.{expires}.{mac}");
        (cookie, self.ttl, Actor::Session { id })
    }

    /// The session a cookie value names, if it is signed, unexpired and not
    /// logged out.
    pub fn session(&self, cookie: &str) -> Option<Actor> {
        let mut parts = cookie.split('.');
        let (id, expires, mac) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || id.len() != 32 {
            return None;
        }
        let mac = hex::decode(mac).ok()?;
        let mut check = self.mac();
        check.update(format!("session|{id}|{expires}").as_bytes());
        check.verify_slice(&mac).ok()?;
        let expires: i64 = expires.parse().ok()?;
        if expires <= self.clock.now() {
            return None;
        }
        if self
            .revoked
            .lock()
            .expect("never poisoned")
            .contains_key(id)
        {
            return None;
        }
        Some(Actor::Session { id: id.to_owned() })
    }

    /// Ends a session before it expires.
    pub fn log_out(&self, cookie: &str) {
        if let Some(Actor::Session { id }) = self.session(cookie) {
            let now = self.clock.now();
            let mut revoked = self.revoked.lock().expect("never poisoned");
            revoked.retain(|_, expires| *expires > now);
            let expires = cookie
                .split('.')
                .nth(1)
                .and_then(|e| e.parse().ok())
                .unwrap_or(now);
            revoked.insert(id, expires);
        }
    }

    /// The CSRF token of `actor`'s forms. A bearer client has no ambient
    /// credentials to abuse, so it needs none; its forms carry an empty one.
    pub fn csrf_token(&self, actor: &Actor) -> String {
        match actor {
            Actor::Session { id } => self.sign(&format!("csrf|{id}")),
            Actor::Bearer => String::new(),
        }
    }

    /// Whether a form's CSRF token is `actor`'s.
    pub fn csrf_ok(&self, actor: &Actor, token: &str) -> bool {
        match actor {
            Actor::Bearer => true,
            Actor::Session { .. } => {
                let expected = self.csrf_token(actor);
                bool::from(expected.as_bytes().ct_eq(token.as_bytes()))
            }
        }
    }

    fn mac(&self) -> HmacSha256 {
        HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key")
    }

    fn sign(&self, message: &str) -> String {
        let mut mac = self.mac();
        mac.update(message.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "a-console-token-for-tests";

    fn auth(clock: &Clock) -> Auth {
        Auth::new(
            &SecretString::from(TOKEN.to_owned()),
            Duration::from_secs(3600),
            clock.clone(),
        )
    }

    #[test]
    fn a_session_lasts_until_it_expires_or_logs_out() {
        let clock = Clock::manual(1_000_000);
        let auth = auth(&clock);
        let (cookie, ..) = auth.new_session();
        assert!(matches!(auth.session(&cookie), Some(Actor::Session { .. })));
        clock.advance(Duration::from_secs(3599));
        assert!(auth.session(&cookie).is_some());
        clock.advance(Duration::from_secs(1));
        assert_eq!(auth.session(&cookie), None, "expired");

        let (cookie, ..) = auth.new_session();
        auth.log_out(&cookie);
        assert_eq!(auth.session(&cookie), None, "logged out");
    }

    #[test]
    fn a_forged_or_altered_cookie_is_no_session() {
        let clock = Clock::manual(1_000_000);
        let auth = auth(&clock);
        let (cookie, ..) = auth.new_session();
        let mut parts: Vec<&str> = cookie.split('.').collect();
        let later = (1_000_000 + 999_999).to_string();
        parts[1] = &later;
        assert_eq!(auth.session(&parts.join(".")), None, "extended expiry");
        assert_eq!(auth.session("x.y.z"), None);
        assert_eq!(auth.session(""), None);
        let other = Auth::new(
            &SecretString::from("another-token-entirely".to_owned()),
            Duration::from_secs(3600),
            clock,
        );
        assert_eq!(other.session(&cookie), None, "signed under another token");
    }

    #[test]
    fn csrf_tokens_are_bound_to_the_session() {
        let clock = Clock::manual(1_000_000);
        let auth = auth(&clock);
        let one = auth.new_session().2;
        let two = auth.new_session().2;
        assert!(auth.csrf_ok(&one, &auth.csrf_token(&one)));
        assert!(!auth.csrf_ok(&one, &auth.csrf_token(&two)));
        assert!(!auth.csrf_ok(&one, ""));
        assert!(auth.csrf_ok(&Actor::Bearer, ""));
    }

    #[test]
    fn failed_comparisons_are_rate_limited_per_client_and_for_all() {
        use crate::http::console::throttle::{ALL_FAILURE_REFILL, FAILURE_REFILL};

        let clock = Clock::manual(1_000_000);
        let auth = auth(&clock);
        let guesser = Some(IpAddr::from([10, 0, 0, 1]));
        let operator = Some(IpAddr::from([10, 0, 0, 2]));
        for _ in 0..5 {
            assert_eq!(auth.check_token("wrong", guesser), Check::Invalid);
        }
        assert!(
            matches!(auth.check_token(TOKEN, guesser), Check::Limited(_)),
            "even the right one waits"
        );
        assert_eq!(
            auth.check_token(TOKEN, operator),
            Check::Valid,
            "another client is not locked out"
        );
        clock.advance(FAILURE_REFILL);
        assert_eq!(auth.check_token(TOKEN, guesser), Check::Valid);
        assert_eq!(
            auth.check_token(TOKEN, guesser),
            Check::Valid,
            "successes spend nothing"
        );

        // Many clients together spend the bucket of all.
        for i in 0..50u8 {
            let client = Some(IpAddr::from([10, 1, 0, i]));
            assert_eq!(auth.check_token("wrong", client), Check::Invalid);
        }
        assert!(matches!(
            auth.check_token(TOKEN, operator),
            Check::Limited(_)
        ));
        clock.advance(ALL_FAILURE_REFILL);
        assert_eq!(auth.check_token(TOKEN, operator), Check::Valid);
    }
}
