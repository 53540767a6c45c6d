//! The layers of the settings: the flags' defaults, then the configuration
//! file (`--config FILE` or `WEBHOOKD_CONFIG`), then the environment, each
//! over the one before. figment merges the file and the environment and
//! says which one each value came from; clap still parses every value: a
//! value of the file becomes its flag's default where the environment does
//! not set the variable, so each setting keeps its one parser.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use clap::{Arg, Command};
use figment::providers::{Env, Format, Toml};
use figment::value::{Dict, Num, Value};
use figment::{Figment, Profile, Provider};

use super::Invalid;
use super::keys::Keys;

/// The variable that names the file (which cannot name itself).
pub const CONFIG_VARIABLE: &str = "WEBHOOKD_CONFIG";

/// Where a setting's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Default,
    File,
    Environment,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Origin::Default => "default",
            Origin::File => "file",
            Origin::Environment => "environment",
        })
    }
}

/// A value that the file or the environment gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// Its key in the file.
    pub key: String,
    /// As its flag reads it: a list of the file is joined with commas; a
    /// value of the environment is as the environment holds it (figment
    /// would read `"x"` as x, and `007` as 7).
    pub text: String,
    pub origin: Origin,
}

/// The file and the environment, merged.
#[derive(Debug, Clone, Default)]
pub struct Layers {
    file: Option<PathBuf>,
    keys: Keys,
    /// By variable: what the file or the environment sets.
    settings: BTreeMap<String, Setting>,
    /// What the file holds that is no setting.
    problems: Vec<String>,
}

impl Layers {
    /// The file at `file` (`None`: none) under the environment, for the
    /// flags of `command` and of its subcommands. A file that cannot be read
    /// or is not TOML is an error; what it holds that is no setting (an
    /// unknown key, a table where a value belongs) is one of
    /// [`Layers::problems`]. An empty variable (as `${VAR:-}` in compose
    /// files gives) leaves the file's value.
    pub fn load(file: Option<&Path>, command: &Command) -> Result<Layers, Invalid> {
        let keys = Keys::new(
            flags_of(command)
                .into_keys()
                .filter(|v| v != CONFIG_VARIABLE),
        );
        let text = file.map(read).transpose()?;
        let from_file = || Toml::string(text.as_deref().unwrap_or_default());
        let environment_keys = keys.clone();
        let environment = Env::raw().lowercase(false).filter_map(move |variable| {
            let variable = variable.as_str();
            let set = std::env::var_os(variable).is_some_and(|value| !value.is_empty());
            environment_keys
                .key(variable)
                .filter(|_| set)
                .map(Into::into)
        });
        let environment_name = environment.metadata().name;
        let mut layers = Layers {
            file: file.map(Path::to_path_buf),
            keys,
            ..Layers::default()
        };
        if let Some(path) = file {
            let (_, problems) = layers.walk(&dict_of(&Figment::from(from_file()))?);
            layers.problems = (problems.into_iter())
                .map(|problem| format!("{}: {problem}", path.display()))
                .collect();
        }
        let merged = Figment::from(from_file()).merge(environment);
        let dict = dict_of(&merged)?;
        let (found, _) = layers.walk(&dict);
        let mut settings = BTreeMap::new();
        for (variable, key, value) in found {
            let from_environment = merged
                .get_metadata(value.tag())
                .is_some_and(|metadata| metadata.name == environment_name);
            let (origin, text) = if from_environment {
                let text = std::env::var_os(&variable).map(|v| v.to_string_lossy().into_owned());
                (Origin::Environment, text)
            } else {
                (Origin::File, text_of(value))
            };
            if let Some(text) = text {
                settings.insert(variable, Setting { key, text, origin });
            }
        }
        layers.settings = settings;
        Ok(layers)
    }

    /// The file read, if any.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// What the file holds that is no setting, one sentence each.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    /// Fails with the file's [`Layers::problems`], if it has any.
    pub fn require_valid(&self) -> Result<(), Invalid> {
        match self.problems.is_empty() {
            true => Ok(()),
            false => Err(Invalid::new(self.problems.clone())),
        }
    }

    /// What the file or the environment sets `variable` to.
    pub fn get(&self, variable: &str) -> Option<&Setting> {
        self.settings.get(variable)
    }

    /// Every variable the file or the environment sets, by name.
    pub fn settings(&self) -> impl Iterator<Item = (&str, &Setting)> {
        (self.settings.iter()).map(|(variable, setting)| (variable.as_str(), setting))
    }

