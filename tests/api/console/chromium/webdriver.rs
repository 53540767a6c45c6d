//! A small W3C WebDriver client over `reqwest`: enough to drive Chromium
//! through chromedriver from a test. chromedriver runs as a child process
//! on a free port and is killed when the [`Browser`] is dropped; the
//! browser session is ended first, so no Chromium outlives the test.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

/// The key W3C WebDriver names a found element by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long [`Browser::wait_for`] and friends poll before failing.
pub const PATIENCE: Duration = Duration::from_secs(15);

/// Where chromedriver and a Chromium to drive are, if this machine has them.
#[derive(Debug, Clone)]
pub struct Installed {
    pub chromedriver: PathBuf,
    pub chromium: PathBuf,
}

impl Installed {
    /// Looks both up on `PATH` (`CHROMEDRIVER` and `CHROMIUM` override).
    pub fn find() -> Result<Installed, String> {
        let chromedriver = from_env_or_path("CHROMEDRIVER", &["chromedriver"])
            .ok_or("chromedriver is not on PATH (Debian: apt-get install chromium-driver), nor at CHROMEDRIVER")?;
        let chromium = from_env_or_path(
            "CHROMIUM",
            &[
                "chromium",
                "chromium-browser",
                "google-chrome",
                "google-chrome-stable",
            ],
        )
        .ok_or("Chromium is not on PATH (Debian: apt-get install chromium), nor at CHROMIUM")?;
        Ok(Installed {
            chromedriver,
            chromium,
        })
    }
}

