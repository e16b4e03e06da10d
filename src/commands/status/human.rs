//! `status` for a person: the answer of [`super::Status`] as lines on a
//! terminal (the JSON answer is the struct itself).

use super::*;

pub(super) fn print_human(s: &Status) -> anyhow::Result<()> {
    use std::io::Write;
    let now = Timestamp::now().epoch_ms();
    let ago =
        |t: Option<Timestamp>| t.map_or_else(|| "never".to_owned(), |t| fmt_ago(t.epoch_ms(), now));
    let d = &s.daemon;
    let daemon = if d.alive {
        let pid = d.pid.map(|p| format!("pid {p}, ")).unwrap_or_default();
        let phase = d.phase.map_or("", |p| match p {
            Phase::Starting => ", starting",
            Phase::Stopping => ", stopping (waiting for running jobs)",
            Phase::Running | Phase::Stopped => "",
        });
        let stale = if d.heartbeat_stale {
            format!(" ({})", alarm("STALE"))
        } else {
            String::new()
        };
        let age = match d.heartbeat_at {
            Some(t) if d.heartbeat_stale => fmt_ago_exact(t.epoch_ms(), now),
            other => ago(other),
        };
        format!("running ({pid}heartbeat {age}{stale}{phase})")
    } else if d.heartbeat_at.is_some() {
        format!("not running (last heartbeat {})", ago(d.heartbeat_at))
    } else {
        "not running (never started on this root)".to_owned()
    };
    let st = &s.storage;
    let free = st
        .free_bytes
        .map(|b| format!("{} free", fmt_bytes(b)))
        .unwrap_or_else(|| "free space unknown".to_owned());
    let storage = match st.condition {
        Condition::Ok => format!("ok, {free}"),
        bad => {
            let consequence = if d.alive {
                "claims and job starts wait until writes succeed"
            } else {
                "nothing can be claimed until writes succeed"
            };
            let since = st
                .since
                .map(|t| format!(" since {}", ago(Some(t))))
                .unwrap_or_default();
            let detail = st
                .detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default();
            format!(
                "{}{since}{detail} ({free}); {consequence}",
                alarm(if bad == Condition::Full {
                    "FULL"
                } else {
                    "READ-ONLY"
                })
            )
        }
    };
    let mut out = std::io::stdout().lock();
    let mut line = |k: &str, v: &str| writeln!(out, "{k:<10}{v}");
    line("daemon", &daemon)?;
    line("root", &format!("{} (jobwarden {})", s.root, s.version))?;
    line("storage", &storage)?;
    match (&s.ledger.error, &s.ledger.fix) {
        (Some(error), fix) if !s.ledger.ok => {
            line("ledger", &format!("{}: {error}", alarm("DAMAGED")))?;
            line("", &format!("fix: {}", fix.as_deref().unwrap_or("")))?;
        }
        _ => line("ledger", "ok")?,
    }
    if let Some(p) = &d.problem {
        line("warning", p)?;
    }
    for (label, text) in s.config.lines() {
        line(label, &text)?;
    }
    if let Some(watch) = d.watch.as_deref().filter(|w| *w != "inotify") {
        let why = d.watch_reason.as_deref().unwrap_or("no reason given");
        line("inbox", &format!("{} ({why})", alarm(watch)))?;
    }
    if d.sandbox.as_deref() == Some("unavailable") {
        let why = d.sandbox_reason.as_deref().unwrap_or("no reason given");
        line(
            "sandbox",
            &format!("{}: jobs run without one ({why})", alarm("UNAVAILABLE")),
        )?;
    } else if let Some(sandbox) = &d.sandbox {
        line("sandbox", sandbox)?;
    }
    let n = |state: &str| s.counts.get(state).copied().unwrap_or(0);
    let live = n("preparing") + n("running") + n("publishing");
    let of = s
        .limits
        .daemon
        .as_ref()
        .map(|l| format!(" of {} (limit set by hand)", l.max_jobs))
        .unwrap_or_default();
    let mut summary = format!(
        "{}: {live} running{of}, {} queued",
        s.overall_state,
        n("queued")
    );
    // The deferred prompts are among those waiting in the inbox.
    match (s.waiting, s.deferred.len()) {
        (0, 0) => {}
        (0, deferred) => summary.push_str(&format!(", {deferred} deferred")),
        (waiting, 0) => summary.push_str(&format!(", {waiting} waiting in the inbox")),
        (waiting, deferred) => summary.push_str(&format!(
            ", {waiting} waiting in the inbox ({deferred} of them deferred)"
        )),
    }
    if let Some(u) = d.unsettled.filter(|&u| u > 0) {
        summary.push_str(&format!(", {u} waiting to be recorded"));
    }
    line("jobs", &summary)?;
    for (i, p) in pause_lines(&s.paused).iter().enumerate() {
        line(if i == 0 { "paused" } else { "" }, &fit(p, 70))?;
    }
    let limits: Vec<String> = s
        .limits
        .list()
        .into_iter()
        .filter(|(scope, _)| *scope != jobwarden_model::control::Scope::Daemon)
        .map(|(scope, l)| format!("{scope}: {} at once (set by hand)", l.max_jobs))
        .collect();
    for (i, l) in limits.iter().enumerate() {
        line(if i == 0 { "limits" } else { "" }, &fit(l, 70))?;
    }
    let ended: Vec<String> = JobState::ALL
        .iter()
        .filter(|st| st.is_terminal() && n(st.as_str()) > 0)
        .map(|st| format!("{} {}", n(st.as_str()), st))
        .collect();
    if !ended.is_empty() {
        line("ended", &ended.join(", "))?;
    }
    if let Some(step) = &s.last_clock_step {
        let age = now_ms().saturating_sub(step.noticed_at.epoch_ms());
        if age < CLOCK_STEP_SHOWN_MS {
            let how = if step.step_ms > 0 { "ahead" } else { "back" };
            let text = format!(
                "{} stepped {how} by {} {} (times around it do not add up)",
                step.host,
                fmt_duration(step.step_ms.unsigned_abs()),
                fmt_ago(step.noticed_at.epoch_ms(), now_ms())
            );
            for (i, part) in crate::commands::output::wrap(&text, 70).iter().enumerate() {
                line(if i == 0 { "clock" } else { "" }, part)?;
            }
        }
    }
    if let Some(b) = &s.completion_summary {
        for (i, part) in crate::commands::output::wrap(&batch_line(b), 70)
            .iter()
            .enumerate()
        {
            line(if i == 0 { "batch" } else { "" }, part)?;
        }
    }
    let now = Timestamp::now().epoch_ms();
    let short = short_id;
    for (i, r) in s.running.iter().enumerate() {
        let heartbeat = match r.heartbeat_at {
            Some(t) if r.heartbeat_stale => {
                format!("hb {} {}", fmt_ago_exact(t.epoch_ms(), now), alarm("STALE"))
            }
            Some(t) => format!("hb {}", fmt_ago(t.epoch_ms(), now)),
            None => format!("no heartbeat {}", alarm("STALE")),
        };
        let elapsed = r.elapsed_ms.map(fmt_duration).unwrap_or_else(|| "-".into());
        let pid = r.pid.map(|p| format!("  pid {p}")).unwrap_or_default();
        line(
            if i == 0 { "running" } else { "" },
            &format!(
                "{}  {}  {elapsed:>7}  {heartbeat}{pid}",
                short(&r.id),
                fit_pad(&prompt_label(&r.project, &r.name), 20)
            ),
        )?;
    }
    for (i, q) in s.queued.iter().enumerate() {
        line(
            if i == 0 { "queued" } else { "" },
            &format!(
                "{}  {}  claimed {}",
                short(&q.id),
                fit_pad(&prompt_label(&q.project, &q.name), 24),
                fmt_ago(q.created_at.epoch_ms(), now),
            ),
        )?;
        // Why it waits, on a line of its own so that the table keeps to
        // 80 columns.
        if let Some(w) = q.waits.as_deref() {
            line("", &format!("  waits: {}", fit(w, 60)))?;
        }
    }
    for (i, p) in s.deferred.iter().enumerate() {
        line(
            if i == 0 { "deferred" } else { "" },
            &format!(
                "{}  cooldown ends {}",
                fit_pad(&p.prompt, 34),
                fmt_in(p.until.epoch_ms(), now)
            ),
        )?;
    }
    for (i, a) in s.needs_attention.iter().enumerate() {
        line(
            if i == 0 { "attention" } else { "" },
            &format!(
                "{}  last run: {} ({})",
                fit_pad(&prompt_label(&a.project, &a.name), 34),
                a.outcome,
                short(&a.job_id)
            ),
        )?;
        for part in a.reason.as_deref().map(|r| wrap(r, 68)).unwrap_or_default() {
            line("", &format!("  {part}"))?;
        }
    }
    if !s.needs_attention.is_empty() {
        line(
            "",
            "dealt with? `jobwarden ack JOB…` or `jobwarden ack --all` clears it",
        )?;
    }
    if s.acknowledged > 0 {
        line(
            "acked",
            &format!(
                "{} prompt{} whose last run went wrong, acknowledged",
                s.acknowledged,
                if s.acknowledged == 1 { "" } else { "s" }
            ),
        )?;
    }
    if !s.recent_rows.is_empty() {
        writeln!(out, "recent")?;
        let mut table = crate::commands::output::Table::new(&crate::commands::jobs::COLUMNS);
        for j in &s.recent_rows {
            table.push(crate::commands::jobs::cells(j, now));
        }
        for l in table.lines(crate::commands::output::colour()) {
            writeln!(out, "  {l}")?;
        }
    }
    Ok(())
}

/// `4 jobs in 12m00s: 2 succeeded, 1 failed, 1 cancelled; longest p/a
/// (10m00s); ended last: p/b (merged, 2m ago); 1 needs attention`.
fn batch_line(b: &jobwarden_ledger::CompletionSummary) -> String {
    let states: Vec<String> = b
        .by_state
        .iter()
        .map(|(state, n)| format!("{n} {state}"))
        .collect();
    let mut text = format!(
        "last: {} job{} in {}: {}",
        b.jobs,
        if b.jobs == 1 { "" } else { "s" },
        fmt_duration(b.elapsed_ms),
        states.join(", ")
    );
    if let Some(l) = &b.longest {
        text.push_str(&format!(
            "; longest {} ({})",
            prompt_label(&l.project, &l.name),
            fmt_duration(l.duration_ms)
        ));
    }
    if let Some(l) = &b.last {
        text.push_str(&format!(
            "; ended last: {} ({}, {})",
            prompt_label(&l.project, &l.name),
            l.state,
            fmt_ago(l.ended_at.epoch_ms(), now_ms())
        ));
    }
    if !b.needs_attention.is_empty() {
        text.push_str(&format!("; {} need attention", b.needs_attention.len()));
    }
    text
}
