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
struct Row {
    name: &'static str,
    checked: u64,
    violations: u64,
}

fn row(name: &'static str, checked: usize, violations: usize) -> Row {
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
}

/// An intent's state as the checker needs it.
struct IntentRow {
    state: String,
    version: i32,
    cancellation_reason: Option<String>,
    transitions: i64,
}

struct KeyRecord {
    state: String,
    status: Option<i16>,
    body: Option<Vec<u8>>,
}

/// What the database holds after the run, keyed by (merchant, intent id) and (scope, key).
struct Stored {
    intents: HashMap<(String, String), IntentRow>,
    records: HashMap<(String, String), KeyRecord>,
    /// (merchant, event id, subject, subject version) of every event.
    events: Vec<(String, String, String, i32)>,
}

impl Stored {
    async fn load(pool: &PgPool) -> anyhow::Result<Self> {
        let intents = sqlx::query_as::<_, (String, String, String, i32, Option<String>, i64)>(
            "SELECT p.merchant_id, p.id, p.state, p.version, p.cancellation_reason, \
                    (SELECT count(*) FROM payment_intent_transitions t WHERE t.merchant_id = p.merchant_id AND t.intent_id = p.id) \
               FROM payment_intents p",
        )
        .fetch_all(pool)
        .await?
        .into_iter()
        .map(|(merchant, id, state, version, cancellation_reason, transitions)| {
            let row = IntentRow {
                state,
                version,
                cancellation_reason,
                transitions,
            };
            ((merchant, id), row)
        })
        .collect();
        let records = sqlx::query_as::<_, (String, String, String, Option<i16>, Option<Vec<u8>>)>(
            "SELECT scope, key, state, response_status, response_body FROM idempotency_keys",
        )
        .fetch_all(pool)
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
        let events = sqlx::query_as::<_, (String, String, String, i32)>(
            "SELECT merchant_id, id, subject_id, subject_version FROM events",
        )
        .fetch_all(pool)
        .await?;
        Ok(Self {
            intents,
            records,
            events,
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
const INVARIANTS: [Invariant; 14] = [
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
];

/// Reads the database and checks every invariant against it and the run's history.
pub async fn check(pool: &PgPool, inputs: Inputs<'_>) -> anyhow::Result<Verdict> {
    let stored = Stored::load(pool).await?;
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
        {
            *created_by.entry((scope.clone(), id)).or_default() += 1;
        }
    }
    let orphans = stored
        .intents
        .keys()
        .filter(|k| !created_by.contains_key(*k))
        .count();
    let shared_or_missing = created_by
        .iter()
        .filter(|(k, n)| **n > 1 || !stored.intents.contains_key(*k))
        .count();
    row(
        "every intent belongs to exactly one key (no duplicate execution)",
        stored.intents.len(),
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
                    && intent.version == 2
                    && intent.cancellation_reason.as_deref() == Some("merchant_request")
            }),
            (OpKind::Cancel, 409) if error.as_deref() == Some("invalid_state_transition") => {
                target().is_some_and(|intent| intent.state == "canceled")
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
        .filter(|f| f.kind == FaultKind::KillReplica)
        .fold(BTreeMap::new(), |mut acc, f| {
            *acc.entry(f.replica.unwrap_or(0)).or_default() += 1;
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

/// Sweepers and cancels: every state change happened once, with version 2.
fn each_intent_moved_at_most_once(stored: &Stored, _: &Inputs) -> Row {
    let broken = stored
        .intents
        .values()
        .filter(|intent| match intent.state.as_str() {
            "created" => intent.version != 1 || intent.transitions != 0,
            "canceled" => {
                intent.version != 2
                    || intent.transitions != 1
                    || intent.cancellation_reason.is_none()
            }
            _ => true,
        })
        .count();
    row(
        "each intent moved at most once (version, transitions)",
        stored.intents.len(),
        broken,
    )
}

/// Every version of every intent (its creation and each change) has exactly one event, and no
/// event describes a change that did not commit.
fn one_event_per_state_change(stored: &Stored, _: &Inputs) -> Row {
    let mut versions: HashMap<(&str, &str), Vec<i32>> = HashMap::new();
    for (merchant, _, subject, version) in &stored.events {
        versions
            .entry((merchant, subject))
            .or_default()
            .push(*version);
    }
    let mut wrong = versions
        .keys()
        .filter(|(merchant, subject)| {
            !stored
                .intents
                .contains_key(&(merchant.to_string(), subject.to_string()))
        })
        .count();
    for ((merchant, id), intent) in &stored.intents {
        let mut seen = versions
            .get(&(merchant.as_str(), id.as_str()))
            .cloned()
            .unwrap_or_default();
        seen.sort_unstable();
        if seen != (1..=intent.version).collect::<Vec<_>>() {
            wrong += 1;
        }
    }
    row(
        "every committed state change produced exactly one event",
        stored.intents.len(),
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
