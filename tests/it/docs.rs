//! Docs that cannot drift: what is generated from the command-line
//! definitions (completions, manual pages, `docs/cli-reference.md`) comes
//! out of the real binary, and the claims the docs make about the binary
//! (front-matter keys, which commands take `--json`, that every option is
//! explained) are compared with the code they describe.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

use clap::CommandFactory;

use crate::support::*;

fn checkout() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn doc(path: &str) -> String {
    fs::read_to_string(checkout().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// `jobwarden <args>` outside any root (these commands need none).
fn bin(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env_remove("JOBWARDEN_HOME")
        .env_remove("JOBWARDEN_CONFIG")
        .output()
        .expect("run jobwarden");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every visible command, by its full name (`history list`), with the tree
/// as clap builds it.
fn commands() -> Vec<clap::Command> {
    fn walk(cmd: &clap::Command, out: &mut Vec<clap::Command>) {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            out.push(sub.clone());
            walk(sub, out);
        }
    }
    // As the generators see it: `help` is clap's, not a command of ours.
    let mut root = jobwarden::cli::Cli::command().disable_help_subcommand(true);
    root.build();
    let mut out = vec![root.clone()];
    walk(&root, &mut out);
    out
}

fn full_name(cmd: &clap::Command) -> String {
    let name = cmd.get_bin_name().unwrap_or(cmd.get_name());
    name.strip_prefix("jobwarden ").unwrap_or(name).to_owned()
}

#[test]
fn completions_for_each_shell_register_the_binary_which_names_the_commands() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (code, script, stderr) = bin(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {stderr}");
        assert!(
            script.contains(&format!("COMPLETE=\"{shell}\""))
                || script.contains(&format!("COMPLETE={shell}"))
                || script.contains(&format!("$env:COMPLETE = \"{shell}\"")),
            "{shell}: a registration that asks the binary: {script}"
        );
        assert!(script.contains("jobwarden"), "{shell}: {script}");
        assert!(
            !script.contains(BIN),
            "{shell}: names the program, not where it was made from: {script}"
        );
    }
    // What the registration gets when the shell asks for the commands.
    let out = Command::new(BIN)
        .args(["--", "jobwarden", ""])
        .env("COMPLETE", "fish")
        .output()
        .expect("run jobwarden");
    let offered = String::from_utf8_lossy(&out.stdout);
    let words: Vec<&str> = offered
        .lines()
        .filter_map(|l| l.split('\t').next())
        .collect();
    for word in ["submit", "abort", "history", "--root"] {
        assert!(words.contains(&word), "{word:?} offered: {words:?}");
    }
    for hidden in ["monitor", "cli-reference"] {
        assert!(
            !words.contains(&hidden),
            "hidden {hidden:?} offered: {words:?}"
        );
    }
    let (code, _, stderr) = bin(&["completions", "tcsh"]);
    assert_eq!(code, 2, "an unknown shell is a usage error");
    assert!(stderr.contains("bash"), "the shells are listed: {stderr}");
}

/// The flags every command accepts.
const GLOBAL_FLAGS: [&str; 3] = ["--root <DIR>", "--config <FILE>", "--log-format <FORMAT>"];

#[test]
fn each_commands_help_lists_its_own_options_before_the_global_ones() {
    for cmd in commands() {
        let name = full_name(&cmd);
        let mut args: Vec<&str> = name.split(' ').filter(|w| *w != "jobwarden").collect();
        for flag in ["-h", "--help"] {
            args.push(flag);
            let (code, help, stderr) = bin(&args);
            args.pop();
            assert_eq!(code, 0, "{name} {flag}: {stderr}");
            let (own, global) = help.split_once("\nGlobal options:\n").unwrap_or_else(|| {
                panic!("{name} {flag}: no \"Global options:\" heading:\n{help}")
            });
            for g in GLOBAL_FLAGS {
                assert!(
                    global.contains(g),
                    "{name} {flag}: {g} under the heading:\n{help}"
                );
                assert!(
                    !own.contains(g),
                    "{name} {flag}: {g} among its own:\n{help}"
                );
            }
            assert!(
                own.contains("--help") && !global.contains("--help"),
                "{name} {flag}: its own options first:\n{help}"
            );
        }
    }
    let (_, show, _) = bin(&["show", "--help"]);
    let own = show.find("--json").expect("show's --json");
    let heading = show.find("Global options:").expect("the heading");
    assert!(own < heading, "{show}");
}

#[test]
fn man_prints_roff_naming_every_command() {
    let (code, page, stderr) = bin(&["man"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(page.contains(".TH jobwarden 1"), "roff title: {page}");
    for section in [".SH NAME", ".SH SYNOPSIS", ".SH OPTIONS", ".SH SUBCOMMANDS"] {
        assert!(page.contains(section), "no {section} in:\n{page}");
    }
    for cmd in commands()
        .iter()
        .skip(1)
        .filter(|c| !full_name(c).contains(' '))
    {
        let reference = format!("jobwarden\\-{}(1)", cmd.get_name().replace('-', "\\-"));
        assert!(page.contains(&reference), "no {reference} in the page");
    }
    assert!(
        page.contains("Exit status"),
        "the exit codes are in the page"
    );
}

#[test]
fn man_out_dir_writes_a_page_per_command() {
    let sb = Sandbox::new();
    let dir = sb.base.join("man/man1");
    let (code, listed, stderr) = bin(&["man", "--out-dir", &dir.display().to_string()]);
    assert_eq!(code, 0, "{stderr}");
    let mut expected: BTreeSet<String> = commands()
        .iter()
        .skip(1)
        .map(|c| format!("jobwarden-{}.1", full_name(c).replace(' ', "-")))
        .collect();
    expected.insert("jobwarden.1".into());
    let written: BTreeSet<String> = fs::read_dir(&dir)
        .expect("man dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(written, expected);
    assert!(expected.contains("jobwarden-history-list.1"));
    assert_eq!(listed.lines().count(), written.len(), "{listed}");
    let submit = fs::read_to_string(dir.join("jobwarden-submit.1")).expect("submit page");
    assert!(submit.contains("\\-\\-wait"), "{submit}");
}

/// `docs/cli-reference.md` is what the binary renders today. To bring it up
/// to date: `cargo run -q -- cli-reference > docs/cli-reference.md`, or run
/// this test with `JOBWARDEN_BLESS=1`.
#[test]
fn cli_reference_in_docs_is_up_to_date() {
    let (code, rendered, stderr) = bin(&["cli-reference"]);
    assert_eq!(code, 0, "{stderr}");
    let path = checkout().join("docs/cli-reference.md");
    if std::env::var_os("JOBWARDEN_BLESS").is_some_and(|v| v == "1") {
        fs::write(&path, &rendered).expect("write docs/cli-reference.md");
        return;
    }
    let committed = fs::read_to_string(&path).unwrap_or_default();
    if committed != rendered {
        let line = committed
            .lines()
            .zip(rendered.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(committed.lines().count().min(rendered.lines().count()));
        panic!(
            "docs/cli-reference.md is stale (first difference at line {}); regenerate it with\n  \
             cargo run -q -- cli-reference > docs/cli-reference.md\nor\n  \
             JOBWARDEN_BLESS=1 cargo test --test it cli_reference",
            line + 1
        );
    }
    for cmd in commands().iter().skip(1) {
        let heading = format!(" jobwarden {}\n", full_name(cmd));
        assert!(committed.contains(&heading), "no heading for {heading:?}");
    }
}

#[test]
fn every_visible_option_and_argument_is_explained() {
    let mut bare = Vec::new();
    for cmd in commands() {
        if cmd.get_about().is_none() && cmd.get_bin_name() != Some("jobwarden") {
            bare.push(format!("{} (the command)", full_name(&cmd)));
        }
        for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
            if arg.get_help().is_none() && arg.get_long_help().is_none() {
                bare.push(format!("{} {}", full_name(&cmd), arg.get_id()));
            }
        }
    }
    assert!(bare.is_empty(), "without help text: {bare:?}");
}

/// The keys of the front-matter table in docs/on-disk.md are exactly the
/// parser's, and the README names each of them.
#[test]
fn front_matter_keys_in_docs_are_the_parsers() {
    let on_disk = doc("docs/on-disk.md");
    let start = on_disk
        .find("\n## Front matter\n")
        .expect("a Front matter section");
    let section = &on_disk[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let documented: BTreeSet<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .collect();
    let parsed: BTreeSet<&str> = jobwarden_model::front_matter::KEYS
        .iter()
        .copied()
        .collect();
    assert_eq!(documented, parsed, "docs/on-disk.md's front-matter table");
    let readme = doc("README.md");
    let start = readme
        .find("\n### Front matter\n")
        .expect("README: Front matter");
    let section = &readme[start..];
    let section = &section[..section[5..].find("\n#").map_or(section.len(), |i| i + 5)];
    for key in parsed {
        assert!(
            section.contains(&format!("`{key}`")),
            "README's Front matter section does not name `{key}`"
        );
    }
}

/// docs/cli-json.md lists the commands that take `--json`; it is the list
/// the command line has.
#[test]
fn json_commands_in_docs_are_the_ones_that_take_json() {
    let text = doc("docs/cli-json.md");
    let marker = "`--json` is taken by:";
    let line = text
        .lines()
        .skip_while(|l| !l.starts_with(marker))
        .take_while(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(!line.is_empty(), "docs/cli-json.md has no line {marker:?}");
    let list = &line[marker.len()..];
    let documented: BTreeSet<String> = list[..list.find('.').unwrap_or(list.len())]
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    let actual: BTreeSet<String> = commands()
        .iter()
        .filter(|c| c.get_arguments().any(|a| a.get_id() == "json"))
        .map(full_name)
        .collect();
    assert_eq!(documented, actual, "the commands with --json");
    let readme = doc("README.md");
    assert!(
        !readme.contains("Every command has `--json`"),
        "README claims every command has --json"
    );
}

/// The docs name the exit codes of `route` as the command has them: 0 a
/// route or the default, 1 a prompt that would be rejected, 2 a path that
/// is no prompt.
#[test]
fn route_exit_codes_are_as_documented() {
    let sb = Sandbox::new();
    sb.write_config(
        "[profiles.default]\ncommand = [\"true\"]\n[profiles.repo]\ncommand = [\"r\", \"{repo}\"]\n\
         [[route]]\nmatch = \"{repo}/**\"\nprofile = \"repo\"\n",
    );
    assert_eq!(sb.run(&["route", "api/fix.prompt.md"]).code(), 0);
    assert_eq!(sb.run(&["route", "fix.prompt.md"]).code(), 0);
    let bad_name = sb.run(&["route", "api/-x.prompt.md", "--json"]);
    assert_eq!(bad_name.code(), 1, "{bad_name:?}");
    let shown: serde_json::Value = serde_json::from_str(&bad_name.stdout).expect("JSON");
    assert!(shown["rejected"].is_string(), "{shown}");
    assert_eq!(sb.run(&["route", "api/.hidden.prompt.md"]).code(), 2);
    let docs = doc("docs/cli-json.md");
    let section = &docs[docs.find("## `jobwarden route").expect("route section")..];
    for claim in ["(exit 1)", "exit 2"] {
        assert!(section.contains(claim), "route's docs lack {claim:?}");
    }
}

/// Every ledger outcome is named where the help and the docs list them, so
/// that a new outcome cannot be added without them.
#[test]
fn outcome_names_in_help_and_docs_are_the_ledgers() {
    let outcomes: Vec<&str> = jobwarden_ledger::Outcome::ALL
        .iter()
        .map(|o| o.as_str())
        .collect();
    let mut places: Vec<(String, String)> = Vec::new();
    for cmd in commands() {
        let name = full_name(&cmd);
        for arg in cmd.get_arguments() {
            if (name == "history list" && arg.get_id() == "outcome")
                || (name == "history record" && arg.get_id() == "outcome")
            {
                let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                places.push((format!("{name} {} help", arg.get_id()), help));
            }
        }
    }
    assert_eq!(places.len(), 2, "{places:?}");
    for (path, marker) in [
        ("docs/history-json.md", "| `outcome` "),
        ("docs/on-disk.md", "| `outcome` "),
    ] {
        let line = doc(path)
            .lines()
            .find(|l| l.starts_with(marker))
            .unwrap_or_else(|| panic!("{path} has no row {marker:?}"))
            .to_owned();
        places.push((path.to_owned(), line));
    }
    for (place, text) in &places {
        for outcome in &outcomes {
            assert!(
                text.contains(outcome),
                "{place} does not name outcome {outcome:?}: {text}"
            );
        }
    }
}
