//! Reads the whole client history and the database after the run and checks the promise:
//! one key, one execution, one answer.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    time::Duration,
};

use sqlx::PgPool;

use crate::{
    client::{Exchange, OpKind, Outcome, Unresolved},
    faults::{Fault, FaultKind},
};

/// One invariant's line of the verdict: what it says, how many cases it checked, how many broke it.
pub struct Row {
    name: &'static str,
    checked: u64,
    violations: u64,
}

pub fn row(name: &'static str, checked: usize, violations: usize) -> Row {
    Row {
        name,
        checked: checked as u64,
        violations: violations as u64,
    }
}

pub struct Verdict {
    rows: Vec<Row>,
}

impl Verdict {
    /// Adds the rows of checks made elsewhere (the orders').
    pub fn extend(&mut self, rows: Vec<Row>) {
        self.rows.extend(rows);
    }

    pub fn held(&self) -> bool {
        self.rows.iter().all(|row| row.violations == 0)
    }

    pub fn print(&self) {
        println!(
            "\n{:<62} {:>9} {:>10}",
            "invariant", "checked", "violations"
        );
        for row in &self.rows {
            let mark = if row.violations == 0 { "ok" } else { "FAILED" };
            println!(
                "{:<62} {:>9} {:>10}  {mark}",
                row.name, row.checked, row.violations
            );
        }
    }
}

pub struct Inputs<'a> {
    pub history: &'a [Exchange],
    pub unresolved: &'a [Unresolved],
    pub faults: &'a [Fault],
    pub readiness: &'a [(Duration, usize, u16)],
    pub replica_pids: &'a [Vec<u32>],
    /// How long after a database fault a 503 is still fair (pools reconnecting).
    pub grace: Duration,
    /// (merchant, event id) of every event the webhook receiver acknowledged.
    pub webhooks_received: &'a HashSet<(String, String)>,
    pub chain_url: &'a str,
    pub confirmations: u64,
    /// Every `/x402/settle` answer the x402 payers got.
    pub x402_answers: &'a [crate::x402::X402Answer],
}

/// An intent's state as the checker needs it.
#[derive(sqlx::FromRow)]
struct IntentRow {
    merchant_id: String,
    id: String,
    state: String,
    version: i32,
    cancellation_reason: Option<String>,
    failure_reason: Option<String>,
    transitions: i64,
    token: String,
    /// Its payer's address; empty for a deposit intent, which anyone pays.
    payer: String,
    payee: String,
    amount: String,
    /// The transaction that paid it, if one did.
    settled_by: Option<String>,
    /// The nonce its authorization carries (an x402 payer's own, or derived from its id).
    nonce: Option<Vec<u8>>,
    /// `authorization` or `deposit_address`.
    payment_method: String,
    deposit_address: Option<String>,
    amount_received: String,
    amount_overpaid: String,
}

impl IntentRow {
    fn by_authorization(&self) -> bool {
        self.payment_method == "authorization"
    }

    fn by_deposit(&self) -> bool {
        self.payment_method == "deposit_address"
    }
}

/// A refund as the checker needs it.
#[derive(sqlx::FromRow)]
struct RefundRow {
    merchant_id: String,
    id: String,
    intent_id: String,
    state: String,
    version: i32,
    amount: String,
    token: String,
    payee: String,
    payer: String,
    settled_by: Option<String>,
}

struct KeyRecord {
    state: String,
    status: Option<i16>,
    body: Option<Vec<u8>>,
}

/// What the database holds after the run, keyed by (merchant, intent id) and (scope, key).
struct Stored {
    intents: HashMap<(String, String), IntentRow>,
    /// (merchant, order) -> its version: orders, whose own checks are `orders::check`.
    orders: HashMap<(String, String), i32>,
    refunds: Vec<RefundRow>,
    /// (merchant, intent) -> its `amount_refunded`.
    amounts_refunded: HashMap<(String, String), String>,
    records: HashMap<(String, String), KeyRecord>,
    /// (merchant, event id, subject, subject version, type) of every event.
    events: Vec<(String, String, String, i32, String)>,
    /// (chain, transaction hash, log index) -> (merchant, intent, postings, their sum) per entry.
    ledger: HashMap<LedgerKey, LedgerEntry>,
    chain: ChainFacts,
    /// x402 payments by nonce (hex): (merchant, intent).
    x402: HashMap<String, (String, String)>,
    /// (transaction, log index) -> (kind, intent, the deposit address's posting, the other
    /// posting's account) of every deposit and sweep entry.
    deposit_ledger: HashMap<(String, i32), (String, String, String, String)>,
    /// (transaction, log index) of every applied deposit observation, with its kind.
    deposit_observations: HashMap<(String, i32), String>,
}

/// (chain, transaction hash, log index) of a ledger entry.
type LedgerKey = (String, String, i32);
/// (merchant, intent, number of postings, their sum, kind, refund) of a ledger entry.
type LedgerEntry = (String, String, i64, String, String, Option<String>);
/// (token, from, to, value) of a `Transfer` log.
type Transfer = (String, String, String, String);

/// What the chain says, read after the run: the receipt of every transaction that settled an
/// intent, and every confirmed use of an intent's nonce.
#[derive(Default)]
struct ChainFacts {
    /// Transaction hash -> (mined successfully in a confirmed canonical block, its transfers as
    /// (token, from, to, value)).
    receipts: HashMap<String, (bool, Vec<Transfer>)>,
    /// Confirmed `AuthorizationUsed` logs of an intent's nonce by its payer: (merchant, intent,
    /// transaction, log index, whether the next transfer pays the intent exactly).
    nonce_uses: Vec<(String, String, String, i32, bool)>,
    /// Confirmed `AuthorizationCanceled` logs of an intent's nonce by its payer: (merchant,
    /// intent, transaction).
    cancellations: Vec<(String, String, String)>,
    /// Confirmed `AuthorizationUsed` logs of a refund's nonce by its merchant address: (refund,
    /// transaction, whether the next transfer pays the refund exactly).
    refund_uses: Vec<(String, String, bool)>,
    /// Confirmed `Transfer`s into or out of a deposit address.
    deposit_transfers: Vec<DepositTransfer>,
    /// What each (deposit address, token) holds on chain at the end.
    deposit_balances: HashMap<(String, String), String>,
}

/// A confirmed `Transfer` into (`into`) or out of a deposit address.
struct DepositTransfer {
    transaction: String,
    log_index: i32,
    merchant: String,
    intent: String,
    address: String,
    token: String,
    counterparty: String,
    value: String,
    into: bool,
}

