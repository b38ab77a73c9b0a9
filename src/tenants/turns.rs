//! Merchants take turns at the database (`docs/design.md`, "Per-merchant limits"): at most
//! `DB_REQUEST_TURNS` requests work at once, and when more want to, a free turn goes to the
//! waiting merchant that holds the fewest. A merchant's queue of fifty stands behind its own
//! requests, never in front of another merchant's one. By default a merchant that has had the
//! turns to itself for a while may take more, up to the pool less one: with no one to be fair
//! to, fewer turns would only keep its commits from sharing a flush ("How many turns").

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    extract::{Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};
use tokio::sync::oneshot;

use crate::{auth::MerchantId, deadline::Deadline, error::ApiError, extract::whole_body};

/// The turns of one replica's requests.
#[derive(Clone)]
pub struct Turns {
    inner: Arc<Mutex<Queue>>,
    count: usize,
}

/// How long every turn must have gone to one merchant before it counts as alone.
pub const ALONE_AFTER: Duration = Duration::from_secs(1);

struct Queue {
    /// The turns requests work with at once when merchants share the database.
    count: usize,
    /// The turns a merchant alone may hold: `count` when the turns are fixed.
    ceiling: usize,
    /// `ALONE_AFTER`.
    alone_after: Duration,
    /// Turns requests hold.
    in_use: usize,
    /// The merchant that took the last turn, and until when another merchant counts as present:
    /// `ALONE_AFTER` past the last time the turns changed hands.
    last_taker: String,
    shared_until: Instant,
    /// The turns each merchant holds (merchants holding none are left out).
    held: HashMap<String, usize>,
    /// Each merchant's waiting requests, first come first served within the merchant.
    waiting: HashMap<String, VecDeque<oneshot::Sender<Turn>>>,
    /// The merchants with a request waiting, the one that came or was last served longest ago
    /// first.
    order: VecDeque<String>,
}

impl Queue {
    /// Counts a turn as `merchant`'s and makes it. Every `/v1` request takes one: a merchant
    /// already holding turns is counted without a new key.
    fn hand(&mut self, merchant: &str, turns: &Arc<Mutex<Queue>>, now: Instant) -> Turn {
        self.in_use += 1;
        if self.last_taker != merchant {
            merchant.clone_into(&mut self.last_taker);
            self.shared_until = now + self.alone_after;
        }
        match self.held.get_mut(merchant) {
            Some(held) => *held += 1,
            None => {
                self.held.insert(merchant.to_owned(), 1);
            }
        }
        Turn {
            turns: Some(turns.clone()),
            merchant: merchant.to_owned(),
        }
    }

    fn release(&mut self, merchant: &str) {
        self.in_use -= 1;
        if let Some(held) = self.held.get_mut(merchant) {
            *held -= 1;
            if *held == 0 {
                self.held.remove(merchant);
            }
        }
    }

    fn held_by(&self, merchant: &str) -> usize {
        self.held.get(merchant).copied().unwrap_or(0)
    }

    /// Whether `merchant` has had the turns to itself for `ALONE_AFTER`, holds every turn held,
    /// and no one else waits.
    fn alone(&self, merchant: &str, now: Instant) -> bool {
        self.last_taker == merchant
            && now >= self.shared_until
            && self.held.len() <= 1
            && self.held_by(merchant) == self.in_use
            && self.order.iter().all(|waiting| waiting == merchant)
    }

    /// Whether `merchant` may take a turn now: one of the `count` is free; or, up to the
    /// ceiling, it holds none while others hold more than their share (it goes first), or it is
    /// alone.
    fn may_take(&self, merchant: &str, now: Instant) -> bool {
        self.in_use < self.count
            || (self.in_use < self.ceiling
                && (self.held_by(merchant) == 0 || self.alone(merchant, now)))
    }

    /// The waiting merchant to serve next: the one holding the fewest turns, so that a merchant
    /// with one request waiting goes before another merchant's queue; among equals the one that
    /// has waited longest. It goes to the back of the line if it has more requests waiting. The
    /// scan is over the merchants waiting, not their requests. `None` if no one waits, or if the
    /// next may not take a turn now.
    fn next_waiter(&mut self, now: Instant) -> Option<(String, oneshot::Sender<Turn>)> {
        let (at, merchant) = self
            .order
            .iter()
            .enumerate()
            .min_by_key(|&(at, merchant)| (self.held_by(merchant), at))?;
        if !self.may_take(merchant, now) {
            return None;
        }
        let merchant = self.order.remove(at).expect("found in the order");
        let mine = self
            .waiting
            .get_mut(&merchant)
            .expect("ordered merchants wait");
        let sender = mine.pop_front().expect("a waiting merchant has a request");
        if mine.is_empty() {
            self.waiting.remove(&merchant);
        } else {
            self.order.push_back(merchant.clone());
        }
        Some((merchant, sender))
    }
}

