//! The dashboard in a real headless Chromium, as an operator keeps it open
//! (1280 × 800) and on a phone (390 × 844), against a real daemon and real
//! jobs: the list's filters hold under live updates and a click on a row
//! lands while other rows change; a job's page follows its log, shows its
//! colours, and its state changes without a reload, the stream closed at
//! the end; every page fits a phone's width, logs no console error, and
//! an accessibility audit (axe-core, fetched from the npm registry and
//! checked against its published digest) finds nothing serious or
//! critical. Screenshots of each page at both widths are written to
//! `target/screenshots/`.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

use crate::browser::{Browser, log_in};
use crate::support::*;

/// The axe-core release the audit runs, and its registry digest.
const AXE_VERSION: &str = "4.10.3";
const AXE_SHA512: &str =
    "Xm7bpRXnDSX2YE2YFfBk2FnF0ep6tmG7xPh8iHee8MIcrgq762Nkce856dYtJYLkuIoYZvGfTs/PbZhideTcEg==";

/// `axe.min.js`, fetched once into `target/` and checked; `None` (said)
/// where it cannot be had outside CI.
fn axe() -> Option<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/axe-core");
    let script = dir.join(format!("axe-{AXE_VERSION}.min.js"));
    if let Ok(text) = std::fs::read_to_string(&script) {
        return Some(text);
    }
    let fetched = fetch_axe(&dir, &script);
    if let Err(why) = &fetched {
        assert!(
            std::env::var_os("CI").is_none(),
            "under CI the accessibility audit must run: {why}"
        );
        say(&format!("SKIPPED: the accessibility audit: {why}"));
    }
    fetched.ok()
}

fn fetch_axe(dir: &std::path::Path, script: &std::path::Path) -> Result<String, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let tgz = dir.join(format!("axe-core-{AXE_VERSION}.tgz"));
    let url = format!("https://registry.npmjs.org/axe-core/-/axe-core-{AXE_VERSION}.tgz");
    let run = |cmd: &mut Command| -> Result<Vec<u8>, String> {
        let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(format!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr)))
        }
    };
    run(Command::new("curl")
        .args(["-fsSL", "-o"])
        .arg(&tgz)
        .arg(&url))?;
    let digest = run(Command::new("sh").arg("-c").arg(format!(
        "openssl dgst -sha512 -binary '{}' | base64 -w0",
        tgz.display()
    )))?;
    if String::from_utf8_lossy(&digest).trim() != AXE_SHA512 {
        return Err(format!("{url}: its digest is not the registry's"));
    }
    let text = run(Command::new("tar")
        .args(["-xzOf"])
        .arg(&tgz)
        .arg("package/axe.min.js"))?;
    #[allow(clippy::disallowed_methods)] // a test artefact
    std::fs::write(script, &text).map_err(|e| format!("{}: {e}", script.display()))?;
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// The serious and critical violations axe finds on the page shown.
fn audit(browser: &Browser, axe: &str) -> Vec<String> {
    browser.script(&format!("{axe}\nreturn true;"));
    let found = browser.script_async(
        "const done = arguments[arguments.length - 1];\
         axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations), e => done([{id: 'axe failed', impact: 'critical', help: String(e), nodes: []}]));",
    );
    found
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| matches!(v["impact"].as_str(), Some("serious" | "critical")))
        .map(|v| {
            let targets: Vec<String> = v["nodes"]
                .as_array()
                .into_iter()
                .flatten()
                .take(3)
                .map(|n| n["target"].to_string())
                .collect();
            format!("{}: {} at {}", v["id"], v["help"], targets.join(", "))
        })
        .collect()
}

/// A row's key marked in the page, to tell later whether it was replaced.
fn mark(browser: &Browser, key: &str) {
    let js =
        format!("document.querySelector('tr[data-key=\"{key}\"]').__kept = true; return true;");
    browser.script(&js);
}

fn still_marked(browser: &Browser, key: &str) -> bool {
    let js = format!(
        "const tr = document.querySelector('tr[data-key=\"{key}\"]'); return !!(tr && tr.__kept);"
    );
    browser.script(&js) == json!(true)
}

