//! The dashboard's routes under `/dashboard`: each loads what its page shows through the same
//! functions the API and the CLI use, checks the role an action needs first, and writes the
//! audit log's line in the change's own transaction.

use axum::{
    Router,
    extract::{FromRef, Path, RawQuery, Request, State},
    http::{HeaderMap, StatusCode, header},
    middleware::{Next, from_fn},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use rand::RngCore;
use serde::Deserialize;

use super::{
    export, forms,
    pages::{self, PaymentView, PaymentsQuery, Section},
    people::{self, Email, NewPassword, Permission, Role, TeamError},
    sessions::{self, SignIn},
    text,
    web::{self, Acting, PageError, Signed, page, see_other, with_headers},
};
use crate::{
    audit, auth,
    db::{OpenTransaction, Pool},
    error::ApiError,
    events,
    idempotency::answered_intent,
    intents::{
        domain::{Address, Amount, Chain, Currency, ExpiresIn, IntentId},
        repo::{self, PaymentIntent, Search, TransitionError},
        routes::PublicBaseUrl,
        state::{Action, Actor, IntentState},
    },
    ledger, merchants,
    rails::{Chains, follower, tokens},
    ways_to_pay::refunds::{self, domain::RefundId, repo::NewRefund},
    webhooks::{self, WebhookState, endpoints::Endpoint},
};

const STYLE: &str = include_str!("assets/dashboard.css");
const SCRIPT: &str = include_str!("assets/dashboard.js");
/// Rows per page of a list.
const PAGE: i64 = 25;
/// The cookie and field that tie the sign-in form to the browser that loaded it (the form has no
/// session yet to carry a token of).
const SIGN_IN_CSRF: &str = "dashboard_sign_in";

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
        .route("/dashboard/login", get(sign_in_page).post(sign_in))
        .route("/dashboard/logout", post(sign_out))
        .route("/dashboard/password", get(password_page).post(set_password))
        .route("/dashboard/payments", get(payments))
        .route("/dashboard/payments/{id}", get(payment))
        .route("/dashboard/payments/{id}/cancel", post(cancel))
        .route("/dashboard/payments/{id}/refunds", post(create_refund))
        .route("/dashboard/refunds/{id}", get(refund))
        .route(
            "/dashboard/refunds/{id}/authorization",
            get(refund_authorization),
        )
        .route("/dashboard/refunds/{id}/confirm", post(confirm_refund))
        .route("/dashboard/api-keys", get(api_keys).post(create_key))
        .route("/dashboard/api-keys/revoke", post(revoke_key))
        .route("/dashboard/api-keys/rotate", post(rotate_key))
        .route("/dashboard/team", get(team).post(invite))
        .route("/dashboard/team/{id}", post(change_member))
        .route("/dashboard/balances", get(balances))
        .route("/dashboard/webhooks", get(webhooks).post(add_endpoint))
        .route(
            "/dashboard/webhooks/{id}",
            get(endpoint).post(change_endpoint),
        )
        .route("/dashboard/settings", get(settings).post(save_settings))
        .route("/dashboard/settings/assets", post(edit_assets))
        .route("/dashboard/export", get(export_page))
        .route("/dashboard/export.csv", get(export_csv))
        .route("/dashboard/audit", get(audit_log))
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

fn random_token() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// The sign-in form, with a fresh token in its field and in a cookie: a post from another site
/// cannot carry both.
fn sign_in_form(
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

async fn sign_in_page(headers: HeaderMap) -> Response {
    sign_in_form(&headers, StatusCode::OK, "", None, None)
}

#[derive(Deserialize)]
struct SignInForm {
    email: String,
    password: String,
    check: String,
}

async fn sign_in(
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

#[derive(Deserialize)]
struct Nothing {}

async fn sign_out(
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
struct TokenQuery {
    token: Option<String>,
}

async fn password_page(
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
struct PasswordForm {
    token: String,
    password: String,
}

async fn set_password(State(pool): State<Pool>, request: Request) -> Result<Response, PageError> {
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

#[derive(Deserialize)]
struct PaymentsParams {
    state: Option<String>,
    q: Option<String>,
    after: Option<String>,
}

async fn payments(
    State(pool): State<Pool>,
    signed: Signed,
    RawQuery(query): RawQuery,
) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    let params = serde_urlencoded::from_str::<PaymentsParams>(query.as_deref().unwrap_or(""))
        .map_err(|e| PageError::BadRequest(e.to_string()))?;
    let state = match params.state.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(raw) => Some(
            IntentState::parse(raw)
                .ok_or_else(|| PageError::BadRequest(format!("state: no state {raw:?}")))?,
        ),
    };
    let search = params.q.as_deref().unwrap_or("").trim();
    let merchant = signed.merchant();
    let mut conn = pool.acquire().await?;
    let after = match params.after.as_deref().and_then(IntentId::parse) {
        Some(id) => repo::cursor(&mut conn, &merchant, &id).await?,
        None => None,
    };
    let is_first = after.is_none();
    let found: Vec<PaymentIntent> = if search.is_empty() {
        repo::list(&mut conn, &merchant, state, after.as_ref(), PAGE + 1).await?
    } else if let Some(id) = IntentId::parse(search) {
        repo::find(&mut conn, &merchant, &id)
            .await?
            .into_iter()
            .collect()
    } else if let Some(hash) = transaction_hash(search) {
        let kind = Search::TransactionHash(&hash);
        repo::search(&mut conn, &merchant, kind, state, after.as_ref(), PAGE + 1).await?
    } else if let Ok(address) = Address::parse(search) {
        let address = address.to_checksum();
        let kind = Search::Address(&address);
        repo::search(&mut conn, &merchant, kind, state, after.as_ref(), PAGE + 1).await?
    } else {
        // Anything else may be the Idempotency-Key the intent was created with.
        match answered_intent(&mut conn, merchant.as_str(), search).await? {
            Some(id) => match IntentId::parse(&id) {
                Some(id) => repo::find(&mut conn, &merchant, &id)
                    .await?
                    .into_iter()
                    .collect(),
                None => Vec::new(),
            },
            None => Vec::new(),
        }
    };
    let (shown, next) = if found.len() as i64 > PAGE {
        let shown = &found[..PAGE as usize];
        (shown, shown.last().map(|i| i.id.as_str()))
    } else {
        (&found[..], None)
    };
    let mut units = Vec::with_capacity(shown.len());
    let mut read = std::collections::HashMap::new();
    for intent in shown {
        let (Some(chain), Some(token)) = (&intent.chain, &intent.token) else {
            units.push((None, None));
            continue;
        };
        let key = (chain.clone(), token.clone());
        if !read.contains_key(&key) {
            let found = token_units(&mut conn, chain, token).await?;
            read.insert(key.clone(), found);
        }
        units.push(read[&key].clone());
    }
    let t = signed.text();
    let query = PaymentsQuery { state, search };
    let content = pages::payments(t, &query, shown, &units, next, is_first);
    Ok(signed.page(StatusCode::OK, t.payments, Section::Payments, content))
}

/// `0x` and 64 hex digits, lower-cased as transaction hashes are stored.
fn transaction_hash(raw: &str) -> Option<String> {
    let digits = raw.strip_prefix("0x")?;
    (digits.len() == 64 && digits.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| raw.to_ascii_lowercase())
}

#[derive(Deserialize)]
struct DoneQuery {
    done: Option<String>,
}

async fn payment(
    State(pool): State<Pool>,
    signed: Signed,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    let id = IntentId::parse(&id).ok_or(PageError::NotFound)?;
    let merchant = signed.merchant();
    let mut conn = pool.acquire().await?;
    let intent = repo::find(&mut conn, &merchant, &id)
        .await?
        .ok_or(PageError::NotFound)?;
    let units = match (&intent.chain, &intent.token) {
        (Some(chain), Some(token)) => token_units(&mut conn, chain, token).await?,
        _ => (None, None),
    };
    let followed_up_to = match intent.chain.as_deref().and_then(Chain::id_of) {
        Some(id) => follower::followed_up_to(&mut conn, id).await?,
        None => None,
    };
    let changes = events::store::of_subject(&mut conn, merchant.as_str(), id.as_str()).await?;
    let postings = ledger::of_intent(&mut conn, merchant.as_str(), id.as_str()).await?;
    let refunds = refunds::repo::list(&mut conn, &merchant, Some(&id), None, 100).await?;
    let deliveries =
        webhooks::delivery::of_subject(&mut conn, merchant.as_str(), id.as_str()).await?;
    let t = signed.text();
    let done = serde_urlencoded::from_str::<DoneQuery>(query.as_deref().unwrap_or(""))
        .ok()
        .and_then(|q| q.done)
        .filter(|d| d == "canceled")
        .map(|_| t.canceled_now);
    let view = PaymentView {
        intent: &intent,
        units,
        changes: &changes,
        postings: &postings,
        refunds: &refunds,
        deliveries: &deliveries,
        followed_up_to,
    };
    let content = pages::payment(t, &signed.session, &view, done, &forms::new_id());
    let title = format!("{} {}", t.payment, intent.id);
    Ok(signed.page(StatusCode::OK, &title, Section::Payments, content))
}

/// Cancels a `created` intent through the same transition as `POST
/// /v1/payment_intents/{id}/cancel`, as the merchant, with the audit line in its transaction.
async fn cancel(
    State(pool): State<Pool>,
    Path(id): Path<String>,
    Acting { signed, .. }: Acting<Nothing>,
) -> Result<Response, PageError> {
    signed.require(Permission::Cancel)?;
    let id = IntentId::parse(&id).ok_or(PageError::NotFound)?;
    let merchant = signed.merchant();
    let actor = Actor::Merchant(merchant.as_str().to_owned());
    let mut tx = OpenTransaction::begin_on_pool(&pool).await?;
    match repo::apply(&mut tx, &merchant, &id, Action::Cancel, &actor).await {
        Ok(_) => {}
        Err(TransitionError::NotFound) => return Err(PageError::NotFound),
        Err(e @ TransitionError::Forbidden { .. }) => {
            return Err(PageError::Api(ApiError::InvalidStateTransition(format!(
                "payment intent {}: {e}",
                id.as_str()
            ))));
        }
        Err(TransitionError::Database(e)) => return Err(e.into()),
    }
    audit::record(
        &mut tx,
        merchant.as_str(),
        &signed.who(),
        "payment_intent.cancel",
        Some(id.as_str()),
    )
    .await?;
    tx.commit().await?;
    Ok(see_other(&format!(
        "/dashboard/payments/{}?done=canceled",
        id.as_str()
    )))
}

async fn keys_page(
    pool: &Pool,
    signed: &Signed,
    new_secret: Option<&str>,
) -> Result<Response, PageError> {
    let keys = auth::list(pool, &signed.merchant()).await?;
    let t = signed.text();
    let content = pages::api_keys(t, &signed.session, &keys, new_secret);
    Ok(signed.page(StatusCode::OK, t.api_keys, Section::ApiKeys, content))
}

async fn api_keys(State(pool): State<Pool>, signed: Signed) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    keys_page(&pool, &signed, None).await
}

/// The CLI's `api-keys create`; the secret is in this answer only (never stored, never cached).
async fn create_key(
    State(pool): State<Pool>,
    Acting { signed, .. }: Acting<Nothing>,
) -> Result<Response, PageError> {
    signed.require(Permission::ManageApiKeys)?;
    let token = auth::create(&pool, &signed.merchant(), &signed.who())
        .await
        .map_err(|e| PageError::Api(ApiError::Internal(e)))?;
    keys_page(&pool, &signed, Some(&token)).await
}

#[derive(Deserialize)]
struct RevokeForm {
    prefix: String,
}

/// The CLI's `api-keys revoke`, for this merchant's keys only.
async fn revoke_key(
    State(pool): State<Pool>,
    Acting { signed, form }: Acting<RevokeForm>,
) -> Result<Response, PageError> {
    signed.require(Permission::ManageApiKeys)?;
    auth::revoke(&pool, Some(&signed.merchant()), &form.prefix, &signed.who())
        .await
        .map_err(|_| PageError::NotFound)?;
    Ok(see_other("/dashboard/api-keys"))
}

#[derive(Deserialize)]
struct RotateForm {
    old_expires_in: u64,
}

/// The CLI's `api-keys rotate`: a new key shown once, the others expiring after the overlap.
async fn rotate_key(
    State(pool): State<Pool>,
    Acting { signed, form }: Acting<RotateForm>,
) -> Result<Response, PageError> {
    signed.require(Permission::ManageApiKeys)?;
    if form.old_expires_in > 30 * 24 * 3600 {
        return Err(PageError::BadRequest(
            "old_expires_in: at most 30 days (2592000 seconds)".to_owned(),
        ));
    }
    let overlap = std::time::Duration::from_secs(form.old_expires_in);
    let token = auth::rotate(&pool, &signed.merchant(), overlap, &signed.who())
        .await
        .map_err(|e| PageError::Api(ApiError::Internal(e)))?;
    keys_page(&pool, &signed, Some(&token)).await
}

async fn team_page(
    pool: &Pool,
    signed: &Signed,
    status: StatusCode,
    invited: Option<&str>,
    problem: Option<&str>,
) -> Result<Response, PageError> {
    let people = people::team(&mut *pool.acquire().await?, signed.session.merchant()).await?;
    let t = signed.text();
    let content = pages::team(t, &signed.session, &people, invited, problem);
    Ok(signed.page(status, t.team, Section::Team, content))
}

async fn team(State(pool): State<Pool>, signed: Signed) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    team_page(&pool, &signed, StatusCode::OK, None, None).await
}

#[derive(Deserialize)]
struct InviteForm {
    email: String,
    role: String,
}

/// The CLI's `users create`: a person and their one-time link, shown once.
async fn invite(
    State(pool): State<Pool>,
    State(base): State<PublicBaseUrl>,
    Acting { signed, form }: Acting<InviteForm>,
) -> Result<Response, PageError> {
    signed.require(Permission::ManageTeam)?;
    let email =
        Email::parse(&form.email).map_err(|why| PageError::BadRequest(format!("email: {why}")))?;
    let role = Role::parse(&form.role)
        .ok_or_else(|| PageError::BadRequest("role: must be owner, developer or viewer".into()))?;
    let mut tx = OpenTransaction::begin_on_pool(&pool).await?;
    let invited = people::invite(
        &mut tx,
        signed.session.merchant(),
        &email,
        role,
        &signed.who(),
    )
    .await;
    match invited {
        Ok((_, token)) => {
            tx.commit().await?;
            let link = password_link(&base, &token);
            team_page(&pool, &signed, StatusCode::OK, Some(&link), None).await
        }
        Err(e) => {
            drop(tx);
            team_refusal(&pool, &signed, e).await
        }
    }
}

/// The link a person sets their password with.
pub fn password_link(base: &PublicBaseUrl, token: &str) -> String {
    format!("{}/dashboard/password?token={token}", base.as_str())
}

async fn team_refusal(pool: &Pool, signed: &Signed, e: TeamError) -> Result<Response, PageError> {
    let message = e.to_string();
    match e {
        TeamError::Database(e) => Err(e.into()),
        TeamError::NotFound => Err(PageError::NotFound),
        TeamError::EmailTaken | TeamError::LastOwner => {
            team_page(pool, signed, StatusCode::CONFLICT, None, Some(&message)).await
        }
    }
}

#[derive(Deserialize)]
struct MemberForm {
    role: Option<String>,
    #[serde(rename = "do")]
    what: String,
}

async fn change_member(
    State(pool): State<Pool>,
    Path(id): Path<String>,
    Acting { signed, form }: Acting<MemberForm>,
) -> Result<Response, PageError> {
    signed.require(Permission::ManageTeam)?;
    let role = match form.what.as_str() {
        "remove" => None,
        "change" => Some(form.role.as_deref().and_then(Role::parse).ok_or_else(|| {
            PageError::BadRequest("role: must be owner, developer or viewer".into())
        })?),
        _ => return Err(PageError::BadRequest("do: must be change or remove".into())),
    };
    let mut tx = OpenTransaction::begin_on_pool(&pool).await?;
    match people::change(&mut tx, signed.session.merchant(), &id, role, &signed.who()).await {
        Ok(()) => {
            tx.commit().await?;
            Ok(see_other("/dashboard/team"))
        }
        Err(e) => {
            drop(tx);
            team_refusal(&pool, &signed, e).await
        }
    }
}

#[derive(Deserialize)]
struct AuditParams {
    before: Option<i64>,
}

async fn audit_log(
    State(pool): State<Pool>,
    signed: Signed,
    RawQuery(query): RawQuery,
) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    let params = serde_urlencoded::from_str::<AuditParams>(query.as_deref().unwrap_or(""))
        .map_err(|e| PageError::BadRequest(e.to_string()))?;
    let mut lines = audit::list(
        &mut *pool.acquire().await?,
        signed.session.merchant(),
        params.before,
        PAGE + 1,
    )
    .await?;
    let next = if lines.len() as i64 > PAGE {
        lines.truncate(PAGE as usize);
        lines.last().map(|l| l.id)
    } else {
        None
    };
    let t = signed.text();
    let content = pages::audit_log(t, &lines, next);
    Ok(signed.page(StatusCode::OK, t.audit_log, Section::AuditLog, content))
}

async fn balances(State(pool): State<Pool>, signed: Signed) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    let mut conn = pool.acquire().await?;
    let balances = ledger::routes::balances_of(&mut conn, &signed.merchant()).await?;
    let mut units = Vec::with_capacity(balances.data.len());
    for balance in &balances.data {
        units.push(token_units(&mut conn, &balance.chain, &balance.token).await?);
    }
    let t = signed.text();
    let content = pages::balances(t, &balances, &units);
    Ok(signed.page(StatusCode::OK, t.balances, Section::Balances, content))
}

