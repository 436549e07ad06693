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
//!   until a release wakes it, or until the holder's lease would run out. Where one
//!   subscription per waited name costs too much, or a proxy carries no pub/sub, a spin lock
//!   ([`LockManager::spin_lock`]) polls instead, spaced by a [`BackOff`], and a manager may be
//!   built [`without_pubsub`](LockManagerBuilder::without_pubsub).
//! - **Handoffs in one round trip.** A release hands the lock to the next holder inside its
//!   own script when it knows who that is: a thread of the same manager that waits for a
//!   plain lock (at most [`local_handoffs`](LockManagerBuilder::local_handoffs) times in a
//!   row, so other processes get their turn), or the next in line of a fair lock, in any
//!   process. The woken thread holds the lock without asking Redis again.
//! - **Lost locks are told, promptly.** [`LockGuard::is_lost`], [`LockGuard::check`],
//!   [`LockGuard::lost_signal`] and the manager's
//!   [`on_lost_lock`](LockManagerBuilder::on_lost_lock) callback report a lock found gone,
//!   with its [`LostReason`]: within one renewal interval of Redis answering that the holder
//!   is gone, at the local lease deadline when Redis cannot be reached, at once after a
//!   [`break_lock`](Lock::break_lock).
//! - **What a holder can rely on.** [`Guard::valid_for`] says how long the hold is certain by
//!   the local clock, and [`Guard::check_valid_for`] refuses a step that needs longer. A
//!   renewal that fails while the lease may still hold puts the hold at risk
//!   ([`Guard::is_at_risk`], [`Guard::risk_signal`], the
//!   [`on_risk_change`](LockManagerBuilder::on_risk_change) callback, with a [`RiskReason`]);
//!   a renewal that succeeds clears it, and none by the deadline makes it lost.
//! - **Writes guarded by the hold.** [`LockGuard::guarded_write`] applies [`Writes`] (set,
//!   delete, hash set, increment) to your own keys, and [`LockGuard::run_guarded`] a
//!   [`GuardedScript`] of your own, only while the hold is current: Redis checks it in the
//!   same script, so a holder that lost the lock writes nothing.
//! - **Fencing.** Every acquisition carries a [`fencing token`](LockGuard::fencing_token)
//!   that later holders exceed; a [`FencedStore`] refuses writes with an older one. For a
//!   resource that cannot check tokens, a lock delay
//!   ([`Lock::delayed_after_loss`]) keeps a holder's lock from others for a while after the
//!   holder was lost without a release.
//! - **Replica acknowledgements.** By default every acquisition waits (`WAIT`, in the same
//!   round trip) until the replicas its master has in sync (as last counted) have it
//!   ([`connected_replica_acks`](LockManagerBuilder::connected_replica_acks), as Redisson
//!   does; nothing to wait for on a master without replicas), or a fixed number of them
//!   ([`replica_acks`](LockManagerBuilder::replica_acks)); one they did not acknowledge in
//!   time is given back and reported ([`Error::NotReplicated`]), so that a failover to a
//!   replica that was in sync does not hand a held lock to a second holder.
//! - **Several servers.** [`RedLock`] takes a lock on a majority of independent masters (the
//!   Redlock algorithm, in one round trip to all of them) and [`MultiLock`] takes several
//!   locks all or nothing, both with a [`GroupGuard`] like a single lock's.
//! - **More synchronizers.** A fair lock ([`LockManager::fair_lock`]) taken in the order of
//!   asking; non-reentrant locks ([`LockManager::non_reentrant_lock`]) whose holder's second
//!   acquisition is an error at once; a spin lock ([`LockManager::spin_lock`]) waited for by
//!   polling; a [`ReadWriteLock`] for many readers or one writer; a [`Semaphore`] of permits
//!   anyone may take and give back (counted, or with a [`SemaphoreGuard`] that gives them back
//!   when dropped); a [`PermitSemaphore`] whose permits have ids and leases,
//!   with a [`PermitGuard`] the watchdog keeps alive like a lock's, so a holder that dies gives
//!   its permit back; a [`CountDownLatch`] that opens when its count, counted down from any
//!   thread of any process, reaches zero, and wakes every waiter in every process.
//! - **Coordination beyond locks.** A [`LeaderElection`]: candidates campaign with a value,
//!   one leads at a time with a [`LeaderGuard`] (lost and at-risk signals, its term), anyone
//!   reads who leads and follows every change ([`LeaderObserver`]). An upgradable read
//!   ([`ReadWriteLock::upgradable`]) that shares with readers and upgrades to the write lock
//!   with no window for another writer ([`UpgradableGuard::upgrade`]). Cooperative
//!   revocation: anyone may ask the holders of a lock to let go
//!   ([`Lock::request_revocation`], or a waiter's [`Lock::revoking_after`]); the
//!   holder hears it ([`Guard::is_revocation_requested`], [`Guard::revocation_signal`], the
//!   [`on_revocation_request`](LockManagerBuilder::on_revocation_request) callback) and
//!   decides.
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
//!   and writes acknowledged by replicas before a lock counts as taken (by default, the
//!   replicas in sync), and Redis Cluster
//!   ([`LockManager::builder_cluster`]: every call goes to the master of its name's slot,
//!   renewals go to each master in one pipeline, waiters are woken by sharded pub/sub on
//!   Redis 7).
//! - **A checked server.** `build` reads the settings that break a lock silently (an eviction
//!   policy that may drop a held lock, fewer replicas than the acknowledgements asked for, a
//!   cluster's unserved slots) and warns of each [`Finding`], or refuses them with
//!   [`ServerCheck::Strict`]; [`LockManager::check_server`] and `redlease-inspect doctor`
//!   run the same check on demand.
//! - **Redisson's data layout**, so Rust and Java services exclude each other on the same
//!   lock names.
//! - **Bad days.** A connection that breaks after a call was sent never makes it count
//!   twice, every wait rides out an outage, and what a failed call left in Redis is taken back
//!   once the server answers again (see [below](#on-a-bad-day)).
//!
//! ```
//! # fn main() -> redlease::Result<()> {
//! # let redis = redlease_testing::RedisServer::start().expect("redis-server");
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
//! The manual is the [`guide`]: each primitive and its layout in Redis, the deployments and
//! what each gives a held lock, the guarantees and their limits, monitoring, permissions, how
//! it works, and performance.
//!
//! # On a bad day
//!
//! A call sent to Redis whose answer does not come (the connection reset, the server paused,
//! restarted or failing over) may or may not have run. `redlease` never guesses:
//!
//! - **Nothing is applied twice, however late a copy arrives.** Every call that changes
//!   state is safe to send twice. The changes that could not tell a repeat from a new call by
//!   themselves (a count-down, a take, release or change of permits, a forced release, a
//!   fenced or guarded write) carry a request id: their script runs once per id and keeps its
//!   answer for a repeat, so a call sent again after its connection broke is answered again,
//!   not applied again. An acquisition finds its own earlier run by its holder id (a
//!   reentrant level sets its count, rather than adding to it); a lock's release has its
//!   release receipt (the `redisson_unlock_latch` key Redisson's releases leave). And every
//!   such call carries a deadline on the server's clock: a copy held up in the network past
//!   its response timeout, its resends and their answers is refused when it comes after the
//!   deadline, and finds the answer kept when it comes before (see [late
//!   copies](guide::guarantees#late-copies)).
//! - **Every wait rides out an outage**, the same way for every primitive on every
//!   deployment: a wait with a deadline tries again every 100 ms until it, then fails with
//!   the last error (not `Ok(None)`); one without a deadline for up to the
//!   [`outage_grace`](LockManagerBuilder::outage_grace) (30 s by default).
//! - **Changes are sent again, then told.** `count_down`, `release`, `add_permits`,
//!   `try_set_*`, `delete`, `drain_permits`, `break_lock`, fenced writes and a guard's
//!   `unlock` are sent again with the same request through an outage, for up to the outage
//!   grace. When none of the sends was answered and one may have run, the call fails with
//!   [`Error::Indeterminate`]: look at the state once Redis answers. When every send surely
//!   failed (each connection refused), it fails with that error, and nothing happened.
//! - **Nothing is left behind.** An acquisition whose answer did not come is undone: a lock's
//!   level, a fair waiter's place in line, the permits of a semaphore take, a permit. The undo
//!   is queued behind the call on its connection, sent again at once, and when Redis cannot
//!   be reached, sent again by the manager's cleanup thread every 200 ms until Redis answers
//!   or what it undoes would have run out by itself. A guard dropped while Redis cannot be
//!   reached has its release sent the same way (a drop never blocks for the outage).
//!   [`Stats`] counts them (`cleanup_pending`, `cleanup_done`, `cleanup_abandoned`).
//! - **A demoted master is never used again.** Every connection carries the generation of
//!   the topology it was made for (the master the sentinels name, or in cluster mode whether
//!   its node is still a master). A call blocked on a frozen master through its failover, and
//!   answered once the old master wakes, is not trusted: it counts as a broken connection
//!   and is sent again to the master now; its connection is dropped. A new connection in
//!   sentinel mode confirms with `ROLE` that it reached a master. `-UNBLOCKED` (a master
//!   demoted under a `WAIT`) is an outage like the others.
//! - **No guard is handed out already lost.** A grant that arrives after its lease ran out by
//!   the local clock is given back, and the wait goes on (three in a row end it with
//!   [`Error::LeaseSpent`]: the lease is too short for the link).
//! - **A slow process keeps what Redis keeps.** A renewal that Redis answered counts, however
//!   late this process (starved of CPU, throttled by a quota) reads the answer: its time
//!   counts from the send, and what has arrived is read past the deadline.
//!
//! Per primitive, what a repeat of a call may and may not do:
//!
//! | call | sent again after a lost answer | when no answer comes at all |
//! | --- | --- | --- |
//! | lock, fair, read, write, upgradable, candidate: take | finds its own hold (holder id), adds no level; a reentrant level sets its count | undone (place; a level, if the wait ends without it); the next try is a new chain; a copy after the try's deadline takes nothing, and the undo is sent once more when that deadline has passed |
//! | leader: announcement (once the candidate's guard exists) | finds the record naming it: logged once | the campaign fails, and its lock is given back |
//! | upgradable: `upgrade` (the write lock) | finds its own write field | undone, that try's grant only (a try id in the hash): back to the upgradable read |
//! | leader: `unlock`, guard drop | answered from its release receipt (the resignation is logged once) | as a lock's release |
//! | `request_revocation` | sends the notices again: a holder asked twice is told once; a copy after its deadline asks nobody | the error |
//! | lock: `unlock`, guard drop | answered from its release receipt (a handoff too); a repeat never hands the lock on; a copy after its deadline changes nothing | `Indeterminate` (`unlock`), or sent again in the background (drop); one that may have handed the lock on is sent again until answered, and a hold handed to a thread that stopped waiting taken back |
//! | `break_lock` | answered from its request | `Indeterminate` |
//! | [`Semaphore`]: take | answered from its request | undone: the permits it took are given back |
//! | [`Semaphore`]: `release`, `add_permits`, `drain_permits`, `try_set_permits` | answered from its request | `Indeterminate` |
//! | [`SemaphoreGuard`]: `release`, drop | answered from its request | `Indeterminate` (`release`), or sent again in the background for up to the outage grace (drop) |
//! | [`PermitSemaphore`]: take | answered from its request (the permit's id) | undone: the permit is given back |
//! | [`PermitGuard`]: `unlock`, drop | answered from its request | `Indeterminate` (`unlock`), or sent again in the background (drop) |
//! | [`CountDownLatch`]: `count_down`, `try_set_count`, `delete` | answered from its request | `Indeterminate` |
//! | [`FencedStore`]: `set`, `delete` | answered from its request | `Indeterminate` |
//! | [`LockGuard`]: `guarded_write`, `run_guarded` | answered from its request | `Indeterminate` |
//! | renewals, reads (`count`, `is_locked`, ...) | repeated as they are: they change nothing, or extend a lease again | the error |
//!
//! A request's answer is kept in Redis under `redlease_request:{name}:<id>` until a little
//! after its deadline (with the default settings, its deadline is 37 s after it was made:
//! the outage grace, a connect and a response timeout, and a second; a take's, 7 s, and its
//! answer is kept for its undo for the outage grace and one send beyond), and deleted at once
//! when its only send was answered. The group locks ([`RedLock`], [`MultiLock`]) keep their own rules: a member whose
//! answer is lost counts as not taken and is undone within the attempt, once; an undo that
//! does not reach its member leaves a level that runs out with its lease (the cleanup thread
//! does not send group undos yet).
//!
//! # Other crates in the API
//!
//! Two crates' types appear in the API, on purpose, and both are re-exported so that a caller
//! names them through this crate and always has the version it was built with:
//! [`redis`] (an [`Error::Redis`] carries the client's error, with its kind and the server's
//! code; the builder takes its `IntoConnectionInfo`; a [`FencedStore`] and
//! [`LockGuard::run_guarded`] take and give its values) and [`crossbeam_channel`] (the lost,
//! at-risk and revocation signals are its `Receiver`s, for `select!` over several). Wrapping
//! them would hide what callers use them for; a new major version of either is a new major
//! version of this crate.
//!
//! # Inside (for contributors)
//!
//! `src/` reads as the crate's two halves, with the facade above them and the protocol and
//! the error below: `primitives/`, what users hold, and `client/`, what reaches Redis.
//! Dependencies point one way, top to bottom, with no cycle between modules; no module
//! reaches into another's private state. (One edge goes up, to the facade's public API only:
//! `RedLock::from_managers` and `from_urls` take or build managers.)
//!
//! ```text
//! manager           LockManager: the public facade; builds the client, hands out handles
//!   |
//! primitives/       what users hold: thin handles and guards, each kind's rules its own
//!   hold/           what every primitive hands out, written once: the acquisition API
//!                   (LockHandle over a raw trait; revocation over a second one) and the
//!                   guard (Guard over a hold)
//!   lock/           the reentrant lock, one wait for a level (acquisition: its tries
//!                   judged, what they left taken back), the lock's side of handoffs, and
//!                   kind/, a file per kind (plain, fair, spin, non-reentrant, read,
//!                   write, upgradable read) with its rules (the chain it joins, its
//!                   watchdog key, what it waits on or how it polls, whether it hands on);
//!                   the read-write lock that pairs three kinds, and
//!                   the upgradable read's handle and guard
//!   election/       leader election (a lock with a record, a log and a channel; its kind)
//!                   and its observer
//!   group/          RedLock and MultiLock: one attempt to all members, the group's guard
//!   semaphore/      the counting semaphore (counted, or with a guard), and permit/ its
//!                   permit-expirable extension
//!   latch, fence,   the count-down latch; the fenced store; writes a lock guard applies
//!   guarded         only while it holds
//!   |
//! client/           what reaches Redis: the internal client (timeouts, ids, the threads it
//!                   owns; cleanup, the undos of failed calls sent again until Redis
//!                   answers; fanout, one script call to several servers at once)
//!   wait/           the wait loop every blocking call runs, its cancel token, back_off (a
//!                   polling waiter's pauses, and jitter), and line (the lines of a
//!                   process's waiters a release hands a lock to)
//!   watchdog/       renews leases in batches, reports risks, revocation requests and
//!                   losses to the instant, keeps each chain's lease state, deletes release
//!                   receipts
//!   pubsub/         wakes waiters, hears force releases and revocation requests: a hub
//!                   (one subscribed connection and its thread) per server, or cluster_hubs
//!                   per master; transport/ its socket, TLS stream and RESP parser
//!   call/           how one call reaches Redis: route (the pool, or the cluster node of its
//!                   slot, MOVED and ASK followed), runner (scripts by hash, reloaded when
//!                   missing), replication (the WAIT a write waits for, and its shortfalls)
//!   topology/       who to talk to, and how: pool (bounded connects and reads), resolve
//!                   (DNS within a deadline), sentinel (where the master is now), cluster
//!                   (the slot map, one pool per node), tls (options and rustls set-up)
//!   server_check    the settings of the masters that break locks silently, read at build
//!   stats,          the counters of waits, renewals and connections (read by `stats()`),
//!   telemetry       and the same as `metrics` (the feature)
//!   sync            the locks and channels of the watchdog, the cleanup thread, the
//!                   pub/sub hubs and the wait loop (`shuttle`'s in a schedule search of
//!                   the unit tests)
//!   |
//! protocol/         the keys of a handle, cluster key slots, holder ids, every Lua script
//!   |               (plain and sharded dialect) with its arguments and replies, a file per
//!   |               primitive, and lock/ one per lock (plain, fair, rwlock for its three
//!   |               kinds); the `.lua` files in lua/;
//!   |               no I/O
//! error/            the one Error enum, used everywhere, and the sorting of Redis's answers
//!                   into it (TLS failures, refused logins and permissions included); the
//!                   findings of a server check it carries
//!
//! guide/            (public, pages only) the manual, with examples that run as doc tests
//! layout            (public) the name of every key and channel: Redisson's naming rules,
//!                   also used by the redlease-inspect tool
//! ```
//!
//! A primitive's two files share its name: `protocol/latch.rs` holds the latch's scripts,
//! `primitives/latch.rs` the latch; `protocol/lock/fair.rs` the fair lock's scripts,
//! `primitives/lock/kind/fair.rs` its rules.
//!
//! The tests against real servers are in `tests/suite/` (one binary, a module per
//! primitive, promise or deployment; `tests/metrics.rs` and `tests/lifecycle.rs` apart, for
//! what is global to a process), over the fixtures of the workspace's `testing` crate.
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod client;
mod error;
pub mod guide;
pub mod layout;
mod manager;
mod primitives;
mod protocol;

