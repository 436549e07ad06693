//! Distributed locks on Redis for synchronous Rust programs.
//!
//! `redlease` lets worker threads in several processes on several hosts take turns on a
//! shared resource. A [`LockManager`] (one per process is typical) hands out [`Lock`]
//! handles; taking a lock returns a [`LockGuard`] that releases it when dropped.
//!
//! - **Reentrant, per thread.** A thread that holds a lock can take it again; each guard
//!   releases one level and the last one frees the lock.
//! - **Leases kept alive by a watchdog.** A lock taken without an explicit lease gets the
//!   watchdog timeout (30 s by default) and is renewed every third of it while held, by one
//!   thread for all locks of the manager, in batches. A holder that dies stops renewing, and
//!   its lock expires on its own.
//! - **Waiting without polling.** A waiter subscribes to the lock's release channel and sleeps
//!   until a release wakes it, or until the holder's lease would run out.
//! - **Lost locks are told, promptly.** [`LockGuard::is_lost`], [`LockGuard::check`],
//!   [`LockGuard::lost_signal`] and the manager's
//!   [`on_lost_lock`](LockManagerBuilder::on_lost_lock) callback report a lock found gone,
//!   with its [`LostReason`]: within one renewal interval of Redis answering that the holder
//!   is gone, at the local lease deadline when Redis cannot be reached, at once after a
//!   [`force_unlock`](Lock::force_unlock).
//! - **Fencing.** Every acquisition carries a [`fencing token`](LockGuard::fencing_token)
//!   that later holders exceed; a [`FencedStore`] refuses writes with an older one.
//! - **Replica acknowledgements.** With
//!   [`replica_acks`](LockManagerBuilder::replica_acks), every acquisition waits (`WAIT`, in
//!   the same round trip) until enough replicas have it; one they did not acknowledge in time
//!   is given back and reported ([`Error::NotReplicated`]), so a failover cannot silently hand
//!   a held lock to a second holder.
//! - **Several servers.** [`RedLock`] takes a lock on a majority of independent masters (the
//!   Redlock algorithm, in one round trip to all of them) and [`MultiLock`] takes several
//!   locks all or nothing, both with a [`GroupGuard`] like a single lock's.
//! - **More synchronizers.** A fair lock ([`LockManager::fair_lock`]) taken in the order of
//!   asking; a [`ReadWriteLock`] for many readers or one writer; a [`Semaphore`] of permits
//!   anyone may take and give back; a [`PermitSemaphore`] whose permits have ids and leases,
//!   with a [`PermitGuard`] the watchdog keeps alive like a lock's, so a holder that dies gives
//!   its permit back; a [`CountDownLatch`] that opens when its count, counted down from any
//!   thread of any process, reaches zero, and wakes every waiter in every process.
//! - **TLS.** A `rediss://` URL (the `tls` feature, on by default) makes every connection of
//!   the manager speak TLS and check the server's certificate against the URL's host, with the
//!   system's roots or a CA of your own, and a client certificate for mutual TLS (see
//!   [TLS](LockManagerBuilder#tls)). A failed handshake says why: an [`Error::Tls`] with a
//!   [`TlsFailure`] kind (an unknown issuer, a wrong host name, a server that does not speak
//!   TLS, or one that speaks nothing else...).
//! - **Deployments.** A single server, TLS, ACL users (a refused login or permission is an
//!   [`Error::AuthenticationFailed`] or [`Error::PermissionDenied`] naming what was refused),
//!   a master with replicas behind Sentinel
//!   ([`LockManager::builder_sentinel`]: failovers are followed, waits go on through them),
//!   and writes acknowledged by replicas before a lock counts as taken
//!   ([`replica_acks`](LockManagerBuilder::replica_acks)), and Redis Cluster
//!   ([`LockManager::builder_cluster`]: every call goes to the master of its name's slot,
//!   renewals go to each master in one pipeline, waiters are woken by sharded pub/sub on
//!   Redis 7).
//! - **Redisson's data layout**, so Rust and Java services exclude each other on the same
//!   lock names.
//!
//! ```
//! # fn main() -> redlease::Result<()> {
//! # let redis = redlease::testing::RedisServer::start().expect("redis-server");
//! # let url = redis.url();
//! let manager = redlease::LockManager::builder(url.as_str()).build()?;
//! let lock = manager.lock("payments:7731");
//! if let Some(guard) = lock.try_lock_for(std::time::Duration::from_secs(5))? {
//!     // ... only one thread in all processes runs this at a time ...
//!     guard.unlock()?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Inside (for contributors)
//!
//! Dependencies point one way, top to bottom; no module reaches into another's private state.
//! (One edge goes up, to the facade's public API only: `RedLock::from_managers` and
//! `from_urls` take or build managers.)
//!
//! ```text
//! manager                 LockManager: the public facade; builds the client, hands out handles
//!   |
//! lock, rwlock, group,    the primitives: thin handles and guards over the layers below
//! fence, latch,           (the fair, read and write locks are kinds of `lock`)
//! semaphore,
//! permit_semaphore
//!   |   guard, wait       shared by every primitive: the guard core and the wait loop
//!   |   cancel, stats     the wait loop's cancel token and its counters (read by `stats()`)
//!   |   fanout            one script call to several servers for about one round trip
//! client                  the internal client: pool, watchdog, pub/sub hub, timeouts, ids
//!   |   route             where a key's calls go: the one pool, or the cluster node of its
//!   |                     slot, `MOVED` and `ASK` followed
//!   |   cluster           cluster mode: the slot map, one pool per node, kept true
//!   |   pool, resolve     command connections with bounded connects (DNS included) and reads
//!   |   sentinel          sentinel mode: where the master is now, and the thread that hears
//!   |                     failovers (`+switch-master`)
//!   |   tls               the TLS options, the rustls set-up, TLS failures sorted by kind
//!   |   watchdog          renews leases in batches, reports losses to the instant
//!   |   pubsub            one subscribed connection: wakes waiters, hears force releases
//!   |   script, lease     runs protocol calls, loading missing scripts; a chain's lease state
//!   |   replication       the replica acknowledgements a write waits for (WAIT) and their
//!   |                     shortfalls
//! protocol                key and channel names, cluster key slots, holder ids, every Lua
//!                         script (plain and sharded dialect) with its arguments and
//!                         replies; no I/O
//! error                   the one Error enum, used everywhere, and the sorting of Redis's
//!                         answers into it (refused logins and permissions included)
//! ```
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod cancel;
mod client;
mod cluster;
mod error;
mod fanout;
mod fence;
mod group;
mod guard;
mod latch;
mod lease;
mod lock;
mod manager;
mod permit_semaphore;
mod pool;
mod protocol;
mod pubsub;
mod replication;
mod resolve;
mod route;
mod rwlock;
mod script;
mod semaphore;
mod sentinel;
mod stats;
#[cfg(all(unix, feature = "testing"))]
#[cfg_attr(docsrs, doc(cfg(all(unix, feature = "testing"))))]
pub mod testing;
mod tls;
mod wait;
mod watchdog;

/// The channels whose receivers [`LockGuard::lost_signal`] and [`GroupGuard::lost_signal`]
/// hand out (for `select!`).
pub use cancel::CancelToken;
pub use crossbeam_channel;
pub use error::{Error, LostReason, Permission, Result, TlsFailure};
pub use fence::FencedStore;
pub use group::{FromGroup, GroupBuilder, GroupGuard, MultiLock, RedLock};
pub use latch::CountDownLatch;
pub use lease::LostLock;
pub use lock::{Lock, LockGuard};
pub use manager::{LockManager, LockManagerBuilder};
pub use permit_semaphore::{PermitGuard, PermitSemaphore};
/// The Redis client this crate is built on, whose types appear in its errors
/// ([`Error::Redis`]) and connection settings.
pub use redis;
pub use rwlock::ReadWriteLock;
pub use semaphore::Semaphore;
pub use stats::{Stats, WaitTimes};
