//! PayPal's certificate-signed deliveries: accepted only when signed for a
//! configured webhook id by a certificate that PayPal's URL names and that
//! passes its checks; every forgery is a 400 that writes nothing, and a
//! certificate that cannot be fetched is a 503.

use std::path::{Path, PathBuf};

use futures_util::future::join_all;
use http::HeaderMap;
use reqwest::StatusCode;
use sqlx::PgPool;
use webhookd::clock::Clock;
use webhookd::config::ServeSettings;
use webhookd::providers::paypal::certs::{CertSettings, Env};
use webhookd::providers::paypal::{PaypalSettings, PaypalVerifier, signed_message};
use webhookd::providers::{SignatureError, Verify};

use crate::helpers::{TestApp, route_app_with, spawn_app_with};
use crate::signature::paypal_certs::{Answer, FakeCerts, NOW, fixture, rfc3339, sign, temp_dir};

const WEBHOOK_ID: &str = "8PT597110X687430LKGECATA";
const OTHER_WEBHOOK_ID: &str = "1HE90801975891415";
const LIVE_URL: &str =
    "https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-1a5f47cb";
pub const LIVE_ID: &str = "CERT-360caa42-fca2a594-1a5f47cb";

/// A capture of `amount` USD for `user`, as PayPal sends it.
pub fn capture_completed(event_id: &str, capture_id: &str, user: &str, amount: &str) -> String {
    serde_json::json!({
        "id": event_id,
        "event_version": "1.0",
        "create_time": "2027-05-31T23:59:00Z",
        "resource_type": "capture",
        "resource_version": "2.0",
        "event_type": "PAYMENT.CAPTURE.COMPLETED",
        "summary": format!("Payment completed for $ {amount} USD"),
        "resource": {
            "id": capture_id,
            "status": "COMPLETED",
            "amount": { "currency_code": "USD", "value": amount },
            "final_capture": true,
            "custom_id": user,
            "seller_protection": { "status": "ELIGIBLE" },
            "create_time": "2027-05-31T23:58:00Z",
            "update_time": "2027-05-31T23:58:00Z",
            "links": [
                { "href": format!("https://api.paypal.com/v2/payments/captures/{capture_id}"), "rel": "self", "method": "GET" },
                { "href": "https://api.paypal.com/v2/checkout/orders/5O190127TN364715T", "rel": "up", "method": "GET" }
            ]
        },
        "links": [
            { "href": format!("https://api.paypal.com/v1/notifications/webhooks-events/{event_id}"), "rel": "self", "method": "GET" }
        ]
    })
    .to_string()
}

/// A delivery's five headers, signed by `key` for `webhook_id` at `time`.
#[derive(Debug, Clone)]
pub struct Signed {
    pub transmission_id: String,
    pub time: String,
    pub webhook_id: String,
    pub cert_url: String,
    pub algo: String,
    pub key: String,
}

impl Default for Signed {
    fn default() -> Self {
        Signed {
            transmission_id: "69cd13f0-d67a-11e5-baa3-778b53f4ae55".to_owned(),
            time: rfc3339(NOW),
            webhook_id: WEBHOOK_ID.to_owned(),
            cert_url: LIVE_URL.to_owned(),
            algo: "SHA256withRSA".to_owned(),
            key: "live.key".to_owned(),
        }
    }
}

impl Signed {
    pub fn headers(&self, body: &str) -> Vec<(String, String)> {
        let message = signed_message(
            &self.transmission_id,
            &self.time,
            &self.webhook_id,
            body.as_bytes(),
        );
        vec![
            (
                "paypal-transmission-id".into(),
                self.transmission_id.clone(),
            ),
            ("paypal-transmission-time".into(), self.time.clone()),
            ("paypal-transmission-sig".into(), sign(&self.key, &message)),
            ("paypal-cert-url".into(), self.cert_url.clone()),
            ("paypal-auth-algo".into(), self.algo.clone()),
        ]
    }
}

/// POSTs `body` to /webhooks/paypal with the headers of
/// [`Signed::default()`].
pub async fn post_signed(app: &TestApp, body: &str) -> reqwest::Response {
    let headers = Signed::default().headers(body);
    app.post_to("paypal", body.as_bytes().to_vec(), &headers)
        .await
}

