//! One inbox shared by the daemons of several hosts (`[shared_inbox]`).
//!
//! Each host keeps its own root (runs, ledger, locks: SQLite is not safe on
//! a network filesystem); the shared folder is mounted at every host's
//! `<root>/inbox`. A claim is the same rename as on one host, so a prompt
//! is claimed by one host alone. What one host adds:
//!
//! - **Who holds a claim.** Right after its rename, the claim writes a
//!   claim record beside `<name>.running.md` ([`Holder`]: host, boot id,
//!   job id). The job's record says its claim is a shared one
//!   (`shared_claim`), and the end of the job removes the claim record
//!   after the prompt has moved on.
//! - **The lease.** Every process of a host that holds claims renews the
//!   host's lease file (`inbox/.hosts/<host>.json`): the daemon at each
//!   tick, every monitor at its start and each heartbeat, because a daemon
//!   killed alone leaves its jobs running.
//! - **Orphans.** At each tick the daemon reads the others' leases. A host
//!   whose lease has not changed for a whole lease, by this daemon's own
//!   clock (so clocks need not agree), is dead: its claims are requeued
//!   here. The claim record is renamed away first (one host alone wins
//!   it), checked to be the one seen, and then the prompt is renamed back
//!   to `<name>.prompt.md`, where any host claims it again. A claimed
//!   prompt without a claim record (its claimer died between the two
//!   writes) is requeued once it has stayed so for a whole lease.
//! - **A host that comes back** finds its claims as it left them, or
//!   taken: a job whose claim record no longer names it ends `interrupted`
//!   without running (`monitor`), and its end does not touch the prompt
//!   (`terminal::place`). The claims of this host's own jobs are left to
//!   its own start-up reconciliation, whatever boot they come from.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use jobwarden_model::config::{Config, SharedInbox};
use jobwarden_model::job::{JobId, JobRecord};
use jobwarden_model::layout::{CLAIM_RECORD_SUFFIX, Layout, PromptName, RUNNING_SUFFIX};
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::error::IoError;
use jobwarden_sys::fsio::{self, Renamed};

/// [`crate::inbox::put_back`], a failure logged.
fn put_back(layout: &Layout, prompt: &PromptName, running: &Path) -> Option<PathBuf> {
    crate::inbox::put_back(layout, prompt, running).unwrap_or_else(|e| {
        tracing::error!("requeueing {}: {e}", running.display());
        None
    })
}

/// The record field that marks a job whose claim is in a shared inbox.
const SHARED_CLAIM: &str = "shared_claim";

/// Does `rec`'s job hold a claim of a shared inbox?
fn is_shared_claim(rec: &JobRecord) -> bool {
    rec.extra.get(SHARED_CLAIM) == Some(&serde_json::Value::Bool(true))
}

/// Largest claim record or lease file read.
const MAX_RECORD: u64 = 4096;

/// Who holds a claimed prompt: the claim record's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub host: String,
    pub boot_id: String,
    pub job_id: String,
    pub claimed_at: Timestamp,
    /// Its job has ended (written before the job's terminal record): the
    /// prompt's next move is its host's alone, even if that host dies
    /// first, so that it never runs again elsewhere.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ended: bool,
}

/// A host's lease file: any change of it is a renewal.
#[derive(Debug, Serialize)]
struct Lease<'a> {
    host: &'a str,
    boot_id: &'a str,
    pid: u32,
    renewed_at: Timestamp,
}

/// This machine's boot id: a new one after every boot.
pub fn boot_id() -> &'static str {
    static BOOT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "unknown".to_owned())
    })
}

