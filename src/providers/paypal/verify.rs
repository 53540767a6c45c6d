//! Checks one PayPal delivery: its five `PAYPAL-*` headers, its time, and
//! its RSA signature of `{transmission_id}|{transmission_time}|{webhook_id}|{crc32}`
//! under the certificate its URL names ([`super::certs`]).

use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::HeaderMap;

use super::certs::{CertRef, CertSettings, Store};
use super::{parse_event, parse_time, signed_message};
use crate::providers::{
    SignatureError, VerifiedEvent, Verify, check_tolerance, is_identifier, required_header,
    verified,
};

/// The only algorithm PayPal signs with.
pub const AUTH_ALGO: &str = "SHA256withRSA";

/// What the PayPal verifier needs.
#[derive(Debug, Clone)]
pub struct PaypalSettings {
    /// The ids PayPal gave the endpoints (`PAYPAL_WEBHOOK_ID`); a delivery
    /// signed for any of them is accepted.
    pub webhook_ids: Vec<String>,
    /// Largest accepted difference, in seconds, between the transmission
    /// time and now, either way.
    pub tolerance_secs: u64,
    pub certs: CertSettings,
}

#[derive(Debug)]
pub struct PaypalVerifier {
    webhook_ids: Vec<String>,
    tolerance_secs: u64,
    certs: Arc<Store>,
}

impl PaypalVerifier {
    pub fn new(settings: &PaypalSettings) -> anyhow::Result<Self> {
        anyhow::ensure!(
            !settings.webhook_ids.is_empty(),
            "PayPal needs at least one webhook id"
        );
        Ok(PaypalVerifier {
            webhook_ids: settings.webhook_ids.clone(),
            tolerance_secs: settings.tolerance_secs,
            certs: Arc::new(Store::new(&settings.certs)?),
        })
    }

    /// The headers, well-formed and on time: what is checked before any
    /// certificate is looked for.
    fn transmission<'h>(
        &self,
        headers: &'h HeaderMap,
        now: i64,
    ) -> Result<Transmission<'h>, SignatureError> {
        let transmission = Transmission::parse(headers)?;
        check_tolerance(now, transmission.unix, self.tolerance_secs)?;
        Ok(transmission)
    }
}

/// A delivery's signing headers.
#[derive(Debug)]
struct Transmission<'h> {
    id: &'h str,
    time: &'h str,
    unix: i64,
    signature: Vec<u8>,
    cert: CertRef,
}

impl<'h> Transmission<'h> {
    fn parse(headers: &'h HeaderMap) -> Result<Self, SignatureError> {
        let malformed = SignatureError::MalformedHeader;
        let algo = required_header(headers, "paypal-auth-algo", "PAYPAL-AUTH-ALGO")?;
        if algo != AUTH_ALGO {
            return Err(SignatureError::NoSupportedSignature);
        }
        let id = required_header(headers, "paypal-transmission-id", "PAYPAL-TRANSMISSION-ID")?;
        // It is a field of the signed message, so it cannot hold the separator.
        if !is_identifier(id) || id.contains('|') {
            return Err(malformed("PAYPAL-TRANSMISSION-ID is not an identifier"));
        }
        let time = required_header(
            headers,
            "paypal-transmission-time",
            "PAYPAL-TRANSMISSION-TIME",
        )?;
        let unix = parse_time(time)
            .filter(|_| !time.contains('|'))
            .ok_or(malformed(
                "PAYPAL-TRANSMISSION-TIME is not an RFC 3339 time",
            ))?;
        let signature = required_header(
            headers,
            "paypal-transmission-sig",
            "PAYPAL-TRANSMISSION-SIG",
        )?;
        let signature = base64::engine::general_purpose::STANDARD
            .decode(signature)
            .ok()
            .filter(|sig| (1..=1024).contains(&sig.len()))
            .ok_or(malformed("PAYPAL-TRANSMISSION-SIG is not base64"))?;
        let cert = CertRef::parse(required_header(
            headers,
            "paypal-cert-url",
            "PAYPAL-CERT-URL",
        )?)?;
        Ok(Transmission {
            id,
            time,
            unix,
            signature,
            cert,
        })
    }
}

impl Verify for PaypalVerifier {
    /// Loads the certificate the delivery names, once its headers are
    /// well-formed and on time (so a stale or forged URL fetches nothing).
    fn prepare<'a>(
        &'a self,
        headers: &'a HeaderMap,
        now: i64,
    ) -> BoxFuture<'a, Result<(), SignatureError>> {
        Box::pin(async move {
            let transmission = self.transmission(headers, now)?;
            self.certs.load(&transmission.cert, now).await.map(drop)
        })
    }

    fn verify(
        &self,
        headers: &HeaderMap,
        body: &Bytes,
        now: i64,
    ) -> Result<VerifiedEvent, SignatureError> {
        let transmission = self.transmission(headers, now)?;
        let cert = self
            .certs
            .cached(&transmission.cert)
            .ok_or(SignatureError::KeyUnavailable)?;
        if !cert.valid_at(now) {
            return Err(SignatureError::InvalidCertificate(
                "the certificate is not valid now",
            ));
        }
        // Every id is tried, whichever matches, as the HMAC schemes try
        // every secret.
        let mut matched = false;
        for webhook_id in &self.webhook_ids {
            let message = signed_message(transmission.id, transmission.time, webhook_id, body);
            matched |= cert.verifies(message.as_bytes(), &transmission.signature);
        }
        if !matched {
            return Err(SignatureError::Mismatch);
        }
        parse_event(body, Some(transmission.unix)).map(verified)
    }
}
