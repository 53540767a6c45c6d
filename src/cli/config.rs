//! `webhookd config check` and `webhookd config show`: the configuration
//! (flags' defaults, the file, the environment) as `serve` would read it.

mod masked;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use clap::{Arg, CommandFactory, FromArgMatches, Subcommand};

use crate::config::{self, DatabaseSettings, Layers, Origin, ServeSettings};
use crate::sinks::Problem;
use crate::startup;

#[derive(Debug, Clone, Copy, Subcommand)]
pub enum ConfigCommand {
    /// Check everything that can be checked offline (unknown keys in the
    /// file, values their flags refuse, what `serve` refuses at start-up);
    /// print every problem, one a line, and exit 1, or print `ok`.
    Check,
    /// Print each setting with its value (secrets as `***`) and where it
    /// comes from: default, file or environment.
    Show,
}

/// What `serve` reads: its settings and the database's.
#[derive(clap::Parser)]
struct Serve {
    #[command(flatten)]
    database: DatabaseSettings,
    #[command(flatten)]
    serve: ServeSettings,
}

/// Runs `command` over `layers`, for the flags of `cli` (the whole command
/// line, every subcommand's flags with it).
pub async fn run(
    command: ConfigCommand,
    layers: &Layers,
    cli: &clap::Command,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    match command {
        ConfigCommand::Check => check(layers, cli, out).await,
        ConfigCommand::Show => show(layers, cli, out),
    }
}

/// `config check`: fails (exit 1) when the configuration has a problem.
/// A broker sink is connected to: credentials it refuses, or an exchange or
/// stream it lacks, are problems; a broker it cannot reach now is a warning.
pub async fn check(
    layers: &Layers,
    cli: &clap::Command,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let (mut problems, settings) = problems(layers, cli);
    if let Some(settings) = settings.filter(|_| problems.is_empty()) {
        for problem in startup::sink_problems(&settings).await {
            match problem {
                Problem::Wrong(said) => problems.push(said),
                Problem::Unreachable(said) => writeln!(
                    out,
                    "warning: {}",
                    super::shown(&said, super::MAX_SHOWN_TEXT_BYTES)
                )?,
            }
        }
    }
    if problems.is_empty() {
        writeln!(out, "ok")?;
        return Ok(());
    }
    for problem in &problems {
        writeln!(
            out,
            "{}",
            super::shown(problem, super::MAX_SHOWN_TEXT_BYTES)
        )?;
    }
    match problems.len() {
        1 => anyhow::bail!("1 problem in the configuration"),
        n => anyhow::bail!("{n} problems in the configuration"),
    }
}

/// Every problem of the configuration that `serve` reads: the file's, each
/// value refused by its flag, then the start-up checks of the settings
/// with the refused values left at their defaults; and the settings, when
/// they parse.
pub(super) fn problems(
    layers: &Layers,
    cli: &clap::Command,
) -> (Vec<String>, Option<ServeSettings>) {
    let mut problems = layers.problems().to_vec();
    let refused = config::refused(layers, cli);
    let ignored: BTreeSet<String> = refused.keys().cloned().collect();
    problems.extend(refused.into_values());
    let parsed = layers
        .command(Serve::command(), &ignored)
        .try_get_matches_from(["webhookd"])
        .and_then(|mut matches| Serve::from_arg_matches_mut(&mut matches));
    let Serve {
        database,
        serve: mut settings,
    } = match parsed {
        Ok(parsed) => parsed,
        Err(error) => {
            problems.push(format!(
                "the settings of serve do not parse: {}",
                error.kind()
            ));
            return (problems, None);
        }
    };
    let mut checked = Vec::new();
    match config::sources_from_env(layers.variables()) {
        Ok(sources) => settings.sources = sources,
        Err(error) => checked.push(format!("{error:#}")),
    }
    match config::sinks_from_env(&settings.outbox, layers.variables()) {
        Ok(sinks) => settings.outbox.sinks = sinks,
        Err(error) => checked.push(format!("{error:#}")),
    }
    checked.extend(startup::problems(&settings, &database));
    problems.extend(
        checked
            .into_iter()
            .map(|problem| with_keys(layers, problem)),
    );
    (problems, Some(settings))
}

/// `problem` with the file's keys of the variables it names, where the
/// file sets them.
fn with_keys(layers: &Layers, problem: String) -> String {
    let keys: Vec<&str> = (layers.settings())
        .filter(|(variable, setting)| setting.origin == Origin::File && names(&problem, variable))
        .map(|(_, setting)| setting.key.as_str())
        .collect();
    match (keys.is_empty(), layers.file()) {
        (false, Some(file)) => format!("{problem} ({} in {})", keys.join(", "), file.display()),
        _ => problem,
    }
}

/// Whether `text` names `variable` as a word of its own.
fn names(text: &str, variable: &str) -> bool {
    let part_of_name = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    text.match_indices(variable).any(|(at, _)| {
        !part_of_name(text[..at].chars().next_back())
            && !part_of_name(text[at + variable.len()..].chars().next())
    })
}