/// Write the claim record of `prompt`, just claimed for job `id` (and
/// mark `rec` as holding a shared claim). Nothing in a local inbox.
pub fn hold(
    layout: &Layout,
    config: &Config,
    rec: &mut JobRecord,
    prompt: &PromptName,
) -> Result<(), IoError> {
    let Some(shared) = &config.shared_inbox else {
        return Ok(());
    };
    let holder = Holder {
        host: shared.host.clone(),
        boot_id: boot_id().to_owned(),
        job_id: rec.job_id.to_string(),
        claimed_at: Timestamp::now(),
        ended: false,
    };
    rec.extra
        .insert(SHARED_CLAIM.into(), serde_json::Value::Bool(true));
    fsio::write_json_atomic(layout.root(), &layout.claim_record(prompt), &holder)
}

/// The claim record of `prompt`, if there is a readable one.
pub fn holder(layout: &Layout, prompt: &PromptName) -> Option<Holder> {
    match record_of(layout, prompt) {
        Record::Held(h) => Some(h),
        Record::Missing | Record::Unreadable => None,
    }
}

/// What is beside a claimed prompt.
enum Record {
    /// No claim record at all.
    Missing,
    /// Something that does not read as one (garbage, a symlink, a FIFO).
    Unreadable,
    Held(Holder),
}

fn record_of(layout: &Layout, prompt: &PromptName) -> Record {
    match fsio::read_capped(layout.root(), &layout.claim_record(prompt), MAX_RECORD) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Record::Missing,
        Ok((bytes, false)) => {
            serde_json::from_slice(&bytes).map_or(Record::Unreadable, Record::Held)
        }
        _ => Record::Unreadable,
    }
}

/// Why the job of `rec` no longer holds its claim in the shared inbox
/// (another host took it after this host's lease ran out), if so.
/// `None` for a job that holds its claim, and for every job claimed from
/// an inbox that was not shared.
pub fn taken(layout: &Layout, rec: &JobRecord) -> Option<String> {
    if !is_shared_claim(rec) {
        return None;
    }
    let prompt = rec.prompt_name();
    let record = layout.claim_record(&prompt);
    match record_of(layout, &prompt) {
        Record::Held(h) if h.job_id == rec.job_id.as_str() => None,
        // A record that is there but unreadable (garbage, a symlink, a
        // FIFO) is not another host's word: no other host takes a claim
        // whose record is there, so the claim is still this job's.
        Record::Unreadable => {
            tracing::warn!(job = %rec.job_id, "its claim record {} is unreadable; the claim is still this job's", layout.relative(&record).display());
            None
        }
        Record::Held(h) => Some(format!(
            "its claim of the shared inbox's {} was taken after this host's lease ran out: host {} holds it now, for job {}",
            layout.relative(&layout.running_prompt(&prompt)).display(),
            h.host,
            h.job_id
        )),
        Record::Missing => Some(format!(
            "its claim of the shared inbox's {} was taken after this host's lease ran out: another host requeued the prompt",
            layout.relative(&layout.running_prompt(&prompt)).display(),
        )),
    }
}

/// The job of `rec` is about to be recorded as ended: say so in its claim
/// record first (durably), so that no other host requeues a prompt whose
/// job ran, whatever happens to this host before the prompt moves on.
pub fn ending(layout: &Layout, rec: &JobRecord) -> Result<(), IoError> {
    if !is_shared_claim(rec) {
        return Ok(());
    }
    let prompt = rec.prompt_name();
    match holder(layout, &prompt) {
        Some(mut h) if h.job_id == rec.job_id.as_str() && !h.ended => {
            h.ended = true;
            fsio::write_json_atomic(layout.root(), &layout.claim_record(&prompt), &h)
        }
        _ => restore(layout, rec, true),
    }
}

