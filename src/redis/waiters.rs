//! `BLOCK ms`: a request that cannot pass now waits on the server, and is
//! taken, in its turn, as soon as the limit allows it.
//!
//! Each key with waiters has a queue, in arrival order, and at most one
//! timer: due when the first waiter's request can pass (its `retry_after_ms`,
//! which every algorithm knows exactly), or at once when something freed
//! room (`RL.RELEASE`, `RL.SETSTATE`), the key was removed (deleted,
//! expired, evicted, overwritten, renamed away, flushed, swapped) or the
//! first waiter left. The timer serves the queue: it decides the first
//! waiter's request then and there, against what the key holds now (so
//! nothing can come between the decision and the taking), propagates it as
//! a replay of its command, and unblocks it with its reply; then the next,
//! until one cannot pass yet, whose own `retry_after_ms` sets the timer
//! again. A refill or a release costs O(1) plus the waiters it serves,
//! whatever the queue's length. While a key has waiters, no request jumps
//! ahead of them: one with `BLOCK` joins the end of the queue, one without
//! is denied (`super::respond::respond`).
//!
//! While writes are paused (`CLIENT PAUSE WRITE|ALL`, `FAILOVER`, `CLUSTER
//! FAILOVER`, `SHUTDOWN` with replicas) nobody is served: a timer that falls
//! due then puts its key aside, and the keys put aside are served, in the
//! order they fell due, when the pause ends. Waiters may still time out (a
//! denial changes nothing).
//!
//! A request of `RL.ALL` waits in the queue of each of its keys and goes
//! when it is first in all of them (queues are in one arrival order, so two
//! such requests cannot wait for each other).
//!
//! A waiter that times out, is killed, disconnects or is unblocked
//! (`CLIENT UNBLOCK`) leaves its queues at once, taking nothing, and its
//! memory (its command's words and parsed request: a few hundred bytes) is
//! freed then; a queue left empty goes with its timer.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::ffi::c_int;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;

use redis_module::raw;

use super::config::on_denied;
use super::ffi::args::OwnedNames;
use super::ffi::block::{
    block, create_timer, stop_timer, unblock, Blocked, ClientId, Timer, TimerId, Waiting,
};
use super::ffi::{detached, now_ms, on_flush, on_swap, writes_paused, Args, Ctx, KeyName, Status};
use super::key::writing_own;
use super::outcome::Outcome;
use super::replicate::Run;
use super::request::{answer, Request};
use super::sketch;
use super::stats::{WAITING, WAITS_ALLOWED, WAITS_TIMED_OUT};
use crate::algorithms::Mode;
use crate::error::CommandError;

/// How often a pause is looked at, while keys wait for it to end (ms).
const PAUSE_POLL_MS: i64 = 10;

/// A waiting client.
struct Waiter {
    /// Redis's handle of the blocked client, until it is unblocked.
    client: Cell<Option<Blocked>>,
    /// Which client it is.
    id: ClientId,
    /// Its place in the arrival order (the same in each of its queues).
    arrival: u64,
    /// Its database, and the keys it waits on.
    db: c_int,
    keys: Vec<Box<[u8]>>,
    /// The command as sent, for its replay when it is served.
    words: Vec<Vec<u8>>,
    request: Request,
    /// Served, timed out, unblocked or gone: waiting no more.
    done: Cell<bool>,
}

/// The waiters of one key, and the timer that serves them next.
#[derive(Default)]
struct Queue {
    /// By arrival: a waiter that leaves is taken out at once.
    waiters: BTreeMap<u64, Rc<Waiter>>,
    /// The timer's id and when it is due (Unix ms).
    timer: Option<(TimerId<TimerKey>, i64)>,
}

impl Queue {
    /// The first waiter.
    fn first(&self) -> Option<Rc<Waiter>> {
        self.waiters.values().next().cloned()
    }

    fn is_first(&self, waiter: &Rc<Waiter>) -> bool {
        self.waiters
            .values()
            .next()
            .is_some_and(|first| Rc::ptr_eq(first, waiter))
    }
}

