//! What every dashboard request goes through: the session from its cookie (else the sign-in
//! page), the CSRF token of a form, the role a change needs, the page's language, and the headers
//! of every answer (a policy as strict as the checkout page's, never framed, never cached).

use std::net::SocketAddr;

use axum::{
    body::Bytes,
    extract::{ConnectInfo, FromRef, FromRequest, FromRequestParts, Request},
    http::{HeaderMap, HeaderValue, StatusCode, header, request::Parts},
    response::{IntoResponse, Redirect, Response},
};
use cookie::{Cookie, SameSite};
use maud::{Markup, html};
use serde::de::DeserializeOwned;

use super::{
    pages::{self, Section},
    people::Permission,
    sessions::{self, COOKIE, Session},
    text::{self, Text},
};
use sqlx::PgConnection;

use crate::{
    audit,
    db::{OpenTransaction, Pool},
    error::ApiError,
    intents::routes::PublicBaseUrl,
};

/// Own script, style and forms, nothing else; never framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The cookie that keeps a language picked by the page's switch.
const LANGUAGE_COOKIE: &str = "dashboard_lang";

/// A rendered page with its status and the dashboard's headers.
pub fn page(status: StatusCode, markup: Markup) -> Response {
    with_headers((status, markup.into_string()).into_response(), true)
}

/// The headers every dashboard answer carries.
pub fn with_headers(mut response: Response, html: bool) -> Response {
    let headers = response.headers_mut();
    if html {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
    }
    for (name, value) in [
        ("content-security-policy", CONTENT_SECURITY_POLICY),
        ("x-frame-options", "DENY"),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("cross-origin-opener-policy", "same-origin"),
        ("cache-control", "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// After a change: back to a page (303, so a reload does not post again).
pub fn see_other(to: &str) -> Response {
    with_headers(Redirect::to(to).into_response(), false)
}

/// The language of a request: the page's switch (its cookie), else `Accept-Language`.
pub fn language(headers: &HeaderMap) -> &'static str {
    cookies(headers)
        .find(|c| c.name() == LANGUAGE_COOKIE)
        .and_then(|c| {
            crate::languages::LANGUAGES
                .into_iter()
                .find(|l| *l == c.value())
        })
        .unwrap_or_else(|| crate::languages::language(headers))
}

/// The cookie that keeps `language`.
pub fn language_cookie(language: &str) -> HeaderValue {
    let cookie = Cookie::build((LANGUAGE_COOKIE, language.to_owned()))
        .path("/dashboard")
        .same_site(SameSite::Strict)
        .max_age(cookie::time::Duration::days(365))
        .build();
    HeaderValue::from_str(&cookie.to_string()).expect("a language tag is a valid header value")
}

fn cookies(headers: &HeaderMap) -> impl Iterator<Item = Cookie<'_>> {
    headers
        .get_all(header::COOKIE)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(Result::ok)
}

/// The session cookie: `HttpOnly`, `SameSite=Strict`, `Secure` unless the public URL is a plain
/// `http://localhost`, for the dashboard's paths only. `None` ends it. No `Max-Age`: it lasts
/// while the browser does, and the server ends it after 12 h idle (a fixed age would end an
/// active session 12 h after sign-in).
pub fn session_cookie(public_base_url: &PublicBaseUrl, session_id: Option<&str>) -> HeaderValue {
    let local = ["http://localhost", "http://127.0.0.1", "http://[::1]"]
        .iter()
        .any(|l| public_base_url.as_str().starts_with(l));
    let mut cookie = Cookie::build((COOKIE, session_id.unwrap_or("").to_owned()))
        .path("/dashboard")
        .http_only(true)
        .secure(!local)
        .same_site(SameSite::Strict)
        .build();
    if session_id.is_none() {
        cookie.make_removal();
    }
    HeaderValue::from_str(&cookie.to_string()).expect("hex ids make a valid header value")
}

/// Where a request came from: the peer of its connection (a proxy's, behind one).
pub fn address_of(parts: &Parts) -> Option<String> {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| peer.ip().to_string())
}

/// A signed-in request: its session, the cookie's id, its language and address. Without a live
/// session, a page asks to sign in; an action is refused.
pub struct Signed {
    pub session: Session,
    pub session_id: String,
    pub language: &'static str,
    pub address: Option<String>,
}

impl Signed {
    pub fn text(&self) -> &'static Text {
        text::of(self.language)
    }

    /// Refuses what the person's role does not allow, before anything is read or changed.
    pub fn require(&self, permission: Permission) -> Result<(), PageError> {
        if self.session.role().may(permission) {
            Ok(())
        } else {
            Err(PageError::Forbidden)
        }
    }

    /// A page of `section` for this person, in their language, with the navigation.
    pub fn page(
        &self,
        status: StatusCode,
        title: &str,
        section: Section,
        content: Markup,
    ) -> Response {
        let markup = pages::layout(
            self.text(),
            self.language,
            title,
            Some((&self.session, section)),
            content,
        );
        page(status, markup)
    }

    pub fn who(&self) -> crate::audit::Who {
        crate::audit::Who::user(&self.session.user.email, self.address.clone())
    }

    /// A change this person makes: a transaction that commits only with its audit line.
    pub async fn change(&self, pool: &Pool) -> Result<Change<'_>, PageError> {
        Ok(Change {
            tx: OpenTransaction::begin_on_pool(pool).await?,
            signed: self,
        })
    }

    pub fn merchant(&self) -> crate::auth::MerchantId {
        // A user's merchant id passed the same rule when it was stored (the table's CHECK).
        crate::auth::MerchantId::parse(self.session.merchant())
            .expect("a stored merchant id is valid")
    }
}

