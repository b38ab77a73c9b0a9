//! The double-entry ledger (`docs/settlement.md`, "Ledger"). An [`Entry`] books one movement of
//! money seen on chain: its kind, its subject (the object of ours it concerns), the chain event it
//! comes from, and postings per account, chain and token. The database refuses an entry that does
//! not sum to zero, a second entry for the same chain event, and any change to a written one.
//! A new way to move money adds a kind and a constructor here, never another writer.

pub mod routes;

use sqlx::PgConnection;

pub use routes::router;

/// What an entry books. Each kind is also listed in the `ledger_entries.kind` check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A payer paid an intent.
    Payment,
    /// A merchant paid a payer back (a refund of an intent).
    Refund,
    /// A payer sent to an intent's deposit address.
    Deposit,
    /// A deposit address's balance left it, for its merchant (what the token took on the way,
    /// if it keeps a fee, is booked to that fee's recipient).
    Sweep,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Payment => "payment",
            Self::Refund => "refund",
            Self::Deposit => "deposit",
            Self::Sweep => "sweep",
        }
    }
}

/// An account of the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Account<'a> {
    /// An address that paid (or is paid back).
    Payer(&'a str),
    /// A merchant's funds, held at its own addresses.
    Merchant(&'a str),
    /// What an intent's deposit address holds: the merchant's, until it is swept to them.
    DepositAddress(&'a str),
    /// An address outside, that a token's own rules paid on a sweep (a transfer fee).
    TokenFee(&'a str),
}

impl Account<'_> {
    /// As postings store it.
    pub fn name(&self) -> String {
        match self {
            Self::Payer(address) => format!("payer:{address}"),
            Self::Merchant(id) => format!("merchant:{id}"),
            Self::DepositAddress(address) => format!("deposit:{address}"),
            Self::TokenFee(address) => format!("token_fee:{address}"),
        }
    }
}

/// What one account received (positive) or gave (negative), in token base units.
#[derive(Debug, Clone)]
pub struct Posting<'a> {
    pub account: Account<'a>,
    /// Signed decimal, e.g. `-100000000`.
    pub amount: String,
}

/// The chain event an entry comes from: a log of a transaction. One entry per event.
#[derive(Debug, Clone, Copy)]
pub struct ChainEvent<'a> {
    pub chain: &'a str,
    pub transaction_hash: &'a str,
    pub log_index: i32,
}

/// One movement of money, as [`post`] writes it.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    pub kind: Kind,
    pub merchant_id: &'a str,
    /// The intent the entry concerns.
    pub intent_id: &'a str,
    /// The refund it books, for a refund.
    pub refund_id: Option<&'a str>,
    pub event: ChainEvent<'a>,
    pub token: &'a str,
    pub postings: Vec<Posting<'a>>,
}

impl<'a> Entry<'a> {
    /// A confirmed payment of an intent: its amount from the payer to the merchant.
    pub fn payment(
        merchant_id: &'a str,
        intent_id: &'a str,
        payer: &'a str,
        event: ChainEvent<'a>,
        token: &'a str,
        amount: &str,
    ) -> Self {
        Self::transfer(
            Kind::Payment,
            (merchant_id, intent_id),
            Account::Payer(payer),
            Account::Merchant(merchant_id),
            event,
            token,
            amount,
        )
    }

    /// A confirmed refund of an intent: its amount from the merchant back to the payer, the
    /// payment's entry reversed.
    pub fn refund(
        merchant_id: &'a str,
        intent_id: &'a str,
        refund_id: &'a str,
        payer: &'a str,
        event: ChainEvent<'a>,
        token: &'a str,
        amount: &str,
    ) -> Self {
        let mut entry = Self::payment(merchant_id, intent_id, payer, event, token, amount);
        for posting in &mut entry.postings {
            posting.amount = match posting.amount.strip_prefix('-') {
                Some(positive) => positive.to_owned(),
                None => format!("-{}", posting.amount),
            };
        }
        Self {
            kind: Kind::Refund,
            refund_id: Some(refund_id),
            ..entry
        }
    }

