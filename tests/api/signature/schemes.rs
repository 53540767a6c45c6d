//! Every non-Stripe signature scheme: valid, duplicate, and every kind of
//! forgery refused with nothing written, through the app's router (no
//! socket); 20 concurrent copies over real HTTP. Plus known-answer vectors
//! computed outside this code base.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use futures_util::future::join_all;
use hmac::{Hmac, Mac};
use http::HeaderMap;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::Sha256;
use sqlx::PgPool;
use webhookd::clock::Clock;
use webhookd::providers::github::GithubVerifier;
use webhookd::providers::razorpay::RazorpayVerifier;
use webhookd::providers::shopify::ShopifyVerifier;
use webhookd::providers::standard::{self, StandardVerifier};
use webhookd::providers::{SignatureError, Verify};
use webhookd::secrets::Secrets;

use crate::helpers::{
    GITHUB_SECRETS, RAZORPAY_SECRETS, SHOPIFY_SECRETS, STANDARD_SECRETS, TestApp, now, route_app,
    route_app_with, spawn_app,
};

type Headers = Vec<(String, String)>;

/// A well-formed secret (also for Standard Webhooks) that no app configures.
const WRONG_SECRET: &str = "whsec_bm90LXRoZS1jb25maWd1cmVkLXNlY3JldA==";

/// One scheme as a provider would use it.
#[derive(Clone, Copy)]
struct Scheme {
    /// The name in `/webhooks/{name}` and the `provider` column.
    name: &'static str,
    secrets: (&'static str, &'static str),
    /// A body for event `id`.
    body: fn(id: &str) -> String,
    /// The headers a provider sends: id, type, signature of `body` under `secret`.
    sign: fn(secret: &str, id: &str, body: &[u8]) -> Headers,
    /// The same signature in an encoding the scheme does not accept.
    misencode: fn(secret: &str, id: &str, body: &[u8]) -> Headers,
    /// The id the event is stored under, given the delivery's id.
    stored_id: fn(id: &str) -> String,
    /// The type it is stored under.
    event_type: &'static str,
}

const SCHEMES: [Scheme; 4] = [
    Scheme {
        name: "razorpay",
        secrets: RAZORPAY_SECRETS,
        body: razorpay_body,
        sign: |secret, id, body| {
            vec![
                (
                    "x-razorpay-signature".into(),
                    hex::encode(hmac(secret.as_bytes(), &[body])),
                ),
                ("x-razorpay-event-id".into(), id.into()),
            ]
        },
        misencode: |secret, id, body| {
            vec![
                (
                    "x-razorpay-signature".into(),
                    BASE64.encode(hmac(secret.as_bytes(), &[body])),
                ),
                ("x-razorpay-event-id".into(), id.into()),
            ]
        },
        stored_id: |id| id.to_owned(),
        event_type: "payment.captured",
    },
    Scheme {
        name: "svix",
        secrets: STANDARD_SECRETS,
        body: |id| {
            json!({"type": "invoice.created", "data": {"id": id, "amount": 1200}}).to_string()
        },
        sign: |secret, id, body| {
            standard_headers(secret, id, body, |mac| format!("v1,{}", BASE64.encode(mac)))
        },
        misencode: |secret, id, body| {
            standard_headers(secret, id, body, |mac| format!("v1,{}", hex::encode(mac)))
        },
        stored_id: |id| id.to_owned(),
        event_type: "invoice.created",
    },
    Scheme {
        name: "gh",
        secrets: GITHUB_SECRETS,
        body: |id| {
            json!({"ref": "refs/heads/main", "after": id, "repository": {"full_name": "acme/app"}})
                .to_string()
        },
        sign: |secret, id, body| {
            github_headers(
                id,
                format!("sha256={}", hex::encode(hmac(secret.as_bytes(), &[body]))),
            )
        },
        misencode: |secret, id, body| {
            github_headers(
                id,
                format!("sha256={}", BASE64.encode(hmac(secret.as_bytes(), &[body]))),
            )
        },
        stored_id: |id| id.to_owned(),
        event_type: "push",
    },
    Scheme {
        name: "shop",
        secrets: SHOPIFY_SECRETS,
        body: |id| {
            json!({"id": 820_982_911_946_154_508_u64, "note": id, "total_price": "10.00"})
                .to_string()
        },
        sign: |secret, id, body| {
            shopify_headers(id, BASE64.encode(hmac(secret.as_bytes(), &[body])))
        },
        misencode: |secret, id, body| {
            shopify_headers(id, hex::encode(hmac(secret.as_bytes(), &[body])))
        },
        stored_id: |id| id.to_owned(),
        event_type: "orders/create",
    },
];

