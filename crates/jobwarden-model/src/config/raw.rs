//! The configuration as written: the raw TOML shape, read so that one pass
//! finds every fault of a file. A TOML syntax error ends the reading (what
//! follows it cannot be trusted); otherwise every unknown key is collected
//! with its path (`serde_ignored`), and a value of the wrong type is kept as
//! [`Loose::Wrong`], for the validator to report beside the other problems.
//! Giving the values meaning (durations, sizes, templates) is `validate.rs`'s.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};

use super::Problem;

/// A value as written: of the expected type, or (as TOML) one that is not.
#[derive(Debug, Clone)]
pub(super) enum Loose<T> {
    Ok(T),
    Wrong(String),
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Loose<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = toml::Value::deserialize(d)?;
        Ok(match T::deserialize(value.clone()) {
            Ok(v) => Loose::Ok(v),
            Err(_) => Loose::Wrong(value.to_string()),
        })
    }
}

/// A size is a string with a unit (`"64MiB"`) or a plain number of bytes.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum RawSize {
    Bytes(i64),
    Text(String),
}

type Opt<T> = Option<Loose<T>>;

/// A profile's `window`: one (`"22:00-06:00"`) or a list of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum RawWindows {
    One(String),
    Many(Vec<String>),
}

/// The whole file.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawConfig {
    pub root: Opt<PathBuf>,
    pub max_jobs: Opt<i64>,
    pub heartbeat_interval: Opt<String>,
    pub rescan_interval: Opt<String>,
    pub settle: Opt<String>,
    pub abort_grace: Opt<String>,
    pub max_prompt_bytes: Opt<RawSize>,
    pub max_log_bytes: Opt<RawSize>,
    pub shutdown: Opt<String>,
    pub drain_timeout: Opt<String>,
    pub watch: Opt<String>,
    pub events: Opt<bool>,
    pub max_interrupts: Opt<i64>,
    pub artifact_tail_bytes: Opt<RawSize>,
    pub keep_runs: Opt<i64>,
    pub keep_days: Opt<i64>,
    pub keep_artifacts: Opt<i64>,
    pub gc_interval: Opt<String>,
    pub reconcile_interval: Opt<String>,
    pub slurm_poll_interval: Opt<String>,
    pub shared_inbox: Option<RawSharedInbox>,
    #[serde(default)]
    pub profiles: BTreeMap<String, RawProfile>,
    #[serde(default, rename = "route")]
    pub routes: Vec<RawRoute>,
    #[serde(default)]
    pub notify: Vec<RawNotify>,
}

/// A `[[notify]]`.
#[derive(Debug, Default, Clone, Deserialize)]
pub(super) struct RawNotify {
    pub name: Opt<String>,
    pub on: Opt<Vec<String>>,
    pub command: Opt<Vec<String>>,
    pub webhook: Opt<String>,
    pub bearer_token_file: Opt<PathBuf>,
    pub timeout: Opt<String>,
    pub retries: Opt<i64>,
}

/// `[profiles.<name>]`.
#[derive(Debug, Default, Clone, Deserialize)]
pub(super) struct RawProfile {
    pub command: Opt<Vec<String>>,
    pub prompt_via: Opt<String>,
    pub workdir: Opt<String>,
    pub timeout: Opt<String>,
    pub env: Opt<BTreeMap<String, String>>,
    pub env_passthrough: Opt<Vec<String>>,
    pub max_attempts: Opt<i64>,
    pub cooldown: Opt<String>,
    pub rate_limit: Option<RawRateLimit>,
    pub keep_output: Opt<RawSize>,
    pub prepare: Option<RawPhase>,
    pub publish: Option<RawPhase>,
    pub limits: Option<RawLimits>,
    pub max_jobs: Opt<i64>,
    pub shared_workdir: Opt<bool>,
    pub window: Opt<RawWindows>,
    pub sandbox: Opt<bool>,
    pub git: Option<RawGit>,
    pub executor: Opt<String>,
    pub slurm: Option<RawSlurm>,
}