/// The symbol and decimals read of a token on a chain (`evm:<id>`), when read.
async fn token_units(
    conn: &mut sqlx::PgConnection,
    chain: &str,
    token: &str,
) -> Result<(Option<String>, Option<u8>), sqlx::Error> {
    let Some(chain_id) = Chain::id_of(chain) else {
        return Ok((None, None));
    };
    Ok(tokens::units_of(conn, chain_id, token)
        .await?
        .map(|(symbol, decimals)| (symbol, decimals.and_then(|d| u8::try_from(d).ok())))
        .unwrap_or_default())
}

async fn settings_page(
    pool: &Pool,
    chains: &Chains,
    signed: &Signed,
    saved: bool,
) -> Result<Response, PageError> {
    let merchant = merchants::settings_of(&mut *pool.acquire().await?, &signed.merchant()).await?;
    let served: Vec<&str> = chains
        .settings
        .chains
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    let t = signed.text();
    let content = pages::settings(t, &signed.session, &merchant, &served, saved);
    Ok(signed.page(StatusCode::OK, t.settings, Section::Settings, content))
}

async fn settings(
    State(pool): State<Pool>,
    State(chains): State<Chains>,
    signed: Signed,
    RawQuery(query): RawQuery,
) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    let saved = serde_urlencoded::from_str::<DoneQuery>(query.as_deref().unwrap_or(""))
        .ok()
        .and_then(|q| q.done)
        .is_some_and(|d| d == "saved");
    settings_page(&pool, &chains, &signed, saved).await
}

