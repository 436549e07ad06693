//! [`LockManager`]: the public facade that builds the client and hands out primitives.
//!
//! One manager is one Redis client identity (a random v4 UUID, the first half of every holder
//! id). Its builder checks the settings and builds the internal [`Client`] (the command
//! connection pool, the watchdog thread and the pub/sub listener thread); the manager and
//! every handle it makes share that client, and [`LockManager::shutdown`], or dropping the
//! last of them, stops and joins both threads. It may use the client and the primitives'
//! constructors; below the client, only the types of its settings (the lost-lock callback,
//! the replica acknowledgements, the duration checks).

use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionInfo, IntoConnectionInfo};

use crate::client::call::replication::{AckSetting, ReplicaAcks};
use crate::client::server_check::ServerCheck;
use crate::client::stats::Stats;
use crate::client::topology::pool::PoolSizes;
use crate::client::topology::tls::{self, TlsOptions};
use crate::client::wait::back_off::BackOff;
use crate::client::watchdog::lease::{LostLock, RevocationNotice, RiskNotice};
use crate::client::watchdog::Callbacks;
use crate::client::{Client, SentinelSettings, Settings};
use crate::error::{Error, Finding, Result};
use crate::primitives::election::LeaderElection;
use crate::primitives::fence::FencedStore;
use crate::primitives::latch::CountDownLatch;
use crate::primitives::lock::rwlock::ReadWriteLock;
use crate::primitives::lock::{Fair, Lock, NonReentrant, Plain, Spin};
use crate::primitives::semaphore::permit::PermitSemaphore;
use crate::primitives::semaphore::Semaphore;
use crate::protocol::names;

const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);
const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);
/// As in Redisson (`connectionPoolSize`, per node).
const DEFAULT_MAX_CONNECTIONS: usize = 64;
/// Every connection a burst opened stays for the next one: no handshake paid twice.
const DEFAULT_MAX_IDLE_CONNECTIONS: usize = DEFAULT_MAX_CONNECTIONS;
/// As in Redisson (`fairLockWaitTimeout`).
const DEFAULT_FAIR_LOCK_PLACE_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// How many times in a row a release may hand a plain lock to another thread of the same
/// manager before one frees it for everyone.
const DEFAULT_LOCAL_HANDOFFS: u32 = 8;
/// How long calls ride out an outage, by default.
const DEFAULT_OUTAGE_GRACE: Duration = Duration::from_secs(30);
/// How long a write waits for the replicas connected now, by default (Redisson's
/// `slavesSyncTimeout`), unless half the renewal interval is shorter.
const DEFAULT_REPLICA_ACK_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest outage grace accepted: a call blocked longer is surely a mistake.
const MAX_OUTAGE_GRACE: Duration = Duration::from_secs(3600);
/// The shortest watchdog timeout accepted: renewals every 10 ms are the practical floor.
const MIN_WATCHDOG_TIMEOUT: Duration = Duration::from_millis(30);

/// Shares connections, one watchdog thread and one pub/sub listener among all locks of a
/// process. Cheap to clone; every clone is the same client.
///
/// ```
/// # fn main() -> redlease::Result<()> {
/// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
/// # let url = redis.url();
/// use std::time::Duration;
///
/// let manager = redlease::LockManager::builder(url.as_str())
///     .response_timeout(Duration::from_secs(1))
///     .watchdog_timeout(Duration::from_secs(10))
///     .build()?;
/// let guard = manager.lock("nightly-report").lock()?;
/// // ... the watchdog renews the lease every 10 s / 3 while the guard lives ...
/// drop(guard);
/// manager.shutdown();
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct LockManager {
    client: Arc<Client>,
    /// How long a fair lock keeps a waiter's place after the place ahead of it, in ms.
    fair_place_ms: u64,
}

/// Configures and builds a [`LockManager`]; see [`LockManager::builder`].
#[must_use]
pub struct LockManagerBuilder {
    /// The connection info, or why it could not be read (reported by `build`).
    info: std::result::Result<ConnectionInfo, String>,
    connect_timeout: Duration,
    response_timeout: Duration,
    watchdog_timeout: Duration,
    max_idle_connections: usize,
    max_connections: usize,
    fair_lock_place_timeout: Duration,
    local_handoffs: u32,
    pubsub: bool,
    server_check: ServerCheck,
    callbacks: Callbacks,
    /// Sentinel mode: the sentinels (or why they could not be read) and the master's name.
    sentinel: Option<(std::result::Result<Vec<ConnectionInfo>, String>, String)>,
    /// Cluster mode: the nodes to ask for the slot map (or why they could not be read).
    cluster: Option<std::result::Result<Vec<ConnectionInfo>, String>>,
    outage_grace: Duration,
    /// What writes wait for, as each acknowledgement setting called asked, in order (none:
    /// the default, the replicas connected now).
    acks: Vec<AckChoice>,
    /// Checked by `build`, with the URL.
    tls: TlsOptions,
}

impl LockManager {
    /// Starts configuring a manager for the Redis server at `info`: anything redis-rs takes
    /// as connection info, so an application's existing settings pass through unchanged. A
    /// URL (`redis://[user:pass@]host:port[/db]`, `rediss://` for TLS, or
    /// `redis+unix:///path`, as `&str` or `String`), a [`redis::ConnectionInfo`] (database,
    /// user and password included), or a `(host, port)` pair.
    ///
    /// With `rediss://` (the `tls` feature, on by default), every connection of the manager
    /// speaks TLS and checks the server's certificate against the URL's host, a name or an IP
    /// address, with the system's roots unless
    /// [`tls_ca_certificate`](LockManagerBuilder::tls_ca_certificate) gives a CA (see
    /// [TLS](LockManagerBuilder#tls)).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let port = redis.port();
    /// use redlease::redis::IntoConnectionInfo;
    ///
    /// // The application's own settings, made once for its other Redis work.
    /// let info = ("127.0.0.1", port).into_connection_info()?;
    /// let manager = redlease::LockManager::builder(info.clone()).build()?;
    /// let same_server = redlease::LockManager::builder(("127.0.0.1", port)).build()?;
    /// # Ok(())
    /// # }
    /// ```
    // The links to the TLS builder options, which only the `tls` feature has.
    #[cfg_attr(not(feature = "tls"), allow(rustdoc::broken_intra_doc_links))]
    pub fn builder(info: impl IntoConnectionInfo) -> LockManagerBuilder {
        LockManagerBuilder {
            info: info.into_connection_info().map_err(|err| err.to_string()),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            watchdog_timeout: DEFAULT_WATCHDOG_TIMEOUT,
            max_idle_connections: DEFAULT_MAX_IDLE_CONNECTIONS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            fair_lock_place_timeout: DEFAULT_FAIR_LOCK_PLACE_TIMEOUT,
            local_handoffs: DEFAULT_LOCAL_HANDOFFS,
            pubsub: true,
            server_check: ServerCheck::Warn,
            callbacks: Callbacks::default(),
            sentinel: None,
            cluster: None,
            outage_grace: DEFAULT_OUTAGE_GRACE,
            acks: Vec::new(),
            tls: TlsOptions::default(),
        }
    }

