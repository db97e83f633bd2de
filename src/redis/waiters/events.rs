//! What changed keys under the waiters, told to the room: room freed on a
//! key (a lease given back, a state set), a key removed by the server
//! (deleted, expired, evicted, overwritten, renamed, moved away), every
//! key of a database at once (`FLUSHDB`, `FLUSHALL`, `SWAPDB`). Their
//! waiters are decided at once.
//!
//! An event that comes while the room is busy (a key removed by the server
//! while a waiter's request is decided) is kept aside and given to the room
//! at its next wake-up, which is made due at once.

use std::cell::RefCell;
use std::ffi::c_int;
use std::sync::atomic::Ordering::Relaxed;

use super::super::ffi::{detached, now_ms, Ctx, KeyName, KeyToken};
use super::super::key::writing_own;
use super::super::stats::WAITING;
use super::room::with_room;
use super::serving::Server;
use super::timer::set_timer;
use super::waiter::Parked;
use crate::wait::{WaitRoom, WaiterId};

/// Something that changed keys, or a waiter that left.
pub enum Event {
    Changed(c_int, Box<[u8]>),
    ChangedAll(Option<c_int>),
    Left(WaiterId),
}

thread_local! {
    /// The events that came while the room was busy, for its next wake-up.
    static PENDING: RefCell<Vec<Event>> = const { RefCell::new(Vec::new()) };
}

/// Gives `event` to the room now (the call's `token` lent to the keys its
/// waiters' turns open), or at its next wake-up (at once) when it is busy.
pub fn tell(ctx: Ctx<'_>, token: &mut KeyToken, event: Event) {
    let told = with_room(ctx, token, |room, server| apply(room, server, &event));
    if told.is_none() {
        defer(ctx, event);
    }
}

/// Gives `event` to the room.
pub fn apply(room: &mut WaitRoom<Parked>, server: &mut Server<'_>, event: &Event) {
    match event {
        Event::Changed(db, key) => room.changed(server, *db, key),
        Event::ChangedAll(db) => room.changed_all(server, *db),
        Event::Left(id) => drop(room.leave(server, *id)),
    }
}

/// The events kept aside for this wake-up, in the order they came.
pub fn take_pending() -> Vec<Event> {
    PENDING.with(|pending| std::mem::take(&mut *pending.borrow_mut()))
}

/// Something freed room on `key` (a lease given back, a state set): its
/// waiters are served at once.
pub fn freed(ctx: Ctx<'_>, token: &mut KeyToken, key: KeyName<'_>) {
    if WAITING.load(Relaxed) > 0 {
        tell(
            ctx,
            token,
            Event::Changed(ctx.selected_db(), key.bytes().into()),
        );
    }
}

/// `key` of `db` left the keyspace (deleted, expired, evicted, overwritten,
/// renamed or moved away): its waiters are decided again against what it
/// holds then, at the room's next wake-up, made due at once. Called from
/// the type's `unlink` callback, which has no context of its own and runs
/// inside whatever removed the key: a command of the module's own among
/// them (a key that expired found as it is opened, a lease key deleted).
/// Deciding the waiters there would open keys while that command has its
/// own open, the same key among them, and write it under the command's
/// open key; so this opens nothing and needs no key token.
pub fn removed(db: c_int, key: &[u8]) {
    if WAITING.load(Relaxed) == 0 || writing_own() {
        return;
    }
    if let Some(ctx) = detached() {
        defer(ctx, Event::Changed(db, key.into()));
    }
}

/// Keeps `event` for the room's next wake-up, made due at once.
fn defer(ctx: Ctx<'_>, event: Event) {
    PENDING.with(|pending| pending.borrow_mut().push(event));
    set_timer(ctx, now_ms());
}

/// Every key of `db` (all databases when `None`) changed at once (`FLUSHDB`,
/// `FLUSHALL`, `SWAPDB`): their waiters are decided at once.
pub fn all_changed(ctx: Ctx<'_>, token: &mut KeyToken, db: Option<c_int>) {
    if WAITING.load(Relaxed) > 0 {
        tell(ctx, token, Event::ChangedAll(db));
    }
}
