//! The `jobwarden` binary: everything is in the library
//! ([`jobwarden::commands::main`]).

use std::process::ExitCode;

fn main() -> ExitCode {
    // A sandboxed job's init is this program too, and runs before anything
    // else is set up.
    if let Some(code) = jobwarden_sys::child::init::run_if_asked() {
        return code;
    }
    jobwarden::commands::main()
}