    /// Starts configuring a manager for the master that the sentinels at `sentinels` know
    /// as `master_name` (Redis Sentinel). The manager asks them where the master is, follows
    /// every failover they announce (`+switch-master`) or that it meets (the master
    /// unreachable, or answering `READONLY`), and moves its connections, the pub/sub listener
    /// included, to the new master. Waits go on through a failover (see
    /// [`outage_grace`](LockManagerBuilder::outage_grace)), and the watchdog renews on
    /// the new master: a lock whose key reached the promoted replica stays held, one whose
    /// key did not is reported lost. By default an acquisition counts once the replicas in
    /// sync have it ([`connected_replica_acks`](LockManagerBuilder::connected_replica_acks)).
    ///
    /// Each sentinel address is a URL (`redis://[user:pass@]host:26379`, the sentinel's own
    /// credentials) or anything else redis-rs takes as connection info. The master's
    /// credentials and database are set apart, with
    /// [`master_auth`](LockManagerBuilder::master_auth) and
    /// [`master_database`](LockManagerBuilder::master_database).
    ///
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let manager = redlease::LockManager::builder_sentinel(
    ///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    ///     "locks",
    /// )
    /// .master_auth(Some("locker"), "s3cret")
    /// .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder_sentinel<I>(sentinels: I, master_name: &str) -> LockManagerBuilder
    where
        I: IntoIterator,
        I::Item: IntoConnectionInfo,
    {
        let sentinels: std::result::Result<Vec<ConnectionInfo>, String> = sentinels
            .into_iter()
            .map(|sentinel| sentinel.into_connection_info())
            .collect::<std::result::Result<_, _>>()
            .map_err(|err| err.to_string());
        // The master's connection: plain or TLS as the sentinels' first address, no
        // credentials until `master_auth`.
        let master = match &sentinels {
            Ok(sentinels) => match sentinels.first() {
                Some(first) => Ok(first
                    .clone()
                    .set_redis_settings(redis::RedisConnectionInfo::default())),
                None => Err("sentinel mode needs at least one sentinel address".to_owned()),
            },
            Err(err) => Err(err.clone()),
        };
        let mut builder = LockManager::builder(("127.0.0.1", 0));
        builder.info = master;
        builder.sentinel = Some((sentinels, master_name.to_owned()));
        builder
    }

    /// Starts configuring a manager for the Redis Cluster that the nodes at `seed_urls`
    /// belong to: any of its nodes, masters or replicas, as URLs or connection infos like
    /// [`builder`](Self::builder)'s. The first one's credentials and TLS (`rediss://`) are
    /// every node's; a cluster has only database 0.
    ///
    /// The manager asks the seeds, in turn, which master serves each of the cluster's 16 384
    /// slots (`CLUSTER SLOTS`), and sends every call to the master of its key's slot. Every key
    /// and channel of a lock is in the slot of its name (or of the name's hash tag: `{tenant}`
    /// in `{tenant}:job`), so each call goes to one node. A node that answers `MOVED` (the slot
    /// moved) has the call sent where it says, and the map asked for again; `ASK` (the slot
    /// is being migrated) has the one call sent to the node named. A node that cannot be
    /// reached, or `CLUSTERDOWN`, has the map asked for again, and waits ride out the
    /// failover for up to [`outage_grace`](LockManagerBuilder::outage_grace). Renewals go
    /// to each master in one pipeline per renewal interval. On Redis 7, releases publish on
    /// shard channels (`SPUBLISH`) and waiters subscribe (`SSUBSCRIBE`) on the master of the
    /// channel's slot; on Redis 6, with plain `PUBLISH` and `SUBSCRIBE`.
    ///
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let manager = redlease::LockManager::builder_cluster([
    ///     "redis://10.0.0.1:6379",
    ///     "redis://10.0.0.2:6379",
    ///     "redis://10.0.0.3:6379",
    /// ])
    /// .build()?;
    /// let lock = manager.lock("{tenant-42}:export");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors (at [`build`](LockManagerBuilder::build))
    /// [`Error::InvalidArgument`] without a seed, for a seed that is not a TCP address or
    /// whose node is not in cluster mode, for a database other than 0; otherwise the error of
    /// the last seed asked.
    pub fn builder_cluster<I>(seed_urls: I) -> LockManagerBuilder
    where
        I: IntoIterator,
        I::Item: IntoConnectionInfo,
    {
        let seeds: std::result::Result<Vec<ConnectionInfo>, String> = seed_urls
            .into_iter()
            .map(|seed| seed.into_connection_info())
            .collect::<std::result::Result<_, _>>()
            .map_err(|err| err.to_string());
        let first = match &seeds {
            Ok(seeds) => match seeds.first() {
                Some(first) => Ok(first.clone()),
                None => Err("cluster mode needs at least one node address".to_owned()),
            },
            Err(err) => Err(err.clone()),
        };
        let mut builder = LockManager::builder(("127.0.0.1", 0));
        builder.info = first;
        builder.cluster = Some(seeds);
        builder
    }

    /// A handle to the lock called `name`: any non-empty string (braces, spaces and unicode
    /// included); it is the Redis key of the lock. Making a handle does no I/O; every call on
    /// a handle with an empty name fails with [`Error::InvalidArgument`].
    pub fn lock(&self, name: &str) -> Lock {
        Lock::plain(Arc::clone(&self.client), name)
    }

    /// A handle to the fair lock called `name`: a [`Lock`] whose waiters, in all processes,
    /// take it in the order they asked for it. Same API and guard as [`lock`](Self::lock)'s.
    ///
    /// Besides the lock's hash, it keeps a queue of waiters (`redisson_lock_queue:{name}`) and
    /// when each place in it expires (`redisson_lock_timeout:{name}`), as Redisson does. A
    /// release wakes only the next in line, on its own channel. A waiter that gives up (its
    /// wait ran out, or it failed) leaves the queue; a waiter that died keeps its place until
    /// the place expires, [`fair_lock_place_timeout`](LockManagerBuilder::fair_lock_place_timeout)
    /// after the place ahead of it, and is skipped then. A try that finds the lock taken
    /// ([`try_lock`](Lock::try_lock), or a wait that runs out) leaves the queue again: one
    /// more round trip.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// let ledger = manager.fair_lock("ledger");
    /// let guard = ledger.lock()?; // first come, first served
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fair_lock(&self, name: &str) -> Lock {
        let kind = Fair::new(name, self.fair_place_ms);
        Lock::of_kind(Arc::clone(&self.client), Arc::new(kind))
    }

    /// A handle to the non-reentrant lock called `name` (Redisson's `getNonReentrantLock`): a
    /// [`Lock`] that the thread holding it cannot take again. Its second `lock`, `try_lock`,
    /// `try_lock_for` or `with_lock` fails at once with [`Error::AlreadyHeld`], where the
    /// reentrant lock would count a level (and where a lock that did neither would wait for
    /// the thread's own hold). Other threads and processes contend for it as for the lock.
    ///
    /// It is laid out as the lock is: it excludes [`lock`](Self::lock)'s handles, Redisson's
    /// `RLock` and Redisson's non-reentrant lock on the same name. It is no member of a group
    /// lock.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// let migration = manager.non_reentrant_lock("schema-migration");
    /// let guard = migration.lock()?;
    /// assert!(matches!(
    ///     migration.try_lock(),
    ///     Err(redlease::Error::AlreadyHeld { .. })
    /// ));
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn non_reentrant_lock(&self, name: &str) -> Lock {
        let kind = NonReentrant(Plain::new(name));
        Lock::of_kind(Arc::clone(&self.client), Arc::new(kind))
    }

    /// A handle to the non-reentrant fair lock called `name` (Redisson's
    /// `getNonReentrantFairLock`): the [`fair_lock`](Self::fair_lock), whose holding thread
    /// cannot take it again ([`Error::AlreadyHeld`], at once, as for
    /// [`non_reentrant_lock`](Self::non_reentrant_lock)). Laid out as the fair lock is: it
    /// excludes the fair lock's handles and Redisson's fair and non-reentrant fair locks on
    /// the same name, and queues among their waiters.
    pub fn non_reentrant_fair_lock(&self, name: &str) -> Lock {
        let kind = NonReentrant(Fair::new(name, self.fair_place_ms));
        Lock::of_kind(Arc::clone(&self.client), Arc::new(kind))
    }

    /// A handle to the spin lock called `name` (Redisson's `getSpinLock(name, backOff)`): a
    /// [`Lock`] whose waiters poll Redis, spaced by `back_off`, instead of subscribing to its
    /// releases. For deployments whose proxy does not carry pub/sub, and for processes that
    /// wait on very many names at once: a waiter costs no subscription and no channel, only
    /// its tries (about one per `0.75 * back_off.max_delay()` once it has waited a while; see
    /// [`BackOff`]). The price is latency: a release is noticed at the waiter's next try,
    /// not at once. A release of this manager still hands the lock to a thread of the manager
    /// that waits for it, at once.
    ///
    /// Everything else is the lock's: reentrant, the same guard, watchdog, fencing token,
    /// deadlines, cancellation and revocation. It is laid out as the lock is: it excludes
    /// [`lock`](Self::lock)'s handles and Redisson's `RLock` and spin lock on the same name,
    /// and its releases wake the lock's waiters. It is no member of a group lock.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// use std::time::Duration;
    /// use redlease::BackOff;
    ///
    /// let back_off = BackOff::exponential(Duration::from_millis(5), Duration::from_millis(100))?;
    /// let report = manager.spin_lock("nightly-report", back_off);
    /// if let Some(guard) = report.try_lock_for(Duration::from_secs(2))? {
    ///     // ... the report ...
    ///     guard.unlock()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn spin_lock(&self, name: &str, back_off: BackOff) -> Lock {
        let kind = Spin {
            plain: Plain::new(name),
            back_off,
        };
        Lock::of_kind(Arc::clone(&self.client), Arc::new(kind))
    }

    /// The leader election called `name` (see [`LeaderElection`]): its candidates campaign
    /// for a lock on the name, and anyone may read or follow who leads.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// let leading = manager.leader_election("billing-cron").candidate("worker-3").lock()?;
    /// println!("leading in term {}", leading.term());
    /// # Ok(())
    /// # }
    /// ```
    pub fn leader_election(&self, name: &str) -> LeaderElection {
        LeaderElection::new(Arc::clone(&self.client), name)
    }

    /// A handle to the read-write lock called `name` (see [`ReadWriteLock`]).
    pub fn read_write_lock(&self, name: &str) -> ReadWriteLock {
        ReadWriteLock::new(Arc::clone(&self.client), name)
    }

    /// A value under `key` that only takes writes carrying a fencing token at least as high
    /// as any it has seen (see [`FencedStore`]). Making the handle does no I/O.
    pub fn fenced_store(&self, key: &str) -> FencedStore {
        FencedStore::new(Arc::clone(&self.client), key)
    }

    /// A handle to the count-down latch called `name` (see [`CountDownLatch`]): any
    /// non-empty string; it is the Redis key of the count. Making a handle does no I/O; every
    /// call on a handle with an empty name fails with [`Error::InvalidArgument`].
    pub fn count_down_latch(&self, name: &str) -> CountDownLatch {
        CountDownLatch::new(Arc::clone(&self.client), name)
    }

    /// A handle to the counting semaphore called `name` (see [`Semaphore`]): any non-empty
    /// string; it is the Redis key of the permit count. Making a handle does no I/O; every
    /// call on a handle with an empty name fails with [`Error::InvalidArgument`].
    pub fn semaphore(&self, name: &str) -> Semaphore {
        Semaphore::new(Arc::clone(&self.client), name)
    }

    /// A handle to the semaphore called `name` whose permits have ids and leases (see
    /// [`PermitSemaphore`]); named as for [`semaphore`](LockManager::semaphore), and it shares
    /// the permit count of a [`Semaphore`] of the same name.
    pub fn permit_semaphore(&self, name: &str) -> PermitSemaphore {
        PermitSemaphore::new(self.semaphore(name))
    }

    /// The client id: the first half of every holder id of this manager.
    pub fn client_id(&self) -> &str {
        self.client.id()
    }

    /// The lease of watchdog-kept locks; they are renewed every third of it.
    pub fn watchdog_timeout(&self) -> Duration {
        self.client.watchdog_timeout()
    }

    /// How many locks (and permits of a [`PermitSemaphore`]) held through this manager the
    /// watchdog tracks now: those it renews, and those with a fixed lease whose deadline it
    /// watches.
    pub fn watched_locks(&self) -> usize {
        self.client.watchdog().len()
    }

    /// How many release channels the pub/sub listener is subscribed to (or busy subscribing
    /// or unsubscribing) for waiting threads now.
    pub fn subscribed_channels(&self) -> usize {
        self.client.pubsub().channel_count()
    }

    /// A snapshot of what this manager's primitives have been doing: holds, waiting threads,
    /// acquisitions and their wait times, how long holds lasted, renewals and their round
    /// trips, the names waited for longest, risks and losses by reason, pub/sub reconnects.
    /// No I/O; cheap enough to read every second. The names waited for are a bounded list
    /// here only: the `metrics` below have no label per name, whose set could grow without
    /// bound.
    ///
    /// With the `metrics` cargo feature, the same counts are also reported as they happen
    /// through the [`metrics`](https://docs.rs/metrics) facade, to the recorder the
    /// application installed (counts over every manager of the process; the figures of
    /// what is held or waiting now stay with `stats()`):
    ///
    /// | name | kind | labels | what |
    /// | --- | --- | --- | --- |
    /// | `redlease_acquisitions_total` | counter | | blocking or trying calls that took the primitive |
    /// | `redlease_wait_seconds` | histogram | | how long each of those waited |
    /// | `redlease_hold_seconds` | histogram | | how long each hold lasted (a thread's chain of levels, released or lost) |
    /// | `redlease_renewal_seconds` | histogram | | how long each renewal batch took, from its send to its last answer |
    /// | `redlease_renewals_total` | counter | | holds sent for renewal |
    /// | `redlease_renewal_failures_total` | counter | | of those, the ones without a usable answer |
    /// | `redlease_at_risk_total` | counter | `reason` | holds raised at risk: `unreachable`, `unanswered`, `failover`, `refused` |
    /// | `redlease_risk_cleared_total` | counter | | holds at risk renewed again |
    /// | `redlease_revocations_requested_total` | counter | | holds whose holder was asked to let go |
    /// | `redlease_handoffs_total` | counter | | acquisitions handed to a waiting thread inside a release |
    /// | `redlease_lost_total` | counter | `reason` | holds lost: `not_held_anymore`, `lease_expired`, `force_released` |
    /// | `redlease_pubsub_reconnects_total` | counter | | pub/sub connections made again after the first |
    /// | `redlease_cleanups_total` | counter | `outcome` | undos of failed calls ended: `done`, `abandoned` |
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// manager.lock("report").with_lock(|_| ())?;
    /// let stats = manager.stats();
    /// assert_eq!((stats.acquisitions, stats.held), (1, 0));
    /// println!("p99 wait {:?}", stats.wait_times.p99);
    /// # Ok(())
    /// # }
    /// ```
    pub fn stats(&self) -> Stats {
        self.client.stats()
    }

    /// Reads the settings of every master that put locks at risk, and answers what it found
    /// (nothing when all is well); [`build`](LockManagerBuilder::build) runs it as its
    /// [`server_check`](LockManagerBuilder::server_check) says, and the inspect tool's `doctor`
    /// prints it. It reads, from each master in turn:
    ///
    /// - `INFO memory`: a `maxmemory_policy` other than `noeviction` may evict a held lock's
    ///   key, which always has a TTL ([`Finding::Eviction`]);
    /// - `INFO replication`, with [`replica_acks`](LockManagerBuilder::replica_acks) or
    ///   [`aof_acks`](LockManagerBuilder::aof_acks) asking for replicas: fewer replicas in
    ///   sync (`state=online`) than asked for ([`Finding::TooFewReplicas`]);
    /// - `CLUSTER INFO`, on a cluster: slots without a master, or with a failed one, or the
    ///   cluster failing ([`Finding::SlotsUncovered`], told once).
    ///
    /// What it could not read (a command refused by an ACL or disabled by the service, a
    /// master that did not answer in time) is a [`Finding::Unreadable`], and it goes on with
    /// the rest: it says what it could not see rather than guess (`+info +cluster|info` let
    /// it read all). Only the masters are read: a replica promoted later brings its own
    /// settings. It does not see whether the replicas write an append-only file, which
    /// [`aof_acks`](LockManagerBuilder::aof_acks) needs of them.
    ///
    /// # Errors
    /// [`Error::ShutDown`] after [`shutdown`](Self::shutdown).
    pub fn check_server(&self) -> Result<Vec<Finding>> {
        self.client.check_server()
    }

    /// Runs the server check as `check` says, once the manager is connected: an error fails
    /// the build.
    fn check_at_build(&self, check: ServerCheck) -> Result<()> {
        if check == ServerCheck::Off {
            return Ok(());
        }
        let findings = self.check_server()?;
        if check == ServerCheck::Strict && !findings.is_empty() {
            return Err(Error::UnsafeServer { findings });
        }
        for finding in &findings {
            log::warn!("server check: {finding}");
        }
        Ok(())
    }

    /// Stops the watchdog and the pub/sub listener and joins their threads. Later
    /// acquisitions fail with [`Error::ShutDown`]; guards still held can release, and locks
    /// no longer renewed expire after their lease. Dropping the last clone does the same.
    pub fn shutdown(&self) {
        self.client.shutdown();
    }
}

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockManager")
            .field("client_id", &self.client.id())
            .field("watchdog_timeout", &self.watchdog_timeout())
            .finish_non_exhaustive()
    }
}

