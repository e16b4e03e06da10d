//! The web page as a person uses it, in a real headless Chromium driven
//! through chromedriver (W3C WebDriver), against a real daemon and a real
//! `jobwarden web`: log in with the token's link, submit a prompt through
//! the form, see it appear in the list and its log grow without a reload,
//! abort it with the button, see the charts. Screenshots of the overview
//! and a job page are written to `target/screenshots/` (the README's are
//! copies of them).
//!
//! Needs `chromium` and `chromedriver` (Debian: chromium, chromium-driver);
//! without them the test says SKIPPED, and under CI it fails instead.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver process and one browser session.
pub(crate) struct Browser {
    driver: Child,
    port: u16,
    session: String,
}

impl Browser {
    pub(crate) fn start() -> Option<Browser> {
        for tool in ["chromium", "chromedriver"] {
            if Command::new(tool).arg("--version").output().is_err() {
                let why = format!(
                    "{tool} is not installed (Debian: apt-get install chromium chromium-driver)"
                );
                assert!(
                    std::env::var_os("CI").is_none(),
                    "under CI the browser test must run: {why}"
                );
                say(&format!("SKIPPED: the browser test: {why}"));
                return None;
            }
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let mut browser = Browser {
            driver,
            port,
            session: String::new(),
        };
        wait_until("chromedriver listens", secs(20), || {
            TcpStream::connect(("127.0.0.1", port)).ok().map(|_| ())
        });
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1100,900"]
            }
        }}});
        let answer = browser.call("POST", "/session", Some(caps));
        browser.session = answer["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {answer}"))
            .to_owned();
        Some(browser)
    }

    /// A WebDriver command; its `value`.
    pub(crate) fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to chromedriver");
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .expect("send");
        // The head, then exactly Content-Length bytes (chromedriver keeps
        // the connection open).
        let mut reader = std::io::BufReader::new(s);
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if std::io::BufRead::read_line(&mut reader, &mut line).unwrap_or(0) == 0
                || line == "\r\n"
            {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut raw = vec![0; length];
        reader
            .read_exact(&mut raw)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let json = String::from_utf8_lossy(&raw);
        let json = json.as_ref();
        let v: Value =
            serde_json::from_str(json).unwrap_or_else(|e| panic!("{method} {path}: {e}: {json}"));
        if v["value"]["error"].is_string() {
            panic!("{method} {path}: {}", v["value"]);
        }
        v["value"].clone()
    }

    fn at(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    pub(crate) fn go(&self, url: &str) {
        self.call("POST", &self.at("/url"), Some(json!({"url": url})));
    }

    pub(crate) fn find(&self, css: &str) -> Option<String> {
        let found = self.call(
            "POST",
            &self.at("/elements"),
            Some(json!({"using": "css selector", "value": css})),
        );
        found.as_array()?.first()?[ELEMENT]
            .as_str()
            .map(str::to_owned)
    }

    pub(crate) fn must(&self, css: &str) -> String {
        wait_until(&format!("an element {css}"), secs(20), || self.find(css))
    }

    pub(crate) fn type_into(&self, css: &str, text: &str) {
        let e = self.must(css);
        self.call(
            "POST",
            &self.at(&format!("/element/{e}/value")),
            Some(json!({"text": text})),
        );
    }

    pub(crate) fn click(&self, css: &str) {
        let e = self.must(css);
        self.call(
            "POST",
            &self.at(&format!("/element/{e}/click")),
            Some(json!({})),
        );
    }

    pub(crate) fn script(&self, js: &str) -> Value {
        self.call(
            "POST",
            &self.at("/execute/sync"),
            Some(json!({"script": js, "args": []})),
        )
    }

    /// Run `js`, whose last argument is the callback it calls with its
    /// result (WebDriver's asynchronous script).
    pub(crate) fn script_async(&self, js: &str) -> Value {
        self.call(
            "POST",
            &self.at("/execute/async"),
            Some(json!({"script": js, "args": []})),
        )
    }

    /// The text of the element `css` names, read in one step (a row the
    /// page replaces meanwhile is never read half-gone).
    pub(crate) fn text(&self, css: &str) -> String {
        wait_until(&format!("an element {css}"), secs(20), || {
            let found = self.call(
                "POST",
                &self.at("/execute/sync"),
                Some(json!({
                    "script": "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;",
                    "args": [css],
                })),
            );
            found.as_str().map(str::to_owned)
        })
    }

    /// The window's size, as a screen of `width` × `height` shows the page.
    pub(crate) fn resize(&self, width: u32, height: u32) {
        self.call(
            "POST",
            &self.at("/window/rect"),
            Some(json!({"width": width, "height": height})),
        );
    }

    /// The browser console's errors since the last ask.
    pub(crate) fn console_errors(&self) -> Vec<String> {
        let logs = self.call(
            "POST",
            &self.at("/se/log"),
            Some(json!({"type": "browser"})),
        );
        logs.as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or("").to_owned())
            .collect()
    }

    pub(crate) fn screenshot(&self, name: &str) {
        let b64 = self.call("GET", &self.at("/screenshot"), None);
        let png = base64(b64.as_str().expect("base64"));
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
        std::fs::create_dir_all(&dir).expect("screenshots folder");
        #[allow(clippy::disallowed_methods)] // a test artefact
        std::fs::write(dir.join(name), png).expect("write screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.call("DELETE", &self.at(""), None)
            }));
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn base64(text: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let sextets: Vec<u8> = text.bytes().filter_map(val).collect();
    sextets
        .chunks(4)
        .flat_map(|c| {
            let n = c.iter().fold(0u32, |acc, &s| (acc << 6) | s as u32) << (6 * (4 - c.len()));
            let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
            bytes[..c.len().saturating_sub(1)].to_vec()
        })
        .collect()
}

