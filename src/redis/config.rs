//! Module configuration: `CONFIG SET/GET ratelimit.<name>`, a
//! `ratelimit.<name> <value>` line in redis.conf, or `<name> <value>` pairs
//! after the module's path in `loadmodule`.
//!
//! - `deny-events` (yes/no, default no): publish a keyspace event
//!   `rl.denied` on a key each time a request on it is denied (and
//!   `rl.shadowdenied` each time a `SHADOW` request would have been), so
//!   operators can watch for abuse. Redis delivers it only when keyspace events of
//!   module keys are on too (`notify-keyspace-events` with `d`, e.g. `Kd`).
//! - `expiry-slack` (milliseconds, 0 to 86400000, default 1000): how long
//!   after its state is as good as new a key may live on. A key's expiry is
//!   kept while it lies between the moment its state is fresh again and that
//!   moment plus the slack, and moved to the end of that band otherwise, so a
//!   busy key's expiry is written about once per slack instead of on every
//!   request (see `crate::algorithms::expiry::next_expiry`). 0: the expiry is always
//!   exactly the fresh moment.
//! - `max-keys` (1 to 1000000, default 100): the most keys one `RL.ALL` may
//!   name; a call naming more is refused before anything runs. `RL.ALL`
//!   holds the server for its whole run, 1-3 us a key (9-16 us for 8 KB
//!   states; `scripts/rl_all_cost.py`), so 10,000 keys stall every other
//!   client for 13-137 ms. The default bounds a call near 0.2 ms.
//! - `top-keys` (0 to 100000, default 1000): the slots of `RL.TOP`'s sketch
//!   of the keys denied most (`super::sketch`); 0 turns it off. A change
//!   starts the counts over, at once (see `sketch::resize`, which the
//!   module's start-up hands [`on_top_keys_set`]: this file imports no
//!   file above it).

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};
use std::sync::OnceLock;

use super::ffi::{self, config::NumberSetting, Ctx, KeyName};
use crate::algorithms::expiry::MAX_EXPIRY_SLACK_MS;

static DENY_EVENTS: AtomicBool = AtomicBool::new(false);
static EXPIRY_SLACK_MS: AtomicI64 = AtomicI64::new(DEFAULT_EXPIRY_SLACK_MS);
static MAX_KEYS: AtomicI64 = AtomicI64::new(DEFAULT_MAX_KEYS);
static TOP_KEYS: AtomicI64 = AtomicI64::new(DEFAULT_TOP_KEYS);

const DEFAULT_EXPIRY_SLACK_MS: i64 = 1000;
const DEFAULT_MAX_KEYS: i64 = 100;
const DEFAULT_TOP_KEYS: i64 = 1000;
/// `RL.TOP`'s sketch takes 110-170 bytes a slot besides the key's name
/// (README, "Memory"), so 100,000 slots hold ~15 MB with 16-byte names, and
/// one reply listing them all holds the server ~60 ms. More would make that
/// stall longer for a bound (N / m) already far below any heavy hitter's count.
const MAX_TOP_KEYS: i64 = 100_000;

/// Called after `top-keys` takes a new value (see [`on_top_keys_set`]).
static TOP_KEYS_SET: OnceLock<fn()> = OnceLock::new();

/// Has `f` called after each new value of `top-keys` (at load time, before
/// [`register`] loads the values).
pub fn on_top_keys_set(f: fn()) {
    let _ = TOP_KEYS_SET.set(f);
}

/// The expiry slack now in force, in ms.
pub fn expiry_slack_ms() -> u32 {
    u32::try_from(EXPIRY_SLACK_MS.load(Relaxed)).unwrap_or(0)
}

/// The most keys one `RL.ALL` may name now.
pub fn max_keys() -> usize {
    usize::try_from(MAX_KEYS.load(Relaxed)).unwrap_or(1)
}

/// The slots of `RL.TOP`'s sketch now.
pub fn top_keys() -> u32 {
    u32::try_from(TOP_KEYS.load(Relaxed)).unwrap_or(0)
}

/// One setting and where its value lives.
enum Setting {
    YesNo {
        name: &'static CStr,
        value: &'static AtomicBool,
        default: bool,
    },
    Number {
        name: &'static CStr,
        value: &'static AtomicI64,
        default: i64,
        min: i64,
        max: i64,
        /// Called, once set, after each new value is stored (it reads the
        /// value from `value`), from `CONFIG SET`, redis.conf or
        /// `loadmodule`.
        on_set: Option<&'static OnceLock<fn()>>,
    },
}

