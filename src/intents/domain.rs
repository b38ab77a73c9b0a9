//! Domain types of a payment intent. Each one parses its raw input once and can then only hold a
//! valid value ("parse, don't validate"): handlers never see an unchecked string.

use std::{collections::BTreeMap, fmt};

use serde::{Deserialize, Deserializer, Serialize, de::Error as _};
use sha3::{Digest, Keccak256};

use crate::ids;

/// `evm:<chain id>`: a positive decimal chain id without leading zeros (`docs/api.md`, "The
/// intent"). Ids are bounded to u64, the range every EVM client and EIP-155 signer actually uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Chain(String);

impl Chain {
    pub fn parse(raw: &str) -> Result<Self, String> {
        let id = raw
            .strip_prefix("evm:")
            .ok_or_else(|| format!("must look like \"evm:<chain id>\", got {}", quoted(raw)))?;
        let is_canonical =
            !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) && !id.starts_with('0');
        match id.parse::<u64>() {
            Ok(_) if is_canonical => Ok(Self(raw.to_owned())),
            _ => Err(format!(
                "chain id must be a positive decimal integer without leading zeros that fits in 64 bits, got {}",
                quoted(raw)
            )),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id of a chain named `evm:<id>`, if `raw` is such a name.
    pub fn id_of(raw: &str) -> Option<u64> {
        Self::parse(raw).ok()?.0.strip_prefix("evm:")?.parse().ok()
    }
}

impl TryFrom<String> for Chain {
    type Error = String;
    fn try_from(raw: String) -> Result<Self, String> {
        Self::parse(&raw)
    }
}

impl From<Chain> for String {
    fn from(chain: Chain) -> String {
        chain.0
    }
}

/// A 20-byte EVM address. All-lowercase or all-uppercase hex is accepted as is; mixed case must be
/// a valid EIP-55 checksum, because a mixed-case typo is exactly what the checksum exists to catch.
/// Displayed (and stored) in EIP-55 form.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Address([u8; 20]);

impl Address {
    pub fn parse(raw: &str) -> Result<Self, String> {
        let hex_digits = raw
            .strip_prefix("0x")
            .filter(|digits| digits.len() == 40 && digits.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| format!("must be 0x followed by 40 hex digits, got {}", quoted(raw)))?;
        let mut bytes = [0u8; 20];
        hex::decode_to_slice(hex_digits, &mut bytes).map_err(|e| e.to_string())?;
        let address = Self(bytes);
        let has_lower = hex_digits.bytes().any(|b| b.is_ascii_lowercase());
        let has_upper = hex_digits.bytes().any(|b| b.is_ascii_uppercase());
        if has_lower && has_upper && address.to_checksum()[2..] != *hex_digits {
            return Err(format!(
                "mixed-case address {raw} fails its EIP-55 checksum"
            ));
        }
        Ok(address)
    }

    /// EIP-55, by alloy.
    pub fn to_checksum(&self) -> String {
        alloy::primitives::Address::from(self.0).to_checksum(None)
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_checksum())
    }
}

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Address({self})")
    }
}

impl From<Address> for alloy::primitives::Address {
    fn from(address: Address) -> Self {
        Self::from(address.0)
    }
}

impl From<alloy::primitives::Address> for Address {
    fn from(address: alloy::primitives::Address) -> Self {
        Self(address.into_array())
    }
}

impl TryFrom<String> for Address {
    type Error = String;
    fn try_from(raw: String) -> Result<Self, String> {
        Self::parse(&raw)
    }
}

impl From<Address> for String {
    fn from(address: Address) -> String {
        address.to_checksum()
    }
}

/// A token amount in base units: decimal digits in a JSON string, no sign, no leading zeros,
/// 1 ≤ amount < 2^256 (`docs/api.md`, "The intent"). Kept as its canonical decimal text, which is also how it crosses
/// into PostgreSQL's `numeric(78,0)`: no float or fixed-width integer ever touches it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Amount(String);

/// 2^256 in decimal: the first amount that does not fit a uint256.
const TWO_POW_256: &str =
    "115792089237316195423570985008687907853269984665640564039457584007913129639936";