impl Stored {
    async fn load(pool: &PgPool, inputs: &Inputs<'_>) -> anyhow::Result<Self> {
        // One snapshot for every table: a block confirmed while the checker reads must not part
        // an intent from its events or its ledger entries.
        let mut tx = pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        let intents: HashMap<(String, String), IntentRow> = sqlx::query_as::<_, IntentRow>(
            "SELECT p.merchant_id, p.id, p.state, p.version, p.cancellation_reason, p.failure_reason, \
                    (SELECT count(*) FROM payment_intent_transitions t WHERE t.merchant_id = p.merchant_id AND t.intent_id = p.id) AS transitions, \
                    p.token, COALESCE(p.payer, '') AS payer, p.payee, p.amount::text AS amount, \
                    p.settlement->>'transaction_hash' AS settled_by, p.chain_nonce AS nonce, p.payment_method, \
                    p.deposit_address, p.amount_received::text AS amount_received, p.amount_overpaid::text AS amount_overpaid \
               FROM payment_intents p WHERE p.currency IS NULL",
        )
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(|row| ((row.merchant_id.clone(), row.id.clone()), row))
        .collect();
        // Orders are checked by `orders::check`; here only their keys and events.
        let orders = sqlx::query_as::<_, (String, String, i32)>(
            "SELECT merchant_id, id, version FROM payment_intents WHERE currency IS NOT NULL",
        )
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(|(merchant, id, version)| ((merchant, id), version))
        .collect();
        let records = sqlx::query_as::<_, (String, String, String, Option<i16>, Option<Vec<u8>>)>(
            "SELECT scope, key, state, response_status, response_body FROM idempotency_keys",
        )
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(|(scope, key, state, status, body)| {
            let record = KeyRecord {
                state,
                status,
                body,
            };
            ((scope, key), record)
        })
        .collect();
        let events = sqlx::query_as::<_, (String, String, String, i32, String)>(
            "SELECT merchant_id, id, subject_id, subject_version, type FROM events",
        )
        .fetch_all(&mut *tx)
        .await?;
        type RawEntry = (
            String,
            String,
            i32,
            String,
            String,
            i64,
            String,
            String,
            Option<String>,
        );
        let ledger = sqlx::query_as::<_, RawEntry>(
            "SELECT e.chain, e.transaction_hash, e.log_index, e.merchant_id, e.intent_id, \
                    count(p.*), coalesce(sum(p.amount), 0)::text, e.kind, e.refund_id \
               FROM ledger_entries e LEFT JOIN ledger_postings p ON p.entry_id = e.id \
              GROUP BY e.id",
        )
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(
            |(chain, tx, log, merchant, intent, postings, sum, kind, refund)| {
                (
                    (chain, tx, log),
                    (merchant, intent, postings, sum, kind, refund),
                )
            },
        )
        .collect();
        let refunds = sqlx::query_as::<_, RefundRow>(
            "SELECT merchant_id, id, intent_id, state, version, amount::text AS amount, token, payee, payer, \
                    settlement->>'transaction_hash' AS settled_by FROM refunds",
        )
        .fetch_all(&mut *tx)
        .await?;
        let amounts_refunded = sqlx::query_as::<_, (String, String, String)>(
            "SELECT merchant_id, id, amount_refunded::text FROM payment_intents",
        )
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(|(merchant, id, amount)| ((merchant, id), amount))
        .collect();
        let chain =
            ChainFacts::load(&intents, &refunds, inputs.chain_url, inputs.confirmations).await?;
        let x402 = sqlx::query_as::<_, (Vec<u8>, String, String)>(
            "SELECT nonce, merchant_id, intent_id FROM x402_payments",
        )
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(|(nonce, merchant, intent)| (format!("0x{}", hex::encode(nonce)), (merchant, intent)))
        .collect();
        let deposit_ledger = sqlx::query_as::<_, (String, i32, String, String, String, String)>(
            "SELECT e.transaction_hash, e.log_index, e.kind, e.intent_id, d.amount::text, o.account \
               FROM ledger_entries e \
               JOIN ledger_postings d ON d.entry_id = e.id AND d.account LIKE 'deposit:%' \
               JOIN ledger_postings o ON o.entry_id = e.id AND o.account NOT LIKE 'deposit:%' \
               JOIN payment_intents p ON p.merchant_id = e.merchant_id AND p.id = e.intent_id \
              WHERE e.kind IN ('deposit', 'sweep') AND p.currency IS NULL",
        )
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(|(tx, log, kind, intent, amount, other)| ((tx, log), (kind, intent, amount, other)))
        .collect();
        let deposit_observations = sqlx::query_as::<_, (String, i32, String)>(
            "SELECT transaction_hash, log_index, kind FROM chain_observations \
              WHERE kind IN ('deposit_received', 'deposit_swept') AND applied_at IS NOT NULL",
        )
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(|(tx, log, kind)| ((tx, log), kind))
        .collect();
        tx.commit().await?;
        Ok(Self {
            orders,
            deposit_ledger,
            deposit_observations,
            x402,
            intents,
            refunds,
            amounts_refunded,
            records,
            events,
            ledger,
            chain,
        })
    }

    /// The intent a key's stored response names, if it exists.
    fn intent_of(&self, scope: &str, key: &str) -> Option<&IntentRow> {
        let record = self.records.get(&(scope.to_owned(), key.to_owned()))?;
        let id = body_id(record.body.as_deref())?;
        self.intents.get(&(scope.to_owned(), id))
    }
}

type Invariant = fn(&Stored, &Inputs) -> Row;

/// Every invariant, in the order the verdict prints them.
const INVARIANTS: [Invariant; 25] = [
    one_key_per_intent,
    one_intent_per_successful_key,
    identical_answers_per_key,
    seen_intents_exist_as_answered,
    nothing_left_in_flight,
    every_operation_answered,
    no_500_for_valid_requests,
    unavailable_only_when_impaired,
    answers_carry_their_own_amount,
    reuse_is_rejected,
    replicas_survive_database_restarts,
    each_intent_moved_at_most_once,
    one_event_per_state_change,
    every_event_delivered,
    paid_only_by_a_confirmed_exact_transfer,
    every_confirmed_payment_reflected_once,
    every_confirmed_cancellation_fails_its_intent,
    ledger_sums_to_zero,
    late_payments_are_recorded,
    refunds_stay_within_their_payment,
    every_refund_reflected_once,
    x402_one_success_per_payment,
    every_confirmed_deposit_booked_once,
    deposit_intents_paid_by_what_arrived,
    every_deposit_swept_to_its_merchant,
];

/// Reads the database and checks every invariant against it and the run's history.
pub async fn check(pool: &PgPool, inputs: Inputs<'_>) -> anyhow::Result<Verdict> {
    let stored = Stored::load(pool, &inputs).await?;
    let rows = INVARIANTS
        .iter()
        .map(|invariant| invariant(&stored, &inputs))
        .collect();
    Ok(Verdict { rows })
}

