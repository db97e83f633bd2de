//! Not an API of this crate: the Redis layer's key types, made reachable
//! from outside (hidden from the docs) so that these examples can show, as
//! compile-fail tests run by `cargo test --doc`, that the key API cannot be
//! misused. The Redis layer itself (`redis`) stays private.
//!
//! A key opened for reading or writing is `Key<'k, Read>` ([`ReadKey`]) or
//! `Key<'k, Write>` ([`WriteKey`]), `'k` the borrow of the command's
//! [`KeyToken`] the key holds while it is open. The examples only compile:
//! a `Ctx` and a `KeyName` exist only inside a command the server runs,
//! and a `KeyToken` is made only by the FFI room, one for each call of the
//! server into the module, and lent to the code that call runs (a command's
//! body is handed it beside its context and arguments).
//!
//! Used as meant, it compiles (each misuse below is one of these with a
//! line moved: rustdoc checks the error code only on nightly, so these
//! twins show that the misuses fail for the reason given, not for a typo):
//!
//! ```
//! use redis_ratelimit::algorithms::token_bucket::{TokenBucket, TokenBucketParams};
//! use redis_ratelimit::algorithms::{Algorithm, State};
//! use redis_ratelimit::typed_keys::{Ctx, Key, KeyName, KeyToken};
//!
//! fn read_then_delete<'a>(ctx: Ctx<'a>, token: &mut KeyToken, name: KeyName<'a>) -> Option<i64> {
//!     let mut key = Key::write(token, ctx, name);
//!     let state = key.get::<TokenBucket>();
//!     let fresh_at_ms = state.map(State::fresh_at_ms);
//!     key.delete();
//!     fresh_at_ms
//! }
//!
//! fn read_then_set<'a>(ctx: Ctx<'a>, token: &mut KeyToken, name: KeyName<'a>) -> Option<i64> {
//!     let mut key = Key::write(token, ctx, name);
//!     let state = key.get::<TokenBucket>();
//!     let fresh_at_ms = state.map(State::fresh_at_ms);
//!     let params = TokenBucketParams { capacity: 1, rate_per_s: 1.0 };
//!     let _ = key.set(TokenBucket::fresh(params, 0));
//!     fresh_at_ms
//! }
//!
//! fn change_then_delete<'a>(
//!     ctx: Ctx<'a>,
//!     token: &mut KeyToken,
//!     name: KeyName<'a>,
//! ) -> Option<i64> {
//!     let mut key = Key::write(token, ctx, name);
//!     let held = key.held::<TokenBucket>().ok().flatten();
//!     let fresh_at_ms = held.map(|held| held.state.fresh_at_ms());
//!     key.delete();
//!     fresh_at_ms
//! }
//!
//! fn read_only<'a>(ctx: Ctx<'a>, token: &mut KeyToken, name: KeyName<'a>) -> Option<i64> {
//!     let key = Key::read(token, ctx, name);
//!     let held = key.held_ref::<TokenBucket>().ok().flatten();
//!     held.map(|held| held.fresh_at_ms())
//! }
//! ```
//!
//! A state read from a key cannot be used after the key was deleted (the
//! use-after-free of issue 29):
//!
//! ```compile_fail,E0502
//! use redis_ratelimit::algorithms::token_bucket::TokenBucket;
//! use redis_ratelimit::algorithms::State;
//! use redis_ratelimit::typed_keys::{Ctx, Key, KeyName, KeyToken};
//!
//! fn misuse<'a>(ctx: Ctx<'a>, token: &mut KeyToken, name: KeyName<'a>) -> Option<i64> {
//!     let mut key = Key::write(token, ctx, name);
//!     let state = key.get::<TokenBucket>();
//!     key.delete();
//!     state.map(State::fresh_at_ms)
//! }
//! ```
//!
//! nor after a new value was set in its place (which frees the old one):
//!
//! ```compile_fail,E0502
//! use redis_ratelimit::algorithms::token_bucket::{TokenBucket, TokenBucketParams};
//! use redis_ratelimit::algorithms::{Algorithm, State};
//! use redis_ratelimit::typed_keys::{Ctx, Key, KeyName, KeyToken};
//!
//! fn misuse<'a>(ctx: Ctx<'a>, token: &mut KeyToken, name: KeyName<'a>) -> Option<i64> {
//!     let mut key = Key::write(token, ctx, name);
//!     let state = key.get::<TokenBucket>();
//!     let params = TokenBucketParams { capacity: 1, rate_per_s: 1.0 };
//!     let _ = key.set(TokenBucket::fresh(params, 0));
//!     state.map(State::fresh_at_ms)
//! }
//! ```
//!
//! nor a state lent to change in place after the key was deleted:
//!
//! ```compile_fail,E0499
//! use redis_ratelimit::algorithms::token_bucket::TokenBucket;
//! use redis_ratelimit::algorithms::State;
//! use redis_ratelimit::typed_keys::{Ctx, Key, KeyName, KeyToken};
//!
//! fn misuse<'a>(ctx: Ctx<'a>, token: &mut KeyToken, name: KeyName<'a>) -> Option<i64> {
//!     let mut key = Key::write(token, ctx, name);
//!     let held = key.held::<TokenBucket>().ok().flatten();
//!     key.delete();
//!     held.map(|held| held.state.fresh_at_ms())
//! }
//! ```
//!
//! A key opened for reading cannot be written, deleted or lent mutably:
//!
//! ```compile_fail,E0599
//! use redis_ratelimit::typed_keys::{Ctx, Key, KeyName, KeyToken};
//!
//! fn misuse<'a>(ctx: Ctx<'a>, token: &mut KeyToken, name: KeyName<'a>) {
//!     let mut key = Key::read(token, ctx, name);
//!     key.delete();
//! }
//! ```
//!
//! ```compile_fail,E0599
//! use redis_ratelimit::algorithms::token_bucket::TokenBucket;
//! use redis_ratelimit::typed_keys::{Ctx, Key, KeyName, KeyToken};
//!
//! fn misuse<'a>(ctx: Ctx<'a>, token: &mut KeyToken, name: KeyName<'a>) {
//!     let mut key = Key::read(token, ctx, name);
//!     let _ = key.held::<TokenBucket>();
//! }
//! ```
//!
//! Two keys cannot be open at once for one command: each holds the
//! command's token, lent mutably, until it is closed. Key names are run-time
//! values, so the types forbid any second key, of the same name or not
//! (two opens of one name would lend its state twice); the engine opens one
//! key at a time:
//!
//! ```compile_fail,E0499
//! use redis_ratelimit::algorithms::token_bucket::TokenBucket;
//! use redis_ratelimit::typed_keys::{Ctx, Key, KeyName, KeyToken};
//!
//! fn misuse<'a>(ctx: Ctx<'a>, token: &mut KeyToken, name: KeyName<'a>) {
//!     let mut first = Key::write(token, ctx, name);
//!     let mut second = Key::write(token, ctx, name);
//!     let _ = (first.held::<TokenBucket>(), second.held::<TokenBucket>());
//! }
//! ```
//!
//! nor a key read beside one written:
//!
//! ```compile_fail,E0499
//! use redis_ratelimit::algorithms::token_bucket::TokenBucket;
//! use redis_ratelimit::typed_keys::{Ctx, Key, KeyName, KeyToken};
//!
//! fn misuse<'a>(ctx: Ctx<'a>, token: &mut KeyToken, name: KeyName<'a>) {
//!     let mut written = Key::write(token, ctx, name);
//!     let read = Key::read(token, ctx, name);
//!     let _ = (written.held::<TokenBucket>(), read.get::<TokenBucket>());
//! }
//! ```
//!
//! Their twin, which compiles: one key closed before the next is opened.
//!
//! ```
//! use redis_ratelimit::algorithms::token_bucket::TokenBucket;
//! use redis_ratelimit::typed_keys::{Ctx, Key, KeyName, KeyToken};
//!
//! fn one_after_another<'a>(ctx: Ctx<'a>, token: &mut KeyToken, name: KeyName<'a>) {
//!     let mut first = Key::write(token, ctx, name);
//!     let _ = first.held::<TokenBucket>();
//!     drop(first);
//!     let mut second = Key::write(token, ctx, name);
//!     let _ = second.held::<TokenBucket>();
//!     drop(second);
//!     let read = Key::read(token, ctx, name);
//!     let _ = read.get::<TokenBucket>();
//! }
//! ```
//!
//! Nor can a command get round the token by making a second one to open a
//! key twice: a token is made only inside the FFI room (`redis::ffi`), one
//! for each call of the server into the module, and lent to the code that
//! call runs. Its field is private:
//!
//! ```compile_fail,E0451
//! use redis_ratelimit::algorithms::token_bucket::TokenBucket;
//! use redis_ratelimit::typed_keys::{Ctx, Key, KeyName, KeyToken};
//!
//! fn misuse<'a>(ctx: Ctx<'a>, token: &mut KeyToken, name: KeyName<'a>) {
//!     let mut another = KeyToken { _private: () };
//!     let mut first = Key::write(token, ctx, name);
//!     let mut second = Key::write(&mut another, ctx, name);
//!     let _ = (first.held::<TokenBucket>(), second.held::<TokenBucket>());
//! }
//! ```
//!
//! and its constructor is the room's:
//!
//! ```compile_fail,E0624
//! use redis_ratelimit::algorithms::token_bucket::TokenBucket;
//! use redis_ratelimit::typed_keys::{Ctx, Key, KeyName, KeyToken};
//!
//! fn misuse<'a>(ctx: Ctx<'a>, token: &mut KeyToken, name: KeyName<'a>) {
//!     let mut another = KeyToken::new();
//!     let mut first = Key::write(token, ctx, name);
//!     let mut second = Key::write(&mut another, ctx, name);
//!     let _ = (first.held::<TokenBucket>(), second.held::<TokenBucket>());
//! }
//! ```
//!
//! Below [`Key`], the server's open key itself ([`OpenKey`]) holds the
//! token too, so no raw key is opened beside another either:
//!
//! ```compile_fail,E0499
//! use redis_ratelimit::typed_keys::{Ctx, KeyName, KeyToken, OpenKey};
//!
//! fn misuse<'a>(ctx: Ctx<'a>, token: &mut KeyToken, name: KeyName<'a>) {
//!     let first = OpenKey::open(token, ctx, name, true);
//!     let second = OpenKey::open(token, ctx, name, true);
//!     let _ = (first.is_empty(), second.is_empty());
//! }
//! ```
//!
//! Its twin, which compiles: one raw key closed before the next is opened.
//!
//! ```
//! use redis_ratelimit::typed_keys::{Ctx, KeyName, KeyToken, OpenKey};
//!
//! fn one_after_another<'a>(ctx: Ctx<'a>, token: &mut KeyToken, name: KeyName<'a>) {
//!     let first = OpenKey::open(token, ctx, name, true);
//!     let _ = first.is_empty();
//!     drop(first);
//!     let second = OpenKey::open(token, ctx, name, true);
//!     let _ = second.is_empty();
//! }
//! ```

pub use crate::redis::ffi::key::OpenKey;
pub use crate::redis::ffi::{Ctx, KeyName};
pub use crate::redis::key::{Key, KeyToken, Read, ReadKey, Write, WriteKey};
