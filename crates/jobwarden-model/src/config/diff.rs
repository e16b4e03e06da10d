//! What changed between two configurations, key by key, for a reload's log
//! and result. Compared on the effective configuration
//! ([`Config::to_toml`], every default filled in), so that writing out a
//! default, reordering keys or editing a comment is no change.

use toml::{Table, Value};

use super::Config;

/// The changes from `old` to `new`, one short line each, in the order the
/// keys are shown (`config show`): `max_jobs: 1 → 2`,
/// `profiles.review: added`, `profiles.default: changed (timeout)`,
/// `route #2: removed (match = "a/**")`. Empty when nothing changed.
pub fn changes(old: &Config, new: &Config) -> Vec<String> {
    let (Some(old), Some(new)) = (table(old), table(new)) else {
        return vec!["the configuration (its keys could not be compared)".into()];
    };
    let mut out = Vec::new();
    for key in keys(&old, &new) {
        match key.as_str() {
            "profiles" => profiles(&old, &new, &mut out),
            "route" => routes(&old, &new, &mut out),
            _ => match (old.get(&key), new.get(&key)) {
                (a, b) if a == b => {}
                (Some(a), Some(b)) => out.push(format!("{key}: {} → {}", shown(a), shown(b))),
                (None, Some(b)) => out.push(format!("{key}: set to {}", shown(b))),
                (Some(a), None) => out.push(format!("{key}: unset (was {})", shown(a))),
                (None, None) => {}
            },
        }
    }
    out
}

fn table(config: &Config) -> Option<Table> {
    config.to_toml().parse::<Table>().ok()
}

/// The keys of both tables, `old`'s order first, then those only `new` has.
fn keys(old: &Table, new: &Table) -> Vec<String> {
    let mut keys: Vec<String> = old.keys().cloned().collect();
    keys.extend(new.keys().filter(|k| !old.contains_key(*k)).cloned());
    keys
}

fn profiles(old: &Table, new: &Table, out: &mut Vec<String>) {
    let empty = Table::new();
    let of = |t: &Table| t.get("profiles").and_then(Value::as_table).cloned();
    let (old, new) = (of(old).unwrap_or_default(), of(new).unwrap_or_default());
    for name in keys(&old, &new) {
        match (old.get(&name), new.get(&name)) {
            (Some(a), Some(b)) if a != b => {
                let (a, b) = (
                    a.as_table().unwrap_or(&empty),
                    b.as_table().unwrap_or(&empty),
                );
                let changed: Vec<String> = keys(a, b)
                    .into_iter()
                    .filter(|k| a.get(k) != b.get(k))
                    .collect();
                out.push(format!("profiles.{name}: changed ({})", changed.join(", ")));
            }
            (None, Some(_)) => out.push(format!("profiles.{name}: added")),
            (Some(_), None) => out.push(format!("profiles.{name}: removed")),
            _ => {}
        }
    }
}

fn routes(old: &Table, new: &Table, out: &mut Vec<String>) {
    let of = |t: &Table| {
        t.get("route")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (old, new) = (of(old), of(new));
    let pattern = |v: &Value| {
        v.get("match")
            .map(|m| format!(" (match = {})", shown(m)))
            .unwrap_or_default()
    };
    for i in 0..old.len().max(new.len()) {
        let n = i + 1;
        match (old.get(i), new.get(i)) {
            (Some(a), Some(b)) if a != b => out.push(format!("route #{n}: changed{}", pattern(b))),
            (None, Some(b)) => out.push(format!("route #{n}: added{}", pattern(b))),
            (Some(a), None) => out.push(format!("route #{n}: removed{}", pattern(a))),
            _ => {}
        }
    }
}

/// A value as TOML writes it, shortened when it is long.
fn shown(v: &Value) -> String {
    const MAX: usize = 60;
    let text = v.to_string();
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ConfigSource, parse};

    fn config(text: &str) -> Config {
        parse(text, ConfigSource::BuiltIn).expect("valid config")
    }

    #[test]
    fn nothing_changes_when_only_the_spelling_does() {
        let a = config("max_jobs = 4\n");
        let b = config("# four is the default\nsettle = \"2s\"\n");
        assert_eq!(changes(&a, &b), Vec::<String>::new());
    }

    #[test]
    fn globals_profiles_and_routes_are_named() {
        let a = config(
            "max_jobs = 1\n[profiles.default]\ncommand = [\"cat\"]\n\
             [profiles.old]\ncommand = [\"true\"]\n\
             [[route]]\nmatch = \"a/**\"\nprofile = \"old\"\n",
        );
        let b = config(
            "max_jobs = 2\n[profiles.default]\ncommand = [\"cat\"]\ntimeout = \"1h\"\n\
             [profiles.review]\ncommand = [\"true\"]\n",
        );
        assert_eq!(
            changes(&a, &b),
            vec![
                "max_jobs: 1 → 2",
                "profiles.default: changed (timeout)",
                "profiles.old: removed",
                "profiles.review: added",
                "route #1: removed (match = \"a/**\")",
            ]
        );
    }
}
