//! The `jobwarden` binary: everything is in the library
//! ([`jobwarden::commands::main`]).

use std::process::ExitCode;

fn main() -> ExitCode {
    jobwarden::commands::main()
}
