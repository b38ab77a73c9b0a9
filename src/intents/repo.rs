//! SQL on `payment_intents`, which only this module writes: the ways to pay, the checkout page and
//! the ledger call the functions here (a deposit counted, a refund's amount added, an intent found
//! by its chain nonce, expiry by chain time), so each rule is in one place. One read is elsewhere:
//! the checkout page's view joins the intent with its merchant's name and its token's units
//! (`checkout::view::find`).

use serde::Serialize;
use sqlx::{Connection, PgConnection, types::Json};
use time::OffsetDateTime;

use super::{
    domain::{
        Address, Amount, Chain, Currency, ExpiresIn, IntentId, Metadata, PaymentMethod, Price,
    },
    expiry::ExpiryHolds,
    order::{DuplicatePayment, PaymentOption},
    state::{self, Action, Actor, FailureReason, IntentState},
};
use crate::{
    auth::MerchantId,
    events::{self, NewEvent},
    rails::follower::{Observation, WatchError},
};

/// A query answering [`PaymentIntent`]s (or rows that start with one), whose columns are written
/// once, here: what comes `$before` and `$after` them, then the arguments. sqlx's macros take a
/// query made of string literals joined by `+`. `options:` replaces the column `payment_options`
/// by an expression: the insert answers `'[]'` and sets the options it wrote, not decoding them.
macro_rules! query_intent {
    ($row:path, $before:literal, $after:literal, $($arg:tt)*) => {
        query_intent!(options: "payment_options", $row, $before, $after, $($arg)*)
    };
    (options: $options:literal, $row:path, $before:literal, $after:literal, $($arg:tt)*) => {
        sqlx::query_as!(
            $row,
            $before
                + r#"id, state AS "state: IntentState", version, COALESCE(price, amount::text) AS "amount!",
                     currency AS "currency?: Currency", chain AS "chain?", token AS "token?",
                     payer, payee AS merchant, payment_method AS "payment_method?: PaymentMethod",
                     deposit_address, "#
                + $options
                + r#" AS "payment_options!: Json<Vec<PaymentOption>>",
                     selected_option AS "selected_option?", expires_at, created_at, updated_at, canceled_at,
                     cancellation_reason, failure_reason, pending_reason,
                     settlement AS "settlement: Json<Settlement>",
                     amount_received::text AS "amount_received!", amount_overpaid::text AS "amount_overpaid!",
                     amount_refunded::text AS "amount_refunded!",
                     duplicate_payments AS "duplicate_payments!: Json<Vec<DuplicatePayment>>",
                     checkout_url, client_secret,
                     metadata AS "metadata: Json<Metadata>""#
                + $after,
            $($arg)*
        )
    };
}

/// A payment intent as the API shows it; field order is the response's key order.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PaymentIntent {
    /// `pi_` + 24 lowercase hex digits.
    #[schema(example = "pi_bfe74542f6b8b55f8f849a22")]
    pub id: String,
    pub state: IntentState,
    /// Starts at 1 and grows by one on every state change.
    pub version: i32,
    /// Token base units, as a decimal string; for an order (`currency` set), its price in the
    /// currency as given (`"25.00"`).
    #[schema(example = "100000000")]
    pub amount: String,
    /// An order's currency, `usd` or `eur`; `null` for an intent priced in token base units.
    pub currency: Option<Currency>,
    /// `null` for an order until an option is chosen: then the option's.
    #[schema(example = "evm:31337")]
    pub chain: Option<String>,
    /// EIP-55 checksummed; `null` for an order until an option is chosen.
    pub token: Option<String>,
    /// EIP-55 checksummed; `null` for a `deposit_address` intent, which whoever sends to its
    /// address pays, and for an authorization until its payer confirms.
    pub payer: Option<String>,
    /// The payee's address, EIP-55 checksummed.
    pub merchant: String,
    /// `authorization` (the payer signs an EIP-3009 transfer) or `deposit_address` (anyone sends
    /// the token to `deposit_address`); `null` for an order until an option is chosen.
    pub payment_method: Option<PaymentMethod>,
    /// Where to send the token, for a `deposit_address` intent: an address of this intent alone,
    /// from which the money can only go on to `merchant` (`docs/settlement.md`, "Deposit addresses").
    pub deposit_address: Option<String>,
    /// An order's ways to be paid, fixed when it was made; empty for an intent priced in token
    /// base units.
    #[schema(value_type = Vec<PaymentOption>)]
    pub payment_options: Json<Vec<PaymentOption>>,
    /// The option that pays an order, once a payer confirmed it or a deposit reached its address.
    pub selected_option: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub canceled_at: Option<OffsetDateTime>,
    /// `merchant_request` or `expired` once canceled.
    pub cancellation_reason: Option<String>,
    /// `authorization_expired`, `nonce_used_otherwise` or `authorization_canceled` once failed,
    /// or the reason it was pending with when it expired.
    pub failure_reason: Option<String>,
    /// While `processing`: why the payment waits for now: the token refuses it
    /// (`insufficient_balance`, `token_paused`, `account_blacklisted`), or the relayer cannot send
    /// it (`relayer_underfunded`, `gas_price_above_cap`); the relayer keeps trying until it expires.
    pub pending_reason: Option<String>,
    /// The confirmed transaction that paid it, once paid (also on a canceled intent that a payer
    /// paid anyway: the chain is the source of truth).
    #[schema(value_type = Option<Settlement>)]
    pub settlement: Option<Json<Settlement>>,
    /// What confirmed transfers of its token to `deposit_address` brought, token base units
    /// (always 0 for an `authorization` intent, whose `settlement` says it was paid).
    #[schema(example = "0")]
    pub amount_received: String,
    /// What a paid `deposit_address` intent received beyond its amount.
    #[schema(example = "0")]
    pub amount_overpaid: String,
    /// What its refunds paid back so far (those confirmed on chain), token base units.
    #[schema(example = "0")]
    pub amount_refunded: String,
    /// Money that reached an order another way than its selected option: booked and swept to the
    /// merchant, never counted toward the order.
    #[schema(value_type = Vec<DuplicatePayment>)]
    pub duplicate_payments: Json<Vec<DuplicatePayment>>,
    /// The intent's checkout page, to send its payer: `PUBLIC_BASE_URL/checkout/{id}` with the
    /// client secret in the fragment, which browsers never send to a server (`docs/checkout.md`).
    pub checkout_url: Option<String>,
    /// Lets its holder read this intent's public fields and pay it, nothing else; shown only to
    /// its merchant. Canceling the intent ends its power to pay.
    pub client_secret: String,
    /// Your key/value pairs, as sent.
    #[schema(value_type = Object)]
    pub metadata: Json<Metadata>,
}