fn creates(history: &[Exchange]) -> impl Iterator<Item = &Exchange> {
    history
        .iter()
        .filter(|e| matches!(e.kind, OpKind::Create | OpKind::HotCreate))
}

/// No duplicate execution: every intent was created by exactly one key's stored 201.
fn one_key_per_intent(stored: &Stored, _: &Inputs) -> Row {
    let mut created_by: HashMap<(String, String), usize> = HashMap::new();
    for ((scope, _), record) in &stored.records {
        if record.status == Some(201)
            && let Some(id) = body_id(record.body.as_deref())
            && id.starts_with("pi_")
        {
            *created_by.entry((scope.clone(), id)).or_default() += 1;
        }
    }
    // An x402 payment's intent belongs to its payment (checked by `x402_one_success_per_payment`).
    let x402: HashSet<&(String, String)> = stored.x402.values().collect();
    let orphans = stored
        .intents
        .keys()
        .chain(stored.orders.keys())
        .filter(|k| !created_by.contains_key(*k) && !x402.contains(k))
        .count();
    let shared_or_missing = created_by
        .iter()
        .filter(|(k, n)| {
            **n > 1 || !(stored.intents.contains_key(*k) || stored.orders.contains_key(*k))
        })
        .count();
    row(
        "every intent belongs to exactly one key (no duplicate execution)",
        stored.intents.len() + stored.orders.len(),
        orphans + shared_or_missing,
    )
}

fn one_intent_per_successful_key(stored: &Stored, inputs: &Inputs) -> Row {
    let keys_with_2xx: HashSet<(&str, &str)> = creates(inputs.history)
        .filter(|e| {
            matches!(
                e.outcome,
                Outcome::Answer {
                    status: 200..=299,
                    ..
                }
            )
        })
        .filter_map(|e| Some((e.scope, e.key.as_deref()?)))
        .collect();
    let without_intent = keys_with_2xx
        .iter()
        .filter(|(scope, key)| stored.intent_of(scope, key).is_none())
        .count();
    row(
        "every key that got a 2xx has exactly one intent",
        keys_with_2xx.len(),
        without_intent,
    )
}

fn identical_answers_per_key(_: &Stored, inputs: &Inputs) -> Row {
    let mut answers: HashMap<(&str, &str, bool), HashSet<&[u8]>> = HashMap::new();
    let mut answers_2xx = 0;
    for e in inputs.history {
        if let (
            Outcome::Answer {
                status: 200..=299,
                body,
                ..
            },
            Some(key),
        ) = (&e.outcome, &e.key)
        {
            answers_2xx += 1;
            answers
                .entry((e.scope, key.as_str(), e.kind == OpKind::Cancel))
                .or_default()
                .insert(body.as_slice());
        }
    }
    let diverging = answers.values().filter(|bodies| bodies.len() > 1).count();
    row(
        "all 2xx answers for one key are byte-identical",
        answers_2xx,
        diverging,
    )
}

fn seen_intents_exist_as_answered(stored: &Stored, inputs: &Inputs) -> Row {
    let mut seen = 0;
    let mut wrong = 0;
    for e in inputs.history {
        let Outcome::Answer {
            status,
            error,
            body,
            ..
        } = &e.outcome
        else {
            continue;
        };
        let target = || {
            let id = e.target.as_ref()?;
            stored.intents.get(&(e.scope.to_owned(), id.clone()))
        };
        let consistent = match (e.kind, *status) {
            (OpKind::Create | OpKind::HotCreate, 201) => body_id(Some(body))
                .is_some_and(|id| stored.intents.contains_key(&(e.scope.to_owned(), id))),
            (OpKind::Cancel, 200) => target().is_some_and(|intent| {
                intent.state == "canceled"
                    && intent.cancellation_reason.as_deref() == Some("merchant_request")
            }),
            (OpKind::Cancel, 409) if error.as_deref() == Some("invalid_state_transition") => {
                target().is_some_and(|intent| intent.state != "created")
            }
            (OpKind::Read, 200) => true,
            (OpKind::Read | OpKind::Cancel, 404) => false,
            _ => continue,
        };
        seen += 1;
        if !consistent {
            wrong += 1;
        }
    }
    row(
        "every intent id seen exists, in the state the answer implies",
        seen,
        wrong,
    )
}

/// Nothing left in flight once leases and timeouts have passed after recovery.
fn nothing_left_in_flight(stored: &Stored, _: &Inputs) -> Row {
    let in_flight = stored
        .records
        .values()
        .filter(|r| r.state == "in_flight")
        .count();
    row(
        "no record left in_flight after recovery",
        stored.records.len(),
        in_flight,
    )
}

fn every_operation_answered(_: &Stored, inputs: &Inputs) -> Row {
    row(
        "every operation reached a final answer",
        inputs.history.len() + inputs.unresolved.len(),
        inputs.unresolved.len(),
    )
}

fn answered<'a>(inputs: &'a Inputs) -> impl Iterator<Item = &'a Exchange> {
    inputs
        .history
        .iter()
        .filter(|e| matches!(e.outcome, Outcome::Answer { .. }))
}

fn no_500_for_valid_requests(_: &Stored, inputs: &Inputs) -> Row {
    let fives = answered(inputs)
        .filter(|e| status_of(e) == Some(500))
        .count();
    row(
        "valid requests never got a 500",
        answered(inputs).count(),
        fives,
    )
}

/// 503 only while the database was unreachable or stalled, or from a replica that was itself
/// paused during the request.
fn unavailable_only_when_impaired(_: &Stored, inputs: &Inputs) -> Row {
    let unavailable: Vec<&Exchange> = answered(inputs)
        .filter(|e| status_of(e) == Some(503))
        .collect();
    let unexplained = unavailable
        .iter()
        .filter(|e| {
            !inputs.faults.iter().any(|f| {
                let window_end = f.ended + inputs.grace;
                let overlaps = e.started <= window_end && e.ended >= f.started;
                overlaps && (f.kind.impairs_database() || f.replica == Some(e.replica))
            })
        })
        .count();
    row(
        "503 only while the database (or that replica) was impaired",
        unavailable.len(),
        unexplained,
    )
}

/// Each answer belongs to the body that was sent.
fn answers_carry_their_own_amount(_: &Stored, inputs: &Inputs) -> Row {
    let mut create_answers = 0;
    let mut foreign = 0;
    for e in creates(inputs.history) {
        if let Outcome::Answer {
            status: 201, body, ..
        } = &e.outcome
        {
            create_answers += 1;
            let amount = serde_json::from_slice::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v.get("amount").and_then(|a| a.as_str()).map(str::to_owned));
            if amount.as_deref() != Some(e.amount.as_str()) {
                foreign += 1;
            }
        }
    }
    row(
        "every 201 carries the amount its own request sent",
        create_answers,
        foreign,
    )
}