#[test]
fn the_list_keeps_its_filters_and_a_click_lands_while_rows_change() {
    let Some(browser) = Browser::start() else {
        return;
    };
    browser.resize(1280, 800);
    let sb = Sandbox::new();
    let gated = sb.script(
        "gated",
        r#"cat >/dev/null; while [ ! -e "$OUT/release-$JOBWARDEN_NAME" ]; do sleep 0.05; done"#,
    );
    sb.configure(
        &ConfigToml::new(&["/bin/sh", "-c", "cat >/dev/null"]).extra(&format!(
            "[profiles.slow]\ncommand = [\"/bin/sh\", {}]\n",
            q(&gated)
        )),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("p", "quick", "x\n");
    sb.drop_prompt("p", "done-slow", "---\nprofile: slow\n---\nx\n");
    std::fs::write(sb.out().join("release-done-slow"), "").expect("release");
    sb.wait_done("p", "quick", secs(20));
    let done = sb.wait_done("p", "done-slow", secs(20));
    sb.drop_prompt("p", "held", "---\nprofile: slow\n---\nx\n");
    let held = sb.wait_state("p", "held", "running", secs(20));
    let served = log_in(&browser, &sb);
    let base = &served.base;

    browser.go(&format!("{base}/jobs?profile=slow"));
    browser.must(&format!("tr[data-key=\"{}\"]", held.id));
    mark(&browser, &done.id);
    // The live list keeps its filter while a row of it changes: the held
    // job ends, its row says so, the other row stays the node it was.
    std::fs::write(sb.out().join("release-held"), "").expect("release");
    wait_until("the held job's row to say it succeeded", secs(20), || {
        browser
            .text(&format!("tr[data-key=\"{}\"]", held.id))
            .contains("succeeded")
            .then_some(())
    });
    assert_never("a row of another profile", secs(5), || {
        browser.text("#rows").contains("p/quick")
    });
    assert!(
        still_marked(&browser, &done.id),
        "an unchanged row was replaced"
    );
    // A click on a row that did not change lands at once.
    browser.click(&format!("tr[data-key=\"{}\"] a", done.id));
    wait_until("the job's page", secs(10), || {
        browser
            .script("return location.pathname;")
            .as_str()
            .is_some_and(|p| p == format!("/jobs/{}", done.id))
            .then_some(())
    });
    let errors = browser.console_errors();
    assert!(errors.is_empty(), "console errors: {errors:?}");
}

#[test]
fn a_job_page_follows_its_log_in_colour_and_its_state_live_to_the_end() {
    let Some(browser) = Browser::start() else {
        return;
    };
    browser.resize(1280, 800);
    let sb = Sandbox::new();
    let job = sb.script(
        "job",
        r#"cat >/dev/null; i=0; while :; do i=$((i+1)); printf '\033[31mred %s\033[0m\r\n' $i; sleep 0.02; done"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("p", "colours", "x\n");
    let job = sb.wait_state("p", "colours", "running", secs(20));
    let served = log_in(&browser, &sb);
    let base = &served.base;
    browser.go(&format!("{base}/jobs/{}", job.id));
    browser.script("window.__stayed = true; return true;");
    wait_until("the log to grow on the page", secs(20), || {
        (browser.text("#log").lines().count() >= 10).then_some(())
    });
    // Colours as the program asked, lines not doubled by CR LF.
    let colour =
        browser.script("return getComputedStyle(document.querySelector('#log .c1')).color;");
    assert_eq!(colour, json!("rgb(207, 34, 46)"), "red is red");
    let text = browser.text("#log");
    assert!(
        !text.contains('\u{fffd}') && !text.contains("[31m"),
        "{text}"
    );
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines.windows(2).all(|w| w[0] != w[1]),
        "no line doubled: {lines:?}"
    );
    browser.screenshot("job-running-wide.png");

    // The reader at the end is followed as lines come; one who scrolled up
    // is left where they are.
    let lines_now = || browser.script("return document.querySelectorAll('#log .l').length;");
    let count = |v: Value| v.as_u64().unwrap_or(0);
    wait_until("the log to be longer than the window", secs(30), || {
        (browser.script("return document.body.scrollHeight > window.innerHeight + 200;")
            == json!(true))
        .then_some(())
    });
    browser.script("window.scrollTo(0, document.body.scrollHeight); return true;");
    let seen = count(lines_now());
    wait_until("more lines, followed to the end", secs(20), || {
        let at_end = browser.script(
            "return window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;",
        ) == json!(true);
        (count(lines_now()) > seen + 3 && at_end).then_some(())
    });
    browser.script("window.scrollTo(0, 0); return true;");
    let seen = count(lines_now());
    wait_until("more lines while the reader reads above", secs(20), || {
        (count(lines_now()) > seen + 3).then_some(())
    });
    assert_eq!(
        browser.script("return window.scrollY;"),
        json!(0),
        "left where they read"
    );
    // Search: lines without the text hidden, those with it shown.
    browser.type_into("#log-search", "red 1");
    let shown = browser.script(
        "return Array.from(document.querySelectorAll('#log .l')).filter(l => !l.hidden).map(l => l.textContent);",
    );
    let shown: Vec<String> = shown
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    assert!(
        !shown.is_empty() && shown.iter().all(|l| l.contains("red 1")),
        "{shown:?}"
    );

    // Abort: the page says it was asked; the state follows without a
    // reload, the abort button goes, and the stream closes.
    browser.click("form[action$='/abort'] button");
    wait_until("the notice", secs(10), || {
        browser.find(".notice").map(|_| ())
    });
    assert!(browser.text(".notice").contains("Abort asked"));
    browser.script("window.__stayed = true; return true;");
    wait_until("the header to say aborted", secs(20), || {
        browser.text("#state").contains("aborted").then_some(())
    });
    assert_eq!(
        browser.script("return window.__stayed === true;"),
        json!(true),
        "no reload"
    );
    wait_until("the abort button to go", secs(5), || {
        browser
            .find("form[action$='/abort'] button")
            .is_none()
            .then_some(())
    });
    let aborted =
        browser.script("return getComputedStyle(document.querySelector('#state .state')).color;");
    browser.go(&format!("{base}/jobs?state=cancelled"));
    let errors = browser.console_errors();
    assert!(errors.is_empty(), "console errors: {errors:?}");
    // Aborted and cancelled are told apart.
    let cancelled = browser.script(
        "const s = document.createElement('span'); s.className = 'state state-cancelled'; \
         document.body.append(s); return getComputedStyle(s).color;",
    );
    assert_ne!(aborted, cancelled, "aborted and cancelled share a colour");
}

#[test]
fn every_page_fits_a_phone_logs_no_error_and_passes_an_accessibility_audit() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let axe = axe();
    let sb = Sandbox::new();
    let fail = sb.script(
        "fail",
        "cat >/dev/null; echo 'a long line of output that goes on and on without a break to test wrapping on a phone screen: ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFGHIJKLMNOPQRSTUVWXYZ'; exit 3",
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &fail]).profile("max_attempts", "1"));
    let _d = Daemon::start(&sb);
    sb.drop_prompt(
        "acme/a-rather-long-project-name",
        "a-failing-prompt-with-a-long-name",
        "x\n",
    );
    let failed = sb.wait_done(
        "acme/a-rather-long-project-name",
        "a-failing-prompt-with-a-long-name",
        secs(20),
    );
    assert_eq!(failed.state(), "failed");
    let served = log_in(&browser, &sb);
    let base = &served.base;
    let pages = [
        ("overview", "/".to_owned()),
        ("jobs", "/jobs".to_owned()),
        ("job", format!("/jobs/{}", failed.id)),
        ("submit", "/submit".to_owned()),
        ("history", "/history".to_owned()),
    ];
    let mut problems: Vec<String> = Vec::new();
    for (width, height, size) in [(1280, 800, "wide"), (390, 844, "phone")] {
        browser.resize(width, height);
        for (name, path) in &pages {
            browser.go(&format!("{base}{path}"));
            browser.must("main");
            let inner = browser.script("return window.innerWidth;");
            let scroll = browser.script("return document.scrollingElement.scrollWidth;");
            if scroll.as_u64() > inner.as_u64() {
                problems.push(format!("{name} at {size}: {scroll} px wide in {inner}"));
            }
            // Chart text as large as the page's smallest (never shrunk
            // to a few pixels on a phone).
            let smallest = browser.script(
                "let m = 1e9; for (const t of document.querySelectorAll('svg text')) \
                 { const h = t.getBoundingClientRect().height; if (h > 0) m = Math.min(m, h); } return m;",
            );
            if smallest.as_f64().is_some_and(|h| h < 10.0) {
                problems.push(format!("{name} at {size}: chart text {smallest} px high"));
            }
            browser.screenshot(&format!("{name}-{size}.png"));
            let errors = browser.console_errors();
            if !errors.is_empty() {
                problems.push(format!("{name} at {size}: console errors {errors:?}"));
            }
            if let Some(axe) = &axe {
                for v in audit(&browser, axe) {
                    problems.push(format!("{name} at {size}: {v}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_overview_lives_a_job_runs_fails_and_is_acknowledged_without_a_reload() {
    let Some(browser) = Browser::start() else {
        return;
    };
    browser.resize(1280, 800);
    let sb = Sandbox::new();
    let job = sb.script(
        "job",
        r#"cat >/dev/null; echo "working on it"; while [ ! -e "$OUT/release" ]; do sleep 0.05; done; echo "it broke" >&2; exit 3"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]).profile("max_attempts", "1"));
    let _d = Daemon::start(&sb);
    let _served = log_in(&browser, &sb);
    browser.must("#daemon");
    browser.script("window.__stayed = true; return true;");
    sb.drop_prompt("p", "live", "x\n");
    let running = sb.wait_state("p", "live", "running", secs(20));
    let row = format!("tr[data-key=\"{}\"]", running.id);
    wait_until(
        "the running job and its last line on the overview",
        secs(20),
        || browser.text(&row).contains("working on it").then_some(()),
    );
    std::fs::write(sb.out().join("release"), "").expect("release");
    wait_until("the failure under needs attention", secs(20), || {
        browser
            .text("tbody[data-live=\"/live/attention\"]")
            .contains("p/live")
            .then_some(())
    });
    assert_eq!(
        browser.script("return window.__stayed === true;"),
        json!(true),
        "no reload"
    );
    browser.click(&format!(
        "tbody[data-live=\"/live/attention\"] form[action=\"/jobs/{}/ack\"] button",
        running.id
    ));
    wait_until("the acknowledgement said", secs(10), || {
        browser.find(".notice").map(|_| ())
    });
    assert!(browser.text(".notice").contains("Acknowledged"));
    assert!(
        !browser
            .text("tbody[data-live=\"/live/attention\"]")
            .contains("p/live"),
        "acknowledged: no longer needing attention"
    );
    let errors = browser.console_errors();
    assert!(errors.is_empty(), "console errors: {errors:?}");
}
