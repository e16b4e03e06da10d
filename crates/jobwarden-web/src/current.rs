//! The config the page works with: the daemon's, as `jobwarden reload`
//! leaves it, not the page's own start-up copy. `daemon.json` names the
//! file in force and its digest; when that digest changes, the page reads
//! the file again and takes it if its text is the one the daemon took (a
//! file edited since, or one the daemon refused, is not). Looked at most
//! once a second.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobwarden_model::config::{self, Config, ConfigSource};
use jobwarden_model::layout::Layout;

/// How long a look at `daemon.json` is trusted.
const FRESH: Duration = Duration::from_secs(1);

pub struct Current {
    held: Mutex<Held>,
}

struct Held {
    config: Arc<Config>,
    digest: String,
    looked: Option<Instant>,
    /// The digest the daemon named that the page could not take (said
    /// once in the log, not at every look).
    refused: Option<String>,
}

impl Current {
    pub fn new(config: Config) -> Self {
        let digest = config::digest(config.text.as_bytes());
        Current {
            held: Mutex::new(Held {
                config: Arc::new(config),
                digest,
                looked: None,
                refused: None,
            }),
        }
    }

    /// The config in force now.
    pub fn get(&self, layout: &Layout) -> Arc<Config> {
        let mut held = match self.held.lock() {
            Ok(held) => held,
            Err(poisoned) => poisoned.into_inner(),
        };
        if held.looked.is_some_and(|at| at.elapsed() < FRESH) {
            return held.config.clone();
        }
        held.looked = Some(Instant::now());
        let Some(in_force) = jobwarden_engine::daemon_file::read(layout)
            .ok()
            .flatten()
            .and_then(|seen| seen.config)
        else {
            return held.config.clone();
        };
        if in_force.digest == held.digest || held.refused.as_ref() == Some(&in_force.digest) {
            return held.config.clone();
        }
        match take(in_force.source.as_deref(), &in_force.digest) {
            Ok(config) => {
                tracing::info!(digest = %in_force.digest, "the page follows the daemon's config");
                held.digest = in_force.digest;
                held.config = Arc::new(config);
                held.refused = None;
            }
            Err(why) => {
                tracing::warn!(
                    "the daemon's config could not be followed: {why}; the page keeps the one it has"
                );
                held.refused = Some(in_force.digest);
            }
        }
        held.config.clone()
    }
}

/// The config at `source` (built-in defaults when `None`), if its text is
/// the one whose digest is `digest`.
fn take(source: Option<&std::path::Path>, digest: &str) -> Result<Config, String> {
    let (text, source) = match source {
        Some(path) => (
            config::read_file(path).map_err(|e| e.to_string())?,
            ConfigSource::File(path.to_path_buf()),
        ),
        None => (String::new(), ConfigSource::BuiltIn),
    };
    if config::digest(text.as_bytes()) != digest {
        return Err(format!(
            "{} changed since the daemon read it (reload the daemon to apply it)",
            match &source {
                ConfigSource::File(p) => p.display().to_string(),
                _ => "the built-in config".to_owned(),
            }
        ));
    }
    config::parse(&text, source).map_err(|e| e.to_string())
}
