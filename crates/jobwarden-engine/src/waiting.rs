//! What waits in the inbox: prompts not yet claimed, and what each waits
//! for — a claim, the cooldown its last run started (`deferred`), or an
//! earlier job of the same prompt that still holds its claimed name.
//!
//! Read-only, and computed the way the daemon decides its claims (the
//! ledger's last run, the profile's cooldowns, a standing retry request:
//! [`retry::deferral`], [`retry::continues`]), so that `jobs` and `show`
//! say what the daemon does without asking it, and also when none runs.
//! The inbox is read through the safe scanner ([`inbox::scan`]): folders
//! are listed through handles that never follow a symlink, entries are
//! only `lstat`ed, and nothing is opened, so a FIFO never blocks a reader.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::inbox::{self, Found};
use crate::retry::{self, Deferral};
use jobwarden_ledger::{LastRun, Ledger, LedgerError};
use jobwarden_model::config::Config;
use jobwarden_model::job::JobId;
use jobwarden_model::layout::{self, InboxEntry, Layout, PromptName};
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::fsio;

/// The state name of a prompt waiting to be claimed.
pub const WAITING: &str = "waiting";
/// The state name of a prompt waiting for its cooldown to end.
pub const DEFERRED: &str = "deferred";

/// A prompt in the inbox, not yet claimed.
#[derive(Debug, Clone)]
pub struct Waiting {
    pub prompt: PromptName,
    /// Its file, `inbox/<project>/<name>.prompt.md` (absolute).
    pub path: PathBuf,
    /// Its file's mtime (epoch ms): when it was dropped, or put back.
    pub since_ms: u64,
    /// The cooldown that defers its claim, if any.
    pub deferral: Option<Deferral>,
    /// The attempt its claim starts, and the job that attempt continues.
    pub attempt: u32,
    pub retry_of: Option<JobId>,
    /// Its newest finished attempt, per the ledger.
    pub last: Option<LastRun>,
    /// Its claimed name (`<name>.running.md`) is held by an earlier job
    /// of the same prompt: it is claimed when that job ends.
    pub held: bool,
    /// Not a regular file (a symlink, a FIFO): it is rejected when claimed.
    pub irregular: bool,
}

impl Waiting {
    /// `waiting` or `deferred`.
    pub fn state(&self) -> &'static str {
        if self.deferral.is_some() {
            DEFERRED
        } else {
            WAITING
        }
    }

    /// How it is named on the command line: `project/name` (`name` at the
    /// top of the inbox).
    pub fn label(&self) -> String {
        self.prompt.to_string()
    }

    /// Why it waits, in words; `daemon` says whether a daemon runs.
    pub fn reason(&self, daemon: bool) -> String {
        if let Some(d) = &self.deferral {
            let until = Timestamp::from_epoch_ms(d.until_ms);
            return format!("{}; claimed after {until}", d.reason());
        }
        let mut why = if self.held {
            "an earlier job of this prompt still holds it; claimed when that job ends".to_owned()
        } else if daemon {
            "not yet claimed".to_owned()
        } else {
            "not yet claimed: no daemon is running (claimed when one starts)".to_owned()
        };
        if self.irregular {
            why.push_str("; not a regular file, so it will be rejected");
        }
        why
    }
}

/// Every prompt waiting in the inbox, newest first, each with its place
/// only: [`examine`] tells what it waits for. Files whose names cannot be
/// prompt names are left out (the daemon rejects them as soon as it sees
/// them).
pub fn list(layout: &Layout) -> Vec<(PromptName, Found)> {
    let inbox = layout.inbox();
    if std::fs::symlink_metadata(&inbox).is_err() {
        return Vec::new();
    }
    let mut found: Vec<(PromptName, Found)> = inbox::scan(layout.root(), &inbox)
        .into_iter()
        .filter_map(|f| match layout::classify_inbox_path(&inbox, &f.path) {
            InboxEntry::Prompt(p) => Some((p, f)),
            _ => None,
        })
        .collect();
    found.sort_by(|(pa, a), (pb, b)| b.mtime.cmp(&a.mtime).then_with(|| pa.name.cmp(&pb.name)));
    found
}

/// The prompt `prompt` if it waits in the inbox, found without following
/// any symlink on the way.
pub fn look(layout: &Layout, prompt: &PromptName) -> Option<Found> {
    let path = layout.waiting_prompt(prompt);
    let file_name = path.file_name()?.to_owned();
    let dir = path.parent()?;
    let entry = fsio::read_dir(layout.root(), dir)
        .ok()?
        .flatten()
        .find(|e| e.file_name() == file_name)?;
    let mtime = entry
        .metadata()
        .ok()?
        .modified()
        .unwrap_or(SystemTime::UNIX_EPOCH);
    Some(Found { path, mtime })
}

/// What the prompt found at `found` waits for, at `now_ms`. Without a
/// ledger (none yet), nothing defers it.
pub fn examine(
    layout: &Layout,
    config: &Config,
    ledger: Option<&Ledger>,
    prompt: PromptName,
    found: Found,
    now_ms: u64,
) -> Result<Waiting, LedgerError> {
    let last = match ledger {
        Some(l) => l.last_run(&prompt.project, &prompt.name)?,
        None => None,
    };
    let request = retry::request::holding(layout, &prompt, &found.path, last.as_ref());
    let deferral = retry::deferral(config, last.as_ref(), request.as_ref(), now_ms);
    let continues = retry::continues(last.as_ref(), request.as_ref());
    let irregular = !std::fs::symlink_metadata(&found.path).is_ok_and(|m| m.is_file());
    Ok(Waiting {
        held: std::fs::symlink_metadata(layout.running_prompt(&prompt)).is_ok(),
        since_ms: Timestamp::from(found.mtime).epoch_ms(),
        path: found.path,
        deferral,
        attempt: continues.as_ref().map_or(1, |(_, n)| n + 1),
        retry_of: continues.map(|(id, _)| id),
        last,
        irregular,
        prompt,
    })
}

/// [`look`], then [`examine`].
pub fn find(
    layout: &Layout,
    config: &Config,
    ledger: Option<&Ledger>,
    prompt: &PromptName,
) -> Result<Option<Waiting>, LedgerError> {
    let Some(found) = look(layout, prompt) else {
        return Ok(None);
    };
    let now = Timestamp::now().epoch_ms();
    examine(layout, config, ledger, prompt.clone(), found, now).map(Some)
}

/// Waiting prompts named `name` in any inbox folder (for a bare name that
/// names no job): their keys.
pub fn named(layout: &Layout, name: &str) -> Vec<PromptName> {
    list(layout)
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| p.name == name)
        .collect()
}

/// The file a waiting prompt would be claimed from, relative to the root.
pub fn relative(layout: &Layout, path: &Path) -> String {
    layout.relative(path).to_string_lossy().into_owned()
}