/// A key reused with a different body got 422, every time.
fn reuse_is_rejected(_: &Stored, inputs: &Inputs) -> Row {
    let reuse: Vec<&Exchange> = inputs
        .history
        .iter()
        .filter(|e| e.kind == OpKind::Reuse)
        .collect();
    let bad_reuse = reuse
        .iter()
        .filter(|e| match &e.outcome {
            Outcome::Answer { status, .. } => !matches!(status, 409 | 422 | 503),
            Outcome::NoAnswer => false,
        })
        .count();
    row(
        "different-body reuse got 422, never the other body's answer",
        reuse.len(),
        bad_reuse,
    )
}

/// Replicas ride out database restarts: not restarted (except by the injector), ready after.
fn replicas_survive_database_restarts(_: &Stored, inputs: &Inputs) -> Row {
    let kills: BTreeMap<usize, usize> = inputs
        .faults
        .iter()
        .filter(|f| {
            matches!(
                f.kind,
                FaultKind::KillReplica
                    | FaultKind::KillRelayer
                    | FaultKind::RelayerCrashedAfterBroadcast
            )
        })
        .filter_map(|f| f.replica)
        .fold(BTreeMap::new(), |mut acc, replica| {
            *acc.entry(replica).or_default() += 1;
            acc
        });
    let unexpected_restarts = inputs
        .replica_pids
        .iter()
        .enumerate()
        .filter(|(i, pids)| pids.len() != 1 + kills.get(i).copied().unwrap_or(0))
        .count();
    let restarts: Vec<&Fault> = inputs
        .faults
        .iter()
        .filter(|f| f.kind == FaultKind::RestartPostgres)
        .collect();
    let mut not_recovered = 0;
    for restart in &restarts {
        for replica in 0..inputs.replica_pids.len() {
            // A sample is stamped when its answer arrives, up to the probe's own 2 s after the window.
            let window_end = restart.ended + Duration::from_secs(3);
            let during = inputs.readiness.iter().any(|(t, r, s)| {
                *r == replica && *t >= restart.started && *t <= window_end && *s == 503
            });
            let after = inputs
                .readiness
                .iter()
                .any(|(t, r, s)| *r == replica && *t > window_end && *s == 200);
            let disturbed = inputs.faults.iter().any(|f| {
                f.replica == Some(replica)
                    && f.started <= restart.ended + Duration::from_secs(1)
                    && f.ended >= restart.started
            });
            if !(disturbed || (during && after)) {
                not_recovered += 1;
                let seen: Vec<String> = inputs
                    .readiness
                    .iter()
                    .filter(|(t, r, _)| {
                        *r == replica
                            && *t + Duration::from_secs(2) >= restart.started
                            && *t <= window_end + Duration::from_secs(5)
                    })
                    .map(|(t, _, s)| format!("{:.1}s:{s}", t.as_secs_f64()))
                    .collect();
                eprintln!(
                    "checker: replica {replica} around the restart at {:.1}s–{:.1}s (503 seen: {during}, 200 after: {after}): {}",
                    restart.started.as_secs_f64(),
                    restart.ended.as_secs_f64(),
                    seen.join(" ")
                );
            }
        }
    }
    row(
        "replicas survive database restarts (/readyz 503, then 200)",
        inputs.replica_pids.len() * restarts.len().max(1),
        unexpected_restarts + not_recovered,
    )
}

/// Sweepers, cancels, confirms and the chain: each state change happened once (one transition per
/// version) and each state carries what it must.
fn each_intent_moved_at_most_once(stored: &Stored, _: &Inputs) -> Row {
    let broken = stored
        .intents
        .values()
        .filter(|intent| {
            let counted = i64::from(intent.version) == intent.transitions + 1;
            let complete = match intent.state.as_str() {
                // A deposit intent paid in part stays created, one change per part.
                "created" => intent.version == 1 || !intent.by_authorization(),
                "processing" => intent.version == 2,
                "canceled" => intent.cancellation_reason.is_some(),
                "succeeded" => intent.settled_by.is_some(),
                "failed" => intent.failure_reason.is_some() && intent.settled_by.is_none(),
                _ => false,
            };
            !(counted && complete)
        })
        .count();
    row(
        "each change applied once (version = transitions + 1, reasons set)",
        stored.intents.len(),
        broken,
    )
}

/// Every version of every intent (its creation and each change) has exactly one event, and no
/// event describes a change that did not commit.
fn one_event_per_state_change(stored: &Stored, _: &Inputs) -> Row {
    let mut versions: HashMap<(&str, &str), Vec<i32>> = HashMap::new();
    for (merchant, _, subject, version, _) in &stored.events {
        versions
            .entry((merchant, subject))
            .or_default()
            .push(*version);
    }
    let refund_versions: HashMap<(&str, &str), i32> = stored
        .refunds
        .iter()
        .map(|r| ((r.merchant_id.as_str(), r.id.as_str()), r.version))
        .collect();
    let mut wrong = versions
        .keys()
        .filter(|(merchant, subject)| {
            let key = (merchant.to_string(), subject.to_string());
            !stored.intents.contains_key(&key)
                && !stored.orders.contains_key(&key)
                && !refund_versions.contains_key(&(*merchant, *subject))
        })
        .count();
    for ((merchant, id), version) in &stored.orders {
        let mut seen = versions
            .get(&(merchant.as_str(), id.as_str()))
            .cloned()
            .unwrap_or_default();
        seen.sort_unstable();
        if seen != (1..=*version).collect::<Vec<_>>() {
            eprintln!(
                "checker: order {merchant}/{id} is at version {version} with events of versions {seen:?}"
            );
            wrong += 1;
        }
    }
    for (subject, version) in &refund_versions {
        let mut seen = versions.get(subject).cloned().unwrap_or_default();
        seen.sort_unstable();
        if seen != (1..=*version).collect::<Vec<_>>() {
            wrong += 1;
        }
    }
    for ((merchant, id), intent) in &stored.intents {
        let mut seen = versions
            .get(&(merchant.as_str(), id.as_str()))
            .cloned()
            .unwrap_or_default();
        seen.sort_unstable();
        if seen != (1..=intent.version).collect::<Vec<_>>() {
            eprintln!(
                "checker: {merchant}/{id} ({}, {}) is at version {} with events of versions {seen:?}",
                intent.payment_method, intent.state, intent.version
            );
            wrong += 1;
        }
    }
    row(
        "every committed state change produced exactly one event",
        stored.intents.len() + stored.orders.len() + stored.refunds.len(),
        wrong,
    )
}