fn hmac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

fn razorpay_body(id: &str) -> String {
    json!({
        "entity": "event",
        "account_id": "acc_BFQ7uQEaa7j2z7",
        "event": "payment.captured",
        "contains": ["payment"],
        "payload": {"payment": {"entity": {
            "id": format!("pay_{id}"), "entity": "payment", "amount": 5000, "currency": "INR",
            "status": "captured", "order_id": "order_1", "notes": {"user_id": "user_rzp"},
            "created_at": now(),
        }}},
        "created_at": now(),
    })
    .to_string()
}

fn standard_headers(secret: &str, id: &str, body: &[u8], encode: fn(&[u8]) -> String) -> Headers {
    let t = now().to_string();
    let key = standard::decode_secret(secret).unwrap();
    let mac = hmac(&key, &[id.as_bytes(), b".", t.as_bytes(), b".", body]);
    vec![
        ("webhook-id".into(), id.into()),
        ("webhook-timestamp".into(), t),
        ("webhook-signature".into(), encode(&mac)),
    ]
}

fn github_headers(id: &str, signature: String) -> Headers {
    vec![
        ("x-github-delivery".into(), id.into()),
        ("x-github-event".into(), "push".into()),
        ("x-hub-signature-256".into(), signature),
    ]
}

fn shopify_headers(id: &str, signature: String) -> Headers {
    vec![
        ("x-shopify-event-id".into(), id.into()),
        ("x-shopify-topic".into(), "orders/create".into()),
        ("x-shopify-hmac-sha256".into(), signature),
    ]
}

impl Scheme {
    async fn deliver(&self, app: &TestApp, id: &str) -> reqwest::Response {
        let body = (self.body)(id);
        let headers = (self.sign)(self.secrets.0, id, body.as_bytes());
        app.post_to(self.name, body.into_bytes(), &headers).await
    }

    async fn events(&self, app: &TestApp) -> i64 {
        sqlx::query_scalar("select count(*) from processed_events where provider = $1")
            .bind(self.name)
            .fetch_one(&app.pool)
            .await
            .unwrap()
    }

    async fn outbox_rows(&self, app: &TestApp) -> Vec<(String, Value)> {
        sqlx::query_as("select topic, payload from outbox where provider = $1 order by id")
            .bind(self.name)
            .fetch_all(&app.pool)
            .await
            .unwrap()
    }
}

async fn outcome(response: reqwest::Response) -> String {
    assert_eq!(response.status(), StatusCode::OK);
    let answer: Value = response.json().await.unwrap();
    answer["outcome"].as_str().unwrap().to_owned()
}

