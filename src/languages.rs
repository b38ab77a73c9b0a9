//! The languages the pages speak (the checkout page and the dashboard): English and Traditional
//! Chinese, chosen from `Accept-Language` unless the person picked one.

use axum::http::{HeaderMap, header};

/// The languages the pages speak, the first the default.
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
