//! The waiter lifecycle without a server: random interleavings of arrivals,
//! tokens falling due, deadlines, disconnects, `CLIENT UNBLOCK`, pauses, keys
//! removed or overwritten, flushes and role changes, against a model host
//! whose keys hold tokens. Every step checks the room's bookkeeping; every
//! take and answer checks the rules; the end checks that everyone was
//! answered once and nothing is left.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::collections::{BTreeMap, HashMap, HashSet};

use proptest::prelude::*;

use super::*;

/// How a waiter's wait ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum End {
    Allowed,
    TimedOut,
    /// Answered without taking (the model: a request of cost 0 is an error).
    Answered,
    /// Its client went away, or the server answered it (role change).
    Left,
}

#[derive(Clone, Copy)]
struct Ask {
    cost: i64,
}

#[derive(Default)]
struct Model {
    now: i64,
    paused: bool,
    /// Work units a wake-up may do before it is out of time.
    budget: usize,
    used: usize,
    /// Tokens per key (db 0).
    tokens: HashMap<KeyName, i64>,
    /// The wake-up asked for.
    wake: Option<i64>,
    ends: HashMap<WaiterId, End>,
    /// Per key, the waiters allowed on it, in the order they took.
    takes: BTreeMap<KeyName, Vec<WaiterId>>,
    deadlines: HashMap<WaiterId, Option<i64>>,
}

impl Model {
    fn end(&mut self, id: WaiterId, end: End) {
        assert!(
            self.ends.insert(id, end).is_none(),
            "{id:?} ended twice ({end:?} after {:?})",
            self.ends[&id]
        );
    }
}

impl Host<Ask> for Model {
    type Answer = End;

    fn now_ms(&self) -> i64 {
        self.now
    }

    fn writes_paused(&self) -> bool {
        self.paused
    }

    fn out_of_time(&self) -> bool {
        self.used >= self.budget
    }

    fn take(&mut self, waiter: &Waiter<Ask>) -> Turn<End> {
        assert!(!self.paused, "tried while writes are paused");
        assert!(
            waiter.deadline_ms.is_none_or(|d| self.now <= d),
            "tried past its deadline"
        );
        assert!(!self.ends.contains_key(&waiter.id), "tried after its end");
        self.used += 1;
        if waiter.request.cost == 0 {
            return Turn::Answered(End::Answered);
        }
        let enough = waiter
            .keys
            .iter()
            .all(|key| self.tokens.get(key).copied().unwrap_or(0) >= waiter.request.cost);
        if !enough {
            return Turn::NotYet(1_000);
        }
        for key in &waiter.keys {
            *self.tokens.get_mut(key).unwrap() -= waiter.request.cost;
            self.takes.entry(key.clone()).or_default().push(waiter.id);
        }
        Turn::Taken(End::Allowed)
    }

    fn timed_out(&mut self, waiter: &Waiter<Ask>) -> End {
        assert!(
            waiter.deadline_ms.is_some_and(|d| self.now > d),
            "timed out before its deadline"
        );
        self.used += 1;
        End::TimedOut
    }

    fn answer(&mut self, waiter: Waiter<Ask>, answer: End) {
        self.end(waiter.id, answer);
    }

    fn wake_at(&mut self, at_ms: i64) {
        assert!(at_ms >= self.now, "a wake-up asked in the past");
        self.wake = Some(self.wake.map_or(at_ms, |w| w.min(at_ms)));
    }
}

