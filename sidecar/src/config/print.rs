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
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn says_where_each_value_came_from() {
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        writeln!(f, "rank_window = 12\nadmin_token = \"s3cret\"").expect("write");
        let path = f.path().to_str().expect("utf-8");
        let m = serve_command()
            .try_get_matches_from([
                "serve",
                "--config",
                path,
                "--upstream",
                "http://a:1,http://b:2",
                "--slo",
                "off",
            ])
            .expect("flags");
        let text = describe(&m).expect("described");
        let line = |key: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("{key} ")))
                .unwrap_or_else(|| panic!("no {key} in {text}"))
                .to_string()
        };
        assert!(
            line("upstream").contains("http://a:1,http://b:2")
                && line("upstream").ends_with("# flag --upstream")
        );
        assert!(line("slo").contains("off") && line("slo").ends_with("# flag --slo"));
        assert!(line("rank_window").contains("12") && line("rank_window").ends_with("# file"));
        assert!(line("admin_token").contains("<hidden>") && !text.contains("s3cret"));
        assert!(
            line("health_interval").contains("2s")
                && line("health_interval").ends_with("# default")
        );
        assert!(line("sglang_priority").contains("off"));
    }
}