/// The gauge of requests waiting for a turn, beside the pool's own `db_pool_waiting_requests`.
pub const TURNS_WAITING: &str = "db_turns_waiting_requests";
/// The gauge of turns there are, as `DB_REQUEST_TURNS` or its default resolved.
pub const TURN_COUNT: &str = "db_request_turns";

/// A request's turn: given to the next one when dropped.
pub struct Turn {
    turns: Option<Arc<Mutex<Queue>>>,
    merchant: String,
}

impl Turns {
    /// `wanted` turns (`DB_REQUEST_TURNS`), by default twice the cores this process sees (the
    /// database's when both share a machine): past what PostgreSQL does at once, a request queues
    /// there in arrival order instead of here by merchant (`docs/design.md`, "How many turns").
    /// At most `connections` less one, so that what takes no turn (key lookups, checkout, x402)
    /// finds a connection; a pool of one is all turns.
    /// Unless `wanted` is given, a merchant alone may take up to `connections` less one.
    pub fn for_pool(wanted: Option<usize>, connections: usize) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get());
        let count = turn_count(wanted, connections, cores);
        let ceiling = match wanted {
            Some(_) => count,
            None => turn_count(Some(connections), connections, cores),
        };
        let turns = Self::with_ceiling(count, ceiling);
        tracing::info!(
            turns = turns.count,
            alone = ceiling,
            cores,
            pool = connections,
            "/v1 requests take turns at the database (DB_REQUEST_TURNS)"
        );
        turns
    }

    /// `at_once` turns (at least one), however long a merchant is alone.
    pub fn new(at_once: usize) -> Self {
        Self::with_ceiling(at_once, at_once)
    }

    /// `at_once` turns when merchants share them, up to `ceiling` for a merchant alone.
    pub fn with_ceiling(at_once: usize, ceiling: usize) -> Self {
        let count = at_once.max(1);
        Self {
            inner: Arc::new(Mutex::new(Queue {
                count,
                ceiling: ceiling.max(count),
                alone_after: ALONE_AFTER,
                in_use: 0,
                last_taker: String::new(),
                shared_until: Instant::now(),
                held: HashMap::new(),
                waiting: HashMap::new(),
                order: VecDeque::new(),
            })),
            count,
        }
    }

    /// How many turns there are: requests working at the database at once.
    pub fn count(&self) -> usize {
        self.count
    }

    /// A turn for `merchant`'s request, at once if one is free, else when its merchant's turn
    /// comes; `None` if that takes longer than `wait` (the request is shed, not queued).
    pub async fn take(&self, merchant: &str, wait: Duration) -> Option<Turn> {
        let receiver = {
            let mut queue = lock(&self.inner);
            let now = Instant::now();
            // Someone waiting goes first, unless this merchant is alone.
            if queue.may_take(merchant, now)
                && (queue.order.is_empty() || queue.alone(merchant, now))
            {
                return Some(queue.hand(merchant, &self.inner, now));
            }
            if wait.is_zero() {
                return None;
            }
            let (sender, receiver) = oneshot::channel();
            match queue.waiting.get_mut(merchant) {
                Some(mine) => mine.push_back(sender),
                None => {
                    queue
                        .waiting
                        .insert(merchant.to_owned(), VecDeque::from([sender]));
                    queue.order.push_back(merchant.to_owned());
                }
            }
            receiver
        };
        // A turn handed over after the wait ran out is dropped with the channel: given on again.
        tokio::time::timeout(wait, receiver).await.ok()?.ok()
    }

    /// Requests waiting for a turn now (one that gave up counts until its turn comes and passes
    /// it over).
    pub fn waiting(&self) -> usize {
        lock(&self.inner).waiting.values().map(VecDeque::len).sum()
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let Some(inner) = self.turns.take() else {
            return;
        };
        let mut queue = lock(&inner);
        queue.release(&self.merchant);
        // The next waiter gets the turn if it may take one; one that gave up meanwhile is passed
        // over. A turn past the count that no one may take is retired.
        let now = Instant::now();
        while let Some((merchant, sender)) = queue.next_waiter(now) {
            let turn = queue.hand(&merchant, &inner, now);
            match sender.send(turn) {
                Ok(()) => return,
                // Its request stopped waiting: the turn is not given back twice.
                Err(mut unclaimed) => {
                    unclaimed.turns = None;
                    queue.release(&merchant);
                }
            }
        }
    }
}

