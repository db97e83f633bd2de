//! `BLOCK ms`: a request that cannot pass now waits on the server, and is
//! taken, in its turn, as soon as the limit allows it.
//!
//! Who waits, in what order and until when is the waiting room's
//! (`crate::wait`, plain Rust, tested without a server). This file is its
//! host on the server: the clock and pauses, one module timer for the room's
//! next wake-up, deciding a waiter's request against what its keys hold now
//! (so nothing can come between the decision and the taking), propagating it
//! as a replay of its command, and answering its client through the FFI
//! room that owns the blocked clients' handles (`ffi::block`): each is
//! unblocked exactly once, whatever order Redis's callbacks come in.
//!
//! While writes are paused (`CLIENT PAUSE WRITE|ALL`, `FAILOVER`, `CLUSTER
//! FAILOVER`, `SHUTDOWN` with replicas) nobody is served; waiters still time
//! out (a denial changes nothing). A wake-up holds the event loop at most
//! [`SLICE`]; a backlog goes on at the next turn, in order.
//!
//! In a cluster, a waiter whose keys have left this node (resharding moves
//! them with `MIGRATE`, which removes them here) is answered with where they
//! went (`ASK`, `MOVED`, `TRYAGAIN`: `ffi::cluster::redirect_for`), never
//! decided against a fresh key on a node that no longer serves its slot.
//!
//! Events that come while the room is busy (a key removed by the server
//! while a waiter's request is decided) are kept aside and given to the room
//! at its next wake-up, at once.

use std::cell::{Cell, RefCell};
use std::ffi::c_int;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::engine::decide::decide;
use super::ffi::args::OwnedNames;
use super::ffi::block::{self, create_timer, stop_timer, unblock, Timer, TimerId, Waiting};
use super::ffi::cluster::redirect_for;
use super::ffi::{detached, now_ms, on_flush, on_swap, writes_paused, Args, Ctx, KeyName, Status};
use super::key::writing_own;
use super::outcome::{tally, Outcome};
use super::replicate::Run;
use super::request::Request;
use super::stats::{WAITING, WAITS_ALLOWED, WAITS_TIMED_OUT};
use crate::algorithms::Mode;
use crate::error::CommandError;
use crate::wait::{Host, Turn, WaitRoom, Waiter, WaiterId};

/// The longest a wake-up holds the event loop before it lets other clients
/// in (a backlog of due waiters is served over several turns).
pub const SLICE: Duration = Duration::from_millis(1);

/// A waiting request: the command as sent (for its replay) and as parsed.
struct Parked {
    words: Vec<Vec<u8>>,
    request: Request,
}

/// A waiter's answer: its outcome, or an error.
type Answer = Result<Outcome, CommandError>;

/// Something that changed keys while the room was busy.
enum Event {
    Changed(c_int, Box<[u8]>),
    ChangedAll(Option<c_int>),
    Left(WaiterId),
}

thread_local! {
    /// Commands, timers and callbacks all run on Redis's main thread.
    static ROOM: RefCell<WaitRoom<Parked>> = RefCell::new(WaitRoom::default());
    static PENDING: RefCell<Vec<Event>> = const { RefCell::new(Vec::new()) };
    /// The room's one timer, and when it is due (Unix ms).
    static TIMER: Cell<Option<(TimerId<Wake>, i64)>> = const { Cell::new(None) };
}

/// The server, as the room's host, for one call.
struct Server<'a> {
    ctx: Ctx<'a>,
    started: Instant,
}

impl<'a> Server<'a> {
    fn new(ctx: Ctx<'a>) -> Self {
        Self {
            ctx,
            started: Instant::now(),
        }
    }
}