/// A certificate directory holding `pinned` (fixture names) under ids.
pub fn cert_dir(pinned: &[(&str, &str)]) -> PathBuf {
    let dir = temp_dir("paypal-certs");
    for (id, fixture_name) in pinned {
        std::fs::write(dir.join(format!("{id}.pem")), fixture(fixture_name)).unwrap();
    }
    dir
}

/// The app with PayPal mounted for two webhook ids, its certificates in
/// `dir`, and the tests' clock.
pub async fn paypal_app(pool: PgPool, dir: &Path) -> TestApp {
    spawn_app_with(pool, Clock::Fixed(NOW), mounted(dir)).await
}

/// [`paypal_app`], called through its router without a socket.
async fn routed_paypal_app(pool: PgPool, dir: &Path) -> TestApp {
    route_app_with(pool, Clock::Fixed(NOW), mounted(dir)).await
}

/// PayPal mounted for two webhook ids, its certificates in `dir`.
fn mounted(dir: &Path) -> impl FnOnce(&mut ServeSettings) + use<> {
    let dir = dir.to_owned();
    move |settings| {
        settings.paypal.paypal_webhook_id = format!("{WEBHOOK_ID}, {OTHER_WEBHOOK_ID}");
        settings.paypal.paypal_cert_dir = Some(dir);
    }
}

async fn recorded(pool: &PgPool) -> Vec<(String, String, String)> {
    sqlx::query_as(
        "select event_id, outcome, received_via from processed_events where provider = 'paypal' order by event_id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test]
async fn a_signed_delivery_is_recorded_once_however_many_copies_arrive(pool: PgPool) {
    let dir = cert_dir(&[(LIVE_ID, "live.pem"), ("CERT-sandbox", "sandbox.pem")]);
    let app = paypal_app(pool, &dir).await;
    let body = capture_completed(
        "WH-2WR32451HC0233532-67976317FL4543714",
        "2GG279541U471931P",
        "user_pp",
        "30.00",
    );
    let headers = Signed::default().headers(&body);
    let answers =
        join_all((0..8).map(|_| app.post_to("paypal", body.clone().into_bytes(), &headers))).await;
    for answer in answers {
        assert_eq!(answer.status(), StatusCode::OK);
    }
    let rows = recorded(&app.pool).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].2, "webhook");
    // Signed for the other configured id: accepted too.
    let body = capture_completed("WH-OTHER-ID", "3GG279541U471931P", "user_pp", "1.00");
    let other = Signed {
        webhook_id: OTHER_WEBHOOK_ID.into(),
        ..Signed::default()
    };
    let answer = app
        .post_to("paypal", body.clone().into_bytes(), &other.headers(&body))
        .await;
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(recorded(&app.pool).await.len(), 2);
    // A sandbox delivery, signed by the sandbox's certificate.
    let body = capture_completed("WH-SANDBOX", "6GG279541U471931P", "user_pp", "2.00");
    let sandbox = Signed {
        cert_url: "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-sandbox".into(),
        key: "sandbox.key".into(),
        ..Signed::default()
    };
    let answer = app
        .post_to("paypal", body.clone().into_bytes(), &sandbox.headers(&body))
        .await;
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(recorded(&app.pool).await.len(), 3);
    // The captures credited their user: 30.00 + 1.00 + 2.00 USD.
    assert_eq!(app.balance("user_pp", "USD").await, Some(3300));
    app.assert_consistent().await;
}

