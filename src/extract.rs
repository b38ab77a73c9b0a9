//! Extractors every capability's handlers use, with rejections in the API's error format. (The
//! request's transaction is extracted with [`crate::idempotency::Tx`].)

use axum::{
    body::Bytes,
    extract::{FromRequest, FromRequestParts, Request},
    http::request::Parts,
};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON body parsed whatever the Content-Type says (absent, form, or JSON, as curl's `-d` sends
/// it), with errors that name the offending field.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let body = Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::InvalidRequest(format!("cannot read the request body: {e}")))?;
        parse_json(&body).map(JsonBody)
    }
}

/// Parses a body that must be one JSON object. (serde would also read an array into a struct,
/// field by position; a body is never that.)
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.trim_ascii_start().first() != Some(&b'{') {
        return Err(ApiError::InvalidRequest(
            "request body must be a JSON object".to_owned(),
        ));
    }
    let deserializer = &mut serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut *deserializer).map_err(|e| {
        let path = e.path().to_string();
        ApiError::InvalidRequest(describe(&path, &e.into_inner()))
    })?;
    deserializer.end().map_err(|e| {
        ApiError::InvalidRequest(format!("request body must hold one JSON object only: {e}"))
    })?;
    refuse_nul_in_json(body)?;
    Ok(value)
}

/// PostgreSQL's `text` and `jsonb` cannot hold U+0000: a string carrying it would fail at the
/// database on every retry, so it is refused here, for every body, naming where it is. JSON can
/// only carry it escaped, so bodies without `\u0000` (all but hostile ones) cost one scan.
fn refuse_nul_in_json(body: &[u8]) -> Result<(), ApiError> {
    const ESCAPE: &[u8] = b"\\u0000";
    if !body.windows(ESCAPE.len()).any(|w| w == ESCAPE) {
        return Ok(());
    }
    // A hit may be an escaped backslash followed by "u0000": only the parsed strings tell.
    let Ok(parsed) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Ok(());
    };
    match nul_at(&parsed, String::new()) {
        Some(whose) => Err(ApiError::InvalidRequest(format!(
            "{whose} must not contain the NUL character (\\u0000)"
        ))),
        None => Ok(()),
    }
}

/// Where the first string or key holding U+0000 is: `metadata.a:` for a value (paths as
/// `metadata.key`, `items[2]`), `metadata.k\u0000: a key` for a key.
fn nul_at(value: &serde_json::Value, path: String) -> Option<String> {
    use serde_json::Value;
    let join = |path: &str, key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match value {
        Value::String(s) if s.contains('\0') => Some(format!("{path}:")),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| nul_at(item, format!("{path}[{i}]"))),
        Value::Object(fields) => fields.iter().find_map(|(key, field)| {
            if key.contains('\0') {
                let shown = key.replace('\0', "\\u0000");
                Some(format!("{}: a key", join(&path, &shown)))
            } else {
                nul_at(field, join(&path, key))
            }
        }),
        _ => None,
    }
}

/// The page size of a listing: 1..=100, 10 when absent.
pub fn page_limit(limit: Option<i64>) -> Result<i64, ApiError> {
    const DEFAULT: i64 = 10;
    const MAX: i64 = 100;
    let limit = limit.unwrap_or(DEFAULT);
    if !(1..=MAX).contains(&limit) {
        return Err(ApiError::InvalidRequest(format!(
            "limit: must be between 1 and {MAX}, got {limit}"
        )));
    }
    Ok(limit)
}

/// One page of a listing, newest first.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Page<T> {
    pub data: Vec<T>,
    /// Whether another page follows (ask with `starting_after` = the last id).
    pub has_more: bool,
}

impl<T> Page<T> {
    /// The page of at most `limit` rows out of `limit + 1` fetched: the extra one only tells that
    /// another page follows.
    pub fn of(mut rows: Vec<T>, limit: i64) -> Self {
        let has_more = rows.len() as i64 > limit;
        rows.truncate(limit as usize);
        Self {
            data: rows,
            has_more,
        }
    }
}

/// Query-string parameters, with rejections in the API's error format.
pub struct QueryParams<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        // As in bodies: a NUL would reach the database and fail there, on every retry.
        let query = parts.uri.query().unwrap_or_default();
        if let Some((name, _)) =
            url::form_urlencoded::parse(query.as_bytes()).find(|(_, v)| v.contains('\0'))
        {
            return Err(ApiError::InvalidRequest(format!(
                "{name}: must not contain the NUL character (%00)"
            )));
        }
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|query| QueryParams(query.0))
            .map_err(|rejection| {
                let text = rejection.body_text();
                let text = text
                    .strip_prefix("Failed to deserialize query string: ")
                    .unwrap_or(&text);
                ApiError::InvalidRequest(in_json_words(text))
            })
    }
}

/// One path segment as text, with rejections (e.g. invalid UTF-8 after percent-decoding, or a
/// NUL, which no id holds) in the API's error format: a path that cannot name anything names
/// nothing, so 404.
pub struct PathParam(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<String>::from_request_parts(parts, state)
            .await
            .ok()
            .filter(|path| !path.0.contains('\0'))
            .map(|path| PathParam(path.0))
            .ok_or_else(|| ApiError::NotFound("no such resource".to_owned()))
    }
}