#[derive(Default)]
struct Queues {
    /// Database -> key -> queue.
    by_db: HashMap<c_int, HashMap<Box<[u8]>, Queue>>,
    /// The waiters by their blocked-client handle (timeouts, disconnects).
    by_client: HashMap<ClientId, Rc<Waiter>>,
    /// The next arrival number.
    arrivals: u64,
    /// Keys whose turn came while writes were paused, in that order.
    paused: Vec<(c_int, Box<[u8]>)>,
    /// Whether a timer watches for the pause to end.
    pause_timer: bool,
}

impl Queues {
    fn queue(&mut self, db: c_int, key: &[u8]) -> Option<&mut Queue> {
        self.by_db.get_mut(&db)?.get_mut(key)
    }

    /// Takes `waiter` out of its queues; a queue left empty goes, and its
    /// timer's id is returned, to be stopped.
    fn remove(&mut self, waiter: &Waiter) -> Vec<TimerId<TimerKey>> {
        let mut timers = Vec::new();
        self.by_client.remove(&waiter.id);
        if self.by_client.capacity() > 64 && self.by_client.len() * 4 < self.by_client.capacity() {
            self.by_client.shrink_to_fit();
        }
        let Some(keys) = self.by_db.get_mut(&waiter.db) else {
            return timers;
        };
        for key in &waiter.keys {
            let Some(queue) = keys.get_mut(key) else {
                continue;
            };
            queue.waiters.remove(&waiter.arrival);
            if queue.waiters.is_empty() {
                timers.extend(queue.timer.take().map(|(id, _)| id));
                keys.remove(key);
            }
        }
        if keys.is_empty() {
            self.by_db.remove(&waiter.db);
        } else if keys.capacity() > 64 && keys.len() * 4 < keys.capacity() {
            keys.shrink_to_fit();
        }
        timers
    }
}

thread_local! {
    /// Commands, timers and callbacks all run on Redis's main thread.
    static QUEUES: RefCell<Queues> = RefCell::new(Queues::default());
}

fn with_queues<R>(f: impl FnOnce(&mut Queues) -> R) -> R {
    QUEUES.with(|q| f(&mut q.borrow_mut()))
}

fn selected_db(ctx: Ctx<'_>) -> c_int {
    ctx.selected_db()
}

/// Whether the running command may block its client: not in `MULTI`, a
/// script, or any client that must not block (there, `BLOCK` answers as if
/// its wait had run out, as Redis's own blocking commands do).
pub fn can_block(ctx: Ctx<'_>) -> bool {
    let not = raw::REDISMODULE_CTX_FLAGS_MULTI
        | raw::REDISMODULE_CTX_FLAGS_LUA
        | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING
        | raw::REDISMODULE_CTX_FLAGS_REPLICATED
        | raw::REDISMODULE_CTX_FLAGS_LOADING;
    ctx.flags() & not as c_int == 0
}

/// Whether clients wait on any of `keys`.
pub fn queued(ctx: Ctx<'_>, keys: &[KeyName<'_>]) -> bool {
    if WAITING.load(Relaxed) == 0 {
        return false;
    }
    let db = selected_db(ctx);
    with_queues(|queues| {
        keys.iter().any(|key| {
            queues
                .queue(db, key.bytes())
                .is_some_and(|queue| !queue.waiters.is_empty())
        })
    })
}

/// Milliseconds until the waiters of `keys` are next served (at least 1):
/// the earliest a request behind them may try again.
pub fn next_turn_ms(ctx: Ctx<'_>, keys: &[KeyName<'_>]) -> i64 {
    let db = selected_db(ctx);
    let now = now_ms();
    with_queues(|queues| {
        keys.iter()
            .filter_map(|key| queues.queue(db, key.bytes())?.timer)
            .map(|(_, due)| due - now)
            .min()
            .unwrap_or(1)
            .max(1)
    })
}

