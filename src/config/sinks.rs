//! Sinks (`WEBHOOKD_SINK_URL` and `WEBHOOKD_SINK_<NAME>_*`): where the
//! outbox delivers, and which topics each one takes.
//!
//! The unnamed `WEBHOOKD_SINK_URL` (with `WEBHOOKD_SINK_SECRET` and
//! `WEBHOOKD_SINK_TOPICS`) is the sink `default`; each
//! `WEBHOOKD_SINK_<NAME>_URL` (with `_SECRET` and `_TOPICS`) is the sink
//! `<name>`. With none of them set, `default` is the `log` sink.

use std::collections::BTreeMap;

use secrecy::SecretString;

use super::OutboxSettings;
pub use crate::outbox::{DEFAULT_SINK, Topics};
use crate::secrets::non_empty;

/// Most characters in a sink's name.
const MAX_NAME: usize = 64;

/// One sink: its name, where it delivers and which topics it takes.
#[derive(Debug, Clone)]
pub struct SinkEntry {
    /// Lower case: the `sink` of its outbox rows.
    pub name: String,
    /// `None`: the `log` sink (only the sink `default`, unset).
    pub url: Option<SecretString>,
    pub secret: Option<SecretString>,
    pub topics: Topics,
}

impl SinkEntry {
    /// The variable its URL is read from, for messages.
    pub fn url_variable(&self) -> String {
        variable(&self.name, "URL")
    }

    /// The variable its secret is read from, for messages.
    pub fn secret_variable(&self) -> String {
        variable(&self.name, "SECRET")
    }
}

/// The variable of sink `name`'s setting `suffix` (`URL`, `SECRET`,
/// `TOPICS`).
fn variable(name: &str, suffix: &str) -> String {
    if name == DEFAULT_SINK {
        format!("{PREFIX}{suffix}")
    } else {
        format!("{PREFIX}{}_{suffix}", name.to_ascii_uppercase())
    }
}

const PREFIX: &str = "WEBHOOKD_SINK_";

impl OutboxSettings {
    /// Every sink: those read with the named ones ([`sinks_from_env`]), else
    /// the sink `default` of these settings alone.
    pub fn every_sink(&self) -> anyhow::Result<Vec<SinkEntry>> {
        if self.sinks.is_empty() {
            sinks_from_env(self, [])
        } else {
            Ok(self.sinks.clone())
        }
    }
}

/// The settings of a sink's variable.
const SUFFIXES: [&str; 3] = ["URL", "SECRET", "TOPICS"];

/// Every sink `outbox` and the named variables among `vars` configure, the
/// sink `default` first: `default` is `WEBHOOKD_SINK_URL`'s, or the `log`
/// sink when no sink is configured at all. Every problem is said at once.
pub fn sinks_from_env(
    outbox: &OutboxSettings,
    vars: impl IntoIterator<Item = (String, String)>,
) -> anyhow::Result<Vec<SinkEntry>> {
    let mut problems = Vec::new();
    let mut named: BTreeMap<String, BTreeMap<&'static str, String>> = BTreeMap::new();
    for (key, value) in vars {
        let Some(rest) = key.strip_prefix(PREFIX) else {
            continue;
        };
        // WEBHOOKD_SINK_URL and the other settings of every sink are flags.
        let Some((upper, suffix)) = SUFFIXES
            .iter()
            .find_map(|s| Some((rest.strip_suffix(s)?.strip_suffix('_')?, *s)))
        else {
            continue;
        };
        if value.trim().is_empty() {
            continue;
        }
        if upper.eq_ignore_ascii_case(DEFAULT_SINK) {
            problems.push(format!(
                "{key}: the sink `default` is {PREFIX}{suffix}, without a name"
            ));
            continue;
        }
        if upper.len() > MAX_NAME
            || !(upper.bytes()).all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        {
            problems.push(format!(
                "{key}: a sink's name is at most {MAX_NAME} upper-case letters, digits and underscores"
            ));
            continue;
        }
        named
            .entry(upper.to_ascii_lowercase())
            .or_default()
            .insert(suffix, value);
    }
    let mut sinks = Vec::new();
    let given_topics = (outbox.sink_topics.as_deref()).filter(|t| !t.trim().is_empty());
    let default_topics = match given_topics.map(Topics::parse) {
        None => Topics::all(),
        Some(Ok(topics)) => topics,
        Some(Err(why)) => {
            problems.push(format!("{PREFIX}TOPICS: {why}"));
            Topics::all()
        }
    };
    let default_url = non_empty(&outbox.sink_url);
    if default_url.is_some() || named.is_empty() {
        sinks.push(SinkEntry {
            name: DEFAULT_SINK.to_owned(),
            url: default_url,
            secret: non_empty(&outbox.sink_secret),
            topics: default_topics,
        });
    } else if non_empty(&outbox.sink_secret).is_some() || given_topics.is_some() {
        problems.push(format!(
            "{PREFIX}SECRET or {PREFIX}TOPICS is set but {PREFIX}URL is not: they are the sink \
             `default`'s; name the sink they belong to ({PREFIX}<NAME>_SECRET)"
        ));
    }
    for (name, given) in named {
        let Some(url) = given.get("URL") else {
            problems.push(format!(
                "{} is set but {} is not: a sink needs its URL",
                variable(&name, given.keys().next().copied().unwrap_or("SECRET")),
                variable(&name, "URL"),
            ));
            continue;
        };
        let topics = match given.get("TOPICS") {
            None => Topics::all(),
            Some(text) => match Topics::parse(text) {
                Ok(topics) => topics,
                Err(why) => {
                    problems.push(format!("{}: {why}", variable(&name, "TOPICS")));
                    continue;
                }
            },
        };
        sinks.push(SinkEntry {
            url: Some(SecretString::from(url.clone())),
            secret: given.get("SECRET").map(|s| SecretString::from(s.clone())),
            topics,
            name,
        });
    }
    match problems.as_slice() {
        [] => Ok(sinks),
        [one] => anyhow::bail!("invalid configuration: {one}"),
        many => anyhow::bail!("invalid configuration:\n  - {}", many.join("\n  - ")),
    }
}