impl Amount {
    pub fn parse(raw: &str) -> Result<Self, String> {
        if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "must be a string of decimal digits, got {}",
                quoted(raw)
            ));
        }
        if raw.starts_with('0') {
            return Err(if raw.bytes().all(|b| b == b'0') {
                "must be at least 1".to_owned()
            } else {
                format!("must not have leading zeros, got {}", quoted(raw))
            });
        }
        // Same-length decimal strings without leading zeros compare like the numbers they spell.
        if raw.len() > TWO_POW_256.len() || (raw.len() == TWO_POW_256.len() && raw >= TWO_POW_256) {
            return Err("must be less than 2^256".to_owned());
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Amount {
    type Error = String;
    fn try_from(raw: String) -> Result<Self, String> {
        Self::parse(&raw)
    }
}

impl From<Amount> for String {
    fn from(amount: Amount) -> String {
        amount.0
    }
}

/// A currency an order can be priced in.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum Currency {
    Usd,
    Eur,
}

impl Currency {
    pub fn parse(raw: &str) -> Result<Self, String> {
        match raw {
            "usd" => Ok(Self::Usd),
            "eur" => Ok(Self::Eur),
            _ => Err(format!("must be \"usd\" or \"eur\", got {raw:?}")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Usd => "usd",
            Self::Eur => "eur",
        }
    }

    /// Digits of its minor unit (cents): an amount in it has at most this many fraction digits.
    pub fn minor_digits(self) -> u8 {
        2
    }
}

/// What an order costs in its currency: a decimal string with at most the currency's two fraction
/// digits, more than zero, no sign, no leading zeros (`"25.00"`, `"0.5"`, `"120"`), kept as given
/// and counted in minor units (cents), which every option's base-unit amount is made from exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Price {
    text: String,
    minor_units: u64,
}

impl Price {
    /// At most this many digits before the point: ten trillion, beyond any one payment.
    const MAX_WHOLE_DIGITS: usize = 13;

    pub fn parse(raw: &str, currency: Currency) -> Result<Self, String> {
        let digits = usize::from(currency.minor_digits());
        let (whole, fraction) = raw.split_once('.').unwrap_or((raw, ""));
        let well_formed = !whole.is_empty()
            && whole.bytes().all(|b| b.is_ascii_digit())
            && fraction.bytes().all(|b| b.is_ascii_digit())
            && (!raw.contains('.') || !fraction.is_empty())
            && (whole == "0" || !whole.starts_with('0'));
        if !well_formed {
            return Err(format!(
                "must be a decimal string such as \"25.00\" (no sign, exponent or leading zeros), got {}",
                quoted(raw)
            ));
        }
        if fraction.len() > digits {
            return Err(format!(
                "{} has {digits} minor digits; {} has {}",
                currency.as_str(),
                quoted(raw),
                fraction.len()
            ));
        }
        if whole.len() > Self::MAX_WHOLE_DIGITS {
            return Err(format!(
                "must be less than 10^{} {}",
                Self::MAX_WHOLE_DIGITS,
                currency.as_str()
            ));
        }
        let padded = format!("{whole}{fraction:0<digits$}");
        let minor_units: u64 = padded.parse().map_err(|e| format!("{e}"))?;
        if minor_units == 0 {
            return Err("must be more than zero".to_owned());
        }
        Ok(Self {
            text: raw.to_owned(),
            minor_units,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The price in base units of a token with `decimals` decimals, exactly: `None` if it is no
    /// uint256 (a token with absurdly many decimals).
    pub fn in_base_units(&self, currency: Currency, decimals: u8) -> Option<Amount> {
        use alloy::primitives::U256;
        let scale = decimals.checked_sub(currency.minor_digits())?;
        let units = U256::from(10u8)
            .checked_pow(U256::from(scale))?
            .checked_mul(U256::from(self.minor_units))?;
        Amount::parse(&units.to_string()).ok()
    }
}

/// How an intent is paid (`docs/api.md`, "The intent"): `authorization`, an EIP-3009 transfer its
/// payer signs (the default), or `deposit_address`, plain transfers of the token to an address of
/// the intent's own (`docs/settlement.md`, "Deposit addresses").
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum PaymentMethod {
    #[default]
    Authorization,
    DepositAddress,
    /// A Permit2 signature through x402's exact proxy, for any ERC-20 the payer approved Permit2
    /// for (an intent's payer, or an x402 settle).
    Permit2,
}

impl PaymentMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Authorization => "authorization",
            Self::DepositAddress => "deposit_address",
            Self::Permit2 => "permit2",
        }
    }
}

/// How long a new intent stays payable: 60..=86400 seconds, 900 when absent (`docs/api.md`, "The intent").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "i64")]
pub struct ExpiresIn(u32);

impl ExpiresIn {
    pub const MIN: i64 = 60;
    pub const MAX: i64 = 86_400;

    pub fn parse(seconds: i64) -> Result<Self, String> {
        if (Self::MIN..=Self::MAX).contains(&seconds) {
            Ok(Self(seconds as u32))
        } else {
            Err(format!(
                "must be between {} and {} seconds, got {seconds}",
                Self::MIN,
                Self::MAX
            ))
        }
    }