/// Blocks the running command's client on `keys` for at most `block_ms` (0:
/// no limit), at the end of their queues. `retry_after_ms`: when its request
/// can pass, if it was decided just now (it was not when it queued behind
/// others). No reply now: it comes when the wait ends.
pub fn wait(
    ctx: Ctx<'_>,
    args: &Args<'_>,
    request: Request,
    keys: &[KeyName<'_>],
    block_ms: u64,
    retry_after_ms: Option<i64>,
) -> Status {
    let Some(client) = block::<Waiters>(ctx, i64::try_from(block_ms).unwrap_or(i64::MAX)) else {
        return ctx.reply_error(&CommandError::syntax("this client cannot wait here"));
    };
    let id = client.id();
    let db = selected_db(ctx);
    let arrival = with_queues(|queues| {
        queues.arrivals += 1;
        queues.arrivals
    });
    let waiter = Rc::new(Waiter {
        client: Cell::new(Some(client)),
        id,
        arrival,
        db,
        keys: keys.iter().map(|key| key.bytes().into()).collect(),
        words: (0..args.len())
            .filter_map(|i| args.bytes(i))
            .map(<[u8]>::to_vec)
            .collect(),
        request,
        done: Cell::new(false),
    });
    let first_in = with_queues(|queues| {
        queues.by_client.insert(id, waiter.clone());
        let mut first_in = Vec::new();
        for key in &waiter.keys {
            let queue = queues
                .by_db
                .entry(db)
                .or_default()
                .entry(key.clone())
                .or_default();
            queue.waiters.insert(arrival, waiter.clone());
            if queue.is_first(&waiter) {
                first_in.push(key.clone());
            }
        }
        first_in
    });
    WAITING.fetch_add(1, Relaxed);
    let due = now_ms() + retry_after_ms.unwrap_or(0).max(0);
    for key in first_in {
        schedule(ctx, db, &key, due);
    }
    Status
}

/// Something freed room on `key` (a lease given back, a state set): its
/// waiters are served at once.
pub fn freed(ctx: Ctx<'_>, key: KeyName<'_>) {
    if WAITING.load(Relaxed) > 0 {
        schedule(ctx, selected_db(ctx), key.bytes(), now_ms());
    }
}

/// `key` of `db` left the keyspace (deleted, expired, evicted, overwritten,
/// renamed or moved away): its waiters are decided at once against what it
/// holds now. Called from the type's `unlink` callback, which has no
/// context of its own and runs inside whatever removed the key: only a
/// timer is set here.
pub fn removed(db: c_int, key: &[u8]) {
    if WAITING.load(Relaxed) == 0 || writing_own() {
        return;
    }
    if let Some(ctx) = detached() {
        schedule(ctx, db, key, now_ms());
    }
}

/// Every key of `db` (all databases when `None`) changed at once (`FLUSHDB`,
/// `FLUSHALL`, `SWAPDB`): their waiters are decided at once.
pub fn all_changed(ctx: Ctx<'_>, db: Option<c_int>) {
    if WAITING.load(Relaxed) == 0 {
        return;
    }
    let keys: Vec<(c_int, Box<[u8]>)> = with_queues(|queues| {
        queues
            .by_db
            .iter()
            .filter(|(at, _)| db.is_none_or(|db| db == **at))
            .flat_map(|(at, keys)| keys.keys().map(move |key| (*at, key.clone())))
            .collect()
    });
    let now = now_ms();
    for (db, key) in keys {
        schedule(ctx, db, &key, now);
    }
}

/// Subscribes to the server's events that change every key of a database
/// at once, and has the types tell of keys removed (at load time).
pub fn init(ctx: Ctx<'_>) -> bool {
    super::ffi::init_detached(ctx);
    super::ffi::types::on_removed(|| WAITING.load(Relaxed) > 0, removed);
    on_flush(ctx, flushed) && on_swap(ctx, swapped)
}

/// `FLUSHDB` (its database) or `FLUSHALL` (`None`).
fn flushed(ctx: Ctx<'_>, db: Option<c_int>) {
    all_changed(ctx, db);
}

/// `SWAPDB first second`.
fn swapped(ctx: Ctx<'_>, first: c_int, second: c_int) {
    all_changed(ctx, Some(first));
    all_changed(ctx, Some(second));
}

/// Stops a timer of ours that has not fired, freeing what it carries.
fn stop(ctx: Ctx<'_>, id: TimerId<TimerKey>) {
    drop(stop_timer(ctx, id));
}

/// Makes the timer of `key`'s queue due at `due_ms`, or sooner if it is.
fn schedule(ctx: Ctx<'_>, db: c_int, key: &[u8], due_ms: i64) {
    let stale = with_queues(|queues| {
        let queue = queues.queue(db, key)?;
        match queue.timer {
            Some((_, at)) if at <= due_ms => None,
            _ => Some(queue.timer.take()),
        }
    });
    let Some(stale) = stale else {
        return;
    };
    if let Some((id, _)) = stale {
        stop(ctx, id);
    }
    let delay = due_ms.saturating_sub(now_ms()).max(0);
    let id = create_timer(
        ctx,
        delay,
        TimerKey {
            db,
            key: key.into(),
        },
    );
    with_queues(|queues| {
        if let Some(queue) = queues.queue(db, key) {
            queue.timer = Some((id, due_ms));
        }
    });
}

/// The queue a timer serves.
struct TimerKey {
    db: c_int,
    key: Box<[u8]>,
}

impl Timer for TimerKey {
    fn fire(self, ctx: Ctx<'_>) {
        let target = self;
        with_queues(|queues| {
            if let Some(queue) = queues.queue(target.db, &target.key) {
                queue.timer = None;
            }
        });
        if writes_paused() {
            put_aside(ctx, target.db, target.key);
            return;
        }
        serve(ctx, target.db, &target.key);
    }
}

/// Writes are paused: `key`'s turn waits for the pause to end.
fn put_aside(ctx: Ctx<'_>, db: c_int, key: Box<[u8]>) {
    let watch = with_queues(|queues| {
        if !queues.paused.iter().any(|(at, k)| *at == db && *k == key) {
            queues.paused.push((db, key));
        }
        !std::mem::replace(&mut queues.pause_timer, true)
    });
    if watch {
        watch_pause(ctx);
    }
}

fn watch_pause(ctx: Ctx<'_>) {
    create_timer(ctx, PAUSE_POLL_MS, PauseWatch);
}

/// The timer that watches a pause.
struct PauseWatch;

/// While writes stay paused, looks again later; then serves the keys put
/// aside, in the order their turns came.
impl Timer for PauseWatch {
    fn fire(self, ctx: Ctx<'_>) {
        if writes_paused() {
            watch_pause(ctx);
            return;
        }
        let keys = with_queues(|queues| {
            queues.pause_timer = false;
            std::mem::take(&mut queues.paused)
        });
        for (db, key) in keys {
            let idle = with_queues(|queues| {
                queues
                    .queue(db, &key)
                    .is_some_and(|queue| queue.timer.is_none())
            });
            if idle {
                serve(ctx, db, &key);
            }
        }
    }
}

/// Serves `key`'s queue from the front: each waiter whose request passes
/// now is taken and unblocked; the first that cannot sets the timer.
fn serve(ctx: Ctx<'_>, db: c_int, key: &[u8]) {
    // The waiters' keys are in `db`.
    ctx.select_db(db);
    loop {
        // A queue goes as its last waiter leaves (`Queues::remove`).
        let first = with_queues(|queues| queues.queue(db, key)?.first());
        let Some(waiter) = first else {
            return;
        };
        if !first_everywhere(&waiter) {
            // Behind another key's waiter: served from there.
            return;
        }
        let names = OwnedNames::new(&waiter.keys);
        let (command, glue_at) = waiter.request.replayed_as();
        let run = Run::woken(ctx, command, glue_at, &waiter.words);
        let decided = waiter.request.decide(&run, &names.key_names(), Mode::Take);
        run.propagate(None, waiter.request.drawn_id());
        match decided {
            Ok(outcome) if outcome.decision().allowed => {
                waiter.request.counter().count(true, false);
                WAITS_ALLOWED.fetch_add(1, Relaxed);
                finish(ctx, &waiter, Ok(outcome));
                let now = now_ms();
                for other in waiter.keys.iter().filter(|k| ***k != *key) {
                    schedule(ctx, db, other, now);
                }
            }
            Ok(outcome) if outcome.decision().retry_after_ms < 0 => {
                // Changed parameters made it impossible: answered now, a
                // denial like any other.
                waiter.request.counter().count(false, false);
                for key in outcome.denying(&names.key_names()) {
                    on_denied(ctx, key, false);
                    sketch::denied(key);
                }
                finish(ctx, &waiter, Ok(outcome));
            }
            Ok(outcome) => {
                let retry = outcome.decision().retry_after_ms.max(1);
                schedule(ctx, db, key, now_ms() + retry);
                return;
            }
            Err(error) => finish(ctx, &waiter, Err(error)),
        }
    }
}

/// Whether `waiter` is the first still waiting in each of its queues.
fn first_everywhere(waiter: &Rc<Waiter>) -> bool {
    waiter.keys.len() == 1
        || with_queues(|queues| {
            waiter.keys.iter().all(|key| {
                queues
                    .queue(waiter.db, key)
                    .is_some_and(|queue| queue.is_first(waiter))
            })
        })
}

/// Ends `waiter`'s wait: it is unblocked, and replied `result` (an outcome,
/// or an error), or nothing when it ended otherwise (`None`).
fn finish(ctx: Ctx<'_>, waiter: &Rc<Waiter>, result: Result<Outcome, CommandError>) {
    end(ctx, waiter);
    if let Some(client) = waiter.client.take() {
        unblock::<Waiters>(client, result);
    }
}

/// Marks `waiter` as waiting no more, and takes it out of its queues.
fn end(ctx: Ctx<'_>, waiter: &Rc<Waiter>) {
    if !waiter.done.replace(true) {
        WAITING.fetch_sub(1, Relaxed);
        for id in with_queues(|queues| queues.remove(waiter)) {
            stop(ctx, id);
        }
    }
}

/// The waiter a blocked client is, if it still waits.
fn waiter_of(client: ClientId) -> Option<Rc<Waiter>> {
    with_queues(|queues| queues.by_client.get(&client).cloned())
}

/// A waiter that left: if it was first in a queue, the next may go now.
fn left(ctx: Ctx<'_>, waiter: &Rc<Waiter>) {
    let first_in: Vec<Box<[u8]>> = with_queues(|queues| {
        waiter
            .keys
            .iter()
            .filter(|key| {
                queues
                    .queue(waiter.db, key)
                    .is_some_and(|queue| queue.is_first(waiter))
            })
            .cloned()
            .collect()
    });
    end(ctx, waiter);
    let now = now_ms();
    for key in first_in {
        schedule(ctx, waiter.db, &key, now);
    }
}

/// The callbacks of a waiting client.
struct Waiters;

impl Waiting for Waiters {
    /// A served waiter's outcome, or its error.
    type Reply = Result<Outcome, CommandError>;

    /// Replies to a served waiter.
    fn reply(ctx: Ctx<'_>, reply: Option<&Self::Reply>) -> Status {
        match reply {
            Some(Ok(outcome)) => outcome.reply(ctx),
            Some(Err(error)) => ctx.reply_error(error),
            None => ctx.reply_null(),
        }
    }

    /// The wait ran out (or `CLIENT UNBLOCK`): the denied reply, from the
    /// state as it is now; nothing taken.
    fn timed_out(ctx: Ctx<'_>, client: ClientId) -> Status {
        let Some(waiter) = waiter_of(client) else {
            return ctx.reply_null();
        };
        // Redis unblocks it after this: the handle is not used again.
        waiter.client.set(None);
        left(ctx, &waiter);
        WAITS_TIMED_OUT.fetch_add(1, Relaxed);
        let names = OwnedNames::new(&waiter.keys);
        let keys = names.key_names();
        let (command, glue_at) = waiter.request.replayed_as();
        let run = Run::live(ctx, command, glue_at);
        match waiter.request.decide(&run, &keys, Mode::Peek) {
            Ok(outcome) => answer(&run, &waiter.request, &keys, &outcome.denied(1)),
            Err(error) => ctx.reply_error(&error),
        }
    }

    /// The client went away (or was killed) while it waited: it took
    /// nothing.
    fn disconnected(ctx: Ctx<'_>, client: ClientId) {
        if let Some(waiter) = waiter_of(client) {
            waiter.client.set(None);
            left(ctx, &waiter);
        }
    }
}
