//! Dropping a prompt the way tools should, for `jobwarden submit` and the
//! web page's form: checked first as the daemon's claim will check it
//! (`claim::vet`: front matter, route and profile; its size, name and
//! id), its job id written into its front matter so that it is known
//! before the claim, then a temporary dotfile, fsynced, renamed into
//! place without replacing anything.

use std::path::PathBuf;

use anyhow::{anyhow, bail};

use jobwarden_ledger::Ledger;
use jobwarden_model::config::{Config, format_size};
use jobwarden_model::front_matter::{self, Parsed};
use jobwarden_model::job::JobId;
use jobwarden_model::layout::{Layout, PromptName};
use jobwarden_sys::fsio::{self, Renamed};

/// A prompt ready to drop.
pub struct Submission {
    pub prompt: PromptName,
    pub id: JobId,
    /// Its text, with its `job_id` in its front matter.
    pub text: String,
}

/// Front-matter values given beside a prompt (`submit --priority 5`, the
/// web form's profile): each key's value, one line.
pub type Settings<'a> = [(&'a str, String)];

/// Check `text` (named `label` in messages) as prompt `prompt`, with the
/// job id `flag` if given and the front-matter values `set` written into
/// it: everything but the drop itself. A value `set` gives that the
/// prompt's own front matter sets too is refused, naming both.
pub fn prepare(
    config: &Config,
    layout: &Layout,
    prompt: PromptName,
    label: &str,
    text: &str,
    flag: Option<&str>,
    set: &Settings<'_>,
) -> anyhow::Result<Submission> {
    let text = with_settings(label, text, set)?;
    let (id, text) = job_id_and_text(label, &text, flag)?;
    crate::claim::vet(config, &prompt.project, &text).map_err(|reason| {
        anyhow!("{label} would be rejected by the daemon: {reason}; nothing was submitted")
    })?;
    if text.len() as u64 > config.max_prompt_bytes {
        bail!(
            "{label} with its job_id added is {} bytes, over max_prompt_bytes ({}); shorten it or raise max_prompt_bytes",
            text.len(),
            format_size(config.max_prompt_bytes)
        );
    }
    anyhow::ensure!(
        layout.root().is_dir(),
        "no jobwarden root at {}; check --root, JOBWARDEN_HOME or the config's root (the daemon creates it when it first starts)",
        layout.root().display()
    );
    refuse_used_id(layout, &id)?;
    Ok(Submission { prompt, id, text })
}

/// `text` with the values of `set` in its front matter; refused when the
/// prompt sets one of them itself, or a value is not one line.
fn with_settings(label: &str, text: &str, set: &Settings<'_>) -> anyhow::Result<String> {
    if set.is_empty() {
        return Ok(text.to_owned());
    }
    let parsed: Parsed = front_matter::parse(text)
        .map_err(|e| anyhow!("{label} has invalid {e}; fix its front matter and submit again"))?;
    for (key, value) in set {
        let flag = format!("--{}", key.replace('_', "-"));
        if parsed.front.sets(key) {
            bail!(
                "{flag} conflicts with the `{key}` that {label} sets in its front matter; drop one of them"
            );
        }
        if value.trim().is_empty() || value.chars().any(char::is_control) {
            bail!("{flag} {value:?} must be one line of text");
        }
    }
    Ok(front_matter::with_keys(text, &parsed, set))
}

