//! HTTP handlers for `/v1/payment_intents`. They know nothing of idempotency: the layer around
//! them claims keys and stores whatever they answer.

use axum::{
    Extension, Json, Router,
    body::Bytes,
    extract::{FromRef, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use std::sync::Arc;

use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use sqlx::PgConnection;

use super::{
    domain::{
        Address, Amount, Chain, Currency, ExpiresIn, IntentId, Metadata, PaymentMethod, Price,
    },
    order,
    repo::{self, Expires, Inserted, NewIntent, PaidBy, PaymentIntent, Priced, TransitionError},
    state::{Action, Actor, IntentState},
};
use crate::{
    auth::MerchantId,
    config::ChainEndpoint,
    db::Pool,
    error::{ApiError, ErrorBody},
    extract::{JsonBody, Page, PathParam, QueryParams, page_limit, parse_json},
    idempotency::Tx,
    merchants::{OrderTerms, TermsCache},
    rails::evm::deposit,
};

pub fn router<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Pool: FromRef<S>,
    SettledChains: FromRef<S>,
    PublicBaseUrl: FromRef<S>,
    TermsCache: FromRef<S>,
{
    Router::new()
        .route("/v1/payment_intents", post(create).get(list))
        .route("/v1/payment_intents/{id}", get(show))
        .route("/v1/payment_intents/{id}/cancel", post(cancel))
}

/// `PUBLIC_BASE_URL`, which an intent's `checkout_url` starts with.
#[derive(Clone)]
pub struct PublicBaseUrl(Arc<str>);

impl PublicBaseUrl {
    pub fn new(url: &str) -> Self {
        Self(Arc::from(url))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// With settlement on, the only chains an intent may name (and their deposit factories); empty
/// when it is off.
#[derive(Clone)]
pub struct SettledChains(Arc<Vec<ChainEndpoint>>);

impl SettledChains {
    pub fn new(chains: Vec<ChainEndpoint>) -> Self {
        Self(Arc::new(chains))
    }
}

/// The create request: an amount of a token on a chain, or an order priced in a currency
/// (`currency` set), which the payer pays with any of the merchant's accepted assets. Unknown
/// fields are rejected: a misspelt `expires_in_secs` must not silently become the default.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateIntentRequest {
    /// `evm:<chain id>`, a positive decimal chain id without leading zeros; required unless
    /// `currency` is set, and then absent.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^evm:[1-9][0-9]*$", example = "evm:31337")]
    pub chain: Option<Chain>,
    /// The ERC-20 token contract: `0x` + 40 hex digits; mixed case must be a valid EIP-55
    /// checksum. Required unless `currency` is set, and then absent.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^0x[0-9a-fA-F]{40}$", example = "0x5FbDB2315678afecb367f032d93F642f64180aa3")]
    pub token: Option<Address>,
    /// How the intent is paid: `authorization` (the default), an EIP-3009 transfer its payer
    /// signs; `permit2`, a Permit2 transfer its payer signs, for any ERC-20 the payer approved
    /// Permit2 for; or `deposit_address`, plain transfers of the token to the intent's
    /// `deposit_address` from anyone. Absent for an order, whose options say.
    #[serde(default)]
    pub payment_method: Option<PaymentMethod>,
    /// The paying address, for `authorization` and `permit2`: if given, only it can pay; if
    /// not, whoever signs when confirming. Absent for `deposit_address` and for an order.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^0x[0-9a-fA-F]{40}$", example = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8")]
    pub payer: Option<Address>,
    /// The payee's address; for an order, the merchant's `payout_address` when absent.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^0x[0-9a-fA-F]{40}$", example = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC")]
    pub merchant: Option<Address>,
    /// A JSON string: token base units, 1 ≤ amount < 2^256; for an order, the price in
    /// `currency` with at most two fraction digits (`"25.00"`), more than zero.
    #[schema(value_type = String, pattern = "^([1-9][0-9]{0,77}|(0|[1-9][0-9]{0,12})([.][0-9]{1,2})?)$", example = "100000000")]
    pub amount: String,
    /// `usd` or `eur`: makes the intent an order priced in it (`docs/settlement.md`, "Orders and
    /// options").
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^(usd|eur)$", example = "usd")]
    pub currency: Option<String>,
    /// Seconds until an unpaid intent expires (canceled with reason `expired`).
    #[serde(default)]
    #[schema(value_type = Option<i64>, minimum = 60, maximum = 86400, default = 900)]
    pub expires_in_seconds: Option<ExpiresIn>,
    /// Your own key/value pairs, carried by every event about the intent: at most 50 keys of 1 to
    /// 40 characters, string values of at most 500.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Metadata,
}

/// Create a payment intent, or an order priced in a currency.
#[utoipa::path(
    post,
    path = "/v1/payment_intents",
    operation_id = "create_payment_intent",
    tag = "payment_intents",
    request_body(content = CreateIntentRequest, content_type = "application/json", description = "Parsed as JSON whatever the Content-Type says"),
    responses(
        (status = 201, description = "Created", body = PaymentIntent,
         headers(("Location" = String, description = "/v1/payment_intents/{id}"))),
        (status = 400, description = "`invalid_request`: the message names the field", body = ErrorBody),
    )
)]
pub async fn create(
    Extension(merchant): Extension<MerchantId>,
    State(SettledChains(settled)): State<SettledChains>,
    State(PublicBaseUrl(base)): State<PublicBaseUrl>,
    State(terms): State<TermsCache>,
    mut tx: Tx,
    JsonBody(mut request): JsonBody<CreateIntentRequest>,
) -> Result<Response, ApiError> {
    let id = IntentId::generate();
    let (priced, payee) = match &request.currency {
        Some(raw) => {
            order(
                &mut tx, &terms, false, &merchant, &settled, &id, &request, raw,
            )
            .await?
        }
        None => in_token(&settled, &id, &request)?,
    };
    let mut new = NewIntent {
        priced,
        payee,
        expires: Expires::In(request.expires_in_seconds.unwrap_or_default()),
        metadata: std::mem::take(&mut request.metadata),
        nonce: None,
    };
    let mut inserted = repo::insert(&mut tx, &merchant, &id, &new, Some(&base)).await?;
    // An order made from terms this replica read before the merchant changed them: made again
    // from the current ones (a change racing with that too is answered as any conflict).
    if inserted.is_none()
        && let Some(raw) = &request.currency
    {
        (new.priced, new.payee) = order(
            &mut tx, &terms, true, &merchant, &settled, &id, &request, raw,
        )
        .await?;
        inserted = repo::insert(&mut tx, &merchant, &id, &new, Some(&base)).await?;
    }
    let Inserted { intent, json } = inserted.ok_or_else(|| {
        ApiError::ChangedMeanwhile(
            "the merchant's settings changed twice while the order was made".to_owned(),
        )
    })?;
    let location = HeaderValue::try_from(format!("/v1/payment_intents/{}", intent.id))
        .map_err(|e| ApiError::Internal(e.into()))?;
    // The intent as its event holds it, serialized once.
    Ok((
        StatusCode::CREATED,
        [
            (header::LOCATION, location),
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
        ],
        json,
    )
        .into_response())
}

fn invalid(field: &str) -> impl Fn(String) -> ApiError + '_ {
    move |why| ApiError::InvalidRequest(format!("{field}: {why}"))
}

