//! Fault injection for the test suite. In debug builds only,
//! `JOBWARDEN_TEST_FAULT=<point>` makes the named point panic, once the
//! file named by `JOBWARDEN_TEST_FAULT_WHEN` exists (at once if unset).
//! Release builds compile every point to nothing.
//!
//! Points: `daemon-tick` (the daemon loop's heartbeat tick).

/// Panic here if the test suite asked for it (debug builds only).
#[inline]
pub fn point(name: &str) {
    #[cfg(debug_assertions)]
    {
        let armed = std::env::var("JOBWARDEN_TEST_FAULT").is_ok_and(|v| v == name)
            && std::env::var_os("JOBWARDEN_TEST_FAULT_WHEN")
                .is_none_or(|when| std::path::Path::new(&when).exists());
        if armed {
            panic!("injected fault at {name}");
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}
