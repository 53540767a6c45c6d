//! Which topics a sink takes ([`Topics`]), and the name of the sink
//! `default`: what the configuration says and the routing
//! ([`super::store::routes`]) keeps.

/// The name of the unnamed sink, `WEBHOOKD_SINK_URL`'s, and of the one
/// sink there is until a draining process routes.
pub const DEFAULT_SINK: &str = "default";

/// Which topics a sink takes: patterns in which `*` stands for any run of
/// characters (`wallet.*`, `*.unowned`, `*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics(Vec<String>);

impl Topics {
    /// Every topic.
    pub fn all() -> Self {
        Topics(vec!["*".to_owned()])
    }

    /// A comma-separated list of patterns: letters, digits, `.`, `_`, `-`
    /// and `*`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let patterns: Vec<String> = text
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect();
        if patterns.is_empty() {
            return Err("no topic pattern (unset it to take every topic)".into());
        }
        if let Some(bad) = patterns.iter().find(|p| {
            !p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'*'))
        }) {
            return Err(format!(
                "`{bad}` is not a topic pattern: letters, digits, `.`, `_`, `-`, and `*` for any run of characters"
            ));
        }
        Ok(Topics(patterns))
    }

    pub fn patterns(&self) -> &[String] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_letters_digits_dots_underscores_dashes_and_stars() {
        let topics = Topics::parse("wallet.*, *.unowned,payment.refunded").unwrap();
        assert_eq!(
            topics.patterns(),
            ["wallet.*", "*.unowned", "payment.refunded"]
        );
        assert_eq!(Topics::all().patterns(), ["*"]);
        for bad in ["", " , ", "wallet credited", "wallet/%", "a\\b"] {
            assert!(Topics::parse(bad).is_err(), "{bad}");
        }
    }
}