/// Each merchant's endpoint subscribes to every type: it acknowledged every event of its merchant.
fn every_event_delivered(stored: &Stored, inputs: &Inputs) -> Row {
    let undelivered = stored
        .events
        .iter()
        .filter(|(merchant, id, ..)| {
            !inputs
                .webhooks_received
                .contains(&(merchant.clone(), id.clone()))
        })
        .count();
    row(
        "every event was delivered at least once to its endpoint",
        stored.events.len(),
        undelivered,
    )
}

fn status_of(e: &Exchange) -> Option<u16> {
    match &e.outcome {
        Outcome::Answer { status, .. } => Some(*status),
        Outcome::NoAnswer => None,
    }
}

fn body_id(body: Option<&[u8]>) -> Option<String> {
    serde_json::from_slice::<serde_json::Value>(body?)
        .ok()?
        .get("id")?
        .as_str()
        .map(str::to_owned)
}

impl ChainFacts {
    async fn load(
        intents: &HashMap<(String, String), IntentRow>,
        refunds: &[RefundRow],
        chain_url: &str,
        confirmations: u64,
    ) -> anyhow::Result<Self> {
        use alloy::{
            primitives::B256,
            providers::{Provider, ProviderBuilder},
            rpc::types::Filter,
            sol_types::SolEvent,
        };
        use payments_api::rails::evm::token::Eip3009;
        let node = ProviderBuilder::new().connect_http(chain_url.parse()?);
        let head = node.get_block_number().await?;
        let confirmed = (head + 1).saturating_sub(confirmations);
        let transfers_of =
            |logs: &[alloy::rpc::types::Log]| -> Vec<(String, String, String, String, u64)> {
                logs.iter()
                    .filter_map(|l| {
                        let t = Eip3009::Transfer::decode_log_data(l.data()).ok()?;
                        Some((
                            l.address().to_checksum(None),
                            t.from.to_checksum(None),
                            t.to.to_checksum(None),
                            t.value.to_string(),
                            l.log_index?,
                        ))
                    })
                    .collect()
            };
        let mut facts = ChainFacts::default();
        let settled_by = intents
            .values()
            .filter_map(|i| i.settled_by.as_ref())
            .chain(refunds.iter().filter_map(|r| r.settled_by.as_ref()));
        for tx in settled_by {
            let hash: B256 = tx.parse()?;
            let receipt = node.get_transaction_receipt(hash).await?;
            let entry = match receipt {
                None => (false, Vec::new()),
                Some(receipt) => {
                    let number = receipt.block_number.unwrap_or(u64::MAX);
                    let canonical = node
                        .get_block_by_number(number.into())
                        .await?
                        .is_some_and(|b| Some(b.header.hash) == receipt.block_hash);
                    let ok = receipt.status() && canonical && number <= confirmed;
                    let transfers = transfers_of(receipt.inner.logs());
                    (
                        ok,
                        transfers
                            .into_iter()
                            .map(|(a, f, t, v, _)| (a, f, t, v))
                            .collect(),
                    )
                }
            };
            facts.receipts.insert(tx.clone(), entry);
        }
        let by_nonce: HashMap<[u8; 32], (&(String, String), &IntentRow)> = intents
            .iter()
            .filter_map(|(key, intent)| {
                Some((intent.nonce.as_deref()?.try_into().ok()?, (key, intent)))
            })
            .collect();
        let uses = node
            .get_logs(
                &Filter::new()
                    .from_block(0)
                    .to_block(confirmed)
                    .event_signature(Eip3009::AuthorizationUsed::SIGNATURE_HASH),
            )
            .await?;
        let refunds_by_nonce: HashMap<[u8; 32], &RefundRow> = refunds
            .iter()
            .map(|r| {
                (
                    payments_api::ways_to_pay::refunds::domain::chain_nonce(&r.id),
                    r,
                )
            })
            .collect();
        for log in uses {
            let Ok(used) = Eip3009::AuthorizationUsed::decode_log_data(log.data()) else {
                continue;
            };
            if let Some(refund) = refunds_by_nonce.get(&used.nonce.0) {
                let (Some(tx), Some(index)) = (log.transaction_hash, log.log_index) else {
                    continue;
                };
                if used.authorizer.to_checksum(None) != refund.payee
                    || log.address().to_checksum(None) != refund.token
                {
                    continue;
                }
                let Some(receipt) = node.get_transaction_receipt(tx).await? else {
                    continue;
                };
                let pays = transfers_of(receipt.inner.logs())
                    .into_iter()
                    .filter(|(token, .., at)| *token == refund.token && *at > index)
                    .min_by_key(|(.., at)| *at)
                    .is_some_and(|(_, from, to, value, _)| {
                        from == refund.payee && to == refund.payer && value == refund.amount
                    });
                facts
                    .refund_uses
                    .push((refund.id.clone(), tx.to_string(), pays));
                continue;
            }
            let Some(((merchant, id), intent)) = by_nonce.get(&used.nonce.0) else {
                continue;
            };
            if used.authorizer.to_checksum(None) != intent.payer
                || log.address().to_checksum(None) != intent.token
            {
                continue;
            }
            let (Some(tx), Some(index)) = (log.transaction_hash, log.log_index) else {
                continue;
            };
            let Some(receipt) = node.get_transaction_receipt(tx).await? else {
                continue;
            };
            let pays = transfers_of(receipt.inner.logs())
                .into_iter()
                .filter(|(token, .., at)| *token == intent.token && *at > index)
                .min_by_key(|(.., at)| *at)
                .is_some_and(|(_, from, to, value, _)| {
                    from == intent.payer && to == intent.payee && value == intent.amount
                });
            facts.nonce_uses.push((
                merchant.clone(),
                id.clone(),
                tx.to_string(),
                index as i32,
                pays,
            ));
        }
        // Permit2 logs no nonce it spends: a permit's use is x402's proxy's `Settled()`, its
        // nonce in the call that logged it, its payment the transfer just before.
        use payments_api::rails::evm::permit2::{
            ProxyPermit, X402_EXACT_PROXY, X402_UPTO_PROXY, settled_topics,
        };
        let settled = node
            .get_logs(
                &Filter::new()
                    .from_block(0)
                    .to_block(confirmed)
                    .address(vec![X402_EXACT_PROXY, X402_UPTO_PROXY])
                    .event_signature(settled_topics().to_vec()),
            )
            .await?;
        for log in settled {
            use alloy::consensus::Transaction as _;
            let (Some(tx), Some(index)) = (log.transaction_hash, log.log_index) else {
                continue;
            };
            let Some(sent) = node.get_transaction_by_hash(tx).await? else {
                continue;
            };
            let Some((permit, _)) =
                ProxyPermit::of_settle_calldata(31337, log.address(), sent.input())
            else {
                continue;
            };
            let Some(((merchant, id), intent)) = by_nonce.get(&B256::from(permit.nonce).0) else {
                continue;
            };
            if permit.owner.to_checksum(None) != intent.payer
                || permit.token.to_checksum(None) != intent.token
            {
                continue;
            }
            let Some(receipt) = node.get_transaction_receipt(tx).await? else {
                continue;
            };
            let pays = transfers_of(receipt.inner.logs())
                .into_iter()
                .filter(|(token, .., at)| *token == intent.token && *at < index)
                .max_by_key(|(.., at)| *at)
                .is_some_and(|(_, from, to, value, _)| {
                    from == intent.payer && to == intent.payee && value == intent.amount
                });
            facts.nonce_uses.push((
                merchant.clone(),
                id.clone(),
                tx.to_string(),
                index as i32,
                pays,
            ));
        }
        let cancels = node
            .get_logs(
                &Filter::new()
                    .from_block(0)
                    .to_block(confirmed)
                    .event_signature(Eip3009::AuthorizationCanceled::SIGNATURE_HASH),
            )
            .await?;
        for log in cancels {
            let Ok(canceled) = Eip3009::AuthorizationCanceled::decode_log_data(log.data()) else {
                continue;
            };
            let Some(((merchant, id), intent)) = by_nonce.get(&canceled.nonce.0) else {
                continue;
            };
            if canceled.authorizer.to_checksum(None) != intent.payer
                || log.address().to_checksum(None) != intent.token
            {
                continue;
            }
            let Some(tx) = log.transaction_hash else {
                continue;
            };
            facts
                .cancellations
                .push((merchant.clone(), id.clone(), tx.to_string()));
        }
        facts.load_deposits(&node, intents, confirmed).await?;
        Ok(facts)
    }