/// Why a body did not parse, naming the field (`path`, as serde_path_to_error spells it) and saying
/// what was expected in JSON's words.
fn describe(path: &str, error: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let message = in_json_words(&error.to_string());
    if matches!(
        error.classify(),
        Category::Syntax | Category::Eof | Category::Io
    ) {
        return format!(
            "request body is not valid JSON: {message} (line {}, column {})",
            error.line(),
            error.column()
        );
    }
    let at_root = matches!(path, "" | "." | "?");
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'));
    match missing {
        Some(field) if at_root => format!("{field}: missing"),
        Some(field) => format!("{path}.{field}: missing"),
        None if at_root => message,
        None => format!("{path}: {message}"),
    }
}

/// A serde message without what only a Rust programmer reads: type names and parser positions.
fn in_json_words(message: &str) -> String {
    let message = message.split(" at line ").next().unwrap_or(message);
    let mut words = message.to_owned();
    // serde_json's words for a `\uD800`–`\uDFFF` escape without its other half.
    for surrogate in [
        "unexpected end of hex escape",
        "lone leading surrogate in hex escape",
        "invalid unicode code point",
    ] {
        if words.contains(surrogate) {
            return "a \\u escape names half of a UTF-16 surrogate pair without the other half \
                    (\\uD800 to \\uDFFF must come in pairs)"
                .to_owned();
        }
    }
    // Rust's words for a query parameter that does not parse as a number.
    words = words.replace("invalid digit found in string", "expected an integer");
    words = words.replace(
        "cannot parse integer from empty string",
        "expected an integer",
    );
    words = words.replace(
        "number too large to fit in target type",
        "the integer is too large",
    );
    for integer in ["i64", "u64", "i32", "u32", "i16", "u16", "u8"] {
        words = words.replace(&format!("expected {integer}"), "expected an integer");
    }
    words = words.replace("expected f64", "expected a number");
    if let Some(at) = words.find("expected struct ") {
        words.truncate(at);
        words.push_str("expected a JSON object");
    }
    words
}

/// Reads the whole body (the idempotency fingerprint hashes its raw bytes; a merchant's turn at
/// the database starts only once it has arrived), refusing more than `limit` before reading it
/// when Content-Length already says so, and a body still trickling in at `deadline`.
pub async fn whole_body(
    request: Request,
    limit: usize,
    deadline: tokio::time::Instant,
    request_timeout: std::time::Duration,
) -> Result<(Request, Bytes), ApiError> {
    tokio::time::timeout_at(deadline, buffer_body(request, limit))
        .await
        .map_err(|_| ApiError::BodyTimeout {
            seconds: request_timeout.as_secs(),
        })?
}

async fn buffer_body(request: Request, limit: usize) -> Result<(Request, Bytes), ApiError> {
    let too_large = ApiError::PayloadTooLarge { limit };
    let declared = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(too_large);
    }
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|e| {
        let is_limit = std::error::Error::source(&e)
            .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
        if is_limit {
            too_large
        } else {
            ApiError::InvalidRequest(format!("cannot read the request body: {e}"))
        }
    })?;
    Ok((
        Request::from_parts(parts, axum::body::Body::from(bytes.clone())),
        bytes,
    ))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::parse_json;
    use crate::error::ApiError;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Probe {
        name: String,
        count: i64,
    }

    fn detail(body: &str) -> String {
        match parse_json::<Probe>(body.as_bytes()) {
            Err(ApiError::InvalidRequest(detail)) => detail,
            other => panic!("{body} gave {other:?}"),
        }
    }

    #[test]
    fn a_nul_is_refused_naming_where_it_is() {
        assert_eq!(
            detail(r#"{"name":"a\u0000b","count":1}"#),
            "name: must not contain the NUL character (\\u0000)"
        );
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Nested {
            metadata: serde_json::Value,
        }
        let nested = |body: &str| match parse_json::<Nested>(body.as_bytes()) {
            Err(ApiError::InvalidRequest(detail)) => detail,
            other => panic!("{body} gave {other:?}"),
        };
        assert_eq!(
            nested(r#"{"metadata":{"a":["ok","x\u0000"]}}"#),
            "metadata.a[1]: must not contain the NUL character (\\u0000)"
        );
        assert_eq!(
            nested(r#"{"metadata":{"k\u0000":"v"}}"#),
            "metadata.k\\u0000: a key must not contain the NUL character (\\u0000)"
        );
        // An escaped backslash before "u0000" is six plain characters, not a NUL.
        assert!(parse_json::<Probe>(br#"{"name":"a\\u0000","count":1}"#).is_ok());
    }

    #[test]
    fn a_lone_surrogate_is_said_in_our_words() {
        for body in [
            r#"{"name":"\ud800","count":1}"#,
            r#"{"name":"\ud800x","count":1}"#,
            r#"{"name":"\udc00","count":1}"#,
        ] {
            let detail = detail(body);
            assert!(detail.contains("surrogate pair"), "{body}: {detail}");
            assert!(!detail.contains("hex escape"), "{body}: {detail}");
        }
    }

    #[test]
    fn details_name_the_field_in_json_words() {
        assert_eq!(detail(r#"{"count":1}"#), "name: missing");
        assert_eq!(
            detail(r#"{"name":"a","count":"x"}"#),
            "count: invalid type: string \"x\", expected an integer"
        );
        assert_eq!(
            detail(r#"{"name":"a","count":1.5}"#),
            "count: invalid type: floating point `1.5`, expected an integer"
        );
        assert!(detail(r#"{"name":"#).starts_with("request body is not valid JSON: "));
        assert_eq!(detail("[1]"), "request body must be a JSON object");
        for body in [r#"{"count":1}"#, r#"{"name":"#, r#"{"name":1,"count":1}"#] {
            let detail = detail(body);
            assert!(
                !detail.contains("i64") && !detail.contains("struct"),
                "{detail}"
            );
            assert!(!detail.starts_with('?'), "{detail}");
        }
    }
}
