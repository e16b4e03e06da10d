//! Routes: `[[route]]` entries that send prompts to a profile by where they
//! were dropped, with named captures (`{owner}/{repo}/{branch}/**`) that
//! become placeholders.
//!
//! A pattern is matched against the prompt's *folder* under `inbox/` (its
//! project), segment by segment; the file name is never part of it:
//! - `{name}` matches one folder and captures it;
//! - `*` matches one folder;
//! - `**` (last only) matches any number of folders, none included;
//! - anything else matches a folder of exactly that name.
//!
//! So `{repo}/**` routes `inbox/api/fix.prompt.md` and
//! `inbox/api/main/fix.prompt.md` (repo = `api`) but not
//! `inbox/fix.prompt.md`. The first route that matches wins.
//!
//! Coverage is decidable for these patterns, so the config can tell a route
//! that can never match (an earlier one matches everything it would) from
//! one that merely overlaps an earlier one.

use std::collections::BTreeMap;

use super::raw::{Loose, RawRoute};
use super::template::{Template, is_ident};
use super::validate::Validator;

/// One segment of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Lit(String),
    /// `{name}` (a capture) or `*`.
    Any(Option<String>),
}

/// A parsed `match` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutePattern {
    source: String,
    segs: Vec<Seg>,
    /// Ends with `**`.
    rest: bool,
}

