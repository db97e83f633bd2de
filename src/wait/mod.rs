//! The waiting room of `BLOCK`: who waits on which key, in what order, until
//! when, and who is served next. Plain Rust over a small [`Host`] (the
//! clock, whether writes are paused, how a request is decided and a client
//! answered, a single wake-up), so the whole lifecycle of a waiter is tested
//! without a server (the property test beside this file).
//!
//! Terms:
//! - a **waiter** waits on one key (a check) or several (`RL.ALL`); its
//!   [`WaiterId`] is its place in the one arrival order;
//! - each key with waiters has a **queue**, in arrival order; only the
//!   queue's **front** may be served, and a waiter of several keys only when
//!   it is the front of each (one arrival order: no two waiters can wait for
//!   each other);
//! - a queue is **due** when its front should be tried: when the front's
//!   request can pass (its `retry_after_ms`), or at once when something
//!   changed (the key removed, room freed, the front left); the **agenda**
//!   lists due queues in the order they fell due;
//! - a waiter's **deadline** is the last millisecond at which it may be
//!   allowed; once the clock is past it, it is answered as timed out (a
//!   denial: nothing taken) and leaves.
//!
//! The rules every interleaving keeps (tested): each waiter is answered
//! exactly once, or leaves unanswered when its client went away; waiters of
//! a key are allowed in arrival order; none is allowed past its deadline;
//! nothing is tried while writes are paused; a wake-up does no more than
//! [`Host::out_of_time`] lets it (a backlog is served in slices, in order);
//! what a waiter holds goes when it leaves.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A database number.
pub type Db = i32;

/// A key's name.
pub type KeyName = Box<[u8]>;

/// A waiter: its place in the arrival order, unique for the module's life.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct WaiterId(pub u64);

/// How often a paused room looks again whether writes may go on (ms).
pub const PAUSE_POLL_MS: i64 = 10;

/// A waiting request.
pub struct Waiter<R> {
    pub id: WaiterId,
    pub db: Db,
    /// The keys it waits on (one, or `RL.ALL`'s).
    pub keys: Vec<KeyName>,
    /// The last Unix millisecond at which it may be allowed (`None`: no limit).
    pub deadline_ms: Option<i64>,
    pub request: R,
}

/// What trying a waiter's request now gave.
pub enum Turn<A> {
    /// It passed and took: answer it `A`.
    Taken(A),
    /// It cannot pass yet: try again in this many milliseconds (at least 1).
    NotYet(i64),
    /// It is answered `A` now without taking (it can never pass, an error,
    /// a redirect to another node).
    Answered(A),
}

/// What the room needs of the server.
pub trait Host<R> {
    /// A waiter's answer.
    type Answer;
    /// The server's clock (Unix ms).
    fn now_ms(&self) -> i64;
    /// Whether writes are paused (nothing may be taken or propagated).
    fn writes_paused(&self) -> bool;
    /// Whether this wake-up has had its share of the event loop.
    fn out_of_time(&self) -> bool;
    /// Decides `waiter`'s request now, taking it if it passes.
    fn take(&mut self, waiter: &Waiter<R>) -> Turn<Self::Answer>;
    /// The answer of a waiter whose wait ran out: a denial, nothing taken.
    fn timed_out(&mut self, waiter: &Waiter<R>) -> Self::Answer;
    /// Answers `waiter`'s client, which waits no more.
    fn answer(&mut self, waiter: Waiter<R>, answer: Self::Answer);
    /// Calls [`WaitRoom::wake`] at `at_ms` (Unix ms), or sooner.
    fn wake_at(&mut self, at_ms: i64);
}

/// A key's queue.
#[derive(Default)]
struct Queue {
    waiters: BTreeSet<WaiterId>,
    /// Its place on the agenda, while it is due.
    due: Option<(i64, u64)>,
}

