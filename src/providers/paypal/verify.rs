//! Checks one PayPal delivery: its five `PAYPAL-*` headers, its time, and
//! its RSA signature of `{transmission_id}|{transmission_time}|{webhook_id}|{crc32}`
//! under the certificate its URL names ([`super::certs`]).

use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::HeaderMap;

use super::certs::{CertRef, CertSettings, Env, Store};
use super::{crc32, header, message, parse_event, parse_time};
use crate::providers::{
    SignatureError, VerifiedEvent, Verify, check_tolerance, delivered_id, is_identifier,
    required_header, verified,
};

/// The only algorithm PayPal signs with.
pub const SIGNING_ALGO: &str = "SHA256withRSA";

/// What the PayPal verifier needs.
#[derive(Debug, Clone)]
pub struct PaypalSettings {
    /// The ids PayPal gave the endpoints (`PAYPAL_WEBHOOK_ID`); a delivery
    /// signed for any of them is accepted.
    pub webhook_ids: Vec<String>,
    /// Largest accepted difference, in seconds, between the transmission
    /// time and now, either way.
    pub tolerance_secs: u64,
    /// The environments whose certificate URLs are accepted.
    pub environments: Vec<Env>,
    pub certs: CertSettings,
}

#[derive(Debug)]
pub struct PaypalVerifier {
    webhook_ids: Vec<String>,
    tolerance_secs: u64,
    environments: Vec<Env>,
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
            environments: settings.environments.clone(),
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
        if !self.environments.contains(&transmission.cert.env) {
            return Err(SignatureError::MalformedHeader(
                "PAYPAL-CERT-URL names a PayPal environment this endpoint does not accept",
            ));
        }
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
        let algo = single(headers, header::AUTH_ALGO, "PAYPAL-AUTH-ALGO")?;
        if algo != SIGNING_ALGO {
            return Err(SignatureError::NoSupportedSignature);
        }
        let id = single(headers, header::TRANSMISSION_ID, "PAYPAL-TRANSMISSION-ID")?;
        // It is a field of the signed message, so it cannot hold the separator.
        if !is_identifier(id) || id.contains('|') {
            return Err(malformed("PAYPAL-TRANSMISSION-ID is not an identifier"));
        }
        let time = single(
            headers,
            header::TRANSMISSION_TIME,
            "PAYPAL-TRANSMISSION-TIME",
        )?;
        let unix = Some(time)
            .filter(|time| is_utc_time(time))
            .and_then(parse_time)
            .ok_or(malformed(
                "PAYPAL-TRANSMISSION-TIME is not an RFC 3339 UTC time",
            ))?;
        let signature = single(headers, header::TRANSMISSION_SIG, "PAYPAL-TRANSMISSION-SIG")?;
        let signature = base64::engine::general_purpose::STANDARD
            .decode(signature)
            .ok()
            .filter(|sig| (1..=1024).contains(&sig.len()))
            .ok_or(malformed("PAYPAL-TRANSMISSION-SIG is not base64"))?;
        let cert = CertRef::parse(single(headers, header::CERT_URL, "PAYPAL-CERT-URL")?)?;
        Ok(Transmission {
            id,
            time,
            unix,
            signature,
            cert,
        })
    }
}

/// The one value of header `name`: a header sent twice is refused, so that
/// nothing in front of webhookd can have read another copy.
fn single<'h>(
    headers: &'h HeaderMap,
    name: &'static str,
    shown: &'static str,
) -> Result<&'h str, SignatureError> {
    if headers.get_all(name).iter().nth(1).is_some() {
        return Err(SignatureError::MalformedHeader(
            "a PAYPAL-* header was sent twice",
        ));
    }
    required_header(headers, name, shown)
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, the form PayPal sends, exactly.
fn is_utc_time(time: &str) -> bool {
    let Some(rest) = time.strip_suffix('Z') else {
        return false;
    };
    let (seconds, fraction) = match rest.split_once('.') {
        Some((seconds, fraction)) => (seconds, Some(fraction)),
        None => (rest, None),
    };
    let shaped = seconds.len() == 19
        && seconds.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            10 => b == b'T',
            13 | 16 => b == b':',
            _ => b.is_ascii_digit(),
        });
    shaped
        && fraction
            .is_none_or(|f| (1..=9).contains(&f.len()) && f.bytes().all(|b| b.is_ascii_digit()))
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
        let crc = crc32(body);
        let mut matched = None;
        for (index, webhook_id) in self.webhook_ids.iter().enumerate() {
            let message = message(transmission.id, transmission.time, webhook_id, crc);
            if cert.verifies(message.as_bytes(), &transmission.signature) {
                matched = matched.or(Some(index));
            }
        }
        let webhook_id = matched.ok_or(SignatureError::Mismatch)?;
        let event = parse_event(body, Some(transmission.unix))?;
        delivered_id(event.event_id())?;
        Ok(verified(event, webhook_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paypal_s_utc_form_is_a_transmission_time() {
        for good in [
            "2024-08-02T19:33:35Z",
            "2024-08-02T19:33:35.123Z",
            "2024-08-02T19:33:35.123456789Z",
        ] {
            assert!(is_utc_time(good), "{good}");
        }
        for bad in [
            "2024-08-02T19:33:35+00:00",
            "2024-08-02t19:33:35z",
            "2024-08-02T19:33:35ZabcdZ",
            "2024-08-02T19:33:35.Z",
            "2024-08-02T19:33:35Z|||Z",
            "2024-08-02 19:33:35Z",
            "2024-8-02T19:33:35Z",
            "2024-08-02T19:33:35.1234567890Z",
            "",
        ] {
            assert!(!is_utc_time(bad), "{bad}");
        }
    }
}