/// `[shared_inbox]`: this host's name and lease among the daemons that
/// share one inbox.
#[derive(Debug, Default, Clone, Deserialize)]
pub(super) struct RawSharedInbox {
    pub host: Opt<String>,
    pub lease: Opt<String>,
}

/// A profile's `slurm`: how its jobs are submitted.
#[derive(Debug, Default, Clone, Deserialize)]
pub(super) struct RawSlurm {
    pub partition: Opt<String>,
    pub account: Opt<String>,
    pub time_limit: Opt<String>,
    pub cpus: Opt<i64>,
    pub memory: Opt<String>,
    pub sbatch_args: Opt<Vec<String>>,
    pub batch_dir: Opt<PathBuf>,
}

/// A profile's `git`: where its jobs' published work lives.
#[derive(Debug, Default, Clone, Deserialize)]
pub(super) struct RawGit {
    pub repo: Opt<String>,
    pub branch: Opt<String>,
    pub target: Opt<String>,
    pub worktree: Opt<String>,
    pub fetch: Opt<String>,
}

/// A profile's `prepare` or `publish`.
#[derive(Debug, Default, Clone, Deserialize)]
pub(super) struct RawPhase {
    pub command: Opt<Vec<String>>,
    pub timeout: Opt<String>,
}

/// A profile's `rate_limit`.
#[derive(Debug, Default, Clone, Deserialize)]
pub(super) struct RawRateLimit {
    pub exit_codes: Opt<Vec<i32>>,
    pub patterns: Opt<Vec<String>>,
    pub cooldown: Opt<String>,
}

/// A profile's `limits`.
#[derive(Debug, Default, Clone, Deserialize)]
pub(super) struct RawLimits {
    pub memory: Opt<RawSize>,
    pub cpu_time: Opt<String>,
    pub open_files: Opt<i64>,
    pub processes: Opt<i64>,
}

/// A `[[route]]`.
#[derive(Debug, Default, Clone, Deserialize)]
pub(super) struct RawRoute {
    #[serde(rename = "match")]
    pub pattern: Opt<String>,
    pub profile: Opt<String>,
    pub workdir: Opt<String>,
    pub env: Opt<BTreeMap<String, String>>,
    pub max_jobs: Opt<i64>,
    pub shared_workdir: Opt<bool>,
}

/// Read `text`: the raw shape, and a problem for every unknown key. `None`
/// (with the problem) when the text is not TOML, or a table is not where
/// the shape needs one.
pub(super) fn read(text: &str, problems: &mut Vec<Problem>) -> Option<RawConfig> {
    let whole = |e: toml::de::Error| Problem {
        key: String::new(),
        message: e.to_string().trim_end().to_owned(),
    };
    let de = match toml::Deserializer::parse(text) {
        Ok(de) => de,
        Err(e) => {
            problems.push(whole(e));
            return None;
        }
    };
    let mut unknown = Vec::new();
    let raw = serde_ignored::deserialize(de, |path| unknown.push(segments(&path)));
    problems.extend(unknown.iter().map(|path| unknown_key(path)));
    raw.map_err(|e| problems.push(whole(e))).ok()
}

/// One step of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

fn segments(path: &serde_ignored::Path<'_>) -> Vec<Seg> {
    use serde_ignored::Path;
    let mut out = match path {
        Path::Root => return Vec::new(),
        Path::Seq { parent, .. }
        | Path::Map { parent, .. }
        | Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => segments(parent),
    };
    match path {
        Path::Seq { index, .. } => out.push(Seg::Index(*index)),
        Path::Map { key, .. } => out.push(Seg::Key(key.clone())),
        _ => {}
    }
    out
}