#[sqlx::test]
async fn every_scheme_applies_a_valid_delivery_once(pool: PgPool) {
    let app = route_app(pool).await;
    for scheme in SCHEMES {
        let id = format!("{}_valid_1", scheme.name);
        assert_eq!(
            outcome(scheme.deliver(&app, &id).await).await,
            "processed",
            "{}",
            scheme.name
        );
        assert_eq!(
            outcome(scheme.deliver(&app, &id).await).await,
            "duplicate",
            "{}",
            scheme.name
        );
        assert_eq!(scheme.events(&app).await, 1, "{}", scheme.name);

        let (stored_outcome, _) = app.event_of(scheme.name, &(scheme.stored_id)(&id)).await;
        assert_eq!(stored_outcome, "processed");
        let event_type: String =
            sqlx::query_scalar("select event_type from processed_events where provider = $1")
                .bind(scheme.name)
                .fetch_one(&app.pool)
                .await
                .unwrap();
        assert_eq!(event_type, scheme.event_type, "{}", scheme.name);
        let rows = scheme.outbox_rows(&app).await;
        assert_eq!(rows.len(), 1, "{}", scheme.name);
        if scheme.name != "razorpay" {
            // A generic source forwards exactly what it verified.
            let sent: Value = serde_json::from_str(&(scheme.body)(&id)).unwrap();
            assert_eq!(rows[0], (format!("source.{}", scheme.name), sent));
        }
    }
    assert_eq!(app.balance("user_rzp", "INR").await, Some(5000));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn twenty_concurrent_copies_apply_once_for_every_scheme(pool: PgPool) {
    let app = spawn_app(pool).await;
    for scheme in SCHEMES {
        let id = format!("{}_storm", scheme.name);
        let outcomes =
            join_all((0..20).map(|_| async { outcome(scheme.deliver(&app, &id).await).await }))
                .await;
        assert_eq!(
            outcomes.iter().filter(|o| *o == "processed").count(),
            1,
            "{}: {outcomes:?}",
            scheme.name
        );
        assert_eq!(
            outcomes.iter().filter(|o| *o == "duplicate").count(),
            19,
            "{}",
            scheme.name
        );
        assert_eq!(scheme.events(&app).await, 1, "{}", scheme.name);
        assert_eq!(scheme.outbox_rows(&app).await.len(), 1, "{}", scheme.name);
    }
    assert_eq!(app.count("wallet_entries").await, 1);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn the_previous_secret_still_verifies_for_every_scheme(pool: PgPool) {
    let app = route_app(pool).await;
    for scheme in SCHEMES {
        let id = format!("{}_rotated", scheme.name);
        let body = (scheme.body)(&id);
        let headers = (scheme.sign)(scheme.secrets.1, &id, body.as_bytes());
        let response = app.post_to(scheme.name, body.into_bytes(), &headers).await;
        assert_eq!(outcome(response).await, "processed", "{}", scheme.name);
    }
    app.assert_consistent().await;
}

#[sqlx::test]
async fn forgeries_of_every_kind_are_refused_for_every_scheme(pool: PgPool) {
    let app = route_app(pool).await;
    for scheme in SCHEMES {
        let id = format!("{}_forged", scheme.name);
        let body = (scheme.body)(&id);
        let good = (scheme.sign)(scheme.secrets.0, &id, body.as_bytes());
        let mut cases: Vec<(String, Vec<u8>, Headers)> = vec![
            (
                "wrong secret".into(),
                body.clone().into_bytes(),
                (scheme.sign)(WRONG_SECRET, &id, body.as_bytes()),
            ),
            (
                "tampered body".into(),
                body.replace(&id, &format!("{id}x")).into_bytes(),
                good.clone(),
            ),
            (
                "wrong encoding".into(),
                body.clone().into_bytes(),
                (scheme.misencode)(scheme.secrets.0, &id, body.as_bytes()),
            ),
        ];
        // A signature made for another body.
        let other = (scheme.body)("another");
        cases.push(("bad signature".into(), body.clone().into_bytes(), {
            let stolen = (scheme.sign)(scheme.secrets.0, &id, other.as_bytes());
            let signature_name = signature_header(scheme.name);
            good.iter()
                .map(|(n, v)| {
                    if n == signature_name {
                        stolen.iter().find(|(m, _)| m == n).unwrap().clone()
                    } else {
                        (n.clone(), v.clone())
                    }
                })
                .collect()
        }));
        for (missing, _) in &good {
            if scheme.name == "razorpay" && missing == "x-razorpay-event-id" {
                continue; // optional: the composite key stands in for it
            }
            let without: Headers = good.iter().filter(|(n, _)| n != missing).cloned().collect();
            cases.push((
                format!("missing {missing}"),
                body.clone().into_bytes(),
                without,
            ));
        }
        for (case, body, headers) in cases {
            let response = app.post_to(scheme.name, body, &headers).await;
            assert_eq!(
                response.status(),
                StatusCode::BAD_REQUEST,
                "{}: {case}",
                scheme.name
            );
        }
    }
    // GitHub's SHA-1 header alone is not enough.
    let body = (SCHEMES[2].body)("sha1");
    let sha1 = vec![
        ("x-github-delivery".to_owned(), "sha1".to_owned()),
        ("x-github-event".to_owned(), "push".to_owned()),
        (
            "x-hub-signature".to_owned(),
            "sha1=0123456789abcdef0123456789abcdef01234567".to_owned(),
        ),
    ];
    assert_eq!(
        app.post_to("gh", body.into_bytes(), &sha1).await.status(),
        StatusCode::BAD_REQUEST
    );
    // Standard Webhooks: `v1a` alone is not accepted.
    let body = (SCHEMES[1].body)("v1a");
    let mut v1a = (SCHEMES[1].sign)(STANDARD_SECRETS.0, "v1a", body.as_bytes());
    v1a[2].1 = v1a[2].1.replace("v1,", "v1a,");
    assert_eq!(
        app.post_to("svix", body.into_bytes(), &v1a).await.status(),
        StatusCode::BAD_REQUEST
    );
    app.assert_nothing_written().await;
}

fn signature_header(scheme: &str) -> &'static str {
    match scheme {
        "razorpay" => "x-razorpay-signature",
        "svix" => "webhook-signature",
        "gh" => "x-hub-signature-256",
        _ => "x-shopify-hmac-sha256",
    }
}

#[sqlx::test]
async fn standard_webhooks_timestamps_outside_the_tolerance_are_refused(pool: PgPool) {
    let t0 = 1_800_000_000;
    let app = route_app_with(pool, Clock::Fixed(t0), |_| {}).await;
    let body = (SCHEMES[1].body)("msg_t");
    let key = standard::decode_secret(STANDARD_SECRETS.0).unwrap();
    for t in [t0 - 301, t0 + 301] {
        let ts = t.to_string();
        let mac = hmac(&key, &[b"msg_t.", ts.as_bytes(), b".", body.as_bytes()]);
        let headers = vec![
            ("webhook-id".to_owned(), "msg_t".to_owned()),
            ("webhook-timestamp".to_owned(), ts),
            (
                "webhook-signature".to_owned(),
                format!("v1,{}", BASE64.encode(mac)),
            ),
        ];
        let response = app
            .post_to("svix", body.clone().into_bytes(), &headers)
            .await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "signed at {t}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"], "timestamp outside the tolerance");
    }
    app.assert_nothing_written().await;

    // At the edges of the tolerance, and with the `svix-` header names.
    for (n, t) in [(1, t0 - 300), (2, t0 + 300)] {
        let id = format!("msg_edge_{n}");
        let ts = t.to_string();
        let mac = hmac(
            &key,
            &[id.as_bytes(), b".", ts.as_bytes(), b".", body.as_bytes()],
        );
        let headers = vec![
            ("svix-id".to_owned(), id.clone()),
            ("svix-timestamp".to_owned(), ts),
            (
                "svix-signature".to_owned(),
                format!("v1,{}", BASE64.encode(mac)),
            ),
        ];
        let response = app
            .post_to("svix", body.clone().into_bytes(), &headers)
            .await;
        assert_eq!(outcome(response).await, "processed", "signed at {t}");
    }
    app.assert_consistent().await;
}

