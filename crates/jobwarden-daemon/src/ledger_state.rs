//! The daemon's hold on `ledger.db`: reopened when the file is replaced
//! (an operator's copy, `history repair`), checked with `PRAGMA
//! quick_check` off the loop once at start (after the first claims), and
//! given up when damaged.
//!
//! A damaged ledger never stops jobs: `job.json` holds the truth and
//! `history repair` rebuilds the rows from it. Until then the daemon claims
//! without history (no cooldown can be read, every claim is a first
//! attempt) and nothing is requeued (`terminal.rs` without a ledger), so
//! at most one attempt runs per prompt dropped. The damage is logged once
//! and reported in `daemon.json` for `status`.

use std::sync::mpsc;

use super::{Daemon, file_identity};
use jobwarden_ledger::health::Condition;
use jobwarden_ledger::{Ledger, LedgerError};

/// What the start's quick check found, for which file (device, inode).
pub(super) type Verdict = (Option<(u64, u64)>, Option<LedgerError>);

impl Daemon {
    /// Open the ledger at start. A damaged one is reported and left
    /// alone; any other failure (permissions, a newer schema) stops the
    /// start, naming the file.
    pub(super) fn open_ledger_at_start(&mut self) -> Result<Option<Ledger>, LedgerError> {
        match Ledger::open(&self.layout.ledger()) {
            Ok(ledger) => Ok(Some(ledger)),
            Err(e) if e.is_damaged() => {
                self.ledger_failed(&e);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Run `writes` with the ledger writes they make as one commit
    /// ([`Ledger::begin_group`]): a burst of claims' index rows, a row of
    /// ends' ledger and index rows, each page written once. Inside a group
    /// already open, they join it. A group that does not commit is lost
    /// whole, and each write in it is one the start-up check makes again
    /// (an index row that says a job ended is written with its ledger row).
    /// False with what `writes` returned when the group did not commit.
    pub(super) fn in_ledger_group<T>(&mut self, writes: impl FnOnce(&mut Self) -> T) -> (T, bool) {
        let grouped = self.ledger.as_mut().is_some_and(|l| l.begin_group());
        let out = writes(self);
        if grouped && let Some(Err(e)) = self.ledger.as_mut().map(|l| l.end_group()) {
            tracing::warn!("{e}; what it held is written again from the jobs' records");
            return (out, false);
        }
        (out, true)
    }

    /// Reopen the ledger if `ledger.db` is no longer the file we hold open
    /// (an operator replaced it, or `history repair` rebuilt it): decisions
    /// must read the same history the monitors write. A damaged file is
    /// not reopened until it is replaced.
    pub(super) fn refresh_ledger(&mut self) {
        if std::mem::replace(&mut self.ledger_looked, true) {
            return;
        }
        let path = self.layout.ledger();
        let current = file_identity(&path);
        if current.is_some() && current == self.ledger_identity {
            return;
        }
        match Ledger::open(&path) {
            Ok(ledger) => {
                if !self.ledger_condition.ok {
                    tracing::info!(
                        "{} was replaced and opens cleanly; recording in it again",
                        path.display()
                    );
                } else if self.ledger_identity.is_some() {
                    tracing::warn!("{} was replaced; reopened it", path.display());
                }
                self.ledger = Some(ledger);
                self.ledger_identity = file_identity(&path);
                self.ledger_condition = Condition::ok();
            }
            Err(e) if e.is_damaged() => self.ledger_failed(&e),
            Err(e) => tracing::error!("{e}"),
        }
    }

    /// A ledger error: damage makes the daemon let go of the file (once
    /// logged, shown by `status`); anything else is only logged.
    pub(super) fn ledger_failed(&mut self, e: &LedgerError) {
        if !e.is_damaged() {
            tracing::warn!("{e}");
            return;
        }
        self.ledger = None;
        self.ledger_identity = file_identity(&e.path);
        let condition = Condition::of(e);
        if self.ledger_condition.ok {
            tracing::error!(
                "{e}. Jobs go on without it: each job.json holds the truth, and the repair restores their rows. Until then nothing is retried automatically and no cooldown applies"
            );
        }
        self.ledger_condition = condition;
    }

    /// Reading every page of the ledger once (a truncated file or a
    /// corrupt index opens fine), as a job for the start-up check's thread
    /// (after the first claims, at low priority: see `startup_check.rs`):
    /// the verdict arrives at a later tick ([`Self::poll_quick_check`]).
    pub(super) fn quick_check_job(&mut self) -> Option<impl FnOnce() + Send + 'static> {
        self.ledger.as_ref()?;
        let (tx, rx) = mpsc::channel();
        let path = self.layout.ledger();
        self.quick_check = Some(rx);
        Some(move || {
            let verdict = Ledger::open(&path).and_then(|l| l.quick_check());
            drop(tx.send((file_identity(&path), verdict.err())));
        })
    }

    /// Take the quick check's verdict if it has arrived, for the file it
    /// checked (one replaced meanwhile is judged when reopened).
    pub(super) fn poll_quick_check(&mut self) {
        let Some(rx) = &self.quick_check else { return };
        let received = rx.try_recv();
        if matches!(received, Err(mpsc::TryRecvError::Empty)) {
            return;
        }
        self.quick_check = None;
        let Ok((identity, verdict)) = received else {
            return;
        };
        match verdict {
            Some(e) if identity == self.ledger_identity && self.ledger.is_some() => {
                self.ledger_failed(&e)
            }
            Some(e) => tracing::debug!("quick check of a ledger since replaced: {e}"),
            None => tracing::debug!("ledger quick check: ok"),
        }
    }
}