/// `profiles.review.timeout`, `route[0].workdir`: a key path as problems
/// name it (array indexes from 0, as TOML tools count them).
fn path_text(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if out.is_empty() => out.push_str(k),
            Seg::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// The problem of an unknown key: its path, the keys allowed there, and
/// the closest of them when it looks like a typo.
fn unknown_key(path: &[Seg]) -> Problem {
    let key = path_text(path);
    let (parent, last) = path.split_at(path.len().saturating_sub(1));
    let name = match last {
        [Seg::Key(k)] => k.as_str(),
        _ => "",
    };
    let allowed = keys_at(parent);
    let mut message = format!("{key}: unknown key {name:?}");
    let closest = allowed
        .iter()
        .map(|k| (strsim::damerau_levenshtein(name, k), k))
        .filter(|(d, _)| *d <= (name.len() / 3).max(1))
        .min();
    if let Some((_, k)) = closest {
        message.push_str(&format!("; did you mean {k:?}?"));
    }
    if !allowed.is_empty() {
        message.push_str(&format!(" (keys here: {})", allowed.join(", ")));
    }
    Problem { key, message }
}

/// The keys the table at `parent` accepts.
fn keys_at(parent: &[Seg]) -> &'static [&'static str] {
    let key = |s: &Seg, name: &str| matches!(s, Seg::Key(k) if k == name);
    match parent {
        [] => keys_of::<RawConfig>(),
        [p, _] if key(p, "profiles") => keys_of::<RawProfile>(),
        [p, _, Seg::Key(k)] if key(p, "profiles") => match k.as_str() {
            "rate_limit" => keys_of::<RawRateLimit>(),
            "prepare" | "publish" => keys_of::<RawPhase>(),
            "limits" => keys_of::<RawLimits>(),
            "git" => keys_of::<RawGit>(),
            "slurm" => keys_of::<RawSlurm>(),
            _ => &[],
        },
        [s] if key(s, "shared_inbox") => keys_of::<RawSharedInbox>(),
        [r, Seg::Index(_)] if key(r, "route") => keys_of::<RawRoute>(),
        [n, Seg::Index(_)] if key(n, "notify") => keys_of::<RawNotify>(),
        _ => &[],
    }
}

/// The keys a struct of the raw shape accepts, as its derived
/// `Deserialize` declares them (so the list can never drift from it).
pub(super) fn keys_of<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut probe = KeysProbe(&[]);
    let _ = T::deserialize(&mut probe);
    probe.0
}

/// A deserializer that only notes the field names a struct asks for.
struct KeysProbe(&'static [&'static str]);

impl<'de> Deserializer<'de> for &mut KeysProbe {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("only a struct's keys are probed"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0 = fields;
        Err(de::Error::custom("keys noted"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<Problem> {
        let mut out = Vec::new();
        read(text, &mut out);
        out
    }

    #[test]
    fn every_unknown_key_is_named_with_its_path() {
        let got = problems(
            "max_jbos = 1\nfoo = 2\n[profiles.a]\ncomand = [\"x\"]\nlimits = { thread = 1 }\n\
             [[route]]\nmatch = \"x\"\nwork_dir = \"/\"\n",
        );
        let mut got = got;
        got.sort_by(|a, b| a.key.cmp(&b.key));
        let keys: Vec<&str> = got.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "foo",
                "max_jbos",
                "profiles.a.comand",
                "profiles.a.limits.thread",
                "route[0].work_dir"
            ]
        );
        assert!(
            got[1].message.contains("did you mean \"max_jobs\""),
            "{got:?}"
        );
        assert!(
            got[2].message.contains("did you mean \"command\""),
            "{got:?}"
        );
        assert!(!got[0].message.contains("did you mean"), "{got:?}");
        assert!(
            got[4].message.contains("keys here: match, profile"),
            "{got:?}"
        );
    }

    #[test]
    fn a_wrong_type_is_kept_for_the_validator() {
        let mut out = Vec::new();
        let raw = read("max_jobs = \"four\"\nevents = 3\n", &mut out).expect("read");
        assert!(out.is_empty(), "{out:?}");
        assert!(matches!(raw.max_jobs, Some(Loose::Wrong(ref w)) if w == "\"four\""));
        assert!(matches!(raw.events, Some(Loose::Wrong(ref w)) if w == "3"));
    }

    #[test]
    fn keys_are_those_serde_reads() {
        assert!(keys_of::<RawRoute>().contains(&"match"));
        assert!(keys_of::<RawConfig>().contains(&"route"));
        assert_eq!(keys_of::<RawPhase>(), ["command", "timeout"]);
    }
}