fn from_env_or_path(variable: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(variable) {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    let dirs = std::env::var_os("PATH")?;
    std::env::split_paths(&dirs)
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// A chromedriver child process; killed on drop.
struct Driver {
    child: Child,
    base: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    /// Starts chromedriver on a free port and waits (bounded) until its
    /// `/status` says it is ready. A port taken between the probe and
    /// chromedriver's bind is given up for another, a few times.
    async fn start(installed: &Installed, http: &reqwest::Client) -> Driver {
        for _ in 0..3 {
            if let Some(driver) = Driver::try_start(installed, http).await {
                return driver;
            }
        }
        panic!("chromedriver exited at start, three times");
    }

    /// `None` when chromedriver exits before it is ready.
    async fn try_start(installed: &Installed, http: &reqwest::Client) -> Option<Driver> {
        let port = {
            let probe = TcpListener::bind("127.0.0.1:0").expect("a free port");
            probe.local_addr().unwrap().port()
        };
        let child = Command::new(&installed.chromedriver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", installed.chromedriver.display()));
        let mut driver = Driver {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if driver.child.try_wait().unwrap().is_some() {
                return None;
            }
            let ready = http
                .get(format!("{}/status", driver.base))
                .send()
                .await
                .ok()
                .map(|r| r.json::<Value>());
            if let Some(body) = ready
                && let Ok(body) = body.await
                && body["value"]["ready"] == true
            {
                return Some(driver);
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not become ready on port {port}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// An element found on the current page.
#[derive(Debug, Clone)]
pub struct Element(String);

/// One entry of the browser's console log.
#[derive(Debug, Clone)]
pub struct LogEntry {
    pub level: String,
    pub source: String,
    pub message: String,
}

/// A Chromium session. Dropping it ends the session and stops chromedriver.
pub struct Browser {
    http: reqwest::Client,
    /// The session's id.
    id: String,
    deleted: bool,
    /// Stopped after the session is ended (fields drop after `drop`).
    driver: Driver,
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.deleted {
            // No async here: end the session with a plain HTTP request, so
            // a panicking test leaves no Chromium behind.
            delete_blocking(&self.driver.base, &self.id);
        }
    }
}

impl Browser {
    /// Starts chromedriver and a headless Chromium `width` × `height`
    /// pixels, with its console log kept.
    pub async fn start(installed: &Installed, width: u32, height: u32) -> Browser {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap();
        let driver = Driver::start(installed, &http).await;
        let capabilities = json!({
            "capabilities": { "alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": installed.chromium,
                    "args": [
                        "--headless=new",
                        "--no-sandbox",
                        "--disable-dev-shm-usage",
                        "--disable-gpu",
                        // Full-page screenshots show no scrollbar.
                        "--hide-scrollbars",
                        format!("--window-size={width},{height}"),
                    ],
                },
                "goog:loggingPrefs": { "browser": "ALL" },
            }}
        });
        let response = http
            .post(format!("{}/session", driver.base))
            .json(&capabilities)
            .send()
            .await
            .expect("chromedriver answers");
        let body: Value = response.json().await.expect("a JSON answer");
        let Some(id) = body["value"]["sessionId"].as_str() else {
            panic!("no session: {body}");
        };
        Browser {
            id: id.to_owned(),
            http,
            deleted: false,
            driver,
        }
    }

    /// Sends one command; its `value`, or a panic naming the command and
    /// the driver's error.
    async fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        match self.try_command(method.clone(), path, body).await {
            Ok(value) => value,
            Err(error) => panic!("webdriver {method} {path}: {error}"),
        }
    }

    async fn try_command(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let url = format!("{}/session/{}{path}", self.driver.base, self.id);
        let mut request = self.http.request(method, url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body: Value = response.json().await.map_err(|e| e.to_string())?;
        if status.is_success() {
            Ok(body["value"].clone())
        } else {
            Err(format!(
                "{status}: {} {}",
                body["value"]["error"].as_str().unwrap_or("?"),
                body["value"]["message"].as_str().unwrap_or("")
            ))
        }
    }

    async fn get(&self, path: &str) -> Value {
        self.command(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        self.command(reqwest::Method::POST, path, Some(body)).await
    }

    /// Opens `url` and waits for it to load.
    pub async fn goto(&self, url: &str) {
        self.post("/url", json!({ "url": url })).await;
    }

    pub async fn current_url(&self) -> String {
        string(self.get("/url").await)
    }

    pub async fn title(&self) -> String {
        string(self.get("/title").await)
    }

    pub async fn source(&self) -> String {
        string(self.get("/source").await)
    }

    /// Every element matching a CSS selector, in document order.
    pub async fn find_all(&self, css: &str) -> Vec<Element> {
        let found = self
            .post(
                "/elements",
                json!({ "using": "css selector", "value": css }),
            )
            .await;
        found
            .as_array()
            .map(|all| all.iter().map(element).collect())
            .unwrap_or_default()
    }

    /// The one element matching `css`, now.
    pub async fn find(&self, css: &str) -> Element {
        let mut all = self.find_all(css).await;
        assert!(
            !all.is_empty(),
            "no element matches {css:?} on {}",
            self.current_url().await
        );
        all.swap_remove(0)
    }

    /// Polls (bounded) until an element matches `css`.
    pub async fn wait_for(&self, css: &str) -> Element {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(found) = self.find_all(css).await.into_iter().next() {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "no element matched {css:?} within {PATIENCE:?} on {}",
                self.current_url().await
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Polls (bounded) until the current URL's path is `path`.
    pub async fn wait_for_path(&self, path: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let url = self.current_url().await;
            let here = url
                .splitn(4, '/')
                .nth(3)
                .map(|rest| format!("/{}", rest.split(['?', '#']).next().unwrap_or("")));
            if here.as_deref() == Some(path) {
                return url;
            }
            assert!(
                Instant::now() < deadline,
                "still at {url}, not {path}, after {PATIENCE:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Polls (bounded) until the current URL contains `part`.
    pub async fn wait_for_url_containing(&self, part: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let url = self.current_url().await;
            if url.contains(part) {
                return url;
            }
            assert!(
                Instant::now() < deadline,
                "still at {url}, without {part:?}, after {PATIENCE:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub async fn send_keys(&self, element: &Element, text: &str) {
        self.post(
            &format!("/element/{}/value", element.0),
            json!({ "text": text }),
        )
        .await;
    }

    pub async fn clear(&self, element: &Element) {
        self.post(&format!("/element/{}/clear", element.0), json!({}))
            .await;
    }

    pub async fn click(&self, element: &Element) {
        self.post(&format!("/element/{}/click", element.0), json!({}))
            .await;
    }

    /// The element's rendered text.
    pub async fn text(&self, element: &Element) -> String {
        string(self.get(&format!("/element/{}/text", element.0)).await)
    }

    /// The text of the one element matching `css`.
    pub async fn text_of(&self, css: &str) -> String {
        let element = self.find(css).await;
        self.text(&element).await
    }

    /// The text content of the first element matching `css`, read in one
    /// step in the page (so never of an element replaced meanwhile).
    pub async fn text_now(&self, css: &str) -> Option<String> {
        self.execute(
            "const e = document.querySelector(arguments[0]); return e && e.textContent.trim();",
            json!([css]),
        )
        .await
        .as_str()
        .map(str::to_owned)
    }

    /// A DOM property of the element (`value`, `href`, ...).
    pub async fn property(&self, element: &Element, name: &str) -> Value {
        self.get(&format!("/element/{}/property/{name}", element.0))
            .await
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page.
    pub async fn execute(&self, script: &str, args: Value) -> Value {
        self.post("/execute/sync", json!({ "script": script, "args": args }))
            .await
    }

    pub async fn set_window_size(&self, width: u32, height: u32) {
        self.post("/window/rect", json!({ "width": width, "height": height }))
            .await;
    }

    /// The viewport as a PNG, written to `path`.
    pub async fn screenshot(&self, path: &Path) {
        let png = base64::engine::general_purpose::STANDARD
            .decode(string(self.get("/screenshot").await))
            .expect("a base64 screenshot");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }

    /// The whole page as a PNG, `width` wide: the window grows until its
    /// viewport holds the page (at most `max_height` tall) for the shot,
    /// then shrinks back.
    pub async fn screenshot_page(&self, path: &Path, width: u32, height: u32, max_height: u32) {
        self.set_window_size(width, height).await;
        let mut size = height;
        // Growing the window can change the page's height (a scrollbar
        // goes, lines rewrap): measure again, a few times at most.
        for _ in 0..4 {
            let [page, viewport] = self.page_and_viewport_heights().await;
            if viewport >= page || size >= max_height {
                break;
            }
            size = (size + page - viewport).min(max_height);
            self.set_window_size(width, size).await;
        }
        self.screenshot(path).await;
        if size != height {
            self.set_window_size(width, height).await;
        }
    }

    /// The page's height and the viewport's, in CSS pixels.
    async fn page_and_viewport_heights(&self) -> [u32; 2] {
        let measured = self
            .execute(
                "return [Math.ceil(document.documentElement.scrollHeight), window.innerHeight];",
                json!([]),
            )
            .await;
        let at = |i: usize| {
            measured[i]
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .unwrap_or(0)
        };
        [at(0), at(1)]
    }

    /// The browser's console log since the last read (chromedriver's
    /// `se/log`, which empties it).
    pub async fn log(&self) -> Vec<LogEntry> {
        let entries = self.post("/se/log", json!({ "type": "browser" })).await;
        entries
            .as_array()
            .map(|all| {
                all.iter()
                    .map(|e| LogEntry {
                        level: e["level"].as_str().unwrap_or("").to_owned(),
                        source: e["source"].as_str().unwrap_or("").to_owned(),
                        message: e["message"].as_str().unwrap_or("").to_owned(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Ends the session (Chromium quits) and stops chromedriver.
    pub async fn quit(mut self) {
        self.command(reqwest::Method::DELETE, "", None).await;
        self.deleted = true;
    }
}

fn element(found: &Value) -> Element {
    Element(
        found[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("not an element: {found}"))
            .to_owned(),
    )
}

fn string(value: Value) -> String {
    match value {
        Value::String(s) => s,
        other => panic!("expected a string, got {other}"),
    }
}

/// `DELETE /session/<id>` over a plain socket, best effort, bounded.
fn delete_blocking(base: &str, id: &str) {
    let Some(host) = base.strip_prefix("http://") else {
        return;
    };
    let Ok(mut stream) = TcpStream::connect(host) else {
        return;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
    let request = format!(
        "DELETE /session/{id} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).is_ok() {
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
    }
}
