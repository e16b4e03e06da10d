//! `jobwarden submit <file|->`: drop a prompt into the inbox the way tools
//! should (a temporary dotfile, fsync, rename that never replaces), with
//! its job id written into its front matter so that the id is known before
//! the daemon claims it; print the id. With `--wait`, follow the job, and
//! the retries the policy gives its prompt, to the last one's end.
//!
//! Before anything is written, the prompt is checked as the daemon's claim
//! will check it (`claim::vet`: front matter, route and profile; and its
//! size, encoding, name and id), so that the id printed is one the daemon
//! uses. Only a daemon running with another config can still reject it;
//! `--wait` then reports the rejection as such.
//!
//! While it waits it says how the job stands on stderr (`progress.rs`),
//! and sleeps on inotify (`watch.rs`).
//!
//! Exit status: 0 submitted (with `--wait`: succeeded); 2 refused, nothing
//! dropped (unreadable, too large, not UTF-8, invalid front matter, a
//! profile or route that does not resolve, unsafe name or project, job id
//! in use, a prompt of that name already waiting).
//! With `--wait`, the code of the last job's end (`exit.rs`).

use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, anyhow, bail};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::cli::{GlobalArgs, SubmitArgs};
use jobwarden_ledger::Ledger;
use jobwarden_ledger::history::Filter;
use jobwarden_model::config::{Config, format_size};
use jobwarden_model::job::{JobId, JobRecord, JobState};
use jobwarden_model::layout::{self, Layout, PROMPT_SUFFIX, PromptName};
use jobwarden_sys::clock::Timestamp;

use super::exit::Exit;
use super::output::print_json;
use super::progress::Progress;
use super::watch::{POLL, RECHECK, Watch};

pub fn run(global: &GlobalArgs, args: &SubmitArgs) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load(global)?;
    let (prompt, id, text) = prepare(&config, &layout, args)?;
    let since_ms = Timestamp::now().epoch_ms();
    let path = jobwarden_engine::submit::drop_prompt(&layout, &prompt, text.as_bytes())?;
    let submitted = Submitted {
        job_id: id.clone(),
        prompt_path: path.display().to_string(),
        project: prompt.project.clone(),
        name: prompt.name.clone(),
        end: None,
    };
    if !args.json {
        print_id(&id)?;
    }
    warn_if_no_daemon(&layout);
    if !args.wait {
        if args.json {
            print_json(&submitted)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut follower = Follower {
        layout: &layout,
        prompt: &prompt,
        own: id,
        sha256: jobwarden_model::job::hex(&Sha256::digest(text.as_bytes())),
        since_ms,
        ledger: None,
        watch: Watch::new(RECHECK, POLL),
        progress: Progress::without_clock(),
        seen: None,
    };
    let end = follower.follow()?;
    drop(follower);
    report_end(&end, args.json, submitted)
}

/// Everything checked before anything is written: the prompt's key, its
/// text (with its job id in its front matter) and the id, unused.
fn prepare(
    config: &Config,
    layout: &Layout,
    args: &SubmitArgs,
) -> anyhow::Result<(PromptName, JobId, String)> {
    let prompt = prompt_name(args)?;
    let input = Input::read(&args.file, config.max_prompt_bytes)?;
    let s = jobwarden_engine::submit::prepare(
        config,
        layout,
        prompt,
        &input.label,
        &input.text,
        args.job_id.as_deref(),
        &settings(args)?,
    )?;
    Ok((s.prompt, s.id, s.text))
}

/// The front-matter values the flags give; `--at` made the instant it
/// means now (so that a later claim does not move it).
fn settings(args: &SubmitArgs) -> anyhow::Result<Vec<(&'static str, String)>> {
    let mut set = Vec::new();
    set.extend(args.profile.clone().map(|v| ("profile", v)));
    set.extend(args.priority.map(|v| ("priority", v.to_string())));
    set.extend(args.timeout.clone().map(|v| ("timeout", v)));
    set.extend(args.max_attempts.map(|v| ("max_attempts", v.to_string())));
    if !args.after.is_empty() {
        set.push(("after", format!("[{}]", args.after.join(", "))));
    }
    if let Some(at) = &args.at {
        let ms = jobwarden_sys::clock::parse_start(at, Timestamp::now().epoch_ms())
            .map_err(|why| anyhow!("--at {why}"))?;
        set.push(("not_before", Timestamp::from_epoch_ms(ms).to_string()));
    }
    Ok(set)
}

/// The prompt's key: `--project` and `--name` (or the file's name), both
/// checked to be safe in a path.
fn prompt_name(args: &SubmitArgs) -> anyhow::Result<PromptName> {
    let project = args.project.as_str();
    if project.starts_with('/') {
        bail!(
            "--project {project:?} is absolute; give a folder relative to the inbox, such as \"acme/api\""
        );
    }
    layout::validate_project(project).map_err(|e| {
        anyhow!(
            "--project {project:?}: {e}; give a folder relative to the inbox, such as \"acme/api\""
        )
    })?;
    let name = match &args.name {
        Some(name) => name.clone(),
        None if is_stdin(&args.file) => {
            bail!("a prompt read from stdin (-) has no file name; give it one with --name NAME")
        }
        None => default_name(&args.file)?,
    };
    layout::validate_segment(&name)
        .map_err(|e| anyhow!("prompt name {name:?} {e}; choose another with --name NAME"))?;
    Ok(PromptName {
        project: project.to_owned(),
        name,
    })
}

fn is_stdin(file: &Path) -> bool {
    file.as_os_str() == "-"
}

/// The file's name without `.prompt.md` (or `.md`).
fn default_name(file: &Path) -> anyhow::Result<String> {
    let name = file.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        anyhow!(
            "cannot take a prompt name from {}; give one with --name NAME",
            file.display()
        )
    })?;
    let stem = name
        .strip_suffix(PROMPT_SUFFIX)
        .or_else(|| name.strip_suffix(".md"))
        .unwrap_or(name);
    Ok(stem.to_owned())
}