#[derive(Deserialize)]
struct SettingsForm {
    display_name: String,
    /// Empty keeps the address as it is (the API cannot unset one either).
    #[serde(default)]
    payout_address: String,
}

/// `POST /v1/merchant`'s change, for the display name and payout address, with the audit line in
/// its transaction.
async fn save_settings(
    State(pool): State<Pool>,
    State(chains): State<Chains>,
    Acting { signed, form }: Acting<SettingsForm>,
) -> Result<Response, PageError> {
    signed.require(Permission::ManageSettings)?;
    let merchant = signed.merchant();
    let payout_address = Some(form.payout_address.trim().to_owned()).filter(|a| !a.is_empty());
    let mut tx = OpenTransaction::begin_on_pool(&pool).await?;
    let before = merchants::settings_of(&mut tx, &merchant).await?;
    let change = merchants::UpdateMerchant {
        display_name: Some(form.display_name),
        payout_address,
        accepted_assets: None,
    };
    let after = merchants::change(&mut tx, &chains, &merchant, change).await?;
    if after.display_name != before.display_name {
        let who = signed.who();
        audit::record(
            &mut tx,
            merchant.as_str(),
            &who,
            "merchant.display_name",
            None,
        )
        .await?;
    }
    if after.payout_address != before.payout_address {
        let who = signed.who();
        let address = after.payout_address.as_deref();
        audit::record(
            &mut tx,
            merchant.as_str(),
            &who,
            "merchant.payout_address",
            address,
        )
        .await?;
    }
    tx.commit().await?;
    Ok(see_other("/dashboard/settings?done=saved"))
}

