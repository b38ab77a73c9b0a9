//! What a checkout page may see of an intent: what the payer needs to pay and to follow the
//! payment, never the merchant's metadata, its secret or anything of another intent.

use serde::Serialize;
use sqlx::PgConnection;
use time::OffsetDateTime;

use alloy::primitives::U256;

use crate::{
    intents::{
        domain::{IntentId, PaymentMethod},
        state::IntentState,
    },
    rails::evm::deposit,
    ways_to_pay::deposit_address,
};

/// An intent as its checkout page shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CheckoutView {
    pub id: String,
    pub state: IntentState,
    pub version: i32,
    /// Token base units, as a decimal string.
    pub amount: String,
    /// The amount in the token's units (`100.00`), when the token says its decimals.
    pub amount_display: Option<String>,
    pub symbol: Option<String>,
    pub decimals: Option<u8>,
    /// `evm:<chain id>`.
    pub chain: String,
    pub chain_id: u64,
    pub token: String,
    /// The address that must sign; none for a `deposit_address` intent.
    pub payer: Option<String>,
    /// `authorization` or `deposit_address`.
    pub payment_method: PaymentMethod,
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

/// An intent row as [`find`] reads it, with its token's units.
struct Row {
    id: String,
    state: IntentState,
    version: i32,
    amount: String,
    chain: String,
    token: String,
    payer: Option<String>,
    payment_method: PaymentMethod,
    deposit_address: Option<String>,
    amount_received: String,
    payee: String,
    merchant_name: String,
    expires_at: OffsetDateTime,
    cancellation_reason: Option<String>,
    failure_reason: Option<String>,
    pending_reason: Option<String>,
    transaction_hash: Option<String>,
    amount_refunded: String,
    symbol: Option<String>,
    decimals: Option<i16>,
    read: bool,
}

/// The intent `id` as its page shows it, with its token's units as read with the token's domain,
/// and whether the token was read at all (`false`: read it, then ask again).
pub async fn find(
    conn: &mut PgConnection,
    id: &IntentId,
) -> Result<Option<(CheckoutView, bool)>, sqlx::Error> {
    let row = sqlx::query_as!(
        Row,
        r#"
        SELECT p.id, p.state AS "state: IntentState", p.version, p.amount::text AS "amount!", p.chain, p.token,
               p.payer, p.payment_method AS "payment_method: PaymentMethod", p.deposit_address,
               p.amount_received::text AS "amount_received!", p.payee, COALESCE(m.display_name, p.merchant_id) AS "merchant_name!", p.expires_at,
               p.cancellation_reason, p.failure_reason, p.pending_reason,
               p.settlement->>'transaction_hash' AS transaction_hash, p.amount_refunded::text AS "amount_refunded!",
               t.symbol AS "symbol?", t.decimals AS "decimals?", t.address IS NOT NULL AS "read!"
          FROM payment_intents p
          LEFT JOIN merchants m ON m.id = p.merchant_id
          LEFT JOIN chain_tokens t ON t.address = p.token AND p.chain = 'evm:' || t.chain_id
         WHERE p.id = $1
        "#,
        id.as_str(),
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| {
        let decimals = r.decimals.and_then(|d| u8::try_from(d).ok());
        let view = CheckoutView {
            amount_display: decimals.map(|d| in_units(&r.amount, d)),
            symbol: r.symbol,
            decimals,
            chain_id: r
                .chain
                .strip_prefix("evm:")
                .and_then(|id| id.parse().ok())
                .unwrap_or(0),
            id: r.id,
            state: r.state,
            version: r.version,
            amount: r.amount,
            chain: r.chain,
            token: r.token,
            payer: r.payer,
            payment_method: r.payment_method,
            deposit_address: r.deposit_address,
            amount_received: r.amount_received,
            payment_uri: None,
            payment_qr_svg: None,
            amount_confirming: "0".to_owned(),
            confirmations: None,
            confirmations_required: 0,
            merchant: r.payee,
            merchant_name: r.merchant_name,
            expires_at: r.expires_at,
            cancellation_reason: r.cancellation_reason,
            failure_reason: r.failure_reason,
            pending_reason: r.pending_reason,
            transaction_hash: r.transaction_hash,
            amount_refunded: r.amount_refunded,
        };
        (view, r.read)
    }))
}

impl CheckoutView {
    /// Fills in how an open deposit intent is paid and how far its payment is: the payment
    /// request for what is still due, and the transfers waiting for `required` confirmations.
    pub async fn with_deposit_progress(
        mut self,
        conn: &mut PgConnection,
        required: u64,
    ) -> Result<Self, sqlx::Error> {
        let Some(address) = self.deposit_address.clone() else {
            return Ok(self);
        };
        self.confirmations_required = required;
        let confirming =
            deposit_address::watch::confirming(conn, &self.id, &self.token, self.chain_id).await?;
        self.amount_confirming = confirming.amount;
        self.confirmations = confirming
            .confirmations
            .and_then(|n| u64::try_from(n).ok())
            .map(|n| n.min(required));
        let due = match (
            self.amount.parse::<U256>(),
            self.amount_received.parse::<U256>(),
        ) {
            (Ok(amount), Ok(received)) => amount.saturating_sub(received),
            _ => U256::ZERO,
        };
        if let (IntentState::Created, false, Ok(token), Ok(to)) = (
            self.state,
            due.is_zero(),
            self.token.parse(),
            address.parse(),
        ) {
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

/// `base_units` (decimal digits) in units of `decimals` places: at least two fractional digits
/// when the token has them (`100.00`), no trailing zeros past them (`0.125`).
pub fn in_units(base_units: &str, decimals: u8) -> String {
    let places = usize::from(decimals);
    if places == 0 {
        return base_units.to_owned();
    }
    let padded = format!("{base_units:0>width$}", width = places + 1);
    let (whole, fraction) = padded.split_at(padded.len() - places);
    let keep = fraction.trim_end_matches('0').len().max(places.min(2));
    format!("{whole}.{}", &fraction[..keep])
}

#[cfg(test)]
mod tests {
    use super::in_units;

    #[test]
    fn amounts_read_in_the_tokens_units() {
        assert_eq!(in_units("100000000", 6), "100.00");
        assert_eq!(in_units("125000", 6), "0.125");
        assert_eq!(in_units("1", 6), "0.000001");
        assert_eq!(in_units("1500000000000000000", 18), "1.50");
        assert_eq!(in_units("7", 0), "7");
        assert_eq!(in_units("5", 1), "0.5");
    }
}
