//! CSV exports of a merchant's payments and ledger postings for a date range (`docs/dashboard.md`,
//! "Export"): UTF-8, RFC 4180 (the `csv` crate writes it), amounts as exact decimals in the
//! token's units beside the base units. Written page by page as it is read, so a month of a busy
//! merchant never sits in memory whole.

use std::collections::HashMap;

use axum::body::{Body, Bytes};
use time::{Date, OffsetDateTime, Time};
use tokio::sync::mpsc;

use crate::{
    auth::MerchantId,
    db::Pool,
    intents::{
        domain::Chain,
        repo::{self, Cursor},
    },
    ledger,
    rails::tokens::{self, in_units},
};

/// Rows read per statement.
const BATCH: i64 = 1000;

/// What to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Payments,
    Ledger,
}

impl Kind {
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "payments" => Some(Self::Payments),
            "ledger" => Some(Self::Ledger),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Payments => "payments",
            Self::Ledger => "ledger",
        }
    }
}

/// A date range, from the start of `from` to the end of `to` (UTC), at most a year long.
#[derive(Debug, Clone, Copy)]
pub struct Range {
    pub from: Date,
    pub to: Date,
}

impl Range {
    pub fn parse(from: &str, to: &str) -> Result<Self, String> {
        let format = time::format_description::parse("[year]-[month]-[day]")
            .expect("a valid format description");
        let from = Date::parse(from, &format).map_err(|_| "from: must be a date, YYYY-MM-DD")?;
        let to = Date::parse(to, &format).map_err(|_| "to: must be a date, YYYY-MM-DD")?;
        if to < from {
            return Err("to: must not be before from".to_owned());
        }
        if (to - from).whole_days() > 366 {
            return Err("to: at most a year after from".to_owned());
        }
        Ok(Self { from, to })
    }

    fn start(self) -> OffsetDateTime {
        self.from.with_time(Time::MIDNIGHT).assume_utc()
    }

    fn end(self) -> OffsetDateTime {
        self.to.with_time(Time::MIDNIGHT).assume_utc() + time::Duration::days(1)
    }
}

/// The export as a streamed body: rows are read and written a batch at a time. A failure midway
/// ends the body early (the download is then incomplete, and the log says why).
pub fn body(pool: Pool, merchant: MerchantId, kind: Kind, range: Range) -> Body {
    let (sender, receiver) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tokio::spawn(async move {
        let written = match kind {
            Kind::Payments => payments(&pool, &merchant, range, &sender).await,
            Kind::Ledger => postings(&pool, &merchant, range, &sender).await,
        };
        if let Err(e) = written {
            tracing::error!(error = %e, "the export stopped early");
            let _ = sender
                .send(Err(std::io::Error::other("the export stopped early")))
                .await;
        }
    });
    Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(receiver))
}

type Sender = mpsc::Sender<Result<Bytes, std::io::Error>>;

/// A writer for one batch of rows.
fn batch_writer() -> csv::Writer<Vec<u8>> {
    csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(Vec::new())
}

/// Sends what the writer holds and starts a new one; `false` once the client went away.
async fn flush(writer: &mut csv::Writer<Vec<u8>>, sender: &Sender) -> anyhow::Result<bool> {
    let full = std::mem::replace(writer, batch_writer());
    let chunk = full.into_inner().map_err(|e| e.into_error())?;
    Ok(sender.send(Ok(Bytes::from(chunk))).await.is_ok())
}

/// A token's decimals, read once per export.
struct Decimals(HashMap<(String, String), Option<u8>>);

impl Decimals {
    async fn of(
        &mut self,
        conn: &mut sqlx::PgConnection,
        chain: &str,
        token: &str,
    ) -> Result<Option<u8>, sqlx::Error> {
        let key = (chain.to_owned(), token.to_owned());
        if let Some(known) = self.0.get(&key) {
            return Ok(*known);
        }
        let decimals = match Chain::id_of(chain) {
            Some(id) => tokens::units_of(conn, id, token)
                .await?
                .and_then(|(_, d)| d)
                .and_then(|d| u8::try_from(d).ok()),
            None => None,
        };
        self.0.insert(key, decimals);
        Ok(decimals)
    }
}

/// Base units (signed) in the token's units, exactly; empty when the decimals are unknown.
fn units(base_units: &str, decimals: Option<u8>) -> String {
    let Some(decimals) = decimals else {
        return String::new();
    };
    match base_units.strip_prefix('-') {
        Some(magnitude) => format!("-{}", in_units(magnitude, decimals)),
        None => in_units(base_units, decimals),
    }
}

fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

