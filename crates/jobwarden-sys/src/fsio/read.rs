//! Reads of files under the root, capped: what a reader takes of a file
//! a job may have made large is what it asked for, never more. Files are
//! opened as every path under the root is (`beneath.rs`), and read where
//! they are (`pread`): a file as long as its open found it costs one read.

use std::fs::File;
use std::io;
use std::path::Path;

use super::beneath::open_file_len;
use crate::error::IoError;

/// Read at most `limit` bytes of a regular file under `root`. Returns the
/// bytes and whether the file was longer than `limit`.
pub fn read_capped(root: &Path, path: &Path, limit: u64) -> Result<(Vec<u8>, bool), IoError> {
    let (file, len) = open_file_len(root, path)?;
    read_capped_at(&file, path, len, limit)
}

/// [`read_capped`] of a file opened with its length `len` (as its open
/// found it: [`open_file_len`], [`open_file_stat`]), read where it is
/// (`pread`): a file as long as its open found it is read in one call.
pub fn read_capped_at(
    file: &File,
    path: &Path,
    len: u64,
    limit: u64,
) -> Result<(Vec<u8>, bool), IoError> {
    let cap = usize::try_from(limit.saturating_add(1)).unwrap_or(usize::MAX);
    let first = usize::try_from(len.min(READ_ROOM)).unwrap_or(0);
    let mut bytes = vec![0u8; first.saturating_add(1).min(cap)];
    let mut got = 0;
    loop {
        if got == bytes.len() {
            if got >= cap {
                break;
            }
            bytes.resize(got.saturating_mul(2).clamp(1, cap), 0);
        }
        match read_at(file, &mut bytes[got..], got as u64, path)? {
            0 => break,
            n => got += n,
        }
        // As long as its open found it, with room for more that did not
        // come: the file's end, without a read to say so.
        if got as u64 == len && got < bytes.len() {
            break;
        }
    }
    bytes.truncate(got);
    let over = got as u64 > limit;
    bytes.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok((bytes, over))
}

/// The last `limit` bytes of a regular file under `root` (the whole file
/// when shorter), and the file's length: the tail of a log that may be
/// large costs only what is read.
pub fn read_tail(root: &Path, path: &Path, limit: u64) -> Result<(Vec<u8>, u64), IoError> {
    let (file, len) = open_file_len(root, path)?;
    Ok((read_end(&file, path, len, limit)?, len))
}

/// The last `limit` bytes of the first `len` of an open file (`path`
/// names it in errors), read where they are (`pread`): no seek, and as
/// many reads as the bytes need, often one. Fewer when the file is
/// shorter than `len` by now.
pub fn read_end(file: &File, path: &Path, len: u64, limit: u64) -> Result<Vec<u8>, IoError> {
    let start = len.saturating_sub(limit);
    let want = usize::try_from(len - start).unwrap_or(0);
    let mut bytes = vec![0u8; want];
    let mut got = 0;
    while got < want {
        match read_at(file, &mut bytes[got..], start + got as u64, path)? {
            0 => break,
            n => got += n,
        }
    }
    bytes.truncate(got);
    Ok(bytes)
}

/// What [`read_capped_at`] makes room for before its first read, at most.
const READ_ROOM: u64 = 64 * 1024;

/// `pread` into `buf` at `offset`, again when a signal interrupted it.
fn read_at(file: &File, buf: &mut [u8], offset: u64, path: &Path) -> Result<usize, IoError> {
    use std::os::unix::fs::FileExt;
    loop {
        match file.read_at(buf, offset) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            read => return read.map_err(|e| IoError::new("reading", path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(bytes: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, bytes).expect("write");
        (dir, path)
    }

    #[test]
    fn a_read_takes_what_the_open_found_and_what_came_since() {
        let (dir, path) = file_with(b"0123456789");
        let (file, len) = open_file_len(dir.path(), &path).expect("open");
        assert_eq!(len, 10);
        assert_eq!(
            read_capped_at(&file, &path, len, 100).expect("read"),
            (b"0123456789".to_vec(), false)
        );
        // Grown after its open: what is there now is read, to the cap.
        let mut more = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("append");
        std::io::Write::write_all(&mut more, b"abc").expect("grow");
        assert_eq!(
            read_capped_at(&file, &path, len, 100).expect("read").0,
            b"0123456789abc".to_vec()
        );
        assert_eq!(
            read_capped_at(&file, &path, len, 11).expect("read"),
            (b"0123456789a".to_vec(), true)
        );
        // Shorter than its open found it: what is left.
        more.set_len(4).expect("truncate");
        assert_eq!(
            read_capped_at(&file, &path, len, 100).expect("read").0,
            b"0123".to_vec()
        );
    }

    #[test]
    fn large_and_empty_files_read_whole_to_the_cap() {
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let (dir, path) = file_with(&big);
        assert_eq!(
            read_capped(dir.path(), &path, 300_000).expect("read"),
            (big.clone(), false)
        );
        let (cut, over) = read_capped(dir.path(), &path, 150_000).expect("read");
        assert!(over);
        assert_eq!(cut, big[..150_000].to_vec());
        let (dir, path) = file_with(b"");
        assert_eq!(
            read_capped(dir.path(), &path, 10).expect("read"),
            (Vec::new(), false)
        );
        assert_eq!(
            read_tail(dir.path(), &path, 10).expect("tail"),
            (Vec::new(), 0)
        );
    }

    #[test]
    fn a_tail_is_the_end_of_the_file() {
        let (dir, path) = file_with(b"0123456789");
        assert_eq!(
            read_tail(dir.path(), &path, 4).expect("tail"),
            (b"6789".to_vec(), 10)
        );
        assert_eq!(
            read_tail(dir.path(), &path, 40).expect("tail"),
            (b"0123456789".to_vec(), 10)
        );
        let (file, _) = open_file_len(dir.path(), &path).expect("open");
        assert_eq!(read_end(&file, &path, 8, 3).expect("end"), b"567".to_vec());
    }
}