    /// Every confirmed transfer of the two tokens into or out of a deposit address, and what
    /// each address holds now.
    async fn load_deposits(
        &mut self,
        node: &impl alloy::providers::Provider,
        intents: &HashMap<(String, String), IntentRow>,
        confirmed: u64,
    ) -> anyhow::Result<()> {
        use alloy::{primitives::Address, rpc::types::Filter, sol_types::SolEvent};
        use payments_api::rails::evm::token::{DevnetUSD, Eip3009};
        let by_address: HashMap<&str, &IntentRow> = intents
            .values()
            .filter_map(|i| Some((i.deposit_address.as_deref()?, i)))
            .collect();
        if by_address.is_empty() {
            return Ok(());
        }
        let tokens = [
            "0x5FbDB2315678afecb367f032d93F642f64180aa3",
            "0x0C8E79F3534B00D9a3D4a856B665Bf4eBC22f2ba",
        ];
        for token in tokens {
            let logs = node
                .get_logs(
                    &Filter::new()
                        .address(token.parse::<Address>()?)
                        .from_block(0)
                        .to_block(confirmed)
                        .event_signature(Eip3009::Transfer::SIGNATURE_HASH),
                )
                .await?;
            for log in logs {
                let (Some(tx), Some(index)) = (log.transaction_hash, log.log_index) else {
                    continue;
                };
                let Ok(t) = Eip3009::Transfer::decode_log_data(log.data()) else {
                    continue;
                };
                let (from, to) = (t.from.to_checksum(None), t.to.to_checksum(None));
                let (into, address, counterparty) =
                    match (by_address.get(to.as_str()), by_address.get(from.as_str())) {
                        (Some(_), _) => (true, to.clone(), from),
                        (None, Some(_)) => (false, from.clone(), to),
                        (None, None) => continue,
                    };
                let intent = by_address[address.as_str()];
                self.deposit_transfers.push(DepositTransfer {
                    transaction: tx.to_string(),
                    log_index: index as i32,
                    merchant: intent.merchant_id.clone(),
                    intent: intent.id.clone(),
                    address,
                    token: token.to_owned(),
                    counterparty,
                    value: t.value.to_string(),
                    into,
                });
            }
        }
        for address in by_address.keys() {
            for token in tokens {
                let held = DevnetUSD::new(token.parse()?, node)
                    .balanceOf(address.parse()?)
                    .call()
                    .await?;
                self.deposit_balances
                    .insert((address.to_string(), token.to_owned()), held.to_string());
            }
        }
        Ok(())
    }
}

/// No intent is paid (succeeded, or a late payment on a canceled one) without a confirmed,
/// canonical transaction that moved exactly its amount of its token from its payer to its merchant.
fn paid_only_by_a_confirmed_exact_transfer(stored: &Stored, _: &Inputs) -> Row {
    let paid: Vec<&IntentRow> = stored
        .intents
        .values()
        .filter(|i| i.settled_by.is_some() && !i.by_deposit())
        .collect();
    let unfounded = paid
        .iter()
        .filter(|intent| {
            let tx = intent.settled_by.as_ref().expect("filtered");
            !stored
                .chain
                .receipts
                .get(tx)
                .is_some_and(|(ok, transfers)| {
                    *ok && transfers.iter().any(|(token, from, to, value)| {
                        *token == intent.token
                            && *from == intent.payer
                            && *to == intent.payee
                            && *value == intent.amount
                    })
                })
        })
        .count();
    row(
        "paid only by a confirmed exact transfer to its merchant",
        paid.len(),
        unfounded,
    )
}

/// Every confirmed use of an intent's nonce is reflected exactly once: a payment as the intent's
/// settlement, one ledger entry and one event; any other use as `failed: nonce_used_otherwise`,
/// or not at all on an intent already canceled.
fn every_confirmed_payment_reflected_once(stored: &Stored, _: &Inputs) -> Row {
    let wrong = stored
        .chain
        .nonce_uses
        .iter()
        .filter(|(merchant, id, tx, index, pays)| {
            let Some(intent) = stored.intents.get(&(merchant.clone(), id.clone())) else {
                return true;
            };
            if !pays {
                // A canceled intent is final: a burn of its nonce leaves it as it is.
                let reflected = (intent.state == "failed"
                    && intent.failure_reason.as_deref() == Some("nonce_used_otherwise"))
                    || (intent.state == "canceled" && intent.settled_by.is_none());
                if !reflected {
                    eprintln!(
                        "checker: nonce burned by {tx}#{index} for {merchant}/{id}: intent {} ({:?})",
                        intent.state, intent.failure_reason
                    );
                }
                return !reflected;
            }
            let booked = stored
                .ledger
                .get(&("evm:31337".to_owned(), tx.clone(), *index))
                .is_some_and(|(m, i, ..)| m == merchant && i == id);
            let announced = stored
                .events
                .iter()
                .filter(|(m, _, subject, _, kind)| {
                    m == merchant
                        && subject == id
                        && matches!(
                            kind.as_str(),
                            "payment_intent.succeeded" | "payment_intent.paid_after_cancel"
                        )
                })
                .count();
            let reflected =
                intent.settled_by.as_deref() == Some(tx.as_str()) && booked && announced == 1;
            if !reflected {
                eprintln!(
                    "checker: payment {tx}#{index} of {merchant}/{id}: intent {} (settled by {:?}), booked {booked}, {announced} payment event(s)",
                    intent.state, intent.settled_by
                );
            }
            !reflected
        })
        .count();
    let payments = stored.chain.nonce_uses.iter().filter(|u| u.4).count();
    // An order's payment is `orders::check`'s.
    let extra_entries = stored
        .ledger
        .values()
        .filter(|e| e.4 == "payment" && !stored.orders.contains_key(&(e.0.clone(), e.1.clone())))
        .count()
        .saturating_sub(payments);
    row(
        "each confirmed nonce use reflected once: intent, ledger, event",
        stored.chain.nonce_uses.len(),
        wrong + extra_entries,
    )
}