/// An intent for an amount of a token on a chain, paid one way, and its payee.
fn in_token(
    settled: &[ChainEndpoint],
    id: &IntentId,
    request: &CreateIntentRequest,
) -> Result<(Priced, Address), ApiError> {
    let required =
        |field: &str| invalid(field)("required (or set currency for an order)".to_owned());
    let chain = request.chain.clone().ok_or_else(|| required("chain"))?;
    let token = request.token.ok_or_else(|| required("token"))?;
    let payee = request.merchant.ok_or_else(|| required("merchant"))?;
    let amount = Amount::parse(&request.amount).map_err(invalid("amount"))?;
    let served = settled.iter().find(|c| c.name == chain.as_str());
    if !settled.is_empty() && served.is_none() {
        let names: Vec<&str> = settled.iter().map(|c| c.name.as_str()).collect();
        return Err(ApiError::InvalidRequest(format!(
            "chain: {} is not served here; served: {}",
            chain.as_str(),
            names.join(", ")
        )));
    }
    let paid_by = match (request.payment_method.unwrap_or_default(), request.payer) {
        (PaymentMethod::Authorization, payer) => PaidBy::Authorization { payer },
        (PaymentMethod::Permit2, payer) => PaidBy::Permit2 { payer },
        (PaymentMethod::DepositAddress, Some(_)) => {
            return Err(ApiError::InvalidRequest(
                "payer: must be absent when payment_method is deposit_address: whoever sends to the deposit address pays".to_owned(),
            ));
        }
        (PaymentMethod::DepositAddress, None) => {
            let factory = served.and_then(|c| c.deposit_factory).ok_or_else(|| {
                ApiError::InvalidRequest(format!(
                    "payment_method: deposit_address is not offered on {}",
                    chain.as_str()
                ))
            })?;
            let address = deposit::forwarder_address(
                factory,
                payee.into(),
                token.into(),
                deposit::intent_key(id.as_str()),
            );
            PaidBy::DepositAddress {
                address: address.into(),
            }
        }
    };
    let priced = Priced::InToken {
        chain,
        token,
        amount,
        paid_by,
    };
    Ok((priced, payee))
}