/// Where an intent was paid on chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Settlement {
    #[schema(example = "0x5c504ed432cb51138bcf09aa5e8a410dd4a1e204ef84bfed1be16dfba1b22060")]
    pub transaction_hash: String,
    pub block_number: u64,
    #[serde(with = "time::serde::rfc3339")]
    pub block_timestamp: OffsetDateTime,
}

impl Settlement {
    /// Where the follower saw the transfer that paid: its transaction, block and block time.
    pub fn observed(o: &Observation) -> Result<Self, WatchError> {
        Ok(Self {
            transaction_hash: o.transaction_hash.clone(),
            block_number: o.block_number as u64,
            block_timestamp: OffsetDateTime::from_unix_timestamp(o.block_timestamp)
                .map_err(WatchError::unreadable)?,
        })
    }
}

pub struct NewIntent {
    pub priced: Priced,
    pub payee: Address,
    pub expires: Expires,
    pub metadata: Metadata,
    /// The nonce its authorization carries: derived from its id, unless the payer chose it (an
    /// x402 payment, signed before the intent existed).
    pub nonce: Option<[u8; 32]>,
}

/// What a new intent costs and how it can be paid.
pub enum Priced {
    /// This amount of this token on this chain, paid so.
    InToken {
        chain: Chain,
        token: Address,
        amount: Amount,
        paid_by: PaidBy,
    },
    /// An order: this price in this currency, paid by one of these options, made from the
    /// merchant's order terms of this version (`merchants::OrderTerms`).
    InCurrency {
        currency: Currency,
        price: Price,
        options: Vec<PaymentOption>,
        terms_version: i64,
    },
}

/// How a new intent priced in a token is paid.
#[derive(Debug, Clone, Copy)]
pub enum PaidBy {
    /// An EIP-3009 authorization that `payer` signs; whoever signs it when it confirms if `None`.
    Authorization { payer: Option<Address> },
    /// Whoever sends the token to `address`, the intent's forwarder (`rails::evm::deposit`).
    DepositAddress { address: Address },
    /// A Permit2 signature that `payer` signs, through x402's exact proxy; whoever signs it when
    /// it confirms if `None`.
    Permit2 { payer: Option<Address> },
}

/// When a new intent expires.
pub enum Expires {
    /// This long after the database's now.
    In(ExpiresIn),
    /// At the validity end of an authorization signed already (whole seconds).
    At(OffsetDateTime),
}

/// A new intent, and its JSON as its `payment_intent.created` event holds it.
pub struct Inserted {
    pub intent: PaymentIntent,
    pub json: String,
}