/// `config show`: every setting a flag reads, and every source the file
/// or the environment configures, by key. Fails (exit 2) after printing
/// when the file holds what is no setting.
pub fn show(layers: &Layers, cli: &clap::Command, out: &mut impl Write) -> anyhow::Result<()> {
    match layers.file() {
        Some(file) => writeln!(out, "# configuration file: {}", file.display())?,
        None => writeln!(
            out,
            "# no configuration file (--config FILE or WEBHOOKD_CONFIG)"
        )?,
    }
    let flags = config::flags_of(cli);
    let mut lines = BTreeMap::new();
    for (variable, arg) in &flags {
        let Some(key) = layers.key(variable) else {
            continue;
        };
        let secret = masked::is_secret(variable, arg.is_hide_env_values_set());
        let line = match layers.get(variable) {
            Some(setting) => line(&key, variable, Some(&setting.text), setting.origin, secret),
            None => line(
                &key,
                variable,
                default_of(arg).as_deref(),
                Origin::Default,
                secret,
            ),
        };
        lines.insert(key, line);
    }
    for (variable, setting) in layers.settings() {
        if !flags.contains_key(variable) {
            let secret = masked::is_secret(variable, false);
            let line = line(
                &setting.key,
                variable,
                Some(&setting.text),
                setting.origin,
                secret,
            );
            lines.insert(setting.key.clone(), line);
        }
    }
    for line in lines.values() {
        writeln!(out, "{line}")?;
    }
    layers.require_valid()?;
    Ok(())
}

/// `key = value  # origin (VARIABLE)`; a setting with no value says so.
fn line(key: &str, variable: &str, value: Option<&str>, origin: Origin, secret: bool) -> String {
    let value = match value {
        None => return format!("{key}  # {origin}: unset ({variable})"),
        Some("") => "\"\"".to_owned(),
        Some(value) if secret => masked::masked(variable, value),
        Some(value) => value.to_owned(),
    };
    let value = super::shown(&value, super::MAX_SHOWN_TEXT_BYTES);
    format!("{key} = {value}  # {origin} ({variable})")
}

/// The default of `arg`, as its flag reads it.
fn default_of(arg: &Arg) -> Option<String> {
    let defaults: Vec<String> = (arg.get_default_values().iter())
        .map(|value| value.to_string_lossy().into_owned())
        .collect();
    (!defaults.is_empty()).then(|| defaults.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;

    /// The example file with every setting uncommented, and the keys it sets.
    fn example() -> (String, BTreeSet<String>) {
        let mut text = String::new();
        let mut keys = BTreeSet::new();
        let mut table = String::new();
        for line in include_str!("../../webhookd.example.toml").lines() {
            let Some(rest) = line.strip_prefix("# ") else {
                continue;
            };
            if let Some(name) = rest.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
                table = format!("{name}.");
            } else if let Some((key, _)) = rest.split_once(" = ")
                && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            {
                keys.insert(format!("{table}{key}"));
            } else {
                continue;
            }
            text.push_str(rest);
            text.push('\n');
        }
        (text, keys)
    }

    #[test]
    fn the_example_file_sets_every_setting_and_nothing_else() {
        let (text, keys) = example();
        let path =
            std::env::temp_dir().join(format!("webhookd-example-{}.toml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let layers = Layers::load(Some(&path), &Cli::command()).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(layers.problems(), [] as [String; 0]);
        let refused = config::refused(&layers, &Cli::command());
        let of_the_file: Vec<_> = (refused.keys())
            .filter(|v| layers.get(v).is_some_and(|s| s.origin == Origin::File))
            .collect();
        assert!(of_the_file.is_empty(), "{refused:?}");
        let every: BTreeSet<String> = (config::flags_of(&Cli::command()).keys())
            .filter_map(|variable| layers.key(variable))
            .collect();
        let missing: Vec<_> = every.difference(&keys).collect();
        assert!(missing.is_empty(), "not in the example: {missing:?}");
    }

    #[test]
    fn a_problem_names_a_variable_only_as_a_word() {
        assert!(names("WEBHOOKD_SINK_URL is set", "WEBHOOKD_SINK_URL"));
        assert!(names("(see WEBHOOKD_SINK_URL)", "WEBHOOKD_SINK_URL"));
        assert!(!names("WEBHOOKD_SINK_URLS is set", "WEBHOOKD_SINK_URL"));
        assert!(!names("X_WEBHOOKD_SINK_URL", "WEBHOOKD_SINK_URL"));
    }

    #[test]
    fn a_shown_line_says_where_its_value_comes_from_and_hides_a_secret() {
        assert_eq!(
            line(
                "listen",
                "WEBHOOKD_LISTEN",
                Some("0.0.0.0:8080"),
                Origin::Default,
                false
            ),
            "listen = 0.0.0.0:8080  # default (WEBHOOKD_LISTEN)"
        );
        assert_eq!(
            line(
                "stripe_webhook_secret",
                "STRIPE_WEBHOOK_SECRET",
                Some("whsec_x"),
                Origin::File,
                true
            ),
            "stripe_webhook_secret = ***  # file (STRIPE_WEBHOOK_SECRET)"
        );
        assert_eq!(
            line(
                "sinks.default.url",
                "WEBHOOKD_SINK_URL",
                None,
                Origin::Default,
                true
            ),
            "sinks.default.url  # default: unset (WEBHOOKD_SINK_URL)"
        );
    }
}