/// An order priced in `currency`, its options made from the merchant's accepted assets, and its
/// payee (the merchant's payout address unless the request names one), from the merchant's terms
/// as last read here unless `fresh`; terms read earlier that refuse the order are read again
/// before the refusal is answered.
#[allow(clippy::too_many_arguments)]
async fn order(
    conn: &mut PgConnection,
    terms: &TermsCache,
    fresh: bool,
    merchant: &MerchantId,
    settled: &[ChainEndpoint],
    id: &IntentId,
    request: &CreateIntentRequest,
    currency: &str,
) -> Result<(Priced, Address), ApiError> {
    let currency = Currency::parse(currency).map_err(invalid("currency"))?;
    let chosen_by_payer = [
        ("chain", request.chain.is_some()),
        ("token", request.token.is_some()),
        ("payment_method", request.payment_method.is_some()),
        ("payer", request.payer.is_some()),
    ];
    if let Some((field, _)) = chosen_by_payer.iter().find(|(_, given)| *given) {
        return Err(invalid(field)(
            "must be absent for an order priced in a currency: its payment_options say how it can be paid, and the payer chooses".to_owned(),
        ));
    }
    let price = Price::parse(&request.amount, currency).map_err(invalid("amount"))?;
    let (current, cached) = terms.get(conn, merchant.as_str(), fresh).await?;
    let made = priced_by(&current, request, id, &price, currency, settled);
    if made.is_err() && cached {
        let (current, _) = terms.get(conn, merchant.as_str(), true).await?;
        return priced_by(&current, request, id, &price, currency, settled);
    }
    made
}

/// The order of `price` in `currency` that `terms` make, and its payee.
fn priced_by(
    terms: &OrderTerms,
    request: &CreateIntentRequest,
    id: &IntentId,
    price: &Price,
    currency: Currency,
    settled: &[ChainEndpoint],
) -> Result<(Priced, Address), ApiError> {
    let payee = match (request.merchant, &terms.payout_address) {
        (Some(payee), _) => payee,
        (None, Some(payout)) => Address::parse(payout)
            .map_err(|e| ApiError::Internal(anyhow::anyhow!("stored payout address: {e}")))?,
        (None, None) => {
            return Err(invalid("merchant")(
                "required: no payout_address is set (POST /v1/merchant)".to_owned(),
            ));
        }
    };
    let options = order::options(id, payee, price, currency, &terms.accepted, settled);
    if options.is_empty() {
        return Err(invalid("currency")(format!(
            "no accepted asset in {} can be paid here: set accepted_assets (POST /v1/merchant) on a served chain",
            currency.as_str()
        )));
    }
    let priced = Priced::InCurrency {
        currency,
        price: price.clone(),
        options,
        terms_version: terms.version,
    };
    Ok((priced, payee))
}

/// Retrieve a payment intent.
#[utoipa::path(
    get,
    path = "/v1/payment_intents/{id}",
    operation_id = "retrieve_payment_intent",
    tag = "payment_intents",
    params(("id" = String, Path, description = "The intent id, pi_ + 24 hex digits")),
    responses(
        (status = 200, description = "The intent now", body = PaymentIntent),
        (status = 404, description = "`not_found`: absent, or another merchant's", body = ErrorBody),
    )
)]
pub async fn show(
    State(pool): State<Pool>,
    Extension(merchant): Extension<MerchantId>,
    PathParam(id): PathParam,
) -> Result<Json<PaymentIntent>, ApiError> {
    let id = parse_id(&id)?;
    repo::find(&mut *pool.acquire().await?, &merchant, &id)
        .await?
        .map(Json)
        .ok_or_else(|| not_found(&id))
}

