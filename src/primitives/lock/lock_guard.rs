//! [`LockGuard`]: one held level of a [`Lock`], released when dropped.

use redis::{ToRedisArgs, Value};

use super::Lock;
use crate::client::Release;
use crate::error::Result;
use crate::primitives::guarded::{self, GuardedScript, Writes};
use crate::primitives::hold::guard::{Guard, Hold, Watched};

/// One held level of a [`Lock`], taken by the current thread: a [`Guard`] (with its
/// `is_lost`, `check`, `lost_signal` and `unlock`) that also knows its fencing token and
/// holder id.
///
/// The guard owns a clone of its [`Lock`] handle, so it can outlive the handle it came from
/// (`manager.lock("name").lock()?` is fine).
///
/// Dropping the guard releases this level; the last level frees the lock and wakes one
/// waiter. [`unlock`](Guard::unlock) does the same and says how it went, where `Drop` can
/// only log a failure. The guard is not `Send`: the lock is held by a thread, and only that
/// thread may release it. It is `Sync`, so a scoped thread may watch
/// [`is_lost`](Guard::is_lost) through a shared reference.
///
/// ```compile_fail
/// fn moves_to_another_thread<T: Send>() {}
/// moves_to_another_thread::<redlease::LockGuard>();
/// ```
///
/// ```
/// # fn main() -> redlease::Result<()> {
/// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
/// # let manager = redlease::LockManager::builder(redis.url()).build()?;
/// let lock = manager.lock("export");
/// let guard = lock.lock()?;
/// assert!(!guard.is_lost());
/// println!("exporting with fencing token {}", guard.fencing_token());
/// guard.unlock()?;
/// # Ok(())
/// # }
/// ```
pub type LockGuard = Guard<LockHold>;

/// What a [`LockGuard`] holds (`pub` in a private module: it names the guard's type).
pub struct LockHold {
    pub(super) lock: Lock,
    /// The holder id of the acquisition chain.
    pub(super) holder: String,
    pub(super) token: u64,
    /// How many replicas acknowledged this level's acquisition, when asked.
    pub(super) acknowledged: Option<u32>,
    pub(super) watched: Watched,
}

impl Hold for LockHold {
    const GUARD: &'static str = "LockGuard";

    fn debug_fields(&self, guard: &mut std::fmt::DebugStruct<'_, '_>) {
        guard.field("holder", &self.holder);
        guard.field("fencing_token", &self.token);
    }

    fn release(&self, how: Release) -> Result<()> {
        let lock = self.lock.raw();
        let left = self.watched.unwatch(lock.client().watchdog());
        let upgrade = self.watched.lease.upgrade();
        lock.release(&self.holder, upgrade, left, self.watched.fixed_lease, how)
    }

    fn label(&self) -> String {
        self.lock.name().to_owned()
    }
}

/// A hold that is a lock's hold under a name of its own (the upgradable read, a
/// leadership): its guard's type name and the lock's hold it wraps; the rest of [`Hold`] is
/// the lock's.
pub(crate) trait OverLockHold {
    const GUARD: &'static str;

    fn lock_hold(&self) -> &LockHold;
}

impl<T: OverLockHold> Hold for T {
    const GUARD: &'static str = <T as OverLockHold>::GUARD;

    fn release(&self, how: Release) -> Result<()> {
        self.lock_hold().release(how)
    }

    fn label(&self) -> String {
        self.lock_hold().label()
    }

    fn debug_fields(&self, guard: &mut std::fmt::DebugStruct<'_, '_>) {
        self.lock_hold().debug_fields(guard);
    }
}

impl Guard<LockHold> {
    /// The lock this guard holds.
    pub fn lock(&self) -> &Lock {
        &self.hold().lock
    }

    /// The fencing token of this acquisition: strictly greater than the token of every
    /// earlier holder of the lock name; reentrant levels share the token of the first level.
    ///
    /// Across a failover this holds only where the token's increment reached the promoted
    /// replica: with acknowledgements from every replica (by default, every replica in sync:
    /// see [`replicas_acknowledged`](Self::replicas_acknowledged), and
    /// [`FencedStore`](crate::FencedStore) for what a repeated token means).
    pub fn fencing_token(&self) -> u64 {
        self.hold().token
    }

    /// How many replicas acknowledged this acquisition (the count `WAIT` answered); `None`
    /// when it waited for none (built
    /// [`without_replica_acks`](crate::LockManagerBuilder::without_replica_acks), or by
    /// default on a master without replicas in sync). When it is the master's number of
    /// replicas, whichever replica a failover promotes has this hold and its fencing token:
    /// the token cannot be issued again after the failover. Fewer (as many as
    /// [`replica_acks`](crate::LockManagerBuilder::replica_acks) asked for, or more) leave
    /// that to the choice of replica.
    ///
    /// `WAIT` answers once enough replicas have acknowledged, so the count may be the number
    /// asked for even when more replicas got the write.
    pub fn replicas_acknowledged(&self) -> Option<u32> {
        self.hold().acknowledged
    }

