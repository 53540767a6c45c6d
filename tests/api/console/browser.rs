//! A browser (or a script) on the admin listener, and reading what the
//! console's pages say: their forms' fields, their links, their tables.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::StatusCode;
use reqwest::header::{self, HeaderMap};

use super::TOKEN;
use crate::helpers::TestApp;

/// `value` percent-encoded for a path segment or a query value, as the
/// console writes its own links.
pub fn encoded(value: &str) -> String {
    const VALUE: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    utf8_percent_encode(value, VALUE).to_string()
}

/// A client that does not follow redirects, so that each 303 is seen.
pub fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// How a [`Browser`] says who it is.
#[derive(Debug, Clone)]
pub enum Credentials {
    None,
    Bearer(String),
    /// The session cookie's value.
    Cookie(String),
}

/// What one request answered.
#[derive(Debug)]
pub struct Page {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Page {
    /// The redirect's target.
    pub fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .unwrap_or_else(|| panic!("no Location ({}): {}", self.status, self.body))
            .to_str()
            .unwrap()
    }

    /// The value of the first input named `name` that has one, unescaped.
    pub fn input(&self, name: &str) -> Option<String> {
        self.body
            .split(&format!("name=\"{name}\""))
            .skip(1)
            .find_map(|after| {
                let tag = &after[..after.find('>')?];
                let value = &tag[tag.find("value=\"")? + 7..];
                Some(unescape(&value[..value.find('"')?]))
            })
    }

    /// The page's CSRF token, as its forms carry it.
    pub fn csrf(&self) -> String {
        self.input("csrf")
            .unwrap_or_else(|| panic!("no csrf field in {}", self.body))
    }

    /// The `rel="next"` link's address, unescaped.
    pub fn next_link(&self) -> Option<String> {
        let start = self.body.find("rel=\"next\" href=\"")? + 17;
        let href = &self.body[start..];
        Some(unescape(&href[..href.find('"')?]))
    }

    /// The address of the first link whose text is `text`, unescaped.
    pub fn link(&self, text: &str) -> String {
        let at = self
            .body
            .find(&format!("\">{text}</a>"))
            .unwrap_or_else(|| panic!("no link named {text:?} in {}", self.body));
        let start = self.body[..at].rfind("href=\"").unwrap() + 6;
        unescape(&self.body[start..at])
    }

    /// The event ids of an events table, in the page's order.
    pub fn event_ids(&self) -> Vec<String> {
        let Some(table) = self.body.find("<table class=\"events\">") else {
            return Vec::new();
        };
        self.body[table..]
            .split("<td class=\"id\"><a href=\"/console/event?")
            .skip(1)
            .map(|cell| {
                let text = &cell[cell.find("\">").unwrap() + 2..];
                unescape(&text[..text.find("</a>").unwrap()])
            })
            .collect()
    }

    /// The outbox row ids a table lists (`<td>#id</td>`), in order.
    pub fn row_ids(&self) -> Vec<i64> {
        self.body
            .split("<td>#")
            .skip(1)
            .map(|cell| cell[..cell.find("</td>").unwrap()].parse().unwrap())
            .collect()
    }

    pub fn assert_status(&self, status: StatusCode, what: &str) -> &Self {
        assert_eq!(self.status, status, "{what}: {}", self.body);
        self
    }
}

/// Undoes askama's HTML escaping (`&#NN;`) and the named entities.
pub fn unescape(html: &str) -> String {
    let mut out = String::new();
    let mut rest = html;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let end = rest.find(';').expect("an entity ends");
        let entity = &rest[1..end];
        let c = match entity {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            _ => char::from_u32(entity.strip_prefix('#').unwrap().parse().unwrap()).unwrap(),
        };
        out.push(c);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// A browser, or a script, on the admin listener.
pub struct Browser<'a> {
    pub app: &'a TestApp,
    pub client: reqwest::Client,
    pub credentials: Credentials,
}

impl<'a> Browser<'a> {
    pub fn anonymous(app: &'a TestApp) -> Self {
        Browser {
            app,
            client: no_redirects(),
            credentials: Credentials::None,
        }
    }

    pub fn bearer(app: &'a TestApp) -> Self {
        Browser {
            credentials: Credentials::Bearer(TOKEN.to_owned()),
            ..Browser::anonymous(app)
        }
    }

    pub fn with_cookie(app: &'a TestApp, cookie: &str) -> Self {
        Browser {
            credentials: Credentials::Cookie(cookie.to_owned()),
            ..Browser::anonymous(app)
        }
    }

    /// Logs in with the token through the form: a browser with its cookie.
    pub async fn logged_in(app: &'a TestApp) -> Self {
        let login = Browser::anonymous(app)
            .post("/console/login", &[("token", TOKEN), ("next", "/console")])
            .await;
        login.assert_status(StatusCode::SEE_OTHER, "logging in");
        Browser::with_cookie(app, &session_cookie(&login))
    }

    fn with_credentials(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.credentials {
            Credentials::None => request,
            Credentials::Bearer(token) => request.bearer_auth(token),
            Credentials::Cookie(value) => {
                request.header(header::COOKIE, format!("webhookd_console={value}"))
            }
        }
    }

    pub async fn get(&self, path: &str) -> Page {
        let request = self.with_credentials(self.client.get(self.app.admin(path)));
        read(request).await
    }

    pub async fn post(&self, path: &str, form: &[(&str, &str)]) -> Page {
        let request = self.with_credentials(self.client.post(self.app.admin(path)).form(form));
        read(request).await
    }

    /// GETs `path` and expects 200.
    pub async fn page(&self, path: &str) -> Page {
        let page = self.get(path).await;
        page.assert_status(StatusCode::OK, path);
        page
    }
}

async fn read(request: reqwest::RequestBuilder) -> Page {
    let response = request.send().await.expect("the request is sent");
    Page {
        status: response.status(),
        headers: response.headers().clone(),
        body: response.text().await.unwrap(),
    }
}

/// The session cookie's value a login answer sets.
pub fn session_cookie(login: &Page) -> String {
    let set = login
        .headers
        .get(header::SET_COOKIE)
        .expect("a Set-Cookie")
        .to_str()
        .unwrap();
    let pair = set.split(';').next().unwrap();
    pair.strip_prefix("webhookd_console=")
        .unwrap_or_else(|| panic!("{set}"))
        .to_owned()
}