/// Every confirmed cancellation of an intent's authorization by its payer failed the intent with
/// `authorization_canceled`, or found it canceled already (by its merchant, or expired), unpaid.
fn every_confirmed_cancellation_fails_its_intent(stored: &Stored, _: &Inputs) -> Row {
    let wrong = stored
        .chain
        .cancellations
        .iter()
        .filter(|(merchant, id, tx)| {
            let Some(intent) = stored.intents.get(&(merchant.clone(), id.clone())) else {
                return true;
            };
            let reflected = (intent.state == "failed"
                && intent.failure_reason.as_deref() == Some("authorization_canceled"))
                || (intent.state == "canceled" && intent.settled_by.is_none());
            if !reflected {
                eprintln!(
                    "checker: authorization canceled by {tx} for {merchant}/{id}: intent {} ({:?})",
                    intent.state, intent.failure_reason
                );
            }
            !reflected
        })
        .count();
    row(
        "each confirmed cancellation of an authorization fails its intent",
        stored.chain.cancellations.len(),
        wrong,
    )
}

/// Every ledger entry has its two postings and sums to zero.
fn ledger_sums_to_zero(stored: &Stored, _: &Inputs) -> Row {
    let unbalanced = stored
        .ledger
        .values()
        .filter(|(_, _, postings, sum, ..)| *postings != 2 || sum != "0")
        .count();
    row(
        "every ledger entry sums to zero (two postings)",
        stored.ledger.len(),
        unbalanced,
    )
}

/// An intent that is canceled yet paid carries the late-payment record (its event); a failed one
/// is never paid.
fn late_payments_are_recorded(stored: &Stored, _: &Inputs) -> Row {
    let late: Vec<(&(String, String), &IntentRow)> = stored
        .intents
        .iter()
        .filter(|(_, i)| {
            i.settled_by.is_some() && matches!(i.state.as_str(), "canceled" | "failed")
        })
        .collect();
    let unrecorded = late
        .iter()
        .filter(|((merchant, id), intent)| {
            intent.state == "failed"
                || !stored.events.iter().any(|(m, _, subject, _, kind)| {
                    m == merchant && subject == id && kind == "payment_intent.paid_after_cancel"
                })
        })
        .count();
    row(
        "no canceled/failed intent paid without a late-payment record",
        late.len(),
        unrecorded,
    )
}

/// Every refund was created by exactly one key's stored 201, of a paid intent; an intent's refunds
/// that may still move money never exceed its amount, and its `amount_refunded` is the sum of
/// its succeeded ones.
fn refunds_stay_within_their_payment(stored: &Stored, _: &Inputs) -> Row {
    use alloy::primitives::U256;
    let number = |raw: &str| raw.parse::<U256>().unwrap_or(U256::MAX);
    let mut created_by: HashMap<(String, String), usize> = HashMap::new();
    for ((scope, _), record) in &stored.records {
        if record.status == Some(201)
            && let Some(id) = body_id(record.body.as_deref())
            && id.starts_with("re_")
        {
            *created_by.entry((scope.clone(), id)).or_default() += 1;
        }
    }
    let mut wrong = stored
        .refunds
        .iter()
        .filter(|r| created_by.get(&(r.merchant_id.clone(), r.id.clone())) != Some(&1))
        .count();
    let mut by_intent: HashMap<(&str, &str), (U256, U256)> = HashMap::new();
    for refund in &stored.refunds {
        let sums = by_intent
            .entry((&refund.merchant_id, &refund.intent_id))
            .or_default();
        if refund.state != "failed" {
            sums.0 += number(&refund.amount);
        }
        if refund.state == "succeeded" {
            sums.1 += number(&refund.amount);
        }
    }
    for ((merchant, id), (reserved, refunded)) in &by_intent {
        let Some(intent) = stored.intents.get(&(merchant.to_string(), id.to_string())) else {
            wrong += 1;
            continue;
        };
        let recorded = stored
            .amounts_refunded
            .get(&(merchant.to_string(), id.to_string()))
            .map(|a| number(a));
        if intent.settled_by.is_none()
            || *reserved > number(&intent.amount)
            || recorded != Some(*refunded)
        {
            eprintln!(
                "checker: refunds of {merchant}/{id}: {reserved} reserved, {refunded} refunded, intent {} of {} (amount_refunded {recorded:?})",
                intent.state, intent.amount
            );
            wrong += 1;
        }
    }
    row(
        "refunds: one key each, of a paid intent, within its payment",
        stored.refunds.len(),
        wrong,
    )
}

/// A refund succeeded exactly when a confirmed use of its nonce paid it back: then it names that
/// transaction and has one ledger entry; otherwise none.
fn every_refund_reflected_once(stored: &Stored, _: &Inputs) -> Row {
    let wrong = stored
        .refunds
        .iter()
        .filter(|refund| {
            let paying: Vec<&String> = stored
                .chain
                .refund_uses
                .iter()
                .filter(|(id, _, pays)| *id == refund.id && *pays)
                .map(|(_, tx, _)| tx)
                .collect();
            let entries = stored
                .ledger
                .values()
                .filter(|e| e.5.as_deref() == Some(refund.id.as_str()))
                .count();
            let confirmed = refund.settled_by.as_ref().is_some_and(|tx| {
                stored.chain.receipts.get(tx).is_some_and(|(ok, transfers)| {
                    *ok && transfers.iter().any(|(token, from, to, value)| {
                        *token == refund.token
                            && *from == refund.payee
                            && *to == refund.payer
                            && *value == refund.amount
                    })
                })
            });
            let reflected = match refund.state.as_str() {
                "succeeded" => {
                    confirmed
                        && entries == 1
                        && paying.len() == 1
                        && refund.settled_by.as_ref() == paying.first().copied()
                }
                _ => entries == 0 && paying.is_empty(),
            };
            if !reflected {
                eprintln!(
                    "checker: refund {}: {} (settled by {:?}), {entries} ledger entries, paid on chain by {paying:?}",
                    refund.id, refund.state, refund.settled_by
                );
            }
            !reflected
        })
        .count();
    row(
        "each refund reflected once: state, chain, ledger",
        stored.refunds.len(),
        wrong,
    )
}