/// Inserts a new intent and its `payment_intent.created` event.
/// `checkout_base` is the public base URL its checkout page is under; `None` for an intent that
/// is paid already when it is made (an x402 payment), which has no page. `None` for an order
/// whose terms are no longer the merchant's current version: nothing is written.
pub async fn insert(
    conn: &mut PgConnection,
    merchant: &MerchantId,
    id: &IntentId,
    intent: &NewIntent,
    checkout_base: Option<&str>,
) -> Result<Option<Inserted>, sqlx::Error> {
    let (expires_in, expires_at) = match intent.expires {
        Expires::In(after) => (f64::from(after.seconds()), None),
        Expires::At(at) => (0.0, Some(at)),
    };
    let (chain, token, amount, method, payer, deposit_address) = match &intent.priced {
        Priced::InToken {
            chain,
            token,
            amount,
            paid_by,
        } => {
            let (method, payer, deposit_address) = match *paid_by {
                PaidBy::Authorization { payer } => (PaymentMethod::Authorization, payer, None),
                PaidBy::Permit2 { payer } => (PaymentMethod::Permit2, payer, None),
                PaidBy::DepositAddress { address } => {
                    (PaymentMethod::DepositAddress, None, Some(address))
                }
            };
            (
                Some(chain.as_str()),
                Some(token.to_checksum()),
                Some(amount.as_str()),
                Some(method.as_str()),
                payer.map(|payer| payer.to_checksum()),
                deposit_address.map(|address| address.to_checksum()),
            )
        }
        Priced::InCurrency { .. } => (None, None, None, None, None, None),
    };
    let (currency, price, options, terms_version) = match &intent.priced {
        Priced::InCurrency {
            currency,
            price,
            options,
            terms_version,
        } => (
            Some(currency.as_str()),
            Some(price.as_str()),
            &options[..],
            Some(*terms_version),
        ),
        Priced::InToken { .. } => (None, None, &[][..], None),
    };
    // The follower reads the transfers of each token deposits are made in, on its chain, from now
    // on (an order's tokens are the merchant's accepted assets, read since they were accepted:
    // `watch_deposit_tokens`); an order's options' addresses are matched as intents' own are. All
    // in the insert's one statement (the foreign key is checked at its end, with the intent in
    // place).
    // (chain, token, address, option) per row: the intent's own deposit token (no address or
    // option: the address is the intent's), then each deposit option's address.
    let own = match (chain, &token, &deposit_address) {
        (Some(chain), Some(token), Some(_)) => Some((chain.to_owned(), token.clone(), None, None)),
        _ => None,
    };
    let by_option = options.iter().filter_map(|option| {
        let address = option.deposit_address.clone()?;
        Some((
            option.chain.clone(),
            option.token.clone(),
            Some(address),
            Some(option.id.clone()),
        ))
    });
    let mut watched_chains = Vec::new();
    let mut watched_tokens = Vec::new();
    let mut addresses: Vec<Option<String>> = Vec::new();
    let mut option_ids: Vec<Option<String>> = Vec::new();
    for (chain, token, address, option) in own.into_iter().chain(by_option) {
        watched_chains.push(chain);
        watched_tokens.push(token);
        addresses.push(address);
        option_ids.push(option);
    }
    let created = query_intent!(
        options: "'[]'::jsonb",
        PaymentIntent,
        r#"
        WITH current AS (
            SELECT $23::bigint IS NULL
                   OR EXISTS (SELECT 1 FROM merchants WHERE id = $1 AND terms_version = $23) AS terms
        ), watched AS (
            SELECT w.* FROM unnest($19::text[], $20::text[], $21::text[], $22::text[])
                            AS w (chain, token, address, option_id), current
             WHERE current.terms
        ), tokens AS (
            INSERT INTO deposit_tokens (chain, token)
            SELECT chain, token FROM watched WHERE option_id IS NULL
            ON CONFLICT DO NOTHING
        ), addresses AS (
            INSERT INTO payment_option_addresses (chain, deposit_address, merchant_id, intent_id, option_id, token, payee)
            SELECT chain, address, $1, $2, option_id, token, $7 FROM watched WHERE address IS NOT NULL
        )
        INSERT INTO payment_intents (merchant_id, id, state, version, amount, chain, token, payer, payee, expires_at, metadata, chain_nonce,
                                     client_secret, checkout_url, payment_method, deposit_address, currency, price, payment_options)
        SELECT $1, $2, 'created', 1, $3::text::numeric, $4, $5, $6, $7,
               coalesce($13, now() + make_interval(secs => $8)), $9, $10, $11, $12 || '/checkout/' || $2 || '#' || $11, $14, $15,
               $16, $17, $18
          FROM current WHERE current.terms
        RETURNING "#,
        r#"
        "#,
        merchant.as_str(),
        id.as_str(),
        amount,
        chain,
        token,
        payer,
        intent.payee.to_checksum(),
        expires_in,
        Json(&intent.metadata) as _,
        &intent.nonce.unwrap_or_else(|| id.chain_nonce())[..],
        id.client_secret(),
        checkout_base,
        expires_at,
        method,
        deposit_address,
        currency,
        price,
        Json(options) as _,
        &watched_chains,
        &watched_tokens,
        &addresses as &[Option<String>],
        &option_ids as &[Option<String>],
        terms_version,
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(mut created) = created else {
        return Ok(None);
    };
    // The options as written, not decoded back from what the statement stored.
    created.payment_options = Json(options.to_vec());
    // Serialized once: the event's object is also the create's answer.
    let event = NewEvent {
        kind: "payment_intent.created".to_owned(),
        subject_id: &created.id,
        subject_version: created.version,
        object: serde_json::to_string(&created).expect("an intent always serializes"),
    };
    events::record(conn, merchant.as_str(), &event).await?;
    let NewEvent { object: json, .. } = event;
    Ok(Some(Inserted {
        intent: created,
        json,
    }))
}

/// Writes the event of the change that just made `intent` what it is, in the caller's
/// transaction: the change and its event commit together or not at all.
async fn record_event(
    conn: &mut PgConnection,
    merchant: &str,
    kind: &str,
    intent: &PaymentIntent,
) -> Result<(), sqlx::Error> {
    let event = NewEvent {
        kind: kind.to_owned(),
        subject_id: &intent.id,
        subject_version: intent.version,
        object: serde_json::to_string(intent).expect("an intent always serializes"),
    };
    events::record(conn, merchant, &event).await
}

pub async fn find(
    conn: &mut PgConnection,
    merchant: &MerchantId,
    id: &IntentId,
) -> Result<Option<PaymentIntent>, sqlx::Error> {
    query_intent!(
        PaymentIntent,
        r#"
        SELECT "#,
        r#"
          FROM payment_intents
         WHERE merchant_id = $1 AND id = $2
        "#,
        merchant.as_str(),
        id.as_str(),
    )
    .fetch_optional(conn)
    .await
}

/// The intent `id` whatever its merchant, with that merchant's id: for its checkout page, whose
/// client secret was checked first.
pub async fn find_with_merchant(
    conn: &mut PgConnection,
    id: &IntentId,
) -> Result<Option<(String, PaymentIntent)>, sqlx::Error> {
    let row = query_intent!(
        WithMerchant,
        r#"
        SELECT merchant_id, "#,
        r#"
          FROM payment_intents
         WHERE id = $1
        "#,
        id.as_str(),
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(WithMerchant::into_parts))
}

/// The tokens deposit intents on `chain` were made for: the deposit watch reads their transfers.
pub async fn deposit_tokens_on(
    conn: &mut PgConnection,
    chain: &str,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!("SELECT token FROM deposit_tokens WHERE chain = $1", chain)
        .fetch_all(conn)
        .await
}

/// The intent an EIP-3009 nonce pays, as the chain names it: who signs and who is paid how much.
#[derive(Debug)]
pub struct NonceOwner {
    pub merchant_id: String,
    pub id: String,
    /// The token it is paid in: for a Permit2 nonce, not necessarily the one that used it.
    pub token: Option<String>,
    pub payer: Option<String>,
    pub payee: String,
    pub amount: String,
    /// An order's authorization option that is not the one paying it (an order not chosen yet,
    /// or chosen with another option or payer): its authorizer is its payer, its amount the
    /// option's.
    pub option_id: Option<String>,
}

/// Whose nonces a lookup means: a token's EIP-3009 nonces, or Permit2's, which are the owner's
/// across every token. The same bytes in the two are two nonces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceSpace {
    Eip3009,
    Permit2,
}

/// The intent whose authorization is `authorizer`'s `nonce` on `token` on `chain` in `space`, in
/// any state: an intent naming them, else an order with an option signed that way (`authorization`
/// for EIP-3009, `permit2` for Permit2) on that chain and token (the order's nonce is every
/// option's). A nonce belongs to its authorizer: another address
/// using the same bytes is no intent of ours. A Permit2 nonce is the owner's on every token: its
/// intent is found whatever token used it. The one lookup of an intent by what the chain shows
/// (the payment watches, x402, reconcile).
pub async fn by_chain_nonce(
    conn: &mut PgConnection,
    chain: &str,
    token: &str,
    authorizer: &str,
    nonce: &[u8],
    space: NonceSpace,
) -> Result<Option<NonceOwner>, sqlx::Error> {
    let permit2 = space == NonceSpace::Permit2;
    sqlx::query_as!(
        NonceOwner,
        r#"SELECT merchant_id AS "merchant_id!", id AS "id!", token, payer, payee AS "payee!",
                  amount AS "amount!", option_id
             FROM (SELECT 0 AS rank, merchant_id, id, token, payer, payee, amount::text AS amount,
                          NULL::text AS option_id
                     FROM payment_intents
                    WHERE chain_nonce = $1 AND chain = $2 AND ($5 OR token = $3) AND payer = $4
                      AND (payment_method IS NOT DISTINCT FROM 'permit2') = $5
                   UNION ALL
                   SELECT 1, p.merchant_id, p.id, o->>'token', $4, p.payee, o->>'amount', o->>'id'
                     FROM payment_intents p, jsonb_array_elements(p.payment_options) AS o
                    WHERE p.chain_nonce = $1 AND p.currency IS NOT NULL
                      AND o->>'chain' = $2 AND o->>'token' = $3
                      AND o->>'payment_method' = CASE WHEN $5 THEN 'permit2' ELSE 'authorization' END
                  ) AS owners
            ORDER BY rank
            LIMIT 1"#,
        nonce,
        chain,
        token,
        authorizer,
        permit2,
    )
    .fetch_optional(conn)
    .await
}

