//! Signing in and out, and setting a password through a one-time link.

use axum::{
    extract::{RawQuery, Request, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Deserialize;

use super::{Nothing, random_token};
use crate::dashboard::{
    pages,
    people::{self, NewPassword},
    sessions::{self, SignIn},
    text,
    web::{self, Acting, PageError, page, see_other},
};
use crate::{
    db::{OpenTransaction, Pool},
    intents::routes::PublicBaseUrl,
};

/// The cookie and field that tie the sign-in form to the browser that loaded it (the form has no
/// session yet to carry a token of).
pub(super) const SIGN_IN_CSRF: &str = "dashboard_sign_in";

/// The sign-in form, with a fresh token in its field and in a cookie: a post from another site
/// cannot carry both.
pub(super) fn sign_in_form(
    headers: &HeaderMap,
    status: StatusCode,
    email: &str,
    problem: Option<&str>,
    good_news: Option<&str>,
) -> Response {
    let language = web::language(headers);
    let t = text::of(language);
    let check = random_token();
    let form = pages::sign_in(t, &check, email, problem, good_news);
    let mut response = page(status, pages::layout(t, language, t.sign_in, None, form));
    let cookie = cookie::Cookie::build((SIGN_IN_CSRF, check))
        .path("/dashboard/login")
        .http_only(true)
        .same_site(cookie::SameSite::Strict)
        .build();
    response.headers_mut().append(
        header::SET_COOKIE,
        cookie.to_string().parse().expect("hex is a valid header"),
    );
    response
}

pub(super) async fn sign_in_page(headers: HeaderMap) -> Response {
    sign_in_form(&headers, StatusCode::OK, "", None, None)
}

#[derive(Deserialize)]
pub(super) struct SignInForm {
    email: String,
    password: String,
    check: String,
}

pub(super) async fn sign_in(
    State(pool): State<Pool>,
    State(base): State<PublicBaseUrl>,
    request: Request,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let address = web::address_of(&parts);
    let headers = std::mem::take(&mut parts.headers);
    let t = text::of(web::language(&headers));
    let Ok(body) = axum::body::to_bytes(body, 64 * 1024).await else {
        return PageError::BadRequest("the form could not be read".to_owned()).into_response();
    };
    let form = match serde_urlencoded::from_bytes::<SignInForm>(&body) {
        Ok(form) => form,
        Err(e) => return PageError::BadRequest(e.to_string()).into_response(),
    };
    let cookie_check = headers
        .get_all(header::COOKIE)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == SIGN_IN_CSRF)
        .map(|c| c.value().to_owned());
    let same_browser = cookie_check
        .is_some_and(|c| subtle::ConstantTimeEq::ct_eq(c.as_bytes(), form.check.as_bytes()).into());
    if !same_browser {
        return sign_in_form(
            &headers,
            StatusCode::FORBIDDEN,
            &form.email,
            Some(t.expired_form),
            None,
        );
    }
    match sessions::sign_in(&pool, &form.email, &form.password, address).await {
        Ok(SignIn::Started { session_id, .. }) => {
            let mut response = see_other("/dashboard/payments");
            response.headers_mut().append(
                header::SET_COOKIE,
                web::session_cookie(&base, Some(&session_id)),
            );
            response
        }
        Ok(SignIn::Refused) => sign_in_form(
            &headers,
            StatusCode::UNAUTHORIZED,
            &form.email,
            Some(t.wrong_credentials),
            None,
        ),
        Ok(SignIn::Locked) => sign_in_form(
            &headers,
            StatusCode::TOO_MANY_REQUESTS,
            &form.email,
            Some(t.locked),
            None,
        ),
        Err(e) => PageError::from(e).into_response(),
    }
}

pub(super) async fn sign_out(
    State(pool): State<Pool>,
    State(base): State<PublicBaseUrl>,
    Acting { signed, .. }: Acting<Nothing>,
) -> Result<Response, PageError> {
    sessions::end(
        &mut *pool.acquire().await?,
        &signed.session,
        &signed.session_id,
        signed.address.clone(),
    )
    .await?;
    let mut response = see_other("/dashboard/login");
    response
        .headers_mut()
        .append(header::SET_COOKIE, web::session_cookie(&base, None));
    Ok(response)
}

#[derive(Deserialize)]
pub(super) struct TokenQuery {
    token: Option<String>,
}

pub(super) async fn password_page(
    State(pool): State<Pool>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, PageError> {
    let language = web::language(&headers);
    let t = text::of(language);
    let token = serde_urlencoded::from_str::<TokenQuery>(query.as_deref().unwrap_or(""))
        .ok()
        .and_then(|q| q.token)
        .unwrap_or_default();
    let user = people::link_user(&mut *pool.acquire().await?, &token).await?;
    let (status, content) = match &user {
        Some(user) => (
            StatusCode::OK,
            pages::set_password(t, &token, &user.email, None),
        ),
        None => (
            StatusCode::NOT_FOUND,
            pages::notice(Some(t.link_invalid), true),
        ),
    };
    Ok(page(
        status,
        pages::layout(t, language, t.set_password, None, content),
    ))
}

#[derive(Deserialize)]
pub(super) struct PasswordForm {
    token: String,
    password: String,
}

pub(super) async fn set_password(
    State(pool): State<Pool>,
    request: Request,
) -> Result<Response, PageError> {
    let (parts, body) = request.into_parts();
    let address = web::address_of(&parts);
    let language = web::language(&parts.headers);
    let t = text::of(language);
    let body = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map_err(|_| PageError::BadRequest("the form could not be read".to_owned()))?;
    let form = serde_urlencoded::from_bytes::<PasswordForm>(&body)
        .map_err(|e| PageError::BadRequest(e.to_string()))?;
    let password = match NewPassword::parse(form.password) {
        Ok(password) => password,
        Err(why) => {
            let user = people::link_user(&mut *pool.acquire().await?, &form.token).await?;
            let content = match &user {
                Some(user) => pages::set_password(
                    t,
                    &form.token,
                    &user.email,
                    Some(&format!("{}: {why}", t.password)),
                ),
                None => pages::notice(Some(t.link_invalid), true),
            };
            return Ok(page(
                StatusCode::BAD_REQUEST,
                pages::layout(t, language, t.set_password, None, content),
            ));
        }
    };
    let mut tx = OpenTransaction::begin_on_pool(&pool).await?;
    let set = people::set_password(&mut tx, &form.token, password, address).await?;
    tx.commit().await?;
    match set {
        Some(user) => Ok(sign_in_form(
            &parts.headers,
            StatusCode::OK,
            &user.email,
            None,
            Some(t.password_set),
        )),
        None => Ok(page(
            StatusCode::NOT_FOUND,
            pages::layout(
                t,
                language,
                t.set_password,
                None,
                pages::notice(Some(t.link_invalid), true),
            ),
        )),
    }
}