    /// A confirmed transfer of `amount` from `sender` to an intent's `deposit_address`.
    pub fn deposit(
        merchant_id: &'a str,
        intent_id: &'a str,
        sender: &'a str,
        deposit_address: &'a str,
        event: ChainEvent<'a>,
        token: &'a str,
        amount: &str,
    ) -> Self {
        Self::transfer(
            Kind::Deposit,
            (merchant_id, intent_id),
            Account::Payer(sender),
            Account::DepositAddress(deposit_address),
            event,
            token,
            amount,
        )
    }

    /// A confirmed transfer of `amount` out of an intent's `deposit_address`: to its merchant,
    /// or (`to_merchant` false) to whoever the token itself paid on the way.
    #[allow(clippy::too_many_arguments)]
    pub fn sweep(
        merchant_id: &'a str,
        intent_id: &'a str,
        deposit_address: &'a str,
        recipient: &'a str,
        to_merchant: bool,
        event: ChainEvent<'a>,
        token: &'a str,
        amount: &str,
    ) -> Self {
        let to = if to_merchant {
            Account::Merchant(merchant_id)
        } else {
            Account::TokenFee(recipient)
        };
        Self::transfer(
            Kind::Sweep,
            (merchant_id, intent_id),
            Account::DepositAddress(deposit_address),
            to,
            event,
            token,
            amount,
        )
    }

    /// `amount` from `from` to `to`, about the merchant's intent.
    fn transfer(
        kind: Kind,
        (merchant_id, intent_id): (&'a str, &'a str),
        from: Account<'a>,
        to: Account<'a>,
        event: ChainEvent<'a>,
        token: &'a str,
        amount: &str,
    ) -> Self {
        Self {
            kind,
            merchant_id,
            intent_id,
            refund_id: None,
            event,
            token,
            postings: vec![
                Posting {
                    account: from,
                    amount: format!("-{amount}"),
                },
                Posting {
                    account: to,
                    amount: amount.to_owned(),
                },
            ],
        }
    }
}

/// Writes `entry` in the caller's transaction (the one that makes the change it books). Returns
/// false if its chain event already has an entry.
pub async fn post(conn: &mut PgConnection, entry: &Entry<'_>) -> Result<bool, sqlx::Error> {
    let accounts: Vec<String> = entry.postings.iter().map(|p| p.account.name()).collect();
    let amounts: Vec<String> = entry.postings.iter().map(|p| p.amount.clone()).collect();
    let written = sqlx::query_scalar!(
        r#"
        WITH entry AS (
            INSERT INTO ledger_entries (kind, merchant_id, intent_id, chain, transaction_hash, log_index, refund_id)
            VALUES ($1, $2, $3, $4, $5, $6, $10)
            ON CONFLICT (chain, transaction_hash, log_index) DO NOTHING
            RETURNING id
        ), postings AS (
            INSERT INTO ledger_postings (entry_id, account, chain, token, amount)
            SELECT entry.id, side.account, $4, $7, side.amount::numeric
              FROM entry, unnest($8::text[], $9::text[]) AS side (account, amount)
        )
        SELECT count(*) AS "written!" FROM entry
        "#,
        entry.kind.as_str(),
        entry.merchant_id,
        entry.intent_id,
        entry.event.chain,
        entry.event.transaction_hash,
        entry.event.log_index,
        entry.token,
        &accounts,
        &amounts,
        entry.refund_id,
    )
    .fetch_one(conn)
    .await?;
    Ok(written == 1)
}

/// A posting on a deposit address's account (`deposit:<address>`), by its chain event.
pub struct DepositPosting {
    pub transaction_hash: String,
    pub log_index: i32,
    pub account: String,
    pub token: String,
    /// Signed: negative when it left the address.
    pub amount: String,
}

/// Every posting on deposit addresses' accounts on `chain` (deposits and sweeps), for reconcile.
pub async fn deposit_postings(
    conn: &mut PgConnection,
    chain: &str,
) -> Result<Vec<DepositPosting>, sqlx::Error> {
    sqlx::query_as!(
        DepositPosting,
        r#"
        SELECT e.transaction_hash, e.log_index, p.account, p.token, p.amount::text AS "amount!"
          FROM ledger_entries e
          JOIN ledger_postings p ON p.entry_id = e.id AND p.account LIKE 'deposit:%'
         WHERE e.chain = $1 AND e.kind = ANY($2::text[])
        "#,
        chain,
        &[Kind::Deposit.as_str(), Kind::Sweep.as_str()] as &[&str],
    )
    .fetch_all(conn)
    .await
}

