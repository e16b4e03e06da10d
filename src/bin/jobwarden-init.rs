//! `jobwarden-init`: the sandbox's init (`jobwarden_sys::child::init`), a
//! program of its own so that a job's start does not load the whole of
//! `jobwarden`. It has no `main` of Rust's runtime (`no_main`): nothing is
//! set up before the init's own work (no stack-overflow handler, which
//! reads `/proc/self/maps`, no signal dispositions, no `stdout` to flush),
//! and it loads nothing but the C library. Its arguments are the init's
//! ([`jobwarden_sys::child::init::argv`]); run otherwise, it says so and
//! exits 2.

#![no_main]

/// The C entry point: the init, which returns only on an error.
#[unsafe(no_mangle)]
pub extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    match jobwarden_sys::child::init::run_args() {
        Some(code) => std::ffi::c_int::from(code),
        None => {
            let line =
                b"jobwarden-init: the sandbox's init, started by a job's monitor; not a command\n";
            // SAFETY: a write of a static buffer to stderr.
            unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
            2
        }
    }
}
