//! An event's payload whole, as stored: the download beside its page,
//! which shows only the first of it. Written as it is read, never through
//! a template.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::failed;
use crate::events;
use crate::http::console::views;
use crate::http::console::{Console, EventRef};

pub async fn payload(
    State(console): State<Console>,
    EventRef { provider, event_id }: EventRef,
) -> Response {
    let stored = match events::find(&console.app.pool, &provider, &event_id).await {
        Ok(Some(stored)) => stored,
        Ok(None) => {
            return views::not_found("No such event is stored: it was pruned, or never received.");
        }
        Err(error) => return failed(&error),
    };
    let disposition = format!(
        "attachment; filename=\"{}-{}.json\"",
        file_name_part(&provider),
        file_name_part(&event_id)
    );
    let disposition = HeaderValue::try_from(disposition)
        .unwrap_or_else(|_| HeaderValue::from_static("attachment"));
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        Body::from(stored.payload),
    )
        .into_response()
}

/// `text` as part of a file name: letters, digits, `-`, `_` and `.` kept,
/// anything else `_` (no quote, slash or control character reaches the
/// header or the name a browser saves under), at most 100 characters.
fn file_name_part(text: &str) -> String {
    text.chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::file_name_part;

    #[test]
    fn a_file_name_holds_no_quote_slash_or_control_character() {
        assert_eq!(file_name_part("evt_1"), "evt_1");
        assert_eq!(file_name_part("a/b\"c\r\n..é"), "a_b_c__.._");
        assert_eq!(file_name_part(&"x".repeat(300)).len(), 100);
    }
}