    pub fn seconds(self) -> u32 {
        self.0
    }
}

impl Default for ExpiresIn {
    fn default() -> Self {
        Self(900)
    }
}

impl TryFrom<i64> for ExpiresIn {
    type Error = String;
    fn try_from(seconds: i64) -> Result<Self, String> {
        Self::parse(seconds)
    }
}

/// Free-form pairs a merchant attaches to an intent, carried by every event about it: at most 50
/// keys of 1 to 40 characters, each with a string value of at most 500 (Stripe's limits).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Metadata(BTreeMap<String, String>);

impl Metadata {
    pub const MAX_KEYS: usize = 50;
    pub const MAX_KEY_CHARS: usize = 40;
    pub const MAX_VALUE_CHARS: usize = 500;

    /// Pairs this server writes itself (keys within the limits); values are cut to the limit.
    pub fn of_ours<'a>(pairs: impl IntoIterator<Item = (&'static str, &'a str)>) -> Self {
        Self(
            pairs
                .into_iter()
                .map(|(key, value)| {
                    let value = value.chars().take(Self::MAX_VALUE_CHARS).collect();
                    (key.to_owned(), value)
                })
                .collect(),
        )
    }
}

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let pairs = BTreeMap::<String, serde_json::Value>::deserialize(deserializer)?;
        if pairs.len() > Self::MAX_KEYS {
            return Err(D::Error::custom(format!(
                "at most {} keys, got {}",
                Self::MAX_KEYS,
                pairs.len()
            )));
        }
        let mut metadata = BTreeMap::new();
        for (key, value) in pairs {
            let shown: String = key.chars().take(Self::MAX_KEY_CHARS).collect();
            if key.is_empty() || key.chars().count() > Self::MAX_KEY_CHARS {
                return Err(D::Error::custom(format!(
                    "key {shown:?} must be 1 to {} characters",
                    Self::MAX_KEY_CHARS
                )));
            }
            let serde_json::Value::String(value) = value else {
                return Err(D::Error::custom(format!(
                    "the value of {key:?} must be a string"
                )));
            };
            if value.chars().count() > Self::MAX_VALUE_CHARS {
                return Err(D::Error::custom(format!(
                    "the value of {key:?} is longer than {} characters",
                    Self::MAX_VALUE_CHARS
                )));
            }
            metadata.insert(key, value);
        }
        Ok(Self(metadata))
    }
}

/// `pi_` + 24 lowercase hex digits: 96 random bits, so ids cannot be guessed or enumerated.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IntentId(String);

impl IntentId {
    pub fn generate() -> Self {
        Self(ids::generate("pi_"))
    }