/// An intent paid by Permit2 whose payment was seen on chain: what `reconcile` finds in its
/// transaction.
pub struct SettledPermit {
    pub id: String,
    pub token: String,
    pub payer: String,
    pub payee: String,
    pub amount: String,
    pub settlement: Json<Settlement>,
}

/// Every intent on `chain` paid by Permit2 and seen paid.
pub async fn settled_permits_on(
    conn: &mut PgConnection,
    chain: &str,
) -> Result<Vec<SettledPermit>, sqlx::Error> {
    sqlx::query_as!(
        SettledPermit,
        r#"SELECT id, token AS "token!", payer AS "payer!", payee, amount::text AS "amount!",
                  settlement AS "settlement!: Json<Settlement>"
             FROM payment_intents
            WHERE chain = $1 AND payment_method = 'permit2' AND settlement IS NOT NULL"#,
        chain
    )
    .fetch_all(conn)
    .await
}

/// What a refund of an intent needs of it: whether and how much it was paid, and between whom.
pub struct Refundable {
    pub state: IntentState,
    pub amount: String,
    /// Its payment was seen on chain (`settlement` set), whatever its state since.
    pub paid: bool,
    pub chain: String,
    pub token: String,
    pub payee: String,
    pub payer: Option<String>,
}

/// The merchant's intent `id` as a refund reads it, its row locked until the caller's transaction
/// ends: of two racing refunds, the second waits here and then sees the first.
pub async fn lock_for_refund(
    conn: &mut PgConnection,
    merchant: &MerchantId,
    id: &IntentId,
) -> Result<Option<Refundable>, sqlx::Error> {
    sqlx::query_as!(
        Refundable,
        // An order no option was chosen for names no payment yet, and was not paid: its empty
        // amount, chain and token are never read.
        r#"SELECT state AS "state: IntentState", COALESCE(amount, 0)::text AS "amount!",
                  settlement IS NOT NULL AS "paid!", COALESCE(chain, '') AS "chain!",
                  COALESCE(token, '') AS "token!", payee, payer
             FROM payment_intents WHERE merchant_id = $1 AND id = $2 FOR UPDATE"#,
        merchant.as_str(),
        id.as_str(),
    )
    .fetch_optional(conn)
    .await
}

/// Adds `amount` (base units) to what the intent `id` has refunded, in the caller's transaction:
/// the transaction in which a refund of it succeeded.
pub async fn add_refunded(
    conn: &mut PgConnection,
    merchant_id: &str,
    id: &str,
    amount: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE payment_intents SET amount_refunded = amount_refunded + $3::text::numeric
          WHERE merchant_id = $1 AND id = $2",
        merchant_id,
        id,
        amount,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A deposit address a transfer touched: an intent's own, or an order's option's.
pub struct DepositIntent {
    pub merchant_id: String,
    pub id: String,
    /// The token the address was made for.
    pub token: String,
    pub payee: String,
    pub deposit_address: String,
    /// The order's option the address belongs to.
    pub option_id: Option<String>,
}

/// The deposit addresses on `chain` among `addresses`, with the intents they belong to.
pub async fn by_deposit_addresses(
    conn: &mut PgConnection,
    chain: &str,
    addresses: &[String],
) -> Result<Vec<DepositIntent>, sqlx::Error> {
    sqlx::query_as!(
        DepositIntent,
        r#"SELECT merchant_id AS "merchant_id!", id AS "id!", token AS "token!", payee AS "payee!",
                  deposit_address AS "deposit_address!", NULL::text AS option_id
             FROM payment_intents
            WHERE chain = $1 AND deposit_address = ANY($2::text[]) AND currency IS NULL
           UNION ALL
           SELECT merchant_id, intent_id, token, payee, deposit_address, option_id
             FROM payment_option_addresses
            WHERE chain = $1 AND deposit_address = ANY($2::text[])"#,
        chain,
        addresses,
    )
    .fetch_all(conn)
    .await
}

/// Every deposit address of the intent `id`: its own, or its options' if it is an order.
pub async fn deposit_addresses_of(
    conn: &mut PgConnection,
    id: &str,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT deposit_address AS "address!" FROM payment_intents
            WHERE id = $1 AND deposit_address IS NOT NULL AND currency IS NULL
           UNION ALL
           SELECT deposit_address FROM payment_option_addresses WHERE intent_id = $1"#,
        id
    )
    .fetch_all(conn)
    .await
}

/// Every deposit address on `chain`: intents' own and orders' options'.
pub async fn deposit_addresses_on(
    conn: &mut PgConnection,
    chain: &str,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT deposit_address AS "address!" FROM payment_intents
            WHERE chain = $1 AND deposit_address IS NOT NULL AND currency IS NULL
           UNION ALL
           SELECT deposit_address FROM payment_option_addresses WHERE chain = $1"#,
        chain
    )
    .fetch_all(conn)
    .await
}

/// The deposit addresses on `chain` made since `since`, intents' own and orders' options'.
pub async fn deposit_addresses_made_since(
    conn: &mut PgConnection,
    chain: &str,
    since: OffsetDateTime,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT deposit_address AS "address!" FROM payment_intents
            WHERE chain = $1 AND deposit_address IS NOT NULL AND created_at > $2
              AND currency IS NULL
           UNION ALL
           SELECT deposit_address FROM payment_option_addresses
            WHERE chain = $1 AND created_at > $2"#,
        chain,
        since,
    )
    .fetch_all(conn)
    .await
}