#[derive(Deserialize)]
struct AssetForm {
    #[serde(rename = "do")]
    action: String,
    chain: String,
    token: String,
    currency: String,
}

/// Adds an accepted asset (checked on its chain, as `POST /v1/merchant` checks it) or removes
/// one, with the audit line in the change's transaction.
async fn edit_assets(
    State(pool): State<Pool>,
    State(chains): State<Chains>,
    Acting { signed, form }: Acting<AssetForm>,
) -> Result<Response, PageError> {
    signed.require(Permission::ManageSettings)?;
    let merchant = signed.merchant();
    let target = format!("{} {} {}", form.chain, form.token.trim(), form.currency);
    let (edit, action) = match form.action.as_str() {
        "add" => (
            merchants::AssetEdit::Add(merchants::assets::AssetRequest {
                chain: form.chain,
                token: form.token.trim().to_owned(),
                currency: form.currency,
            }),
            "merchant.accepted_asset.add",
        ),
        "remove" => (
            merchants::AssetEdit::Remove {
                chain: form.chain,
                token: form.token,
                currency: Currency::parse(&form.currency)
                    .map_err(|why| PageError::BadRequest(format!("currency: {why}")))?,
            },
            "merchant.accepted_asset.remove",
        ),
        _ => {
            return Err(PageError::BadRequest(
                "do: must be add or remove".to_owned(),
            ));
        }
    };
    let mut tx = OpenTransaction::begin_on_pool(&pool).await?;
    merchants::edit_accepted_assets(&mut tx, &chains, &merchant, edit).await?;
    audit::record(
        &mut tx,
        merchant.as_str(),
        &signed.who(),
        action,
        Some(&target),
    )
    .await?;
    tx.commit().await?;
    Ok(see_other("/dashboard/settings?done=saved"))
}

