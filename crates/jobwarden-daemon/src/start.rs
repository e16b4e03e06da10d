//! The daemon's start: the root made and checked, and what is on disk
//! reconciled before the first claim (see `recover.rs`).

use super::{Daemon, Slot};
use jobwarden_engine::failure::DaemonError;
use jobwarden_engine::recover::{self, Recovered};
use jobwarden_ledger::{Ledger, backfill};
use jobwarden_model::layout::Layout;
use jobwarden_sys::error::IoContext;
use jobwarden_sys::{fsio, storage};
use std::path::Path;

impl Daemon {
    /// The start-up reconciliation: through the job index when the ledger
    /// answers (only what may be live is read), else of all of `runs/`. An
    /// index that holds no job while `runs/` holds some was lost (a fresh
    /// ledger, an emptied table): the index and the ledger rows come back
    /// from the records first, so that the first claims read the history
    /// they decide by.
    pub(super) fn reconcile_at_start(&mut self, ledger: Option<&mut Ledger>) -> Recovered {
        let (layout, config, host) = (&self.layout, &self.config, &self.host);
        let Some(ledger) = ledger else {
            return recover::reconcile(layout, config, host, None);
        };
        if ledger.any_job_indexed().is_ok_and(|any| !any) && has_run_folders(layout) {
            tracing::warn!(
                "the job index is empty, but run folders exist: the index and the ledger rows are rebuilt from their records before anything is claimed"
            );
            backfill::run(layout, ledger, &|rec| recover::being_finished(layout, rec));
            return recover::reconcile(layout, config, host, Some(ledger));
        }
        match recover::reconcile_live(layout, config, host, &mut *ledger) {
            Ok(recovered) => recovered,
            Err(e) => {
                tracing::warn!("{e}; reconciling every run folder instead of the job index");
                recover::reconcile(layout, config, host, Some(ledger))
            }
        }
    }

    pub(super) fn take_recovered(&mut self, recovered: Recovered) {
        for (id, monitor) in recovered.adopted {
            tracing::info!(job = %id, pid = monitor.pid, "re-adopted a running job");
            self.hold_adopted(&id);
            self.running.insert(id, Slot::Adopted(monitor));
        }
        for id in recovered.reattach {
            self.reattach(&id);
        }
        for clearing in recovered.clearing {
            self.wait_for_group(clearing);
        }
        for (id, priority) in recovered.queued {
            self.enqueue_recovered(&id, priority);
        }
    }
}

pub(super) fn prepare_root(layout: &Layout) -> Result<(), DaemonError> {
    let created = fsio::create_root(layout.root()).and_then(|()| {
        layout
            .skeleton()
            .iter()
            .try_for_each(|dir| make_folder(layout, dir))
    });
    // Refuse clearly rather than with the first write's errno. A full root
    // still lets the daemon start (the inbox is kept, claims wait).
    match storage::probe(layout.root()) {
        Ok(p) if p.condition == storage::Condition::ReadOnly => Err(DaemonError::Unwritable {
            root: layout.root().to_path_buf(),
            full: false,
        }),
        _ => match created {
            Err(e) if storage::fault_of(&e.source) == Some(storage::Condition::Full) => {
                Err(DaemonError::Unwritable {
                    root: layout.root().to_path_buf(),
                    full: true,
                })
            }
            other => Ok(other?),
        },
    }
}

/// Make one folder of the skeleton. The inbox and `control/` are read
/// only through handles that refuse a link (a running daemon already
/// claims nothing and reads no pause through one), so an impostor there
/// is reported and the daemon starts; anything else refused stops it.
fn make_folder(layout: &Layout, dir: &Path) -> Result<(), jobwarden_sys::error::IoError> {
    match fsio::create_dirs(layout.root(), dir) {
        Err(e) if fsio::is_refusal(&e) && layout.read_through_handles(dir) => {
            tracing::warn!(
                "{e}. Starting without it: nothing is claimed or read through it; replace it with a folder"
            );
            Ok(())
        }
        other => other,
    }
}

/// Claims rename from `inbox/` and archives rename into `archive/`; both
/// must be atomic, so all three must share one filesystem. A shared inbox
/// is another filesystem by nature: there, `runs/` and `archive/` must
/// share one, and a prompt crosses to it by copy (`fsio::rename_noreplace`).
pub(super) fn check_same_filesystem(layout: &Layout, shared: bool) -> Result<(), DaemonError> {
    use std::os::unix::fs::MetadataExt;
    // Never through a link: an inbox that is one is refused, not followed.
    let dev = |p: &Path| {
        std::fs::symlink_metadata(p)
            .map(|m| m.dev())
            .ctx("inspecting", p)
    };
    let inbox = if shared {
        layout.runs()
    } else {
        layout.inbox()
    };
    let inbox_dev = dev(&inbox)?;
    for other in [layout.runs(), layout.archive()] {
        if dev(&other)? != inbox_dev {
            return Err(DaemonError::CrossFilesystem { inbox, runs: other });
        }
    }
    Ok(())
}

/// An inbox other hosts share (their leases are in it) is refused to a
/// daemon not told so: it would judge their claims as its own.
pub(super) fn check_not_shared_unsaid(layout: &Layout, shared: bool) -> Result<(), DaemonError> {
    let leases = layout.host_leases();
    if !shared && std::fs::symlink_metadata(&leases).is_ok() {
        return Err(DaemonError::SharedInboxUnsaid { leases });
    }
    Ok(())
}

/// Does `runs/` hold at least one job folder?
pub(super) fn has_run_folders(layout: &Layout) -> bool {
    layout
        .each_job_id()
        .is_ok_and(|mut ids| ids.next().is_some())
}
