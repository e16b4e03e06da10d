//! Placeholder templates (`"{run_dir}/out"`) in argv and paths. Parsed and
//! checked against the known names when the config is validated, so an
//! unknown placeholder is a config error at start, never at run time.
//! `{{` and `}}` stand for literal braces.

use std::collections::BTreeMap;

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    source: String,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Var(String),
}

/// Values for placeholders, by name.
pub type Vars = BTreeMap<String, String>;

/// [`Vars`] from literal pairs.
pub fn vars<const N: usize>(pairs: [(&str, String); N]) -> Vars {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

impl Template {
    /// Placeholders available to a job's command.
    pub const JOB_VARS: &'static [&'static str] = &[
        "job_id",
        "run_dir",
        "prompt_file",
        "project",
        "name",
        "attempt",
        "root",
        "job_workdir",
        "workdir",
    ];
    /// Placeholders available to `workdir` (everything but itself).
    pub const WORKDIR_VARS: &'static [&'static str] = &[
        "job_id",
        "run_dir",
        "prompt_file",
        "project",
        "name",
        "attempt",
        "root",
        "job_workdir",
    ];

    pub fn parse(source: &str, known: &[&str]) -> Result<Self, String> {
        Self::parse_checked(source, &|name| known.contains(&name), known)
    }

    /// Parse, accepting any well-formed placeholder name: for templates
    /// that may use route captures, checked against the routes once they
    /// are known ([`Template::names`]).
    pub fn parse_open(source: &str) -> Result<Self, String> {
        Self::parse_checked(source, &is_ident, &[])
    }

    fn parse_checked(
        source: &str,
        accept: &dyn Fn(&str) -> bool,
        known: &[&str],
    ) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut chars = source.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, chars.peek()) {
                ('{', Some('{')) | ('}', Some('}')) => {
                    chars.next();
                    text.push(c);
                }
                ('{', _) => {
                    let mut name = String::new();
                    let mut closed = false;
                    for c in chars.by_ref() {
                        if c == '}' {
                            closed = true;
                            break;
                        }
                        name.push(c);
                    }
                    if !closed {
                        return Err(format!(
                            "{source:?}: '{{' is never closed (write '{{{{' for a literal brace)"
                        ));
                    }
                    if !accept(&name) && known.is_empty() {
                        return Err(format!(
                            "{source:?}: {{{name}}} is not a placeholder name (lowercase letters, digits and '_')"
                        ));
                    }
                    if !accept(&name) {
                        return Err(format!(
                            "{source:?}: unknown placeholder {{{name}}}; known: {}",
                            known
                                .iter()
                                .map(|k| format!("{{{k}}}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                    }
                    parts.push(Part::Text(std::mem::take(&mut text)));
                    parts.push(Part::Var(name));
                }
                ('}', _) => {
                    return Err(format!(
                        "{source:?}: unmatched '}}' (write '}}}}' for a literal brace)"
                    ));
                }
                _ => text.push(c),
            }
        }
        parts.push(Part::Text(text));
        parts.retain(|p| !matches!(p, Part::Text(t) if t.is_empty()));
        Ok(Template {
            source: source.to_owned(),
            parts,
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The placeholder names it uses.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Var(v) => Some(v.as_str()),
            Part::Text(_) => None,
        })
    }

    /// Does the template use placeholder `name`?
    pub fn uses(&self, name: &str) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, Part::Var(v) if v == name))
    }

    /// Substitute values. Every name was checked at parse time; a name
    /// missing from `vars` renders empty.
    pub fn render(&self, vars: &Vars) -> String {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Text(t) => t.as_str(),
                Part::Var(v) => vars.get(v.as_str()).map(String::as_str).unwrap_or(""),
            })
            .collect()
    }

    /// The text up to the first placeholder `vars` has no value for (all
    /// of it when there is none), and that placeholder's name.
    pub fn prefix(&self, vars: &Vars) -> (String, Option<&str>) {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Var(v) => match vars.get(v) {
                    Some(value) => out.push_str(value),
                    None => return (out, Some(v)),
                },
            }
        }
        (out, None)
    }
}

/// A placeholder or capture name: lowercase ASCII letters, digits and `_`,
/// not starting with a digit. Routes name their captures by the same rule,
/// so a capture can always be used as a placeholder.
pub fn is_ident(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_known_placeholders_and_escapes() {
        let t = Template::parse("{run_dir}/x-{job_id}{{lit}}", Template::JOB_VARS).expect("parse");
        let vars = vars([("run_dir", "/r".to_owned()), ("job_id", "J".to_owned())]);
        assert_eq!(t.render(&vars), "/r/x-J{lit}");
        assert!(t.uses("job_id") && !t.uses("name"));
    }

    #[test]
    fn prefix_stops_at_the_first_unknown_placeholder() {
        let t = Template::parse_open("{root}/repos/{repo}/x").expect("parse");
        let root = vars([("root", "/r".to_owned())]);
        assert_eq!(t.prefix(&root), ("/r/repos/".to_owned(), Some("repo")));
        let plain = Template::parse_open("/srv/{{x}}").expect("parse");
        assert_eq!(plain.prefix(&root), ("/srv/{x}".to_owned(), None));
    }

    #[test]
    fn unknown_placeholder_is_named() {
        let err = Template::parse("--out={bogus}", Template::JOB_VARS).expect_err("unknown");
        assert!(err.contains("{bogus}"), "{err}");
        let err = Template::parse("{workdir}", Template::WORKDIR_VARS).expect_err("self");
        assert!(err.contains("{workdir}"), "{err}");
        assert!(Template::parse("a}b", Template::JOB_VARS).is_err());
        assert!(Template::parse("{unclosed", Template::JOB_VARS).is_err());
    }
}
