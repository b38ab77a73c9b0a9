//! Orders: an intent priced in a currency, payable by any of its merchant's accepted assets in
//! that currency, each way its chain and token allow. The options are fixed when the order is made
//! (from what was read of each token when it was accepted, so no chain is asked), and one of them
//! is chosen once: by a payer's confirm, or by the first deposit reaching an option's address
//! (`docs/settlement.md`, "Orders and options").

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::domain::{Address, Currency, IntentId, PaymentMethod, Price};
use crate::{config::ChainEndpoint, ids, merchants::assets::AcceptedAsset, rails::evm::deposit};

/// One way to pay an order: a token on a chain, an amount in its base units, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PaymentOption {
    /// `po_` + 24 lowercase hex digits.
    #[schema(example = "po_4c1d6e0f9a2b3c4d5e6f7a8b")]
    pub id: String,
    #[schema(example = "evm:31337")]
    pub chain: String,
    /// EIP-55 checksummed.
    pub token: String,
    /// The token's `symbol()`, as read when the merchant accepted it.
    pub symbol: Option<String>,
    pub decimals: u8,
    /// The order's price in the token's base units, exactly: `"25000000"` for 25.00 of a token
    /// with 6 decimals.
    #[schema(example = "25000000")]
    pub amount: String,
    pub payment_method: PaymentMethod,
    /// For `deposit_address`: where to send the token, an address of this order alone on this
    /// chain (computed; deployed only when swept).
    pub deposit_address: Option<String>,
}

/// Money that reached an intent and was not counted toward it: at an order's address another way
/// than the option that pays it, or in a token the address was not made for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DuplicatePayment {
    /// `dp_` + 24 lowercase hex digits.
    #[schema(example = "dp_0b5e6c1d2f3a4b5c6d7e8f90")]
    pub id: String,
    #[schema(example = "evm:31337")]
    pub chain: String,
    /// EIP-55 checksummed.
    pub token: String,
    /// Token base units that arrived.
    #[schema(example = "25000000")]
    pub amount: String,
    pub transaction_hash: String,
    /// Who sent it, EIP-55 checksummed.
    pub from: String,
    /// Where it arrived: the option's deposit address; `null` for an authorization of another
    /// option that its payer submitted.
    pub deposit_address: Option<String>,
    #[serde(default)]
    pub reason: DuplicateReason,
}

/// Why money that reached an intent was not counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DuplicateReason {
    /// The order was paid, or is being paid, by another option, or left `created` unchosen.
    #[default]
    PaidOtherwise,
    /// A token the deposit address was not made for: any ERC-20 sent to it.
    UnacceptedToken,
}

impl DuplicatePayment {
    pub fn new_id() -> String {
        ids::generate("dp_")
    }
}

/// The options of the order `id` of `payee`, priced `price` in `currency`: for each accepted asset
/// of that currency on a chain served now, `authorization` where its token has EIP-3009 (else
/// `permit2`) and `deposit_address` where its chain has a factory, in the merchant's order. An asset whose
/// base-unit amount would not fit a uint256 is left out.
pub fn options(
    id: &IntentId,
    payee: Address,
    price: &Price,
    currency: Currency,
    accepted: &[AcceptedAsset],
    served: &[ChainEndpoint],
) -> Vec<PaymentOption> {
    let mut options = Vec::new();
    let forwarders = deposit::Forwarders::of(payee.into());
    let intent = deposit::intent_key(id.as_str());
    for asset in accepted.iter().filter(|a| a.currency == currency) {
        let Some(chain) = served.iter().find(|c| c.name == asset.chain) else {
            continue;
        };
        let (Some(amount), Ok(token)) = (
            price.in_base_units(currency, asset.decimals),
            Address::parse(&asset.token),
        ) else {
            continue;
        };
        let option = |payment_method, deposit_address| PaymentOption {
            id: ids::generate("po_"),
            chain: asset.chain.clone(),
            token: asset.token.clone(),
            symbol: asset.symbol.clone(),
            decimals: asset.decimals,
            amount: amount.as_str().to_owned(),
            payment_method,
            deposit_address,
        };
        // A wallet signs for any token: by EIP-3009 where the token has it, else by Permit2.
        options.push(option(
            if asset.supports_authorization {
                PaymentMethod::Authorization
            } else {
                PaymentMethod::Permit2
            },
            None,
        ));
        if let Some(factory) = chain.deposit_factory {
            let address = deposit::forwarder_of(factory, forwarders, token.into(), intent);
            options.push(option(
                PaymentMethod::DepositAddress,
                Some(Address::from(address).to_checksum()),
            ));
        }
    }
    options
}