static SETTINGS: &[Setting] = &[
    Setting::YesNo {
        name: c"deny-events",
        value: &DENY_EVENTS,
        default: false,
    },
    Setting::Number {
        name: c"expiry-slack",
        value: &EXPIRY_SLACK_MS,
        default: DEFAULT_EXPIRY_SLACK_MS,
        min: 0,
        max: MAX_EXPIRY_SLACK_MS as i64,
        on_set: None,
    },
    Setting::Number {
        name: c"max-keys",
        value: &MAX_KEYS,
        default: DEFAULT_MAX_KEYS,
        min: 1,
        max: 1_000_000,
        on_set: None,
    },
    Setting::Number {
        name: c"top-keys",
        value: &TOP_KEYS,
        default: DEFAULT_TOP_KEYS,
        min: 0,
        max: MAX_TOP_KEYS,
        on_set: Some(&TOP_KEYS_SET),
    },
];

impl Setting {
    fn name(&self) -> &'static CStr {
        match self {
            Setting::YesNo { name, .. } | Setting::Number { name, .. } => name,
        }
    }

    /// Takes `text` as the value given after the module's path.
    fn take(&self, text: &[u8]) -> Result<(), String> {
        let name = self.name().to_string_lossy();
        match self {
            Setting::YesNo { value, .. } => {
                let yes = if text.eq_ignore_ascii_case(b"yes") {
                    true
                } else if text.eq_ignore_ascii_case(b"no") {
                    false
                } else {
                    return Err(format!("{name} must be yes or no"));
                };
                value.store(yes, Relaxed);
            }
            Setting::Number { min, max, .. } => {
                let number = std::str::from_utf8(text)
                    .ok()
                    .and_then(|t| t.parse::<i64>().ok())
                    .filter(|n| (*min..=*max).contains(n))
                    .ok_or_else(|| format!("{name} must be a whole number from {min} to {max}"))?;
                self.set_number(number);
            }
        }
        Ok(())
    }

    /// Stores a number already checked against the bounds, and tells the
    /// setting's `on_set`.
    fn set_number(&self, number: i64) {
        if let Setting::Number { value, on_set, .. } = self {
            value.store(number, Relaxed);
            if let Some(on_set) = on_set.and_then(OnceLock::get) {
                on_set();
            }
        }
    }

    /// Registers the setting with Redis (at load time).
    fn register(&'static self, ctx: Ctx<'_>) -> bool {
        match self {
            Setting::YesNo {
                name,
                value,
                default,
            } => ffi::config::register_bool(ctx, name, *default, value),
            Setting::Number {
                name,
                default,
                min,
                max,
                ..
            } => ffi::config::register_number(ctx, name, *default, *min, *max, self),
        }
    }
}

impl NumberSetting for Setting {
    fn get(&self) -> i64 {
        match self {
            Setting::Number { value, .. } => value.load(Relaxed),
            Setting::YesNo { .. } => 0,
        }
    }

    fn set(&self, value: i64) {
        self.set_number(value);
    }
}

/// Registers the settings and loads their values from redis.conf, then from
/// the `loadmodule` arguments. An unknown name or a bad value fails the load.
pub fn register(ctx: Ctx<'_>, args: &[&[u8]]) -> Result<(), String> {
    for setting in SETTINGS {
        if !setting.register(ctx) {
            return Err(format!(
                "cannot register the setting {}",
                setting.name().to_string_lossy()
            ));
        }
    }
    if !ffi::config::load(ctx) {
        return Err("cannot load the module's settings from the configuration".into());
    }
    for pair in args.chunks(2) {
        let [name, value] = pair else {
            return Err("module arguments must be name value pairs".into());
        };
        let setting = SETTINGS
            .iter()
            .find(|s| name.eq_ignore_ascii_case(s.name().to_bytes()))
            .ok_or_else(|| {
                let known: Vec<_> = SETTINGS
                    .iter()
                    .map(|s| s.name().to_string_lossy())
                    .collect();
                format!(
                    "unknown setting '{}' (known: {})",
                    String::from_utf8_lossy(name),
                    known.join(", ")
                )
            })?;
        setting.take(value)?;
    }
    Ok(())
}

/// Tells keyspace-event subscribers that a request on `key_name` was
/// denied (`rl.denied`), or would have been in `SHADOW` mode
/// (`rl.shadowdenied`), when `deny-events` is on.
pub fn on_denied(ctx: Ctx<'_>, key_name: KeyName<'_>, shadow: bool) {
    if DENY_EVENTS.load(Relaxed) {
        let event = if shadow {
            c"rl.shadowdenied"
        } else {
            c"rl.denied"
        };
        ctx.notify_module_event(event, key_name);
    }
}
