//! The protocol: how `redlease` lays its locks out in Redis, in Redisson's layout.
//!
//! Key and channel naming, holder ids and the force-release notice format ([`names`]), and
//! every Lua script (the `.lua` files of the `lua/` folder) with the assembly of its keys and
//! arguments and the meaning of its reply, one module per primitive ([`lock`]: a file per
//! lock, plain, fair, and rwlock for its three kinds). Pure: it builds
//! commands and reads replies; the runner in `crate::client::call::runner` sends them. It may use nothing
//! of the crate but the error type.

pub(crate) mod election;
pub(crate) mod fence;
pub(crate) mod group;
pub(crate) mod guarded;
pub(crate) mod latch;
pub(crate) mod lock;
pub(crate) mod names;
pub(crate) mod renew;
pub(crate) mod request;
pub(crate) mod script;
pub(crate) mod semaphore;
pub(crate) mod slot;

pub(crate) use request::Request;
pub(crate) use script::ScriptCall;