async fn webhooks_page(
    pool: &Pool,
    signed: &Signed,
    created: Option<&Endpoint>,
) -> Result<Response, PageError> {
    let endpoints =
        webhooks::endpoints::endpoints_of(&mut *pool.acquire().await?, &signed.merchant()).await?;
    let t = signed.text();
    let content = pages::webhooks(t, &signed.session, &endpoints, created);
    Ok(signed.page(StatusCode::OK, t.webhooks, Section::Webhooks, content))
}

async fn webhooks(State(pool): State<Pool>, signed: Signed) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    webhooks_page(&pool, &signed, None).await
}

#[derive(Deserialize)]
struct EndpointForm {
    url: String,
    description: Option<String>,
}

/// `POST /v1/webhook_endpoints`'s checks and insert; the secret is shown in this answer only.
async fn add_endpoint(
    State(pool): State<Pool>,
    State(state): State<WebhookState>,
    Acting { signed, form }: Acting<EndpointForm>,
) -> Result<Response, PageError> {
    signed.require(Permission::ManageWebhooks)?;
    let merchant = signed.merchant();
    let request = webhooks::endpoints::CreateEndpoint {
        url: form.url,
        event_types: None,
        description: form.description.filter(|d| !d.trim().is_empty()),
    };
    let mut tx = OpenTransaction::begin_on_pool(&pool).await?;
    let created = webhooks::endpoints::add(&mut tx, &state.settings, &merchant, request).await?;
    audit::record(
        &mut tx,
        merchant.as_str(),
        &signed.who(),
        "webhook_endpoint.create",
        Some(&created.id),
    )
    .await?;
    tx.commit().await?;
    webhooks_page(&pool, &signed, Some(&created)).await
}

