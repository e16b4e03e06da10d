//! Where a job's prompt is: a file holding the bytes its record says it
//! claimed (`prompt_sha256`), at the place the record expects or any of
//! its archive names.

use std::path::{Path, PathBuf};

use super::JobRecord;
use crate::layout::Layout;
use jobwarden_sys::fsio;

/// Where an ended job's prompt already is, when its claimed file is gone:
/// `dest` itself, or any of its archive names, holding the bytes it
/// claimed (any, for an old record without a digest).
pub fn already_placed(layout: &Layout, rec: &JobRecord, dest: &Path) -> Option<PathBuf> {
    let archived = layout.archived_prompt_candidates(&rec.prompt_name(), &rec.job_id);
    std::iter::once(dest.to_path_buf())
        .chain(archived)
        .find(|p| holds_claimed_bytes(layout, rec, p))
}

/// Does `path` hold the bytes `rec` claimed?
pub fn holds_claimed_bytes(layout: &Layout, rec: &JobRecord, path: &Path) -> bool {
    use sha2::{Digest, Sha256};
    let Ok((bytes, false)) = fsio::read_capped(layout.root(), path, MAX_PROMPT_READ) else {
        return false;
    };
    match rec.prompt_sha256.as_deref() {
        Some(digest) => crate::job::hex(&Sha256::digest(&bytes)) == digest,
        None => true,
    }
}

/// Longest prompt read to compare digests; larger ones were never claimed.
const MAX_PROMPT_READ: u64 = 1 << 30;
