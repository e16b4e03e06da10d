//! This machine's name, as records and notices give it. A fact of the
//! machine: it knows nothing of jobs (jobs are judged by their own host).

/// This machine's name (`unknown-host` when the kernel will not say).
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".into())
}