/// No x402 payment was answered `success: true` twice, except to retries of one Idempotency-Key
/// (which must name the same transaction); and every payment answered so is stored, its intent
/// paid by a confirmed transfer.
fn x402_one_success_per_payment(stored: &Stored, inputs: &Inputs) -> Row {
    let mut successes: HashMap<&str, Vec<&crate::x402::X402Answer>> = HashMap::new();
    for answer in inputs.x402_answers.iter().filter(|a| a.success) {
        successes
            .entry(answer.nonce.as_str())
            .or_default()
            .push(answer);
    }
    let broken = successes
        .iter()
        .filter(|(nonce, answers)| {
            let unkeyed = answers.iter().filter(|a| a.key.is_none()).count();
            let keys: HashSet<&str> = answers.iter().filter_map(|a| a.key.as_deref()).collect();
            let transactions: HashSet<&str> =
                answers.iter().map(|a| a.transaction.as_str()).collect();
            let paid = stored
                .x402
                .get(**nonce)
                .and_then(|key| stored.intents.get(key))
                .is_some_and(|intent| intent.state == "succeeded" && intent.settled_by.is_some());
            unkeyed + keys.len() > 1 || transactions.len() > 1 || !paid
        })
        .count();
    row(
        "no x402 payment answered success twice without its key, each one paid",
        successes.len(),
        broken,
    )
}

/// Every confirmed transfer to a deposit address is in exactly one applied observation and one
/// ledger entry (payer to deposit address, its amount), and every deposit entry is such a transfer.
fn every_confirmed_deposit_booked_once(stored: &Stored, _: &Inputs) -> Row {
    let deposits: Vec<&DepositTransfer> = stored
        .chain
        .deposit_transfers
        .iter()
        .filter(|t| t.into)
        .collect();
    let wrong = deposits
        .iter()
        .filter(|t| {
            let key = (t.transaction.clone(), t.log_index);
            let observed = stored.deposit_observations.get(&key).map(String::as_str)
                == Some("deposit_received");
            let booked =
                stored
                    .deposit_ledger
                    .get(&key)
                    .is_some_and(|(kind, intent, amount, other)| {
                        kind == "deposit"
                            && *intent == t.intent
                            && *amount == t.value
                            && *other == format!("payer:{}", t.counterparty)
                    });
            if !(observed && booked) {
                eprintln!(
                    "checker: deposit {}#{} of {} to {}/{}: observed {observed}, booked {booked}",
                    t.transaction, t.log_index, t.value, t.merchant, t.intent
                );
            }
            !(observed && booked)
        })
        .count();
    let entries = stored
        .deposit_ledger
        .values()
        .filter(|(kind, ..)| kind == "deposit")
        .count();
    row(
        "each confirmed deposit observed and booked once",
        deposits.len(),
        wrong + entries.abs_diff(deposits.len()),
    )
}

/// A deposit intent's `amount_received` is what confirmed transfers of its token brought; it
/// succeeded only once that reached its amount, with the rest as `amount_overpaid`, and an open
/// one has received less than its amount.
fn deposit_intents_paid_by_what_arrived(stored: &Stored, _: &Inputs) -> Row {
    use alloy::primitives::U256;
    let deposit_intents: Vec<&IntentRow> =
        stored.intents.values().filter(|i| i.by_deposit()).collect();
    let number = |raw: &str| raw.parse::<U256>().unwrap_or(U256::MAX);
    let wrong = deposit_intents
        .iter()
        .filter(|intent| {
            let arrived = stored
                .chain
                .deposit_transfers
                .iter()
                .filter(|t| t.into && t.intent == intent.id && t.token == intent.token)
                .fold(U256::ZERO, |sum, t| sum + number(&t.value));
            let (amount, received) = (number(&intent.amount), number(&intent.amount_received));
            let consistent = received == arrived
                && match intent.state.as_str() {
                    "succeeded" => {
                        received >= amount && number(&intent.amount_overpaid) == received - amount
                    }
                    "created" => received < amount,
                    "canceled" => number(&intent.amount_overpaid).is_zero(),
                    _ => false,
                };
            if !consistent {
                eprintln!(
                    "checker: deposit intent {}/{} {}: amount {}, received {} (arrived {arrived}), overpaid {}",
                    intent.merchant_id, intent.id, intent.state, intent.amount, intent.amount_received, intent.amount_overpaid
                );
            }
            !consistent
        })
        .count();
    row(
        "deposit intents paid by what arrived, the excess recorded",
        deposit_intents.len(),
        wrong,
    )
}

/// Every confirmed transfer out of a deposit address went to its intent's merchant address and is
/// booked once as a sweep; at the end every deposit address holds nothing: all of it reached the
/// merchant.
fn every_deposit_swept_to_its_merchant(stored: &Stored, _: &Inputs) -> Row {
    let payee = |intent: &str| {
        stored
            .intents
            .values()
            .find(|i| i.id == intent)
            .map(|i| (i.payee.clone(), i.merchant_id.clone()))
    };
    let sweeps: Vec<&DepositTransfer> = stored
        .chain
        .deposit_transfers
        .iter()
        .filter(|t| !t.into)
        .collect();
    let wrong = sweeps
        .iter()
        .filter(|t| {
            let key = (t.transaction.clone(), t.log_index);
            let Some((payee, merchant)) = payee(&t.intent) else {
                return true;
            };
            let booked = stored.deposit_ledger.get(&key).is_some_and(|(kind, intent, amount, other)| {
                kind == "sweep"
                    && *intent == t.intent
                    && *amount == format!("-{}", t.value)
                    && *other == format!("merchant:{merchant}")
            });
            let reached = t.counterparty == payee;
            if !(booked && reached) {
                eprintln!(
                    "checker: sweep {}#{} of {} from {}: to {} (merchant's {payee}), booked {booked}",
                    t.transaction, t.log_index, t.value, t.address, t.counterparty
                );
            }
            !(booked && reached)
        })
        .count();
    let left = stored
        .chain
        .deposit_balances
        .iter()
        .filter(|((address, token), held)| {
            if *held != "0" {
                eprintln!("checker: deposit address {address} still holds {held} of {token}");
            }
            *held != "0"
        })
        .count();
    let entries = stored
        .deposit_ledger
        .values()
        .filter(|(kind, ..)| kind == "sweep")
        .count();
    row(
        "each deposit swept to its merchant, booked once, none left",
        sweeps.len() + stored.chain.deposit_balances.len(),
        wrong + left + entries.abs_diff(sweeps.len()),
    )
}
