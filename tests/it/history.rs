//! `jobwarden history` queries against real ledgers (being written).