/// Reads the transfers of each of `tokens` on its chain (`(chain, token)`) from now on: the assets
/// a merchant accepts, which its orders' deposit options are paid in.
pub async fn watch_deposit_tokens(
    conn: &mut PgConnection,
    tokens: &[(String, String)],
) -> Result<(), sqlx::Error> {
    let (chains, tokens): (Vec<String>, Vec<String>) = tokens.iter().cloned().unzip();
    sqlx::query!(
        "INSERT INTO deposit_tokens (chain, token) SELECT * FROM unnest($1::text[], $2::text[])
         ON CONFLICT DO NOTHING",
        &chains,
        &tokens,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Reads `token`'s transfers on `chain` from now on, as a deposit intent's token is: a token first
/// seen at a deposit address, whose sweep and later arrivals are then followed and reconciled.
pub async fn watch_deposit_token(
    conn: &mut PgConnection,
    chain: &str,
    token: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO deposit_tokens (chain, token) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        chain,
        token
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The option `option_id` of the merchant's order `id`; `None` if it has no such option.
pub async fn option_of(
    conn: &mut PgConnection,
    merchant_id: &str,
    id: &str,
    option_id: &str,
) -> Result<Option<PaymentOption>, sqlx::Error> {
    let option = sqlx::query_scalar!(
        r#"SELECT o AS "option!: Json<PaymentOption>"
             FROM payment_intents, jsonb_array_elements(payment_options) AS o
            WHERE merchant_id = $1 AND id = $2 AND o->>'id' = $3"#,
        merchant_id,
        id,
        option_id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(option.map(|o| o.0))
}

/// Whether an order's option pays it, after [`choose_option`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// The option was chosen now, or before: the intent names its chain, token and amount.
    Chosen,
    /// It cannot be: another option was chosen first, or the order left `created` unchosen.
    Taken {
        state: IntentState,
        selected_option: Option<String>,
    },
}

/// Chooses `option` to pay the merchant's order `id` (with `payer`, for an authorization), in the
/// caller's transaction: the intent then names the option's chain, token, base-unit amount and
/// way to pay. An order is chosen once, while `created`; the row stays locked, so of two racing
/// choices the second waits here and then finds the first. The one rule of choosing.
pub async fn choose_option(
    conn: &mut PgConnection,
    merchant_id: &str,
    id: &str,
    option: &PaymentOption,
    payer: Option<&Address>,
) -> Result<Choice, sqlx::Error> {
    let now = sqlx::query!(
        r#"SELECT state AS "state: IntentState", selected_option
             FROM payment_intents WHERE merchant_id = $1 AND id = $2 FOR UPDATE"#,
        merchant_id,
        id,
    )
    .fetch_one(&mut *conn)
    .await?;
    if now.selected_option.as_deref() == Some(option.id.as_str()) {
        return Ok(Choice::Chosen);
    }
    if now.selected_option.is_some() || now.state != IntentState::Created {
        return Ok(Choice::Taken {
            state: now.state,
            selected_option: now.selected_option,
        });
    }
    sqlx::query!(
        "UPDATE payment_intents
            SET chain = $3, token = $4, amount = $5::text::numeric, payment_method = $6,
                deposit_address = $7, payer = $8, selected_option = $9
          WHERE merchant_id = $1 AND id = $2",
        merchant_id,
        id,
        option.chain,
        option.token,
        option.amount,
        option.payment_method.as_str(),
        option.deposit_address,
        payer.map(Address::to_checksum),
        option.id,
    )
    .execute(conn)
    .await?;
    Ok(Choice::Chosen)
}

/// Records `duplicate` on the merchant's order `id`, in the caller's transaction (the one that
/// applies the observation it is): listed on the intent, a new version, and its event
/// `payment_intent.duplicate_payment`. Whatever state the order is in, it stays there.
pub async fn record_duplicate(
    conn: &mut PgConnection,
    merchant_id: &str,
    id: &str,
    duplicate: &DuplicatePayment,
) -> Result<PaymentIntent, TransitionError> {
    sqlx::query!(
        "UPDATE payment_intents SET duplicate_payments = duplicate_payments || jsonb_build_array($3::jsonb)
          WHERE merchant_id = $1 AND id = $2",
        merchant_id,
        id,
        Json(duplicate) as _,
    )
    .execute(&mut *conn)
    .await?;
    apply_paid(
        conn,
        merchant_id,
        id,
        Action::DuplicatePayment,
        &Actor::Chain,
        None,
    )
    .await
}

/// Names `payer` as who pays the merchant's `created` intent `id` by authorization, if it named
/// none: in the transaction of its confirm, so the payment watch knows whose nonce it is.
pub async fn name_payer(
    conn: &mut PgConnection,
    merchant_id: &str,
    id: &str,
    payer: &Address,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE payment_intents SET payer = $3
          WHERE merchant_id = $1 AND id = $2 AND payer IS NULL AND state = 'created'",
        merchant_id,
        id,
        payer.to_checksum(),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Every (token, payee) pair an intent on `chain` names, or an order's option on it: where their
/// payments go.
pub async fn payees_on(
    conn: &mut PgConnection,
    chain: &str,
) -> Result<Vec<(String, String)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT token AS "token!", payee AS "payee!" FROM payment_intents WHERE chain = $1
           UNION
           SELECT o->>'token', p.payee
             FROM payment_intents p, jsonb_array_elements(p.payment_options) AS o
            WHERE p.currency IS NOT NULL AND o->>'chain' = $1"#,
        chain
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.token, r.payee)).collect())
}

/// The merchant and the client secret of the intent `id`, which opens its checkout page.
pub async fn client_secret_of(
    conn: &mut PgConnection,
    id: &IntentId,
) -> Result<Option<(String, String)>, sqlx::Error> {
    let row = sqlx::query!(
        "SELECT merchant_id, client_secret FROM payment_intents WHERE id = $1",
        id.as_str()
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| (r.merchant_id, r.client_secret)))
}

/// Where an intent's payment stands, as whoever waits for it reads it.
pub struct PaymentState {
    pub state: IntentState,
    pub failure_reason: Option<String>,
    pub pending_reason: Option<String>,
    /// The transaction that paid it, once confirmed.
    pub settled_by: Option<String>,
}

pub async fn payment_state(
    conn: &mut PgConnection,
    merchant_id: &str,
    id: &str,
) -> Result<Option<PaymentState>, sqlx::Error> {
    sqlx::query_as!(
        PaymentState,
        r#"SELECT state AS "state: IntentState", failure_reason, pending_reason,
                  settlement->>'transaction_hash' AS settled_by
             FROM payment_intents WHERE merchant_id = $1 AND id = $2"#,
        merchant_id,
        id,
    )
    .fetch_optional(conn)
    .await
}

