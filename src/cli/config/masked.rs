//! How `config show` writes a secret: `***`, or for a URL its password (and
//! whatever else may carry a credential) as `***`.

/// Whether the value of `variable` is a secret: its flag hides it
/// (`hidden`), or its name says so (`*_SECRET`, `*_TOKEN`, `*_KEY`, ...,
/// and a named sink's URL, `WEBHOOKD_SINK_<NAME>_URL`, which may carry a
/// broker's password as the unnamed one's does).
pub fn is_secret(variable: &str, hidden: bool) -> bool {
    hidden
        || (variable.starts_with("WEBHOOKD_SINK_") && variable.ends_with("_URL"))
        || variable.ends_with("_KEY")
        || ["SECRET", "TOKEN", "PASSWORD"]
            .iter()
            .any(|word| variable.contains(word))
}

/// A secret value of `variable` as shown: a URL (`*_URL`) keeps its scheme,
/// user and host, and a database's URL its database and harmless
/// parameters; everything else is `***`.
pub fn masked(variable: &str, value: &str) -> String {
    match variable.ends_with("_URL") {
        true => masked_url(value.trim()).unwrap_or_else(|| "***".to_owned()),
        false => "***".to_owned(),
    }
}

fn masked_url(value: &str) -> Option<String> {
    let mut url = url::Url::parse(value).ok()?;
    if url.password().is_some() {
        url.set_password(Some("***")).ok()?;
    }
    if matches!(url.scheme(), "postgres" | "postgresql") {
        let pairs: Vec<(String, String)> = (url.query_pairs())
            .map(|(name, value)| {
                let lower = name.to_ascii_lowercase();
                let secret = ["pass", "secret", "token", "key"]
                    .iter()
                    .any(|word| lower.contains(word));
                let value = if secret { "***".into() } else { value };
                (name.into_owned(), value.into_owned())
            })
            .collect();
        if !pairs.is_empty() {
            url.query_pairs_mut().clear().extend_pairs(pairs);
        }
    } else {
        // A sink's path or query may be the credential (a capability URL).
        if !matches!(url.path(), "" | "/") {
            url.set_path("/***");
        }
        if url.query().is_some() {
            url.set_query(Some("***"));
        }
    }
    Some(url.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_stars_and_urls_keep_what_is_not_a_credential() {
        assert!(is_secret("WEBHOOKD_SOURCE_GH_SECRET", false));
        assert!(is_secret("STRIPE_API_KEY", false));
        assert!(is_secret("WEBHOOKD_ADMIN_TOKEN", false));
        assert!(is_secret("WEBHOOKD_SINK_BILLING_URL", false));
        assert_eq!(
            masked(
                "WEBHOOKD_SINK_BILLING_URL",
                "amqp://app:broker-pw@rabbit:5672/%2f?exchange=E"
            ),
            "amqp://app:***@rabbit:5672/***?***"
        );
        assert!(is_secret("DATABASE_URL", true));
        assert!(!is_secret("RAZORPAY_KEY_ID", false));
        assert!(!is_secret("WEBHOOKD_LISTEN", false));
        assert_eq!(masked("STRIPE_WEBHOOK_SECRET", "whsec_abc"), "***");
        assert_eq!(
            masked(
                "DATABASE_URL",
                "postgres://app:pw-secret@db:5432/webhookd?sslmode=require&password=again"
            ),
            "postgres://app:***@db:5432/webhookd?sslmode=require&password=***"
        );
        assert_eq!(
            masked(
                "WEBHOOKD_SINK_URL",
                "https://hooks.example.com/T0/B0/capability?k=v"
            ),
            "https://hooks.example.com/***?***"
        );
        assert_eq!(
            masked("WEBHOOKD_SINK_URL", "amqp://user:pw@mq:5672"),
            "amqp://user:***@mq:5672"
        );
        assert_eq!(masked("DATABASE_URL", "not a url: pw"), "***");
    }
}