async fn payments(
    pool: &Pool,
    merchant: &MerchantId,
    range: Range,
    sender: &Sender,
) -> anyhow::Result<()> {
    let mut writer = batch_writer();
    writer.write_record([
        "id",
        "created_at",
        "state",
        "chain",
        "token",
        "amount",
        "amount_base_units",
        "currency",
        "payment_method",
        "payer",
        "deposit_address",
        "amount_refunded_base_units",
        "transaction_hash",
        "block_number",
    ])?;
    let mut decimals = Decimals(HashMap::new());
    let mut after: Option<Cursor> = None;
    loop {
        let mut conn = pool.acquire().await?;
        let batch = repo::created_between(
            &mut conn,
            merchant,
            range.start(),
            range.end(),
            after.as_ref(),
            BATCH,
        )
        .await?;
        for intent in &batch {
            // An order not yet paid has a price in its currency, not base units of a token.
            let (amount, base_units) = match (&intent.chain, &intent.token, intent.currency) {
                (Some(chain), Some(token), None) => {
                    let d = decimals.of(&mut conn, chain, token).await?;
                    (units(&intent.amount, d), intent.amount.clone())
                }
                _ => (intent.amount.clone(), String::new()),
            };
            let settlement = intent.settlement.as_ref().map(|s| &s.0);
            let created_at = rfc3339(intent.created_at);
            let block = settlement
                .map(|s| s.block_number.to_string())
                .unwrap_or_default();
            writer.write_record([
                intent.id.as_str(),
                created_at.as_str(),
                intent.state.as_str(),
                intent.chain.as_deref().unwrap_or(""),
                intent.token.as_deref().unwrap_or(""),
                amount.as_str(),
                base_units.as_str(),
                intent.currency.map(|c| c.as_str()).unwrap_or(""),
                intent.payment_method.map(|m| m.as_str()).unwrap_or(""),
                intent.payer.as_deref().unwrap_or(""),
                intent.deposit_address.as_deref().unwrap_or(""),
                intent.amount_refunded.as_str(),
                settlement
                    .map(|s| s.transaction_hash.as_str())
                    .unwrap_or(""),
                block.as_str(),
            ])?;
        }
        if !flush(&mut writer, sender).await? || (batch.len() as i64) < BATCH {
            return Ok(());
        }
        after = batch.last().map(|i| Cursor {
            created_at: i.created_at,
            id: i.id.clone(),
        });
    }
}

async fn postings(
    pool: &Pool,
    merchant: &MerchantId,
    range: Range,
    sender: &Sender,
) -> anyhow::Result<()> {
    let mut writer = batch_writer();
    writer.write_record([
        "entry_id",
        "created_at",
        "kind",
        "payment_intent",
        "refund",
        "chain",
        "transaction_hash",
        "log_index",
        "account",
        "token",
        "amount",
        "amount_base_units",
    ])?;
    let mut decimals = Decimals(HashMap::new());
    let mut after = 0;
    loop {
        let mut conn = pool.acquire().await?;
        let batch = ledger::postings_between(
            &mut conn,
            merchant.as_str(),
            range.start(),
            range.end(),
            after,
            BATCH,
        )
        .await?;
        for posting in &batch {
            let d = decimals
                .of(&mut conn, &posting.chain, &posting.token)
                .await?;
            let (entry, created_at) = (posting.entry_id.to_string(), rfc3339(posting.created_at));
            let (log_index, amount) = (posting.log_index.to_string(), units(&posting.amount, d));
            writer.write_record([
                entry.as_str(),
                created_at.as_str(),
                posting.kind.as_str(),
                posting.intent_id.as_str(),
                posting.refund_id.as_deref().unwrap_or(""),
                posting.chain.as_str(),
                posting.transaction_hash.as_str(),
                log_index.as_str(),
                posting.account.as_str(),
                posting.token.as_str(),
                amount.as_str(),
                posting.amount.as_str(),
            ])?;
        }
        let last = batch.last().map(|p| p.entry_id);
        if !flush(&mut writer, sender).await? {
            return Ok(());
        }
        match last {
            Some(last) => after = last,
            None => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_whole_days_of_at_most_a_year() {
        let range = Range::parse("2026-12-01", "2026-12-31").unwrap();
        assert_eq!(range.end() - range.start(), time::Duration::days(31));
        assert!(Range::parse("2026-12-31", "2026-12-01").is_err());
        assert!(Range::parse("2025-01-01", "2026-12-01").is_err());
        assert!(Range::parse("yesterday", "2026-12-01").is_err());
    }

    #[test]
    fn negative_base_units_keep_their_sign_in_units() {
        assert_eq!(units("-2500000", Some(6)), "-2.50");
        assert_eq!(units("1", Some(6)), "0.000001");
        assert_eq!(units("1", None), "");
    }
}
