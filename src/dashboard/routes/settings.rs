//! The merchant's settings: display name, payout address, accepted assets.

use axum::{
    extract::{RawQuery, State},
    http::StatusCode,
    response::Response,
};
use serde::Deserialize;

use super::done;
use crate::dashboard::{
    pages::{self, Section},
    people::Permission,
    web::{Acting, PageError, Signed, see_other},
};
use crate::{db::Pool, intents::domain::Currency, merchants, rails::Chains};

pub(super) async fn settings_page(
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

pub(super) async fn settings(
    State(pool): State<Pool>,
    State(chains): State<Chains>,
    signed: Signed,
    RawQuery(query): RawQuery,
) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    let saved = done(query.as_deref()).is_some_and(|d| d == "saved");
    settings_page(&pool, &chains, &signed, saved).await
}

#[derive(Deserialize)]
pub(super) struct SettingsForm {
    display_name: String,
    /// Empty keeps the address as it is (the API cannot unset one either).
    #[serde(default)]
    payout_address: String,
}

/// `POST /v1/merchant`'s change, for the display name and payout address, with the audit line in
/// its transaction.
pub(super) async fn save_settings(
    State(pool): State<Pool>,
    State(chains): State<Chains>,
    Acting { signed, form }: Acting<SettingsForm>,
) -> Result<Response, PageError> {
    signed.require(Permission::ManageSettings)?;
    let merchant = signed.merchant();
    let payout_address = Some(form.payout_address.trim().to_owned()).filter(|a| !a.is_empty());
    let mut tx = signed.change(&pool).await?;
    let before = merchants::settings_of(&mut tx, &merchant).await?;
    let change = merchants::UpdateMerchant {
        display_name: Some(form.display_name),
        payout_address,
        accepted_assets: None,
    };
    let after = merchants::change(&mut tx, &chains, &merchant, change).await?;
    let mut lines = Vec::new();
    if after.display_name != before.display_name {
        lines.push(("merchant.display_name", None));
    }
    if after.payout_address != before.payout_address {
        lines.push(("merchant.payout_address", after.payout_address.as_deref()));
    }
    // Nothing different: the transaction is rolled back, so no version of the terms is spent.
    if let Some(((action, target), earlier)) = lines.split_last() {
        for (action, target) in earlier {
            tx.record(action, *target).await?;
        }
        tx.done(action, *target).await?;
    }
    Ok(see_other("/dashboard/settings?done=saved"))
}

#[derive(Deserialize)]
pub(super) struct AssetForm {
    #[serde(rename = "do")]
    action: String,
    chain: String,
    token: String,
    currency: String,
}

/// Adds an accepted asset (checked on its chain, as `POST /v1/merchant` checks it) or removes
/// one, with the audit line in the change's transaction.
pub(super) async fn edit_assets(
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
    let mut tx = signed.change(&pool).await?;
    merchants::edit_accepted_assets(&mut tx, &chains, &merchant, edit).await?;
    tx.done(action, Some(&target)).await?;
    Ok(see_other("/dashboard/settings?done=saved"))
}
