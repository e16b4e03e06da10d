//! The house's layers hold: the workspace's crates depend only downwards
//! (`cargo metadata`, against the table of DESIGN §14 and
//! `docs/architecture.md`), and inside each crate no two top-level modules
//! import each other, however indirectly (the tree read as text, as the
//! cycle checker beside the project reads it). A new crate must be placed
//! in the table before it can land.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Each crate of the workspace and the crates of ours it may use.
const MAY_USE: &[(&str, &[&str])] = &[
    ("jobwarden-sys", &[]),
    ("jobwarden-model", &["jobwarden-sys"]),
    ("jobwarden-ledger", &["jobwarden-model", "jobwarden-sys"]),
    (
        "jobwarden-engine",
        &["jobwarden-ledger", "jobwarden-model", "jobwarden-sys"],
    ),
    ("jobwarden-monitor", ENGINE_AND_BELOW),
    ("jobwarden-daemon", ENGINE_AND_BELOW),
    ("jobwarden-web", ENGINE_AND_BELOW),
    (
        "jobwarden",
        &[
            "jobwarden-daemon",
            "jobwarden-monitor",
            "jobwarden-web",
            "jobwarden-engine",
            "jobwarden-ledger",
            "jobwarden-model",
            "jobwarden-sys",
        ],
    ),
    (
        "jobwarden-bench",
        &[
            "jobwarden",
            "jobwarden-ledger",
            "jobwarden-model",
            "jobwarden-sys",
        ],
    ),
];

const ENGINE_AND_BELOW: &[&str] = &[
    "jobwarden-engine",
    "jobwarden-ledger",
    "jobwarden-model",
    "jobwarden-sys",
];

/// What the model never links: a database, a runtime that schedules or
/// spawns, a network client or server.
const NEVER_IN_MODEL: &[&str] = &[
    "rusqlite",
    "tokio",
    "tokio-util",
    "notify",
    "reqwest",
    "axum",
];

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every package of the workspace: its name, its manifest's folder, and
/// the names of what it depends on (every kind: normal, build, dev).
fn packages() -> Vec<(String, PathBuf, BTreeSet<String>)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace())
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {out:?}");
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let name = p["name"].as_str().expect("name").to_owned();
            let manifest = PathBuf::from(p["manifest_path"].as_str().expect("manifest"));
            let dir = manifest.parent().expect("manifest folder").to_path_buf();
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .map(|d| d["name"].as_str().expect("dependency name").to_owned())
                .collect();
            (name, dir, deps)
        })
        .collect()
}

#[test]
fn every_crate_depends_only_on_the_floors_below_it() {
    let table: BTreeMap<&str, &[&str]> = MAY_USE.iter().copied().collect();
    let packages = packages();
    assert_eq!(
        packages.len(),
        table.len(),
        "the workspace's crates and the table differ: {:?}",
        packages.iter().map(|p| &p.0).collect::<Vec<_>>()
    );
    let mut wrong = Vec::new();
    for (name, _, deps) in &packages {
        let Some(allowed) = table.get(name.as_str()) else {
            wrong.push(format!("{name} is in no floor: place it in MAY_USE"));
            continue;
        };
        for dep in deps.iter().filter(|d| d.starts_with("jobwarden")) {
            if !allowed.contains(&dep.as_str()) {
                wrong.push(format!("{name} depends on {dep}"));
            }
        }
        if name == "jobwarden-model" {
            for dep in deps.iter().filter(|d| NEVER_IN_MODEL.contains(&d.as_str())) {
                wrong.push(format!("{name} depends on {dep}"));
            }
        }
    }
    assert!(wrong.is_empty(), "layers broken:\n{}", wrong.join("\n"));
}

