//! History queries for the CLI (being written).