/// Why a state change did not happen.
#[derive(Debug, thiserror::Error)]
pub enum TransitionError {
    #[error("no such payment intent")]
    NotFound,
    #[error("a {from} payment intent cannot {action}")]
    Forbidden {
        from: IntentState,
        action: &'static str,
    },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Applies `action` to one intent as `actor`, if the state machine allows it from the intent's
/// current state. The update is a compare-and-set on `version`: if another writer moved the intent
/// first, it re-reads and asks the machine again, so exactly one of two racing transitions wins
/// and the loser changes nothing.
pub async fn apply(
    conn: &mut PgConnection,
    merchant: &MerchantId,
    id: &IntentId,
    action: Action,
    actor: &Actor,
) -> Result<PaymentIntent, TransitionError> {
    apply_paid(conn, merchant.as_str(), id.as_str(), action, actor, None).await
}

/// [`apply`], recording where the intent was paid when the chain settles it.
pub async fn apply_paid(
    conn: &mut PgConnection,
    merchant: &str,
    id: &str,
    action: Action,
    actor: &Actor,
    settlement: Option<&Settlement>,
) -> Result<PaymentIntent, TransitionError> {
    apply_with(conn, merchant, id, action, actor, settlement, None).await
}

/// [`apply_paid`] with the reason a `processing` intent waits for (`Action::Hold`). The reason
/// is kept while the intent stays `processing` and cleared when it leaves.
pub async fn apply_with(
    conn: &mut PgConnection,
    merchant: &str,
    id: &str,
    action: Action,
    actor: &Actor,
    settlement: Option<&Settlement>,
    pending_reason: Option<&str>,
) -> Result<PaymentIntent, TransitionError> {
    // Each lost race means the version grew; a few rounds settle any realistic contention.
    const ROUNDS: usize = 8;
    for _ in 0..ROUNDS {
        let current = sqlx::query!(
            "SELECT state, version FROM payment_intents WHERE merchant_id = $1 AND id = $2",
            merchant,
            id,
        )
        .fetch_optional(&mut *conn)
        .await?
        .ok_or(TransitionError::NotFound)?;
        let from = IntentState::parse(&current.state).ok_or_else(|| {
            sqlx::Error::Decode(format!("unknown intent state {:?}", current.state).into())
        })?;
        let seen = Seen {
            state: from,
            version: current.version,
        };
        let change = Change {
            action,
            actor,
            settlement,
            pending_reason,
        };
        if let Some(intent) = apply_seen(conn, merchant, id, seen, &change).await? {
            return Ok(intent);
        }
    }
    Err(TransitionError::Database(sqlx::Error::Protocol(format!(
        "payment intent {id} kept changing under {ROUNDS} transition attempts"
    ))))
}

/// An intent's state and version as its caller read them.
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    pub state: IntentState,
    pub version: i32,
}

/// What a transition does and records.
pub struct Change<'a> {
    pub action: Action,
    pub actor: &'a Actor,
    pub settlement: Option<&'a Settlement>,
    pub pending_reason: Option<&'a str>,
}

/// The transition of `change` from `seen`, if the machine allows it from there: `None` if the
/// intent is no longer as seen (another writer moved it). A caller holding the intent's row
/// lock knows it is as seen, and saves the read [`apply_with`] makes first.
pub async fn apply_seen(
    conn: &mut PgConnection,
    merchant: &str,
    id: &str,
    seen: Seen,
    change: &Change<'_>,
) -> Result<Option<PaymentIntent>, TransitionError> {
    let (from, action) = (seen.state, change.action);
    let step = state::transition(from, action).ok_or(TransitionError::Forbidden {
        from,
        action: action.as_str(),
    })?;
    let moved = query_intent!(
        PaymentIntent,
        r#"
        WITH moved AS (
            UPDATE payment_intents
               SET state = $4, version = version + 1, updated_at = now(),
                   canceled_at = CASE WHEN $5::text IS NULL THEN canceled_at ELSE now() END,
                   cancellation_reason = COALESCE($5, cancellation_reason),
                   failure_reason = COALESCE($9, failure_reason),
                   settlement = COALESCE($10, settlement),
                   pending_reason = CASE WHEN $4 = 'processing' THEN COALESCE($11, pending_reason) END
             WHERE merchant_id = $1 AND id = $2 AND version = $3 AND state = $6
         RETURNING *
        ), recorded AS (
            INSERT INTO payment_intent_transitions (merchant_id, intent_id, version, from_state, to_state, action, actor)
            SELECT merchant_id, id, version, $6, $4, $7, $8 FROM moved
        )
        SELECT "#,
        r#"
          FROM moved
        "#,
        merchant,
        id,
        seen.version,
        step.to.as_str(),
        step.cancellation_reason,
        from.as_str(),
        action.as_str(),
        change.actor.label(),
        step.failure_reason.map(FailureReason::as_str),
        change.settlement.map(Json) as _,
        change.pending_reason,
    )
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(intent) = &moved {
        record_event(conn, merchant, &step.event_type(), intent).await?;
    }
    Ok(moved)
}

/// An intent's time ran out by a block once the block's second reaches its expiry's whole second
/// (its authorization's `validBefore`): when `expires_at` is before this. The one rule of expiry
/// by chain time, for the follower's sweep and for a deposit judged by its own block.
pub fn expired_before(block_timestamp: i64) -> Result<OffsetDateTime, sqlx::Error> {
    OffsetDateTime::from_unix_timestamp(block_timestamp.saturating_add(1))
        .map_err(|e| sqlx::Error::Decode(e.into()))
}

/// A deposit added to what an intent received, as [`count_deposit`] left it, the row still locked.
pub struct DepositCounted {
    pub state: IntentState,
    pub version: i32,
    pub cancellation_reason: Option<String>,
    /// What it received now reaches its amount, within the tolerance.
    pub reaches: bool,
    /// It is `created` and its time ran out by the deposit's block.
    pub late: bool,
}