async fn endpoint(
    State(pool): State<Pool>,
    signed: Signed,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    let merchant = signed.merchant();
    let mut conn = pool.acquire().await?;
    let endpoint = webhooks::endpoints::endpoint_of(&mut conn, &merchant, &id)
        .await?
        .ok_or(PageError::NotFound)?;
    let deliveries =
        webhooks::delivery::of_endpoint(&mut conn, merchant.as_str(), &endpoint.id, PAGE).await?;
    let t = signed.text();
    let done = serde_urlencoded::from_str::<DoneQuery>(query.as_deref().unwrap_or(""))
        .ok()
        .and_then(|q| q.done)
        .and_then(|d| match d.as_str() {
            "resent" => Some(t.resent),
            "test" => Some(t.test_sent),
            _ => None,
        });
    let content = pages::endpoint(t, &signed.session, &endpoint, &deliveries, done);
    Ok(signed.page(StatusCode::OK, &endpoint.url, Section::Webhooks, content))
}

#[derive(Deserialize)]
struct EndpointChange {
    #[serde(rename = "do")]
    what: String,
    event: Option<String>,
}

/// Rotate an endpoint's secret, delete it, resend a failed delivery to it, or send it a test
/// event; each with its audit line in its transaction.
async fn change_endpoint(
    State(pool): State<Pool>,
    Path(id): Path<String>,
    Acting { signed, form }: Acting<EndpointChange>,
) -> Result<Response, PageError> {
    signed.require(Permission::ManageWebhooks)?;
    let merchant = signed.merchant();
    let mut tx = OpenTransaction::begin_on_pool(&pool).await?;
    let (action, back) = match form.what.as_str() {
        "rotate" => {
            let rotated = webhooks::endpoints::rotate(&mut tx, &merchant, &id)
                .await?
                .ok_or(PageError::NotFound)?;
            audit::record(
                &mut tx,
                merchant.as_str(),
                &signed.who(),
                "webhook_endpoint.rotate_secret",
                Some(&id),
            )
            .await?;
            tx.commit().await?;
            return webhooks_page(&pool, &signed, Some(&rotated)).await;
        }
        "delete" => {
            if !webhooks::endpoints::delete(&mut tx, &merchant, &id).await? {
                return Err(PageError::NotFound);
            }
            ("webhook_endpoint.delete", "/dashboard/webhooks".to_owned())
        }
        "resend" => {
            let event = form
                .event
                .ok_or_else(|| PageError::BadRequest("event: missing".to_owned()))?;
            if !webhooks::delivery::resend(&mut tx, merchant.as_str(), &id, &event).await? {
                return Err(PageError::NotFound);
            }
            (
                "webhook_delivery.resend",
                format!("/dashboard/webhooks/{id}?done=resent"),
            )
        }
        "test" => {
            let known = webhooks::endpoints::endpoints_of(&mut tx, &merchant).await?;
            if !known.iter().any(|e| e.id == id) {
                return Err(PageError::NotFound);
            }
            events::store::record_test(&mut tx, merchant.as_str(), &id).await?;
            (
                "webhook_endpoint.test",
                format!("/dashboard/webhooks/{id}?done=test"),
            )
        }
        _ => {
            return Err(PageError::BadRequest(
                "do: must be rotate, delete, resend or test".to_owned(),
            ));
        }
    };
    audit::record(&mut tx, merchant.as_str(), &signed.who(), action, Some(&id)).await?;
    tx.commit().await?;
    Ok(see_other(&back))
}