/// # TLS
///
/// A `rediss://` URL makes every connection of the manager speak TLS: the command
/// connections (through redis-rs, built with its `tls-rustls` feature) and the subscribed
/// connection that wakes waiters (rustls directly), with the same roots, client certificate
/// and checks. The server's certificate must chain to a trusted root (the system's, or the
/// CA given with [`tls_ca_certificate`](Self::tls_ca_certificate)) and be valid for the URL's
/// host: a DNS name (also sent as SNI), or an IP address for an IP host. The handshake is
/// part of connecting, within the [connect timeout](Self::connect_timeout).
///
/// TLS needs the `tls` feature (on by default); without it a `rediss://` URL is an
/// [`Error::InvalidArgument`]. rustls needs a process-wide crypto provider, which redis-rs
/// takes from rustls's `CryptoProvider::get_default()`: the first build with a
/// `rediss://` URL installs ring's when none is installed yet. An application that installs
/// its own before (`install_default`) keeps it, and the manager uses that one.
///
/// A failed handshake is an [`Error::Tls`] whose [`TlsFailure`](crate::TlsFailure) tells why
/// (an unknown issuer, a wrong host name, a server that does not speak TLS, a client
/// certificate missing...), at build and on any later call that needs a new connection:
///
/// ```
/// # #[cfg(not(feature = "tls"))]
/// # fn main() {}
/// # #[cfg(feature = "tls")]
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let files = redlease_testing::TlsFiles::generate()?;
/// # let redis = redlease_testing::RedisServer::start_tls(&files, &Default::default())?;
/// # let url = redis.url();
/// // A server whose certificate was not signed by the system's roots: no CA given.
/// match redlease::LockManager::builder(url.as_str()).build() {
///     Err(redlease::Error::Tls { kind: redlease::TlsFailure::UnknownIssuer, detail }) => {
///         println!("untrusted server certificate: {detail}");
///     }
///     other => panic!("expected an unknown issuer, got {other:?}"),
/// }
/// # Ok(())
/// # }
/// ```
// The links to the TLS builder options, which only the `tls` feature has.
#[cfg_attr(not(feature = "tls"), allow(rustdoc::broken_intra_doc_links))]
impl LockManagerBuilder {
    /// The longest a new connection may take, host name lookup included (default 3 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The longest Redis may take to answer one command (default 3 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The lease of locks taken without an explicit lease, renewed every third of it while
    /// held (default 30 s). A holder that dies keeps the lock at most this long.
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.watchdog_timeout = timeout;
        self
    }

    /// How many idle command connections are kept for reuse (default 64, as many as may be
    /// open: a burst's connections stay for the next one; at most
    /// [`max_connections`](Self::max_connections)).
    pub fn max_idle_connections(mut self, count: usize) -> Self {
        self.max_idle_connections = count;
        self
    }

    /// How many command connections may be open at once to one server (to each node, in
    /// cluster mode), idle and in use (default 64, as Redisson's `connectionPoolSize`). A
    /// call that finds them all in use waits for one, within its connect timeout (or its
    /// deadline), and fails with [`Error::Timeout`] if none comes: a burst of threads never
    /// opens more, so it cannot exhaust the server's `maxclients` (or a proxy's), nor pay a
    /// TLS handshake per thread. The pub/sub connection is not counted, nor, after a
    /// failover, the connections still open to the old master. A group lock whose members
    /// share a server needs one connection per member at once: its `build` refuses more
    /// members on one server than this.
    ///
    /// # Errors
    /// `build` answers [`Error::InvalidArgument`] for zero.
    pub fn max_connections(mut self, count: usize) -> Self {
        self.max_connections = count;
        self
    }

    /// How long a fair lock keeps a waiter's place in its queue after the place ahead of it
    /// expired (default 5 minutes, Redisson's `fairLockWaitTimeout`): a waiter that died is
    /// skipped that much later. A live waiter asks again well within it.
    pub fn fair_lock_place_timeout(mut self, timeout: Duration) -> Self {
        self.fair_lock_place_timeout = timeout;
        self
    }

    /// How many times in a row the release of a [plain lock](LockManager::lock) may hand the
    /// lock to another thread of this manager that waits for it (default 8; 0: never).
    ///
    /// When a thread releases the last level of its hold while another thread of the same
    /// manager waits for that lock, the release script gives the lock to the waiting thread
    /// (a new holder id and fencing token, the lease it asked for) instead of freeing it, and
    /// the waiting thread holds it without asking Redis again: a handoff costs one round
    /// trip instead of a release, a wake-up and an acquisition. Redisson's lock is not fair
    /// either: a waiter in another process has no right to go first. This bound keeps one busy
    /// process from keeping the lock from the others: after this many handoffs in a row, a
    /// release frees the lock for everyone, which wakes the waiters of every process. See
    /// [the performance guide](crate::guide::performance) for what it costs and saves.
    ///
    /// No release hands a lock on while writes wait for replicas (by default, while the
    /// master has replicas in sync; always with
    /// [`replica_acks`](LockManagerBuilder::replica_acks)): a handed lock would be an
    /// acquisition no replica acknowledged.
    pub fn local_handoffs(mut self, in_a_row: u32) -> Self {
        self.local_handoffs = in_a_row;
        self
    }

    /// Builds a manager that subscribes to nothing: for a deployment whose proxy does not
    /// carry pub/sub. Otherwise `build` fails where the proxy refuses `SUBSCRIBE`, and where
    /// it drops or ignores the subscribed connection, `build` waits out the connect timeout
    /// and the listener connects again and again while waiters poll. Without pub/sub the
    /// manager opens no subscribed connection to Redis and starts no listener thread (in
    /// Sentinel mode it still follows `+switch-master` on the sentinels).
    ///
    /// What it costs: no wait is woken by a release message. The waiters of every primitive
    /// look again every 100 ms instead (the lock, the fair lock, the read-write lock,
    /// semaphores, the latch, group locks, leadership); a
    /// [spin lock](LockManager::spin_lock)'s look as its back-off says, which is what to use
    /// where many waiters would make that polling too dear. No notice reaches this manager's
    /// holders: a revocation request is not heard (an
    /// [`on_revocation_request`](Self::on_revocation_request) callback never runs), and a lock
    /// freed by [`break_lock`](Lock::break_lock) is reported lost at its next renewal rather
    /// than at once (a hold with a fixed lease, never renewed, when its lease ends). A release
    /// of a plain, spin or write lock in the process still hands it to a waiting thread of the
    /// process at once; a fair lock's grant, told by message, is found by the waiter's next
    /// try.
    pub fn without_pubsub(mut self) -> Self {
        self.pubsub = false;
        self
    }

    /// What [`build`](Self::build) does with the check of the servers' settings (default
    /// [`ServerCheck::Warn`]): some settings break a lock silently, and the check reads them
    /// from every master once the manager is connected (see
    /// [`LockManager::check_server`] for what it reads and needs). With `Warn` each
    /// [`Finding`] is a warning in the log and the build goes on; with `Strict` any finding
    /// fails the build with [`Error::UnsafeServer`], what the user may not read included;
    /// `Off` reads nothing.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// use redlease::{LockManager, ServerCheck};
    ///
    /// let manager = LockManager::builder(redis.url())
    ///     .server_check(ServerCheck::Strict) // a throwaway server: noeviction, no cluster
    ///     .build()?;
    /// assert!(manager.check_server()?.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn server_check(mut self, check: ServerCheck) -> Self {
        self.server_check = check;
        self
    }

    /// Makes every acquisition wait until `replicas` replicas of the master have acknowledged
    /// it, `timeout` at most, however many the master has (by default, writes wait for the
    /// replicas it has in sync at the moment: see
    /// [`connected_replica_acks`](LockManagerBuilder::connected_replica_acks)). A master that
    /// dies before its replicas got a lock's key would otherwise let a failover hand the held
    /// lock to a second holder. A master with fewer replicas in sync refuses every
    /// acquisition until they are back (the server check warns of it at build).
    ///
    /// A `WAIT replicas timeout` follows each write in the same round trip, so an answer may
    /// now take the response timeout plus `timeout` (Redis checks a `WAIT`'s timeout on its
    /// clock tick, every 100 ms at the default `hz`, so a short one may run that much
    /// longer; the response timeout covers it):
    /// - **Acquisitions** (every kind of [`Lock`], [`Semaphore`] and [`PermitSemaphore`]
    ///   permits, and a [`RedLock`](crate::RedLock) or [`MultiLock`](crate::MultiLock)
    ///   member of this manager) that too few replicas acknowledged are given back and fail
    ///   with [`Error::NotReplicated`], transient: the caller never holds what a failover
    ///   could erase. A blocking call tries again through it, as through an outage, until
    ///   its deadline (without one, for up to the outage grace); a `try_lock` ends with it
    ///   at once. With the replicas lagging,
    ///   every attempt, taken or not, may wait up to `timeout` (`WAIT` also covers the
    ///   connection's earlier writes).
    /// - **Renewals** and **releases** stand whatever the replicas did: a short renewal keeps
    ///   the lock, a short release frees it on the master. They are counted in
    ///   [`Stats::renewals_unreplicated`] and [`Stats::releases_unreplicated`] and warned of
    ///   in the log (at most every 10 s).
    /// - **[`FencedStore`] writes** fail with [`Error::NotReplicated`] when too few replicas
    ///   acknowledged them; they stand on the master, and may be written again with the same
    ///   token.
    ///
    /// An ACL user needs the `WAIT` command besides those of the primitives. `WAIT` makes a
    /// lost lock unlikely, not impossible: a failover may promote a replica that did not
    /// acknowledge, and acknowledged writes are in the replicas' memory, not on their disks.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let (master, replica) = redlease_testing::RedisServer::start_with_replica()
    /// #     .expect("redis-server");
    /// use std::time::Duration;
    ///
    /// let manager = redlease::LockManager::builder(master.url())
    ///     .replica_acks(1, Duration::from_millis(500))
    ///     .build()?;
    /// let guard = manager.lock("ledger").lock()?; // one replica has the lock's key too
    /// # assert!(replica.command(&["EXISTS", "ledger"]).unwrap().starts_with(":1"));
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// `build` fails with [`Error::InvalidArgument`] for zero replicas, a zero `timeout`, or
    /// one that is not shorter than a third of the
    /// [`watchdog_timeout`](LockManagerBuilder::watchdog_timeout) (the watchdog renews that
    /// often, and must not spend the interval waiting for replicas).
    pub fn replica_acks(mut self, replicas: u32, timeout: Duration) -> Self {
        self.acks.push(AckChoice::Replicas(replicas, timeout));
        self
    }

    /// Like [`replica_acks`](LockManagerBuilder::replica_acks), with the writes on disk rather
    /// than in memory: every write waits (`WAITAOF`, in the same round trip) until it is in
    /// the append-only file, fsynced, on the master when `local_fsync`, and on `replicas`
    /// replicas. A shortfall is [`Error::NotPersisted`], treated as
    /// [`Error::NotReplicated`] is: an acquisition is given back, other writes stand and are
    /// told or counted.
    ///
    /// `WAITAOF` is in Redis 7.2 and later, and in Valkey; the servers need `appendonly yes`
    /// (the master, for `local_fsync`; the replicas, for `replicas`). How soon a write is
    /// fsynced depends on their `appendfsync` (`everysec`: within about a second, which the
    /// ack timeout must allow for). `build` asks every master and fails with
    /// [`Error::Unsupported`] on a server without the command, or with `local_fsync` on a
    /// master without an append-only file; [`Error::InvalidArgument`] for neither
    /// `local_fsync` nor a replica, a timeout out of range as for `replica_acks`, or both
    /// settings at once.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let Some(valkey) = redlease_testing::server_with_waitaof() else { return Ok(()) };
    /// # let (master, _replica) = valkey.expect("valkey-server");
    /// use std::time::Duration;
    ///
    /// let manager = redlease::LockManager::builder(master.url())
    ///     .aof_acks(true, 1, Duration::from_millis(2500))
    ///     .watchdog_timeout(Duration::from_secs(30))
    ///     .build()?;
    /// let guard = manager.lock("ledger").lock()?; // on the master's disk and a replica's
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn aof_acks(mut self, local_fsync: bool, replicas: u32, timeout: Duration) -> Self {
        self.acks
            .push(AckChoice::Aof(local_fsync, replicas, timeout));
        self
    }

    /// Every write waits for the replicas its master has in sync at the moment (as last counted, at
    /// most about a second before), within `timeout`. This is the default, with a `timeout` of 1 s
    /// (or half the watchdog's renewal interval, when that is shorter), as Redisson's
    /// `checkLockSyncedSlaves` with its `slavesSyncTimeout`; on a master without replicas it costs
    /// nothing.
    ///
    /// It is [`replica_acks`](LockManagerBuilder::replica_acks) with the count taken from the
    /// master instead of fixed: the replicas `INFO replication` lists `state=online` whose last
    /// acknowledgement is at most a second old. A thread of the manager (`redlease-replicas`) reads
    /// it from each master at `build`, again every second while writes use it, and within 0.1 s
    /// after a `WAIT` answered another count (up to half a second more while another master does
    /// not answer); a write takes the count last read and never waits for the read. A shortfall is
    /// treated as with `replica_acks`: an acquisition is given back and fails with
    /// [`Error::NotReplicated`] (transient: a blocking call tries again), a renewal or a release
    /// stands and is counted.
    ///
    /// What it promises at a failover: a lock was granted only once every replica counted in
    /// sync had its key, so a promoted replica that was in sync has it. What it does not: a
    /// master with no replica in sync (they are down, or still loading a full copy after a
    /// failover) sends no `WAIT`, and grants locks a failover then may lose; a fixed count
    /// refuses them instead, and with it every lock until the replicas are back. The
    /// [deployments guide](crate::guide::deployments) compares the
    /// three settings at a failover, with how long each left the locks unavailable.
    ///
    /// A replica that stalls (paused, cut off) still counts until its acknowledgement is over
    /// a second old: for two to three seconds, acquisitions wait `timeout` and fail with
    /// [`Error::NotReplicated`]. An ACL user needs `WAIT` and `INFO`; where `INFO` is refused,
    /// the count is 0 (warned of in the log) and writes wait for nothing.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let (master, replica) = redlease_testing::RedisServer::start_with_replica()
    /// #     .expect("redis-server");
    /// use std::time::Duration;
    ///
    /// let manager = redlease::LockManager::builder(master.url())
    ///     .connected_replica_acks(Duration::from_millis(500))
    ///     .build()?;
    /// let guard = manager.lock("ledger").lock()?; // the replica has the lock's key too
    /// # assert!(replica.command(&["EXISTS", "ledger"]).unwrap().starts_with(":1"));
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// `build` fails with [`Error::InvalidArgument`] for a `timeout` out of range, as for
    /// `replica_acks`.
    pub fn connected_replica_acks(mut self, timeout: Duration) -> Self {
        self.acks.push(AckChoice::Connected(timeout));
        self
    }

    /// Writes wait for no replica: the master's answer is all. A failover just after an
    /// acquisition may promote a replica without the lock's key, and a second holder may
    /// take it while the first still believes it holds it. For masters whose replicas are
    /// far (each write would wait a round trip to them), or locks that a failover may break
    /// (a fencing token, [`LockGuard::fencing_token`](crate::LockGuard::fencing_token), still
    /// tells the resource).
    pub fn without_replica_acks(mut self) -> Self {
        self.acks.push(AckChoice::Off);
        self
    }

    /// Called on the watchdog thread for every lock found lost while held (see [`LostLock`]
    /// and [`LostReason`](crate::LostReason)), once per acquisition chain. Keep it short, and
    /// do not drop the last clone of the manager inside it.
    pub fn on_lost_lock(mut self, callback: impl Fn(&LostLock) + Send + Sync + 'static) -> Self {
        self.callbacks.on_lost = Some(Arc::new(callback));
        self
    }

    /// Called on the watchdog thread whenever a hold the watchdog renews is raised at risk (a
    /// renewal failed while its lease may still hold) or cleared (a renewal succeeded again):
    /// see [`RiskNotice`] and [`RiskChange`](crate::RiskChange). A hold at risk that no renewal
    /// clears by its deadline is then reported to [`on_lost_lock`](Self::on_lost_lock). Keep
    /// it short, and do not drop the last clone of the manager inside it.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// use redlease::RiskChange;
    ///
    /// let manager = redlease::LockManager::builder(redis.url())
    ///     .on_risk_change(|notice| match notice.change {
    ///         RiskChange::AtRisk(reason) => eprintln!("{} at risk: {reason}", notice.name),
    ///         RiskChange::Cleared => eprintln!("{} renewed again", notice.name),
    ///         _ => {}
    ///     })
    ///     .build()?;
    /// # drop(manager);
    /// # Ok(())
    /// # }
    /// ```
    pub fn on_risk_change(
        mut self,
        callback: impl Fn(&RiskNotice) + Send + Sync + 'static,
    ) -> Self {
        self.callbacks.on_risk = Some(Arc::new(callback));
        self
    }

    /// Calls `callback` on the watchdog thread whenever a hold of this manager is asked to
    /// let go ([`Lock::request_revocation`](crate::LockHandle::request_revocation)), once per
    /// hold, with its name, holder id and fencing token. Nothing else happens: the holder
    /// decides whether and when to release. A guard's
    /// [`is_revocation_requested`](crate::Guard::is_revocation_requested) and
    /// [`revocation_signal`](crate::Guard::revocation_signal) tell the same, at once, on the
    /// guard. A callback that panics is logged and does not stop the watchdog.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// let (asked, requests) = crossbeam_channel::unbounded();
    /// let manager = redlease::LockManager::builder(redis.url())
    ///     .on_revocation_request(move |notice| {
    ///         let _ = asked.send(notice.name.clone());
    ///     })
    ///     .build()?;
    /// let guard = manager.lock("migration").lock()?;
    /// manager.lock("migration").request_revocation()?;
    /// let name = requests.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
    /// assert_eq!(name, "migration");
    /// guard.unlock()?; // the holder decides to let go
    /// # Ok(())
    /// # }
    /// ```
    pub fn on_revocation_request(
        mut self,
        callback: impl Fn(&RevocationNotice) + Send + Sync + 'static,
    ) -> Self {
        self.callbacks.on_revocation = Some(Arc::new(callback));
        self
    }

    /// Sentinel mode: the user (if any) and password of the master and its replicas (the
    /// sentinels' own go in their URLs).
    pub fn master_auth(mut self, username: Option<&str>, password: &str) -> Self {
        self.info = self.info.map(|info| {
            let mut settings = info.redis_settings().clone().set_password(password);
            if let Some(username) = username {
                settings = settings.set_username(username);
            }
            info.set_redis_settings(settings)
        });
        self
    }

    /// Sentinel mode: the database of the master to keep the locks in (default 0).
    pub fn master_database(mut self, db: i64) -> Self {
        self.info = self.info.map(|info| {
            let settings = info.redis_settings().clone().set_db(db);
            info.set_redis_settings(settings)
        });
        self
    }

    /// How long a call rides out an outage (default 30 s), on every deployment: Redis
    /// unreachable, answering late, loading, or refusing writes while it fails over
    /// (`READONLY`, `MASTERDOWN`, `CLUSTERDOWN`).
    ///
    /// - A wait with a deadline (`try_lock_for`, `try_acquire_until`, `wait_for`, ...) tries
    ///   again every 100 ms through an outage until its deadline, then fails with the last
    ///   error (not `Ok(None)`: nobody was seen holding the lock).
    /// - A wait without one (`lock`, `acquire`, `wait`) tries again until this long after the
    ///   first error in a row, then fails with it.
    /// - A change (`count_down`, `release`, `add_permits`, `unlock`, `break_lock`, ...) is
    ///   sent again with the same request id, which Redis runs once, for up to this long;
    ///   when it may have run and no answer came, it fails with [`Error::Indeterminate`].
    /// - A guard dropped while Redis cannot be reached has its release sent again by the
    ///   manager in the background, until its lease would have run out.
    ///
    /// With Sentinel or Cluster, allow for the sentinels' `down-after-milliseconds` (the
    /// cluster's `cluster-node-timeout`) plus the failover itself. Zero makes every outage
    /// error end the call at once (a change that may have run is then still
    /// [`Error::Indeterminate`]). At most an hour.
    pub fn outage_grace(mut self, grace: Duration) -> Self {
        self.outage_grace = grace;
        self
    }

    /// Trusts the CA certificate(s) in `pem` (PEM text, one or more `CERTIFICATE` blocks)
    /// for the server's certificate, instead of the system's roots. For a `rediss://` URL
    /// only.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let files = redlease_testing::TlsFiles::generate()?;
    /// # let redis = redlease_testing::RedisServer::start_tls(&files, &Default::default())?;
    /// # let port = redis.port();
    /// let ca = std::fs::read(files.ca_certificate())?;
    /// let manager = redlease::LockManager::builder(format!("rediss://localhost:{port}/"))
    ///     .tls_ca_certificate(ca)
    ///     .build()?;
    /// manager.lock("invoice:42").with_lock(|_| ())?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors (at build)
    /// [`Error::InvalidArgument`] when `pem` holds no certificate, or the URL is not
    /// `rediss://`.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_ca_certificate(mut self, pem: impl AsRef<[u8]>) -> Self {
        self.tls.ca_certificate_pem = Some(pem.as_ref().to_vec());
        self
    }

    /// Shows the server this client certificate, for mutual TLS: `certificate_pem` holds the
    /// certificate (and any intermediates after it), `key_pem` its private key (PKCS#8,
    /// PKCS#1 or SEC1 PEM). For a `rediss://` URL only.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let files = redlease_testing::TlsFiles::generate()?;
    /// # let options = redlease_testing::TlsServerOptions::default().require_client_certificates();
    /// # let redis = redlease_testing::RedisServer::start_tls(&files, &options)?;
    /// # let url = redis.url();
    /// // A server started with `--tls-auth-clients yes`.
    /// let manager = redlease::LockManager::builder(url.as_str())
    ///     .tls_ca_certificate(std::fs::read(files.ca_certificate())?)
    ///     .tls_client_certificate(
    ///         std::fs::read(files.client_certificate())?,
    ///         std::fs::read(files.client_key())?,
    ///     )
    ///     .build()?;
    /// # drop(manager);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors (at build)
    /// [`Error::InvalidArgument`] when the PEM holds no certificate or no key, the key does not
    /// suit the certificate, or the URL is not `rediss://`.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_client_certificate(
        mut self,
        certificate_pem: impl AsRef<[u8]>,
        key_pem: impl AsRef<[u8]>,
    ) -> Self {
        self.tls.client_identity_pem =
            Some((certificate_pem.as_ref().to_vec(), key_pem.as_ref().to_vec()));
        self
    }

    /// **Development only: anyone between the manager and Redis can then read and change
    /// everything, lock holders included.** Accepts any server certificate: an unknown issuer,
    /// an expired certificate, another host's name. The connection is still encrypted, but to
    /// whoever answers. Use it against a server with a throwaway self-signed certificate, never
    /// in production: give the server's CA with
    /// [`tls_ca_certificate`](Self::tls_ca_certificate) instead. (A `rediss://` URL ending in
    /// `#insecure`, which redis-rs reads as the same request, is refused: this call is the
    /// one way to ask, so that it shows in the code.) For a `rediss://` URL only.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let files = redlease_testing::TlsFiles::generate()?;
    /// # let redis = redlease_testing::RedisServer::start_tls(&files, &Default::default())?;
    /// # let url = redis.url();
    /// // A development server whose certificate nothing here trusts.
    /// let manager = redlease::LockManager::builder(url.as_str())
    ///     .tls_danger_accept_invalid_certificates()
    ///     .build()?;
    /// # drop(manager);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors (at build)
    /// [`Error::InvalidArgument`] when the URL is not `rediss://`.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_danger_accept_invalid_certificates(mut self) -> Self {
        self.tls.accept_invalid_certificates = true;
        self
    }

    /// Checks the settings, connects to Redis once to see it answers, starts the threads,
    /// and checks the servers' settings as [`server_check`](Self::server_check) says (a
    /// round trip or three per master, unless `ServerCheck::Off`).
    ///
    /// With a Redis ACL user, it checks what every manager uses, whichever primitives it
    /// hands out: the login, on a command connection and on the pub/sub connection, `PING`,
    /// and `SUBSCRIBE`. What a primitive needs besides (its scripts, its keys, its release
    /// channels) is checked by its first call that needs it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad URL, a zero or too long timeout, replica
    /// acknowledgements out of range (see [`replica_acks`](LockManagerBuilder::replica_acks)),
    /// or bad TLS options (see [TLS](LockManagerBuilder#tls)); [`Error::Unreachable`] or
    /// [`Error::Timeout`] when Redis does not answer a `PING`; [`Error::Tls`] when the TLS
    /// handshake fails, or a plaintext URL leads to a server that speaks TLS only;
    /// [`Error::AuthenticationFailed`] when Redis refuses the user or password;
    /// [`Error::PermissionDenied`] when the user may not run `PING` or `SUBSCRIBE`;
    /// in sentinel mode, [`Error::UnknownMaster`] when no sentinel knows the master;
    /// [`Error::UnsafeServer`] with [`ServerCheck::Strict`], when the check found anything.
    pub fn build(self) -> Result<LockManager> {
        let server_check = self.server_check;
        let fair_place_ms = self.checked_limits()?;
        let ack_setting = self.checked_acks()?;
        let info = self.info.map_err(|err| {
            // redis-rs refuses `rediss://` when built without TLS; say which feature that is.
            if !cfg!(feature = "tls") && err.contains("can't connect with TLS") {
                Error::InvalidArgument(tls::FEATURE_OFF.into())
            } else {
                Error::InvalidArgument(format!("bad redis connection info: {err}"))
            }
        })?;
        let sentinel = match self.sentinel {
            Some((sentinels, master_name)) => Some(SentinelSettings {
                sentinels: sentinels.map_err(|err| {
                    Error::InvalidArgument(format!("bad sentinel connection info: {err}"))
                })?,
                master_name,
            }),
            None => None,
        };
        let cluster_seeds = match self.cluster {
            Some(seeds) => Some(seeds.map_err(|err| {
                Error::InvalidArgument(format!("bad cluster node connection info: {err}"))
            })?),
            None => None,
        };
        let client = Client::connect(Settings {
            info,
            sentinel,
            cluster_seeds,
            outage_grace: self.outage_grace,
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            watchdog_timeout: self.watchdog_timeout,
            pool_sizes: PoolSizes {
                max_idle: self.max_idle_connections.min(self.max_connections),
                max_open: self.max_connections,
            },
            callbacks: self.callbacks,
            ack_setting,
            tls: self.tls,
            local_handoffs: self.local_handoffs,
            pubsub: self.pubsub,
        })?;
        let manager = LockManager {
            client,
            fair_place_ms,
        };
        if let Err(err) = manager.check_at_build(server_check) {
            manager.shutdown();
            return Err(err);
        }
        Ok(manager)
    }

    /// Checks the timeouts, the outage grace and the connection bound; answers the fair lock
    /// place timeout in ms.
    fn checked_limits(&self) -> Result<u64> {
        if self.outage_grace > MAX_OUTAGE_GRACE {
            return Err(Error::InvalidArgument(format!(
                "an outage grace of {:?} is longer than the maximum of {MAX_OUTAGE_GRACE:?}",
                self.outage_grace
            )));
        }
        names::lease_millis("connect timeout", self.connect_timeout)?;
        names::lease_millis("response timeout", self.response_timeout)?;
        names::lease_millis("watchdog timeout", self.watchdog_timeout)?;
        let fair_place_ms =
            names::lease_millis("fair lock place timeout", self.fair_lock_place_timeout)?;
        if self.watchdog_timeout < MIN_WATCHDOG_TIMEOUT {
            return Err(Error::InvalidArgument(format!(
                "watchdog timeout of {:?} is shorter than the minimum of {MIN_WATCHDOG_TIMEOUT:?}",
                self.watchdog_timeout
            )));
        }
        if self.max_connections == 0 {
            return Err(Error::InvalidArgument(
                "max_connections must not be zero: no call could run".into(),
            ));
        }
        Ok(fair_place_ms)
    }

    /// The acknowledgements every write waits for, if any: replicas' (a fixed count, or the
    /// replicas connected now), or disks' (`WAITAOF`), one choice, within a timeout shorter
    /// than the renewal interval.
    fn checked_acks(&self) -> Result<Option<AckSetting>> {
        let renewal_interval = self.watchdog_timeout / 3;
        let Some(choice) = self.acks.last() else {
            let timeout = DEFAULT_REPLICA_ACK_TIMEOUT
                .min(renewal_interval / 2)
                .max(Duration::from_millis(1));
            return AckSetting::connected(timeout).map(Some);
        };
        if let Some(other) = self
            .acks
            .iter()
            .find(|other| other.method() != choice.method())
        {
            return Err(Error::InvalidArgument(format!(
                "{} and {} are two choices of the same setting: pick one",
                other.method(),
                choice.method()
            )));
        }
        let (setting, timeout) = match *choice {
            AckChoice::Off => return Ok(None),
            AckChoice::Connected(timeout) => (AckSetting::connected(timeout)?, timeout),
            AckChoice::Replicas(replicas, timeout) => (
                AckSetting::Fixed(ReplicaAcks::new(replicas, timeout)?),
                timeout,
            ),
            AckChoice::Aof(local, replicas, timeout) => (
                AckSetting::Fixed(ReplicaAcks::aof(local, replicas, timeout)?),
                timeout,
            ),
        };
        if timeout >= renewal_interval {
            return Err(Error::InvalidArgument(format!(
                "replica ack timeout of {timeout:?} must be shorter than the watchdog's \
                 renewal interval of {renewal_interval:?} (a third of its timeout)"
            )));
        }
        Ok(Some(setting))
    }
}

