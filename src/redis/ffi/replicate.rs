//! Propagating what a command changed to replicas and the AOF: its own
//! argument vector lent to `RedisModule_ReplicateVerbatim` with two entries
//! swapped ([`replicate_swapped`]), the command as it is
//! (`Ctx::replicate_verbatim`), or a command built from words
//! ([`replicate_words`]).

use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicPtr, Ordering::Relaxed};

use redis_module::raw;

use super::api::rm;
use super::args::Args;
use super::ctx::Ctx;
use super::main_thread::MainThreadCell;
use crate::words::same_bytes;

/// A Redis string made once, at load time, and kept for the module's life
/// (Redis's propagation takes and drops references of its own): a command
/// name replays are propagated under.
pub struct KeptString(AtomicPtr<raw::RedisModuleString>);

impl KeptString {
    pub const fn new() -> Self {
        Self(AtomicPtr::new(std::ptr::null_mut()))
    }

    /// Makes the string, holding `bytes` (at load time).
    pub fn make(&self, bytes: &[u8]) {
        self.0.store(new_string(bytes), Relaxed);
    }
}

/// A string object the module owns, holding a copy of `bytes`.
fn new_string(bytes: &[u8]) -> *mut raw::RedisModuleString {
    // SAFETY: a null context makes a string owned by the module; the
    // buffer is read during the call.
    unsafe {
        rm!(RedisModule_CreateString)(
            std::ptr::null_mut(),
            bytes.as_ptr().cast::<c_char>(),
            bytes.len(),
        )
    }
}

/// Propagates the running command under the name `name`, its argument
/// `glue_at` replaced by the glued word `head` then `word`, by the cheapest route Redis 7.0 offers a
/// module: `RedisModule_ReplicateVerbatim`, which copies the command's own
/// argument vector (taking a reference to each argument) into Redis's queue
/// of commands to propagate. For the length of that one call the two
/// entries are swapped, then put back, so the command is, to everything
/// else in Redis (slow log, MONITOR, client tracking, the reply), what the
/// client sent. Nothing is propagated when `name` was not made or
/// `glue_at` is not an argument after the name. `head` is of a size known
/// when compiling (a replay's fixed header), so that comparing it with the
/// last glued word's is a few loads.
#[inline(always)]
pub fn replicate_swapped<const N: usize>(
    ctx: Ctx<'_>,
    args: &Args<'_>,
    name: &KeptString,
    glue_at: usize,
    head: &[u8; N],
    word: &[u8],
) {
    let name = name.0.load(Relaxed);
    if name.is_null() || glue_at == 0 || glue_at >= args.len() {
        return;
    }
    // The last glued word's string, lent by the cell; were the cell lent
    // already (nothing this calls uses it), a string of its own.
    match LAST_GLUED.with(ctx, |last| glued_string(last, head, word)) {
        Some(glued) => replicate_glued(ctx, args, name, glue_at, glued),
        None => replicate_spare(ctx, args, name, glue_at, head, word),
    }
}

/// [`replicate_swapped`] with a glued word made for this replay alone,
/// dropped after it.
#[cold]
#[inline(never)]
fn replicate_spare(
    ctx: Ctx<'_>,
    args: &Args<'_>,
    name: *mut raw::RedisModuleString,
    glue_at: usize,
    head: &[u8],
    word: &[u8],
) {
    let mut spare = LastGlued::NONE;
    let glued = glue_anew(&mut spare, head, word);
    replicate_glued(ctx, args, name, glue_at, glued);
    spare.release();
}

/// [`replicate_swapped`]'s propagation, of the string `glued` (which the
/// module keeps a reference to) at `glue_at` and the name `name`.
#[inline(always)]
fn replicate_glued(
    ctx: Ctx<'_>,
    args: &Args<'_>,
    name: *mut raw::RedisModuleString,
    glue_at: usize,
    glued: *mut raw::RedisModuleString,
) {
    // SAFETY: `args` is this command's argument vector, which Redis also
    // hands `RedisModule_ReplicateVerbatim` (it reads the running client's
    // vector, and a module command is given that very vector); `glue_at`
    // and 0 are within it (checked by `replicate_swapped`). Both entries
    // are put back before anything else runs. The propagation call takes
    // its own reference to every argument; the glued string and the name
    // each keep the module's reference too (see `glued_string`), so
    // neither count reaches zero.
    unsafe {
        let command_name = args.replace(0, name);
        let original = args.replace(glue_at, glued);
        rm!(RedisModule_ReplicateVerbatim)(ctx.raw());
        args.replace(glue_at, original);
        args.replace(0, command_name);
    }
}