/// The turns of `/v1` requests, and how long a request may wait for one.
#[derive(Clone)]
pub struct TurnGate {
    pub turns: Turns,
    /// `DB_WAIT_TIMEOUT_MS`: past it the request is answered 503 with `Retry-After`.
    pub wait: Duration,
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
}

/// Runs after the merchant's limits: a request admitted by them waits for its merchant's turn,
/// once its whole body has arrived (a client that trickles its body holds no turn), and holds
/// it until answered. Waiting longer than the bound is a 503, as waiting for the pool is.
pub async fn take_turn(State(gate): State<TurnGate>, request: Request, next: Next) -> Response {
    let Some(merchant) = request.extensions().get::<MerchantId>().cloned() else {
        return next.run(request).await;
    };
    let deadline = Deadline::of(&request, gate.request_timeout);
    let request =
        match whole_body(request, gate.max_body_bytes, deadline, gate.request_timeout).await {
            Ok((request, _)) => request,
            Err(e) => return e.into_response(),
        };
    match gate.turns.take(merchant.as_str(), gate.wait).await {
        Some(_turn) => next.run(request).await,
        None => ApiError::Database(sqlx::Error::PoolTimedOut).into_response(),
    }
}

/// How many turns `for_pool` makes.
fn turn_count(wanted: Option<usize>, connections: usize, cores: usize) -> usize {
    wanted
        .unwrap_or(2 * cores)
        .min(connections.saturating_sub(1))
        .max(1)
}