/// Each forgery of the issue's list, through the router: 400, nothing
/// written.
#[sqlx::test]
async fn every_forgery_is_refused_and_writes_nothing(pool: PgPool) {
    let dir = cert_dir(&[
        (LIVE_ID, "live.pem"),
        ("CERT-expired", "expired.pem"),
        ("CERT-misnamed", "misnamed.pem"),
        ("CERT-sandbox-named", "sandbox.pem"),
    ]);
    let app = routed_paypal_app(pool, &dir).await;
    let body = capture_completed("WH-FORGED", "9GG279541U471931P", "user_pp", "30.00");
    let good = Signed::default();
    let with = |change: &dyn Fn(&mut Signed)| {
        let mut signed = good.clone();
        change(&mut signed);
        signed
    };
    let mut forgeries: Vec<(&str, String, Headers)> = vec![
        (
            "tampered body",
            body.replace("30.00", "3000.00"),
            good.headers(&body),
        ),
        (
            "another webhook id",
            body.clone(),
            with(&|s| s.webhook_id = "WH-SOMEONE-ELSE".into()).headers(&body),
        ),
        (
            "stale time",
            body.clone(),
            with(&|s| s.time = rfc3339(NOW - 301)).headers(&body),
        ),
        (
            "time from the future",
            body.clone(),
            with(&|s| s.time = rfc3339(NOW + 301)).headers(&body),
        ),
        (
            "another algorithm",
            body.clone(),
            with(&|s| s.algo = "SHA1withRSA".into()).headers(&body),
        ),
        (
            "signed by another key",
            body.clone(),
            with(&|s| s.key = "sandbox.key".into()).headers(&body),
        ),
        (
            "an expired pinned certificate",
            body.clone(),
            with(&|s| {
                s.cert_url = "https://api.paypal.com/v1/notifications/certs/CERT-expired".into();
            })
            .headers(&body),
        ),
        (
            "a misnamed pinned certificate",
            body.clone(),
            with(&|s| {
                s.cert_url = "https://api.paypal.com/v1/notifications/certs/CERT-misnamed".into();
            })
            .headers(&body),
        ),
        (
            "a sandbox certificate behind a live URL",
            body.clone(),
            with(&|s| {
                s.cert_url =
                    "https://api.paypal.com/v1/notifications/certs/CERT-sandbox-named".into();
                s.key = "sandbox.key".into();
            })
            .headers(&body),
        ),
    ];
    for url in forged_urls() {
        let headers = with(&|s| s.cert_url = url.to_owned()).headers(&body);
        forgeries.push(("a certificate URL PayPal never uses", body.clone(), headers));
    }
    let mut garbage = good.headers(&body);
    garbage[2].1 = "not base64 at all!".into();
    forgeries.push(("a garbage signature", body.clone(), garbage));
    let mut zeroes = good.headers(&body);
    zeroes[2].1 = base64_of(&[0; 256]);
    forgeries.push(("a signature of zeroes", body.clone(), zeroes));
    for missing in 0..5 {
        let mut headers = good.headers(&body);
        headers.remove(missing);
        forgeries.push(("a missing header", body.clone(), headers));
    }
    for (what, body, headers) in forgeries {
        let answer = app.post_to("paypal", body.into_bytes(), &headers).await;
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "{what}");
    }
    assert!(recorded(&app.pool).await.is_empty());
    // Counted apart: untrusted certificates, bad signatures, stale times.
    let request = app.client.get(format!("{}/metrics", app.address));
    let metrics = app.send(request).await.text().await.unwrap();
    for outcome in ["invalid_certificate", "invalid_signature", "stale"] {
        let series = format!(r#"provider="paypal",outcome="{outcome}""#);
        assert!(metrics.contains(&series), "{series} in\n{metrics}");
    }
    app.assert_consistent().await;
}

/// A delivery's headers, name and value.
type Headers = Vec<(String, String)>;

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// URLs that are not PayPal's: other hosts, lookalikes, http, ports,
/// credentials, other paths, queries, encodings.
fn forged_urls() -> [&'static str; 17] {
    [
        "http://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-1a5f47cb",
        "https://api.paypal.com.evil.example/v1/notifications/certs/CERT-360caa42-fca2a594-1a5f47cb",
        "https://evil.example/v1/notifications/certs/CERT-360caa42-fca2a594-1a5f47cb",
        "https://api-paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-1a5f47cb",
        "https://api.paypal.com@evil.example/v1/notifications/certs/CERT-360caa42-fca2a594-1a5f47cb",
        "https://api.paypal.com:8443/v1/notifications/certs/CERT-360caa42-fca2a594-1a5f47cb",
        "https://API.PAYPAL.COM/v1/notifications/certs/CERT-360caa42-fca2a594-1a5f47cb",
        "https://api.paypal.com/v1/notifications/certs/../certs/CERT-360caa42",
        "https://api.paypal.com/v1/notifications/certs/CERT-360caa42?x=1",
        "https://api.paypal.com/v1/notifications/certs/CERT-%2e%2e",
        "https://api.paypal.com/v2/notifications/certs/CERT-360caa42-fca2a594-1a5f47cb",
        "https://api.paypal.com/v1/notifications/certs/",
        "https://api.paypal.com./v1/notifications/certs/CERT-360caa42-fca2a594-1a5f47cb",
        "https://api.sandbox.paypal.com.evil.example/v1/notifications/certs/CERT-360caa42",
        "https://api.paypal.com/v1/notifications/certs/CERT-360caa42#x",
        "https://api.paypal.com/v1/notifications/certs/CERT-360caa42/",
        "https://api.paypal.com/v1/notifications/certs/CERT-360caa42%2F..",
    ]
}