    /// `variable`'s key in the file, if it has one.
    pub fn key(&self, variable: &str) -> Option<String> {
        self.keys.key(variable)
    }

    /// `variable` as a problem names it: with its key, when the file sets it.
    pub fn named(&self, variable: &str) -> String {
        match (self.settings.get(variable), &self.file) {
            (Some(setting), Some(file)) if setting.origin == Origin::File => {
                format!("{} in {} ({variable})", setting.key, file.display())
            }
            _ => variable.to_owned(),
        }
    }

    /// The environment, with each variable that the file sets and the
    /// environment does not: what the readers of variables by their names
    /// ([`crate::config::sources_from_env`]) read.
    pub fn variables(&self) -> Vec<(String, String)> {
        let mut variables: BTreeMap<String, String> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        for (variable, setting) in &self.settings {
            if setting.origin == Origin::File {
                variables.insert(variable.clone(), setting.text.clone());
            }
        }
        variables.into_iter().collect()
    }

    /// `command` reading the file: each flag whose variable the file sets
    /// (and the environment does not) defaults to the file's value, hidden
    /// from `--help` for a secret; a flag whose variable is `ignored` reads
    /// neither, and takes its own default.
    pub fn command(&self, command: Command, ignored: &BTreeSet<String>) -> Command {
        map_args(command, &|arg: Arg| {
            let Some(variable) = variable_of(&arg) else {
                return arg;
            };
            if ignored.contains(&variable) {
                return arg.env(None::<&str>);
            }
            match self.settings.get(&variable) {
                Some(setting) if setting.origin == Origin::File => {
                    let secret = arg.is_hide_env_values_set();
                    // Set but empty: the file's value, not the empty one.
                    let arg = match std::env::var_os(&variable) {
                        Some(_) => arg.env(None::<&str>),
                        None => arg,
                    };
                    arg.default_value(setting.text.clone())
                        .hide_default_value(secret)
                }
                _ => arg,
            }
        })
    }

    /// The settings in `dict` (the file's, or the merged one), each with its
    /// variable and key; and what is no setting.
    fn walk<'a>(&self, dict: &'a Dict) -> (Vec<(String, String, &'a Value)>, Vec<String>) {
        let mut found = Vec::new();
        let mut problems = Vec::new();
        for (name, value) in dict {
            match value {
                Value::Dict(_, entries) if Keys::is_family(name) => {
                    for (entry, value) in entries {
                        let Value::Dict(_, settings) = value else {
                            problems.push(format!(
                                "`{}` is not a table: write [{name}.{}] above its settings",
                                shown_key(&[name, entry]),
                                entry.escape_debug()
                            ));
                            continue;
                        };
                        for (setting, value) in settings {
                            let path = [name.as_str(), entry, setting];
                            self.visit(&path, value, &mut found, &mut problems);
                        }
                    }
                }
                _ => self.visit(&[name], value, &mut found, &mut problems),
            }
        }
        (found, problems)
    }

    fn visit<'a>(
        &self,
        path: &[&str],
        value: &'a Value,
        found: &mut Vec<(String, String, &'a Value)>,
        problems: &mut Vec<String>,
    ) {
        let key = path.join(".");
        let variable = match path.iter().any(|part| part.contains('.')) {
            true => None,
            false => self.keys.variable(&key),
        };
        match variable {
            None => problems.push(match self.keys.hint(&key) {
                Some(meant) => format!(
                    "unknown key `{}` (did you mean `{meant}`?)",
                    shown_key(path)
                ),
                None => format!("unknown key `{}`", shown_key(path)),
            }),
            Some(_) if text_of(value).is_none() => problems.push(format!(
                "`{key}` is not a value: a string, a number, a boolean or a list of them"
            )),
            Some(variable) => found.push((variable, key, value)),
        }
    }
}

/// The file named by `--config FILE` or `--config=FILE` among `args` (the
/// program's name first), else by `WEBHOOKD_CONFIG`; `None` when neither
/// names one.
pub fn file_named(args: &[OsString]) -> Option<PathBuf> {
    let mut rest = args.iter().skip(1).take_while(|arg| *arg != "--");
    while let Some(arg) = rest.next() {
        if arg == "--config" {
            return rest.next().map(PathBuf::from);
        }
        if let Some(path) = arg.to_str().and_then(|a| a.strip_prefix("--config=")) {
            return Some(PathBuf::from(path));
        }
    }
    std::env::var_os(CONFIG_VARIABLE)
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
}

