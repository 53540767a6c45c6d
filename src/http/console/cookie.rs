//! The session cookie: its name and attributes, and reading it back.
//!
//! Browsers keep cookies by host name, not by port: a cookie of
//! `host:9090` goes to every service on `host`. Behind https (the proxy
//! says `X-Forwarded-Proto: https`, or the browser's `Origin` is https)
//! the cookie is therefore `__Host-webhookd_console`: `Secure` (never sent
//! over plain http, where another service on the host would see it),
//! `Path=/` and no `Domain`, which a browser takes only from an https
//! origin, so no plain-http service on the host can set or replace it.
//! Over plain http it stays `webhookd_console`, for `/console`: a
//! `__Host-` cookie needs `Secure`. Either name is read on any request;
//! what makes a session is the value's signature, never its name.

use std::time::Duration;

use axum::http::{HeaderMap, header};

/// The cookie's name over plain http.
pub const PLAIN: &str = "webhookd_console";
/// The cookie's name behind https.
pub const HOST: &str = "__Host-webhookd_console";

/// Whether the browser reached us over https (through a proxy that says
/// so).
pub fn behind_https(headers: &HeaderMap) -> bool {
    let says = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"))
    };
    says("x-forwarded-proto")
        || headers
            .get(header::ORIGIN)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|o| o.starts_with("https://"))
}

/// The `Set-Cookie` of a new session.
pub fn issue(value: &str, ttl: Duration, https: bool) -> String {
    let max_age = ttl.as_secs();
    if https {
        format!("{HOST}={value}; Secure; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}")
    } else {
        format!("{PLAIN}={value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={max_age}")
    }
}

/// The `Set-Cookie`s that drop the session: the plain one, and behind
/// https the `__Host-` one too (a browser takes that only over https).
pub fn clear(https: bool) -> Vec<String> {
    let mut cleared = vec![format!(
        "{PLAIN}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0"
    )];
    if https {
        cleared.push(format!(
            "{HOST}=; Secure; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"
        ));
    }
    cleared
}

/// The values of the session cookies the request carries, under either
/// name.
pub fn values(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(name, _)| *name == PLAIN || *name == HOST)
        .map(|(_, value)| value)
}
