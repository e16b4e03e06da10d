//! Retention (being written).