/// Write the claim record of `rec`'s job again if something removed it
/// while the job holds its claimed prompt (a careless job): without it,
/// any host would put the prompt back after a lease. A monitor does this
/// at each heartbeat, and at the job's end (`ended`).
pub fn restore(layout: &Layout, rec: &JobRecord, ended: bool) -> Result<(), IoError> {
    if !is_shared_claim(rec) {
        return Ok(());
    }
    let prompt = rec.prompt_name();
    let record = layout.claim_record(&prompt);
    let missing = matches!(record_of(layout, &prompt), Record::Missing);
    if !missing || std::fs::symlink_metadata(layout.running_prompt(&prompt)).is_err() {
        return Ok(());
    }
    tracing::warn!(job = %rec.job_id, "its claim record {} was removed; written again", layout.relative(&record).display());
    let holder = Holder {
        host: rec.host.clone(),
        boot_id: boot_id().to_owned(),
        job_id: rec.job_id.to_string(),
        claimed_at: Timestamp::now(),
        ended,
    };
    fsio::write_json_atomic(layout.root(), &record, &holder)
}

/// The prompt of `rec` has moved on from its claim: remove the claim
/// record, if it is still this job's.
pub fn release(layout: &Layout, rec: &JobRecord) {
    if !is_shared_claim(rec) {
        return;
    }
    let prompt = rec.prompt_name();
    if holder(layout, &prompt).is_some_and(|h| h.job_id == rec.job_id.as_str()) {
        if let Err(e) = fsio::remove_file(layout.root(), &layout.claim_record(&prompt)) {
            tracing::warn!(job = %rec.job_id, "removing its claim record: {e}");
        }
    }
}

/// Renew this host's lease (fail-soft for the caller: an error is
/// returned to be reported once).
pub fn renew(layout: &Layout, config: &Config) -> Result<(), IoError> {
    let Some(shared) = &config.shared_inbox else {
        return Ok(());
    };
    let lease = Lease {
        host: &shared.host,
        boot_id: boot_id(),
        pid: std::process::id(),
        renewed_at: Timestamp::now(),
    };
    fsio::create_dirs(layout.root(), &layout.host_leases())?;
    fsio::write_json_atomic_unsynced(layout.root(), &layout.host_lease(&shared.host), &lease)
}

/// The claimed prompts among `claimed` that this host's own reconciliation
/// may judge: in a shared inbox, those whose claim record names this host
/// (the others are their hosts' own, or [`Sweep`]'s); all of them in a
/// local one.
pub fn own_claims(layout: &Layout, config: &Config, claimed: Vec<PathBuf>) -> Vec<PathBuf> {
    let Some(shared) = &config.shared_inbox else {
        return claimed;
    };
    claimed
        .into_iter()
        .filter(|path| {
            layout
                .prompt_of_claimed(path)
                .and_then(|p| holder(layout, &p))
                .is_some_and(|h| h.host == shared.host)
        })
        .collect()
}

/// What the daemon has seen of the other hosts' leases and of claims
/// without a record, by its own clock.
#[derive(Debug, Default)]
pub struct Sweep {
    /// Each host's lease as last read, and since when it reads so.
    leases: HashMap<String, (Vec<u8>, Instant)>,
    /// Hosts whose lease is there but could not be read at the last look:
    /// never judged dead while so.
    unreadable: HashSet<String>,
    /// Claimed prompts without a claim record, and since when.
    unheld: HashMap<PathBuf, Instant>,
    /// Claim records without their claimed prompt (a host stopped between
    /// the prompt's move and the record's removal), as read, and since when.
    stale: HashMap<PathBuf, (Holder, Instant)>,
}

