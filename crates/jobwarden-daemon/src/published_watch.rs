//! The reconcile of published work ([`jobwarden_engine::published`]) as the daemon
//! runs it: once after the first claims, then every `reconcile_interval`;
//! on a task of its own with its own ledger connection, so claims never
//! wait on git; never two passes at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use jobwarden_engine::hooks::Hub;
use jobwarden_engine::published::{self, Memory};
use jobwarden_model::config::Config;
use jobwarden_model::layout::Layout;

#[derive(Default)]
pub(super) struct PublishedWatch {
    running: Arc<AtomicBool>,
    memory: Arc<tokio::sync::Mutex<Memory>>,
}

impl PublishedWatch {
    /// Start a pass unless one is still going.
    pub(super) fn start(&self, layout: &Layout, config: &Arc<Config>, hooks: &Hub) {
        if self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let (layout, config) = (layout.clone(), config.clone());
        let (running, memory, hooks) = (self.running.clone(), self.memory.clone(), hooks.clone());
        tokio::spawn(async move {
            published::pass(&layout, &config, &mut *memory.lock().await, Some(&hooks)).await;
            running.store(false, Ordering::Release);
        });
    }
}
