//! Refunds: made from a payment's page, signed in the browser, confirmed.

use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::Deserialize;

use super::payments::token_units;
use crate::dashboard::{
    forms,
    pages::{self, Section},
    people::Permission,
    web::{Acting, PageError, Signed, see_other, with_headers},
};
use crate::{
    db::Pool,
    intents::{
        domain::{Amount, ExpiresIn, IntentId},
        repo::{self},
    },
    rails::Chains,
    ways_to_pay::refunds::{self, domain::RefundId, repo::NewRefund},
};

#[derive(Deserialize)]
pub(super) struct RefundForm {
    amount: String,
    form: String,
}

/// `POST /v1/payment_intents/{id}/refunds` from the payment page: the amount in the token's units
/// (empty: all that is left), the form's one-time id so a second submit makes nothing more.
pub(super) async fn create_refund(
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
    let mut tx = signed.change(&pool).await?;
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
    tx.done("refund.create", Some(&refund.id)).await?;
    Ok(see_other(&format!("/dashboard/refunds/{}", refund.id)))
}

/// An amount typed in the token's units (`2.50`) as base units; without known decimals, base
/// units as typed.
pub(super) fn base_units(raw: &str, decimals: Option<u8>) -> Result<Amount, String> {
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

pub(super) async fn refund(
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
pub(super) async fn refund_authorization(
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
pub(super) struct SignatureForm {
    signature: String,
}

/// `POST /v1/refunds/{id}/confirm` with the wallet's signature: checked, then the transfer queued.
pub(super) async fn confirm_refund(
    State(pool): State<Pool>,
    State(chains): State<Chains>,
    Path(id): Path<String>,
    Acting { signed, form }: Acting<SignatureForm>,
) -> Result<Response, PageError> {
    signed.require(Permission::Refund)?;
    let merchant = signed.merchant();
    let mut tx = signed.change(&pool).await?;
    let refund =
        refunds::payments::confirm(&mut tx, &chains, &merchant, &id, &form.signature).await?;
    tx.done("refund.confirm", Some(&refund.id)).await?;
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