fn headers_of(pairs: &[(String, String)]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in pairs {
        headers.insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    headers
}

fn verifier(fake: &FakeCerts, dir: Option<PathBuf>) -> PaypalVerifier {
    verifier_with(WEBHOOK_ID, fake.settings(dir)).unwrap()
}

/// A verifier for `webhook_id`, both environments, 300 s of tolerance.
fn verifier_with(webhook_id: &str, certs: CertSettings) -> anyhow::Result<PaypalVerifier> {
    PaypalVerifier::new(&PaypalSettings {
        webhook_ids: vec![webhook_id.to_owned()],
        tolerance_secs: 300,
        environments: vec![Env::Live, Env::Sandbox],
        certs,
    })
}

/// Fetches, then checks, as the route does.
async fn check(
    verifier: &PaypalVerifier,
    signed: &Signed,
    body: &str,
) -> Result<String, SignatureError> {
    let headers = headers_of(&signed.headers(body));
    verifier.prepare(&headers, NOW).await?;
    let event = verifier.verify(&headers, &bytes::Bytes::from(body.to_owned()), NOW)?;
    Ok(event.event_id().to_owned())
}

#[tokio::test]
async fn a_fetched_certificate_that_chains_to_a_trusted_root_is_kept_and_fetched_once() {
    let fake = FakeCerts::start().await;
    fake.answer(LIVE_ID, Answer::Pem(fixture("live.pem")));
    let dir = temp_dir("paypal-fetch");
    let first = verifier(&fake, Some(dir.clone()));
    let body = capture_completed("WH-FETCHED", "1AB", "user_pp", "5.00");
    // Copies of a delivery arriving together share one fetch.
    let signed = Signed::default();
    let checks = join_all((0..6).map(|_| check(&first, &signed, &body))).await;
    for checked in checks {
        assert_eq!(checked.unwrap(), "WH-FETCHED");
    }
    assert_eq!(fake.requests(), [LIVE_ID]);
    assert_eq!(
        std::fs::read_to_string(dir.join(format!("{LIVE_ID}.pem"))).unwrap(),
        fixture("live.pem")
    );
    // A restart reads the kept file instead of fetching.
    let restarted = verifier(&fake, Some(dir));
    assert_eq!(
        check(&restarted, &Signed::default(), &body).await.unwrap(),
        "WH-FETCHED"
    );
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn a_fetched_certificate_must_chain_name_the_signer_and_be_valid_now() {
    let fake = FakeCerts::start().await;
    let dir = temp_dir("paypal-untrusted");
    let verifier = verifier(&fake, Some(dir.clone()));
    let body = capture_completed("WH-UNTRUSTED", "1AB", "user_pp", "5.00");
    for (id, pem) in [
        ("CERT-self-signed", "self_signed.pem"),
        ("CERT-misnamed", "misnamed.pem"),
        ("CERT-expired", "expired.pem"),
        ("CERT-cn-only", "cn_only.pem"),
        ("CERT-root", "root.pem"),
    ] {
        fake.answer(id, Answer::Pem(fixture(pem)));
        let signed = Signed {
            cert_url: format!("https://api.paypal.com/v1/notifications/certs/{id}"),
            ..Signed::default()
        };
        let refused = check(&verifier, &signed, &body).await.unwrap_err();
        assert!(
            matches!(refused, SignatureError::InvalidCertificate(_)),
            "{pem}: {refused:?}"
        );
        assert!(!dir.join(format!("{id}.pem")).exists(), "{pem} was kept");
    }
}

#[tokio::test]
async fn a_certificate_that_cannot_be_fetched_is_unavailable_and_redirects_are_not_followed() {
    let fake = FakeCerts::start().await;
    let verifier = verifier(&fake, None);
    let body = capture_completed("WH-UNAVAILABLE", "1AB", "user_pp", "5.00");
    fake.answer(
        "CERT-server-error",
        Answer::Status(StatusCode::INTERNAL_SERVER_ERROR),
    );
    fake.answer(
        "CERT-redirect",
        Answer::RedirectTo("https://api.paypal.com/v1/notifications/certs/CERT-target".into()),
    );
    fake.answer("CERT-target", Answer::Pem(fixture("live.pem")));
    for id in ["CERT-server-error", "CERT-redirect"] {
        let signed = Signed {
            cert_url: format!("https://api.paypal.com/v1/notifications/certs/{id}"),
            ..Signed::default()
        };
        let refused = check(&verifier, &signed, &body).await.unwrap_err();
        assert_eq!(refused, SignatureError::KeyUnavailable, "{id}");
    }
    assert!(
        !fake.requests().contains(&"CERT-target".to_owned()),
        "{:?}",
        fake.requests()
    );
    // A transient failure is not remembered: once PayPal answers, it works.
    fake.answer("CERT-server-error", Answer::Pem(fixture("live.pem")));
    let signed = Signed {
        cert_url: "https://api.paypal.com/v1/notifications/certs/CERT-server-error".into(),
        ..Signed::default()
    };
    assert!(check(&verifier, &signed, &body).await.is_ok());
    // An id PayPal does not have is a forgery: 400.
    let signed = Signed {
        cert_url: "https://api.paypal.com/v1/notifications/certs/CERT-missing".into(),
        ..Signed::default()
    };
    let refused = check(&verifier, &signed, &body).await.unwrap_err();
    assert!(
        matches!(refused, SignatureError::InvalidCertificate(_)),
        "{refused:?}"
    );
    // PayPal unreachable altogether.
    let mut settings = fake.settings(None);
    settings.connect_to = Some(std::net::SocketAddr::from((
        [127, 0, 0, 1],
        crate::service::lifecycle::free_port(),
    )));
    let unreachable = verifier_with(WEBHOOK_ID, settings).unwrap();
    let refused = check(&unreachable, &Signed::default(), &body)
        .await
        .unwrap_err();
    assert_eq!(refused, SignatureError::KeyUnavailable);
}

#[tokio::test]
async fn forged_urls_stale_times_and_other_algorithms_fetch_nothing() {
    let fake = FakeCerts::start().await;
    fake.answer(LIVE_ID, Answer::Pem(fixture("live.pem")));
    let verifier = verifier(&fake, None);
    let body = capture_completed("WH-NO-FETCH", "1AB", "user_pp", "5.00");
    let mut attempts: Vec<Signed> = forged_urls()
        .into_iter()
        .map(|url| Signed {
            cert_url: url.to_owned(),
            ..Signed::default()
        })
        .collect();
    attempts.push(Signed {
        time: rfc3339(NOW - 3600),
        ..Signed::default()
    });
    attempts.push(Signed {
        algo: "SHA512withRSA".into(),
        ..Signed::default()
    });
    for signed in attempts {
        assert!(
            check(&verifier, &signed, &body).await.is_err(),
            "{signed:?}"
        );
    }
    assert!(fake.requests().is_empty(), "{:?}", fake.requests());
}

/// A real simulator delivery: its body, its headers and its time.
fn simulated(name: &str) -> (String, Headers, i64) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/paypal/simulator")
        .join(name);
    let body = std::fs::read_to_string(dir.join("body.json")).unwrap();
    let headers: Headers = std::fs::read_to_string(dir.join("headers.txt"))
        .unwrap()
        .lines()
        .filter_map(|line| line.split_once(": "))
        .map(|(name, value)| (name.to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let time = headers
        .iter()
        .find(|(name, _)| name == "paypal-transmission-time")
        .and_then(|(_, time)| webhookd::providers::paypal::parse_time(time))
        .unwrap();
    (body, headers, time)
}

const SIMULATOR_CERT: &str = "CERT-360caa42-fca2a594-1a5f47cb";

fn simulator_cert() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/paypal/simulator")
        .join(format!("{SIMULATOR_CERT}.pem"));
    std::fs::read_to_string(path).unwrap()
}

/// Known answers: PayPal's own simulator deliveries, signed for the webhook
/// id `WEBHOOK_ID`, verify with PayPal's certificate pinned, at their time.
#[sqlx::test]
async fn paypal_simulator_deliveries_verify_at_their_time(pool: PgPool) {
    let dir = temp_dir("paypal-simulator");
    std::fs::write(dir.join(format!("{SIMULATOR_CERT}.pem")), simulator_cert()).unwrap();
    let captures = [
        "capture-completed",
        "capture-pending",
        "capture-declined",
        "capture-refunded",
        "capture-reversed",
    ];
    // All five were sent within two minutes: one clock for them all.
    let (_, _, at) = simulated("capture-declined");
    let app = route_app_with(pool, Clock::Fixed(at), {
        let dir = dir.clone();
        move |settings| {
            settings.paypal.paypal_webhook_id = "WEBHOOK_ID".into();
            settings.paypal.paypal_cert_dir = Some(dir);
        }
    })
    .await;
    for name in captures {
        let (body, headers, _) = simulated(name);
        let answer = app
            .post_to("paypal", body.clone().into_bytes(), &headers)
            .await;
        assert_eq!(answer.status(), StatusCode::OK, "{name}");
        // One byte changed: refused.
        let tampered = body.replacen("\"id\"", "\"id\" ", 1);
        let answer = app.post_to("paypal", tampered.into_bytes(), &headers).await;
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "{name} tampered");
    }
    assert_eq!(recorded(&app.pool).await.len(), captures.len());
    app.assert_consistent().await;
}

/// The subscription samples carry an impossible `create_time`
/// (`2018-19-12T22:20:32.000Z`): still verified and recorded, never a 400.
#[sqlx::test]
async fn simulator_subscriptions_with_impossible_dates_are_recorded(pool: PgPool) {
    let dir = temp_dir("paypal-simulator-subscriptions");
    std::fs::write(dir.join(format!("{SIMULATOR_CERT}.pem")), simulator_cert()).unwrap();
    for name in [
        "subscription-created",
        "subscription-cancelled",
        "subscription-expired",
        "subscription-payment-failed",
    ] {
        let (body, headers, at) = simulated(name);
        assert!(
            name.ends_with("payment-failed") || body.contains("2018-19-12T22:20:32"),
            "{name} has the impossible date"
        );
        let dir = dir.clone();
        let app = route_app_with(pool.clone(), Clock::Fixed(at), move |settings| {
            settings.paypal.paypal_webhook_id = "WEBHOOK_ID".into();
            settings.paypal.paypal_cert_dir = Some(dir);
        })
        .await;
        let answer = app.post_to("paypal", body.into_bytes(), &headers).await;
        assert_eq!(answer.status(), StatusCode::OK, "{name}");
    }
    // The simulator sends CANCELLED and EXPIRED under one event id: the
    // second is a duplicate of the first.
    assert_eq!(recorded(&pool).await.len(), 3);
}

/// PayPal's certificate URL serves the leaf alone: fetched, it chains to
/// DigiCert's root through the intermediate webhookd ships, at its time.
#[tokio::test]
async fn paypal_s_real_certificate_fetched_chains_through_the_shipped_issuers() {
    let fake = FakeCerts::start().await;
    fake.answer(SIMULATOR_CERT, Answer::Pem(simulator_cert()));
    let mut settings = fake.settings(None);
    settings.roots.clear();
    let verifier = verifier_with("WEBHOOK_ID", settings).unwrap();
    let (body, headers, at) = simulated("capture-completed");
    let headers = headers_of(&headers);
    verifier.prepare(&headers, at).await.unwrap();
    let event = verifier
        .verify(&headers, &bytes::Bytes::from(body), at)
        .unwrap();
    assert_eq!(event.event_type(), "PAYMENT.CAPTURE.COMPLETED");
    // A year later the certificate has expired: refused, even fresh.
    let later = at + 365 * 86_400;
    let fresh = PaypalVerifier::new(&PaypalSettings {
        webhook_ids: vec!["WEBHOOK_ID".into()],
        tolerance_secs: u64::MAX / 4,
        environments: vec![Env::Live, Env::Sandbox],
        certs: {
            let mut s = fake.settings(None);
            s.roots.clear();
            s
        },
    })
    .unwrap();
    let refused = fresh.prepare(&headers, later).await.unwrap_err();
    assert!(
        matches!(refused, SignatureError::InvalidCertificate(_)),
        "{refused:?}"
    );
}

/// Without `PAYPAL_WEBHOOK_ID`, PayPal is not mounted: 404, even for a
/// delivery that would verify.
#[sqlx::test]
async fn paypal_is_not_found_without_a_webhook_id(pool: PgPool) {
    let dir = cert_dir(&[(LIVE_ID, "live.pem")]);
    let app = route_app_with(pool, Clock::Fixed(NOW), move |settings| {
        settings.paypal.paypal_cert_dir = Some(dir);
    })
    .await;
    let body = capture_completed("WH-UNMOUNTED", "4GG279541U471931P", "user_pp", "1.00");
    let answer = post_signed(&app, &body).await;
    assert_eq!(answer.status(), StatusCode::NOT_FOUND);
    assert!(recorded(&app.pool).await.is_empty());
}

/// A certificate that could not be had is not asked for again at once: a
/// storm of deliveries naming a missing id costs PayPal one request.
#[tokio::test]
async fn a_missing_certificate_is_asked_for_once_in_a_storm() {
    let fake = FakeCerts::start().await;
    let verifier = verifier(&fake, None);
    let body = capture_completed("WH-STORM", "1AB", "user_pp", "5.00");
    let signed = Signed {
        cert_url: "https://api.paypal.com/v1/notifications/certs/CERT-made-up".into(),
        ..Signed::default()
    };
    let checks = join_all((0..20).map(|_| check(&verifier, &signed, &body))).await;
    for checked in checks {
        let refused = checked.unwrap_err();
        assert!(
            matches!(refused, SignatureError::InvalidCertificate(_)),
            "{refused:?}"
        );
    }
    assert_eq!(fake.requests(), ["CERT-made-up"]);
    // Made-up ids, each new: fetches start in a short burst at most, and
    // the rest are answered 503 at once instead of queueing.
    let made_up: Vec<Signed> = (0..12)
        .map(|i| Signed {
            cert_url: format!("https://api.paypal.com/v1/notifications/certs/CERT-made-up-{i}"),
            ..Signed::default()
        })
        .collect();
    let checks = join_all(made_up.iter().map(|signed| check(&verifier, signed, &body))).await;
    let unavailable = checks
        .iter()
        .filter(|c| matches!(c, Err(SignatureError::KeyUnavailable)))
        .count();
    assert!(fake.requests().len() <= 6, "{:?}", fake.requests());
    assert!(unavailable >= 6, "{checks:?}");
}

/// Headers sent twice, times in another form than PayPal's, and URLs of an
/// environment the endpoint does not accept are refused before any fetch;
/// a pinned file that is no certificate refuses its id.
#[sqlx::test]
async fn ambiguous_headers_other_time_forms_other_environments_and_bad_pins_are_refused(
    pool: PgPool,
) {
    let dir = cert_dir(&[(LIVE_ID, "live.pem"), ("CERT-sandbox", "sandbox.pem")]);
    std::fs::write(dir.join("CERT-garbage.pem"), "not a certificate").unwrap();
    std::fs::write(dir.join("CERT-empty.pem"), "").unwrap();
    let live_only = dir.clone();
    let app = route_app_with(pool, Clock::Fixed(NOW), move |settings| {
        settings.paypal.paypal_webhook_id = WEBHOOK_ID.into();
        settings.paypal.paypal_cert_dir = Some(live_only);
        settings.paypal.paypal_env = webhookd::config::PaypalEnv::Live;
    })
    .await;
    let body = capture_completed("WH-AMBIGUOUS", "5GG279541U471931P", "user_pp", "1.00");
    let mut twice = Signed::default().headers(&body);
    twice.push(twice[0].clone());
    let mut cases = vec![("a header sent twice", twice)];
    let offset = Signed {
        time: rfc3339(NOW).replace('Z', "+00:00"),
        ..Signed::default()
    };
    cases.push(("a +00:00 offset", offset.headers(&body)));
    let sandbox = Signed {
        cert_url: "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-sandbox".into(),
        key: "sandbox.key".into(),
        ..Signed::default()
    };
    cases.push((
        "a sandbox delivery to a live endpoint",
        sandbox.headers(&body),
    ));
    for id in ["CERT-garbage", "CERT-empty"] {
        let pinned = Signed {
            cert_url: format!("https://api.paypal.com/v1/notifications/certs/{id}"),
            ..Signed::default()
        };
        cases.push((
            "a pinned file that is no certificate",
            pinned.headers(&body),
        ));
    }
    for (what, headers) in cases {
        let answer = app
            .post_to("paypal", body.clone().into_bytes(), &headers)
            .await;
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "{what}");
    }
    assert!(recorded(&app.pool).await.is_empty());
    // The same delivery, well-formed, is accepted.
    let answer = post_signed(&app, &body).await;
    assert_eq!(answer.status(), StatusCode::OK);
}