#[sqlx::test]
async fn sources_without_a_secret_are_not_mounted(pool: PgPool) {
    let app = route_app_with(pool, Clock::System, |s| {
        s.sources.clear();
        s.razorpay_webhook_secret = Secrets::default();
    })
    .await;
    for scheme in SCHEMES {
        let response = scheme.deliver(&app, "unmounted").await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{}", scheme.name);
    }
    app.assert_nothing_written().await;
}

// Known-answer vectors, computed with Python's hmac and base64 modules (the
// GitHub and Standard Webhooks ones are also the examples their docs publish).

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(n, v)| (http::HeaderName::from_static(n), v.parse().unwrap()))
        .collect()
}

#[test]
fn github_known_answer() {
    // docs.github.com, "Validating webhook deliveries".
    let verifier = GithubVerifier::new("gh".into(), &Secrets::new(["It's a Secret to Everybody"]));
    let h = headers(&[
        (
            "x-hub-signature-256",
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        ),
        ("x-github-delivery", "d1"),
        ("x-github-event", "ping"),
    ]);
    // The signature matches; the body, not being JSON, is refused after it.
    let result = verifier.verify(&h, &Bytes::from_static(b"Hello, World!"), 0);
    assert!(
        matches!(result, Err(SignatureError::InvalidPayload(_))),
        "{result:?}"
    );
    let result = verifier.verify(&h, &Bytes::from_static(b"Hello, World?"), 0);
    assert_eq!(result.err(), Some(SignatureError::Mismatch));
}