/// One call of an acknowledgement setting of the builder.
#[derive(Clone, Copy, Debug)]
enum AckChoice {
    Off,
    Connected(Duration),
    Replicas(u32, Duration),
    Aof(bool, u32, Duration),
}

impl AckChoice {
    /// The builder method that made it.
    fn method(&self) -> &'static str {
        match self {
            AckChoice::Off => "without_replica_acks",
            AckChoice::Connected(_) => "connected_replica_acks",
            AckChoice::Replicas(..) => "replica_acks",
            AckChoice::Aof(..) => "aof_acks",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings are checked before anything connects: the port is never tried.
    fn build_with_acks(replicas: u32, timeout: Duration) -> Result<LockManager> {
        LockManager::builder("redis://127.0.0.1:1/")
            .connect_timeout(Duration::from_millis(10))
            .watchdog_timeout(Duration::from_secs(3))
            .replica_acks(replicas, timeout)
            .build()
    }

    #[test]
    fn replica_acks_out_of_range_are_refused_at_build() {
        for (replicas, timeout) in [
            (0, Duration::from_millis(100)),
            (1, Duration::ZERO),
            // Not shorter than the renewal interval: a third of the 3 s watchdog timeout.
            (1, Duration::from_secs(1)),
            (1, Duration::from_secs(3600)),
        ] {
            let built = build_with_acks(replicas, timeout);
            assert!(
                matches!(built, Err(Error::InvalidArgument(_))),
                "{replicas} replicas within {timeout:?}: {built:?}"
            );
        }
        // In range: the settings pass, and the unreachable server is what fails.
        let built = build_with_acks(1, Duration::from_millis(999));
        assert!(
            matches!(built, Err(Error::Unreachable(_) | Error::Timeout(_))),
            "{built:?}"
        );
    }
}