/// The prompt as read, with how to name it in messages.
struct Input {
    label: String,
    text: String,
}

impl Input {
    /// Read `file` (or stdin for `-`): at most `max` bytes, UTF-8.
    fn read(file: &Path, max: u64) -> anyhow::Result<Input> {
        let (label, bytes) = if is_stdin(file) {
            let bytes = read_capped(std::io::stdin().lock(), max)
                .context("reading the prompt from stdin")?;
            ("the prompt on stdin".to_owned(), bytes)
        } else {
            let label = format!("prompt file {}", file.display());
            let bytes = std::fs::File::open(file)
                .and_then(|f| read_capped(f, max))
                .with_context(|| format!("reading {label}"))?;
            (label, bytes)
        };
        if bytes.len() as u64 > max {
            bail!(
                "{label} is over max_prompt_bytes ({}); shorten it or raise max_prompt_bytes",
                format_size(max)
            );
        }
        let text = String::from_utf8(bytes).map_err(|_| {
            anyhow!("{label} is not valid UTF-8 text; prompts are text, convert it to UTF-8")
        })?;
        Ok(Input { label, text })
    }
}

/// Up to `max + 1` bytes: one more than allowed says "too large".
fn read_capped(reader: impl Read, max: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    reader.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The id alone on stdout, flushed at once (a `--wait` may last long).
fn print_id(id: &JobId) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{id}")
        .and_then(|()| out.flush())
        .context("writing to stdout")
}

