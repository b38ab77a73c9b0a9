//! What a checkout page may see of an intent: what the payer needs to pay and to follow the
//! payment, never the merchant's metadata, its secret or anything of another intent.

use serde::Serialize;
use sqlx::PgConnection;
use time::OffsetDateTime;

use alloy::primitives::U256;

use crate::{
    intents::{
        domain::{Currency, IntentId, PaymentMethod},
        order::PaymentOption,
        repo,
        state::IntentState,
    },
    merchants,
    rails::{
        evm::deposit,
        tokens::{self, in_units},
    },
    ways_to_pay::deposit_address,
};

/// An intent as its checkout page shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CheckoutView {
    pub id: String,
    pub state: IntentState,
    pub version: i32,
    /// Token base units, as a decimal string; for an order no option was chosen for yet, its
    /// price in `currency`.
    pub amount: String,
    /// An order's currency.
    pub currency: Option<Currency>,
    /// An order's ways to be paid; the page lets the payer pick one.
    pub payment_options: Vec<CheckoutOption>,
    /// The option paying the order, once chosen: the page shows it alone.
    pub selected_option: Option<String>,
    /// The amount in the token's units (`100.00`), when the token says its decimals.
    pub amount_display: Option<String>,
    pub symbol: Option<String>,
    pub decimals: Option<u8>,
    /// `evm:<chain id>`; `null` for an order until an option is chosen.
    pub chain: Option<String>,
    pub chain_id: u64,
    pub token: Option<String>,
    /// The address that must sign; none for a `deposit_address` intent.
    pub payer: Option<String>,
    /// `authorization` or `deposit_address`; `null` for an order until an option is chosen.
    pub payment_method: Option<PaymentMethod>,
    /// Where to send the token, for a `deposit_address` intent.
    pub deposit_address: Option<String>,
    /// What confirmed transfers to `deposit_address` brought so far, token base units.
    pub amount_received: String,
    /// For an open deposit intent, what a wallet scans to pay the rest: an EIP-681 `transfer`
    /// of the token to `deposit_address`, of the amount still due.
    pub payment_uri: Option<String>,
    /// `payment_uri` as a QR code, an SVG document.
    pub payment_qr_svg: Option<String>,
    /// Transfers to `deposit_address` seen on chain and not yet confirmed: their sum, and the
    /// confirmations of the oldest of them (of `confirmations_required`).
    pub amount_confirming: String,
    pub confirmations: Option<u64>,
    /// 0 on a chain where the node's own `safe` or `finalized` head says when a block is done
    /// (`CHAIN_FINALITY`), not a count.
    pub confirmations_required: u64,
    /// The address paid.
    pub merchant: String,
    /// The merchant's display name (its setting), else its id.
    pub merchant_name: String,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    pub cancellation_reason: Option<String>,
    pub failure_reason: Option<String>,
    pub pending_reason: Option<String>,
    /// The transaction that paid it, once confirmed.
    pub transaction_hash: Option<String>,
    /// Base units refunded to the payer so far (refunds that succeeded on chain).
    #[schema(example = "0")]
    pub amount_refunded: String,
}

/// An order's option as its page shows it: its chain's id, its amount in the token's units and,
/// for a deposit option of an order still open and unchosen, what a wallet scans to pay it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CheckoutOption {
    #[serde(flatten)]
    pub option: PaymentOption,
    pub chain_id: u64,
    /// `amount` in the token's units (`25.00`).
    pub amount_display: String,
    /// An EIP-681 `transfer` of `amount` of the token to `deposit_address`.
    pub payment_uri: Option<String>,
    /// `payment_uri` as a QR code, an SVG document.
    pub payment_qr_svg: Option<String>,
}

impl CheckoutOption {
    fn of(option: PaymentOption) -> Self {
        Self {
            chain_id: chain_id(&option.chain),
            amount_display: in_units(&option.amount, option.decimals),
            payment_uri: None,
            payment_qr_svg: None,
            option,
        }
    }

    /// Fills in the payment request of a deposit option.
    fn with_payment_request(mut self) -> Self {
        let option = &self.option;
        let request = (
            option.token.parse(),
            option.deposit_address.as_deref().map(str::parse),
            option.amount.parse::<U256>(),
        );
        if let (Ok(token), Some(Ok(to)), Ok(amount)) = request {
            let uri = deposit::payment_uri(token, self.chain_id, to, amount);
            self.payment_qr_svg = qr_svg(&uri);
            self.payment_uri = Some(uri);
        }
        self
    }
}

/// The id of `evm:<id>`; 0 for what is no such name.
fn chain_id(chain: &str) -> u64 {
    crate::intents::domain::Chain::id_of(chain).unwrap_or(0)
}

