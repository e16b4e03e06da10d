//! One question to Slurm for every Slurm job at once: every
//! `slurm_poll_interval`, the daemon asks `squeue` about the Slurm jobs of
//! the jobs it runs and writes the answer to `slurm.json` at the root,
//! which each job's monitor reads ([`jobwarden_engine::slurm::QueueFile`]). A monitor
//! asks Slurm itself only when that answer is stale (no daemon, or one
//! that cannot reach Slurm). Off the daemon's loop, never two at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use jobwarden_engine::slurm::{self, QueueFile};
use jobwarden_model::job::{JobId, JobRecord};
use jobwarden_model::layout::Layout;
use jobwarden_sys::clock::Timestamp;

#[derive(Default)]
pub(super) struct SlurmWatch {
    running: Arc<AtomicBool>,
    /// The last error said, so that a controller down is logged once.
    said: Arc<std::sync::Mutex<Option<String>>>,
}

impl SlurmWatch {
    /// Ask about the Slurm jobs among `jobs` (the running ones), unless a
    /// poll is still going or none runs in Slurm.
    pub(super) fn poll<'a>(&self, layout: &Layout, jobs: impl Iterator<Item = &'a JobId>) {
        let ids: Vec<String> = jobs
            .filter_map(|id| JobRecord::load_job(layout, id).ok())
            .filter_map(|rec| rec.slurm.and_then(|s| s.job_id))
            .collect();
        if ids.is_empty() || self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let (layout, running, said) = (layout.clone(), self.running.clone(), self.said.clone());
        tokio::spawn(async move {
            let asked_at = Timestamp::now().epoch_ms();
            let file = match slurm::poll(&ids).await {
                Ok(jobs) => {
                    if let Ok(mut s) = said.lock()
                        && s.take().is_some()
                    {
                        tracing::info!("Slurm answers again");
                    }
                    QueueFile {
                        polled_at_ms: asked_at,
                        error: None,
                        jobs,
                        asked: ids,
                    }
                }
                Err(e) => {
                    let text = e.to_string();
                    if let Ok(mut s) = said.lock()
                        && s.as_deref() != Some(text.as_str())
                    {
                        tracing::warn!(
                            "asking Slurm about its jobs: {text}; they are followed on, and asked again"
                        );
                        *s = Some(text.clone());
                    }
                    QueueFile {
                        polled_at_ms: asked_at,
                        error: Some(text),
                        jobs: Default::default(),
                        asked: ids,
                    }
                }
            };
            match serde_json::to_vec(&file) {
                Ok(bytes) => {
                    let path = layout.slurm_queue();
                    if let Err(e) =
                        jobwarden_sys::fsio::write_atomic_unsynced(layout.root(), &path, &bytes)
                    {
                        tracing::warn!("{e}");
                    }
                }
                Err(e) => tracing::warn!("encoding slurm.json: {e}"),
            }
            running.store(false, Ordering::Release);
        });
    }
}
