//! The ledger's schema as append-only migrations keyed by
//! `PRAGMA user_version`: migration N brings the schema from version N-1 to
//! N. Never edit or reorder a migration that has shipped; add a new one.
//!
//! Every table and column carries a comment. Value checks are CHECK
//! constraints or foreign keys; the set of outcome names is a table, so a
//! new outcome is one `INSERT` in a new migration, never a rebuilt CHECK.

use rusqlite::Connection;

/// Migration 1: outcomes, executions, artifacts, paths.
const V1: &str = r#"
-- The outcome names an execution may have. A new outcome is added by a
-- migration inserting a row here; nothing else needs to change.
CREATE TABLE outcomes (
    name TEXT PRIMARY KEY,                 -- as stored in executions.outcome
    causes_cooldown INTEGER NOT NULL       -- 1: defers the prompt's next claim
        CHECK (causes_cooldown IN (0, 1))
) WITHOUT ROWID;
INSERT INTO outcomes (name, causes_cooldown) VALUES
    ('success', 0), ('failure', 1), ('timeout', 1), ('rate_limited', 1),
    ('aborted', 0), ('interrupted', 0), ('rejected', 0);

-- One row per finished attempt. Append-only: never updated or deleted.
CREATE TABLE executions (
    id TEXT PRIMARY KEY,                   -- the job id (or a fresh id for external runs)
    project TEXT NOT NULL,                 -- prompt folder relative to inbox/ ("" at the top)
    name TEXT NOT NULL,                    -- prompt name without .prompt.md
    attempt INTEGER NOT NULL CHECK (attempt >= 1),  -- 1 for a first run, +1 per retry
    retry_of TEXT,                         -- the execution this one retried
    profile TEXT,                          -- profile used
    command TEXT,                          -- argv as run, a JSON array
    workdir TEXT,                          -- working folder of the main command
    started_at INTEGER,                    -- epoch ms; NULL if it never started
    finished_at INTEGER NOT NULL,          -- epoch ms
    duration_ms INTEGER CHECK (duration_ms IS NULL OR duration_ms >= 0),
    outcome TEXT NOT NULL REFERENCES outcomes (name),
    exit_code INTEGER,                     -- main command's exit code, NULL if signalled or never run
    signal TEXT,                           -- signal name that ended it, if any
    failure_stage TEXT                     -- phase a failure happened in
        CHECK (failure_stage IS NULL OR failure_stage IN ('prepare', 'run', 'publish')),
    error_message TEXT,                    -- the job's state_reason
    result_ref TEXT,                       -- what publishing produced (commit, PR URL)
    host TEXT NOT NULL,                    -- machine that ran it
    prompt_sha256 TEXT,                    -- of the prompt bytes the attempt ran
    disposition TEXT                       -- what happened to the prompt afterwards
        CHECK (disposition IS NULL OR disposition IN ('archived', 'requeued')),
    source TEXT NOT NULL DEFAULT 'daemon'  -- who wrote the row
        CHECK (source IN ('daemon', 'external', 'repair'))
);
CREATE INDEX executions_by_prompt ON executions (project, name, finished_at);
CREATE INDEX executions_by_outcome ON executions (outcome);
CREATE INDEX executions_by_finished ON executions (finished_at);
CREATE TRIGGER executions_no_update BEFORE UPDATE ON executions
    BEGIN SELECT RAISE(ABORT, 'executions rows are append-only'); END;
CREATE TRIGGER executions_no_delete BEFORE DELETE ON executions
    BEGIN SELECT RAISE(ABORT, 'executions rows are append-only'); END;

-- Structured outputs of an execution (stdout tail, stderr tail, ...), each a
-- JSON envelope {"text": ..., "truncated": bool, "bytes": n}. Prunable.
CREATE TABLE execution_artifacts (
    execution_id TEXT NOT NULL REFERENCES executions (id),
    kind TEXT NOT NULL,                    -- 'stdout_tail', 'stderr_tail', ...
    content TEXT NOT NULL CHECK (json_valid(content)),
    PRIMARY KEY (execution_id, kind)
) WITHOUT ROWID;

