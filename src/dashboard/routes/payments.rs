//! The payments list and search, a payment's page, its cancel, and the balances.

use axum::{
    extract::{Path, RawQuery, State},
    http::StatusCode,
    response::Response,
};
use serde::Deserialize;

use super::{Nothing, PAGE, done};
use crate::dashboard::{
    forms,
    pages::{self, PaymentView, PaymentsQuery, Section},
    people::Permission,
    web::{Acting, PageError, Signed, see_other},
};
use crate::{
    db::Pool,
    error::ApiError,
    events,
    idempotency::answered_intent,
    intents::{
        domain::{Address, Chain, IntentId},
        repo::{self, PaymentIntent, Search, TransitionError},
        state::{Action, Actor, IntentState},
    },
    ledger,
    rails::{follower, tokens},
    ways_to_pay::refunds,
    webhooks,
};

#[derive(Deserialize)]
pub(super) struct PaymentsParams {
    state: Option<String>,
    q: Option<String>,
    after: Option<String>,
}

pub(super) async fn payments(
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
pub(super) fn transaction_hash(raw: &str) -> Option<String> {
    let digits = raw.strip_prefix("0x")?;
    (digits.len() == 64 && digits.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| raw.to_ascii_lowercase())
}

pub(super) async fn payment(
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
    let done = done(query.as_deref())
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
pub(super) async fn cancel(
    State(pool): State<Pool>,
    Path(id): Path<String>,
    Acting { signed, .. }: Acting<Nothing>,
) -> Result<Response, PageError> {
    signed.require(Permission::Cancel)?;
    let id = IntentId::parse(&id).ok_or(PageError::NotFound)?;
    let merchant = signed.merchant();
    let actor = Actor::Merchant(merchant.as_str().to_owned());
    let mut tx = signed.change(&pool).await?;
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
    tx.done("payment_intent.cancel", Some(id.as_str())).await?;
    Ok(see_other(&format!(
        "/dashboard/payments/{}?done=canceled",
        id.as_str()
    )))
}

pub(super) async fn balances(
    State(pool): State<Pool>,
    signed: Signed,
) -> Result<Response, PageError> {
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
pub(super) async fn token_units(
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