/// The top-level modules of a crate whose source is at `src`: `x.rs` and
/// `x/` (one module), `lib.rs` and `main.rs` aside.
fn modules(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .expect("src folder")
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let module = match name.strip_suffix(".rs") {
                Some(stem) => stem.to_owned(),
                None if e.path().is_dir() => name,
                None => return None,
            };
            (!matches!(module.as_str(), "lib" | "main" | "bin")).then_some(module)
        })
        .collect()
}

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for e in std::fs::read_dir(path).expect("folder").flatten() {
            rust_files(&e.path(), out);
        }
    } else if path.is_file() && path.extension().is_some_and(|x| x == "rs") {
        out.push(path.to_path_buf());
    }
}

/// Which top-level modules each top-level module of the crate at `src`
/// names (`crate::x`, anywhere in its files, comments included).
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules(src);
    let mut edges = BTreeMap::new();
    for module in &modules {
        let mut files = Vec::new();
        rust_files(&src.join(format!("{module}.rs")), &mut files);
        rust_files(&src.join(module), &mut files);
        let mut named = BTreeSet::new();
        for file in files {
            let text = std::fs::read_to_string(&file).expect("source file");
            for (at, _) in text.match_indices("crate::") {
                let rest = &text[at + "crate::".len()..];
                let word: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if word != *module && modules.contains(&word) {
                    named.insert(word);
                }
            }
        }
        edges.insert(module.clone(), named);
    }
    edges
}

/// The cycles among `edges`: each strongly connected set of more than one
/// module (Tarjan's algorithm).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in &self.edges[v] {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut set = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    set.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if set.len() > 1 {
                    set.sort();
                    self.found.push(set);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

#[test]
fn no_crate_has_an_import_cycle_between_its_top_level_modules() {
    let mut found = Vec::new();
    for (name, dir, _) in packages() {
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        let edges = imports(&src);
        for cycle in cycles(&edges) {
            let arrows: Vec<String> = cycle
                .iter()
                .flat_map(|m| {
                    edges[m]
                        .iter()
                        .filter(|to| cycle.contains(to))
                        .map(move |to| format!("{m} → {to}"))
                })
                .collect();
            found.push(format!("{name}: {}", arrows.join(", ")));
        }
    }
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn the_cycle_finder_finds_a_cycle_and_only_a_cycle() {
    let edges = |pairs: &[(&str, &[&str])]| -> BTreeMap<String, BTreeSet<String>> {
        pairs
            .iter()
            .map(|(m, to)| (m.to_string(), to.iter().map(|s| s.to_string()).collect()))
            .collect()
    };
    let ring = edges(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"]), ("d", &["a"])]);
    assert_eq!(cycles(&ring), vec![vec!["a", "b", "c"]]);
    let line = edges(&[("a", &["b"]), ("b", &["c"]), ("c", &[]), ("d", &["a", "c"])]);
    assert!(cycles(&line).is_empty());
}

/// The map a crate's root file opens with: its leading `//!` lines.
fn map_of(root_file: &Path) -> String {
    let text = std::fs::read_to_string(root_file).expect("crate root");
    text.lines()
        .take_while(|l| l.starts_with("//!"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn each_crate_opens_with_a_map_of_its_modules_at_most_30_lines_long() {
    let mut wrong = Vec::new();
    for (name, dir, _) in packages() {
        let src = dir.join("src");
        let Some(root_file) = ["lib.rs", "main.rs"]
            .iter()
            .map(|f| src.join(f))
            .find(|f| f.is_file())
        else {
            continue;
        };
        let map = map_of(&root_file);
        let lines = map.lines().count();
        if lines == 0 || lines > 30 {
            wrong.push(format!("{name}: its map is {lines} lines long"));
        }
        for module in modules(&src) {
            let named = [
                format!("[`{module}`]"),
                format!("`{module}.rs`"),
                format!("`{module}/`"),
            ];
            if !named.iter().any(|n| map.contains(n.as_str())) {
                wrong.push(format!("{name}: its map does not name `{module}`"));
            }
        }
    }
    assert!(wrong.is_empty(), "maps out of date:\n{}", wrong.join("\n"));
}