#[derive(Clone, Debug)]
enum Step {
    /// A waiter on these keys (indexes into three keys), with a deadline
    /// this far ahead (`None`: no limit), a cost, and a first try known.
    Arrive(Vec<usize>, Option<i64>, i64, Option<i64>),
    /// The clock moves; the room is woken if it asked to be.
    Advance(i64),
    /// A token (or several) comes back to a key (`RL.RELEASE`, a refill).
    Refill(usize, i64),
    /// A key is removed or overwritten: it holds this many tokens now.
    Replace(usize, i64),
    Disconnect(usize),
    Unblock(usize),
    Pause,
    Unpause,
    Flush,
    /// The server answers every waiter itself (`UNBLOCKED`) and they leave.
    RoleChange,
    Budget(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (
            proptest::collection::vec(0usize..3, 1..3),
            proptest::option::of(0i64..60),
            0i64..3,
            proptest::option::of(0i64..40),
        )
            .prop_map(|(keys, deadline, cost, first)| Step::Arrive(keys, deadline, cost, first)),
        6 => (0i64..25).prop_map(Step::Advance),
        3 => (0usize..3, 1i64..3).prop_map(|(k, n)| Step::Refill(k, n)),
        1 => (0usize..3, 0i64..3).prop_map(|(k, n)| Step::Replace(k, n)),
        1 => (0usize..64).prop_map(Step::Disconnect),
        1 => (0usize..64).prop_map(Step::Unblock),
        1 => Just(Step::Pause),
        1 => Just(Step::Unpause),
        1 => Just(Step::Flush),
        1 => prop_oneof![9 => Just(None), 1 => Just(Some(Step::RoleChange))]
            .prop_map(|s| s.unwrap_or(Step::Advance(1))),
        1 => (1usize..5).prop_map(Step::Budget),
    ]
}

fn key(i: usize) -> KeyName {
    Box::from(format!("k{i}").as_bytes())
}

/// Wakes the room if its wake-up is due.
fn tick(room: &mut WaitRoom<Ask>, model: &mut Model) {
    while model.wake.is_some_and(|at| at <= model.now) {
        model.wake = None;
        model.used = 0;
        room.wake(model);
        room.check_consistent().unwrap();
    }
}

fn live(room: &WaitRoom<Ask>, pick: usize) -> Option<WaiterId> {
    let mut ids: Vec<WaiterId> = room.waiters.keys().copied().collect();
    ids.sort();
    ids.get(pick % ids.len().max(1)).copied()
}

fn run(steps: Vec<Step>) {
    let mut room = WaitRoom::<Ask>::default();
    let mut model = Model {
        budget: 3,
        ..Model::default()
    };
    for i in 0..3 {
        model.tokens.insert(key(i), 0);
    }
    let mut arrived = HashSet::new();
    for step in steps {
        match step {
            Step::Arrive(keys, deadline, cost, first) => {
                let mut keys: Vec<KeyName> = keys.into_iter().map(key).collect();
                keys.sort();
                keys.dedup();
                let deadline = deadline.map(|d| model.now + d);
                let id = room.arrive(&mut model, 0, keys, deadline, Ask { cost }, first);
                model.deadlines.insert(id, deadline);
                arrived.insert(id);
            }
            Step::Advance(ms) => model.now += ms,
            Step::Refill(k, n) => {
                *model.tokens.get_mut(&key(k)).unwrap() += n;
                room.changed(&mut model, 0, &key(k));
            }
            Step::Replace(k, n) => {
                model.tokens.insert(key(k), n);
                room.changed(&mut model, 0, &key(k));
            }
            Step::Disconnect(pick) => {
                if let Some(id) = live(&room, pick) {
                    let waiter = room.leave(&mut model, id).unwrap();
                    model.end(waiter.id, End::Left);
                }
            }
            Step::Unblock(pick) => {
                // CLIENT UNBLOCK: answered in the callback, as timed out.
                if let Some(id) = live(&room, pick) {
                    let waiter = room.leave(&mut model, id).unwrap();
                    model.end(waiter.id, End::TimedOut);
                }
            }
            Step::Pause => model.paused = true,
            Step::Unpause => {
                model.paused = false;
            }
            Step::Flush => {
                for i in 0..3 {
                    model.tokens.insert(key(i), 1);
                }
                room.changed_all(&mut model, Some(0));
            }
            Step::RoleChange => {
                let ids: Vec<WaiterId> = room.waiters.keys().copied().collect();
                for id in ids {
                    let waiter = room.leave(&mut model, id).unwrap();
                    model.end(waiter.id, End::Left);
                }
            }
            Step::Budget(n) => model.budget = n,
        }
        room.check_consistent().unwrap();
        tick(&mut room, &mut model);
    }
    // The end: writes go on, tokens plenty, the clock past every deadline.
    model.paused = false;
    for i in 0..3 {
        model.tokens.insert(key(i), 1_000);
        room.changed(&mut model, 0, &key(i));
    }
    for _ in 0..10_000 {
        if room.is_empty() {
            break;
        }
        model.now += 50;
        tick(&mut room, &mut model);
    }
    assert!(room.is_empty(), "{} waiters never answered", room.len());
    assert!(room.queues.is_empty() && room.agenda.is_empty() && room.deadlines.is_empty());
    // Everyone ended exactly once (`Model::end` refuses a second).
    for id in &arrived {
        assert!(model.ends.contains_key(id), "{id:?} never ended");
    }
    // Allowed in arrival order on each key.
    for (key, ids) in &model.takes {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "{key:?} out of order: {ids:?}"
        );
    }
    // Nothing taken for a waiter not answered allowed, and the reverse.
    let taken: HashSet<WaiterId> = model.takes.values().flatten().copied().collect();
    for (id, end) in &model.ends {
        assert_eq!(
            taken.contains(id),
            *end == End::Allowed,
            "{id:?} ended {end:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn every_waiter_is_answered_once_in_order_and_never_past_its_deadline(
        steps in proptest::collection::vec(step(), 1..120)
    ) {
        run(steps);
    }
}

