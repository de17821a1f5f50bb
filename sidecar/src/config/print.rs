//! `recache serve --print-config`: every setting of `serve` with its value and where that
//! value came from — a flag, a `RECACHE_*` variable, the `--config` file, or the default —
//! then whether the whole resolves. What an operator checks before (re)starting a deployment
//! whose settings are spread over a manifest, an environment and a file.

use std::fmt::Write as _;

use clap::ArgMatches;
use clap::parser::ValueSource;

use super::{ConfigError, serve_command};

/// The listing for `matches` (the `serve` subcommand's), one line per setting.
pub fn describe(matches: &ArgMatches) -> Result<String, ConfigError> {
    let file = match matches.get_raw("config").and_then(|mut v| v.next()) {
        Some(path) => {
            let path = std::path::PathBuf::from(path);
            let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })?;
            let table: toml::Table =
                toml::from_str(&text).map_err(|source| ConfigError::Parse { path, source })?;
            Some(table)
        }
        None => None,
    };
    let mut out = String::new();
    for arg in serve_command().get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        let id = arg.get_id().as_str();
        let key = long.replace('-', "_");
        let env = arg
            .get_env()
            .and_then(|e| e.to_str())
            .unwrap_or_default()
            .to_string();
        let given = || {
            matches
                .get_raw(id)
                .map(|v| {
                    v.map(|s| s.to_string_lossy().into_owned())
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default()
        };
        let (value, from) = match matches.value_source(id) {
            Some(ValueSource::CommandLine) => (given(), format!("flag --{long}")),
            Some(ValueSource::EnvVariable) => (given(), format!("environment {env}")),
            _ => match file.as_ref().and_then(|t| t.get(&key)) {
                Some(v) => (v.to_string(), "file".to_string()),
                None => (default_of(arg), "default".to_string()),
            },
        };
        let value = if arg.is_hide_env_values_set() && from != "default" {
            "<hidden>".to_string()
        } else {
            value
        };
        let _ = writeln!(out, "{key:<26} = {value:<28} # {from}");
    }
    Ok(out)
}

/// The default a flag's help states (`[default: X]`), "off" for a switch, else "none".
fn default_of(arg: &clap::Arg) -> String {
    let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
    if let Some(i) = help.find("[default: ") {
        let rest = &help[i + "[default: ".len()..];
        if let Some(j) = rest.find(']') {
            return rest[..j].to_string();
        }
    }
    if matches!(arg.get_action(), clap::ArgAction::SetTrue) {
        "off".into()
    } else {
        "none".into()
    }
}

#[cfg(test)]
#[path = "print_tests.rs"]
mod tests;
