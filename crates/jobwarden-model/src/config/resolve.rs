//! Which config file and which root: `--config`, `JOBWARDEN_CONFIG`, the
//! default locations, and the file's text, read without waiting on a FIFO
//! put at its name; `--root`, `JOBWARDEN_HOME`, the config's `root`, then
//! the defaults (DESIGN §2).

use std::path::{Path, PathBuf};

use super::{Choices, Config, ConfigError, ConfigSource, Env, parse};

/// Find the config file: `--config`, `JOBWARDEN_CONFIG`, the user's config
/// folder, `/etc/jobwarden/config.toml`. An explicitly named file must
/// exist; the default locations are optional.
pub fn config_path(chosen: &Choices, env: &Env) -> Result<Option<PathBuf>, ConfigError> {
    let explicit = chosen
        .config
        .clone()
        .or_else(|| env.jobwarden_config.clone());
    if let Some(path) = explicit {
        return match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ConfigError::whole(
                path.display().to_string(),
                "file not found (named by --config or JOBWARDEN_CONFIG); create it or drop the option to use built-in defaults".into(),
            )),
            Ok(meta) if !meta.is_file() => Err(not_regular(&path, &meta)),
            _ => Ok(Some(path)),
        };
    }
    let user = env
        .xdg_config_home
        .clone()
        .or_else(|| env.home.as_ref().map(|h| h.join(".config")))
        .map(|d| d.join("jobwarden/config.toml"));
    let candidates = user
        .into_iter()
        .chain([PathBuf::from("/etc/jobwarden/config.toml")]);
    Ok(candidates.into_iter().find(|p| p.is_file()))
}

/// Load and validate the configuration the CLI flags and environment select.
/// The environment's retention variables override the file
/// (`env_retention.rs`).
pub fn load(chosen: &Choices, env: &Env) -> Result<Config, ConfigError> {
    let mut config = match config_path(chosen, env)? {
        Some(path) => parse(&read_file(&path)?, ConfigSource::File(path))?,
        None => parse("", ConfigSource::BuiltIn)?,
    };
    super::env_retention::apply(&mut config, env)?;
    Ok(config)
}

/// Longest config file read.
const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// The text of the config file at `path`: a regular file (it may be
/// reached through a link: the operator's choice), opened without
/// waiting (a FIFO put there never blocks), read with a cap.
pub fn read_file(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let cannot = |e: std::io::Error| {
        ConfigError::whole(path.display().to_string(), format!("cannot read: {e}"))
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    if !meta.is_file() {
        return Err(not_regular(path, &meta));
    }
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(cannot)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        let msg = format!("longer than {MAX_CONFIG_BYTES} bytes; refused");
        return Err(ConfigError::whole(path.display().to_string(), msg));
    }
    Ok(text)
}

/// A config path that is there but is no regular file (a FIFO, a folder).
fn not_regular(path: &Path, meta: &std::fs::Metadata) -> ConfigError {
    let msg = format!(
        "is {}, not a regular file; refused (a config is read from a regular file only); put the config file there",
        jobwarden_sys::fsio::kind_of(meta)
    );
    ConfigError::whole(path.display().to_string(), msg)
}

/// Resolve the root: `--root`, `JOBWARDEN_HOME`, the config's `root`, then
/// `/var/lib/jobwarden` for root and the XDG data folder otherwise.
pub fn resolve_root(chosen: &Choices, env: &Env, config: &Config) -> Result<PathBuf, ConfigError> {
    let chosen = chosen
        .root
        .clone()
        .or_else(|| env.jobwarden_home.clone())
        .or_else(|| config.root.clone());
    if let Some(root) = chosen {
        return absolute(root);
    }
    if env.is_root {
        return Ok(PathBuf::from("/var/lib/jobwarden"));
    }
    env.xdg_data_home
        .clone()
        .or_else(|| env.home.as_ref().map(|h| h.join(".local/share")))
        .map(|d| d.join("jobwarden"))
        .ok_or_else(|| {
            ConfigError::whole(
                "root",
                "cannot choose a root: neither --root, JOBWARDEN_HOME, `root`, XDG_DATA_HOME nor HOME is set".into(),
            )
        })
}

fn absolute(root: PathBuf) -> Result<PathBuf, ConfigError> {
    std::path::absolute(&root).map_err(|e| {
        ConfigError::whole(
            "root",
            format!("cannot make {} absolute: {e}", root.display()),
        )
    })
}
