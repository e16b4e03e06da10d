//! A profile's resource limits (`limits = { memory = "2GiB", cpu_time = "1h",
//! open_files = 1024, processes = 256 }`): raw shape, validation and how
//! `config show` prints them. How they are applied (rlimits on the job,
//! `memory.max` and `pids.max` in its cgroup) is the monitor's business.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, RawSize, Validator, format_size};

/// Below this a memory limit stops most programs from even starting (the
/// dynamic loader and libc need a few hundred KiB of data).
const MIN_MEMORY: u64 = 1 << 20;
/// RLIMIT_NOFILE below this breaks shells and most runtimes at start.
const MIN_OPEN_FILES: i64 = 16;
/// The kernel's own ceilings (`fs.nr_open`'s maximum, `pid_max`'s).
const MAX_OPEN_FILES: i64 = 1 << 30;
const MAX_PROCESSES: i64 = 1 << 22;

/// `[profiles.<name>.limits]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    memory: Option<RawSize>,
    cpu_time: Option<String>,
    open_files: Option<i64>,
    processes: Option<i64>,
}

/// A profile's validated limits; `None`: not limited by jobwarden.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Bytes: RLIMIT_DATA on every process of the job, and `memory.max`
    /// of its cgroup when it has one.
    pub memory: Option<u64>,
    /// CPU time of each process (RLIMIT_CPU), whole seconds.
    pub cpu_time: Option<Duration>,
    /// Open files of each process (RLIMIT_NOFILE).
    pub open_files: Option<u64>,
    /// Processes: RLIMIT_NPROC (counted per user, see the docs), and
    /// `pids.max` of the job's cgroup when it has one.
    pub processes: Option<u64>,
}

impl Limits {
    /// Is anything limited?
    pub fn any(&self) -> bool {
        *self != Limits::default()
    }

    /// The limits as `config show` and the `limits` event write them.
    pub fn shown(&self) -> ShownLimits {
        ShownLimits {
            memory: self.memory.map(format_size),
            cpu_time: self
                .cpu_time
                .map(|d| humantime::format_duration(d).to_string()),
            open_files: self.open_files,
            processes: self.processes,
        }
    }
}

/// Printable limits: only the ones set.
#[derive(Debug, Serialize)]
pub struct ShownLimits {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_time: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_files: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
}

impl<F: Fn(String) -> ConfigError> Validator<'_, F> {
    /// Validate `limits` of a profile (`key` is `profiles.<name>.limits`).
    pub(super) fn limits(&self, key: &str, raw: RawLimits) -> Result<Limits, ConfigError> {
        let memory = match raw.memory {
            None => None,
            Some(size) => {
                let k = format!("{key}.memory");
                let bytes = self.size(&k, Some(size), 0, u64::MAX / 2)?;
                if bytes < MIN_MEMORY {
                    return Err((self.err)(format!(
                        "{k} = {}: must be at least 1MiB (below that most programs cannot start)",
                        format_size(bytes)
                    )));
                }
                Some(bytes)
            }
        };
        let cpu_time = match raw.cpu_time {
            None => None,
            Some(text) => Some(self.cpu_time(&format!("{key}.cpu_time"), text)?),
        };
        let count = |k: &str, v: Option<i64>, min: i64, max: i64| match v {
            None => Ok(None),
            Some(n) => self
                .count(&format!("{key}.{k}"), Some(n), n, min, max)
                .map(Some),
        };
        Ok(Limits {
            memory,
            cpu_time,
            open_files: count("open_files", raw.open_files, MIN_OPEN_FILES, MAX_OPEN_FILES)?,
            processes: count("processes", raw.processes, 1, MAX_PROCESSES)?,
        })
    }

    /// A CPU time: at least one second, rounded up to whole seconds (the
    /// kernel counts RLIMIT_CPU in seconds).
    fn cpu_time(&self, key: &str, text: String) -> Result<Duration, ConfigError> {
        let d = self.duration(key, Some(text.clone()), "", true)?;
        if d < Duration::from_secs(1) {
            return Err((self.err)(format!(
                "{key} = {text:?}: must be at least 1s (the kernel counts CPU time in seconds)"
            )));
        }
        let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        Ok(Duration::from_secs(secs))
    }
}