#[test]
fn standard_webhooks_known_answer() {
    // The example of the Standard Webhooks specification.
    let verifier = StandardVerifier::new(
        "svix".into(),
        &Secrets::new(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]),
        300,
    )
    .unwrap();
    let h = headers(&[
        ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
        ("webhook-timestamp", "1614265330"),
        (
            "webhook-signature",
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        ),
    ]);
    let event = verifier
        .verify(
            &h,
            &Bytes::from_static(br#"{"test": 2432232314}"#),
            1_614_265_330,
        )
        .unwrap();
    assert_eq!(event.event_id(), "msg_p5jXN8AQM9LWM0D4loKWxJek");
    assert_eq!(
        event.event_type(),
        "unknown",
        "no type in the body: forwarded as unknown"
    );
    let result = verifier.verify(
        &h,
        &Bytes::from_static(br#"{"test": 2432232315}"#),
        1_614_265_330,
    );
    assert_eq!(result.err(), Some(SignatureError::Mismatch));
    assert_eq!(
        standard::signature(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#
        )
        .unwrap(),
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    );
}

#[test]
fn razorpay_known_answer() {
    let body = br#"{"entity":"event","account_id":"acc_BFQ7uQEaa7j2z7","event":"payment.captured","contains":["payment"],"payload":{"payment":{"entity":{"id":"pay_DESlfW9H8K9uqM","entity":"payment","amount":100,"currency":"INR","status":"captured","notes":[]}}},"created_at":1567674606}"#;
    let verifier = RazorpayVerifier::new(&Secrets::new(["razorpay_kat_secret"])).unwrap();
    let h = headers(&[(
        "x-razorpay-signature",
        "83df789cffd6d743733ead00caa9159bff3088957cd381d687ed1a3ebeadbed7",
    )]);
    let event = verifier.verify(&h, &Bytes::from_static(body), 0).unwrap();
    assert_eq!(
        event.event_id(),
        "payment.captured:pay_DESlfW9H8K9uqM:1567674606"
    );
    assert_eq!(
        webhookd::providers::razorpay::signature("razorpay_kat_secret", body),
        "83df789cffd6d743733ead00caa9159bff3088957cd381d687ed1a3ebeadbed7"
    );
}

#[test]
fn shopify_known_answer() {
    let body = br#"{"id":820982911946154508,"email":"jon@example.com"}"#;
    let verifier = ShopifyVerifier::new("shop".into(), &Secrets::new(["shopify_kat_secret"]));
    let h = headers(&[
        (
            "x-shopify-hmac-sha256",
            "4AYEluVAu72tbd6vZL3Eg2ZDBSyZObSlRkv7ACeZzkU=",
        ),
        (
            "x-shopify-webhook-id",
            "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
        ),
        ("x-shopify-topic", "orders/create"),
    ]);
    let event = verifier.verify(&h, &Bytes::from_static(body), 0).unwrap();
    assert_eq!(
        event.event_id(),
        "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
        "the webhook id stands in for the event id"
    );
    assert_eq!(event.event_type(), "orders/create");
}
