//! CSV exports of a merchant's payments and ledger postings for a date range (`docs/dashboard.md`,
//! "Export"): UTF-8, RFC 4180 (the `csv` crate writes it), amounts as exact decimals in the
//! token's units beside the base units. Written page by page as it is read, so a month of a busy
//! merchant never sits in memory whole.

use std::collections::HashMap;

use axum::body::{Body, Bytes};
use time::{Date, OffsetDateTime, Time};
use tokio::sync::mpsc;

use sqlx::PgConnection;

use crate::{
    auth::MerchantId,
    db::Pool,
    intents::{
        domain::Chain,
        repo::{self, Cursor, PaymentIntent},
    },
    ledger::{self, ExportedPosting},
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
        let decimals = Decimals(HashMap::new());
        let written = match kind {
            Kind::Payments => {
                let table = Payments {
                    merchant,
                    range,
                    after: None,
                    finished: false,
                    decimals,
                };
                write(&pool, table, &sender).await
            }
            Kind::Ledger => {
                let table = Postings {
                    merchant,
                    range,
                    after: 0,
                    decimals,
                };
                write(&pool, table, &sender).await
            }
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
        conn: &mut PgConnection,
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

/// One kind of export: its header, and its rows read a batch at a time, each as CSV fields.
trait Table {
    type Row;
    const HEADER: &'static [&'static str];
    /// The batch after the last one read; empty once every row was read.
    async fn next_batch(&mut self, conn: &mut PgConnection) -> sqlx::Result<Vec<Self::Row>>;
    async fn fields(
        &mut self,
        conn: &mut PgConnection,
        row: &Self::Row,
    ) -> sqlx::Result<Vec<String>>;
}

/// Writes `table` batch after batch, each sent as it is written, until the rows or the client
/// are gone.
async fn write<T: Table>(pool: &Pool, mut table: T, sender: &Sender) -> anyhow::Result<()> {
    let mut writer = batch_writer();
    writer.write_record(T::HEADER)?;
    loop {
        let mut conn = pool.acquire().await?;
        let batch = table.next_batch(&mut conn).await?;
        for row in &batch {
            writer.write_record(table.fields(&mut conn, row).await?)?;
        }
        if !flush(&mut writer, sender).await? || batch.is_empty() {
            return Ok(());
        }
    }
}

/// The merchant's intents created in the range, oldest first.
struct Payments {
    merchant: MerchantId,
    range: Range,
    after: Option<Cursor>,
    finished: bool,
    decimals: Decimals,
}

impl Table for Payments {
    type Row = PaymentIntent;
    const HEADER: &'static [&'static str] = &[
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
    ];

    async fn next_batch(&mut self, conn: &mut PgConnection) -> sqlx::Result<Vec<PaymentIntent>> {
        if self.finished {
            return Ok(Vec::new());
        }
        let (from, to) = (self.range.start(), self.range.end());
        let batch =
            repo::created_between(conn, &self.merchant, from, to, self.after.as_ref(), BATCH)
                .await?;
        // A short batch is the last: no statement is spent to learn that nothing follows.
        self.finished = (batch.len() as i64) < BATCH;
        self.after = batch.last().map(|i| Cursor {
            created_at: i.created_at,
            id: i.id.clone(),
        });
        Ok(batch)
    }

    async fn fields(
        &mut self,
        conn: &mut PgConnection,
        intent: &PaymentIntent,
    ) -> sqlx::Result<Vec<String>> {
        // An order not yet paid has a price in its currency, not base units of a token.
        let (amount, base_units) = match (&intent.chain, &intent.token, intent.currency) {
            (Some(chain), Some(token), None) => {
                let d = self.decimals.of(conn, chain, token).await?;
                (units(&intent.amount, d), intent.amount.clone())
            }
            _ => (intent.amount.clone(), String::new()),
        };
        let settlement = intent.settlement.as_ref().map(|s| &s.0);
        let text = |value: Option<&str>| value.unwrap_or("").to_owned();
        Ok(vec![
            intent.id.clone(),
            rfc3339(intent.created_at),
            intent.state.as_str().to_owned(),
            text(intent.chain.as_deref()),
            text(intent.token.as_deref()),
            amount,
            base_units,
            text(intent.currency.map(|c| c.as_str())),
            text(intent.payment_method.map(|m| m.as_str())),
            text(intent.payer.as_deref()),
            text(intent.deposit_address.as_deref()),
            intent.amount_refunded.clone(),
            text(settlement.map(|s| s.transaction_hash.as_str())),
            settlement
                .map(|s| s.block_number.to_string())
                .unwrap_or_default(),
        ])
    }
}

/// The postings of the merchant's ledger entries booked in the range, entry by entry.
struct Postings {
    merchant: MerchantId,
    range: Range,
    after: i64,
    decimals: Decimals,
}

impl Table for Postings {
    type Row = ExportedPosting;
    const HEADER: &'static [&'static str] = &[
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
    ];

    async fn next_batch(&mut self, conn: &mut PgConnection) -> sqlx::Result<Vec<ExportedPosting>> {
        let (from, to) = (self.range.start(), self.range.end());
        // Limited by entries, not postings, so an entry's postings are never split.
        let merchant = self.merchant.as_str();
        let batch = ledger::postings_between(conn, merchant, from, to, self.after, BATCH).await?;
        if let Some(last) = batch.last() {
            self.after = last.entry_id;
        }
        Ok(batch)
    }

    async fn fields(
        &mut self,
        conn: &mut PgConnection,
        posting: &ExportedPosting,
    ) -> sqlx::Result<Vec<String>> {
        let d = self
            .decimals
            .of(conn, &posting.chain, &posting.token)
            .await?;
        Ok(vec![
            posting.entry_id.to_string(),
            rfc3339(posting.created_at),
            posting.kind.clone(),
            posting.intent_id.clone(),
            posting.refund_id.clone().unwrap_or_default(),
            posting.chain.clone(),
            posting.transaction_hash.clone(),
            posting.log_index.to_string(),
            posting.account.clone(),
            posting.token.clone(),
            units(&posting.amount, d),
            posting.amount.clone(),
        ])
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