impl Host<Parked> for Server<'_> {
    type Answer = Answer;

    fn now_ms(&self) -> i64 {
        now_ms()
    }

    fn writes_paused(&self) -> bool {
        writes_paused()
    }

    fn out_of_time(&self) -> bool {
        self.started.elapsed() >= SLICE
    }

    fn take(&mut self, waiter: &Waiter<Parked>) -> Turn<Answer> {
        let ctx = self.ctx;
        ctx.select_db(waiter.db);
        let names = OwnedNames::new(&waiter.keys);
        let keys = names.key_names();
        // In a cluster, a waiter whose keys left this node (resharding) is
        // sent where they went: never decided, nor a key written, here.
        if let Some(redirect) = redirect_for(ctx, &keys) {
            return Turn::Answered(Err(redirect));
        }
        let parked = &waiter.request;
        let (command, glue_at) = parked.request.replayed_as();
        let run = Run::woken(ctx, command, glue_at, &parked.words);
        let decided = decide(&run, &parked.request, &keys, Mode::Take);
        run.propagate(None, parked.request.drawn_id());
        match decided {
            Ok(outcome) if outcome.decision().allowed => {
                tally(ctx, &parked.request, &keys, &outcome);
                WAITS_ALLOWED.fetch_add(1, Relaxed);
                Turn::Taken(Ok(outcome))
            }
            Ok(outcome) if outcome.decision().retry_after_ms < 0 => {
                // Changed parameters made it impossible: answered now, a
                // denial like any other.
                tally(ctx, &parked.request, &keys, &outcome);
                Turn::Answered(Ok(outcome))
            }
            Ok(outcome) => Turn::NotYet(outcome.decision().retry_after_ms.max(1)),
            Err(error) => Turn::Answered(Err(error)),
        }
    }

    fn timed_out(&mut self, waiter: &Waiter<Parked>) -> Answer {
        self.ctx.select_db(waiter.db);
        timed_out_answer(self.ctx, waiter)
    }

    fn answer(&mut self, waiter: Waiter<Parked>, answer: Answer) {
        unblock::<Waiters>(waiter.id.0, answer);
    }

    fn wake_at(&mut self, at_ms: i64) {
        set_timer(self.ctx, at_ms);
    }
}

/// The answer of a waiter whose wait ended before its turn: denied, from
/// the state as it is now, nothing taken; counted and announced as a
/// denial.
fn timed_out_answer(ctx: Ctx<'_>, waiter: &Waiter<Parked>) -> Answer {
    WAITS_TIMED_OUT.fetch_add(1, Relaxed);
    let names = OwnedNames::new(&waiter.keys);
    let keys = names.key_names();
    if let Some(redirect) = redirect_for(ctx, &keys) {
        return Err(redirect);
    }
    let request = &waiter.request.request;
    let (command, glue_at) = request.replayed_as();
    let run = Run::live(ctx, command, glue_at);
    let outcome = decide(&run, request, &keys, Mode::Peek)?.denied(1);
    tally(ctx, request, &keys, &outcome);
    Ok(outcome)
}

/// Runs `f` on the room with the server as its host; `None` when the room
/// is busy (a call from inside one of its own).
fn with_room<R>(
    ctx: Ctx<'_>,
    f: impl FnOnce(&mut WaitRoom<Parked>, &mut Server<'_>) -> R,
) -> Option<R> {
    let done = ROOM.with(|room| {
        let mut room = room.try_borrow_mut().ok()?;
        let mut server = Server::new(ctx);
        let result = f(&mut room, &mut server);
        WAITING.store(room.len(), Relaxed);
        Some(result)
    });
    done
}

/// Gives `event` to the room now, or at its next wake-up (at once) when it
/// is busy.
fn tell(ctx: Ctx<'_>, event: Event) {
    let told = with_room(ctx, |room, server| apply(room, server, &event));
    if told.is_none() {
        PENDING.with(|pending| pending.borrow_mut().push(event));
        set_timer(ctx, now_ms());
    }
}

fn apply(room: &mut WaitRoom<Parked>, server: &mut Server<'_>, event: &Event) {
    match event {
        Event::Changed(db, key) => room.changed(server, *db, key),
        Event::ChangedAll(db) => room.changed_all(server, *db),
        Event::Left(id) => drop(room.leave(server, *id)),
    }
}

/// Makes the room's timer due at `at_ms`, or sooner if it is.
fn set_timer(ctx: Ctx<'_>, at_ms: i64) {
    let current = TIMER.get();
    if current.is_some_and(|(_, due)| due <= at_ms) {
        return;
    }
    if let Some((id, _)) = current {
        let _stopped = stop_timer(ctx, id);
    }
    let id = create_timer(ctx, at_ms.saturating_sub(now_ms()).max(0), Wake);
    TIMER.set(Some((id, at_ms)));
}

/// The room's timer.
struct Wake;

impl Timer for Wake {
    fn fire(self, ctx: Ctx<'_>) {
        TIMER.set(None);
        let pending = PENDING.with(|pending| std::mem::take(&mut *pending.borrow_mut()));
        with_room(ctx, |room, server| {
            for event in &pending {
                apply(room, server, event);
            }
            room.wake(server);
        });
    }
}

/// Whether the running command may block its client: not in `MULTI`, a
/// script, or any client that must not block (there, `BLOCK` answers as if
/// its wait had run out, as Redis's own blocking commands do).
pub fn can_block(ctx: Ctx<'_>) -> bool {
    block::can_block(ctx)
}

/// Whether clients wait on any of `keys`.
pub fn queued(ctx: Ctx<'_>, keys: &[KeyName<'_>]) -> bool {
    if WAITING.load(Relaxed) == 0 {
        return false;
    }
    let db = ctx.selected_db();
    ROOM.with(|room| {
        room.try_borrow()
            .is_ok_and(|room| keys.iter().any(|key| room.queued(db, key.bytes())))
    })
}

