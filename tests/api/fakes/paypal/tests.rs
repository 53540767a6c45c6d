//! The fake answers like PayPal: tokens, pages and refusals.

use super::*;

async fn fake() -> FakePaypal {
    let events = (0..5).map(|n| {
        event(
            &format!("WH-{n}"),
            "PAYMENT.CAPTURE.COMPLETED",
            1_000 + n,
            json!({}),
        )
    });
    FakePaypal::start("client", "secret", events.collect()).await
}

/// The status and body of a token request with `pair` and `form`.
async fn token_of(fake: &FakePaypal, pair: &str, form: &str) -> (u16, Value) {
    let basic = base64::engine::general_purpose::STANDARD.encode(pair);
    let response = reqwest::Client::new()
        .post(format!("{}/v1/oauth2/token", fake.base_url()))
        .header("authorization", format!("Basic {basic}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form.to_owned())
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// A token bought with the right credentials.
async fn bought(fake: &FakePaypal) -> String {
    let (_, body) = token_of(fake, "client:secret", "grant_type=client_credentials").await;
    body["access_token"].as_str().unwrap().to_owned()
}

async fn list_of(fake: &FakePaypal, token: &str, query: &str) -> (u16, Value) {
    let url = format!(
        "{}/v1/notifications/webhooks-events?{query}",
        fake.base_url()
    );
    let response = reqwest::Client::new()
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn tokens_are_bought_with_the_client_credentials_and_expire_when_told() {
    let fake = fake().await;
    let (status, body) = token_of(&fake, "client:wrong", "grant_type=client_credentials").await;
    assert_eq!((status, &body["error"]), (401, &json!("invalid_client")));
    assert_eq!(
        token_of(&fake, "client:secret", "grant_type=password")
            .await
            .0,
        400
    );
    let (status, body) = token_of(&fake, "client:secret", "grant_type=client_credentials").await;
    assert_eq!(
        (status, &body["token_type"], &body["expires_in"]),
        (200, &json!("Bearer"), &json!(32400))
    );
    let token = body["access_token"].as_str().unwrap();
    let (status, body) = list_of(&fake, "A21AAnot-issued", "").await;
    assert_eq!(
        (status, &body["name"]),
        (401, &json!("AUTHENTICATION_FAILURE"))
    );
    fake.expire_tokens_after(1);
    assert_eq!(list_of(&fake, token, "").await.0, 200);
    let (status, body) = list_of(&fake, token, "").await;
    assert_eq!((status, &body["error"]), (401, &json!("invalid_token")));
}

#[tokio::test]
async fn pages_run_newest_first_and_next_links_walk_to_the_end() {
    let fake = fake().await;
    let token = bought(&fake).await;
    let window = format!("start_time={}&end_time={}", time(1_001), time(1_004));
    let (mut ids, mut query) = (vec![], format!("page_size=2&{window}"));
    loop {
        let (status, page) = list_of(&fake, &token, &query).await;
        assert_eq!(status, 200, "{page}");
        ids.extend(
            page["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["id"].as_str().unwrap().to_owned()),
        );
        let next = page["links"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["rel"] == "next");
        let Some(next) = next else { break };
        query = next["href"]
            .as_str()
            .unwrap()
            .split_once('?')
            .unwrap()
            .1
            .to_owned();
    }
    assert_eq!(
        ids,
        ["WH-4", "WH-3", "WH-2", "WH-1"],
        "newest first, both ends inclusive"
    );
}

#[tokio::test]
async fn refused_queries_come_in_paypal_s_shape() {
    let fake = fake().await;
    let token = bought(&fake).await;
    let (t1, t2) = (time(1_001), time(1_002));
    for (query, field) in [
        ("page_size=0".to_owned(), "page_size"),
        ("page_size=301".to_owned(), "page_size"),
        ("page_size=ten".to_owned(), "page_size"),
        ("start_time=yesterday&end_time=now".to_owned(), "start_time"),
        (format!("start_time={t2}&end_time={t1}"), "start_time"),
        (format!("start_time={t1}"), "end_time"),
        ("next_page_token=zz".to_owned(), "next_page_token"),
        ("colour=red".to_owned(), "colour"),
    ] {
        let (status, body) = list_of(&fake, &token, &query).await;
        let error = (status, &body["name"], &body["details"][0]["field"]);
        assert_eq!(
            error,
            (400, &json!("INVALID_REQUEST"), &json!(field)),
            "{query}"
        );
    }
    fake.fail_next(429, 1, Some(3));
    let (status, body) = list_of(&fake, &token, "").await;
    assert_eq!((status, &body["name"]), (429, &json!("RATE_LIMIT_REACHED")));
}