impl Sweep {
    /// One look at the shared inbox: the others' leases read, and the
    /// claims of hosts dead for a whole lease requeued. Returns how many
    /// prompts were requeued.
    pub fn pass(&mut self, layout: &Layout, shared: &SharedInbox) -> usize {
        let now = Instant::now();
        if !self.read_leases(layout, now) {
            return 0;
        }
        let claimed = crate::inbox::scan_suffix(layout.root(), &layout.inbox(), RUNNING_SUFFIX);
        let mut unheld = HashSet::new();
        let mut requeued = 0;
        for found in claimed {
            let Some(prompt) = layout.prompt_of_claimed(&found.path) else {
                continue;
            };
            match record_of(layout, &prompt) {
                // This host's own claims are its reconciliation's; an ended
                // job's prompt is moved on by its own host alone; a record
                // that does not read is nobody's word.
                Record::Held(h) if h.host == shared.host || h.ended => {}
                Record::Unreadable => {}
                Record::Held(h) => {
                    let Some(silent) = self.silent_for(&h.host, now, shared.lease) else {
                        continue;
                    };
                    let lease = self.leases.get(&h.host).map(|(bytes, _)| bytes.clone());
                    if take(layout, &prompt, &h, silent, lease.as_deref()) {
                        requeued += 1;
                    }
                }
                Record::Missing => {
                    let since = *self.unheld.entry(found.path.clone()).or_insert(now);
                    unheld.insert(found.path.clone());
                    if now.duration_since(since) >= shared.lease
                        && requeue_unheld(layout, &prompt, &found.path)
                    {
                        requeued += 1;
                    }
                }
            }
        }
        self.unheld.retain(|p, _| unheld.contains(p));
        self.remove_stale(layout, shared.lease, now);
        requeued
    }

    /// Remove the claim records whose claimed prompt has been gone for a
    /// whole lease, if they still read as they did: a host stopped between
    /// moving the prompt on and removing the record.
    fn remove_stale(&mut self, layout: &Layout, lease: Duration, now: Instant) {
        let records =
            crate::inbox::scan_dotted_suffix(layout.root(), &layout.inbox(), CLAIM_RECORD_SUFFIX);
        let mut seen = HashSet::new();
        for found in records {
            let Some(prompt) = layout.prompt_of_claim_record(&found.path) else {
                continue;
            };
            if std::fs::symlink_metadata(layout.running_prompt(&prompt)).is_ok() {
                continue;
            }
            let Some(now_reads) = holder(layout, &prompt) else {
                continue;
            };
            seen.insert(found.path.clone());
            let (was, since) = self
                .stale
                .entry(found.path.clone())
                .or_insert_with(|| (now_reads.clone(), now));
            if *was != now_reads {
                *was = now_reads;
                *since = now;
            } else if now.duration_since(*since) >= lease {
                tracing::info!(
                    "claim record {} outlived its claimed prompt (host {}, job {}): removed",
                    layout.relative(&found.path).display(),
                    now_reads.host,
                    now_reads.job_id
                );
                remove_if_same(layout, &prompt, &now_reads);
                seen.remove(&found.path);
            }
        }
        self.stale.retain(|p, _| seen.contains(p));
    }

    /// Read every host's lease; a changed one is a renewal, seen now.
    /// False when the leases cannot be listed: then nobody is judged.
    fn read_leases(&mut self, layout: &Layout, now: Instant) -> bool {
        let entries = match fsio::read_dir(layout.root(), &layout.host_leases()) {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!(
                    "reading the hosts' leases: {e}; no host's claims are taken until they can be read"
                );
                return false;
            }
        };
        self.unreadable.clear();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(host) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if jobwarden_model::layout::validate_segment(host).is_err() {
                continue;
            }
            let bytes = match fsio::read_capped(layout.root(), &layout.host_lease(host), MAX_RECORD)
            {
                Ok((bytes, _)) => bytes,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    tracing::warn!(
                        "reading host {host}'s lease: {e}; its claims are not taken while it is unreadable"
                    );
                    self.unreadable.insert(host.to_owned());
                    continue;
                }
            };
            match self.leases.get_mut(host) {
                Some((seen, since)) if *seen != bytes => {
                    *seen = bytes;
                    *since = now;
                }
                Some(_) => {}
                None => {
                    self.leases.insert(host.to_owned(), (bytes, now));
                }
            }
        }
        true
    }

    /// How long `host`'s lease has gone unrenewed, if that is a whole
    /// `lease` or more. Only a host whose lease this daemon has read is
    /// ever judged (every host writes its lease before its first claim):
    /// a claim record naming a host never seen is nobody's to take.
    fn silent_for(&self, host: &str, now: Instant, lease: Duration) -> Option<Duration> {
        if self.unreadable.contains(host) {
            return None;
        }
        let (_, since) = self.leases.get(host)?;
        let silent = now.duration_since(*since);
        (silent >= lease).then_some(silent)
    }
}

