//! The short form of a job id: what every table, page and message shows,
//! and what a `<job>` argument may give a prefix of. One function owns it
//! ([`short_id`]); the same rule as SQL ([`SHORT_ID_SQL`]) lets the ledger
//! match executions by it, and the job index keeps it in `id_short`.
//!
//! - A generated id (a UUIDv7, whose head is its timestamp, the same for
//!   every job of a minute): its last 8 characters.
//! - A retry of one (`<uuid>-r2`): the first attempt's short id and the
//!   attempt, `59f1c2ab-r2`.
//! - Any other id (one given in front matter, and its retries): whole. It
//!   is at most 64 characters, and its end alone may mean nothing
//!   (`ightly-2` for `nightly-2`).

/// Characters of a generated id that its short form keeps.
const TAIL: usize = 8;

/// Length of a hyphenated UUID.
const UUID_LEN: usize = 36;

/// The short form of `id` (see the module doc).
pub fn short_id(id: &str) -> String {
    if is_generated(id) {
        return id[UUID_LEN - TAIL..].to_owned();
    }
    match retry_of_generated(id) {
        Some((first, attempt)) => format!("{}-r{attempt}", &first[UUID_LEN - TAIL..]),
        None => id.to_owned(),
    }
}

/// The widest a short id can be: the longest id a job may have.
pub const SHORT_ID_MAX: usize = 64;

/// Whether `id` is one [`jobwarden_model::job::JobId::generate`] makes: a
/// hyphenated, lower-case UUID of version 7 and the RFC 4122 variant.
fn is_generated(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == UUID_LEN
        && b.iter().enumerate().all(|(i, &c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            14 => c == b'7',
            19 => matches!(c, b'8' | b'9' | b'a' | b'b'),
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
        })
}

/// `<uuid>-r<N>` → (`<uuid>`, `N`), when `<uuid>` is a generated id.
fn retry_of_generated(id: &str) -> Option<(&str, &str)> {
    let first = id.get(..UUID_LEN)?;
    let attempt = id.get(UUID_LEN..)?.strip_prefix("-r")?;
    let digits = !attempt.is_empty() && attempt.bytes().all(|c| c.is_ascii_digit());
    (digits && is_generated(first)).then_some((first, attempt))
}

/// [`short_id`] as an SQL expression of a column named `id`, for queries
/// that match ids by their short form.
pub(crate) fn short_id_sql() -> String {
    let hex = "[0-9a-f]";
    let generated = format!(
        "{h8}-{h4}-7{h3}-[89ab]{h3}-{h12}",
        h8 = hex.repeat(8),
        h4 = hex.repeat(4),
        h3 = hex.repeat(3),
        h12 = hex.repeat(12)
    );
    format!(
        "(CASE WHEN id GLOB '{generated}' THEN substr(id, 29, 8) \
         WHEN substr(id, 1, 36) GLOB '{generated}' AND substr(id, 37, 2) = '-r' \
              AND length(id) > 38 AND substr(id, 39) NOT GLOB '*[^0-9]*' \
         THEN substr(id, 29, 8) || substr(id, 37) \
         ELSE id END)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLES: &[(&str, &str)] = &[
        ("019ac5a1-7c2e-7d41-9a3b-5e8f3c159231", "3c159231"),
        ("019ac5a1-7c2e-7d41-9a3b-5e8f3c159231-r2", "3c159231-r2"),
        ("019ac5a1-7c2e-7d41-9a3b-5e8f3c159231-r12", "3c159231-r12"),
        ("nightly-2", "nightly-2"),
        ("nightly-r2", "nightly-r2"),
        ("a", "a"),
        // Not version 7, or upper case: not generated here, so whole.
        (
            "019ac5a1-7c2e-4d41-9a3b-5e8f3c159231",
            "019ac5a1-7c2e-4d41-9a3b-5e8f3c159231",
        ),
        (
            "019AC5A1-7C2E-7D41-9A3B-5E8F3C159231",
            "019AC5A1-7C2E-7D41-9A3B-5E8F3C159231",
        ),
        // A retry suffix that is not one.
        (
            "019ac5a1-7c2e-7d41-9a3b-5e8f3c159231-rx",
            "019ac5a1-7c2e-7d41-9a3b-5e8f3c159231-rx",
        ),
        (
            "019ac5a1-7c2e-7d41-9a3b-5e8f3c159231-r",
            "019ac5a1-7c2e-7d41-9a3b-5e8f3c159231-r",
        ),
        (
            "019ac5a1-7c2e-7d41-9a3b-5e8f3c159231-r2x",
            "019ac5a1-7c2e-7d41-9a3b-5e8f3c159231-r2x",
        ),
    ];

    #[test]
    fn generated_ids_keep_their_tail_retries_their_attempt_others_all() {
        for (id, short) in SAMPLES {
            assert_eq!(short_id(id), *short, "{id}");
        }
        let generated = jobwarden_model::job::JobId::generate();
        assert_eq!(short_id(generated.as_str()).len(), TAIL, "{generated}");
    }

    #[test]
    fn the_sql_form_agrees_with_the_function() {
        let conn = rusqlite::Connection::open_in_memory().expect("memory");
        let sql = format!("SELECT {} FROM (SELECT ?1 AS id)", short_id_sql());
        for (id, _) in SAMPLES {
            let got: String = conn.query_row(&sql, [id], |r| r.get(0)).expect("query");
            assert_eq!(got, short_id(id), "{id}");
        }
    }
}