/// Milliseconds until the waiters of `keys` are next served (at least 1):
/// the earliest a request behind them may try again.
pub fn next_turn_ms(ctx: Ctx<'_>, keys: &[KeyName<'_>]) -> i64 {
    let db = ctx.selected_db();
    let now = now_ms();
    ROOM.with(|room| {
        let Ok(room) = room.try_borrow() else {
            return 1;
        };
        keys.iter()
            .filter_map(|key| room.due_at(db, key.bytes()))
            .map(|due| due - now)
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
    let db = ctx.selected_db();
    let parked = Parked {
        words: (0..args.len())
            .filter_map(|i| args.bytes(i))
            .map(<[u8]>::to_vec)
            .collect(),
        request,
    };
    let keys: Vec<Box<[u8]>> = keys.iter().map(|key| key.bytes().into()).collect();
    let deadline = (block_ms > 0)
        .then(|| now_ms().saturating_add(i64::try_from(block_ms).unwrap_or(i64::MAX)));
    let arrived = with_room(ctx, |room, server| {
        if !block::block::<Waiters>(ctx, room.next_id().0) {
            return false;
        }
        room.arrive(server, db, keys, deadline, parked, retry_after_ms);
        true
    });
    match arrived {
        Some(true) => Status,
        _ => ctx.reply_error(&CommandError::syntax("this client cannot wait here")),
    }
}

/// Something freed room on `key` (a lease given back, a state set): its
/// waiters are served at once.
pub fn freed(ctx: Ctx<'_>, key: KeyName<'_>) {
    if WAITING.load(Relaxed) > 0 {
        tell(ctx, Event::Changed(ctx.selected_db(), key.bytes().into()));
    }
}

/// `key` of `db` left the keyspace (deleted, expired, evicted, overwritten,
/// renamed or moved away): its waiters are decided at once against what it
/// holds now. Called from the type's `unlink` callback, which has no
/// context of its own and runs inside whatever removed the key.
pub fn removed(db: c_int, key: &[u8]) {
    if WAITING.load(Relaxed) == 0 || writing_own() {
        return;
    }
    if let Some(ctx) = detached() {
        tell(ctx, Event::Changed(db, key.into()));
    }
}

/// Every key of `db` (all databases when `None`) changed at once (`FLUSHDB`,
/// `FLUSHALL`, `SWAPDB`): their waiters are decided at once.
pub fn all_changed(ctx: Ctx<'_>, db: Option<c_int>) {
    if WAITING.load(Relaxed) > 0 {
        tell(ctx, Event::ChangedAll(db));
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

/// The callbacks of a waiting client.
struct Waiters;

impl Waiting for Waiters {
    type Reply = Answer;

    /// Replies to an answered waiter.
    fn reply(ctx: Ctx<'_>, reply: Option<&Answer>) -> Status {
        match reply {
            Some(Ok(outcome)) => outcome.reply(ctx),
            Some(Err(error)) => ctx.reply_error(error),
            None => ctx.reply_null(),
        }
    }

    /// `CLIENT UNBLOCK`: the wait ends now, answered as timed out.
    fn unblocked(ctx: Ctx<'_>, id: u64) -> Status {
        let left = with_room(ctx, |room, server| room.leave(server, WaiterId(id)));
        match left {
            Some(Some(waiter)) => match timed_out_answer(ctx, &waiter) {
                Ok(outcome) => outcome.reply(ctx),
                Err(error) => ctx.reply_error(&error),
            },
            Some(None) => ctx.reply_null(),
            None => {
                tell(ctx, Event::Left(WaiterId(id)));
                ctx.reply_null()
            }
        }
    }

    /// The client went away (or was killed, or the server answered it): it
    /// took nothing, and leaves.
    fn disconnected(ctx: Ctx<'_>, id: u64) {
        tell(ctx, Event::Left(WaiterId(id)));
    }
}
