//! The checkout page: one HTML document, one script and one style sheet, served by the API itself
//! under a strict Content-Security-Policy (nothing but this origin's own script, style and API;
//! no framing). The language is English or Traditional Chinese (`zh-TW`), chosen from
//! `Accept-Language`; the page has a switch, and its strings live in the script.

use axum::{
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};

/// What the page may load and do: its own script, style and API, nothing else, never framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const SCRIPT: &str = include_str!("assets/checkout.js");
const STYLE: &str = include_str!("assets/checkout.css");
const DOCUMENT: &str = include_str!("assets/checkout.html");

pub use crate::languages::{LANGUAGES, language};

/// The page itself, in the request's language; the rest comes from the script.
pub fn document(headers: &HeaderMap) -> Response {
    let html = DOCUMENT.replace("{{lang}}", language(headers));
    with_policy(
        (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            [(header::CACHE_CONTROL, "no-store")],
            html,
        )
            .into_response(),
    )
}

/// `checkout.js` or `checkout.css`.
pub fn asset(name: &str) -> Response {
    let (body, kind) = match name {
        "checkout.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "checkout.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    with_policy(
        (
            [(header::CONTENT_TYPE, kind)],
            [(header::CACHE_CONTROL, "public, max-age=300")],
            body,
        )
            .into_response(),
    )
}

/// The headers every checkout response carries: the policy, no framing, no sniffing, and no
/// `Referer` to anyone (the page's URL holds the client secret in its fragment).
pub fn with_policy(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        ("content-security-policy", CONTENT_SECURITY_POLICY),
        ("x-frame-options", "DENY"),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("cross-origin-opener-policy", "same-origin"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}