    /// The holder id of this acquisition chain (`<client-id>:<chain-number>`), as Redis keeps
    /// it and as a [`LostLock`](crate::LostLock) report names it: reentrant levels of one
    /// chain share it.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// let guard = manager.lock("exports:daily").lock()?;
    /// let inner = manager.lock("exports:daily").lock()?;
    /// assert_eq!(guard.holder_id(), inner.holder_id());
    /// assert!(guard.holder_id().starts_with(manager.client_id()));
    /// # Ok(()) }
    /// ```
    pub fn holder_id(&self) -> &str {
        &self.hold().holder
    }

    /// Applies `writes` to the application's own keys only while this hold is current: Redis
    /// runs them in one script right after checking that this acquisition chain (its holder
    /// id) still holds the lock, so nothing can come in between. Answers each write's answer
    /// in order (`OK` for a set, the new value for an increment, the count for a delete or a
    /// hash set).
    ///
    /// Sent once, and again through an outage with the same request id (up to the outage
    /// grace): the writes are applied at most once, even when an answer is lost.
    ///
    /// Under a read lock the check is that this reader still holds its read lock: the write
    /// is kept from running after the hold ended, but other readers may write at the same
    /// time. Exclusive writes need the write lock.
    ///
    /// # Errors
    /// - [`Error::LockLost`](crate::Error::LockLost) when the hold is known lost here, or
    ///   Redis finds it is not current (it expired, was freed by force, or another holder
    ///   has the lock): nothing was written;
    /// - [`Error::InvalidArgument`](crate::Error::InvalidArgument), before anything is sent,
    ///   for no writes, an empty key, a time to live out of range, or, on a Redis Cluster, a
    ///   key outside the lock's slot (give the keys the lock's hash tag: `{job}:status` for
    ///   the lock `job`);
    /// - [`Error::GuardedWriteFailed`](crate::Error::GuardedWriteFailed) when Redis refused a
    ///   write (a key of another type, a value that is not an integer): the writes before it
    ///   stand, as Redis does not roll a script back;
    /// - with replica acknowledgements (by default, on a master with replicas) or
    ///   [`aof_acks`](crate::LockManagerBuilder::aof_acks),
    ///   [`Error::NotReplicated`](crate::Error::NotReplicated) or
    ///   [`Error::NotPersisted`](crate::Error::NotPersisted) when the writes were applied but
    ///   not acknowledged in time;
    /// - [`Error::Indeterminate`](crate::Error::Indeterminate) when no answer came through the
    ///   outage grace: the writes may or may not have been applied.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// use redis::Value;
    ///
    /// let guard = manager.lock("job").lock()?;
    /// let answers = guard.guarded_write(
    ///     redlease::Writes::new()
    ///         .hash_set("{job}:status", "state", "running")
    ///         .increment_by("{job}:attempts", 1),
    /// )?;
    /// assert_eq!(answers, [Value::Int(1), Value::Int(1)]);
    ///
    /// manager.lock("job").break_lock()?;
    /// let refused = guard.guarded_write(redlease::Writes::new().set("{job}:status", "done"));
    /// assert!(matches!(refused, Err(redlease::Error::LockLost { .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub fn guarded_write(&self, writes: &Writes) -> Result<Vec<Value>> {
        self.check()?;
        guarded::write(&self.hold().guarded_holder(), writes)
    }

    /// Runs a caller's own Lua body with `keys` and `args` only while this hold is current,
    /// as [`guarded_write`](Self::guarded_write) runs its writes; answers what the body
    /// answered. The same errors; a body that fails (a Lua error, a command Redis refuses)
    /// is [`Error::GuardedWriteFailed`](crate::Error::GuardedWriteFailed), and what it wrote
    /// before failing stands.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// use redis::Value;
    ///
    /// let append = redlease::GuardedScript::new(
    ///     "redis.call('rpush', KEYS[1], ARGV[1]) return redis.call('llen', KEYS[1])",
    /// );
    /// let guard = manager.lock("job").lock()?;
    /// let length = guard.run_guarded(&append, &["{job}:log"], &["started"])?;
    /// assert_eq!(length, Value::Int(1));
    /// # Ok(())
    /// # }
    /// ```
    pub fn run_guarded<A: ToRedisArgs>(
        &self,
        script: &GuardedScript,
        keys: &[&str],
        args: &[A],
    ) -> Result<Value> {
        self.check()?;
        let args: Vec<Vec<u8>> = args.iter().flat_map(ToRedisArgs::to_redis_args).collect();
        guarded::run_script(&self.hold().guarded_holder(), script, keys, &args)
    }
}

impl LockHold {
    /// The holder id of the acquisition chain.
    pub(crate) fn holder(&self) -> &str {
        &self.holder
    }

    /// The fencing token of the acquisition chain.
    pub(crate) fn token(&self) -> u64 {
        self.token
    }

    /// Where Redis records this hold, for a guarded write.
    fn guarded_holder(&self) -> guarded::Holder<'_> {
        let lock = self.lock.raw();
        guarded::Holder {
            client: lock.client(),
            name: self.lock.name(),
            field: lock.hold_field(&self.holder),
            watch_key: &self.watched.key,
            holder: &self.holder,
        }
    }
}
