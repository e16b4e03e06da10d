//! What this process keeps in memory: its heaps, and the pages of its own
//! program mapped into it.
//!
//! A process's resident set counts every page of its program it has
//! touched since it started, and the kernel maps them in runs (on a fault
//! it maps the page's cached neighbours too, 64 KiB by default). The
//! daemon and the monitors run much code once, at their start (the
//! arguments, the config, the ledger's checks): [`release_program_pages`]
//! lets go of those pages once they are done with, and what runs again
//! is mapped again from the page cache, where the other processes of the
//! same program keep it.

/// Let this process's threads share two heaps instead of one each (the
/// allocator's default, up to 8 per core): the daemon's short-lived threads
/// (syncs, the start-up check) each left a heap of their own behind, about
/// 0.3 MiB of its idle memory. Call before any thread starts. An operator's
/// `MALLOC_ARENA_MAX` wins.
pub fn share_heaps() {
    #[cfg(target_env = "gnu")]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt takes two integers; called before other threads exist.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

/// Give the heap pages this process has freed back to the kernel (the
/// allocator keeps them otherwise): after a start-up's or a backlog's
/// transient tables.
pub fn release_free_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes an integer and only returns free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Both of the above, where a process goes quiet after work it will not
/// do again soon (start-up, a batch): [`release_free_memory`] and
/// [`release_program_pages`].
pub fn release_after_work() {
    release_free_memory();
    release_program_pages();
}

/// Unmap the pages of this program's code and read-only data from the
/// process (`MADV_DONTNEED` on its segments that are never written): the
/// next run of any of that code maps its page again from the page cache,
/// a minor fault. Nothing is lost: those segments are the program file's
/// bytes, never written (the writable segments, and the read-only one the
/// loader wrote its relocations into, are left alone). Returns the bytes
/// released; 0 if the program's segments could not be found.
pub fn release_program_pages() -> usize {
    let mut released = 0usize;
    // SAFETY: the callback reads the program headers the loader hands it,
    // valid for the call, and writes only `released`, passed by pointer.
    unsafe {
        libc::dl_iterate_phdr(
            Some(release_segments),
            (&raw mut released).cast::<libc::c_void>(),
        );
    }
    released
}

/// [`release_program_pages`]'s visit of the first object the loader lists,
/// the program itself (1 stops the walk there).
unsafe extern "C" fn release_segments(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    released: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: the loader passes a valid `info` for the call; `released` is
    // the `usize` of `release_program_pages`.
    let (info, released) = unsafe { (&*info, &mut *released.cast::<usize>()) };
    if info.dlpi_phdr.is_null() {
        return 1;
    }
    // SAFETY: `dlpi_phdr` points at `dlpi_phnum` program headers.
    let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum.into()) };
    let page = page_size();
    let written =
        |h: &&libc::Elf64_Phdr| h.p_type == libc::PT_GNU_RELRO || h.p_flags & libc::PF_W != 0;
    let spans_written: Vec<(usize, usize)> = headers
        .iter()
        .filter(written)
        .map(|h| span(info.dlpi_addr as usize, h))
        .collect();
    for h in headers.iter().filter(|h| h.p_type == libc::PT_LOAD) {
        let (start, end) = span(info.dlpi_addr as usize, h);
        // Whole pages only, none shared with a written segment.
        let (lo, hi) = (start.div_ceil(page) * page, end / page * page);
        let overlaps = spans_written
            .iter()
            .any(|&(s, e)| s < hi + page && lo < e + page);
        if h.p_flags & libc::PF_W != 0 || overlaps || hi <= lo {
            continue;
        }
        // SAFETY: [lo, hi) is whole pages of a read-only segment of this
        // program, mapped from its file and never written: dropping them
        // loses nothing, the next access maps the file's page again.
        if unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_DONTNEED) } == 0 {
            *released += hi - lo;
        }
    }
    1
}

/// Where segment `h` lies in memory, the object loaded at `base`.
fn span(base: usize, h: &libc::Elf64_Phdr) -> (usize, usize) {
    let start = base + h.p_vaddr as usize;
    (start, start + h.p_memsz as usize)
}

fn page_size() -> usize {
    // SAFETY: sysconf takes an integer.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn still_runs(x: u64) -> u64 {
        x.wrapping_mul(31).rotate_left(7)
    }

    #[test]
    fn released_code_runs_again_and_read_only_data_reads_the_same() {
        static TABLE: [u8; 5] = *b"table";
        let before = (still_runs(3), TABLE);
        let released = release_program_pages();
        assert!(released > 0, "the program's read-only segments were found");
        assert_eq!((still_runs(3), TABLE), before);
        // The heap and the writable data are untouched.
        let v: Vec<u64> = (0..1000).collect();
        assert_eq!(v.iter().sum::<u64>(), 499_500);
    }
}