fn lock(queue: &Mutex<Queue>) -> std::sync::MutexGuard<'_, Queue> {
    queue
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn a_merchant_waiting_once_is_served_before_another_merchants_queue() {
        let turns = Turns::new(1);
        let held = turns.take("a", LONG).await.expect("one is free");
        let mut a_queue = Vec::new();
        for _ in 0..3 {
            let turns = turns.clone();
            a_queue.push(tokio::spawn(async move {
                turns.take("a", LONG).await.map(drop)
            }));
            tokio::task::yield_now().await;
        }
        let b = {
            let turns = turns.clone();
            tokio::spawn(async move { turns.take("b", LONG).await })
        };
        // Every waiter in line before the first turn is given back: a's three, then b's one.
        while {
            let queue = lock(&turns.inner);
            queue.waiting.get("a").map(VecDeque::len) != Some(3) || queue.order.len() < 2
        } {
            tokio::task::yield_now().await;
        }
        // a's first waiter was first in line, then b's; a's other two after b.
        drop(held);
        let b_turn = b.await.unwrap().expect("b is served second");
        let a_served = a_queue.iter().filter(|t| t.is_finished()).count();
        assert_eq!(a_served, 1, "only a's first waiter went before b");
        drop(b_turn);
        for waiter in a_queue {
            assert!(waiter.await.unwrap().is_some());
        }
        assert_eq!(lock(&turns.inner).in_use, 0);
    }

    #[tokio::test]
    async fn a_free_turn_goes_to_the_waiting_merchant_that_holds_the_fewest() {
        let turns = Turns::new(2);
        let a_first = turns.take("a", LONG).await.expect("one is free");
        let a_second = turns.take("a", LONG).await.expect("two are free");
        let a_waiting = {
            let turns = turns.clone();
            tokio::spawn(async move { turns.take("a", LONG).await })
        };
        while turns.waiting() < 1 {
            tokio::task::yield_now().await;
        }
        let b = {
            let turns = turns.clone();
            tokio::spawn(async move { turns.take("b", LONG).await })
        };
        while turns.waiting() < 2 {
            tokio::task::yield_now().await;
        }
        // a waited longer, but holds a turn still; b holds none.
        drop(a_first);
        let b_turn = b.await.unwrap().expect("b is served first");
        assert!(!a_waiting.is_finished(), "a's waiter went before b");
        {
            let queue = lock(&turns.inner);
            let held = |merchant: &str| queue.held.get(merchant).copied();
            assert_eq!(
                (held("a"), held("b")),
                (Some(1), Some(1)),
                "a's waiter still waits"
            );
        }
        drop(a_second);
        let a_turn = a_waiting.await.unwrap().expect("a is served next");
        drop((a_turn, b_turn));
        let queue = lock(&turns.inner);
        assert_eq!(
            (queue.in_use, queue.held.len()),
            (0, 0),
            "every turn is back"
        );
    }

    #[test]
    fn turns_default_to_twice_the_cores_and_never_exceed_the_pool_less_one() {
        assert_eq!(turn_count(None, 16, 2), 4);
        assert_eq!(turn_count(None, 16, 32), 15);
        assert_eq!(turn_count(Some(12), 16, 2), 12);
        assert_eq!(turn_count(Some(40), 8, 2), 7);
        assert_eq!(turn_count(Some(0), 1, 2), 1);
        assert_eq!(turn_count(None, 1, 2), 1);
        let turns = Turns::for_pool(Some(3), 16);
        let queue = lock(&turns.inner);
        assert_eq!(
            (queue.count, queue.ceiling, turns.count()),
            (3, 3, 3),
            "for_pool makes the turns it counts; a given number is fixed"
        );
        drop(queue);
        let turns = Turns::for_pool(None, 16);
        assert_eq!(
            lock(&turns.inner).ceiling,
            15,
            "by default a merchant alone takes the pool less one"
        );
    }

    #[tokio::test]
    async fn a_request_that_waited_too_long_is_shed_and_its_turn_is_not_lost() {
        let turns = Turns::new(1);
        let held = turns.take("a", LONG).await.unwrap();
        assert!(turns.take("b", Duration::from_millis(10)).await.is_none());
        drop(held);
        let queue = lock(&turns.inner);
        assert_eq!(
            (queue.in_use, queue.order.len(), queue.held.len()),
            (0, 0, 0)
        );
    }

    /// Takes `n` turns for `merchant` that are free now.
    async fn take_now(turns: &Turns, merchant: &str, n: usize) -> Vec<Turn> {
        let mut taken = Vec::new();
        for _ in 0..n {
            let turn = turns.take(merchant, Duration::ZERO).await;
            taken.push(turn.expect("a turn is free"));
        }
        taken
    }

    #[tokio::test]
    async fn a_merchant_is_not_alone_before_it_had_the_turns_to_itself_for_a_while() {
        let turns = Turns::with_ceiling(2, 5);
        // However slow this machine, the while has not passed.
        lock(&turns.inner).alone_after = Duration::from_secs(3600);
        let _a = take_now(&turns, "a", 2).await;
        assert!(
            turns.take("a", Duration::ZERO).await.is_none(),
            "not alone before the while has passed"
        );
    }

    #[tokio::test]
    async fn a_merchant_alone_takes_up_to_the_ceiling_and_gives_back_the_excess_when_another_comes()
    {
        let turns = Turns::with_ceiling(2, 5);
        // Alone as soon as every turn went to it.
        lock(&turns.inner).alone_after = Duration::ZERO;
        let mut a = take_now(&turns, "a", 5).await;
        assert!(
            turns.take("a", Duration::ZERO).await.is_none(),
            "the ceiling holds"
        );
        // b comes: the next turn given back is b's, though a holds five; then b is present.
        lock(&turns.inner).alone_after = ALONE_AFTER;
        let b = {
            let turns = turns.clone();
            tokio::spawn(async move { turns.take("b", LONG).await })
        };
        while turns.waiting() < 1 {
            tokio::task::yield_now().await;
        }
        let a_more = {
            let turns = turns.clone();
            tokio::spawn(async move { turns.take("a", LONG).await })
        };
        while turns.waiting() < 2 {
            tokio::task::yield_now().await;
        }
        drop(a.pop());
        let b_turn = b.await.unwrap().expect("b is served at once");
        // a is no longer alone: its turns past the count retire as it gives them back.
        drop(a.pop());
        drop(a.pop());
        drop(a.pop());
        assert!(!a_more.is_finished(), "a waits while it holds its share");
        assert_eq!(lock(&turns.inner).in_use, 2, "a's one and b's one");
        drop(a.pop());
        let a_turn = a_more
            .await
            .unwrap()
            .expect("a's waiter gets a's freed turn");
        drop((a_turn, b_turn));
        assert_eq!(lock(&turns.inner).in_use, 0);
    }
}