/// The intent `id` as its page shows it, with its merchant's name and its token's units as read
/// with the token's domain, and whether the token was read at all (`false`: read it, then ask
/// again). Each read through its table's owner: the intents, the merchants, the token readings.
pub async fn find(
    conn: &mut PgConnection,
    id: &IntentId,
) -> Result<Option<(CheckoutView, bool)>, sqlx::Error> {
    let Some((merchant_id, intent)) = repo::find_with_merchant(conn, id).await? else {
        return Ok(None);
    };
    let merchant_name = merchants::display_name(conn, &merchant_id)
        .await?
        .unwrap_or(merchant_id);
    let chain_id = intent.chain.as_deref().map(chain_id).unwrap_or(0);
    let selected = intent
        .payment_options
        .iter()
        .find(|o| Some(&o.id) == intent.selected_option.as_ref());
    // An order's chosen option says its token's units and base-unit amount; an order not yet
    // chosen has neither, and a token of an intent priced in it was read with its domain.
    let (amount, units, read) = match (&intent.token, selected) {
        (_, Some(option)) => (
            option.amount.clone(),
            (option.symbol.clone(), Some(i16::from(option.decimals))),
            true,
        ),
        (Some(token), None) => {
            let units = tokens::units_of(conn, chain_id, token).await?;
            (
                intent.amount.clone(),
                units.clone().unwrap_or_default(),
                units.is_some(),
            )
        }
        (None, None) => (intent.amount.clone(), (None, None), true),
    };
    let (symbol, decimals) = units;
    let decimals = decimals.and_then(|d| u8::try_from(d).ok());
    let view = CheckoutView {
        amount_display: decimals.map(|d| in_units(&amount, d)),
        symbol,
        decimals,
        chain_id,
        id: intent.id,
        state: intent.state,
        version: intent.version,
        amount,
        currency: intent.currency,
        payment_options: intent
            .payment_options
            .0
            .into_iter()
            .map(CheckoutOption::of)
            .collect(),
        selected_option: intent.selected_option,
        chain: intent.chain,
        token: intent.token,
        payer: intent.payer,
        payment_method: intent.payment_method,
        deposit_address: intent.deposit_address,
        amount_received: intent.amount_received,
        payment_uri: None,
        payment_qr_svg: None,
        amount_confirming: "0".to_owned(),
        confirmations: None,
        confirmations_required: 0,
        merchant: intent.merchant,
        merchant_name,
        expires_at: intent.expires_at,
        cancellation_reason: intent.cancellation_reason,
        failure_reason: intent.failure_reason,
        pending_reason: intent.pending_reason,
        transaction_hash: intent.settlement.map(|s| s.0.transaction_hash),
        amount_refunded: intent.amount_refunded,
    };
    Ok(Some((view, read)))
}

impl CheckoutView {
    /// Fills in how an open deposit intent is paid and how far its payment is: the payment
    /// request for what is still due, and the transfers waiting for `required` confirmations
    /// (`None`: for the chain's own done head).
    pub async fn with_deposit_progress(
        mut self,
        conn: &mut PgConnection,
        required: Option<u64>,
    ) -> Result<Self, sqlx::Error> {
        if self.state == IntentState::Created && self.selected_option.is_none() {
            self.payment_options = std::mem::take(&mut self.payment_options)
                .into_iter()
                .map(CheckoutOption::with_payment_request)
                .collect();
        }
        let (Some(address), Some(token)) = (self.deposit_address.clone(), self.token.clone())
        else {
            return Ok(self);
        };
        self.confirmations_required = required.unwrap_or(0);
        let confirming =
            deposit_address::watch::confirming(conn, &self.id, &token, self.chain_id).await?;
        self.amount_confirming = confirming.amount;
        self.confirmations = confirming
            .confirmations
            .and_then(|n| u64::try_from(n).ok())
            .map(|n| required.map_or(n, |required| n.min(required)));
        let due = match (
            self.amount.parse::<U256>(),
            self.amount_received.parse::<U256>(),
        ) {
            (Ok(amount), Ok(received)) => amount.saturating_sub(received),
            _ => U256::ZERO,
        };
        if let (IntentState::Created, false, Ok(token), Ok(to)) =
            (self.state, due.is_zero(), token.parse(), address.parse())
        {
            let uri = deposit::payment_uri(token, self.chain_id, to, due);
            self.payment_qr_svg = qr_svg(&uri);
            self.payment_uri = Some(uri);
        }
        Ok(self)
    }
}

/// `text` as a QR code in SVG, black on white with its quiet zone.
fn qr_svg(text: &str) -> Option<String> {
    let code = qrcode::QrCode::with_error_correction_level(text, qrcode::EcLevel::M).ok()?;
    Some(
        code.render::<qrcode::render::svg::Color>()
            .min_dimensions(240, 240)
            .dark_color(qrcode::render::svg::Color("#000000"))
            .light_color(qrcode::render::svg::Color("#ffffff"))
            .build(),
    )
}
