//! The dashboard's routes under `/dashboard`: each loads what its page shows through the same
//! functions the API and the CLI use, checks the role an action needs first, and writes the
//! audit log's line in the change's own transaction (`web::Change`). A file per section:
//! `access` (sign-in, passwords), `payments` (and balances), `refunds`, `webhooks`, `keys`,
//! `team`, `settings`, `export`, `audit`.

mod access;
mod audit;
mod export;
mod keys;
mod payments;
mod refunds;
mod settings;
mod team;
mod webhooks;

use axum::{
    Router,
    extract::{FromRef, Request},
    http::header,
    middleware::{Next, from_fn},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use rand::RngCore;
use serde::Deserialize;

use super::web::{self, see_other, with_headers};
use crate::{db::Pool, intents::routes::PublicBaseUrl, rails::Chains, webhooks::WebhookState};

pub use team::password_link;

const STYLE: &str = include_str!("../assets/dashboard.css");

const SCRIPT: &str = include_str!("../assets/dashboard.js");

/// Rows per page of a list.
pub(super) const PAGE: i64 = 25;

pub fn router<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Pool: FromRef<S>,
    PublicBaseUrl: FromRef<S>,
    Chains: FromRef<S>,
    WebhookState: FromRef<S>,
{
    Router::new()
        .route("/dashboard", get(home))
        .route("/dashboard/", get(home))
        .route(
            "/dashboard/login",
            get(access::sign_in_page).post(access::sign_in),
        )
        .route("/dashboard/logout", post(access::sign_out))
        .route(
            "/dashboard/password",
            get(access::password_page).post(access::set_password),
        )
        .route("/dashboard/payments", get(payments::payments))
        .route("/dashboard/payments/{id}", get(payments::payment))
        .route("/dashboard/payments/{id}/cancel", post(payments::cancel))
        .route(
            "/dashboard/payments/{id}/refunds",
            post(refunds::create_refund),
        )
        .route("/dashboard/refunds/{id}", get(refunds::refund))
        .route(
            "/dashboard/refunds/{id}/authorization",
            get(refunds::refund_authorization),
        )
        .route(
            "/dashboard/refunds/{id}/confirm",
            post(refunds::confirm_refund),
        )
        .route(
            "/dashboard/api-keys",
            get(keys::api_keys).post(keys::create_key),
        )
        .route("/dashboard/api-keys/revoke", post(keys::revoke_key))
        .route("/dashboard/api-keys/rotate", post(keys::rotate_key))
        .route("/dashboard/team", get(team::team).post(team::invite))
        .route("/dashboard/team/{id}", post(team::change_member))
        .route("/dashboard/balances", get(payments::balances))
        .route(
            "/dashboard/webhooks",
            get(webhooks::webhooks).post(webhooks::add_endpoint),
        )
        .route(
            "/dashboard/webhooks/{id}",
            get(webhooks::endpoint).post(webhooks::change_endpoint),
        )
        .route(
            "/dashboard/settings",
            get(settings::settings).post(settings::save_settings),
        )
        .route("/dashboard/settings/assets", post(settings::edit_assets))
        .route("/dashboard/export", get(export::export_page))
        .route("/dashboard/export.csv", get(export::export_csv))
        .route("/dashboard/audit", get(audit::audit_log))
        .route("/dashboard/assets/dashboard.css", get(style))
        .route("/dashboard/assets/dashboard.js", get(script))
        .route_layer(from_fn(language_switch))
}

/// `?lang=zh-TW` on any page: the choice is kept in a cookie, and the page is shown again
/// without the parameter.
async fn language_switch(request: Request, next: Next) -> Response {
    let query = request.uri().query().unwrap_or("");
    let picked = url::form_urlencoded::parse(query.as_bytes())
        .find(|(name, _)| name == "lang")
        .and_then(|(_, value)| {
            crate::languages::LANGUAGES
                .into_iter()
                .find(|l| *l == value)
        });
    let Some(language) = picked else {
        return next.run(request).await;
    };
    let rest: String = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(url::form_urlencoded::parse(query.as_bytes()).filter(|(n, _)| n != "lang"))
        .finish();
    let path = request.uri().path();
    let back = if rest.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{rest}")
    };
    let mut response = see_other(&back);
    response
        .headers_mut()
        .append(header::SET_COOKIE, web::language_cookie(language));
    response
}

async fn home() -> Response {
    see_other("/dashboard/payments")
}

async fn style() -> Response {
    asset(STYLE, "text/css; charset=utf-8")
}

async fn script() -> Response {
    asset(SCRIPT, "text/javascript; charset=utf-8")
}

fn asset(body: &'static str, kind: &'static str) -> Response {
    let mut response = with_headers(body.into_response(), false);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, kind.parse().expect("static"));
    headers.insert(
        header::CACHE_CONTROL,
        "public, max-age=300".parse().expect("static"),
    );
    response
}

pub(super) fn random_token() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

#[derive(Deserialize)]
pub(super) struct Nothing {}

#[derive(Deserialize)]
struct DoneQuery {
    done: Option<String>,
}

/// What a change's redirect says was done (`?done=…`), for the page to confirm it.
pub(super) fn done(query: Option<&str>) -> Option<String> {
    serde_urlencoded::from_str::<DoneQuery>(query.unwrap_or(""))
        .ok()
        .and_then(|q| q.done)
}
