//! What `show` says of a job beyond its record: the profile and route it
//! runs under, its attempt out of how many, how long it has run (or ran),
//! its timeout and the time left, and whether it printed anything. Taken
//! from `job.json`, else from the ledger row when retention removed the
//! run folder, and from the config for what the record does not hold.

use serde::Serialize;

use jobwarden_ledger::Execution;
use jobwarden_model::config::Config;
use jobwarden_model::job::{JobRecord, JobState};
use jobwarden_sys::clock::Timestamp;

use super::super::output::{fmt_duration, timestamp};

/// The facts, as `show --json` prints them at its top level.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Facts {
    pub profile: Option<String>,
    /// The `[[route]]` pattern that matched; null when none did.
    pub route: Option<String>,
    pub attempt: Option<u32>,
    /// Attempts in all the retry policy allows this prompt (front matter,
    /// else its profile as the config says now).
    pub max_attempts: Option<u32>,
    /// How long a job that has not ended has run so far; null before it
    /// starts.
    pub elapsed_ms: Option<u64>,
    /// How long an ended job ran, start to end.
    pub duration_ms: Option<u64>,
    /// The main command's timeout (front matter, else its profile); null
    /// for a job that ended without starting.
    pub timeout_ms: Option<u64>,
    /// When the running stage is stopped for its timeout.
    pub timeout_at: Option<Timestamp>,
    /// Until then, from now (0 when past).
    pub time_left_ms: Option<u64>,
    /// `none_yet` (not ended, nothing printed so far), `none` (ended
    /// without printing anything) or `some`; null when the run folder is gone.
    pub output: Option<&'static str>,
    /// The jobs it waits for (front matter `after`) and how each stands;
    /// absent when it waits for none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<AfterFact>,
}

/// A job waited for, as `show` says it.
#[derive(Debug, Clone, Serialize)]
pub struct AfterFact {
    pub job_id: String,
    /// `project/name`; null when its record cannot be read.
    pub prompt: Option<String>,
    /// Its state; null when its record cannot be read (gone, or damaged).
    pub state: Option<String>,
}

impl AfterFact {
    /// The jobs `rec` waits for, each as its record says now.
    pub fn of(layout: &jobwarden_model::layout::Layout, rec: &JobRecord) -> Vec<AfterFact> {
        rec.after
            .iter()
            .map(|id| {
                let dep = JobRecord::load_job(layout, id).ok();
                AfterFact {
                    job_id: id.to_string(),
                    prompt: dep.as_ref().map(|d| d.prompt_name().to_string()),
                    state: dep.map(|d| d.state.to_string()),
                }
            })
            .collect()
    }

    /// `0f3c…9a1b (p/a, running)`.
    pub fn line(&self) -> String {
        match (&self.prompt, &self.state) {
            (Some(p), Some(s)) => format!("{} ({p}, {s})", self.job_id),
            _ => format!("{} (its record cannot be read)", self.job_id),
        }
    }
}

impl Facts {
    /// The facts of a job from its record (if its run folder remains), its
    /// ledger row (if it ended), and the config (`None` if it does not load).
    pub fn of(
        record: Option<&JobRecord>,
        execution: Option<&Execution>,
        config: Option<&Config>,
        now_ms: u64,
    ) -> Facts {
        let mut facts = match record {
            Some(rec) => Facts::of_record(rec, config, now_ms),
            None => Facts::default(),
        };
        if let Some(e) = execution {
            facts.profile = facts.profile.or_else(|| e.profile.clone());
            facts.attempt = facts.attempt.or(Some(e.attempt));
            facts.duration_ms = facts.duration_ms.or(e.duration_ms);
        }
        facts
    }

    fn of_record(rec: &JobRecord, config: Option<&Config>, now_ms: u64) -> Facts {
        let profile = config.and_then(|c| c.profile_of(rec).ok());
        let ms = |t: Timestamp| t.epoch_ms();
        let ended = rec.state.is_terminal();
        let live_stage = matches!(
            rec.state,
            JobState::Preparing | JobState::Running | JobState::Publishing
        );
        let timeout_at = rec.timeout_at.filter(|_| live_stage);
        Facts {
            profile: rec.profile.clone(),
            route: rec.route.clone(),
            attempt: Some(rec.attempt),
            max_attempts: rec
                .overrides
                .max_attempts
                .or(profile.map(|p| p.max_attempts)),
            elapsed_ms: rec
                .started_at
                .filter(|_| !ended)
                .map(|s| now_ms.saturating_sub(ms(s))),
            duration_ms: rec
                .started_at
                .zip(rec.finished_at)
                .filter(|_| ended)
                .map(|(s, f)| ms(f).saturating_sub(ms(s))),
            // A job that ended without starting (rejected, cancelled) had none.
            timeout_ms: rec
                .overrides
                .timeout_ms
                .or_else(|| {
                    profile.map(|p| u64::try_from(p.timeout.as_millis()).unwrap_or(u64::MAX))
                })
                .filter(|_| !ended || rec.started_at.is_some()),
            timeout_at,
            time_left_ms: timeout_at.map(|t| ms(t).saturating_sub(now_ms)),
            output: Some(match (rec.log_bytes > 0, ended) {
                (true, _) => "some",
                (false, false) => "none_yet",
                (false, true) => "none",
            }),
            after: Vec::new(),
        }
    }

    /// `default, through route "{repo}/**"` or `default (no route matched
    /// its folder)`.
    pub fn profile_line(&self) -> Option<String> {
        let profile = self.profile.as_deref()?;
        Some(match &self.route {
            Some(route) => format!("{profile}, through route {route:?}"),
            None => format!("{profile} (no route matched its folder)"),
        })
    }

    /// `2 of 3` (or `2` when the limit is unknown).
    pub fn attempt_line(&self) -> Option<String> {
        let attempt = self.attempt?;
        Some(match self.max_attempts {
            Some(max) => format!("{attempt} of {max}"),
            None => attempt.to_string(),
        })
    }

    /// `("elapsed", "3m05s")` for a job that has not ended, `("duration",
    /// "4.2s")` for one that has.
    pub fn time_line(&self) -> Option<(&'static str, String)> {
        match (self.elapsed_ms, self.duration_ms) {
            (Some(ms), _) => Some(("elapsed", fmt_duration(ms))),
            (None, Some(ms)) => Some(("duration", fmt_duration(ms))),
            (None, None) => None,
        }
    }

    /// `2h`, or `2h, 1h32m left (at …)` while a stage runs against it.
    pub fn timeout_line(&self, state: Option<JobState>) -> Option<String> {
        let limit = self.timeout_ms.map(fmt_duration);
        let (Some(at), Some(left)) = (self.timeout_at, self.time_left_ms) else {
            return limit;
        };
        let stage = match state {
            Some(JobState::Preparing) => " for prepare",
            Some(JobState::Publishing) => " for publish",
            _ => "",
        };
        let left = if left == 0 {
            "reached".to_owned()
        } else {
            format!("{} left", fmt_duration(left))
        };
        let deadline = format!("{left}{stage} (at {})", timestamp(at.epoch_ms()));
        Some(match limit {
            Some(t) => format!("{t}, {deadline}"),
            None => deadline,
        })
    }

    /// What to say of the log when it has nothing to show.
    pub fn empty_log_line(&self) -> Option<&'static str> {
        match self.output? {
            "none_yet" => Some("no output yet"),
            "none" if self.duration_ms.is_none() => Some("the job never ran"),
            "none" => Some("the job printed nothing"),
            _ => None,
        }
    }
}
