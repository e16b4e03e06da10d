//! Link jobwarden's programs as position-dependent executables (`-no-pie`).
//!
//! A position-independent executable has its read-only tables (vtables,
//! string references, tracing's call sites: about 350 KiB here) relocated
//! at every start, which makes them private memory of every process. A
//! monitor runs beside every job, so that was a third of what each running
//! job cost. Position-dependent, those pages stay shared with the file.
//! What is given up, address-space randomisation of the program's own
//! image (libraries, heap, stack and mappings stay randomised), protects
//! against a memory-safety exploit from input; jobwarden's input comes from
//! processes that already run with its uid (see
//! `docs/decisions/043-at-the-physical-limit-start-and-end-cost.md`).

fn main() {
    #[allow(clippy::disallowed_macros)] // cargo reads a build script's stdout
    {
        println!("cargo:rustc-link-arg-bins=-no-pie");
        println!("cargo:rerun-if-changed=build.rs");
    }
}