/// Say on stderr when no daemon runs on the root: the prompt waits.
fn warn_if_no_daemon(layout: &Layout) {
    if let Ok(None) = jobwarden_sys::procfs::flock_holder(&layout.daemon_lock()) {
        jobwarden_sys::logging::line(format_args!(
            "jobwarden: no daemon is running on {}; the prompt waits in the inbox until one starts (jobwarden daemon)",
            layout.root().display()
        ));
    }
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct Submitted {
    job_id: JobId,
    prompt_path: String,
    project: String,
    name: String,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    end: Option<End>,
}

/// How the last job ended (`--wait --json`).
#[derive(Debug, Serialize)]
struct End {
    state: JobState,
    exit_code: Option<i32>,
    state_reason: Option<String>,
    /// The job that ended: the submitted one, or its last retry.
    final_job_id: JobId,
    attempt: u32,
}

/// Print the end and turn it into the exit status. The end itself was
/// said as the job's last change ([`Progress::job_changed`]); only what
/// that line cannot tell is added here: a rejection comes from the daemon
/// although this command's own checks passed.
fn report_end(rec: &JobRecord, json: bool, mut submitted: Submitted) -> anyhow::Result<ExitCode> {
    if rec.state == JobState::Rejected {
        let unused = match rec.job_id != submitted.job_id {
            true => format!("; the id {} printed above was not used", submitted.job_id),
            false => String::new(),
        };
        jobwarden_sys::logging::line(format_args!(
            "jobwarden: job {} was rejected by the daemon although it passed this command's checks \
             (a daemon started with another config? `jobwarden reload` makes it read the file){unused}",
            rec.job_id
        ));
    }
    if json {
        submitted.end = Some(End {
            state: rec.state,
            exit_code: rec.exit_code,
            state_reason: rec.state_reason.clone(),
            final_job_id: rec.job_id.clone(),
            attempt: rec.attempt,
        });
        print_json(&submitted)?;
    }
    Ok(ExitCode::from(exit_status(rec)))
}

/// The exit status `--wait` ends with for a terminal record.
fn exit_status(rec: &JobRecord) -> u8 {
    // Only terminal records are reported.
    Exit::of_state(rec.state).unwrap_or(Exit::Error).code()
}

/// Follows a submitted prompt's jobs until one ends without its prompt
/// going back to the inbox.
struct Follower<'a> {
    layout: &'a Layout,
    prompt: &'a PromptName,
    /// The id in the prompt's front matter: attempt N runs as its `-rN`.
    own: JobId,
    /// Digest of the dropped bytes: tells our job from another with the id.
    sha256: String,
    /// When the prompt was dropped (epoch ms): older ledger rows are not ours.
    since_ms: u64,
    /// Opened once `ledger.db` exists.
    ledger: Option<Ledger>,
    /// `runs/` (where the job appears) and the followed job's run folder.
    watch: Watch,
    progress: Progress,
    /// The followed job and the state it was last seen in.
    seen: Option<(JobId, JobState)>,
}

