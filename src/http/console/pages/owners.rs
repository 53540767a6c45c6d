//! The owners learned: whose money each customer and payment is, the
//! claims another user made for one already learned first, then the most
//! recent; each read down its own index (`owners_conflicted`,
//! `owners_recent`).

use axum::Extension;
use axum::extract::State;
use axum::response::Response;

use super::failed;
use crate::http::console::Console;
use crate::http::console::auth::Actor;
use crate::http::console::views::{self, Chrome, page};
use crate::owners;

/// Owners the page lists at most, of each kind.
const OWNER_ROWS: i64 = 100;

pub async fn owners(
    State(console): State<Console>,
    Extension(actor): Extension<Actor>,
) -> Response {
    let pool = &console.app.pool;
    let (conflicted, recent) = match tokio::try_join!(
        owners::conflicted(pool, OWNER_ROWS),
        owners::recent(pool, OWNER_ROWS)
    ) {
        Ok(reads) => reads,
        Err(error) => return failed(&error),
    };
    page(&views::OwnersPage {
        chrome: Chrome::new(&console, &actor, "owners"),
        conflicted,
        recent,
        rows: OWNER_ROWS,
    })
}