/// Adds `value` (base units) received by the deposit intent `id` in a block of `block_timestamp`
/// to what it received, in the caller's transaction, and says what that makes of it. The rule of
/// paying, in one statement: what it received pays it if it reaches the amount within
/// `tolerance_bps`, only while it is open and its time has not run out by the deposit's block;
/// once paid, what it received beyond the amount is overpaid. The state change is the caller's.
pub async fn count_deposit(
    tx: &mut PgConnection,
    merchant_id: &str,
    id: &str,
    value: &str,
    block_timestamp: i64,
    tolerance_bps: u32,
) -> Result<DepositCounted, sqlx::Error> {
    sqlx::query_as!(
        DepositCounted,
        r#"WITH counted AS (
               SELECT merchant_id, id, amount_received + $3::text::numeric AS received,
                      (amount_received + $3::text::numeric) * 10000 >= amount * (10000 - $5) AS reaches,
                      state = 'created' AND expires_at < $4 AS late,
                      state = 'succeeded'
                      OR (state = 'created' AND expires_at >= $4
                          AND (amount_received + $3::text::numeric) * 10000 >= amount * (10000 - $5)) AS pays
                 FROM payment_intents WHERE merchant_id = $1 AND id = $2 FOR UPDATE
           )
           UPDATE payment_intents p
              SET amount_received = c.received,
                  amount_overpaid = CASE WHEN c.pays THEN GREATEST(c.received - p.amount, 0) ELSE p.amount_overpaid END
             FROM counted c
            WHERE p.merchant_id = c.merchant_id AND p.id = c.id
        RETURNING p.state AS "state: IntentState", p.version, p.cancellation_reason, c.reaches AS "reaches!", c.late AS "late!""#,
        merchant_id,
        id,
        value,
        expired_before(block_timestamp)?,
        i32::try_from(tolerance_bps).unwrap_or(0),
    )
    .fetch_one(tx)
    .await
}

/// Which intents' time ran out: by the clock for chains without settlement, or on one settled
/// chain by the timestamp of its newest confirmed block (`docs/settlement.md`, "Expiry").
pub enum Expiry<'a> {
    /// `created` intents past `expires_at` now, except on these chains (their follower decides),
    /// and that nothing observed of them holds off: an order no option was chosen for is on no
    /// chain yet, and expires so.
    Clock {
        settled_chains: &'a [String],
        holds: &'a ExpiryHolds,
    },
    /// `created` and `processing` intents on `chain` whose authorization's `validBefore` (expiry
    /// in whole seconds, rounded down) is at or before `block_timestamp`, and that nothing
    /// observed of them holds off.
    ChainTime {
        chain: &'a str,
        block_timestamp: i64,
        holds: &'a ExpiryHolds,
    },
}

/// Moves up to `batch` intents whose time ran out through [`Action::Expire`], each with its
/// event, in one transaction per source state. `FOR UPDATE SKIP LOCKED` lets any number of
/// replicas sweep at once without waiting on each other or on a merchant's cancel; the version
/// compare-and-set keeps a transition that won meanwhile from being applied twice.
/// Returns how many intents expired.
pub async fn expire_due(
    conn: &mut PgConnection,
    batch: i64,
    expiry: &Expiry<'_>,
) -> Result<u64, sqlx::Error> {
    let (actor, chain, before, excluded, holds) = match *expiry {
        Expiry::Clock {
            settled_chains,
            holds,
        } => (Actor::System, None, None, settled_chains, holds),
        Expiry::ChainTime {
            chain,
            block_timestamp,
            holds,
        } => (
            Actor::Chain,
            Some(chain),
            Some(expired_before(block_timestamp)?),
            &[][..],
            holds,
        ),
    };
    let mut expired = 0;
    for step in state::sources_of(Action::Expire) {
        // Without a chain's word, only an unpaid intent that never got an authorization expires.
        if chain.is_none() && step.from != IntentState::Created {
            continue;
        }
        let mut tx = conn.begin().await?;
        let moved = query_intent!(
        WithMerchant,
        r#"
            WITH due AS (
                SELECT merchant_id, id, version FROM payment_intents p
                 WHERE state = $1 AND expires_at < COALESCE($7::timestamptz, now())
                   AND ($8::text IS NULL OR chain = $8)
                   AND (chain IS NULL OR chain <> ALL($9::text[]))
                   -- What the ways to pay observed of it holds it off (`ExpiryHolds`).
                   AND NOT EXISTS (SELECT 1 FROM chain_observations o
                                    WHERE o.kind = ANY($11::text[]) AND o.subject = p.id)
                   AND NOT EXISTS (SELECT 1 FROM chain_observations o
                                    WHERE o.kind = ANY($12::text[]) AND o.subject = p.id
                                      AND o.applied_at IS NULL)
                 ORDER BY expires_at
                 LIMIT $2
                   FOR UPDATE SKIP LOCKED
            ), moved AS (
                UPDATE payment_intents p
                   SET state = $3, version = p.version + 1, updated_at = now(),
                       canceled_at = CASE WHEN $4::text IS NULL THEN p.canceled_at ELSE now() END,
                       cancellation_reason = COALESCE($4, p.cancellation_reason),
                       -- What it was pending with is why it failed.
                       failure_reason = CASE WHEN $10::text IS NULL THEN p.failure_reason
                                             ELSE COALESCE(p.pending_reason, $10) END,
                       pending_reason = NULL
                  FROM due
                 WHERE p.merchant_id = due.merchant_id AND p.id = due.id AND p.version = due.version
             RETURNING p.*
            ), recorded AS (
                INSERT INTO payment_intent_transitions (merchant_id, intent_id, version, from_state, to_state, action, actor)
                SELECT merchant_id, id, version, $1, $3, $5, $6 FROM moved
            )
            SELECT merchant_id, "#,
        r#"
              FROM moved
            "#,
            step.from.as_str(),
            batch,
            step.to.as_str(),
            step.cancellation_reason,
            Action::Expire.as_str(),
            actor.label(),
            before,
            chain,
            excluded,
            step.failure_reason.map(FailureReason::as_str),
            &holds.observed as &[&str],
            &holds.unapplied as &[&str],
        )
        .fetch_all(&mut *tx)
        .await?;
        expired += moved.len() as u64;
        for row in moved {
            let (merchant, intent) = row.into_parts();
            record_event(&mut tx, &merchant, &step.event_type(), &intent).await?;
        }
        tx.commit().await?;
    }
    Ok(expired)
}

