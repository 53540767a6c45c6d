//! The doctor page: `webhookd doctor`'s checks ([`crate::doctor`]) of
//! this process's own settings, run when the page is asked for. The
//! configuration's offline check is not among them: this process started
//! with its configuration, and `webhookd doctor` where the file and the
//! environment are checks them.

use axum::Extension;
use axum::extract::State;
use axum::response::Response;

use crate::doctor::Status;
use crate::http::console::Console;
use crate::http::console::auth::Actor;
use crate::http::console::views::{self, Chrome, page};

pub async fn doctor(
    State(console): State<Console>,
    Extension(actor): Extension<Actor>,
) -> Response {
    let checks = (console.doctor.0)().await;
    let count = |status| checks.iter().filter(|c| c.status == status).count();
    let counts = [
        ("fail", count(Status::Fail)),
        ("warn", count(Status::Warn)),
        ("ok", count(Status::Ok)),
    ];
    page(&views::DoctorPage {
        chrome: Chrome::new(&console, &actor, "doctor"),
        checks,
        counts,
    })
}
