//! `install.sh`, run for real: a `--user` install into a throwaway `HOME`, a
//! system install into throwaway folders (only when the tests run as root),
//! `--dry-run`, second runs that change nothing, uninstall and purge, its
//! refusals, and `systemd-analyze verify` on the units it renders.
//!
//! The binary installed is the one under test (`--binary`), so no release
//! build happens here. The script gets a cleared environment (no `XDG_*`, no
//! `JOBWARDEN_*`), so nothing of the machine's own setup leaks in.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::support::BIN;

mod generated_and_root;

const INSTALL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/install.sh");
const SOURCE: &str = env!("CARGO_MANIFEST_DIR");

/// A throwaway folder: `home/` is the `HOME` the script sees.
struct Scratch {
    _dir: tempfile::TempDir,
    base: PathBuf,
    home: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix("jw-install-")
            .tempdir()
            .expect("create tempdir");
        let base = dir.path().canonicalize().expect("canonicalize tempdir");
        let home = base.join("home");
        fs::create_dir(&home).expect("create home");
        Scratch {
            _dir: dir,
            base,
            home,
        }
    }

    /// `install.sh <args>` with `HOME` here and an otherwise empty
    /// environment; returns its output whatever its exit status.
    fn run(&self, args: &[&str]) -> Output {
        let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());
        Command::new(INSTALL)
            .args(args)
            .env_clear()
            .env("PATH", path)
            .env("HOME", &self.home)
            .env("LANG", "C")
            .current_dir(&self.base)
            .stdin(Stdio::null())
            .output()
            .expect("run install.sh")
    }

    /// [`Scratch::run`], asserting exit status 0; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "install.sh {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// `install.sh --user --binary <the binary under test> <args>`.
    fn user(&self, args: &[&str]) -> String {
        let mut all = vec!["--user", "--binary", BIN];
        all.extend_from_slice(args);
        self.ok(&all)
    }
}

/// Where a default `--user` install puts things under `home`.
struct UserLayout {
    bin: PathBuf,
    /// The sandbox's init, installed beside the binary.
    init: PathBuf,
    unit: PathBuf,
    scripts: PathBuf,
    examples: PathBuf,
    config: PathBuf,
    root: PathBuf,
    man: PathBuf,
    completions: [PathBuf; 3],
}

impl UserLayout {
    fn of(home: &Path) -> UserLayout {
        let local = home.join(".local");
        UserLayout {
            bin: local.join("bin/jobwarden"),
            init: local.join("bin/jobwarden-init"),
            unit: home.join(".config/systemd/user/jobwarden.service"),
            scripts: local.join("lib/jobwarden"),
            examples: local.join("share/doc/jobwarden/examples"),
            config: home.join(".config/jobwarden/config.toml"),
            root: local.join("share/jobwarden"),
            man: local.join("share/man/man1"),
            completions: [
                local.join("share/bash-completion/completions/jobwarden"),
                local.join("share/zsh/site-functions/_jobwarden"),
                local.join("share/fish/vendor_completions.d/jobwarden.fish"),
            ],
        }
    }
}

/// Explicit folders for a system install, all under `base`.
struct SystemLayout {
    prefix: PathBuf,
    root: PathBuf,
    config_dir: PathBuf,
    unit_dir: PathBuf,
}

impl SystemLayout {
    fn under(base: &Path) -> SystemLayout {
        SystemLayout {
            prefix: base.join("prefix"),
            root: base.join("state"),
            config_dir: base.join("etc"),
            unit_dir: base.join("units"),
        }
    }

    fn args<'a>(&'a self, user: &'a str) -> Vec<&'a str> {
        vec![
            "--binary",
            BIN,
            "--prefix",
            s(&self.prefix),
            "--root",
            s(&self.root),
            "--config-dir",
            s(&self.config_dir),
            "--unit-dir",
            s(&self.unit_dir),
            "--system-user",
            user,
        ]
    }

    fn unit(&self) -> PathBuf {
        self.unit_dir.join("jobwarden.service")
    }
}

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn read(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .mode()
        & 0o7777
}

/// The files the repository ships to `<prefix>/lib/jobwarden`.
fn shipped_scripts() -> Vec<String> {
    vec!["worktree-prepare".into(), "worktree-publish".into()]
}