/// An intent with its merchant (one the sweeper expired, one a checkout page reads).
struct WithMerchant {
    merchant_id: String,
    id: String,
    state: IntentState,
    version: i32,
    amount: String,
    currency: Option<Currency>,
    chain: Option<String>,
    token: Option<String>,
    payer: Option<String>,
    merchant: String,
    payment_method: Option<PaymentMethod>,
    deposit_address: Option<String>,
    payment_options: Json<Vec<PaymentOption>>,
    selected_option: Option<String>,
    expires_at: OffsetDateTime,
    created_at: OffsetDateTime,
    updated_at: OffsetDateTime,
    canceled_at: Option<OffsetDateTime>,
    cancellation_reason: Option<String>,
    failure_reason: Option<String>,
    pending_reason: Option<String>,
    settlement: Option<Json<Settlement>>,
    amount_received: String,
    amount_overpaid: String,
    amount_refunded: String,
    duplicate_payments: Json<Vec<DuplicatePayment>>,
    checkout_url: Option<String>,
    client_secret: String,
    metadata: Json<Metadata>,
}

impl WithMerchant {
    fn into_parts(self) -> (String, PaymentIntent) {
        let intent = PaymentIntent {
            id: self.id,
            state: self.state,
            version: self.version,
            amount: self.amount,
            currency: self.currency,
            chain: self.chain,
            token: self.token,
            payer: self.payer,
            merchant: self.merchant,
            payment_method: self.payment_method,
            deposit_address: self.deposit_address,
            payment_options: self.payment_options,
            selected_option: self.selected_option,
            expires_at: self.expires_at,
            created_at: self.created_at,
            updated_at: self.updated_at,
            canceled_at: self.canceled_at,
            cancellation_reason: self.cancellation_reason,
            failure_reason: self.failure_reason,
            pending_reason: self.pending_reason,
            settlement: self.settlement,
            amount_received: self.amount_received,
            amount_overpaid: self.amount_overpaid,
            amount_refunded: self.amount_refunded,
            duplicate_payments: self.duplicate_payments,
            checkout_url: self.checkout_url,
            client_secret: self.client_secret,
            metadata: self.metadata,
        };
        (self.merchant_id, intent)
    }
}

/// Where a page of the listing starts: strictly after this intent, newest first.
pub struct Cursor {
    pub created_at: OffsetDateTime,
    pub id: String,
}

pub async fn cursor(
    conn: &mut PgConnection,
    merchant: &MerchantId,
    id: &IntentId,
) -> Result<Option<Cursor>, sqlx::Error> {
    sqlx::query_as!(
        Cursor,
        "SELECT created_at, id FROM payment_intents WHERE merchant_id = $1 AND id = $2",
        merchant.as_str(),
        id.as_str(),
    )
    .fetch_optional(conn)
    .await
}

/// Up to `limit` of a merchant's intents, newest first, after `after`, optionally in one state.
/// `(created_at, id)` is a total order, so pages never skip or repeat an intent.
pub async fn list(
    conn: &mut PgConnection,
    merchant: &MerchantId,
    state: Option<IntentState>,
    after: Option<&Cursor>,
    limit: i64,
) -> Result<Vec<PaymentIntent>, sqlx::Error> {
    query_intent!(
        PaymentIntent,
        r#"
        SELECT "#,
        r#"
          FROM payment_intents
         WHERE merchant_id = $1
           AND ($2::text IS NULL OR state = $2)
           AND ($3::timestamptz IS NULL OR (created_at, id) < ($3, $4))
         ORDER BY created_at DESC, id DESC
         LIMIT $5
        "#,
        merchant.as_str(),
        state.map(IntentState::as_str),
        after.map(|c| c.created_at),
        after.map(|c| c.id.as_str()),
        limit,
    )
    .fetch_all(conn)
    .await
}

/// What the dashboard's payments search looks for besides an intent's id (which [`find`] finds):
/// an address the intent is paid from or at, or the transaction that paid it.
pub enum Search<'a> {
    /// A payer or a deposit address, EIP-55 checksummed as they are stored.
    Address(&'a str),
    TransactionHash(&'a str),
}

/// Up to `limit` of a merchant's intents matching `search`, newest first, after `after`,
/// optionally in one state; each kind of search its own statement, so each uses its index.
pub async fn search(
    conn: &mut PgConnection,
    merchant: &MerchantId,
    search: Search<'_>,
    state: Option<IntentState>,
    after: Option<&Cursor>,
    limit: i64,
) -> Result<Vec<PaymentIntent>, sqlx::Error> {
    let state = state.map(IntentState::as_str);
    let (after_at, after_id) = (after.map(|c| c.created_at), after.map(|c| c.id.as_str()));
    match search {
        Search::Address(address) => {
            query_intent!(
                PaymentIntent,
                r#"
                SELECT "#,
                r#"
                  FROM payment_intents
                 WHERE merchant_id = $1 AND (payer = $2 OR deposit_address = $2)
                   AND ($3::text IS NULL OR state = $3)
                   AND ($4::timestamptz IS NULL OR (created_at, id) < ($4, $5))
                 ORDER BY created_at DESC, id DESC
                 LIMIT $6
                "#,
                merchant.as_str(),
                address,
                state,
                after_at,
                after_id,
                limit,
            )
            .fetch_all(conn)
            .await
        }
        Search::TransactionHash(hash) => {
            query_intent!(
                PaymentIntent,
                r#"
                SELECT "#,
                r#"
                  FROM payment_intents
                 WHERE merchant_id = $1 AND settlement ->> 'transaction_hash' = $2
                   AND ($3::text IS NULL OR state = $3)
                   AND ($4::timestamptz IS NULL OR (created_at, id) < ($4, $5))
                 ORDER BY created_at DESC, id DESC
                 LIMIT $6
                "#,
                merchant.as_str(),
                hash,
                state,
                after_at,
                after_id,
                limit,
            )
            .fetch_all(conn)
            .await
        }
    }
}

/// Up to `limit` of a merchant's intents created in [`from`, `to`), oldest first, after `after`:
/// the dashboard's export, page by page.
pub async fn created_between(
    conn: &mut PgConnection,
    merchant: &MerchantId,
    from: OffsetDateTime,
    to: OffsetDateTime,
    after: Option<&Cursor>,
    limit: i64,
) -> Result<Vec<PaymentIntent>, sqlx::Error> {
    query_intent!(
        PaymentIntent,
        r#"
        SELECT "#,
        r#"
          FROM payment_intents
         WHERE merchant_id = $1 AND created_at >= $2 AND created_at < $3
           AND ($4::timestamptz IS NULL OR (created_at, id) > ($4, $5))
         ORDER BY created_at, id
         LIMIT $6
        "#,
        merchant.as_str(),
        from,
        to,
        after.map(|c| c.created_at),
        after.map(|c| c.id.as_str()),
        limit,
    )
    .fetch_all(conn)
    .await
}
