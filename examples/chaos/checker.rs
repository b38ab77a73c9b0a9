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

#[derive(Default)]
pub struct Verdict {
    rows: Vec<(&'static str, u64, u64)>,
}

impl Verdict {
    fn check(&mut self, name: &'static str, checked: u64, violations: u64) {
        self.rows.push((name, checked, violations));
    }

    pub fn held(&self) -> bool {
        self.rows.iter().all(|(_, _, v)| *v == 0)
    }

    pub fn print(&self) {
        println!(
            "\n{:<62} {:>9} {:>10}",
            "invariant", "checked", "violations"
        );
        for (name, checked, violations) in &self.rows {
            let mark = if *violations == 0 { "ok" } else { "FAILED" };
            println!("{name:<62} {checked:>9} {violations:>10}  {mark}");
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
}

/// An intent's state as the checker needs it: (state, version, cancellation_reason, transitions).
type IntentRow = (String, i32, Option<String>, i64);

struct KeyRecord {
    state: String,
    status: Option<i16>,
    body: Option<Vec<u8>>,
}

pub async fn check(pool: &PgPool, inputs: Inputs<'_>) -> anyhow::Result<Verdict> {
    let mut verdict = Verdict::default();
    let history = inputs.history;

    let intents: HashMap<(String, String), IntentRow> = sqlx::query_as::<_, (String, String, String, i32, Option<String>, i64)>(
        "SELECT p.merchant_id, p.id, p.state, p.version, p.cancellation_reason, \
                (SELECT count(*) FROM payment_intent_transitions t WHERE t.merchant_id = p.merchant_id AND t.intent_id = p.id) \
           FROM payment_intents p",
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|(m, id, state, version, reason, transitions)| ((m, id), (state, version, reason, transitions)))
    .collect();
    let records: HashMap<(String, String), KeyRecord> =
        sqlx::query_as::<_, (String, String, String, Option<i16>, Option<Vec<u8>>)>(
            "SELECT scope, key, state, response_status, response_body FROM idempotency_keys",
        )
        .fetch_all(pool)
        .await?
        .into_iter()
        .map(|(scope, key, state, status, body)| {
            (
                (scope, key),
                KeyRecord {
                    state,
                    status,
                    body,
                },
            )
        })
        .collect();

    // 1. At most one intent per key, and exactly one for every key that got a 2xx.
    let mut created_by: HashMap<(String, String), u64> = HashMap::new();
    for ((scope, _), record) in &records {
        if record.status == Some(201) {
            if let Some(id) = body_id(record.body.as_deref()) {
                *created_by.entry((scope.clone(), id)).or_default() += 1;
            }
        }
    }
    let orphans = intents
        .keys()
        .filter(|k| !created_by.contains_key(*k))
        .count() as u64;
    let shared_or_missing = created_by
        .iter()
        .filter(|(k, n)| **n > 1 || !intents.contains_key(*k))
        .count() as u64;
    verdict.check(
        "every intent belongs to exactly one key (no duplicate execution)",
        intents.len() as u64,
        orphans + shared_or_missing,
    );

    let mut keys_with_2xx: HashSet<(&str, &str)> = HashSet::new();
    for e in history
        .iter()
        .filter(|e| matches!(e.kind, OpKind::Create | OpKind::HotCreate))
    {
        if let (
            Outcome::Answer {
                status: 200..=299, ..
            },
            Some(key),
        ) = (&e.outcome, &e.key)
        {
            keys_with_2xx.insert((e.scope, key.as_str()));
        }
    }
    let without_intent = keys_with_2xx
        .iter()
        .filter(|(scope, key)| {
            let record = records.get(&(scope.to_string(), key.to_string()));
            let id = record.and_then(|r| body_id(r.body.as_deref()));
            !id.is_some_and(|id| intents.contains_key(&(scope.to_string(), id)))
        })
        .count() as u64;
    verdict.check(
        "every key that got a 2xx has exactly one intent",
        keys_with_2xx.len() as u64,
        without_intent,
    );

    // 2. Every 2xx answer for a key is byte-identical to every other.
    let mut answers: HashMap<(&str, &str, bool), HashSet<&[u8]>> = HashMap::new();
    let mut answers_2xx = 0;
    for e in history {
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
    let diverging = answers.values().filter(|bodies| bodies.len() > 1).count() as u64;
    verdict.check(
        "all 2xx answers for one key are byte-identical",
        answers_2xx,
        diverging,
    );

    // 3. Every intent a client saw exists, in the state its last answer implies.
    let mut seen = 0;
    let mut wrong = 0;
    for e in history {
        let Outcome::Answer {
            status,
            error,
            body,
            ..
        } = &e.outcome
        else {
            continue;
        };
        let scope = e.scope.to_owned();
        match (e.kind, *status) {
            (OpKind::Create | OpKind::HotCreate, 201) => {
                seen += 1;
                if !body_id(Some(body)).is_some_and(|id| intents.contains_key(&(scope, id))) {
                    wrong += 1;
                }
            }
            (OpKind::Cancel, 200) => {
                seen += 1;
                let state = e
                    .target
                    .as_ref()
                    .and_then(|id| intents.get(&(scope, id.clone())));
                if !state.is_some_and(|(s, v, r, _)| {
                    s == "canceled" && *v == 2 && r.as_deref() == Some("merchant_request")
                }) {
                    wrong += 1;
                }
            }
            (OpKind::Cancel, 409) if error.as_deref() == Some("invalid_state_transition") => {
                seen += 1;
                let state = e
                    .target
                    .as_ref()
                    .and_then(|id| intents.get(&(scope, id.clone())));
                if state.is_none_or(|(s, ..)| s != "canceled") {
                    wrong += 1;
                }
            }
            (OpKind::Read, 200) => seen += 1,
            (OpKind::Read | OpKind::Cancel, 404) => {
                seen += 1;
                wrong += 1;
            }
            _ => {}
        }
    }
    verdict.check(
        "every intent id seen exists, in the state the answer implies",
        seen,
        wrong,
    );

    // 4. Nothing left in flight once leases and timeouts have passed after recovery.
    let in_flight = records.values().filter(|r| r.state == "in_flight").count() as u64;
    verdict.check(
        "no record left in_flight after recovery",
        records.len() as u64,
        in_flight,
    );
    verdict.check(
        "every operation reached a final answer",
        (history.len() + inputs.unresolved.len()) as u64,
        inputs.unresolved.len() as u64,
    );

    // 5. No 500 for a valid request; 503 only while the database was unreachable or stalled, or
    //    from a replica that was itself paused during the request.
    let answered: Vec<&Exchange> = history
        .iter()
        .filter(|e| matches!(e.outcome, Outcome::Answer { .. }))
        .collect();
    let fives = answered
        .iter()
        .filter(|e| status_of(e) == Some(500))
        .count() as u64;
    verdict.check(
        "valid requests never got a 500",
        answered.len() as u64,
        fives,
    );
    let unavailable: Vec<&&Exchange> = answered
        .iter()
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
        .count() as u64;
    verdict.check(
        "503 only while the database (or that replica) was impaired",
        unavailable.len() as u64,
        unexplained,
    );

    // 6. Each answer belongs to the body that was sent, and a key reused with a different body
    //    got 422, every time.
    let mut create_answers = 0;
    let mut foreign = 0;
    for e in history
        .iter()
        .filter(|e| matches!(e.kind, OpKind::Create | OpKind::HotCreate))
    {
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
    verdict.check(
        "every 201 carries the amount its own request sent",
        create_answers,
        foreign,
    );
    let reuse: Vec<&Exchange> = history.iter().filter(|e| e.kind == OpKind::Reuse).collect();
    let bad_reuse = reuse
        .iter()
        .filter(|e| match &e.outcome {
            Outcome::Answer { status, .. } => !matches!(status, 409 | 422 | 503),
            Outcome::NoAnswer => false,
        })
        .count() as u64;
    verdict.check(
        "different-body reuse got 422, never the other body's answer",
        reuse.len() as u64,
        bad_reuse,
    );

    // 7. Replicas ride out database restarts: not restarted (except by the injector), ready after.
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
        .count() as u64;
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
            let recovered = during && after;
            if !(disturbed || recovered) {
                not_recovered += 1;
            }
        }
    }
    verdict.check(
        "replicas survive database restarts (/readyz 503, then 200)",
        (inputs.replica_pids.len() * restarts.len().max(1)) as u64,
        unexpected_restarts + not_recovered,
    );

    // 8. Sweepers and cancels: every state change happened once, with version 2.
    let broken_transitions = intents
        .values()
        .filter(
            |(state, version, reason, transitions)| match state.as_str() {
                "created" => *version != 1 || *transitions != 0,
                "canceled" => *version != 2 || *transitions != 1 || reason.is_none(),
                _ => true,
            },
        )
        .count() as u64;
    verdict.check(
        "each intent moved at most once (version, transitions)",
        intents.len() as u64,
        broken_transitions,
    );
    Ok(verdict)
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