/// Every variable a flag of `command` or of its subcommands reads, each
/// with the first flag that reads it.
pub fn flags_of(command: &Command) -> BTreeMap<String, Arg> {
    fn add(command: &Command, flags: &mut BTreeMap<String, Arg>) {
        for arg in command.get_arguments() {
            if let Some(variable) = variable_of(arg) {
                flags.entry(variable).or_insert_with(|| arg.clone());
            }
        }
        for sub in command.get_subcommands() {
            add(sub, flags);
        }
    }
    let mut flags = BTreeMap::new();
    add(command, &mut flags);
    flags
}

fn variable_of(arg: &Arg) -> Option<String> {
    arg.get_env()?.to_str().map(str::to_owned)
}

/// `command` with `f` applied to each of its flags and its subcommands'.
fn map_args(command: Command, f: &impl Fn(Arg) -> Arg) -> Command {
    let names: Vec<String> = (command.get_subcommands())
        .map(|sub| sub.get_name().to_owned())
        .collect();
    names
        .into_iter()
        .fold(command.mut_args(f), |command, name| {
            command.mut_subcommand(name, |sub| map_args(sub, f))
        })
}

/// The file's text, checked to be TOML: an error names its line, and never
/// quotes the file.
fn read(path: &Path) -> Result<String, Invalid> {
    let text = std::fs::read_to_string(path).map_err(|error| {
        Invalid::one(format!(
            "cannot read the configuration file {}: {error}",
            path.display()
        ))
    })?;
    if let Err(error) = toml::from_str::<toml::Table>(&text) {
        let line = error
            .span()
            .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1);
        let message = error.message().lines().collect::<Vec<_>>().join(" ");
        return Err(Invalid::one(match line {
            Some(line) => format!("{} line {line}: {message}", path.display()),
            None => format!("{}: {message}", path.display()),
        }));
    }
    Ok(text)
}

fn dict_of(figment: &Figment) -> Result<Dict, Invalid> {
    let mut data = figment
        .data()
        .map_err(|error| Invalid::one(format!("the configuration file: {error}")))?;
    Ok(data.remove(&Profile::Default).unwrap_or_default())
}

/// A value of the file as its flag reads it: a list joined with commas.
fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::Array(_, items) => (items.iter())
            .map(scalar_text)
            .collect::<Option<Vec<_>>>()
            .map(|items| items.join(",")),
        scalar => scalar_text(scalar),
    }
}

fn scalar_text(value: &Value) -> Option<String> {
    Some(match value {
        Value::String(_, text) => text.clone(),
        Value::Char(_, c) => c.to_string(),
        Value::Bool(_, b) => b.to_string(),
        Value::Num(_, number) => match *number {
            Num::U8(n) => n.to_string(),
            Num::U16(n) => n.to_string(),
            Num::U32(n) => n.to_string(),
            Num::U64(n) => n.to_string(),
            Num::U128(n) => n.to_string(),
            Num::USize(n) => n.to_string(),
            Num::I8(n) => n.to_string(),
            Num::I16(n) => n.to_string(),
            Num::I32(n) => n.to_string(),
            Num::I64(n) => n.to_string(),
            Num::I128(n) => n.to_string(),
            Num::ISize(n) => n.to_string(),
            Num::F32(n) => n.to_string(),
            Num::F64(n) => n.to_string(),
        },
        Value::Empty(..) | Value::Dict(..) | Value::Array(..) => return None,
    })
}