/// A certificate directory others may write is refused at start-up: a
/// certificate placed there is trusted without a chain.
#[tokio::test]
async fn a_certificate_directory_others_may_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("paypal-open-dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let fake = FakeCerts::start().await;
    let refused = verifier_with(WEBHOOK_ID, fake.settings(Some(dir.clone()))).unwrap_err();
    assert!(
        refused.to_string().contains("writable by others"),
        "{refused}"
    );
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let created = dir.join("made/by/webhookd");
    verifier_with(WEBHOOK_ID, fake.settings(Some(created.clone()))).unwrap();
    let mode = std::fs::metadata(&created).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "created for its owner alone: {mode:o}");
}

/// `webhookd send paypal` signs a sample that the service verifies and
/// applies: a capture credits its user, and its refund debits them.
#[sqlx::test]
async fn send_paypal_signs_deliveries_that_the_service_applies(pool: PgPool) {
    use webhookd::cli::send::SendArgs;
    use webhookd::cli::send::paypal::{DEFAULT_CERT_URL, PaypalSendArgs};
    use webhookd::secrets::Secrets;

    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/paypal");
    let dir = temp_dir("paypal-send");
    std::fs::copy(
        fixtures.join("CERT-webhookd-test.pem"),
        dir.join("CERT-webhookd-test.pem"),
    )
    .unwrap();
    let app = spawn_app_with(pool, Clock::System, move |settings| {
        settings.paypal.paypal_webhook_id = "WH-SEND-1".into();
        settings.paypal.paypal_cert_dir = Some(dir);
    })
    .await;
    let send = |event_type: &str, amount: &str| SendArgs {
        provider: "paypal".into(),
        event_type: event_type.into(),
        user: "user_sent_pp".into(),
        amount: Some(amount.into()),
        currency: Some("USD".into()),
        payment: Some("2GG279541U471931S".into()),
        url: app.address.clone(),
        stripe_webhook_secret: Secrets::default(),
        razorpay_webhook_secret: Secrets::default(),
        stripe: Default::default(),
        paypal: PaypalSendArgs {
            paypal_key: Some(fixtures.join("test-only-signing-key.pem")),
            paypal_cert_url: DEFAULT_CERT_URL.into(),
            paypal_webhook_id: Some("WH-SEND-1".into()),
        },
    };
    let mut out = Vec::new();
    webhookd::cli::send::run(&send("PAYMENT.CAPTURE.COMPLETED", "30.00"), &mut out)
        .await
        .unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains(r#""outcome":"processed""#), "{out}");
    assert_eq!(app.balance("user_sent_pp", "USD").await, Some(3000));
    webhookd::cli::send::run(&send("PAYMENT.CAPTURE.REFUNDED", "10.00"), &mut Vec::new())
        .await
        .unwrap();
    assert_eq!(app.balance("user_sent_pp", "USD").await, Some(2000));
    app.assert_consistent().await;
}

/// A PayPal event without a usable time of its own is ordered by its
/// delivery's transmission time, stored with it: a replay orders it the
/// same, rather than refusing it for having no time.
#[sqlx::test]
async fn a_replay_keeps_the_transmission_time_of_an_event_without_one(pool: PgPool) {
    let dir = cert_dir(&[(LIVE_ID, "live.pem")]);
    let app = paypal_app(pool.clone(), &dir).await;
    let body = serde_json::json!({
        "id": "WH-NO-TIME", "event_version": "1.0", "create_time": "2018-19-12T22:20:32.000Z",
        "resource_type": "subscription", "event_type": "BILLING.SUBSCRIPTION.ACTIVATED",
        "resource": {
            "id": "I-NOTIME", "plan_id": "P-1", "status": "ACTIVE", "custom_id": "user_pp",
            "update_time": "not a time", "subscriber": { "payer_id": "PAYER1" }
        }
    })
    .to_string();
    let answer = post_signed(&app, &body).await;
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(recorded(&pool).await[0].1, "processed");
    let replay = webhookd::cli::events::EventsCommand::Replay {
        provider: "paypal".into(),
        event_id: "WH-NO-TIME".into(),
        stripe: Box::default(),
    };
    let mut out = Vec::new();
    webhookd::cli::events::run(&pool, &replay, &[], &mut out)
        .await
        .unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(!out.contains("rejected"), "{out}");
    assert!(
        out.contains("stored outcome unchanged (processed)"),
        "{out}"
    );
}
