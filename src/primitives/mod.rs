//! The primitives users hold: thin handles and guards, each kind's rules in its own module,
//! over the client (`crate::client`) that reaches Redis and the protocol's scripts.
//!
//! [`hold`] is what every primitive hands out, written once: the acquisition API over a raw
//! trait and the guard. [`lock`] is the reentrant lock and its kinds (fair, read, write,
//! upgradable); [`election`] the leader election; [`group`] RedLock and MultiLock;
//! [`semaphore`] the counting semaphore and its permit-expirable extension; [`latch`] the
//! count-down latch; [`fence`] the fenced store; [`guarded`] the writes a guard applies only
//! while it holds. A primitive asks the client for everything that reaches Redis; the client
//! knows nothing of them.

pub(crate) mod election;
pub(crate) mod fence;
pub(crate) mod group;
pub(crate) mod guarded;
pub(crate) mod hold;
pub(crate) mod latch;
pub(crate) mod lock;
pub(crate) mod semaphore;
