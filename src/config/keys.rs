//! The configuration file's keys and the variables they mirror. A key is
//! its variable in lower case without `WEBHOOKD_` (`listen` is
//! `WEBHOOKD_LISTEN`, `database_url` is `DATABASE_URL`), except in the
//! tables of named entries: `[sources.<name>] scheme` is
//! `WEBHOOKD_SOURCE_<NAME>_SCHEME` (`secrets`: `_SECRET`), `[sinks.billing]
//! url` is `WEBHOOKD_SINK_BILLING_URL` and `[sinks.default] url` is
//! `WEBHOOKD_SINK_URL`. Each variable has one key, and each key one
//! variable.

use std::collections::BTreeSet;

/// A table of named entries: `[<table>.<name>] <key>` is
/// `<prefix><NAME>_<SUFFIX>`.
struct Family {
    table: &'static str,
    prefix: &'static str,
    /// Each key, and the suffix of its variable.
    keys: &'static [(&'static str, &'static str)],
    /// The name whose variables carry no name (`[sinks.default] url` is
    /// `WEBHOOKD_SINK_URL`).
    unnamed: Option<&'static str>,
}

const FAMILIES: [Family; 2] = [
    Family {
        table: "sources",
        prefix: "WEBHOOKD_SOURCE_",
        keys: &[
            ("scheme", "SCHEME"),
            ("secrets", "SECRET"),
            ("webhook_id", "WEBHOOK_ID"),
            ("effects", "EFFECTS"),
            ("owner", "OWNER"),
            ("livemode", "LIVEMODE"),
            ("connect", "CONNECT"),
            ("invoice_credits", "INVOICE_CREDITS"),
            ("api_version", "API_VERSION"),
        ],
        unnamed: None,
    },
    Family {
        table: "sinks",
        prefix: "WEBHOOKD_SINK_",
        keys: &[("url", "URL"), ("secret", "SECRET"), ("topics", "TOPICS")],
        unnamed: Some("default"),
    },
];

/// The prefix a key leaves out.
const PREFIX: &str = "WEBHOOKD_";

/// The keys of a configuration file: those of the variables the flags read,
/// and of the named sources and sinks.
#[derive(Debug, Clone, Default)]
pub struct Keys {
    /// Every variable a flag reads.
    variables: BTreeSet<String>,
}

impl Keys {
    pub fn new(variables: impl IntoIterator<Item = String>) -> Self {
        Keys {
            variables: variables.into_iter().collect(),
        }
    }

    /// Whether `table` is a table of named entries (`sources`, `sinks`).
    pub fn is_family(table: &str) -> bool {
        FAMILIES.iter().any(|family| family.table == table)
    }

    /// The key of `variable`, if the file can set it: a variable a flag
    /// reads, or one of a named source.
    pub fn key(&self, variable: &str) -> Option<String> {
        for family in &FAMILIES {
            // Every name of a family is read ([`crate::config::sources_from_env`],
            // [`crate::config::sinks_from_env`] find them by their variables' names).
            if let Some(key) = family_key(family, variable) {
                return Some(key);
            }
        }
        self.variables.contains(variable).then(|| {
            variable
                .strip_prefix(PREFIX)
                .unwrap_or(variable)
                .to_ascii_lowercase()
        })
    }

    /// The variable `key` (dotted: `sources.gh.scheme`) stands for, if any.
    pub fn variable(&self, key: &str) -> Option<String> {
        let upper = key.to_ascii_uppercase();
        let candidates = match key.split('.').collect::<Vec<_>>().as_slice() {
            [_] => vec![format!("{PREFIX}{upper}"), upper],
            [table, name, entry] => (FAMILIES.iter())
                .filter(|family| family.table == *table)
                .flat_map(|family| family_variable(family, name, entry))
                .collect(),
            _ => Vec::new(),
        };
        (candidates.into_iter()).find(|variable| self.key(variable).as_deref() == Some(key))
    }

    /// The key meant, when `key` is a variable's other spelling
    /// (`WEBHOOKD_LISTEN`, `webhookd_listen` or `sink_url` for
    /// `sinks.default.url`).
    pub fn hint(&self, key: &str) -> Option<String> {
        let upper = key.to_ascii_uppercase();
        [upper.clone(), format!("{PREFIX}{upper}")]
            .iter()
            .find_map(|variable| self.key(variable))
            .filter(|meant| meant != key)
    }
}

