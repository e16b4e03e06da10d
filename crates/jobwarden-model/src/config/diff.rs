//! What changed between two configurations, key by key, for a reload's log
//! and result. Compared on the effective configuration
//! ([`Config::to_toml`], every default filled in), so that writing out a
//! default, reordering keys or editing a comment is no change. Routes are
//! matched by their pattern and hooks by their name, never by position.

use toml::{Table, Value};

use super::Config;
use super::notify::{Delivery, Hook};

/// The changes from `old` to `new`, one short line each, in the order the
/// keys are shown (`config show`): `max_jobs: 1 → 2`,
/// `profiles.review: added`, `profiles.default: changed (timeout)`,
/// `route #2: removed (match = "a/**")`, then the `[[notify]]` hooks
/// (`notify.ops: added`). Empty when nothing changed.
pub fn changes(old: &Config, new: &Config) -> Vec<String> {
    let (Some(old_t), Some(new_t)) = (table(old), table(new)) else {
        return vec!["the configuration (its keys could not be compared)".into()];
    };
    let mut out = keyed_changes(&old_t, &new_t);
    hooks(&old.notify, &new.notify, &mut out);
    out
}

/// The changes of the keys `config show` shows.
fn keyed_changes(old: &Table, new: &Table) -> Vec<String> {
    let mut out = Vec::new();
    for key in keys(old, new) {
        match key.as_str() {
            "profiles" => profiles(old, new, &mut out),
            "route" => routes(old, new, &mut out),
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

/// Routes are told apart by their `match` pattern (no two routes share
/// one): inserting a route reports that route added, not every route after
/// it changed. Routes are tried in order, so a change of order among the
/// routes both configs have is reported too.
fn routes(old: &Table, new: &Table, out: &mut Vec<String>) {
    let of = |t: &Table| -> Vec<(String, Value)> {
        t.get("route")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| (r.get("match").map(shown).unwrap_or_default(), r.clone()))
            .collect()
    };
    let (old, new) = (of(old), of(new));
    let find = |routes: &[(String, Value)], key: &str| routes.iter().position(|(k, _)| k == key);
    for (i, (key, b)) in new.iter().enumerate() {
        let n = i + 1;
        match find(&old, key) {
            None => out.push(format!("route #{n}: added (match = {key})")),
            Some(j) if old[j].1 != *b => {
                let changed = changed_keys(&old[j].1, b);
                out.push(format!("route #{n}: changed (match = {key}; {changed})"));
            }
            Some(_) => {}
        }
    }
    for (i, (key, _)) in old.iter().enumerate() {
        if find(&new, key).is_none() {
            out.push(format!("route #{}: removed (match = {key})", i + 1));
        }
    }
    let order = |a: &[(String, Value)], b: &[(String, Value)]| -> Vec<String> {
        a.iter()
            .filter(|(k, _)| find(b, k).is_some())
            .map(|(k, _)| k.clone())
            .collect()
    };
    let (was, now) = (order(&old, &new), order(&new, &old));
    if was != now {
        out.push(format!(
            "route order: {} → {}",
            was.join(", "),
            now.join(", ")
        ));
    }
}

/// The keys whose values differ between two tables, comma-separated.
fn changed_keys(a: &Value, b: &Value) -> String {
    let empty = Table::new();
    let (a, b) = (
        a.as_table().unwrap_or(&empty),
        b.as_table().unwrap_or(&empty),
    );
    keys(a, b)
        .into_iter()
        .filter(|k| a.get(k) != b.get(k))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `[[notify]]` hooks, told apart by their `name` (unique): added,
/// removed, or changed with the settings that differ.
fn hooks(old: &[Hook], new: &[Hook], out: &mut Vec<String>) {
    for b in new {
        match old.iter().find(|a| a.name == b.name) {
            None => out.push(format!("notify.{}: added", b.name)),
            Some(a) if a != b => {
                let mut changed = Vec::new();
                if a.on != b.on {
                    changed.push("on");
                }
                if a.delivery != b.delivery {
                    changed.push(match b.delivery {
                        Delivery::Command(_) => "command",
                        Delivery::Webhook { .. } => "webhook",
                    });
                }
                if a.timeout != b.timeout {
                    changed.push("timeout");
                }
                if a.retries != b.retries {
                    changed.push("retries");
                }
                out.push(format!(
                    "notify.{}: changed ({})",
                    b.name,
                    changed.join(", ")
                ));
            }
            Some(_) => {}
        }
    }
    for a in old.iter().filter(|a| !new.iter().any(|b| b.name == a.name)) {
        out.push(format!("notify.{}: removed", a.name));
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

    #[test]
    fn a_route_inserted_first_is_one_route_added() {
        let profiles = "[profiles.default]\ncommand = [\"cat\"]\n";
        let route = |m: &str| format!("[[route]]\nmatch = \"{m}\"\nprofile = \"default\"\n");
        let a = config(&format!("{profiles}{}{}", route("a/**"), route("b/**")));
        let b = config(&format!(
            "{profiles}{}{}{}",
            route("new/**"),
            route("a/**"),
            route("b/**")
        ));
        assert_eq!(
            changes(&a, &b),
            vec!["route #1: added (match = \"new/**\")"]
        );
        let swapped = config(&format!("{profiles}{}{}", route("b/**"), route("a/**")));
        assert_eq!(
            changes(&a, &swapped),
            vec!["route order: \"a/**\", \"b/**\" → \"b/**\", \"a/**\""]
        );
        let edited = config(&format!(
            "{profiles}{}[[route]]\nmatch = \"b/**\"\nprofile = \"default\"\nmax_jobs = 2\n",
            route("a/**")
        ));
        assert_eq!(
            changes(&a, &edited),
            vec!["route #2: changed (match = \"b/**\"; max_jobs)"]
        );
    }

    #[test]
    fn notify_hooks_added_removed_and_changed_are_named() {
        let hook = |name: &str, on: &str| {
            format!("[[notify]]\nname = \"{name}\"\non = [\"{on}\"]\ncommand = [\"true\"]\n")
        };
        let a = config(&format!(
            "{}{}",
            hook("desk", "failed"),
            hook("old", "failed")
        ));
        let b = config(&format!(
            "{}{}",
            hook("desk", "all_done"),
            hook("ops", "failed")
        ));
        assert_eq!(
            changes(&a, &b),
            vec![
                "notify.desk: changed (on)",
                "notify.ops: added",
                "notify.old: removed"
            ]
        );
        assert_eq!(
            changes(&config(""), &config(&hook("ops", "failed"))),
            vec!["notify.ops: added"]
        );
    }
}
