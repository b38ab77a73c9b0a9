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

/// The languages the page speaks, the first the default.
pub const LANGUAGES: [&str; 2] = ["en", "zh-TW"];

/// The language `Accept-Language` prefers among [`LANGUAGES`]: any `zh` but the Simplified
/// scripts and regions reads Traditional Chinese; everything else English.
pub fn language(headers: &HeaderMap) -> &'static str {
    let Some(accepted) = headers
        .get(header::ACCEPT_LANGUAGE)
        .and_then(|v| v.to_str().ok())
    else {
        return LANGUAGES[0];
    };
    let mut ranges: Vec<(f32, String)> = accepted
        .split(',')
        .filter_map(|part| {
            let mut pieces = part.trim().split(';');
            let tag = pieces.next()?.trim().to_ascii_lowercase();
            let q = pieces
                .find_map(|p| p.trim().strip_prefix("q=").and_then(|q| q.parse().ok()))
                .unwrap_or(1.0);
            (!tag.is_empty() && q > 0.0).then_some((q, tag))
        })
        .collect();
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, tag) in ranges {
        if tag == "en" || tag.starts_with("en-") {
            return "en";
        }
        if tag == "zh" || tag.starts_with("zh-") {
            let simplified = ["zh-cn", "zh-sg", "zh-hans"]
                .iter()
                .any(|s| tag.starts_with(s));
            if !simplified {
                return "zh-TW";
            }
        }
    }
    LANGUAGES[0]
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn preferred(accept: &str) -> &'static str {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT_LANGUAGE, accept.parse().unwrap());
        language(&headers)
    }

    #[test]
    fn the_language_follows_accept_language() {
        assert_eq!(preferred("zh-TW,zh;q=0.9,en;q=0.8"), "zh-TW");
        assert_eq!(preferred("zh-Hant-HK"), "zh-TW");
        assert_eq!(preferred("en-US,en;q=0.9"), "en");
        assert_eq!(preferred("fr-FR, zh-TW;q=0.5"), "zh-TW");
        assert_eq!(preferred("zh-CN"), "en");
        assert_eq!(preferred("en;q=0.2, zh-TW;q=0.8"), "zh-TW");
        assert_eq!(preferred("de"), "en");
        assert_eq!(language(&HeaderMap::new()), "en");
    }
}