impl RoutePattern {
    pub fn parse(source: &str) -> Result<Self, String> {
        if source.is_empty() || source.starts_with('/') || source.ends_with('/') {
            return Err(format!(
                "match = {source:?}: write folders under inbox/ separated by '/', like \"{{repo}}/{{branch}}/**\""
            ));
        }
        let parts: Vec<&str> = source.split('/').collect();
        let mut segs = Vec::new();
        let mut rest = false;
        let mut names: Vec<String> = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            match *part {
                "**" if i + 1 == parts.len() => rest = true,
                "**" => return Err(format!("match = {source:?}: '**' may only come last")),
                "*" => segs.push(Seg::Any(None)),
                p if p.starts_with('{') && p.ends_with('}') => {
                    let name = &p[1..p.len() - 1];
                    if !is_ident(name) {
                        return Err(format!(
                            "match = {source:?}: capture {p} must be a name of lowercase letters, digits and '_'"
                        ));
                    }
                    if Template::JOB_VARS.contains(&name) {
                        return Err(format!(
                            "match = {source:?}: capture {{{name}}} would hide the job placeholder of that name; pick another"
                        ));
                    }
                    if names.iter().any(|n| n == name) {
                        return Err(format!(
                            "match = {source:?}: capture {{{name}}} appears twice"
                        ));
                    }
                    names.push(name.to_owned());
                    segs.push(Seg::Any(Some(name.to_owned())));
                }
                p if p.contains(['{', '}', '*']) => {
                    return Err(format!(
                        "match = {source:?}: segment {p:?} mixes text with '{{', '}}' or '*'; a segment is a literal folder name, {{capture}}, * or **"
                    ));
                }
                p => {
                    crate::layout::validate_segment(p)
                        .map_err(|e| format!("match = {source:?}: folder {p:?} {e}"))?;
                    segs.push(Seg::Lit(p.to_owned()));
                }
            }
        }
        Ok(RoutePattern {
            source: source.to_owned(),
            segs,
            rest,
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The names this pattern captures, in order.
    pub fn captures(&self) -> impl Iterator<Item = &str> {
        self.segs.iter().filter_map(|s| match s {
            Seg::Any(Some(n)) => Some(n.as_str()),
            _ => None,
        })
    }

    /// Match a project (`a/b/c`, `""` at the top of the inbox): the
    /// captures if it matches.
    pub fn matches(&self, project: &str) -> Option<BTreeMap<String, String>> {
        let folders: Vec<&str> = if project.is_empty() {
            Vec::new()
        } else {
            project.split('/').collect()
        };
        let fits = if self.rest {
            folders.len() >= self.segs.len()
        } else {
            folders.len() == self.segs.len()
        };
        if !fits {
            return None;
        }
        let mut captures = BTreeMap::new();
        for (seg, folder) in self.segs.iter().zip(&folders) {
            match seg {
                Seg::Lit(l) if l != folder => return None,
                Seg::Lit(_) | Seg::Any(None) => {}
                Seg::Any(Some(name)) => {
                    captures.insert(name.clone(), (*folder).to_owned());
                }
            }
        }
        Some(captures)
    }

    /// The segment at `i` as far as matching goes (past the fixed ones, a
    /// `**` pattern accepts anything).
    fn at(&self, i: usize) -> Option<&Seg> {
        self.segs.get(i)
    }

    /// Does every project this pattern's `other` matches also match this one?
    pub fn covers(&self, other: &RoutePattern) -> bool {
        let (la, lb) = (self.segs.len(), other.segs.len());
        let lengths_ok = match (self.rest, other.rest) {
            (false, false) => la == lb,
            (true, false) => la <= lb,
            (false, true) => false,
            (true, true) => la <= lb,
        };
        lengths_ok
            && (0..lb).all(|i| match (self.at(i), other.at(i)) {
                (None, _) | (Some(Seg::Any(_)), _) => true,
                (Some(Seg::Lit(a)), Some(Seg::Lit(b))) => a == b,
                (Some(Seg::Lit(_)), _) => false,
            })
    }

    /// Can some project match both?
    pub fn overlaps(&self, other: &RoutePattern) -> bool {
        let (la, lb) = (self.segs.len(), other.segs.len());
        let lengths_ok = match (self.rest, other.rest) {
            (false, false) => la == lb,
            (true, false) => lb >= la,
            (false, true) => la >= lb,
            (true, true) => true,
        };
        lengths_ok
            && (0..la.max(lb)).all(|i| match (self.at(i), other.at(i)) {
                (Some(Seg::Lit(a)), Some(Seg::Lit(b))) => a == b,
                _ => true,
            })
    }
}

/// One validated `[[route]]`.
#[derive(Debug, Clone)]
pub struct Route {
    pub pattern: RoutePattern,
    /// The profile it selects.
    pub profile: String,
    /// Overrides the profile's `workdir`; may use the captures.
    pub workdir: Option<Template>,
    /// Added to (and overriding) the profile's `env`; values may use the
    /// captures and the job placeholders.
    pub env: BTreeMap<String, Template>,
    /// At most this many of its jobs run at once (besides `max_jobs` and
    /// the profile's).
    pub max_jobs: Option<usize>,
    /// Overrides the profile's `shared_workdir`.
    pub shared_workdir: Option<bool>,
}

/// Validate the routes against the profiles: patterns, the profile each
/// selects, placeholders (job ones and the route's own captures), and
/// reachability (a route that an earlier one always beats is a problem).
/// A route with a problem is left out, and the others are still checked.
pub(super) fn build(
    v: &mut Validator,
    raw: &[RawRoute],
    profiles: &BTreeMap<String, super::Profile>,
) -> Vec<Route> {
    let mut routes: Vec<Route> = Vec::new();
    for (n, r) in raw.iter().enumerate() {
        let before = v.problems.len();
        let route = one(v, n, r, profiles);
        let Some(route) = route.filter(|_| v.problems.len() == before) else {
            continue;
        };
        if let Some((m, earlier)) = routes
            .iter()
            .enumerate()
            .find(|(_, e)| e.pattern.covers(&route.pattern))
        {
            v.fault(
                &format!("route[{n}]"),
                format!(
                    "route #{} (match = {:?}) can never match: route #{} (match = {:?}) comes first and matches every folder it does; put the narrower route first or remove it",
                    n + 1,
                    route.pattern.source(),
                    m + 1,
                    earlier.pattern.source()
                ),
            );
            continue;
        }
        routes.push(route);
    }
    // Profiles some route selects, whether or not that route had problems
    // (its own are reported already).
    let routed: Vec<&str> = raw
        .iter()
        .map(|r| match &r.profile {
            Some(Loose::Ok(p)) => p.as_str(),
            _ => super::DEFAULT_PROFILE,
        })
        .collect();
    unrouted_captures(v, &routed, profiles);
    routes
}

/// One `[[route]]` (the `n`th, from 0), its problems noted.
fn one(
    v: &mut Validator,
    n: usize,
    r: &RawRoute,
    profiles: &BTreeMap<String, super::Profile>,
) -> Option<Route> {
    let at = |k: &str| format!("route[{n}].{k}");
    let Some(source) = v.take(&at("match"), r.pattern.clone(), "a string") else {
        if r.pattern.is_none() {
            v.fault(
                &format!("route[{n}]"),
                format!("route #{}: `match` is missing; write the folders it routes, like \"{{repo}}/**\"", n + 1),
            );
        }
        return None;
    };
    let key = format!("route #{} (match = {source:?})", n + 1);
    let pattern = RoutePattern::parse(&source)
        .map_err(|e| v.fault(&at("match"), format!("route #{}: {e}", n + 1)))
        .ok()?;
    let profile = v
        .take(&at("profile"), r.profile.clone(), "a profile's name")
        .unwrap_or_else(|| super::DEFAULT_PROFILE.into());
    if !profiles.contains_key(&profile) {
        v.fault(
            &at("profile"),
            format!(
                "{key}: profile {profile:?} is not defined; define [profiles.{profile}] or use one of: {}",
                profiles.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        );
    }
    let captures: Vec<&str> = pattern.captures().collect();
    let check = |v: &mut Validator, what: &str, t: &Template, job: &[&str]| {
        if let Some(name) = t
            .names()
            .find(|name| !job.contains(name) && !captures.contains(name))
        {
            v.fault(
                &at(what),
                format!(
                    "{key}: {what} {:?} uses {{{name}}}, which is neither a job placeholder ({}) nor a capture of this route",
                    t.source(),
                    job.join(", ")
                ),
            );
        }
    };
    let workdir = v
        .take(&at("workdir"), r.workdir.clone(), "a string")
        .and_then(|w| v.template(&at("workdir"), &w));
    if let Some(w) = &workdir {
        check(v, "workdir", w, Template::WORKDIR_VARS);
    }
    let mut env = BTreeMap::new();
    let values = v.take(
        &at("env"),
        r.env.clone(),
        "a table of strings, like { NAME = \"value\" }",
    );
    for (k, value) in values.unwrap_or_default() {
        v.env_name(&at("env"), &k);
        if let Some(t) = v.template(&at(&format!("env.{k}")), &value) {
            check(v, &format!("env.{k}"), &t, Template::JOB_VARS);
            env.insert(k, t);
        }
    }
    let max_jobs = v
        .num(&at("max_jobs"), r.max_jobs.clone(), 1, 4096)
        .map(|n| n as usize);
    let shared_workdir = v.take(
        &at("shared_workdir"),
        r.shared_workdir.clone(),
        "true or false",
    );
    let route = Route {
        pattern,
        profile,
        workdir,
        env,
        max_jobs,
        shared_workdir,
    };
    if let Some(p) = profiles.get(&route.profile) {
        if let Some(why) = missing_captures(p, &route) {
            v.fault(&at("profile"), format!("{key}: {why}"));
        }
    }
    Some(route)
}

/// A name that is not a job placeholder must be a capture of every route
/// that selects the profile (checked in [`one`]), and some route must: the
/// default profile also runs prompts no route matches, so it can use none.
fn unrouted_captures(
    v: &mut Validator,
    routed: &[&str],
    profiles: &BTreeMap<String, super::Profile>,
) {
    for (name, profile) in profiles {
        let routed = name != super::DEFAULT_PROFILE && routed.contains(&name.as_str());
        if let Some(var) = needed_captures(profile).find(|_| !routed) {
            v.fault(
                &format!("profiles.{name}"),
                format!(
                    "profiles.{name}: unknown placeholder {{{var}}}; the job placeholders are {{{}}}, and a route capture can only be used by a profile that routes capturing it select{}",
                    Template::JOB_VARS.join("}, {"),
                    if name == super::DEFAULT_PROFILE {
                        " (not by default, which also runs prompts no route matches)"
                    } else {
                        ""
                    }
                ),
            );
        }
    }
}

/// Placeholders a profile uses that only routes can provide.
pub fn needed_captures(p: &super::Profile) -> impl Iterator<Item = &str> {
    let phases = [&p.prepare, &p.publish]
        .into_iter()
        .flatten()
        .flat_map(|ph| ph.command.iter());
    let git = p.git.iter().flat_map(|g| g.templates());
    p.command
        .iter()
        .chain(phases)
        .chain(git)
        .flat_map(|t| t.names())
        .filter(|v| !Template::JOB_VARS.contains(v))
        .chain(
            p.workdir
                .names()
                .filter(|v| !Template::WORKDIR_VARS.contains(v)),
        )
}

/// Why `route` cannot run `profile`: a placeholder of the profile that the
/// route does not capture.
pub fn missing_captures(profile: &super::Profile, route: &Route) -> Option<String> {
    let captures: Vec<&str> = route.pattern.captures().collect();
    needed_captures(profile)
        .find(|v| !captures.contains(v))
        .map(|v| {
            format!(
                "profile {:?} uses placeholder {{{v}}}, which this route does not capture",
                profile.name
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RoutePattern {
        RoutePattern::parse(s).expect(s)
    }

    #[test]
    fn matches_folders_and_captures_them() {
        let r = p("{owner}/{repo}/{branch}/**");
        let got = r.matches("acme/api/main").expect("match");
        assert_eq!(got["owner"], "acme");
        assert_eq!(got["repo"], "api");
        assert_eq!(got["branch"], "main");
        assert!(r.matches("acme/api/main/deeper/still").is_some());
        assert!(r.matches("acme/api").is_none());
        let top = p("{repo}/**");
        assert!(top.matches("").is_none(), "a top-level prompt has no repo");
        assert!(p("**").matches("").is_some());
        let exact = p("docs/{section}");
        assert!(exact.matches("docs/api").is_some());
        assert!(exact.matches("docs/api/x").is_none());
        assert!(exact.matches("blog/api").is_none());
        assert!(p("*/x").matches("anything/x").is_some());
    }

    #[test]
    fn bad_patterns_are_named() {
        for bad in [
            "", "/a", "a/", "**/a", "{Repo}", "{a}/{a}", "a{b}", "{job_id}", "../x", "*.md",
        ] {
            assert!(RoutePattern::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn coverage_and_overlap() {
        assert!(p("{repo}/**").covers(&p("{repo}/{branch}/**")));
        assert!(p("{repo}/**").covers(&p("api/main")));
        assert!(p("**").covers(&p("a")));
        assert!(!p("{repo}/{branch}/**").covers(&p("{repo}/**")));
        assert!(!p("api/**").covers(&p("{repo}/**")));
        assert!(!p("{repo}").covers(&p("{repo}/**")));
        assert!(p("api/**").overlaps(&p("{repo}/main")));
        assert!(!p("api/**").overlaps(&p("web/**")));
        assert!(!p("{a}").overlaps(&p("{a}/{b}")));
        assert!(p("{a}/**").overlaps(&p("x/y/z")));
    }
}