/// A free loopback address for `jobwarden web`, and the process.
/// A `jobwarden web` the browser is logged in to; stopped when dropped.
pub(crate) struct Served {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub(crate) base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Serve `sb`'s page and log `browser` in with its token's link.
pub(crate) fn log_in(browser: &Browser, sb: &Sandbox) -> Served {
    let (child, login) = web(sb);
    let base = login.split("/?").next().expect("base").to_owned();
    browser.go(&login);
    Served { child, base }
}

pub(crate) fn web(sb: &Sandbox) -> (Child, String) {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let listen = format!("127.0.0.1:{port}");
    let child = sb
        .command(&["web", "--listen", &listen])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn web");
    wait_until("the page answers", secs(10), || {
        TcpStream::connect(&listen).ok().map(|_| ())
    });
    let url = sb.run(&["web", "--print-url", "--listen", &listen]);
    assert_eq!(url.code(), 0, "{url:?}");
    (child, url.stdout.trim().to_owned())
}

#[test]
fn a_person_logs_in_submits_watches_the_log_grow_aborts_and_sees_the_charts() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let sb = Sandbox::new();
    let job = sb.script(
        "job",
        r#"cat >/dev/null; i=0; while [ ! -e "$OUT/release" ]; do i=$((i+1)); echo "step $i of the work"; sleep 0.2; done"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]));
    let _d = Daemon::start(&sb);
    // Some history for the charts first.
    std::fs::write(sb.out().join("release"), "").expect("release");
    sb.drop_prompt("warmup", "done", "x\n");
    sb.wait_done("warmup", "done", secs(20));
    std::fs::remove_file(sb.out().join("release")).expect("hold again");
    let (mut web, login) = web(&sb);
    let base = login.split("/?").next().expect("base").to_owned();

    // The token's link logs in; without it, nothing.
    browser.go(&format!("{base}/jobs"));
    assert!(
        browser.text("body").contains("needs its token"),
        "refused without the token"
    );
    browser.go(&login);
    assert!(browser.text("#daemon").contains("running"));
    browser.screenshot("overview.png");

    // Submit through the form; the list it lands on shows the job without a reload.
    browser.go(&format!("{base}/submit"));
    browser.type_into("input[name=project]", "web");
    browser.type_into("input[name=name]", "from-the-form");
    browser.type_into("textarea[name=text]", "Do the work.");
    browser.click("#submit button");
    browser.must("#rows");
    browser.script("window.__stayed = true;");
    wait_until("the job appears in the list", secs(20), || {
        browser
            .text("#rows")
            .contains("web/from-the-form")
            .then_some(())
    });
    assert_eq!(
        browser.script("return window.__stayed === true;"),
        json!(true),
        "no reload"
    );
    let job = sb.wait_state("web", "from-the-form", "running", secs(20));

    // Its page: the log grows while the page stays.
    browser.go(&format!("{base}/jobs/{}", job.id));
    browser.script("window.__stayed = true;");
    let first = browser.text("#log").len();
    wait_until("the log grows on the page", secs(20), || {
        (browser.text("#log").lines().count() >= 8 && browser.text("#log").len() > first)
            .then_some(())
    });
    assert_eq!(
        browser.script("return window.__stayed === true;"),
        json!(true),
        "no reload"
    );
    browser.screenshot("job.png");

    // Abort with the button.
    browser.click("form[action$='/abort'] button");
    let ended = sb.wait_done("web", "from-the-form", secs(20));
    assert_eq!(ended.state(), "aborted", "{:#}", ended.record);
    browser.go(&format!("{base}/jobs/{}", job.id));
    assert!(browser.text("body").contains("aborted"));
    assert!(
        browser.text("#attempts").contains("aborted"),
        "the ledger's attempt"
    );

    // The charts render (bars drawn for the runs of the last hours).
    browser.go(&format!("{base}/history"));
    let bars = browser.script("return document.querySelectorAll('svg rect.bar').length;");
    assert!(bars.as_u64().is_some_and(|n| n >= 2), "bars: {bars}");
    let line = browser.script("return document.querySelectorAll('svg polyline.line').length;");
    assert_eq!(line, json!(1));
    browser.screenshot("history.png");
    let _ = web.kill();
    let _ = web.wait();
}
