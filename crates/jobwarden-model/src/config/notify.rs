//! `[[notify]]`: hooks told when jobs end, need attention, start a
//! cooldown, or when everything is done. Each names the events it wants
//! (`on`) and one way to deliver them: a command (the event as JSON on its
//! stdin) or a webhook (an HTTP POST of the same JSON).

use std::path::PathBuf;
use std::time::Duration;

use super::raw::RawNotify;
use super::template::Template;
use super::validate::Validator;
use crate::state::JobState;

/// The events a hook may ask for besides a job ending in a state (any
/// terminal state, by its name).
pub const EVENTS: [&str; 4] = ["needs_attention", "retrying", "cooldown", "all_done"];

/// Placeholders a hook's command may use. Those of a job are empty for
/// `all_done`.
pub const NOTIFY_VARS: &[&str] = &[
    "event", "job_id", "project", "name", "attempt", "state", "reason", "root", "run_dir",
];

/// A validated `[[notify]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Hook {
    pub name: String,
    /// Terminal state names and [`EVENTS`] it wants.
    pub on: Vec<String>,
    pub delivery: Delivery,
    /// How long one delivery may take (a command is killed, a request
    /// abandoned).
    pub timeout: Duration,
    /// Deliveries after the first that failed, at most.
    pub retries: u32,
}

/// How a hook delivers.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    Command(Vec<Template>),
    Webhook {
        url: String,
        /// A file holding the bearer token, read at each delivery.
        token_file: Option<PathBuf>,
    },
}

impl Hook {
    /// Does it want `event` (a state name or one of [`EVENTS`])?
    pub fn wants(&self, event: &str) -> bool {
        self.on.iter().any(|o| o == event)
    }
}

/// Every `[[notify]]` entry; faults reported under `notify[i]`.
pub(super) fn build(v: &mut Validator, raw: &[RawNotify]) -> Vec<Hook> {
    let mut hooks: Vec<Hook> = Vec::new();
    for (i, r) in raw.iter().enumerate() {
        let key = format!("notify[{i}]");
        let Some(hook) = hook(v, &key, r) else {
            continue;
        };
        if hooks.iter().any(|h| h.name == hook.name) {
            v.fault(
                &format!("{key}.name"),
                format!(
                    "{key}.name: {:?} is used by an earlier [[notify]]; give each its own name",
                    hook.name
                ),
            );
            continue;
        }
        hooks.push(hook);
    }
    hooks
}

fn hook(v: &mut Validator, key: &str, r: &RawNotify) -> Option<Hook> {
    let name_key = format!("{key}.name");
    if r.name.is_none() {
        v.fault(&name_key, format!("{name_key}: missing; name the hook (`jobwarden notify test NAME` uses it), e.g. name = \"desktop\""));
    }
    let name = v.take(&name_key, r.name.clone(), "a string")?;
    if let Err(e) = crate::layout::validate_segment(&name) {
        v.fault(&name_key, format!("{name_key} {name:?} {e}"));
    }
    let on = on(v, &format!("{key}.on"), r);
    let delivery = delivery(v, key, r);
    let timeout = v.duration(
        &format!("{key}.timeout"),
        r.timeout.clone(),
        Duration::from_secs(10),
        true,
    );
    let retries = v.count(&format!("{key}.retries"), r.retries.clone(), 3, 0, 20) as u32;
    Some(Hook {
        name,
        on: on?,
        delivery: delivery?,
        timeout,
        retries,
    })
}

/// `on`: a non-empty list of terminal state names and [`EVENTS`].
fn on(v: &mut Validator, key: &str, r: &RawNotify) -> Option<Vec<String>> {
    let valid: Vec<&str> = JobState::ALL
        .into_iter()
        .filter(|s| s.is_terminal())
        .map(JobState::as_str)
        .chain(EVENTS)
        .collect();
    if r.on.is_none() {
        v.fault(key, format!("{key}: missing; list what to tell, e.g. on = [\"failed\", \"all_done\"] (valid: {})", valid.join(", ")));
    }
    let on = v.take(
        key,
        r.on.clone(),
        "a list of event names, like [\"failed\", \"all_done\"]",
    )?;
    if on.is_empty() {
        v.fault(
            key,
            format!(
                "{key}: empty; list what to tell (valid: {})",
                valid.join(", ")
            ),
        );
        return None;
    }
    let mut ok = true;
    for e in &on {
        if !valid.contains(&e.as_str()) {
            v.fault(
                key,
                format!("{key}: unknown event {e:?}; valid: {}", valid.join(", ")),
            );
            ok = false;
        }
    }
    ok.then_some(on)
}

/// Exactly one of `command` and `webhook`.
fn delivery(v: &mut Validator, key: &str, r: &RawNotify) -> Option<Delivery> {
    match (&r.command, &r.webhook) {
        (Some(_), Some(_)) | (None, None) => {
            v.fault(key, format!("{key}: give exactly one of command = [...] (a program told on its stdin) and webhook = \"http://...\" (an HTTP POST)"));
            None
        }
        (Some(_), None) => {
            let k = format!("{key}.command");
            let argv = v.take(
                &k,
                r.command.clone(),
                "a list of strings, like [\"notify-send\", \"{name}: {state}\"]",
            )?;
            if argv.first().is_none_or(String::is_empty) {
                v.fault(
                    &k,
                    format!(
                        "{k}: must name a program, e.g. [\"notify-send\", \"{{name}}: {{state}}\"]"
                    ),
                );
                return None;
            }
            let mut parsed = Vec::new();
            for a in &argv {
                match Template::parse(a, NOTIFY_VARS) {
                    Ok(t) => parsed.push(t),
                    Err(e) => {
                        v.fault(&k, format!("{k}: {e}"));
                        return None;
                    }
                }
            }
            Some(Delivery::Command(parsed))
        }
        (None, Some(_)) => {
            let k = format!("{key}.webhook");
            let url = v.take(
                &k,
                r.webhook.clone(),
                "a URL in quotes, like \"http://127.0.0.1:9000/hook\"",
            )?;
            if let Err(e) = check_url(&url) {
                v.fault(&k, format!("{k} = {url:?}: {e}"));
                return None;
            }
            let token_key = format!("{key}.bearer_token_file");
            let token_file = v.take(&token_key, r.bearer_token_file.clone(), "a path in quotes");
            if let Some(p) = &token_file
                && !p.is_absolute()
            {
                v.fault(
                    &token_key,
                    format!(
                        "{token_key} = {:?}: not an absolute path; name the file from /",
                        p.display()
                    ),
                );
            }
            Some(Delivery::Webhook { url, token_file })
        }
    }
}

/// An `http://` or `https://` URL with a host.
pub fn check_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or("not an http:// or https:// URL")?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() {
        return Err("no host; write e.g. \"http://127.0.0.1:9000/hook\"".into());
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("contains whitespace or control characters".into());
    }
    Ok(())
}