/// A key of the file as a message shows it: escaped, since a quoted TOML
/// key may hold any character.
fn shown_key(path: &[&str]) -> String {
    (path.iter())
        .map(|part| part.escape_debug().to_string())
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> Command {
        Command::new("webhookd")
            .arg(Arg::new("listen").long("listen").env("WEBHOOKD_LISTEN"))
            .arg(
                Arg::new("secret")
                    .long("secret")
                    .env("STRIPE_WEBHOOK_SECRET")
                    .hide_env_values(true),
            )
            .subcommand(
                Command::new("prune").arg(
                    Arg::new("days")
                        .long("days")
                        .env("WEBHOOKD_RETENTION_DAYS")
                        .value_parser(clap::value_parser!(u32)),
                ),
            )
    }

    fn file(name: &str, text: &str) -> PathBuf {
        let path =
            std::env::temp_dir().join(format!("webhookd-{}-{name}.toml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn the_file_s_settings_are_read_with_their_keys_and_lists_joined() {
        let path = file(
            "read",
            "listen = \"127.0.0.1:1\"\nretention_days = 7\n\
             [sources.gh]\nscheme = \"github\"\nsecrets = [\"a\", \"b\"]\n",
        );
        let layers = Layers::load(Some(&path), &command()).unwrap();
        assert_eq!(layers.problems(), [] as [String; 0]);
        let texts: Vec<_> = (layers.settings())
            .filter(|(_, s)| s.origin == Origin::File)
            .map(|(v, s)| (v, s.key.as_str(), s.text.as_str()))
            .collect();
        assert!(
            texts.contains(&("WEBHOOKD_LISTEN", "listen", "127.0.0.1:1")),
            "{texts:?}"
        );
        assert!(texts.contains(&("WEBHOOKD_RETENTION_DAYS", "retention_days", "7")));
        assert!(texts.contains(&("WEBHOOKD_SOURCE_GH_SECRET", "sources.gh.secrets", "a,b")));
        assert_eq!(
            layers.named("WEBHOOKD_LISTEN"),
            format!("listen in {} (WEBHOOKD_LISTEN)", path.display())
        );
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn unknown_keys_and_tables_in_place_of_values_are_problems() {
        let path = file(
            "problems",
            "lisen = 1\nwebhookd_listen = 2\nsecret = { a = 1 }\n\
             sources = { gh = 1 }\n[listen_table]\nx = 1\n",
        );
        let layers = Layers::load(Some(&path), &command()).unwrap();
        let problems = layers.problems().join("\n");
        for expected in [
            "unknown key `lisen`",
            "unknown key `webhookd_listen` (did you mean `listen`?)",
            "unknown key `secret`",
            "`sources.gh` is not a table",
            "unknown key `listen_table`",
        ] {
            assert!(problems.contains(expected), "{expected}: {problems}");
        }
        assert!(layers.require_valid().is_err());
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_missing_file_or_one_that_is_not_toml_is_one_line_that_quotes_nothing() {
        let missing = std::env::temp_dir().join("webhookd-no-such-file.toml");
        let error = Layers::load(Some(&missing), &command())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("cannot read the configuration file"),
            "{error}"
        );
        let path = file(
            "broken",
            "listen = \"127.0.0.1:1\"\nsecret = whsec_unquoted\n",
        );
        let error = Layers::load(Some(&path), &command())
            .unwrap_err()
            .to_string();
        assert!(error.contains("line 2"), "{error}");
        assert!(
            !error.contains('\n') && !error.contains("whsec_unquoted"),
            "{error}"
        );
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn the_file_is_named_by_the_flag_in_either_form() {
        let args = |list: &[&str]| list.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            file_named(&args(&[
                "webhookd", "config", "check", "--config", "a.toml"
            ])),
            Some(PathBuf::from("a.toml"))
        );
        assert_eq!(
            file_named(&args(&["webhookd", "--config=b.toml", "serve"])),
            Some(PathBuf::from("b.toml"))
        );
    }

    #[test]
    fn file_values_become_the_flags_defaults_unless_ignored() {
        let path = file("defaults", "listen = \"127.0.0.1:1\"\nretention_days = 9\n");
        let layers = Layers::load(Some(&path), &command()).unwrap();
        // Whatever the environment of the test holds for these two.
        if std::env::var_os("WEBHOOKD_LISTEN").is_none()
            && std::env::var_os("WEBHOOKD_RETENTION_DAYS").is_none()
        {
            let matches = layers
                .command(command(), &BTreeSet::new())
                .try_get_matches_from(["webhookd", "prune"])
                .unwrap();
            assert_eq!(matches.get_one::<String>("listen").unwrap(), "127.0.0.1:1");
            let prune = matches.subcommand_matches("prune").unwrap();
            assert_eq!(prune.get_one::<u32>("days"), Some(&9));
            let ignored = BTreeSet::from(["WEBHOOKD_LISTEN".to_owned()]);
            let matches = layers
                .command(command(), &ignored)
                .try_get_matches_from(["webhookd"])
                .unwrap();
            assert_eq!(matches.get_one::<String>("listen"), None);
        }
        let _ = std::fs::remove_file(path);
    }
}