-- Files an execution ran on and files it changed, so that "what touched
-- this file" is one indexed query.
CREATE TABLE execution_paths (
    execution_id TEXT NOT NULL REFERENCES executions (id),
    relation TEXT NOT NULL CHECK (relation IN ('executed_on', 'affected')),
    path TEXT NOT NULL,                    -- absolute path
    PRIMARY KEY (execution_id, relation, path)
) WITHOUT ROWID;
CREATE INDEX execution_paths_by_path ON execution_paths (path);
"#;

/// Migration 2: indexes for the history queries (`history list --outcome`,
/// `history stats`), so none of them reads the whole table.
const V2: &str = r#"
-- `history list --outcome O` newest first: a range of this index, already
-- in order. It also serves every lookup the single-column outcome index
-- served, which it replaces (one index less to write per insert).
CREATE INDEX executions_by_outcome_finished ON executions (outcome, finished_at);
DROP INDEX executions_by_outcome;
-- `history stats` counts by project and outcome (and how many have a
-- duration) from this covering index alone, never touching table rows.
CREATE INDEX executions_by_project_outcome ON executions (project, outcome, duration_ms);
-- Median and p95 duration of one project: LIMIT 1 OFFSET k along this index.
CREATE INDEX executions_by_project_duration ON executions (project, duration_ms);
-- Median and p95 duration over all projects.
CREATE INDEX executions_by_duration ON executions (duration_ms);
"#;

