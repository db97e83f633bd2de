//! A command's arguments ([`Args`]) and key names ([`KeyName`]): Redis
//! string objects, read in place for as long as they live.

use std::cell::Cell;
use std::ffi::{c_char, c_int};
use std::marker::PhantomData;
use std::mem::MaybeUninit;

use redis_module::raw;

use super::api::rm;

/// A key's name, as the Redis string object a command was given: lives as
/// long as the command's arguments (`'a`).
#[derive(Clone, Copy)]
pub struct KeyName<'a> {
    ptr: *mut raw::RedisModuleString,
    life: PhantomData<&'a raw::RedisModuleString>,
}

impl<'a> KeyName<'a> {
    /// # Safety
    /// `ptr` must be a live string object for `'a`.
    pub(super) unsafe fn from_raw(ptr: *mut raw::RedisModuleString) -> Self {
        Self {
            ptr,
            life: PhantomData,
        }
    }

    pub(super) fn raw(self) -> *mut raw::RedisModuleString {
        self.ptr
    }

    pub fn bytes(self) -> &'a [u8] {
        // SAFETY: the object lives for `'a` (see `from_raw`).
        unsafe { string_bytes(self.ptr) }
    }
}

/// The command's arguments, as Redis passed them.
pub struct Args<'a> {
    argv: *mut *mut raw::RedisModuleString,
    argc: usize,
    /// The first argument [`Args::fill_from`] read: its index (`usize::MAX`
    /// when none), where its bytes are and how many, read again without
    /// asking Redis ([`Args::bytes_read`]). Held as a pointer, not a
    /// `&'a [u8]`, so that `Args` stays covariant in `'a`.
    first_read: Cell<(usize, *const u8, usize)>,
    life: PhantomData<&'a raw::RedisModuleString>,
}

impl<'a> Args<'a> {
    /// # Safety
    /// `argv` and `argc` must be those Redis passed to the running command.
    pub(super) unsafe fn new(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> Self {
        Self {
            argv,
            argc: usize::try_from(argc).unwrap_or(0),
            first_read: Cell::new((usize::MAX, std::ptr::null(), 0)),
            life: PhantomData,
        }
    }

    pub fn len(&self) -> usize {
        self.argc
    }

    /// The `i`th argument as a key name.
    pub fn key(&self, i: usize) -> Option<KeyName<'a>> {
        // SAFETY: `argv` holds `argc` valid pointers for the command's duration.
        (i < self.argc).then(|| KeyName {
            ptr: unsafe { *self.argv.add(i) },
            life: PhantomData,
        })
    }

    /// The `i`th argument's bytes.
    pub fn bytes(&self, i: usize) -> Option<&'a [u8]> {
        self.key(i).map(KeyName::bytes)
    }

    /// [`Args::bytes`], without asking Redis again for the first argument
    /// [`Args::fill_from`] read (the word a replay glues its header to,
    /// read by the parser first: a check's propagation asks for it).
    #[inline(always)]
    pub fn bytes_read(&self, i: usize) -> Option<&'a [u8]> {
        match self.first_read.get() {
            // SAFETY: the bytes of argument `at`, read by `fill_from` from
            // the string object, which lives for `'a` unchanged.
            (at, ptr, len) if at == i => Some(unsafe { std::slice::from_raw_parts(ptr, len) }),
            _ => self.bytes(i),
        }
    }

    /// Puts `new` in place of the `i`th argument and returns the old one.
    ///
    /// # Safety
    /// `i` < `len()`; `new` is a live string object; the caller puts the old
    /// argument back before the command returns, and nothing reads the
    /// argument vector in between but Redis's own propagation call, which
    /// takes references of its own (see `super::replicate`).
    pub(super) unsafe fn replace(
        &self,
        i: usize,
        new: *mut raw::RedisModuleString,
    ) -> *mut raw::RedisModuleString {
        // SAFETY: per this function's contract, `i` is within `argv`.
        unsafe { std::ptr::replace(self.argv.add(i), new) }
    }

    /// The bytes of every argument from `from` on (see [`Args::fill_from`]).
    #[inline(always)]
    pub fn bytes_from(&self, from: usize) -> Words<'a> {
        let mut words = Words::none();
        self.fill_from(from, &mut words);
        words
    }

    /// Puts the bytes of every argument from `from` on in `words` (which
    /// holds none): the words made where the caller keeps them, not made
    /// here and copied there (the whole inline array, on every check).
    #[inline(always)]
    pub fn fill_from(&self, from: usize, words: &mut Words<'a>) {
        let count = self.argc.saturating_sub(from);
        if count <= INLINE_WORDS {
            // The API function looked up once, not once a word.
            let ptr_len = rm!(RedisModule_StringPtrLen);
            for (slot, i) in words.inline.iter_mut().zip(from..self.argc) {
                let mut len = 0usize;
                // SAFETY: `i` < `argc` (the range's end), so `argv` holds a
                // live string object there for `'a`; Redis returns a pointer
                // to its `len` bytes (as in `string_bytes`).
                let bytes = unsafe {
                    let ptr = ptr_len(*self.argv.add(i), &mut len);
                    if ptr.is_null() {
                        &[]
                    } else {
                        std::slice::from_raw_parts(ptr.cast::<u8>(), len)
                    }
                };
                slot.write(bytes);
            }
            if let Some(first) = words.inline.first().filter(|_| count > 0) {
                // SAFETY: written just above (`count` > 0 slots).
                let first = unsafe { first.assume_init() };
                self.first_read.set((from, first.as_ptr(), first.len()));
            }
            // The first `count` slots are written (the zip stops at the
            // shorter: `count` arguments, within `INLINE_WORDS` slots).
            words.len = count;
        } else {
            words.spilled = (from..self.argc).filter_map(|i| self.bytes(i)).collect();
        }
    }
}