async fn export_page(signed: Signed) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    let today = time::OffsetDateTime::now_utc().date();
    let format = time::format_description::parse("[year]-[month]-[day]")
        .expect("a valid format description");
    let day = |d: time::Date| d.format(&format).unwrap_or_default();
    let t = signed.text();
    let content = pages::export(t, &day(today - time::Duration::days(30)), &day(today));
    Ok(signed.page(StatusCode::OK, t.export, Section::Export, content))
}

#[derive(Deserialize)]
struct ExportParams {
    what: String,
    from: String,
    to: String,
}

async fn export_csv(
    State(pool): State<Pool>,
    signed: Signed,
    RawQuery(query): RawQuery,
) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    let params = serde_urlencoded::from_str::<ExportParams>(query.as_deref().unwrap_or(""))
        .map_err(|e| PageError::BadRequest(e.to_string()))?;
    let kind = export::Kind::parse(&params.what)
        .ok_or_else(|| PageError::BadRequest("what: must be payments or ledger".to_owned()))?;
    let range = export::Range::parse(&params.from, &params.to).map_err(PageError::BadRequest)?;
    let file = format!("{}-{}-{}.csv", kind.as_str(), params.from, params.to);
    let body = export::body(pool, signed.merchant(), kind, range);
    let mut response = with_headers(Response::new(body), false);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        "text/csv; charset=utf-8".parse().expect("static"),
    );
    headers.insert(
        header::CONTENT_DISPOSITION,
        format!("attachment; filename=\"{file}\"")
            .parse()
            .map_err(|_| PageError::BadRequest("from, to: must be dates".to_owned()))?,
    );
    Ok(response)
}

#[derive(Deserialize)]
struct RefundForm {
    amount: String,
    form: String,
}