/// The files the repository ships as examples.
fn shipped_examples() -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(Path::new(SOURCE).join("config/examples"))
        .expect("list config/examples")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.push("config.toml".into());
    names.sort();
    names
}

/// The value of the first `Key=` line of a unit file.
fn unit_value(unit: &str, key: &str) -> Option<String> {
    let prefix = format!("{key}=");
    unit.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(str::to_string)
}

/// Every `Environment=NAME=value` of a unit.
fn unit_env(unit: &str) -> Vec<(String, String)> {
    unit.lines()
        .filter_map(|l| l.strip_prefix("Environment="))
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// What a second run must leave alone: every entry below `dir` with its
/// kind, mode, inode, mtime and (for files) content.
type Snapshot = BTreeMap<PathBuf, (u32, u64, i64, i64, Option<Vec<u8>>)>;

fn snapshot(dir: &Path) -> Snapshot {
    let mut out = Snapshot::new();
    snapshot_into(dir, &mut out);
    out
}

fn snapshot_into(dir: &Path, out: &mut Snapshot) {
    for entry in fs::read_dir(dir).expect("read_dir").flatten() {
        let path = entry.path();
        let meta = fs::symlink_metadata(&path).expect("lstat");
        let content = meta.is_file().then(|| read(&path));
        let key = (
            meta.mode(),
            meta.ino(),
            meta.mtime(),
            meta.mtime_nsec(),
            content,
        );
        out.insert(path.clone(), key);
        if meta.is_dir() {
            snapshot_into(&path, out);
        }
    }
}

/// Lines of the script's output that report a change (not `unchanged:`,
/// `kept:` or a note).
fn change_lines(stdout: &str) -> Vec<&str> {
    const CHANGES: &[&str] = &[
        "install:",
        "mkdir:",
        "chmod ",
        "chown ",
        "remove:",
        "rmdir:",
        "useradd:",
        "groupadd:",
    ];
    stdout
        .lines()
        .filter(|l| CHANGES.iter().any(|c| l.starts_with(c)))
        .collect()
}

/// A user name no account has: `jw-test-` and 8 hex digits.
fn unique_name() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .subsec_nanos();
    let mixed = nanos ^ std::process::id().rotate_left(16);
    format!("jw-test-{mixed:08x}")
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// `getent DATABASE KEY` split into fields, `None` when there is no entry.
fn getent(database: &str, key: &str) -> Option<Vec<String>> {
    let out = Command::new("getent")
        .args([database, key])
        .output()
        .expect("run getent");
    out.status.success().then(|| {
        text(&out.stdout)
            .trim_end()
            .split(':')
            .map(str::to_string)
            .collect()
    })
}

/// Deletes a test account (user and group) on drop, whatever happened.
struct AccountGuard(String);

impl Drop for AccountGuard {
    fn drop(&mut self) {
        if getent("passwd", &self.0).is_some() {
            let _ = Command::new(sbin("userdel")).arg(&self.0).status();
        }
        if getent("group", &self.0).is_some() {
            let _ = Command::new(sbin("groupdel")).arg(&self.0).status();
        }
    }
}

/// An account tool by its full path when it is in `/usr/sbin` (which the
/// test's `PATH` may lack), else by name.
fn sbin(program: &str) -> PathBuf {
    let full = Path::new("/usr/sbin").join(program);
    if full.exists() {
        full
    } else {
        PathBuf::from(program)
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// `systemd-analyze verify` on `unit` (`--user` for a user unit, with a
/// runtime folder of its own). `None` when the tool is missing.
fn systemd_verify(scratch: &Scratch, unit: &Path, user: bool) -> Option<Output> {
    if !on_path("systemd-analyze") {
        return None;
    }
    let runtime = scratch.base.join("runtime");
    fs::create_dir_all(&runtime).expect("runtime dir");
    let mut cmd = Command::new("systemd-analyze");
    if user {
        cmd.arg("--user");
    }
    let out = cmd
        .args(["verify", "--man=no"])
        .arg(unit)
        .env("HOME", &scratch.home)
        .env("XDG_RUNTIME_DIR", &runtime)
        .stdin(Stdio::null())
        .output()
        .expect("run systemd-analyze");
    Some(out)
}

/// Asserts that verify accepted `unit` and said nothing about it.
fn assert_verified(out: &Output, unit: &Path) {
    let stderr = text(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify {} failed:\n{stderr}",
        unit.display()
    );
    let name = unit.file_name().expect("unit name").to_string_lossy();
    let about_it: Vec<&str> = stderr.lines().filter(|l| l.contains(&*name)).collect();
    assert!(
        about_it.is_empty(),
        "verify warned about the unit: {about_it:?}"
    );
}

// --- tests ----------------------------------------------------------------------

#[test]
fn dry_run_of_a_system_install_prints_every_action_and_creates_nothing() {
    let sc = Scratch::new();
    let target = sc.base.join("target");
    let layout = SystemLayout::under(&target);
    let user = unique_name();
    let mut args = vec!["--dry-run"];
    args.extend(layout.args(&user));
    let out = sc.ok(&args);

    let bin = layout.prefix.join("bin/jobwarden");
    let root = s(&layout.root);
    for expected in [
        format!("would install: {}", bin.display()),
        format!("would install: {}", layout.unit().display()),
        format!("would groupadd: {user}"),
        format!("would useradd: {user} (home {root})"),
        format!("would mkdir: {root}"),
        format!("would chmod 2770: {root}/inbox"),
        format!("would chown {user}:{user}: {root}/runs"),
        format!("would install: {}/config.toml", layout.config_dir.display()),
        format!(
            "would install: {}/lib/jobwarden/worktree-prepare",
            layout.prefix.display()
        ),
    ] {
        assert!(
            out.lines().any(|l| l == expected),
            "dry run did not say {expected:?}:\n{out}"
        );
    }
    assert!(
        change_lines(&out).is_empty(),
        "a dry run reported a change it made:\n{out}"
    );
    assert!(!target.exists(), "the dry run created {}", target.display());
    assert!(
        getent("passwd", &user).is_none(),
        "the dry run created {user}"
    );
    assert!(
        getent("group", &user).is_none(),
        "the dry run created group {user}"
    );
}

#[test]
fn user_install_puts_every_file_in_place_and_the_binary_runs() {
    let sc = Scratch::new();
    let out = sc.user(&[]);
    let at = UserLayout::of(&sc.home);

    assert_eq!(read(&at.bin), read(Path::new(BIN)), "installed binary");
    assert_eq!(mode(&at.bin), 0o755);
    let init_beside = Path::new(BIN).with_file_name("jobwarden-init");
    assert_eq!(
        read(&at.init),
        read(&init_beside),
        "the sandbox's init beside it"
    );
    assert_eq!(mode(&at.init), 0o755);
    for script in shipped_scripts() {
        let installed = at.scripts.join(&script);
        assert_eq!(
            read(&installed),
            read(&Path::new(SOURCE).join("scripts").join(&script))
        );
        assert_eq!(mode(&installed), 0o755, "{script}");
    }
    for example in shipped_examples() {
        assert!(
            at.examples.join(&example).is_file(),
            "example {example} missing"
        );
    }
    // The worktree example names the scripts where this install put them.
    let worktree = fs::read_to_string(at.examples.join("git-worktree.toml")).expect("example");
    let prepare = at.scripts.join("worktree-prepare");
    assert!(
        worktree.contains(s(&prepare)),
        "git-worktree.toml does not name {}",
        prepare.display()
    );
    // The shipped config, with `root` set to the root the install made.
    let shipped = fs::read_to_string(Path::new(SOURCE).join("config/config.toml")).expect("config");
    let expected = shipped.replace(
        "\n# root = \"/var/lib/jobwarden\"\n",
        &format!("\nroot = \"{}\"\n", at.root.display()),
    );
    assert_ne!(
        expected, shipped,
        "config/config.toml has no `# root = ...` line"
    );
    assert_eq!(text(&read(&at.config)), expected);
    assert_eq!(mode(&at.config), 0o600, "the config can hold tokens");
    for dir in ["", "inbox", "runs", "archive"] {
        let dir = at.root.join(dir);
        assert!(dir.is_dir(), "{} missing", dir.display());
        assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    }

    // The installed binary runs.
    let version = Command::new(&at.bin)
        .arg("--version")
        .output()
        .expect("run installed binary");
    assert!(version.status.success());
    let expected = Command::new(BIN)
        .arg("--version")
        .output()
        .expect("run binary");
    assert_eq!(text(&version.stdout), text(&expected.stdout));
    assert!(text(&version.stdout).starts_with("jobwarden "));

    // The unit runs that binary, on this root and this config.
    let unit = fs::read_to_string(&at.unit).expect("read unit");
    assert_eq!(
        unit_value(&unit, "ExecStart"),
        Some(format!("{} daemon", at.bin.display()))
    );
    assert_eq!(unit_value(&unit, "KillMode").as_deref(), Some("process"));
    assert_eq!(unit_value(&unit, "Type").as_deref(), Some("notify"));
    assert_eq!(unit_value(&unit, "User"), None, "a user unit has no User=");
    let check = Command::new(&at.bin)
        .args(["config", "check"])
        .env_clear()
        .envs(unit_env(&unit))
        .output()
        .expect("config check");
    assert!(
        check.status.success(),
        "config check with the unit's environment failed: {}",
        text(&check.stderr)
    );
    assert!(
        text(&check.stdout).contains(&format!("root: {}", at.root.display())),
        "the unit's environment does not select the installed root: {}",
        text(&check.stdout)
    );
    assert!(
        out.contains("systemctl --user enable --now jobwarden"),
        "{out}"
    );
}

#[test]
fn second_install_changes_nothing_and_says_unchanged() {
    let sc = Scratch::new();
    sc.user(&[]);
    let before = snapshot(&sc.home);
    let out = sc.user(&[]);
    let after = snapshot(&sc.home);

    let at = UserLayout::of(&sc.home);
    assert!(
        change_lines(&out).is_empty(),
        "the second run changed something:\n{out}"
    );
    for path in [
        &at.bin,
        &at.unit,
        &at.root,
        &at.scripts.join("worktree-publish"),
    ] {
        let line = format!("unchanged: {}", path.display());
        assert!(out.lines().any(|l| l == line), "no {line:?} in:\n{out}");
    }
    assert!(
        out.contains(&format!("kept: {}", at.config.display())),
        "{out}"
    );
    let changed: Vec<&PathBuf> = before
        .keys()
        .chain(after.keys())
        .filter(|p| before.get(*p) != after.get(*p))
        .collect();
    assert!(
        changed.is_empty(),
        "the second run touched (mtime, inode, mode or content): {changed:?}"
    );
}

#[test]
fn existing_config_is_kept_on_reinstall() {
    let sc = Scratch::new();
    sc.user(&[]);
    let config = UserLayout::of(&sc.home).config;
    let mut edited = fs::read_to_string(&config).expect("read config");
    edited.push_str("\n# an operator's edit\nmax_jobs = 2\n");
    fs::write(&config, &edited).expect("edit config");

    let out = sc.user(&[]);
    assert_eq!(fs::read_to_string(&config).expect("config"), edited);
    assert!(
        out.contains(&format!("kept: {}", config.display())),
        "{out}"
    );
}

#[test]
fn uninstall_keeps_root_and_config_and_purge_removes_them() {
    let sc = Scratch::new();
    sc.user(&[]);
    let at = UserLayout::of(&sc.home);
    let prompt = at.root.join("inbox/waiting.prompt.md");
    fs::write(&prompt, "still to do\n").expect("drop a prompt");

    let out = sc.ok(&["--user", "--uninstall"]);
    for gone in [&at.bin, &at.init, &at.unit, &at.scripts, &at.examples] {
        assert!(
            !gone.exists(),
            "{} survived --uninstall:\n{out}",
            gone.display()
        );
    }
    assert_eq!(
        read(&prompt),
        b"still to do\n",
        "the root must survive --uninstall"
    );
    assert!(at.config.is_file(), "the config must survive --uninstall");

    let again = sc.ok(&["--user", "--uninstall"]);
    assert!(change_lines(&again).is_empty(), "{again}");
    assert!(
        again.contains(&format!("absent: {}", at.bin.display())),
        "{again}"
    );

    let out = sc.ok(&["--user", "--uninstall", "--purge"]);
    assert!(!at.root.exists(), "--purge left the root:\n{out}");
    assert!(!at.config.exists(), "--purge left the config:\n{out}");
    assert!(!at.config.parent().expect("config dir").exists(), "{out}");
}

#[test]
fn purge_refuses_a_folder_that_is_not_a_jobwarden_root() {
    let sc = Scratch::new();
    let precious = sc.base.join("precious");
    fs::create_dir(&precious).expect("mkdir");
    fs::write(precious.join("thesis.tex"), "years of work").expect("write");

    let out = sc.run(&["--user", "--uninstall", "--purge", "--root", s(&precious)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("not a jobwarden root"),
        "{}",
        text(&out.stderr)
    );
    assert!(precious.join("thesis.tex").is_file());
}

#[test]
fn refuses_unknown_options_and_a_binary_that_is_not_executable() {
    let sc = Scratch::new();
    let out = sc.run(&["--user", "--frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("unknown option: --frobnicate"), "{stderr}");
    assert!(stderr.contains("Usage: install.sh"), "{stderr}");

    let not_executable = sc.base.join("jobwarden");
    fs::write(&not_executable, "not a program").expect("write");
    let out = sc.run(&["--user", "--binary", s(&not_executable)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is not an executable file"),
        "{}",
        text(&out.stderr)
    );
    let out = sc.run(&["--user", "--binary", s(&sc.base.join("missing"))]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        !sc.home.join(".local").exists(),
        "a refused install created files"
    );
}

#[test]
fn system_install_without_root_is_refused_with_a_hint() {
    let sc = Scratch::new();
    let layout = SystemLayout::under(&sc.base.join("target"));
    let user = unique_name();
    let mut cmd = if is_root() {
        // Run it as nobody; without setpriv there is no way to drop root here.
        if !on_path("setpriv") {
            eprintln!("skipped: running as root and setpriv is not installed");
            return;
        }
        // nobody may not reach the checkout (a private temporary folder):
        // run a copy from a folder anyone can read. The refusal comes
        // before the script looks for its sources.
        let public = sc.base.join("public");
        fs::create_dir_all(&public).expect("public dir");
        let copy = public.join("install.sh");
        fs::copy(INSTALL, &copy).expect("copy install.sh");
        for dir in [&sc.base, &public] {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&copy);
        cmd
    } else {
        Command::new(INSTALL)
    };
    let out = cmd
        .args(layout.args(&user))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &sc.home)
        .stdin(Stdio::null())
        .output()
        .expect("run install.sh");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("needs root"), "{stderr}");
    assert!(stderr.contains("--user"), "{stderr}");
    assert!(!sc.base.join("target").exists());
}

#[test]
fn system_install_creates_the_service_account_and_a_group_writable_root() {
    if !is_root() {
        eprintln!("skipped: a system install creates a user and a group, which needs root");
        return;
    }
    if !on_path("useradd") && !sbin("useradd").is_absolute() {
        eprintln!("skipped: useradd is not installed");
        return;
    }
    let sc = Scratch::new();
    let layout = SystemLayout::under(&sc.base);
    let name = unique_name();
    let _guard = AccountGuard(name.clone());
    let args = layout.args(&name);

    let out = sc.ok(&args);
    let user = getent("passwd", &name).unwrap_or_else(|| panic!("no user {name}:\n{out}"));
    let group = getent("group", &name).unwrap_or_else(|| panic!("no group {name}:\n{out}"));
    let (uid, gid): (u32, u32) = (
        user[2].parse().expect("uid"),
        group[2].parse().expect("gid"),
    );
    assert_eq!(
        user[3], group[2],
        "the user's primary group is its own group"
    );
    assert_eq!(user[5], s(&layout.root), "the user's home is the root");
    assert!(user[6].ends_with("nologin") || user[6] == "/bin/false");
    for dir in ["", "inbox", "runs", "archive"] {
        let dir = layout.root.join(dir);
        let meta = fs::metadata(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        assert_eq!(
            (meta.uid(), meta.gid()),
            (uid, gid),
            "owner of {}",
            dir.display()
        );
        assert_eq!(meta.mode() & 0o7777, 0o2770, "mode of {}", dir.display());
    }
    let config = fs::metadata(layout.config_dir.join("config.toml")).expect("config");
    assert_eq!((config.uid(), config.gid()), (0, gid), "config owner");
    assert_eq!(config.mode() & 0o7777, 0o640, "config mode");

    let unit = fs::read_to_string(layout.unit()).expect("unit");
    let bin = layout.prefix.join("bin/jobwarden");
    assert_eq!(
        unit_value(&unit, "ExecStart"),
        Some(format!("{} daemon", bin.display()))
    );
    assert_eq!(unit_value(&unit, "User").as_deref(), Some(name.as_str()));
    assert_eq!(unit_value(&unit, "Group").as_deref(), Some(name.as_str()));
    assert!(
        unit_value(&unit, "ReadWritePaths").is_some_and(|v| v.starts_with(s(&layout.root))),
        "ReadWritePaths does not open the root"
    );
    // The root is outside /var/lib, where StateDirectory= cannot point.
    assert_eq!(unit_value(&unit, "StateDirectory"), None);
    match systemd_verify(&sc, &layout.unit(), false) {
        Some(verified) => assert_verified(&verified, &layout.unit()),
        None => eprintln!("verify skipped: systemd-analyze is not installed"),
    }

    let before = snapshot(&sc.base);
    let again = sc.ok(&args);
    assert!(change_lines(&again).is_empty(), "{again}");
    assert_eq!(
        before,
        snapshot(&sc.base),
        "the second system install touched files"
    );

    let mut purge = args.clone();
    purge.extend(["--uninstall", "--purge"]);
    let out = sc.ok(&purge);
    assert!(getent("passwd", &name).is_none(), "user left:\n{out}");
    assert!(getent("group", &name).is_none(), "group left:\n{out}");
    assert!(!layout.root.exists(), "root left:\n{out}");
    assert!(!bin.exists() && !layout.unit().exists(), "{out}");
}

#[test]
fn installed_units_pass_systemd_analyze_verify() {
    if !on_path("systemd-analyze") {
        eprintln!("skipped: systemd-analyze is not installed");
        return;
    }
    let sc = Scratch::new();
    sc.user(&[]);
    let user_unit = UserLayout::of(&sc.home).unit;
    let out = systemd_verify(&sc, &user_unit, true).expect("systemd-analyze");
    assert_verified(&out, &user_unit);
    // The web page's unit beside it.
    let web_unit = user_unit.with_file_name("jobwarden-web.service");
    let out = systemd_verify(&sc, &web_unit, true).expect("systemd-analyze");
    assert_verified(&out, &web_unit);

    // The system unit as shipped, with ExecStart and ExecReload on a binary that exists
    // (verify checks it) and otherwise untouched: the installer only
    // rewrites paths and names. Root-only installs verify their own render.
    let template =
        fs::read_to_string(Path::new(SOURCE).join("systemd/jobwarden.service")).expect("unit");
    let system_unit = sc.base.join("jobwarden.service");
    let rendered = template
        .replace(
            "ExecStart=/usr/local/bin/jobwarden daemon",
            &format!("ExecStart={BIN} daemon"),
        )
        .replace(
            "ExecReload=/usr/local/bin/jobwarden reload",
            &format!("ExecReload={BIN} reload"),
        );
    assert_ne!(rendered, template, "the shipped unit's ExecStart changed");
    fs::write(&system_unit, rendered).expect("write unit copy");
    let out = systemd_verify(&sc, &system_unit, false).expect("systemd-analyze");
    assert_verified(&out, &system_unit);

    let web_template =
        fs::read_to_string(Path::new(SOURCE).join("systemd/jobwarden-web.service")).expect("unit");
    let web_unit = sc.base.join("jobwarden-web.service");
    let rendered = web_template.replace(
        "ExecStart=/usr/local/bin/jobwarden web",
        &format!("ExecStart={BIN} web"),
    );
    assert_ne!(
        rendered, web_template,
        "the shipped web unit's ExecStart changed"
    );
    fs::write(&web_unit, rendered).expect("write unit copy");
    let out = systemd_verify(&sc, &web_unit, false).expect("systemd-analyze");
    assert_verified(&out, &web_unit);

    // And verify does look: a unit whose binary is missing is refused.
    let broken = sc.base.join("broken.service");
    fs::write(
        &broken,
        template.replace(
            "/usr/local/bin/jobwarden",
            &format!("{}/nothing", sc.base.display()),
        ),
    )
    .expect("write broken unit");
    let out = systemd_verify(&sc, &broken, false).expect("systemd-analyze");
    assert!(
        !out.status.success(),
        "verify accepted a unit whose ExecStart does not exist"
    );
}
