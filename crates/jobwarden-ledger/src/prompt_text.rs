//! The text of the prompt each execution ran, kept in the ledger
//! (`execution_prompts`, migration 13) so that a run can be found by what
//! it was asked (`history list --grep`) and read (`history show
//! --prompt`) after retention removed its run folder.
//!
//! The first [`KEPT_BYTES`] of the prompt as claimed (its copy in the run
//! folder, front matter included) are stored DEFLATE-compressed; a longer
//! prompt is marked truncated. Reading the copy is left to the callers'
//! layout ([`PromptText::of_job`]); writing is part of the execution's
//! own transaction (`execution.rs`).

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use super::{Ledger, LedgerError};
use jobwarden_model::job::JobId;
use jobwarden_model::layout::Layout;

/// How much of a prompt is kept: its first 64 KiB (a prompt is a few
/// KiB; one pasted with a whole log is cut, and says so).
pub const KEPT_BYTES: u64 = 64 * 1024;

/// The DEFLATE level: the default's ratio, at a cost per job far below
/// the row's own commit.
const LEVEL: u8 = 6;

/// A prompt's kept text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PromptText {
    /// The kept bytes, as UTF-8 (invalid sequences replaced).
    pub text: String,
    /// True when the prompt was longer than [`KEPT_BYTES`].
    pub truncated: bool,
}

impl PromptText {
    /// The prompt copy in job `id`'s run folder, if it can be read. A
    /// copy a job replaced with a link, a FIFO or a folder is refused by
    /// the read (files under the root are opened without following
    /// links), and the row is written without text.
    pub fn of_job(layout: &Layout, id: &JobId) -> Option<PromptText> {
        let path = layout.prompt_copy(id);
        match jobwarden_sys::fsio::read_capped(layout.root(), &path, KEPT_BYTES) {
            Ok((bytes, truncated)) => Some(PromptText::from_bytes(&bytes, truncated)),
            Err(e) => {
                tracing::debug!(job = %id, "prompt text not kept: {e}");
                None
            }
        }
    }

    /// Text from `bytes` (cut to [`KEPT_BYTES`], at a character boundary).
    pub fn from_bytes(bytes: &[u8], truncated: bool) -> PromptText {
        let cut = truncated || bytes.len() as u64 > KEPT_BYTES;
        let kept = &bytes[..bytes.len().min(KEPT_BYTES as usize)];
        let mut text = String::from_utf8_lossy(kept).into_owned();
        // A character the cut split in two is left out, not shown as U+FFFD.
        if cut && std::str::from_utf8(kept).is_err_and(|e| e.error_len().is_none()) {
            text.pop();
        }
        PromptText {
            text,
            truncated: truncated || cut,
        }
    }

    /// Does the text hold `needle` (already lower-cased), ignoring case?
    pub fn contains_ignoring_case(&self, needle: &str) -> bool {
        self.text.to_lowercase().contains(needle)
    }
}

/// Insert execution `id`'s prompt text, compressed, in the caller's
/// transaction.
pub(super) fn insert(
    tx: &rusqlite::Connection,
    id: &str,
    prompt: &PromptText,
) -> rusqlite::Result<()> {
    let packed = miniz_oxide::deflate::compress_to_vec(prompt.text.as_bytes(), LEVEL);
    tx.prepare_cached(
        "INSERT OR IGNORE INTO execution_prompts (execution_id, truncated, text) VALUES (?1, ?2, ?3)",
    )?
    .execute(params![id, prompt.truncated, packed])?;
    Ok(())
}

/// The stored text from a row's `(truncated, compressed text)`; a blob
/// that does not inflate (a damaged row) reads as `None`.
fn unpack(truncated: bool, packed: &[u8]) -> Option<PromptText> {
    let limit = KEPT_BYTES as usize * 4;
    let bytes = miniz_oxide::inflate::decompress_to_vec_with_limit(packed, limit).ok()?;
    Some(PromptText {
        text: String::from_utf8_lossy(&bytes).into_owned(),
        truncated,
    })
}

impl Ledger {
    /// The prompt text kept for execution `id`: `None` for a row written
    /// before the ledger kept texts, or whose prompt copy was unreadable.
    pub fn prompt_text(&self, id: &str) -> Result<Option<PromptText>, LedgerError> {
        let row = self.read(|c| {
            c.prepare_cached(
                "SELECT truncated, text FROM execution_prompts WHERE execution_id = ?1",
            )?
            .query_row([id], |r| {
                let truncated = r.get::<_, Option<bool>>(0).ok().flatten().unwrap_or(false);
                Ok((truncated, packed_of(r.get_ref(1)?).map(<[u8]>::to_vec)))
            })
            .optional()
        })?;
        Ok(row.and_then(|(truncated, packed)| unpack(truncated, &packed?)))
    }
}

/// A row's compressed text as stored; anything but a blob (a row written
/// by hand) is no text, never an error that hides the other rows.
pub(super) fn packed_of(value: rusqlite::types::ValueRef<'_>) -> Option<&[u8]> {
    match value {
        rusqlite::types::ValueRef::Blob(b) => Some(b),
        _ => None,
    }
}

/// Does the compressed text of a row hold `needle` (lower-cased), case
/// ignored? SQLite cannot look into compressed text: each candidate is
/// inflated and searched here.
pub(super) fn packed_holds(packed: Option<&[u8]>, needle: &str) -> bool {
    packed
        .and_then(|p| unpack(false, p))
        .is_some_and(|p| p.contains_ignoring_case(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_the_cut_splits_is_left_out_and_a_whole_one_kept() {
        // "é" is two bytes: its first at the cut's last place.
        let mut bytes = vec![b'a'; KEPT_BYTES as usize - 1];
        bytes.extend("é".as_bytes());
        let cut = PromptText::from_bytes(&bytes[..KEPT_BYTES as usize], true);
        assert_eq!(cut.text.len(), KEPT_BYTES as usize - 1);
        assert!(cut.text.ends_with('a') && cut.truncated);
        let longer = PromptText::from_bytes(&bytes, false);
        assert_eq!(longer.text, cut.text, "the same cut, made here");
        let whole = PromptText::from_bytes("pré\u{fffd}".as_bytes(), false);
        assert_eq!(whole.text, "pré\u{fffd}", "a text's own U+FFFD stays");
    }

    #[test]
    fn only_a_blob_is_a_kept_text() {
        use rusqlite::types::ValueRef;
        assert_eq!(packed_of(ValueRef::Text(b"x")), None);
        assert_eq!(packed_of(ValueRef::Null), None);
        assert!(!packed_holds(None, "x"));
        let packed = miniz_oxide::deflate::compress_to_vec(b"Fix The Parser", LEVEL);
        assert_eq!(packed_of(ValueRef::Blob(&packed)), Some(&packed[..]));
        assert!(packed_holds(Some(&packed), "the parser"));
        assert!(!packed_holds(Some(b"not deflate"), "x"));
    }
}
