//! What a page shows of stored text, bounded whatever is stored: JSON
//! (a payload, a detail) re-indented up to [`SHOWN_JSON_BYTES`], free text
//! (an error, a line of a story) cut at [`SHOWN_TEXT_BYTES`], and a whole
//! page at [`MAX_PAGE_BYTES`]. Work and memory follow the bound, never the
//! size the text would take whole: the indenter stops writing at the bound
//! (a payload of arrays nested 118 deep around a million zeros would
//! otherwise take 245 MB indented, every zero 236 spaces in).

use std::fmt;

use crate::telemetry;

/// Most bytes of indented JSON a page shows of a payload or a detail; the
/// payload's whole text is a download.
pub const SHOWN_JSON_BYTES: usize = 256 * 1024;

/// Most bytes of an error or a story's line a page shows: what the sinks
/// keep of an error at most, so only text stored otherwise is ever cut.
pub const SHOWN_TEXT_BYTES: usize = telemetry::MAX_LOGGED_ERROR_BYTES;

/// Most bytes of a whole page, escaped: a page over it is refused, so that
/// whatever a table holds, one view holds at most this much.
pub const MAX_PAGE_BYTES: usize = 8 * 1024 * 1024;

/// `text` cut to [`SHOWN_TEXT_BYTES`] and marked `…(N bytes)` when cut.
pub fn text(text: impl AsRef<str>) -> String {
    telemetry::bounded_to(text.as_ref(), SHOWN_TEXT_BYTES).into_owned()
}

/// JSON text as a page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Json {
    /// Indented, at most the bound.
    pub text: String,
    /// Bytes of the stored text it shows.
    pub read: usize,
    /// Bytes of the stored text.
    pub total: usize,
}

impl Json {
    /// Whether part of the text is left out.
    pub fn cut(&self) -> bool {
        self.read < self.total
    }
}

/// The first bytes of stored JSON text (`head`, of `total` bytes in all)
/// indented two spaces a level, as `serde_json`'s pretty printer does,
/// until `limit` bytes are written. Strings and what is not JSON are copied
/// as they are; the keys keep their stored order.
pub fn json(head: &str, total: usize, limit: usize) -> Json {
    let mut out = Indenter {
        text: String::with_capacity(limit.min(head.len() * 2)),
        limit,
        depth: 0,
    };
    let (mut in_string, mut escaped, mut opened) = (false, false, false);
    let mut read = head.len();
    for (at, c) in head.char_indices() {
        let written = if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            out.push_char(c)
        } else {
            match c {
                ' ' | '\t' | '\n' | '\r' => true,
                '}' | ']' => {
                    out.depth = out.depth.saturating_sub(1);
                    let open = std::mem::take(&mut opened);
                    (open || out.newline()) && out.push_char(c)
                }
                ',' => out.push_char(c) && out.newline(),
                ':' => out.push_str(": "),
                _ => {
                    // An opening bracket's line break waits for what
                    // follows, so that `[]` and `{}` stay whole.
                    if std::mem::take(&mut opened) && !out.newline() {
                        false
                    } else {
                        if c == '"' {
                            in_string = true;
                        } else if c == '{' || c == '[' {
                            out.depth += 1;
                            opened = true;
                        }
                        out.push_char(c)
                    }
                }
            }
        };
        if !written {
            read = at;
            break;
        }
    }
    Json {
        text: out.text,
        read,
        total: total.max(read),
    }
}

/// Writes up to its limit, then refuses.
struct Indenter {
    text: String,
    limit: usize,
    depth: usize,
}

impl Indenter {
    /// Writes `c` if it fits.
    fn push_char(&mut self, c: char) -> bool {
        let fits = self.text.len() + c.len_utf8() <= self.limit;
        if fits {
            self.text.push(c);
        }
        fits
    }

    /// Writes `s`, or as much of it as fits (it is ASCII).
    fn push_str(&mut self, s: &str) -> bool {
        let room = self.limit.saturating_sub(self.text.len());
        self.text.push_str(&s[..s.len().min(room)]);
        s.len() <= room
    }

