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
/// `glue_at` is not an argument after the name.
pub fn replicate_swapped(
    ctx: Ctx<'_>,
    args: &Args<'_>,
    name: &KeptString,
    glue_at: usize,
    head: &[u8],
    word: &[u8],
) {
    let name = name.0.load(Relaxed);
    if name.is_null() || glue_at == 0 || glue_at >= args.len() {
        return;
    }
    let glued = glued_string(head, word);
    // SAFETY: `args` is this command's argument vector, which Redis also
    // hands `RedisModule_ReplicateVerbatim` (it reads the running client's
    // vector, and a module command is given that very vector); `glue_at`
    // and 0 are within it (checked above). Both entries are put back before
    // anything else runs. The propagation call takes its own reference to
    // every argument; the glued string and the name each keep the module's
    // reference too (see `glued_string`), so neither count reaches zero.
    unsafe {
        let command_name = args.replace(0, name);
        let original = args.replace(glue_at, glued);
        rm!(RedisModule_ReplicateVerbatim)(ctx.raw());
        args.replace(glue_at, original);
        args.replace(0, command_name);
    }
}

thread_local! {
    /// The glued word propagated last, with its bytes: a string of the
    /// module's own (one reference), reused while the next replay's glued
    /// word is the same bytes. A glued word is a header (the command, the
    /// millisecond, the expiry slack) and the word after the key, so every
    /// check of one algorithm and one first parameter within a millisecond
    /// glues the same bytes: under load, most replays reuse the last
    /// string instead of making and dropping one (about 290 instructions
    /// of a check's ~5,900). Redis takes references of its own to what it
    /// propagates and never changes a string it holds, so the string the
    /// module drops for a new one lives until the last replay using it is
    /// written. (The propagating thread's own: the main thread.)
    static LAST_GLUED: std::cell::RefCell<(*mut raw::RedisModuleString, Vec<u8>)> =
        const { std::cell::RefCell::new((std::ptr::null_mut(), Vec::new())) };
}

/// A string holding `head` then `word`, which the caller lends to Redis and
/// does not free: the last one again when it holds the same bytes (compared
/// part by part, so a hit writes nothing out), otherwise a new one kept in
/// its place (the old one's reference dropped).
fn glued_string(head: &[u8], word: &[u8]) -> *mut raw::RedisModuleString {
    LAST_GLUED.with(|last| {
        let mut last = last.borrow_mut();
        let (string, kept) = &mut *last;
        if !string.is_null()
            && kept.len() == head.len() + word.len()
            && kept.get(..head.len()) == Some(head)
            && kept.get(head.len()..) == Some(word)
        {
            return *string;
        }
        kept.clear();
        kept.extend_from_slice(head);
        kept.extend_from_slice(word);
        let made = new_string(kept);
        if !string.is_null() {
            // SAFETY: the module's own reference to the string it made,
            // dropped once; references Redis took keep it alive.
            unsafe { rm!(RedisModule_FreeString)(std::ptr::null_mut(), *string) };
        }
        *string = made;
        made
    })
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