/// The glued word propagated last, with its bytes: a string of the
/// module's own (one reference), reused while the next replay's glued word
/// is the same bytes. A glued word is a header (the command, the
/// millisecond, the expiry slack) and the word after the key, so every
/// check of one algorithm and one first parameter within a millisecond
/// glues the same bytes: under load, most replays reuse the last string
/// instead of making and dropping one (about 290 instructions of a check's
/// ~5,900). Redis takes references of its own to what it propagates and
/// never changes a string it holds, so the string the module drops for a
/// new one lives until the last replay using it is written.
struct LastGlued {
    string: *mut raw::RedisModuleString,
    bytes: Vec<u8>,
}

/// The last glued word, kept from one replay to the next (see
/// [`LastGlued`]).
static LAST_GLUED: MainThreadCell<LastGlued> = MainThreadCell::new(LastGlued::NONE);

impl LastGlued {
    const NONE: Self = Self {
        string: std::ptr::null_mut(),
        bytes: Vec::new(),
    };

    /// Drops the module's reference to its string (a spare's: see
    /// `replicate_swapped`), if it made one.
    #[inline(always)]
    fn release(self) {
        if !self.string.is_null() {
            // SAFETY: the module's own reference to a string it made,
            // dropped once; references Redis took keep it alive.
            unsafe { rm!(RedisModule_FreeString)(std::ptr::null_mut(), self.string) };
        }
    }
}

/// A string holding `head` then `word`, which the caller lends to Redis and
/// does not free: the last one again when it holds the same bytes (compared
/// part by part, so a hit writes nothing out), otherwise a new one kept in
/// its place (the old one's reference dropped).
#[inline(always)]
fn glued_string<const N: usize>(
    last: &mut LastGlued,
    head: &[u8; N],
    word: &[u8],
) -> *mut raw::RedisModuleString {
    if !last.string.is_null()
        && last.bytes.len() == N + word.len()
        && same_bytes(last.bytes.get(..N).unwrap_or_default(), head)
        && same_bytes(last.bytes.get(N..).unwrap_or_default(), word)
    {
        return last.string;
    }
    glue_anew(last, head, word)
}

/// [`glued_string`] when the glued word changed: a new string, kept.
#[cold]
#[inline(never)]
fn glue_anew(last: &mut LastGlued, head: &[u8], word: &[u8]) -> *mut raw::RedisModuleString {
    last.bytes.clear();
    last.bytes.extend_from_slice(head);
    last.bytes.extend_from_slice(word);
    let made = new_string(&last.bytes);
    if !last.string.is_null() {
        // SAFETY: the module's own reference to the string it made,
        // dropped once; references Redis took keep it alive.
        unsafe { rm!(RedisModule_FreeString)(std::ptr::null_mut(), last.string) };
    }
    last.string = made;
    made
}

/// Propagates the command `name` with the arguments `words`
/// (`RedisModule_Replicate`, which looks the command up by name: for what
/// runs outside a command, which has no argument vector to lend).
pub fn replicate_words<'w>(ctx: Ctx<'_>, name: &CStr, words: impl Iterator<Item = &'w [u8]>) {
    let strings: Vec<*mut raw::RedisModuleString> = words.map(new_string).collect();
    // SAFETY: `ctx` is a live context; format "v" takes an array of string
    // objects and its length, which Redis takes references to; the strings
    // are the module's own, freed once after the call.
    unsafe {
        rm!(RedisModule_Replicate)(
            ctx.raw(),
            name.as_ptr(),
            c"v".as_ptr(),
            strings.as_ptr(),
            strings.len(),
        );
        for string in strings {
            rm!(RedisModule_FreeString)(std::ptr::null_mut(), string);
        }
    }
}