/// A change made from the dashboard: its transaction, committed only by [`Change::done`], which
/// writes the audit line in it first, so no change from a page is kept without its line.
pub struct Change<'a> {
    tx: OpenTransaction,
    signed: &'a Signed,
}

impl Change<'_> {
    /// One more audit line in the change's transaction (a change that did two things).
    pub async fn record(&mut self, action: &str, target: Option<&str>) -> Result<(), PageError> {
        let merchant = self.signed.session.merchant();
        audit::record(&mut self.tx, merchant, &self.signed.who(), action, target).await?;
        Ok(())
    }

    /// The audit line, then the commit.
    pub async fn done(mut self, action: &str, target: Option<&str>) -> Result<(), PageError> {
        self.record(action, target).await?;
        self.tx.commit().await?;
        Ok(())
    }
}

impl std::ops::Deref for Change<'_> {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        &self.tx
    }
}

impl std::ops::DerefMut for Change<'_> {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.tx
    }
}

impl<S> FromRequestParts<S> for Signed
where
    S: Send + Sync,
    Pool: FromRef<S>,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let to_sign_in = || see_other("/dashboard/login");
        let Some(session_id) = cookies(&parts.headers)
            .find(|c| c.name() == COOKIE && !c.value().is_empty())
            .map(|c| c.value().to_owned())
        else {
            return Err(to_sign_in());
        };
        let pool = Pool::from_ref(state);
        let found = async {
            let mut conn = pool.acquire().await?;
            sessions::find(&mut conn, &session_id).await
        }
        .await;
        match found {
            Ok(Some(session)) => Ok(Self {
                session,
                session_id,
                language: language(&parts.headers),
                address: address_of(parts),
            }),
            Ok(None) => Err(to_sign_in()),
            Err(e) => Err(PageError::from(e).into_response()),
        }
    }
}

/// A form posted by a signed-in person, its CSRF token checked against the session's (in
/// constant time) before the form is even read: a change without it is refused, whatever the
/// cookie says.
pub struct Acting<F> {
    pub signed: Signed,
    pub form: F,
}

#[derive(serde::Deserialize)]
struct CsrfField {
    csrf: Option<String>,
}

impl<S, F> FromRequest<S> for Acting<F>
where
    S: Send + Sync,
    Pool: FromRef<S>,
    F: DeserializeOwned,
{
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        let (mut parts, body) = request.into_parts();
        let signed = Signed::from_request_parts(&mut parts, state).await?;
        let request = Request::from_parts(parts, body);
        let body = Bytes::from_request(request, state)
            .await
            .map_err(|_| PageError::BadRequest("the form could not be read".to_owned()))
            .map_err(IntoResponse::into_response)?;
        let csrf = serde_urlencoded::from_bytes::<CsrfField>(&body)
            .ok()
            .and_then(|f| f.csrf);
        if !csrf.is_some_and(|token| signed.session.csrf_matches(&token)) {
            return Err(PageError::ExpiredForm.into_response());
        }
        let form = serde_urlencoded::from_bytes::<F>(&body)
            .map_err(|e| PageError::BadRequest(e.to_string()).into_response())?;
        Ok(Self { signed, form })
    }
}

/// What a dashboard request can fail with, shown as a short page in both languages (an error
/// page knows no session): never a stack trace, never an internal detail.
#[derive(Debug)]
pub enum PageError {
    Forbidden,
    NotFound,
    /// The form's field and what is wrong with it.
    BadRequest(String),
    /// The CSRF token is missing or not the session's.
    ExpiredForm,
    Api(ApiError),
}

impl From<sqlx::Error> for PageError {
    fn from(e: sqlx::Error) -> Self {
        Self::Api(ApiError::from(e))
    }
}

impl From<crate::db::CommitError> for PageError {
    fn from(e: crate::db::CommitError) -> Self {
        Self::Api(e.into())
    }
}

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        Self::Api(e)
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let (en, zh) = (&text::EN, &text::ZH_TW);
        let (status, title, said_en, said_zh, detail) = match &self {
            Self::Forbidden => (
                StatusCode::FORBIDDEN,
                "Forbidden",
                en.forbidden,
                zh.forbidden,
                None,
            ),
            Self::NotFound => (
                StatusCode::NOT_FOUND,
                "Not found",
                en.not_found,
                zh.not_found,
                None,
            ),
            Self::BadRequest(why) => (
                StatusCode::BAD_REQUEST,
                "Bad request",
                en.bad_request,
                zh.bad_request,
                Some(why.clone()),
            ),
            Self::ExpiredForm => (
                StatusCode::FORBIDDEN,
                "Form expired",
                en.expired_form,
                zh.expired_form,
                None,
            ),
            Self::Api(e) => {
                let status = e.status();
                let shown = (status.is_client_error()).then(|| e.to_string());
                if status.is_server_error() {
                    (status, "Unavailable", en.unavailable, zh.unavailable, None)
                } else {
                    (status, "Refused", en.bad_request, zh.bad_request, shown)
                }
            }
        };
        let markup = html! {
            (maud::DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { (title) " · Dashboard" }
                    link rel="stylesheet" href="/dashboard/assets/dashboard.css";
                }
                body {
                    main id="main" {
                        h1 { (title) }
                        p { (said_en) }
                        p lang="zh-TW" { (said_zh) }
                        @if let Some(detail) = detail { p.detail { (detail) } }
                        p { a href="/dashboard/payments" { "Dashboard" } }
                    }
                }
            }
        };
        let mut response = page(status, markup);
        if let Self::Api(e) = self {
            // The access log names the cause of a failure on our side, as for the API.
            response
                .extensions_mut()
                .insert(crate::error::RenderedError(std::sync::Arc::new(e)));
        }
        response
    }
}