    /// Any string that could not be an id is simply not found: a path is not validated input.
    pub fn parse(raw: &str) -> Option<Self> {
        ids::is_valid("pi_", raw).then(|| Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The intent's key on chain: keccak256("payments-api:" || id), the nonce of the EIP-3009
    /// authorization that pays it. The token refuses a used nonce, so an intent is paid at most
    /// once, whoever submits its authorization (`docs/settlement.md`).
    pub fn chain_nonce(&self) -> [u8; 32] {
        chain_nonce(&self.0)
    }

    /// A new client secret for this intent: its id, `_secret_` and 128 random bits, Stripe's
    /// shape, so a secret also says which intent it opens.
    pub fn client_secret(&self) -> String {
        let random = ids::generate("") + &ids::generate("")[..8];
        format!("{}_secret_{random}", self.0)
    }
}

/// [`IntentId::chain_nonce`] of a stored id.
pub fn chain_nonce(id: &str) -> [u8; 32] {
    let mut hasher = Keccak256::new();
    hasher.update(b"payments-api:");
    hasher.update(id.as_bytes());
    hasher.finalize().into()
}

/// Echo user input in an error message, bounded so a megabyte of garbage is not echoed back.
fn quoted(raw: &str) -> String {
    const LIMIT: usize = 80;
    match raw.char_indices().nth(LIMIT) {
        Some((cut, _)) => format!("{:?}…", &raw[..cut]),
        None => format!("{raw:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_accepts_canonical_ids_only() {
        assert_eq!(Chain::parse("evm:31337").unwrap().as_str(), "evm:31337");
        assert!(Chain::parse("evm:1").is_ok());
        assert!(Chain::parse("evm:18446744073709551615").is_ok());
        for bad in [
            "evm:0",
            "evm:01",
            "evm:",
            "evm:-1",
            "evm:+1",
            "evm:1.0",
            "EVM:1",
            "sol:1",
            "1",
            "evm:18446744073709551616",
            "evm: 1",
        ] {
            assert!(Chain::parse(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn address_checks_eip55_for_mixed_case_and_displays_checksummed() {
        // The EIP-55 test vectors.
        for canonical in [
            "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
            "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359",
            "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB",
            "0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb",
            "0x5FbDB2315678afecb367f032d93F642f64180aa3",
        ] {
            let address = Address::parse(canonical).unwrap();
            assert_eq!(address.to_string(), canonical);
            assert_eq!(Address::parse(&canonical.to_lowercase()).unwrap(), address);
            assert_eq!(
                Address::parse(&format!("0x{}", canonical[2..].to_uppercase())).unwrap(),
                address
            );
        }
        // One letter's case flipped breaks the checksum.
        assert!(Address::parse("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD").is_err());
        for bad in [
            "",
            "0x",
            "5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
            "0X5aaeb6053f3e94c9b9a09f33669435e7ef1beaed",
            "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beae",
            "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaedd",
            "0xgaaeb6053f3e94c9b9a09f33669435e7ef1beaed",
        ] {
            assert!(Address::parse(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn amount_is_bounded_to_uint256_without_leading_zeros() {
        assert_eq!(Amount::parse("100000000").unwrap().as_str(), "100000000");
        assert!(Amount::parse("1").is_ok());
        let max = "115792089237316195423570985008687907853269984665640564039457584007913129639935";
        assert_eq!(Amount::parse(max).unwrap().as_str(), max);
        assert_eq!(
            Amount::parse(TWO_POW_256).unwrap_err(),
            "must be less than 2^256"
        );
        assert!(Amount::parse(&"9".repeat(79)).is_err());
        assert_eq!(Amount::parse("0").unwrap_err(), "must be at least 1");
        for bad in [
            "", "00", "01", "-1", "+1", "1.5", "1e6", " 1", "1 ", "0x10", "١",
        ] {
            assert!(Amount::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn expires_in_is_bounded() {
        assert_eq!(ExpiresIn::default().seconds(), 900);
        assert_eq!(ExpiresIn::parse(60).unwrap().seconds(), 60);
        assert_eq!(ExpiresIn::parse(86_400).unwrap().seconds(), 86_400);
        assert!(ExpiresIn::parse(59).is_err());
        assert!(ExpiresIn::parse(86_401).is_err());
        assert!(ExpiresIn::parse(-1).is_err());
    }

    #[test]
    fn intent_ids_carry_96_random_bits() {
        let a = IntentId::generate();
        let b = IntentId::generate();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 3 + 24);
        assert_eq!(IntentId::parse(a.as_str()), Some(a));
        assert_eq!(IntentId::parse("pi_BFE74542F6B8B55F8F849A22"), None);
        assert_eq!(IntentId::parse("pi_bfe74542"), None);
        assert_eq!(IntentId::parse("'; DROP TABLE payment_intents; --"), None);
    }

    #[test]
    fn a_price_is_exact_in_any_token_units() {
        let usd = Currency::Usd;
        let price = Price::parse("25.00", usd).unwrap();
        assert_eq!(price.as_str(), "25.00");
        assert_eq!(price.in_base_units(usd, 6).unwrap().as_str(), "25000000");
        assert_eq!(
            price.in_base_units(usd, 18).unwrap().as_str(),
            "25000000000000000000"
        );
        assert_eq!(price.in_base_units(usd, 2).unwrap().as_str(), "2500");
        assert_eq!(
            Price::parse("0.5", usd)
                .unwrap()
                .in_base_units(usd, 6)
                .unwrap()
                .as_str(),
            "500000"
        );
        assert_eq!(
            Price::parse("120", usd)
                .unwrap()
                .in_base_units(usd, 6)
                .unwrap()
                .as_str(),
            "120000000"
        );
        assert!(price.in_base_units(usd, 1).is_none());
        assert!(price.in_base_units(usd, 255).is_none());
        for bad in [
            "",
            "0",
            "0.00",
            "-1",
            "+1",
            "1.",
            ".5",
            "1.234",
            "01.00",
            "1e3",
            " 1",
            "1,00",
            "99999999999999",
            "NaN",
        ] {
            assert!(
                Price::parse(bad, usd).is_err(),
                "{bad:?} should be rejected"
            );
        }
        assert!(Price::parse("9999999999999.99", usd).is_ok());
    }

    #[test]
    fn echoed_input_is_bounded() {
        let long = "x".repeat(10_000);
        assert!(quoted(&long).len() < 100);
    }
}