/// What an entry's receiver got, by its chain event.
pub struct Received {
    pub transaction_hash: String,
    pub log_index: i32,
    /// The refund it books, else the intent.
    pub subject: String,
    pub amount: String,
}

/// The entries of `kind` on `chain`, each with what its receiver (the accounts matching
/// `receiver`, a `LIKE` pattern such as `merchant:%`) got, for reconcile.
pub async fn received(
    conn: &mut PgConnection,
    chain: &str,
    kind: Kind,
    receiver: &str,
) -> Result<Vec<Received>, sqlx::Error> {
    sqlx::query_as!(
        Received,
        r#"
        SELECT e.transaction_hash, e.log_index, COALESCE(e.refund_id, e.intent_id) AS "subject!",
               p.amount::text AS "amount!"
          FROM ledger_entries e
          JOIN ledger_postings p ON p.entry_id = e.id AND p.account LIKE $3
         WHERE e.chain = $1 AND e.kind = $2
        "#,
        chain,
        kind.as_str(),
        receiver,
    )
    .fetch_all(conn)
    .await
}

/// One posting of an entry about an intent, as the dashboard shows it.
#[derive(Debug)]
pub struct IntentPosting {
    pub entry_id: i64,
    pub kind: String,
    pub transaction_hash: String,
    pub account: String,
    pub token: String,
    /// Signed base units.
    pub amount: String,
    pub created_at: time::OffsetDateTime,
}

/// The postings of every entry about `intent` (its payment, deposits, sweeps and refunds), in
/// the order they were booked.
pub async fn of_intent(
    conn: &mut PgConnection,
    merchant: &str,
    intent: &str,
) -> Result<Vec<IntentPosting>, sqlx::Error> {
    sqlx::query_as!(
        IntentPosting,
        r#"SELECT e.id AS entry_id, e.kind, e.transaction_hash, p.account, p.token,
                  p.amount::text AS "amount!", e.created_at
             FROM ledger_entries e JOIN ledger_postings p ON p.entry_id = e.id
            WHERE e.merchant_id = $1 AND e.intent_id = $2
            ORDER BY e.id, p.amount, p.account"#,
        merchant,
        intent,
    )
    .fetch_all(conn)
    .await
}

/// One posting as the dashboard's export writes it.
#[derive(Debug)]
pub struct ExportedPosting {
    pub entry_id: i64,
    pub created_at: time::OffsetDateTime,
    pub kind: String,
    pub intent_id: String,
    pub refund_id: Option<String>,
    pub chain: String,
    pub transaction_hash: String,
    pub log_index: i32,
    pub account: String,
    pub token: String,
    /// Signed base units.
    pub amount: String,
}

/// Up to `limit` postings of the merchant's entries booked in [`from`, `to`), entry after entry
/// from past entry `after`.
pub async fn postings_between(
    conn: &mut PgConnection,
    merchant: &str,
    from: time::OffsetDateTime,
    to: time::OffsetDateTime,
    after: i64,
    limit: i64,
) -> Result<Vec<ExportedPosting>, sqlx::Error> {
    sqlx::query_as!(
        ExportedPosting,
        r#"SELECT e.id AS entry_id, e.created_at, e.kind, e.intent_id, e.refund_id, e.chain,
                  e.transaction_hash, e.log_index, p.account, p.token, p.amount::text AS "amount!"
             FROM ledger_entries e JOIN ledger_postings p ON p.entry_id = e.id
            WHERE e.id IN (SELECT id FROM ledger_entries
                            WHERE merchant_id = $1 AND created_at >= $2 AND created_at < $3
                              AND id > $4
                            ORDER BY id LIMIT $5)
            ORDER BY e.id, p.amount, p.account"#,
        merchant,
        from,
        to,
        after,
        limit,
    )
    .fetch_all(conn)
    .await
}
