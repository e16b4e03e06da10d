//! Retention set from the environment for one run, as the tools jobwarden
//! replaces allowed: `JOBWARDEN_KEEP_RUNS`, `JOBWARDEN_KEEP_DAYS` and
//! `JOBWARDEN_KEEP_ARTIFACTS` override the config's `keep_runs`,
//! `keep_days` and `keep_artifacts` for the process they are set in (a
//! `jobwarden gc`, or a daemon, whose reloads keep them; other commands
//! leave them out). The variables are read once at the CLI edge
//! ([`super::Env`]); a value that is not a whole number in the key's range
//! is an error naming the variable.

use super::{Config, ConfigError, Env};

/// The retention variables as the process found them (unset or empty:
/// `None`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionEnv {
    pub keep_runs: Option<String>,
    pub keep_days: Option<String>,
    pub keep_artifacts: Option<String>,
}

/// Each variable, the config key it overrides, and the key's range.
const VARIABLES: [(&str, &str, u64); 3] = [
    ("JOBWARDEN_KEEP_RUNS", "keep_runs", super::KEEP_RUNS_MAX),
    ("JOBWARDEN_KEEP_DAYS", "keep_days", super::KEEP_DAYS_MAX),
    (
        "JOBWARDEN_KEEP_ARTIFACTS",
        "keep_artifacts",
        super::KEEP_ARTIFACTS_MAX,
    ),
];

impl RetentionEnv {
    /// The variables of this process.
    pub fn from_process() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        RetentionEnv {
            keep_runs: var(VARIABLES[0].0),
            keep_days: var(VARIABLES[1].0),
            keep_artifacts: var(VARIABLES[2].0),
        }
    }

    fn values(&self) -> [Option<&str>; 3] {
        [
            self.keep_runs.as_deref(),
            self.keep_days.as_deref(),
            self.keep_artifacts.as_deref(),
        ]
    }
}

/// Override `config`'s retention with the variables `env` holds.
pub fn apply(config: &mut Config, env: &Env) -> Result<(), ConfigError> {
    for ((variable, key, max), value) in VARIABLES.into_iter().zip(env.retention.values()) {
        let Some(value) = value else { continue };
        let n = parse(variable, key, max, value)?;
        let r = &mut config.retention;
        match key {
            "keep_runs" => r.keep_runs = n as usize,
            "keep_days" => r.keep_days = n as u32,
            _ => r.keep_artifacts = n as usize,
        }
    }
    Ok(())
}

/// `value` as a whole number from 0 to `max`, or an error naming `variable`.
fn parse(variable: &str, key: &str, max: u64, value: &str) -> Result<u64, ConfigError> {
    match value.trim().parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(ConfigError::whole(
            "from the environment",
            format!(
                "{variable}={value:?}: not a whole number from 0 to {max} (it overrides the \
                 config's {key} for this run); correct it or unset it"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(runs: Option<&str>, days: Option<&str>) -> Env {
        Env {
            retention: RetentionEnv {
                keep_runs: runs.map(str::to_owned),
                keep_days: days.map(str::to_owned),
                keep_artifacts: None,
            },
            ..Env::default()
        }
    }

    #[test]
    fn a_variable_overrides_its_key_and_leaves_the_rest() {
        let mut config = super::super::parse("keep_days = 7", super::super::ConfigSource::BuiltIn)
            .expect("config");
        apply(&mut config, &env(Some("3"), None)).expect("applied");
        assert_eq!(config.retention.keep_runs, 3);
        assert_eq!(config.retention.keep_days, 7);
        assert_eq!(config.retention.keep_artifacts, 10);
    }

    #[test]
    fn a_bad_value_names_the_variable_and_the_key() {
        let mut config =
            super::super::parse("", super::super::ConfigSource::BuiltIn).expect("config");
        for bad in ["-1", "ten", "99999999999"] {
            let e = apply(&mut config, &env(None, Some(bad))).expect_err(bad);
            let text = e.to_string();
            assert!(
                text.contains("JOBWARDEN_KEEP_DAYS") && text.contains("keep_days"),
                "{text}"
            );
        }
    }
}