impl Follower<'_> {
    fn follow(&mut self) -> anyhow::Result<JobRecord> {
        // A job under another id than ours (a rejection) appears in `runs/`.
        self.watch.add(&self.layout.runs(), false);
        let mut id = self.await_job(Some(self.own.clone()), |f| f.first_job())?;
        loop {
            let rec = self.until(|f| f.ended(&id))?;
            if rec.disposition.as_deref() != Some("requeued") {
                let end = self.until(|f| f.settled(&rec.job_id));
                self.progress.clear();
                return end;
            }
            self.watch.remove(&self.layout.run_dir(&id));
            self.progress.say(format_args!(
                "jobwarden: job {} {}; its prompt was requeued, waiting for attempt {}",
                rec.job_id,
                rec.state,
                rec.attempt + 1
            ));
            let expected = self.own.for_attempt(rec.attempt + 1);
            id = self.await_job(expected, |f| f.next_job(&rec))?;
            self.progress.say(format_args!(
                "jobwarden: now following job {id} (attempt {})",
                rec.attempt + 1
            ));
        }
    }

    /// The job `find` finds, watching the run folder it is `expected` to
    /// have from the moment the claim makes it; the found job's folder is
    /// left watched.
    fn await_job(
        &mut self,
        expected: Option<JobId>,
        find: impl FnMut(&mut Self) -> anyhow::Result<Option<JobId>>,
    ) -> anyhow::Result<JobId> {
        if let Some(expected) = &expected {
            self.watch.add(&self.layout.run_dir(expected), false);
        }
        let id = self.until(find)?;
        if expected.as_ref() != Some(&id) {
            if let Some(expected) = &expected {
                self.watch.remove(&self.layout.run_dir(expected));
            }
            self.watch.add(&self.layout.run_dir(&id), false);
        }
        Ok(id)
    }

    /// Call `ready` after every change until it has an answer, keeping the
    /// live line up to date meanwhile.
    fn until<T>(
        &mut self,
        mut ready: impl FnMut(&mut Self) -> anyhow::Result<Option<T>>,
    ) -> anyhow::Result<T> {
        loop {
            if let Some(value) = ready(self)? {
                return Ok(value);
            }
            match &self.seen {
                // Its end is said already; the prompt's move is a moment.
                Some((_, state)) if state.is_terminal() => {}
                Some((id, state)) => self.progress.status(&format!("job {id}: {state}")),
                None => self
                    .progress
                    .status(&format!("{}: waiting to be claimed", self.prompt)),
            }
            self.watch.wait(None);
        }
    }

    /// The job the daemon made of our drop: our id with our bytes, or (a
    /// rejection under a generated id) a ledger row for our bytes.
    fn first_job(&mut self) -> anyhow::Result<Option<JobId>> {
        if let Some(rec) = self.record(&self.own)? {
            if rec.prompt_sha256.as_deref() == Some(self.sha256.as_str()) {
                return Ok(Some(rec.job_id));
            }
        }
        let sha256 = self.sha256.clone();
        self.find_row(|row| row.prompt_sha256.as_deref() == Some(sha256.as_str()))
    }

    /// The attempt after `prev`: `<own>-r<N>` retrying it, or a ledger row
    /// retrying it (a retry whose derived id was unusable).
    fn next_job(&mut self, prev: &JobRecord) -> anyhow::Result<Option<JobId>> {
        if let Some(id) = self.own.for_attempt(prev.attempt + 1) {
            if let Some(rec) = self.record(&id)? {
                if rec.retry_of.as_ref() == Some(&prev.job_id) {
                    return Ok(Some(id));
                }
            }
        }
        let prev_id = prev.job_id.as_str();
        self.find_row(|row| row.retry_of.as_deref() == Some(prev_id))
    }

    /// The record of `id` once it is terminal; a new state is said.
    fn ended(&mut self, id: &JobId) -> anyhow::Result<Option<JobRecord>> {
        let Some(rec) = self.record(id)? else {
            return Ok(None);
        };
        let from = match &self.seen {
            Some((seen, state)) if seen == id => Some(*state),
            _ => None,
        };
        if from != Some(rec.state) {
            self.progress.job_changed(&rec, from);
            self.seen = Some((id.clone(), rec.state));
        }
        Ok(rec.state.is_terminal().then_some(rec))
    }

    /// The record of `id` once its end is complete: its prompt is in the
    /// archive (so its ledger row, written before the move, is there too),
    /// or the record says why it could not be moved. A script that runs
    /// `ls archive/…` or `history list` after `--wait` finds them.
    fn settled(&mut self, id: &JobId) -> anyhow::Result<Option<JobRecord>> {
        let Some(rec) = self.ended(id)? else {
            return Ok(None);
        };
        let archived = rec
            .archive_path
            .as_deref()
            .is_some_and(|p| self.layout.resolve(p).exists());
        let unmovable = rec.extra.contains_key("archive_error") || rec.inbox_path.is_none();
        Ok((archived || unmovable).then_some(rec))
    }

    /// The record of `id`, `None` while it does not exist.
    fn record(&self, id: &JobId) -> anyhow::Result<Option<JobRecord>> {
        match JobRecord::load_job(self.layout, id) {
            Ok(rec) => Ok(Some(rec)),
            Err(jobwarden_model::job::RecordError::Io(e))
                if e.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(None)
            }
            Err(e) => Err(e).with_context(|| format!("following job {id}")),
        }
    }

    /// The id of the newest ledger row of our prompt since the drop that
    /// `matches`.
    fn find_row(
        &mut self,
        matches: impl Fn(&jobwarden_ledger::Execution) -> bool,
    ) -> anyhow::Result<Option<JobId>> {
        if self.ledger.is_none() && self.layout.ledger().exists() {
            self.ledger = Some(Ledger::open(&self.layout.ledger())?);
        }
        let Some(ledger) = &self.ledger else {
            return Ok(None);
        };
        let filter = Filter {
            project: Some(self.prompt.project.clone()),
            name: Some(self.prompt.name.clone()),
            since_ms: Some(self.since_ms),
            ..Filter::default()
        };
        let rows = ledger.list(&filter, 50)?;
        Ok(rows
            .iter()
            .filter(|row| matches(row))
            .find_map(|row| JobId::parse(&row.id).ok()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(file: &str, project: &str, name: Option<&str>) -> SubmitArgs {
        SubmitArgs {
            file: std::path::PathBuf::from(file),
            project: project.into(),
            name: name.map(str::to_owned),
            job_id: None,
            profile: None,
            priority: None,
            timeout: None,
            max_attempts: None,
            after: Vec::new(),
            at: None,
            wait: false,
            json: false,
        }
    }

    #[test]
    fn flags_become_front_matter_keys_a_list_for_after() {
        let mut a = args("f.md", "", None);
        a.priority = Some(-5);
        a.after = vec!["p/a".into(), "0f3c".into()];
        assert_eq!(
            settings(&a).expect("settings"),
            vec![
                ("priority", "-5".to_owned()),
                ("after", "[p/a, 0f3c]".to_owned())
            ]
        );
    }

    #[test]
    fn name_defaults_to_the_file_name_without_its_suffix() {
        for (file, name) in [
            ("dir/fix.prompt.md", "fix"),
            ("notes.md", "notes"),
            ("plain.txt", "plain.txt"),
        ] {
            let prompt = prompt_name(&args(file, "a/b", None)).expect("valid");
            assert_eq!(prompt.name, name, "{file}");
            assert_eq!(prompt.project, "a/b");
        }
    }

    #[test]
    fn unsafe_names_and_projects_are_refused() {
        for name in ["../x", "a/b", "", "nul\0byte", ".hidden", "x\n"] {
            let err = prompt_name(&args("f.md", "", Some(name))).expect_err(name);
            assert!(err.to_string().contains("prompt name"), "{err}");
        }
        for project in ["/abs", "../up", "a//b", "a/\0"] {
            let err = prompt_name(&args("f.md", project, None)).expect_err(project);
            assert!(err.to_string().contains("--project"), "{err}");
        }
        let err = prompt_name(&args("-", "", None)).expect_err("stdin needs a name");
        assert!(err.to_string().contains("--name"), "{err}");
    }

    #[test]
    fn exit_statuses_follow_the_end() {
        let prompt = PromptName {
            project: String::new(),
            name: "n".into(),
        };
        let mut rec =
            JobRecord::new_queued(JobId::generate(), &prompt, "inbox/n.running.md".into(), "h");
        for (state, code, status) in [
            (JobState::Succeeded, Some(0), 0),
            (JobState::Failed, Some(3), 4),
            (JobState::Failed, None, 4),
            (JobState::TimedOut, None, 124),
            (JobState::Aborted, None, 130),
            (JobState::Cancelled, None, 131),
            (JobState::SetupFailed, None, 78),
            (JobState::Rejected, None, 65),
            (JobState::Interrupted, None, 75),
        ] {
            rec.state = state;
            rec.exit_code = code;
            assert_eq!(exit_status(&rec), status, "{state} {code:?}");
        }
    }
}