/// The job id, and the text to drop: the front matter's `job_id` if it
/// has one (`--job-id` may only repeat it); else `--job-id` or a new
/// UUIDv7, written into the front matter so that the daemon uses it.
fn job_id_and_text(label: &str, text: &str, flag: Option<&str>) -> anyhow::Result<(JobId, String)> {
    let parsed: Parsed = front_matter::parse(text).map_err(|e| {
        anyhow!(
            "{} has invalid {e}; fix its front matter and submit again",
            label
        )
    })?;
    let flag = flag
        .map(|s| JobId::parse(s).map_err(|e| anyhow!("--job-id: {e}")))
        .transpose()?;
    match (&parsed.front.job_id, flag) {
        (Some(own), Some(flag)) if *own != flag => bail!(
            "{} sets job_id {:?} in its front matter, but --job-id says {:?}; drop one of them",
            label,
            own.as_str(),
            flag.as_str()
        ),
        (Some(own), _) => Ok((own.clone(), text.to_owned())),
        (None, flag) => {
            let id = flag.unwrap_or_else(JobId::generate);
            let with_id = front_matter::with_job_id(text, &parsed, &id);
            Ok((id, with_id))
        }
    }
}

/// Refuse an id that a job already has (its run folder, or a ledger row).
fn refuse_used_id(layout: &Layout, id: &JobId) -> anyhow::Result<()> {
    let dir = layout.run_dir(id);
    if std::fs::symlink_metadata(&dir).is_ok() {
        bail!(
            "job id {:?} is already used ({} exists); choose another job_id",
            id.as_str(),
            dir.display()
        );
    }
    if std::fs::symlink_metadata(layout.ledger()).is_ok()
        && Ledger::open(&layout.ledger())?.has_execution(id.as_str())?
    {
        bail!(
            "job id {id:?} is already used (the ledger has an execution with it); choose another job_id"
        );
    }
    Ok(())
}

/// Write `bytes` to a temporary dotfile in the prompt's inbox folder,
/// fsynced, then rename it to `<name>.prompt.md` without replacing: a
/// prompt of the same name already waiting is an error, and left alone.
pub fn drop_prompt(layout: &Layout, prompt: &PromptName, bytes: &[u8]) -> anyhow::Result<PathBuf> {
    let dest = layout.waiting_prompt(prompt);
    let tmp = layout.incoming_prompt(prompt, std::process::id());
    if let Some(dir) = dest.parent() {
        fsio::create_dirs(layout.root(), dir)?;
    }
    // A temporary file with our pid can only be a crashed earlier run's.
    let _ = std::fs::remove_file(&tmp);
    fsio::create_new_synced(layout.root(), &tmp, bytes)?;
    let renamed = fsio::rename_noreplace(layout.root(), &tmp, &dest);
    if !matches!(renamed, Ok(Renamed::Done)) {
        let _ = std::fs::remove_file(&tmp);
    }
    match renamed? {
        Renamed::Done => Ok(dest),
        Renamed::TargetExists => bail!(
            "{} already waits in the inbox and was left untouched; submit under another --name, or wait until it is claimed",
            dest.display()
        ),
        Renamed::SourceGone => bail!(
            "the temporary file {} disappeared before it could be renamed into place; submit again",
            tmp.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_id_comes_from_the_front_matter_or_is_written_into_it() {
        let (id, text) = job_id_and_text(
            "prompt file p.md",
            "---\njob_id: mine\n---\nbody\n",
            Some("mine"),
        )
        .expect("same id twice is fine");
        assert_eq!(id.as_str(), "mine");
        assert_eq!(text, "---\njob_id: mine\n---\nbody\n");

        let err = job_id_and_text(
            "prompt file p.md",
            "---\njob_id: mine\n---\n",
            Some("other"),
        )
        .expect_err("conflicting ids");
        assert!(err.to_string().contains("--job-id"), "{err}");

        let (id, text) =
            job_id_and_text("prompt file p.md", "body\n", Some("given")).expect("valid");
        assert_eq!(id.as_str(), "given");
        assert_eq!(text, "---\njob_id: given\n---\nbody\n");

        let (id, text) = job_id_and_text("prompt file p.md", "body\n", None).expect("valid");
        let parsed = front_matter::parse(&text).expect("written block parses");
        assert_eq!(parsed.front.job_id, Some(id));
        assert_eq!(&text[parsed.body_start..], "body\n");
    }
}