    /// A new line at the current depth, or as much of it as fits.
    fn newline(&mut self) -> bool {
        if !self.push_char('\n') {
            return false;
        }
        let indent = self.depth.saturating_mul(2);
        let room = self.limit.saturating_sub(self.text.len());
        self.text.extend(std::iter::repeat_n(' ', indent.min(room)));
        indent <= room
    }
}

/// A page's text, refused past [`MAX_PAGE_BYTES`]: what a template renders
/// into.
#[derive(Debug, Default)]
pub struct Page {
    pub text: String,
    /// Set once a write did not fit: the page is not shown.
    pub over: bool,
}

impl fmt::Write for Page {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.text.len() + s.len() > MAX_PAGE_BYTES {
            self.over = true;
            return Err(fmt::Error);
        }
        self.text.push_str(s);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn indented(json: &str) -> String {
        let shown = super::json(json, json.len(), usize::MAX);
        assert_eq!(shown.read, json.len());
        assert!(!shown.cut());
        shown.text
    }

    #[test]
    fn json_is_indented_as_serde_json_indents_it() {
        for text in [
            r#"{"a": 1, "b": [1, 2, {"c": null}], "d": {}, "e": [], "f": "x, y: [z]"}"#,
            r#"{"quote": "a \"b\" \\", "nested": [[[]], [{}]], "n": -1.5e3}"#,
            r#"["é", "\u0000", true, false]"#,
            "[]",
            "0",
        ] {
            let value: serde_json::Value = serde_json::from_str(text).unwrap();
            let expected = serde_json::to_string_pretty(&value).unwrap();
            // serde_json sorts keys and re-writes numbers and escapes; the
            // stored text's own are kept, so compare the same shapes.
            let ours: serde_json::Value = serde_json::from_str(&indented(text)).unwrap();
            assert_eq!(ours, value, "{text}");
            assert_eq!(
                indented(text).lines().count(),
                expected.lines().count(),
                "{text}: {}",
                indented(text)
            );
        }
        assert_eq!(
            indented(r#"{"a": [1, {}], "b": "c"}"#),
            "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": \"c\"\n}"
        );
    }

    #[test]
    fn indenting_stops_at_the_bound_whatever_the_nesting() {
        let deep = format!(
            "{}{}{}",
            "[".repeat(118),
            "0, ".repeat(100_000),
            "]".repeat(118)
        );
        let shown = json(&deep, deep.len(), 4096);
        assert!(shown.text.len() <= 4096, "{}", shown.text.len());
        assert!(shown.text.len() > 4000, "{}", shown.text.len());
        assert!(shown.cut());
        assert!(shown.read < 1000, "{} bytes read", shown.read);
        // A head cut by the database: the total is what was stored.
        let head = &deep[..1000];
        let shown = json(head, deep.len(), usize::MAX);
        assert_eq!((shown.read, shown.total), (1000, deep.len()));
        // Never inside a character.
        let wide = format!("[\"{}\"]", "é".repeat(100));
        for limit in 0..50 {
            let shown = json(&wide, wide.len(), limit);
            assert!(shown.text.len() <= limit);
            assert!(wide.is_char_boundary(shown.read));
        }
    }

    #[test]
    fn text_that_is_not_json_is_kept_and_bounded() {
        let shown = json("not json: ][ }", 14, usize::MAX);
        assert_eq!(shown.read, 14);
        let shown = json(&"]".repeat(10_000), 10_000, 100);
        assert!(shown.text.len() <= 100);
    }

    #[test]
    fn a_long_error_is_cut_and_says_its_length() {
        assert_eq!(text("HTTP 503"), "HTTP 503");
        let long = "e".repeat(1_000_000);
        let cut = text(&long);
        assert!(cut.len() < SHOWN_TEXT_BYTES + 20);
        assert!(cut.ends_with("…(1000000 bytes)"));
    }

    #[test]
    fn a_page_past_its_bound_is_refused() {
        use std::fmt::Write as _;
        let mut page = Page::default();
        assert!(page.write_str(&"x".repeat(MAX_PAGE_BYTES)).is_ok());
        assert!(page.write_str("y").is_err());
        assert!(page.over);
    }
}