/// `POST /v1/payment_intents/{id}/refunds` from the payment page: the amount in the token's units
/// (empty: all that is left), the form's one-time id so a second submit makes nothing more.
async fn create_refund(
    State(pool): State<Pool>,
    State(chains): State<Chains>,
    Path(id): Path<String>,
    Acting { signed, form }: Acting<RefundForm>,
) -> Result<Response, PageError> {
    signed.require(Permission::Refund)?;
    let id = IntentId::parse(&id).ok_or(PageError::NotFound)?;
    if !forms::is_id(&form.form) {
        return Err(PageError::BadRequest(
            "form: not a form of this dashboard".to_owned(),
        ));
    }
    let merchant = signed.merchant();
    let mut tx = OpenTransaction::begin_on_pool(&pool).await?;
    if let Some(made) = forms::claim(&mut tx, &form.form, &signed.session.user.id).await? {
        return Ok(see_other(&format!("/dashboard/refunds/{made}")));
    }
    let intent = repo::find(&mut tx, &merchant, &id)
        .await?
        .ok_or(PageError::NotFound)?;
    let amount = match form.amount.trim() {
        "" => None,
        raw => {
            let decimals = match (&intent.chain, &intent.token) {
                (Some(chain), Some(token)) => token_units(&mut tx, chain, token).await?.1,
                _ => None,
            };
            Some(base_units(raw, decimals).map_err(PageError::BadRequest)?)
        }
    };
    let new = NewRefund {
        amount: amount.as_ref(),
        duplicate_payment: None,
        destination: None,
        reason: None,
        expires_in: ExpiresIn::parse(ExpiresIn::MAX).expect("the maximum is valid"),
    };
    let refund = refunds::payments::create(&mut tx, &chains, &merchant, id.as_str(), &new).await?;
    forms::made(&mut tx, &form.form, &refund.id).await?;
    audit::record(
        &mut tx,
        merchant.as_str(),
        &signed.who(),
        "refund.create",
        Some(&refund.id),
    )
    .await?;
    tx.commit().await?;
    Ok(see_other(&format!("/dashboard/refunds/{}", refund.id)))
}

/// An amount typed in the token's units (`2.50`) as base units; without known decimals, base
/// units as typed.
fn base_units(raw: &str, decimals: Option<u8>) -> Result<Amount, String> {
    // Digits and one point only: `parse_units` would also take a sign, and its absolute value
    // would turn `-1` into a refund of 1.
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err("amount: must be digits with at most one decimal point".to_owned());
    }
    let base = match decimals {
        Some(decimals) => alloy::primitives::utils::parse_units(raw, decimals)
            .map_err(|_| format!("amount: not an amount with at most {decimals} decimals"))?
            .get_absolute()
            .to_string(),
        None => raw.to_owned(),
    };
    Amount::parse(&base).map_err(|why| format!("amount: {why}"))
}

async fn refund(
    State(pool): State<Pool>,
    signed: Signed,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    let id = RefundId::parse(&id).ok_or(PageError::NotFound)?;
    let mut conn = pool.acquire().await?;
    let refund = refunds::repo::find(&mut conn, &signed.merchant(), &id)
        .await?
        .ok_or(PageError::NotFound)?;
    let units = token_units(&mut conn, &refund.chain, &refund.token).await?;
    let t = signed.text();
    let content = pages::refund(t, &signed.session, &refund, &units);
    let title = format!("{} {}", t.refund, refund.id);
    Ok(signed.page(StatusCode::OK, &title, Section::Payments, content))
}

/// What the merchant's wallet signs for the refund, as `GET /v1/refunds/{id}/authorization`.
async fn refund_authorization(
    State(pool): State<Pool>,
    State(chains): State<Chains>,
    signed: Signed,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    signed.require(Permission::Refund)?;
    let mut conn = pool.acquire().await?;
    let authorization =
        refunds::payments::authorization(&mut conn, &chains, &signed.merchant(), &id).await?;
    let document = crate::rails::eip3009::AuthorizationDocument::of(&authorization);
    Ok(with_headers(axum::Json(document).into_response(), false))
}

#[derive(Deserialize)]
struct SignatureForm {
    signature: String,
}

/// `POST /v1/refunds/{id}/confirm` with the wallet's signature: checked, then the transfer queued.
async fn confirm_refund(
    State(pool): State<Pool>,
    State(chains): State<Chains>,
    Path(id): Path<String>,
    Acting { signed, form }: Acting<SignatureForm>,
) -> Result<Response, PageError> {
    signed.require(Permission::Refund)?;
    let merchant = signed.merchant();
    let mut tx = OpenTransaction::begin_on_pool(&pool).await?;
    let refund =
        refunds::payments::confirm(&mut tx, &chains, &merchant, &id, &form.signature).await?;
    audit::record(
        &mut tx,
        merchant.as_str(),
        &signed.who(),
        "refund.confirm",
        Some(&refund.id),
    )
    .await?;
    tx.commit().await?;
    Ok(see_other(&format!("/dashboard/refunds/{}", refund.id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refund_amount_is_read_in_the_tokens_units_and_never_signed() {
        assert_eq!(base_units("10.5", Some(6)).unwrap().as_str(), "10500000");
        assert_eq!(base_units("7", None).unwrap().as_str(), "7");
        for bad in ["-1", "+1", "1e6", "1.2.3", "0.0000001", "", "0"] {
            assert!(base_units(bad, Some(6)).is_err(), "{bad}");
        }
    }
}