/// The cancel request: no parameters today, so the body is empty or `{}`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelRequest {}

/// Cancel a `created` payment intent (reason `merchant_request`).
#[utoipa::path(
    post,
    path = "/v1/payment_intents/{id}/cancel",
    operation_id = "cancel_payment_intent",
    tag = "payment_intents",
    params(("id" = String, Path, description = "The intent id")),
    request_body(content = Option<Object>, content_type = "application/json", description = "Empty, or `{}`"),
    responses(
        (status = 200, description = "Canceled", body = PaymentIntent),
        (status = 404, description = "`not_found`", body = ErrorBody),
    )
)]
pub async fn cancel(
    Extension(merchant): Extension<MerchantId>,
    mut tx: Tx,
    PathParam(id): PathParam,
    body: Bytes,
) -> Result<Json<PaymentIntent>, ApiError> {
    if !body.iter().all(u8::is_ascii_whitespace) {
        parse_json::<CancelRequest>(&body)?;
    }
    let id = parse_id(&id)?;
    let actor = Actor::Merchant(merchant.as_str().to_owned());
    match repo::apply(&mut tx, &merchant, &id, Action::Cancel, &actor).await {
        Ok(intent) => Ok(Json(intent)),
        Err(TransitionError::NotFound) => Err(not_found(&id)),
        Err(e @ TransitionError::Forbidden { .. }) => Err(ApiError::InvalidStateTransition(
            format!("payment intent {}: {e}", id.as_str()),
        )),
        Err(TransitionError::Database(e)) => Err(e.into()),
    }
}

/// `GET /v1/payment_intents` parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Page size, 1..=100.
    #[param(minimum = 1, maximum = 100, default = 10)]
    limit: Option<i64>,
    /// An intent id: the page starts right after it.
    starting_after: Option<String>,
    /// Only intents in this state.
    #[param(pattern = "^(created|canceled|processing|succeeded|failed)$")]
    state: Option<String>,
}

/// List payment intents, newest first, in cursor pages.
#[utoipa::path(
    get,
    path = "/v1/payment_intents",
    operation_id = "list_payment_intents",
    tag = "payment_intents",
    params(ListParams),
    responses(
        (status = 200, description = "One page", body = Page<PaymentIntent>),
        (status = 400, description = "`invalid_request`", body = ErrorBody),
    )
)]
pub async fn list(
    State(pool): State<Pool>,
    Extension(merchant): Extension<MerchantId>,
    QueryParams(params): QueryParams<ListParams>,
) -> Result<Json<Page<PaymentIntent>>, ApiError> {
    let limit = page_limit(params.limit)?;
    let state = params
        .state
        .map(|raw| {
            IntentState::parse(&raw).ok_or_else(|| {
                let known: Vec<&str> = IntentState::ALL.iter().map(|s| s.as_str()).collect();
                ApiError::InvalidRequest(format!("state: must be one of {}", known.join(", ")))
            })
        })
        .transpose()?;
    let mut conn = pool.acquire().await?;
    let cursor = match params.starting_after {
        None => None,
        Some(raw) => {
            let unknown =
                || ApiError::InvalidRequest("starting_after: no such payment intent".to_owned());
            let id = IntentId::parse(&raw).ok_or_else(unknown)?;
            Some(
                repo::cursor(&mut conn, &merchant, &id)
                    .await?
                    .ok_or_else(unknown)?,
            )
        }
    };
    // One extra row tells whether another page follows.
    let rows = repo::list(&mut conn, &merchant, state, cursor.as_ref(), limit + 1).await?;
    Ok(Json(Page::of(rows, limit)))
}

/// Any string that could not be an id is simply not found: a path is not validated input.
fn parse_id(raw: &str) -> Result<IntentId, ApiError> {
    IntentId::parse(raw)
        .ok_or_else(|| ApiError::NotFound("no payment intent with that id".to_owned()))
}

fn not_found(id: &IntentId) -> ApiError {
    ApiError::NotFound(format!("no payment intent {}", id.as_str()))
}