/// Requeue the claim `seen` of a dead host: its record taken (one host
/// alone wins it), then the prompt put back in the inbox. Not if the
/// record is not the one seen, or the host renewed its `lease` since it
/// was read. True if requeued.
fn take(
    layout: &Layout,
    prompt: &PromptName,
    seen: &Holder,
    silent: Duration,
    lease: Option<&[u8]>,
) -> bool {
    // The host may have come back since its lease was read.
    let still_silent = || {
        let now = fsio::read_capped(layout.root(), &layout.host_lease(&seen.host), MAX_RECORD)
            .ok()
            .map(|(bytes, _)| bytes);
        now.is_none() || now.as_deref() == lease
    };
    let Some(token) = take_record(layout, prompt, |held| held == seen && still_silent()) else {
        return false;
    };
    let running = layout.running_prompt(prompt);
    let put = put_back(layout, prompt, &running);
    let _ = fsio::remove_file(layout.root(), &token);
    match put {
        Some(to) => {
            tracing::warn!(
                "host {}'s lease has not been renewed for {}: its claim of {} (job {}) is requeued as {}",
                seen.host,
                humantime::format_duration(Duration::from_secs(silent.as_secs())),
                layout.relative(&running).display(),
                seen.job_id,
                layout.relative(&to).display()
            );
            true
        }
        None => false,
    }
}

/// Take the claim record of `prompt` away from its place (renamed to a
/// name of this call's own, so that one taker alone gets it) and read it:
/// where it now is, if it is a record that `keep` accepts. Any other is
/// put back (or, if a newer record took its place meanwhile, removed).
fn take_record(
    layout: &Layout,
    prompt: &PromptName,
    keep: impl FnOnce(&Holder) -> bool,
) -> Option<PathBuf> {
    let record = layout.claim_record(prompt);
    let token = layout.taken_claim_record(prompt, &JobId::generate().to_string());
    match fsio::rename_noreplace(layout.root(), &record, &token) {
        Ok(Renamed::Done) => {}
        Ok(_) => return None,
        Err(e) => {
            tracing::warn!("taking the claim record {}: {e}", record.display());
            return None;
        }
    }
    let read = fsio::read_capped(layout.root(), &token, MAX_RECORD)
        .ok()
        .and_then(|(bytes, _)| serde_json::from_slice::<Holder>(&bytes).ok());
    if read.as_ref().is_some_and(keep) {
        return Some(token);
    }
    if !matches!(
        fsio::rename_noreplace(layout.root(), &token, &record),
        Ok(Renamed::Done)
    ) {
        let _ = fsio::remove_file(layout.root(), &token);
    }
    None
}

/// Remove the claim record of `prompt` if it still says `seen` (a record
/// written meanwhile by a new claim is put back, never removed).
fn remove_if_same(layout: &Layout, prompt: &PromptName, seen: &Holder) {
    if let Some(token) = take_record(layout, prompt, |read| read == seen) {
        let _ = fsio::remove_file(layout.root(), &token);
    }
}

/// Requeue a claimed prompt that has had no claim record for a whole
/// lease (its claimer died between its two writes), if it still has none.
fn requeue_unheld(layout: &Layout, prompt: &PromptName, running: &Path) -> bool {
    if !matches!(record_of(layout, prompt), Record::Missing) {
        return false;
    }
    match put_back(layout, prompt, running) {
        Some(to) => {
            tracing::warn!(
                "claimed prompt {} has had no claim record for a whole lease (its claimer died claiming it): requeued as {}",
                layout.relative(running).display(),
                layout.relative(&to).display()
            );
            true
        }
        None => false,
    }
}