/// Every waiter, its queues, the agenda and the deadlines.
pub struct WaitRoom<R> {
    waiters: HashMap<WaiterId, Waiter<R>>,
    /// Database -> key -> its queue (looked up by `&[u8]`, without a copy:
    /// a check asks whether its key has waiters while anyone waits).
    queues: HashMap<Db, HashMap<KeyName, Queue>>,
    /// (due ms, order it fell due) -> the queue.
    agenda: BTreeMap<(i64, u64), (Db, KeyName)>,
    /// (deadline ms, waiter).
    deadlines: BTreeSet<(i64, WaiterId)>,
    arrivals: u64,
    dues: u64,
}

impl<R> Default for WaitRoom<R> {
    fn default() -> Self {
        Self {
            waiters: HashMap::new(),
            queues: HashMap::new(),
            agenda: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            arrivals: 0,
            dues: 0,
        }
    }
}

impl<R> WaitRoom<R> {
    /// The id the next waiter will have.
    pub fn next_id(&self) -> WaiterId {
        WaiterId(self.arrivals + 1)
    }

    /// How many wait.
    pub fn len(&self) -> usize {
        self.waiters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// Whether anyone waits on `key` of `db`.
    pub fn queued(&self, db: Db, key: &[u8]) -> bool {
        self.queue(db, key).is_some()
    }

    /// When `key`'s queue is next tried (Unix ms), if it is due.
    pub fn due_at(&self, db: Db, key: &[u8]) -> Option<i64> {
        self.queue(db, key)
            .and_then(|queue| queue.due)
            .map(|(at, _)| at)
    }

    /// The keys with waiters, of `db` (every database when `None`).
    pub fn keys(&self, db: Option<Db>) -> Vec<(Db, KeyName)> {
        self.queues
            .iter()
            .filter(|(at, _)| db.is_none_or(|db| db == **at))
            .flat_map(|(at, keys)| keys.keys().map(|key| (*at, key.clone())))
            .collect()
    }

    fn queue(&self, db: Db, key: &[u8]) -> Option<&Queue> {
        self.queues.get(&db)?.get(key)
    }

    fn queue_mut(&mut self, db: Db, key: &[u8]) -> Option<&mut Queue> {
        self.queues.get_mut(&db)?.get_mut(key)
    }

    /// A waiter joins the end of the queue of each of its keys. `first_try_ms`:
    /// when its request can pass, if that is known (it was just decided);
    /// otherwise it is tried as soon as it is first. Its id is
    /// [`WaitRoom::next_id`].
    #[allow(clippy::too_many_arguments)]
    pub fn arrive<H: Host<R>>(
        &mut self,
        host: &mut H,
        db: Db,
        keys: Vec<KeyName>,
        deadline_ms: Option<i64>,
        request: R,
        first_try_ms: Option<i64>,
    ) -> WaiterId {
        self.arrivals += 1;
        let id = WaiterId(self.arrivals);
        let now = host.now_ms();
        let first_try = now.saturating_add(first_try_ms.unwrap_or(0).max(0));
        for key in &keys {
            let queue = self
                .queues
                .entry(db)
                .or_default()
                .entry(key.clone())
                .or_default();
            queue.waiters.insert(id);
            if queue.waiters.len() == 1 {
                self.schedule(db, key, first_try);
            }
        }
        if let Some(deadline) = deadline_ms {
            self.deadlines.insert((deadline, id));
        }
        self.waiters.insert(
            id,
            Waiter {
                id,
                db,
                keys,
                deadline_ms,
                request,
            },
        );
        self.arm(host);
        id
    }

    /// A waiter leaves without being answered here (its client went away,
    /// or the server answered it): it is given back, if it still waited.
    pub fn leave<H: Host<R>>(&mut self, host: &mut H, id: WaiterId) -> Option<Waiter<R>> {
        let now = host.now_ms();
        let waiter = self.remove(id, now);
        self.arm(host);
        waiter
    }

    /// Something changed on `key` (removed, overwritten, room freed): its
    /// queue is tried at once.
    pub fn changed<H: Host<R>>(&mut self, host: &mut H, db: Db, key: &[u8]) {
        let now = host.now_ms();
        self.schedule(db, key, now);
        self.arm(host);
    }

    /// Every key of `db` (all when `None`) changed at once.
    pub fn changed_all<H: Host<R>>(&mut self, host: &mut H, db: Option<Db>) {
        let now = host.now_ms();
        for (at, key) in self.keys(db) {
            self.schedule(at, &key, now);
        }
        self.arm(host);
    }

    /// The wake-up: waiters past their deadline are answered as timed out;
    /// then, unless writes are paused, the due queues are served in the
    /// order they fell due, each from its front, until one cannot pass yet;
    /// all within the host's share of time, the rest at the next wake-up.
    pub fn wake<H: Host<R>>(&mut self, host: &mut H) {
        let now = host.now_ms();
        // At least one thing is done per wake-up, whatever the time says.
        let mut worked = false;
        while let Some(&(deadline, id)) = self.deadlines.first() {
            if deadline >= now || (worked && host.out_of_time()) {
                break;
            }
            worked = true;
            if let Some(waiter) = self.remove(id, now) {
                let answer = host.timed_out(&waiter);
                host.answer(waiter, answer);
            }
        }
        if !host.writes_paused() {
            while let Some((&(due, order), _)) = self.agenda.first_key_value() {
                if due > now || (worked && host.out_of_time()) {
                    break;
                }
                worked = true;
                let Some((db, key)) = self.agenda.remove(&(due, order)) else {
                    break;
                };
                if let Some(queue) = self.queue_mut(db, &key) {
                    queue.due = None;
                }
                self.serve(host, db, &key, now, (due, order));
            }
        }
        self.arm(host);
    }

    /// Serves `key`'s queue from its front; `place` is its place on the
    /// agenda, kept if time runs out before the queue is done.
    fn serve<H: Host<R>>(&mut self, host: &mut H, db: Db, key: &[u8], now: i64, place: (i64, u64)) {
        loop {
            let Some(front) = self
                .queue(db, key)
                .and_then(|queue| queue.waiters.first().copied())
            else {
                return;
            };
            if !self.first_everywhere(front) {
                // Served from the queue where it is not first yet.
                return;
            }
            let Some(waiter) = self.waiters.get(&front) else {
                return;
            };
            // Past deadlines were answered first in this wake-up.
            match host.take(waiter) {
                Turn::Taken(answer) | Turn::Answered(answer) => {
                    if let Some(waiter) = self.remove(front, now) {
                        host.answer(waiter, answer);
                    }
                }
                Turn::NotYet(retry_ms) => {
                    self.reschedule(db, key, now.saturating_add(retry_ms.max(1)));
                    return;
                }
            }
            if host.out_of_time() {
                self.put_back(db, key, place);
                return;
            }
        }
    }

    /// Whether `id` is the front of each of its queues.
    fn first_everywhere(&self, id: WaiterId) -> bool {
        self.waiters.get(&id).is_some_and(|waiter| {
            waiter.keys.iter().all(|key| {
                self.queue(waiter.db, key)
                    .and_then(|queue| queue.waiters.first())
                    == Some(&id)
            })
        })
    }

    /// Takes a waiter out of everything; each queue it headed, if others
    /// wait in it, is tried at once; a queue left empty goes.
    fn remove(&mut self, id: WaiterId, now: i64) -> Option<Waiter<R>> {
        let waiter = self.waiters.remove(&id)?;
        if let Some(deadline) = waiter.deadline_ms {
            self.deadlines.remove(&(deadline, id));
        }
        for key in &waiter.keys {
            let Some(keys) = self.queues.get_mut(&waiter.db) else {
                continue;
            };
            let Some(queue) = keys.get_mut(key) else {
                continue;
            };
            let headed = queue.waiters.first() == Some(&id);
            queue.waiters.remove(&id);
            if queue.waiters.is_empty() {
                if let Some(place) = queue.due {
                    self.agenda.remove(&place);
                }
                keys.remove(key);
                if keys.is_empty() {
                    self.queues.remove(&waiter.db);
                }
            } else if headed {
                self.schedule(waiter.db, key, now);
            }
        }
        Some(waiter)
    }

    /// Makes `key`'s queue due at `at_ms`, or sooner if it already is.
    fn schedule(&mut self, db: Db, key: &[u8], at_ms: i64) {
        let due = self.queue(db, key).map(|queue| queue.due);
        match due {
            None => {}
            Some(Some((at, _))) if at <= at_ms => {}
            Some(_) => self.reschedule(db, key, at_ms),
        }
    }

    /// Makes `key`'s queue due at `at_ms`, whenever it was due before.
    fn reschedule(&mut self, db: Db, key: &[u8], at_ms: i64) {
        self.dues += 1;
        self.put_back(db, key, (at_ms, self.dues));
    }

    /// Puts `key`'s queue on the agenda at `place`.
    fn put_back(&mut self, db: Db, key: &[u8], place: (i64, u64)) {
        let Some(queue) = self.queue_mut(db, key) else {
            return;
        };
        if let Some(old) = queue.due.replace(place) {
            self.agenda.remove(&old);
        }
        self.agenda.insert(place, (db, Box::from(key)));
    }

    /// Asks the host to wake the room when there is something to do next: a
    /// deadline passing (the millisecond after it), a queue falling due (or,
    /// while writes are paused, a look again later), or at once when the
    /// last wake-up ran out of time.
    fn arm<H: Host<R>>(&self, host: &mut H) {
        let now = host.now_ms();
        let deadline = self
            .deadlines
            .first()
            .map(|(deadline, _)| deadline.saturating_add(1));
        let due = self.agenda.keys().next().map(|(due, _)| {
            if host.writes_paused() {
                (*due).max(now.saturating_add(PAUSE_POLL_MS))
            } else {
                *due
            }
        });
        let next = match (deadline, due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(at) = next {
            host.wake_at(at.max(now));
        }
    }

    /// Checks the room's own bookkeeping (tests): every waiter is in each of
    /// its queues and the deadlines; every queue holds only waiters, is
    /// non-empty, and is on the agenda exactly when it says it is.
    #[cfg(test)]
    fn check_consistent(&self) -> Result<(), String> {
        for (id, waiter) in &self.waiters {
            for key in &waiter.keys {
                let queue = self
                    .queue(waiter.db, key)
                    .ok_or(format!("{id:?}: no queue"))?;
                if !queue.waiters.contains(id) {
                    return Err(format!("{id:?} missing from its queue"));
                }
            }
            if let Some(deadline) = waiter.deadline_ms {
                if !self.deadlines.contains(&(deadline, *id)) {
                    return Err(format!("{id:?}: deadline not listed"));
                }
            }
        }
        let queues = || {
            self.queues.iter().flat_map(|(db, keys)| {
                keys.iter()
                    .map(move |(key, queue)| ((*db, key.clone()), queue))
            })
        };
        if self.queues.values().any(HashMap::is_empty) {
            return Err("an empty database of queues was kept".into());
        }
        for (slot, queue) in queues() {
            if queue.waiters.is_empty() {
                return Err("an empty queue was kept".into());
            }
            if queue
                .waiters
                .iter()
                .any(|id| !self.waiters.contains_key(id))
            {
                return Err("a queue holds one who left".into());
            }
            if let Some(place) = queue.due {
                if self.agenda.get(&place) != Some(&slot) {
                    return Err("a due queue is not on the agenda".into());
                }
            }
        }
        if self.agenda.len() != queues().filter(|(_, q)| q.due.is_some()).count() {
            return Err("the agenda lists a queue that is not due".into());
        }
        if self.deadlines.len()
            != self
                .waiters
                .values()
                .filter(|w| w.deadline_ms.is_some())
                .count()
        {
            return Err("a deadline outlived its waiter".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