/// Migration 3: the job index and each prompt's last outcome, so that
/// `status`, `jobs` and `show` answer from indexes, not by reading every run
/// folder or every execution.
const V3: &str = r#"
-- One row per job whose run folder exists: a cache of its job.json, kept
-- current at each state change (claim, start, end) and refreshed at every
-- daemon start; removed when retention removes the folder. job.json wins
-- where they differ. Rebuilt from runs/ by `history repair`.
CREATE TABLE jobs (
    id TEXT PRIMARY KEY,                   -- the job id (its run folder's name)
    id_short TEXT NOT NULL,                -- the id's last 8 characters, as tables show it
    project TEXT NOT NULL,                 -- prompt folder relative to inbox/
    name TEXT NOT NULL,                    -- prompt name without .prompt.md
    state TEXT NOT NULL,                   -- job.json state at its last change
    attempt INTEGER NOT NULL CHECK (attempt >= 1),
    created_at INTEGER NOT NULL,           -- epoch ms: the claim
    started_at INTEGER,                    -- epoch ms
    finished_at INTEGER,                   -- epoch ms, terminal jobs only
    exit_code INTEGER,                     -- main command's exit code
    state_reason TEXT,                     -- why it is in this state
    updated_at INTEGER NOT NULL            -- job.json's updated_at: older writes never win
) WITHOUT ROWID;
CREATE INDEX jobs_by_created ON jobs (created_at);
CREATE INDEX jobs_by_state ON jobs (state, created_at);
CREATE INDEX jobs_by_prompt ON jobs (project, name, created_at);
CREATE INDEX jobs_by_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_by_short ON jobs (id_short);

-- How many jobs are in each state, kept by triggers on jobs, so that
-- `status` counts 100,000 jobs by reading ten rows.
CREATE TABLE job_counts (
    state TEXT PRIMARY KEY,
    n INTEGER NOT NULL CHECK (n >= 0)
) WITHOUT ROWID;
INSERT INTO job_counts (state, n) VALUES
    ('queued', 0), ('preparing', 0), ('running', 0), ('publishing', 0), ('succeeded', 0),
    ('failed', 0), ('timed_out', 0), ('aborted', 0), ('interrupted', 0), ('rejected', 0);
CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs
    BEGIN UPDATE job_counts SET n = n + 1 WHERE state = NEW.state; END;
CREATE TRIGGER jobs_count_update AFTER UPDATE OF state ON jobs WHEN OLD.state <> NEW.state
    BEGIN
        UPDATE job_counts SET n = n - 1 WHERE state = OLD.state;
        UPDATE job_counts SET n = n + 1 WHERE state = NEW.state;
    END;
CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs
    BEGIN UPDATE job_counts SET n = n - 1 WHERE state = OLD.state; END;

-- The newest execution of each prompt, kept by a trigger on executions so
-- that every writer (daemon, `history record`, repair) keeps it current.
-- `status` reads "needs attention" from it in one indexed lookup.
CREATE TABLE prompts_last (
    project TEXT NOT NULL,
    name TEXT NOT NULL,
    execution_id TEXT NOT NULL,            -- the newest execution's id
    outcome TEXT NOT NULL REFERENCES outcomes (name),
    finished_at INTEGER NOT NULL,          -- epoch ms
    PRIMARY KEY (project, name)
) WITHOUT ROWID;
CREATE INDEX prompts_last_by_outcome ON prompts_last (outcome, finished_at);
CREATE TRIGGER executions_keep_prompts_last AFTER INSERT ON executions
    WHEN NOT EXISTS (SELECT 1 FROM prompts_last
                     WHERE project = NEW.project AND name = NEW.name
                       AND finished_at > NEW.finished_at)
    BEGIN
        -- Delete, then insert: the inserting statement's own conflict
        -- clause (INSERT OR IGNORE) would override an OR REPLACE here.
        DELETE FROM prompts_last WHERE project = NEW.project AND name = NEW.name;
        INSERT INTO prompts_last (project, name, execution_id, outcome, finished_at)
        VALUES (NEW.project, NEW.name, NEW.id, NEW.outcome, NEW.finished_at);
    END;
INSERT INTO prompts_last (project, name, execution_id, outcome, finished_at)
    SELECT project, name, id, outcome, MAX(finished_at) FROM executions GROUP BY project, name;
"#;

/// Migration 4: lifetime statistics kept by triggers on executions, so that
/// `history stats` reads a few thousand small rows instead of a million
/// index entries (DESIGN §12), and gives the same exact numbers. The tables
/// are filled from the existing rows in this migration's transaction, so an
/// upgraded ledger is exact too.
const V4: &str = r#"
-- Executions per project and outcome, and how many of them have a
-- duration: the lifetime counts of `history stats`.
CREATE TABLE stats_counts (
    project TEXT NOT NULL,
    outcome TEXT NOT NULL,                 -- an outcomes.name (executions checks it)
    n INTEGER NOT NULL CHECK (n >= 0),     -- executions
    timed INTEGER NOT NULL CHECK (timed >= 0),  -- of which have a duration_ms
    PRIMARY KEY (project, outcome)
) WITHOUT ROWID;

-- Duration buckets on a log scale, from 0 to the largest integer: one
-- millisecond wide up to 32 ms, then each at most 1/16 of its lower bound
-- wide, about 700 in all. They only locate order statistics and never
-- show in any output.
CREATE TABLE duration_buckets (
    lo INTEGER PRIMARY KEY,                -- smallest duration_ms in the bucket
    hi INTEGER NOT NULL                    -- largest duration_ms in the bucket
);
INSERT INTO duration_buckets (lo, hi)
    WITH RECURSIVE b (lo) AS (
        SELECT 0
        UNION ALL
        SELECT lo + MAX(1, lo / 16) FROM b WHERE lo < 8000000000000000000
    )
    SELECT lo, COALESCE(LEAD(lo) OVER (ORDER BY lo) - 1, 9223372036854775807) FROM b;

-- The k-th smallest duration of a project (median, p95) in two steps, both
-- short and both exact: adding up its bucket counts in order finds the
-- bucket holding rank k and the rank within it; adding up the counts of
-- the distinct durations inside that bucket, from its nearer end, finds
-- the duration. The second step reads at most half the bucket's distinct
-- durations, so durations that cluster (a job that always takes about as
-- long, timeouts) cost no more than spread ones.
CREATE TABLE stats_buckets (
    project TEXT NOT NULL,
    bucket INTEGER NOT NULL,               -- the bucket's duration_buckets.lo
    n INTEGER NOT NULL CHECK (n >= 0),     -- executions with a duration in it
    PRIMARY KEY (project, bucket)
) WITHOUT ROWID;
CREATE TABLE stats_durations (
    project TEXT NOT NULL,
    duration_ms INTEGER NOT NULL,
    n INTEGER NOT NULL CHECK (n >= 0),     -- executions that took exactly this long
    PRIMARY KEY (project, duration_ms)
) WITHOUT ROWID;
-- The same over all projects, for the overall median and p95 (the bucket
-- counts over all projects are the sums of the projects' ones).
CREATE TABLE stats_durations_all (
    duration_ms INTEGER PRIMARY KEY,
    n INTEGER NOT NULL CHECK (n >= 0)
) WITHOUT ROWID;

-- Insert-if-missing, then add: these statements never meet a conflict, so
-- the conflict clause of the inserting statement (INSERT OR IGNORE), which
-- replaces that of a statement in a trigger (an OR REPLACE here would act
-- as OR IGNORE), cannot change what they do. A row it ignores fires no
-- AFTER INSERT trigger. Rows are never updated or deleted
-- (executions_no_update, executions_no_delete): inserts are all to follow.
CREATE TRIGGER executions_keep_stats_counts AFTER INSERT ON executions
    BEGIN
        INSERT INTO stats_counts (project, outcome, n, timed)
            SELECT NEW.project, NEW.outcome, 0, 0
            WHERE NOT EXISTS (SELECT 1 FROM stats_counts
                              WHERE project = NEW.project AND outcome = NEW.outcome);
        UPDATE stats_counts SET n = n + 1, timed = timed + (NEW.duration_ms IS NOT NULL)
            WHERE project = NEW.project AND outcome = NEW.outcome;
    END;
CREATE TRIGGER executions_keep_stats_durations AFTER INSERT ON executions
    WHEN NEW.duration_ms IS NOT NULL
    BEGIN
        INSERT INTO stats_buckets (project, bucket, n)
            SELECT NEW.project, b.lo, 0
            FROM (SELECT MAX(lo) AS lo FROM duration_buckets WHERE lo <= NEW.duration_ms) AS b
            WHERE NOT EXISTS (SELECT 1 FROM stats_buckets
                              WHERE project = NEW.project AND bucket = b.lo);
        UPDATE stats_buckets SET n = n + 1
            WHERE project = NEW.project
              AND bucket = (SELECT MAX(lo) FROM duration_buckets WHERE lo <= NEW.duration_ms);
        INSERT INTO stats_durations (project, duration_ms, n)
            SELECT NEW.project, NEW.duration_ms, 0
            WHERE NOT EXISTS (SELECT 1 FROM stats_durations
                              WHERE project = NEW.project AND duration_ms = NEW.duration_ms);
        UPDATE stats_durations SET n = n + 1
            WHERE project = NEW.project AND duration_ms = NEW.duration_ms;
        INSERT INTO stats_durations_all (duration_ms, n)
            SELECT NEW.duration_ms, 0
            WHERE NOT EXISTS (SELECT 1 FROM stats_durations_all
                              WHERE duration_ms = NEW.duration_ms);
        UPDATE stats_durations_all SET n = n + 1 WHERE duration_ms = NEW.duration_ms;
    END;

INSERT INTO stats_counts (project, outcome, n, timed)
    SELECT project, outcome, COUNT(*), COUNT(duration_ms) FROM executions
    GROUP BY project, outcome;
INSERT INTO stats_durations (project, duration_ms, n)
    SELECT project, duration_ms, COUNT(*) FROM executions
    WHERE duration_ms IS NOT NULL GROUP BY project, duration_ms;
INSERT INTO stats_durations_all (duration_ms, n)
    SELECT duration_ms, SUM(n) FROM stats_durations GROUP BY duration_ms;
INSERT INTO stats_buckets (project, bucket, n)
    SELECT project, bucket, SUM(n) FROM (
        SELECT project, n,
               (SELECT MAX(lo) FROM duration_buckets WHERE lo <= duration_ms) AS bucket
        FROM stats_durations)
    GROUP BY project, bucket;

-- Only lifetime `history stats` read these (V2); the tables above answer
-- it now, and every insert is one index write less per index dropped.
DROP INDEX executions_by_project_outcome;
DROP INDEX executions_by_project_duration;
DROP INDEX executions_by_duration;
"#;

/// Migration 5: the `cancelled` outcome and job state: a job stopped by
/// request before anything of it ran (a prompt cancelled while it waited
/// in the inbox, or a job aborted while queued). It causes no cooldown and
/// is never retried automatically.
const V5: &str = r#"
INSERT INTO outcomes (name, causes_cooldown) VALUES ('cancelled', 0);
INSERT INTO job_counts (state, n) VALUES ('cancelled', 0);
"#;

/// Migration 6: setup failures, and acknowledgements of what needs the
/// operator's attention.
const V6: &str = r#"
-- A job whose command could not start for a reason waiting will not fix
-- (program not found or not executable, workdir missing, a prepare or
-- publish that cannot start). It defers nothing: the operator fixes the
-- setup and the next drop or `retry` runs at once.
INSERT INTO outcomes (name, causes_cooldown) VALUES ('setup_failed', 0);
INSERT INTO job_counts (state, n) VALUES ('setup_failed', 0);

-- `jobwarden ack`: the operator has seen an execution that made its
-- prompt need attention. Only that execution is acknowledged: a newer
-- one of the same prompt that goes wrong needs attention again.
CREATE TABLE acknowledgements (
    execution_id TEXT PRIMARY KEY REFERENCES executions (id),
    acknowledged_at INTEGER NOT NULL,      -- epoch ms
    acknowledged_by TEXT                   -- the user who ran `ack`, if known
) WITHOUT ROWID;
"#;

/// Migration 7: the compiler and linter diagnostics found in each
/// execution's output (`diagnostics.rs`).
const V7: &str = r#"
-- One row per diagnostic an execution's output held, in the order printed
-- (at most 200 an execution). Written with the execution, never changed.
CREATE TABLE execution_diagnostics (
    execution_id TEXT NOT NULL REFERENCES executions (id),
    seq INTEGER NOT NULL CHECK (seq >= 1),  -- order in the output
    severity TEXT NOT NULL CHECK (severity IN ('error', 'warning')),
    code TEXT,                             -- the tool's code (E0425, TS2304), if any
    file TEXT,                             -- the file as the tool printed it
    path TEXT,                             -- that file made absolute against the workdir
    line INTEGER CHECK (line IS NULL OR line >= 0),
    col INTEGER CHECK (col IS NULL OR col >= 0),
    message TEXT NOT NULL,
    PRIMARY KEY (execution_id, seq)
) WITHOUT ROWID;
CREATE INDEX execution_diagnostics_by_code ON execution_diagnostics (code);
CREATE INDEX execution_diagnostics_by_path ON execution_diagnostics (path);
"#;

/// Migration 8: times jobwarden can never have written are refused, and
/// the steps of the wall clock that jobwarden noticed are kept.
const V8: &str = r#"
-- An execution's times are epoch ms from 2020 on, and at most a day ahead
-- of the clock of whoever writes the row: a clock set back to 1970 (a
-- dead RTC), a garbage job.json or a script's wrong units is refused here,
-- whoever writes.
CREATE TRIGGER executions_times_possible BEFORE INSERT ON executions
WHEN NEW.finished_at < 1577836800000
  OR NEW.finished_at > CAST(unixepoch('subsec') * 1000 AS INTEGER) + 86400000
  OR (NEW.started_at IS NOT NULL AND (NEW.started_at < 1577836800000
      OR NEW.started_at > CAST(unixepoch('subsec') * 1000 AS INTEGER) + 86400000))
BEGIN
    SELECT RAISE(ABORT, 'executions: impossible time (before 2020, or more than a day ahead of this clock)');
END;

-- Each step of the wall clock a daemon noticed: between two of its ticks
-- the wall clock moved more, or less, than the monotonic clock did (an
-- NTP correction, a manual `date`, a resume from suspend).
CREATE TABLE clock_steps (
    noticed_at INTEGER NOT NULL,           -- epoch ms, by the wall clock after the step
    step_ms INTEGER NOT NULL,              -- how far it jumped: + ahead, - back
    host TEXT NOT NULL                     -- machine whose clock stepped
);
CREATE INDEX clock_steps_by_time ON clock_steps (noticed_at);
"#;

/// Migration 9: merged work. `merged` is a job state whose outcome is
/// `success` (an execution row never changes, and a merge is mostly
/// learned after it was written); the merge is a fact of `published`.
const V9: &str = r#"
INSERT INTO job_counts (state, n) VALUES ('merged', 0);

-- The git branch of each execution that ended with its work published
-- (its profile has `git`), watched by the reconcile until settled.
CREATE TABLE published (
    execution_id TEXT PRIMARY KEY REFERENCES executions (id),
    repo TEXT NOT NULL,                    -- the repository (absolute path)
    branch TEXT NOT NULL,                  -- the job's branch, as configured
    target TEXT NOT NULL,                  -- what it is merged into
    fetch TEXT,                            -- remote fetched before judging, if any
    worktree TEXT,                         -- the job's worktree, if it had one
    tip TEXT,                              -- the branch's commit when the job published
    settled TEXT                           -- NULL while watched
        CHECK (settled IS NULL OR settled IN ('publish_merged', 'branch_merged', 'branch_deleted')),
    settled_at INTEGER,                    -- epoch ms, when settled
    merged_at INTEGER                      -- epoch ms, when merged (merges only)
        CHECK (merged_at IS NULL OR merged_at >= 1577836800000),
    merge_commit TEXT,                     -- the commit that merged it
    CHECK ((settled IS NULL) = (settled_at IS NULL)),
    CHECK ((merged_at IS NOT NULL) = (settled IS NOT NULL AND settled <> 'branch_deleted'))
) WITHOUT ROWID;
CREATE INDEX published_watched ON published (execution_id) WHERE settled IS NULL;
"#;

/// Migration 10: the counters `jobwarden metrics` exports, kept by
/// triggers so that a scrape reads a few rows, never `executions`.
const V10: &str = r#"
-- Executions by project, profile ('' when none) and outcome.
CREATE TABLE metric_counts (
    project TEXT NOT NULL,
    profile TEXT NOT NULL,
    outcome TEXT NOT NULL,
    n INTEGER NOT NULL CHECK (n >= 0),
    PRIMARY KEY (project, profile, outcome)
) WITHOUT ROWID;
-- The sum of the durations of a project's executions (the histogram's _sum).
CREATE TABLE metric_duration_sums (
    project TEXT PRIMARY KEY,
    sum_ms INTEGER NOT NULL CHECK (sum_ms >= 0)
) WITHOUT ROWID;
CREATE TRIGGER executions_keep_metric_counts AFTER INSERT ON executions
    BEGIN
        INSERT INTO metric_counts (project, profile, outcome, n)
            SELECT NEW.project, COALESCE(NEW.profile, ''), NEW.outcome, 0
            WHERE NOT EXISTS (SELECT 1 FROM metric_counts
                              WHERE project = NEW.project AND profile = COALESCE(NEW.profile, '')
                                AND outcome = NEW.outcome);
        UPDATE metric_counts SET n = n + 1
            WHERE project = NEW.project AND profile = COALESCE(NEW.profile, '')
              AND outcome = NEW.outcome;
    END;
CREATE TRIGGER executions_keep_metric_sums AFTER INSERT ON executions
    WHEN NEW.duration_ms IS NOT NULL
    BEGIN
        INSERT INTO metric_duration_sums (project, sum_ms)
            SELECT NEW.project, 0
            WHERE NOT EXISTS (SELECT 1 FROM metric_duration_sums WHERE project = NEW.project);
        UPDATE metric_duration_sums SET sum_ms = sum_ms + NEW.duration_ms
            WHERE project = NEW.project;
    END;
INSERT INTO metric_counts (project, profile, outcome, n)
    SELECT project, COALESCE(profile, ''), outcome, COUNT(*) FROM executions
    GROUP BY 1, 2, 3;
INSERT INTO metric_duration_sums (project, sum_ms)
    SELECT project, SUM(duration_ms) FROM executions WHERE duration_ms IS NOT NULL
    GROUP BY project;
"#;

/// Migration 11: the job index knows each job's profile, for `jobs
/// --profile` and the web page's filter. Ended jobs take it from their
/// ledger row; the rest gain it when a daemon's start-up check refreshes
/// their rows from `job.json`.
const V11: &str = r#"
ALTER TABLE jobs ADD COLUMN profile TEXT;  -- the profile it ran under; NULL until known
UPDATE jobs SET profile = (SELECT e.profile FROM executions e WHERE e.id = jobs.id)
    WHERE profile IS NULL;
CREATE INDEX jobs_by_profile ON jobs (profile, created_at) WHERE profile IS NOT NULL;
"#;

/// Migration 12: an execution's Slurm job (profile `executor = "slurm"`).
const V12: &str = r#"
CREATE TABLE execution_slurm (
    execution_id TEXT PRIMARY KEY REFERENCES executions (id),
    slurm_job_id TEXT NOT NULL,            -- Slurm's id (ids repeat after a controller reinstall)
    node TEXT,                             -- where the command ran
    state TEXT,                            -- Slurm's last word (COMPLETED, CANCELLED, NODE_FAIL...)
    pending_ms INTEGER CHECK (pending_ms IS NULL OR pending_ms >= 0),  -- submitted to started
    run_ms INTEGER CHECK (run_ms IS NULL OR run_ms >= 0)               -- started to ended
) WITHOUT ROWID;
"#;

/// Migration 13: the text of the prompt each execution ran
/// (`prompt_text.rs`), kept when its run folder is gone (rows written
/// before have none); and the ledger's order made the order rows are
/// written, which a wall clock stepped back does not reorder.
const V13: &str = r#"
CREATE TABLE execution_prompts (
    execution_id TEXT PRIMARY KEY REFERENCES executions (id),
    truncated INTEGER NOT NULL             -- 1: only the prompt's first 64 KiB are kept
        CHECK (truncated IN (0, 1)),
    text BLOB NOT NULL                     -- the kept bytes, DEFLATE-compressed (raw, no header)
) WITHOUT ROWID;

-- The ledger's order is the order rows are written (rowid: rows are never
-- deleted, so it only grows), not their finish times: a row written after
-- the wall clock stepped back is still the newest. This index serves "the
-- newest of a prompt" in that order (an index holds the rowid last).
CREATE INDEX executions_by_prompt_written ON executions (project, name);