#[cfg(test)]
mod tests {
    use secrecy::ExposeSecret;

    use super::*;

    fn outbox(url: Option<&str>, topics: Option<&str>) -> OutboxSettings {
        OutboxSettings {
            sink_url: url.map(|u| SecretString::from(u.to_owned())),
            sink_topics: topics.map(str::to_owned),
            ..crate::config::defaults()
        }
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        (pairs.iter())
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn no_sink_at_all_is_the_log_sink_default_taking_every_topic() {
        let sinks = sinks_from_env(&outbox(None, None), vars(&[])).unwrap();
        assert_eq!(sinks.len(), 1);
        assert_eq!(sinks[0].name, "default");
        assert!(sinks[0].url.is_none());
        assert_eq!(sinks[0].topics, Topics::all());
    }

    #[test]
    fn named_sinks_come_with_their_secret_and_topics_and_default_only_when_set() {
        let given = vars(&[
            ("WEBHOOKD_SINK_BILLING_URL", "https://billing.example/hooks"),
            ("WEBHOOKD_SINK_BILLING_SECRET", "whsec_x"),
            ("WEBHOOKD_SINK_BILLING_TOPICS", "wallet.*"),
            (
                "WEBHOOKD_SINK_EVENTS_2_URL",
                "nats://127.0.0.1:4222?stream=S",
            ),
            ("WEBHOOKD_SINK_TIMEOUT", "5s"),
            ("WEBHOOKD_SINK_MAX_BODY_BYTES", "100"),
            ("WEBHOOKD_SINK_URL", "ignored: a flag reads it"),
        ]);
        let sinks = sinks_from_env(&outbox(None, None), given.clone()).unwrap();
        let names: Vec<&str> = sinks.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["billing", "events_2"]);
        assert_eq!(sinks[0].topics.patterns(), ["wallet.*"]);
        assert_eq!(sinks[0].secret.as_ref().unwrap().expose_secret(), "whsec_x");
        assert_eq!(sinks[1].topics, Topics::all());
        assert_eq!(sinks[1].url_variable(), "WEBHOOKD_SINK_EVENTS_2_URL");

        let with_default =
            sinks_from_env(&outbox(Some("http://a.example"), Some("*.unowned")), given).unwrap();
        assert_eq!(with_default[0].name, "default");
        assert_eq!(with_default[0].url_variable(), "WEBHOOKD_SINK_URL");
        assert_eq!(with_default[0].topics.patterns(), ["*.unowned"]);
        assert_eq!(with_default.len(), 3);
    }

    #[test]
    fn every_problem_is_said_at_once_naming_its_variable() {
        let error = sinks_from_env(
            &outbox(None, Some("*")),
            vars(&[
                ("WEBHOOKD_SINK_BILLING_SECRET", "whsec_x"),
                ("WEBHOOKD_SINK_DEFAULT_URL", "http://a.example"),
                ("WEBHOOKD_SINK_my_sink_URL", "http://a.example"),
                ("WEBHOOKD_SINK_OPS_URL", "http://a.example"),
                ("WEBHOOKD_SINK_OPS_TOPICS", "wallet credited"),
            ]),
        )
        .unwrap_err()
        .to_string();
        for said in [
            "WEBHOOKD_SINK_BILLING_SECRET is set but WEBHOOKD_SINK_BILLING_URL is not",
            "WEBHOOKD_SINK_DEFAULT_URL: the sink `default` is WEBHOOKD_SINK_URL",
            "WEBHOOKD_SINK_my_sink_URL: a sink's name is",
            "WEBHOOKD_SINK_OPS_TOPICS: `wallet credited` is not a topic pattern",
            "WEBHOOKD_SINK_SECRET or WEBHOOKD_SINK_TOPICS is set but WEBHOOKD_SINK_URL is not",
        ] {
            assert!(error.contains(said), "{said} in {error}");
        }
        assert!(!error.contains("whsec_x"), "{error}");
    }
}
