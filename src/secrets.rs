//! Signing secrets: a list of them, any one of which may match (a rotation
//! lists old and new), never shown in logs or debug output.

use std::fmt;

use secrecy::SecretString;

/// A list of signing secrets. Debug output never shows them.
#[derive(Clone, Default)]
pub struct Secrets(Vec<SecretString>);

impl Secrets {
    pub fn new<I, S>(secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Secrets(
            secrets
                .into_iter()
                .map(|s| SecretString::from(s.into()))
                .collect(),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &SecretString> {
        self.0.iter()
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secrets([{} redacted])", self.0.len())
    }
}

/// Comma-separated secrets; blanks around each are trimmed, empty items dropped.
pub fn parse_secrets(raw: &str) -> Result<Secrets, String> {
    Ok(Secrets::new(
        raw.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
    ))
}

/// An optional secret, where an empty value (as `${VAR:-}` in compose
/// files gives) means unset.
pub fn non_empty(value: &Option<SecretString>) -> Option<SecretString> {
    use secrecy::ExposeSecret;
    value
        .as_ref()
        .filter(|v| !v.expose_secret().trim().is_empty())
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    #[test]
    fn secrets_are_split_trimmed_and_never_printed() {
        let secrets = parse_secrets(" whsec_old , whsec_new,,").unwrap();
        let exposed: Vec<_> = secrets
            .iter()
            .map(|s| s.expose_secret().to_owned())
            .collect();
        assert_eq!(exposed, ["whsec_old", "whsec_new"]);
        let shown = format!("{secrets:?}");
        assert!(!shown.contains("whsec"), "{shown}");
    }

    #[test]
    fn an_empty_secret_list_means_not_configured() {
        assert!(parse_secrets("").unwrap().is_empty());
        assert!(parse_secrets(" , ").unwrap().is_empty());
    }
}