/// One waiter on an empty key whose token comes exactly at its deadline
/// (50 ms), woken at `woken_ms` with the token there: how its wait ended, and
/// the tokens left.
fn due_at_the_deadline(woken_ms: i64) -> (Option<End>, i64) {
    let mut room = WaitRoom::<Ask>::default();
    let mut model = Model {
        budget: 10,
        ..Model::default()
    };
    model.tokens.insert(key(0), 0);
    let id = room.arrive(
        &mut model,
        0,
        vec![key(0)],
        Some(50),
        Ask { cost: 1 },
        Some(50),
    );
    model.now = woken_ms;
    model.tokens.insert(key(0), 1);
    tick(&mut room, &mut model);
    (model.ends.get(&id).copied(), model.tokens[&key(0)])
}

#[test]
fn a_token_due_exactly_at_the_deadline_is_allowed() {
    assert_eq!(due_at_the_deadline(50), (Some(End::Allowed), 0));
}

#[test]
fn a_wake_up_late_past_the_deadline_times_out_and_takes_nothing() {
    assert_eq!(due_at_the_deadline(170), (Some(End::TimedOut), 1));
}

#[test]
fn a_backlog_is_served_in_slices_in_the_order_it_fell_due() {
    let mut room = WaitRoom::<Ask>::default();
    let mut model = Model {
        budget: 4,
        ..Model::default()
    };
    for i in 0..3 {
        model.tokens.insert(key(i), 100);
    }
    model.paused = true;
    let mut ids = Vec::new();
    for i in 0..30 {
        let k = key(i % 3);
        ids.push(room.arrive(&mut model, 0, vec![k], None, Ask { cost: 1 }, Some(0)));
    }
    tick(&mut room, &mut model);
    assert!(model.ends.is_empty(), "served while paused");
    model.paused = false;
    let mut wakes = 0;
    while !room.is_empty() {
        model.now += 1;
        model.wake = None;
        model.used = 0;
        let before = model.ends.len();
        room.wake(&mut model);
        room.check_consistent().unwrap();
        wakes += 1;
        assert!(
            model.ends.len() - before <= 4,
            "a wake-up overran its share"
        );
        assert!(
            room.is_empty() || model.wake.is_some(),
            "a backlog left without a wake-up"
        );
    }
    assert!(wakes >= 30 / 4, "served in {wakes} wake-ups");
    for (k, taken) in &model.takes {
        assert!(taken.windows(2).all(|w| w[0] < w[1]), "{k:?}: {taken:?}");
    }
}
