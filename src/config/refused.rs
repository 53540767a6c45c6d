//! The values of the file and of the environment that their flags' own
//! parsers refuse, every one at once (clap stops at the first).

use std::collections::BTreeMap;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Arg, Command};

use super::layers::{Layers, flags_of};

/// By variable, each value the layers give that its flag (in `command` or
/// its subcommands) refuses: a problem that names the setting and why,
/// never the value. The reason of a secret's refusal is left out too.
pub fn refused(layers: &Layers, command: &Command) -> BTreeMap<String, String> {
    flags_of(command)
        .into_iter()
        .filter_map(|(variable, arg)| {
            let setting = layers.get(&variable)?;
            let reason = refusal(arg, &setting.text)?;
            Some((
                variable.clone(),
                format!("{} is not valid{reason}", layers.named(&variable)),
            ))
        })
        .collect()
}

/// `None` when `arg` takes `text`; else why not (`""` for a secret).
fn refusal(arg: Arg, text: &str) -> Option<String> {
    let secret = arg.is_hide_env_values_set();
    // `text` as the default of a command of this flag alone.
    let alone = Command::new("webhookd").no_binary_name(true).arg(
        arg.env(None::<&str>)
            .default_value(text.to_owned())
            .required(false)
            .global(false),
    );
    let error = alone
        .try_get_matches_from(Vec::<std::ffi::OsString>::new())
        .err()?;
    if secret {
        return Some(String::new());
    }
    let reason = match error.kind() {
        ErrorKind::InvalidValue => match error.get(ContextKind::ValidValue) {
            Some(ContextValue::Strings(valid)) => format!("; expected {}", valid.join(", ")),
            _ => String::new(),
        },
        ErrorKind::ValueValidation => std::error::Error::source(&error)
            .map(|cause| format!(": {}", one_line(&cause.to_string())))
            .unwrap_or_default(),
        _ => String::new(),
    };
    Some(reason)
}

fn one_line(text: &str) -> String {
    text.lines().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_says_why_except_for_a_secret() {
        let port = Arg::new("port")
            .long("port")
            .env("WEBHOOKD_PORT")
            .value_parser(clap::value_parser!(u16));
        assert_eq!(refusal(port.clone(), "8080"), None);
        let reason = refusal(port, "eighty").unwrap();
        assert!(reason.starts_with(": invalid digit"), "{reason}");
        let role = Arg::new("role")
            .long("role")
            .env("WEBHOOKD_ROLE")
            .value_parser(["all", "api", "worker"]);
        assert_eq!(
            refusal(role, "both").unwrap(),
            "; expected all, api, worker"
        );
        let secret = Arg::new("token")
            .long("token")
            .env("WEBHOOKD_TOKEN")
            .hide_env_values(true)
            .value_parser(clap::value_parser!(u16));
        assert_eq!(refusal(secret, "hunter2").unwrap(), "");
    }
}