pub use client::server_check::ServerCheck;
pub use client::stats::{Percentiles, Stats, Waited};
pub use client::wait::back_off::BackOff;
pub use client::wait::cancel::CancelToken;
pub use client::watchdog::lease::{LostLock, RevocationNotice, RiskChange, RiskNotice};
/// The channels whose receivers [`Guard::lost_signal`] hands out (for `select!`).
pub use crossbeam_channel;
pub use error::{Error, Finding, LostReason, Permission, Result, RiskReason, TlsFailure};
pub use manager::{LockManager, LockManagerBuilder};
pub use primitives::election::{
    Candidate, Leader, LeaderChange, LeaderElection, LeaderGuard, LeaderObserver,
};
pub use primitives::fence::FencedStore;
pub use primitives::group::{FromGroup, GroupBuilder, GroupGuard, MultiLock, RedLock};
pub use primitives::guarded::{GuardedScript, Writes};
pub use primitives::hold::{Guard, LockHandle};
pub use primitives::latch::CountDownLatch;
pub use primitives::lock::rwlock::ReadWriteLock;
pub use primitives::lock::upgradable::{UpgradableGuard, UpgradableLock};
pub use primitives::lock::{Lock, LockGuard};
pub use primitives::semaphore::permit::{PermitGuard, PermitSemaphore};
pub use primitives::semaphore::{Semaphore, SemaphoreGuard};
/// The Redis client this crate is built on, whose types appear in its API: its errors
/// ([`Error::Redis`]), connection settings ([`LockManager::builder`]), the values of a
/// [`FencedStore`] and the arguments and reply of [`LockGuard::run_guarded`].
pub use redis;