-- The newest execution of a prompt is the last written, whatever its
-- time; only a row backfilled from a record (`repair`: written late by
-- nature) is placed by its time, never displacing a newer end.
DROP TRIGGER executions_keep_prompts_last;
CREATE TRIGGER executions_keep_prompts_last AFTER INSERT ON executions
    WHEN NEW.source <> 'repair'
      OR NOT EXISTS (SELECT 1 FROM prompts_last
                     WHERE project = NEW.project AND name = NEW.name
                       AND finished_at > NEW.finished_at)
    BEGIN
        DELETE FROM prompts_last WHERE project = NEW.project AND name = NEW.name;
        INSERT INTO prompts_last (project, name, execution_id, outcome, finished_at)
        VALUES (NEW.project, NEW.name, NEW.id, NEW.outcome, NEW.finished_at);
    END;
"#;

/// All migrations, in order. Index i holds migration i+1.
pub(super) const MIGRATIONS: &[&str] = &[V1, V2, V3, V4, V5, V6, V7, V8, V9, V10, V11, V12, V13];

/// The schema version this build writes.
pub const LATEST: u32 = MIGRATIONS.len() as u32;

/// Every table the migrations make, with its columns (separated by
/// spaces): what an open checks a current ledger's schema against
/// (`health::check_schema`). Written out rather than learnt by running
/// every migration on a scratch database in each process, which cost more
/// than most commands' own queries and grew with each migration. A test
/// runs the migrations and compares: a migration that adds a table or a
/// column adds it here too.
pub(super) const TABLES: &[(&str, &str)] = &[
    (
        "acknowledgements",
        "execution_id acknowledged_at acknowledged_by",
    ),
    ("clock_steps", "noticed_at step_ms host"),
    ("duration_buckets", "lo hi"),
    ("execution_artifacts", "execution_id kind content"),
    (
        "execution_diagnostics",
        "execution_id seq severity code file path line col message",
    ),
    ("execution_paths", "execution_id relation path"),
    ("execution_prompts", "execution_id truncated text"),
    (
        "execution_slurm",
        "execution_id slurm_job_id node state pending_ms run_ms",
    ),
    (
        "executions",
        "id project name attempt retry_of profile command workdir started_at finished_at \
         duration_ms outcome exit_code signal failure_stage error_message result_ref host \
         prompt_sha256 disposition source",
    ),
    ("job_counts", "state n"),
    (
        "jobs",
        "id id_short project name state attempt created_at started_at finished_at exit_code \
         state_reason updated_at profile",
    ),
    ("metric_counts", "project profile outcome n"),
    ("metric_duration_sums", "project sum_ms"),
    ("outcomes", "name causes_cooldown"),
    (
        "prompts_last",
        "project name execution_id outcome finished_at",
    ),
    (
        "published",
        "execution_id repo branch target fetch worktree tip settled settled_at merged_at \
         merge_commit",
    ),
    ("stats_buckets", "project bucket n"),
    ("stats_counts", "project outcome n timed"),
    ("stats_durations", "project duration_ms n"),
    ("stats_durations_all", "duration_ms n"),
];

/// Bring the schema up to [`LATEST`], each migration in its own
/// transaction with the version bump, so a crash never leaves half a step.
///
/// Several processes may open a fresh ledger at once (the daemon, monitors,
/// `history record` from scripts): each step takes the write lock first
/// (`BEGIN IMMEDIATE`) and reads the version under it, so exactly one
/// process applies it and the others see it done.
pub fn migrate(conn: &mut Connection) -> rusqlite::Result<MigrateOutcome> {
    loop {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let current: u32 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if current > LATEST {
            return Ok(MigrateOutcome::TooNew(current));
        }
        let Some(sql) = MIGRATIONS.get(current as usize) else {
            return Ok(MigrateOutcome::Current);
        };
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", current + 1)?;
        tx.commit()?;
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum MigrateOutcome {
    Current,
    /// Written by a newer jobwarden; this one must not touch it.
    TooNew(u32),
}