/// `[<table>.<name>] <entry>`'s variable in `family`.
fn family_variable(family: &Family, name: &str, entry: &str) -> Option<String> {
    let (_, suffix) = family.keys.iter().find(|(key, _)| *key == entry)?;
    Some(if family.unnamed == Some(name) {
        format!("{}{suffix}", family.prefix)
    } else {
        format!("{}{}_{suffix}", family.prefix, name.to_ascii_uppercase())
    })
}

/// `variable`'s key in `family`, if it is one of its variables with a name
/// the file can spell (upper-case letters, digits and underscores).
fn family_key(family: &Family, variable: &str) -> Option<String> {
    let rest = variable.strip_prefix(family.prefix)?;
    let (key, name) = family.keys.iter().find_map(|(key, suffix)| {
        if rest == *suffix {
            return family.unnamed.map(|unnamed| (key, unnamed.to_owned()));
        }
        let name = rest.strip_suffix(suffix)?.strip_suffix('_')?;
        let spelled = !name.is_empty()
            && (name.bytes()).all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        let lower = name.to_ascii_lowercase();
        (spelled && family.unnamed != Some(lower.as_str())).then_some((key, lower))
    })?;
    Some(format!("{}.{name}.{key}", family.table))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Keys {
        Keys::new(
            [
                "WEBHOOKD_LISTEN",
                "DATABASE_URL",
                "STRIPE_WEBHOOK_SECRET",
                "WEBHOOKD_SINK_URL",
                "WEBHOOKD_SINK_TIMEOUT",
                "WEBHOOKD_SOURCE_STRIPE_LIVEMODE",
            ]
            .map(str::to_owned),
        )
    }

    #[test]
    fn each_key_is_its_variable_in_lower_case_without_the_prefix() {
        let keys = keys();
        for (key, variable) in [
            ("listen", "WEBHOOKD_LISTEN"),
            ("database_url", "DATABASE_URL"),
            ("stripe_webhook_secret", "STRIPE_WEBHOOK_SECRET"),
            ("sink_timeout", "WEBHOOKD_SINK_TIMEOUT"),
            ("sinks.default.url", "WEBHOOKD_SINK_URL"),
            ("sinks.default.topics", "WEBHOOKD_SINK_TOPICS"),
            ("sinks.billing.url", "WEBHOOKD_SINK_BILLING_URL"),
            ("sinks.billing.secret", "WEBHOOKD_SINK_BILLING_SECRET"),
            ("sources.stripe.livemode", "WEBHOOKD_SOURCE_STRIPE_LIVEMODE"),
            ("sources.gh.scheme", "WEBHOOKD_SOURCE_GH_SCHEME"),
            ("sources.my_shop.secrets", "WEBHOOKD_SOURCE_MY_SHOP_SECRET"),
            (
                "sources.billing.invoice_credits",
                "WEBHOOKD_SOURCE_BILLING_INVOICE_CREDITS",
            ),
        ] {
            assert_eq!(keys.variable(key).as_deref(), Some(variable), "{key}");
            assert_eq!(keys.key(variable).as_deref(), Some(key), "{variable}");
        }
    }

    #[test]
    fn other_spellings_are_no_keys_but_hint_at_the_key() {
        let keys = keys();
        for (spelling, meant) in [
            ("webhookd_listen", "listen"),
            ("WEBHOOKD_LISTEN", "listen"),
            ("sink_url", "sinks.default.url"),
            ("source_stripe_livemode", "sources.stripe.livemode"),
        ] {
            assert_eq!(keys.variable(spelling), None, "{spelling}");
            assert_eq!(keys.hint(spelling).as_deref(), Some(meant), "{spelling}");
        }
        for unknown in [
            "lisen",
            "sources.GH.scheme",
            "sources.gh.colour",
            "sources.gh",
            "sinks.billing.colour",
            "sinks.BILLING.url",
            "listen.port",
            "sources.g-h.scheme",
        ] {
            assert_eq!(keys.variable(unknown), None, "{unknown}");
        }
        assert_eq!(keys.hint("lisen"), None);
    }

    #[test]
    fn variables_the_file_cannot_spell_have_no_key() {
        let keys = keys();
        for variable in [
            "WEBHOOKD_SOURCE_g-h_SCHEME",
            "WEBHOOKD_SOURCE__SCHEME",
            "WEBHOOKD_SOURCE_SCHEME",
            "WEBHOOKD_SINK_DEFAULT_URL",
            "WEBHOOKD_SINK_billing_URL",
            "WEBHOOKD_TOLERANCE_SECS",
            "HOME",
        ] {
            assert_eq!(keys.key(variable), None, "{variable}");
        }
    }
}