/// Arguments held on the stack up to this many (every check command with
/// its options fits), so parsing allocates nothing.
const INLINE_WORDS: usize = 12;

/// Argument bytes, as a slice (`Deref`), without a heap allocation for the
/// usual short commands.
///
/// Laid out in the order written (`repr(C)`), the unwritten slots last: when
/// the compiler may place them between fields it writes (as it may in
/// Rust's own layout), it zeroes them all with those fields, in one go.
#[repr(C)]
pub struct Words<'a> {
    len: usize,
    spilled: Vec<&'a [u8]>,
    /// The first `len` slots are written (only [`Args::fill_from`] writes
    /// them); the others are never read. Left unwritten when made: writing
    /// every slot of the array cost a check about 28 instructions.
    inline: [MaybeUninit<&'a [u8]>; INLINE_WORDS],
}

impl Words<'_> {
    /// No words, to be filled ([`Args::fill_from`]).
    #[inline(always)]
    pub fn none() -> Self {
        Self {
            inline: [MaybeUninit::uninit(); INLINE_WORDS],
            len: 0,
            spilled: Vec::new(),
        }
    }
}

impl<'a> std::ops::Deref for Words<'a> {
    type Target = [&'a [u8]];

    #[inline(always)]
    fn deref(&self) -> &Self::Target {
        if self.spilled.is_empty() {
            let len = self.len.min(INLINE_WORDS);
            // SAFETY: the first `len` slots are written (see `inline`), and
            // a `MaybeUninit<T>` has the layout of a `T`.
            unsafe { std::slice::from_raw_parts(self.inline.as_ptr().cast::<&'a [u8]>(), len) }
        } else {
            &self.spilled
        }
    }
}

impl std::ops::DerefMut for Words<'_> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Self::Target {
        if self.spilled.is_empty() {
            let len = self.len.min(INLINE_WORDS);
            // SAFETY: as in `deref`; borrowed mutably from `self`.
            unsafe { std::slice::from_raw_parts_mut(self.inline.as_mut_ptr().cast::<&[u8]>(), len) }
        } else {
            &mut self.spilled
        }
    }
}

/// The bytes of a Redis string object.
///
/// # Safety
/// `s` is a live string object, and stays alive and unchanged for `'a`
/// (the caller ties `'a` to its owner: a command's arguments, a callback's
/// call).
pub(super) unsafe fn string_bytes<'a>(s: *const raw::RedisModuleString) -> &'a [u8] {
    let mut len = 0usize;
    // SAFETY: per this function's contract; Redis returns a pointer to the
    // object's `len` bytes.
    unsafe {
        let ptr = rm!(RedisModule_StringPtrLen)(s, &mut len);
        if ptr.is_null() {
            &[]
        } else {
            std::slice::from_raw_parts(ptr.cast::<u8>(), len)
        }
    }
}

/// Key names the module made itself (for a command served outside it: a
/// waiter's), as string objects, freed when dropped.
pub struct OwnedNames(Vec<*mut raw::RedisModuleString>);

impl OwnedNames {
    pub fn new(keys: &[Box<[u8]>]) -> Self {
        Self(
            keys.iter()
                .map(|key| {
                    // SAFETY: a null context makes a string the module owns;
                    // the buffer is read during the call.
                    unsafe {
                        rm!(RedisModule_CreateString)(
                            std::ptr::null_mut(),
                            key.as_ptr().cast::<c_char>(),
                            key.len(),
                        )
                    }
                })
                .collect(),
        )
    }

    /// The names, for as long as `self` lives.
    pub fn key_names(&self) -> Vec<KeyName<'_>> {
        self.0
            .iter()
            // SAFETY: live strings, owned by `self`.
            .map(|&ptr| unsafe { KeyName::from_raw(ptr) })
            .collect()
    }
}

impl Drop for OwnedNames {
    fn drop(&mut self) {
        for &ptr in &self.0 {
            // SAFETY: made by `new`, freed once.
            unsafe { rm!(RedisModule_FreeString)(std::ptr::null_mut(), ptr) };
        }
    }
}

/// A command's arguments the module made itself (`RL.CHECK`'s inline
/// command, which waits and replays as that command), as string objects,
/// freed when dropped.
pub struct OwnedArgs(Vec<*mut raw::RedisModuleString>);

impl OwnedArgs {
    pub fn new<'w>(words: impl Iterator<Item = &'w [u8]>) -> Self {
        Self(
            words
                .map(|word| {
                    // SAFETY: a null context makes a string the module owns;
                    // the buffer is read during the call.
                    unsafe {
                        rm!(RedisModule_CreateString)(
                            std::ptr::null_mut(),
                            word.as_ptr().cast::<c_char>(),
                            word.len(),
                        )
                    }
                })
                .collect(),
        )
    }

    /// The arguments, for as long as `self` lives (mutably borrowed: a
    /// propagation may swap entries for the length of its call).
    pub fn args(&mut self) -> Args<'_> {
        let argc = c_int::try_from(self.0.len()).unwrap_or(0);
        // SAFETY: `argc` live strings owned by `self`, which outlives the
        // borrow.
        unsafe { Args::new(self.0.as_mut_ptr(), argc) }
    }
}

impl Drop for OwnedArgs {
    fn drop(&mut self) {
        for &ptr in &self.0 {
            // SAFETY: made by `new`, freed once.
            unsafe { rm!(RedisModule_FreeString)(std::ptr::null_mut(), ptr) };
        }
    }
}
