//! A profile's resource limits (`limits = { memory = "2GiB", cpu_time = "1h",
//! open_files = 1024, processes = 256 }`): raw shape, validation and how
//! `config show` prints them. How they are applied (rlimits on the job,
//! `memory.max` and `pids.max` in its cgroup) is the monitor's business.

use std::time::Duration;

use serde::Serialize;

use super::format_size;
use super::raw::RawLimits;
use super::validate::Validator;

/// Below this a memory limit stops most programs from even starting (the
/// dynamic loader and libc need a few hundred KiB of data).
const MIN_MEMORY: u64 = 1 << 20;
/// RLIMIT_NOFILE below this breaks shells and most runtimes at start.
const MIN_OPEN_FILES: i64 = 16;
/// The kernel's own ceilings (`fs.nr_open`'s maximum, `pid_max`'s).
const MAX_OPEN_FILES: i64 = 1 << 30;
const MAX_PROCESSES: i64 = 1 << 22;

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

impl Validator {
    /// Validate `limits` of a profile (`key` is `profiles.<name>.limits`).
    pub(super) fn limits(&mut self, key: &str, raw: &RawLimits) -> Limits {
        let memory_key = format!("{key}.memory");
        let memory = self
            .bytes(&memory_key, raw.memory.clone(), u64::MAX / 2)
            .filter(|&bytes| {
                let ok = bytes >= MIN_MEMORY;
                if !ok {
                    self.fault(
                        &memory_key,
                        format!(
                            "{memory_key} = {}: must be at least 1MiB (below that most programs cannot start)",
                            format_size(bytes)
                        ),
                    );
                }
                ok
            });
        let cpu_time = self.cpu_time(&format!("{key}.cpu_time"), raw);
        let open_files = self.num(
            &format!("{key}.open_files"),
            raw.open_files.clone(),
            MIN_OPEN_FILES,
            MAX_OPEN_FILES,
        );
        let processes = self.num(
            &format!("{key}.processes"),
            raw.processes.clone(),
            1,
            MAX_PROCESSES,
        );
        Limits {
            memory,
            cpu_time,
            open_files,
            processes,
        }
    }

    /// A CPU time: at least one second, rounded up to whole seconds (the
    /// kernel counts RLIMIT_CPU in seconds).
    fn cpu_time(&mut self, key: &str, raw: &RawLimits) -> Option<Duration> {
        let d = self.dur(key, raw.cpu_time.clone(), true)?;
        if d < Duration::from_secs(1) {
            let text = humantime::format_duration(d);
            self.fault(
                key,
                format!("{key} = \"{text}\": must be at least 1s (the kernel counts CPU time in seconds)"),
            );
            return None;
        }
        let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        Some(Duration::from_secs(secs))
    }
}
