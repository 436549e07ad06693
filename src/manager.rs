//! [`LockManager`]: the public facade that builds the client and hands out primitives.
//!
//! One manager is one Redis client identity (a random v4 UUID, the first half of every holder
//! id). Its builder checks the settings and builds the internal [`Client`] (the command
//! connection pool, the watchdog thread and the pub/sub listener thread); the manager and
//! every handle it makes share that client, and [`LockManager::shutdown`], or dropping the
//! last of them, stops and joins both threads. It may use the client and the primitives'
//! constructors; below the client, only the types of its settings (the lost-lock callback,
//! the duration checks).

use std::sync::Arc;
use std::time::Duration;

use crate::client::{Client, Settings};
use crate::error::{Error, Result};
use crate::fence::FencedStore;
use crate::lease::LostLock;
use crate::lock::Lock;
use crate::permit_semaphore::PermitSemaphore;
use crate::protocol::names;
use crate::semaphore::Semaphore;
use crate::watchdog::LostCallback;

const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);
const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_MAX_IDLE_CONNECTIONS: usize = 32;
/// The shortest watchdog timeout accepted: renewals every 10 ms are the practical floor.
const MIN_WATCHDOG_TIMEOUT: Duration = Duration::from_millis(30);

/// Shares connections, one watchdog thread and one pub/sub listener among all locks of a
/// process. Cheap to clone; every clone is the same client.
///
/// ```
/// # fn main() -> redlease::Result<()> {
/// # let redis = redlease::testing::RedisServer::start().expect("redis-server");
/// # let url = redis.url();
/// use std::time::Duration;
///
/// let manager = redlease::LockManager::builder(&url)
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
}

/// Configures and builds a [`LockManager`]; see [`LockManager::builder`].
#[must_use]
pub struct LockManagerBuilder {
    url: String,
    connect_timeout: Duration,
    response_timeout: Duration,
    watchdog_timeout: Duration,
    max_idle_connections: usize,
    on_lost: Option<LostCallback>,
}

impl LockManager {
    /// Starts configuring a manager for the Redis server at `url` (`redis://[user:pass@]host:port[/db]`
    /// or `redis+unix:///path`).
    pub fn builder(url: impl Into<String>) -> LockManagerBuilder {
        LockManagerBuilder {
            url: url.into(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            watchdog_timeout: DEFAULT_WATCHDOG_TIMEOUT,
            max_idle_connections: DEFAULT_MAX_IDLE_CONNECTIONS,
            on_lost: None,
        }
    }

    /// A handle to the lock called `name`: any non-empty string (braces, spaces and unicode
    /// included); it is the Redis key of the lock. Making a handle does no I/O; every call on
    /// a handle with an empty name fails with [`Error::InvalidArgument`].
    pub fn lock(&self, name: &str) -> Lock {
        Lock::new(Arc::clone(&self.client), name)
    }

    /// A value under `key` that only takes writes carrying a fencing token at least as high
    /// as any it has seen (see [`FencedStore`]). Making the handle does no I/O.
    pub fn fenced_store(&self, key: &str) -> FencedStore {
        FencedStore::new(Arc::clone(&self.client), key)
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
        self.client.hub().channel_count()
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

    /// How many idle command connections are kept for reuse (default 32).
    pub fn max_idle_connections(mut self, count: usize) -> Self {
        self.max_idle_connections = count;
        self
    }

    /// Called on the watchdog thread for every lock found lost while held (see [`LostLock`]
    /// and [`LostReason`](crate::LostReason)), once per acquisition chain. Keep it short, and
    /// do not drop the last clone of the manager inside it.
    pub fn on_lost_lock(mut self, callback: impl Fn(&LostLock) + Send + Sync + 'static) -> Self {
        self.on_lost = Some(Arc::new(callback));
        self
    }

    /// Checks the settings, connects to Redis once to see it answers, and starts the threads.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad URL or a zero or too long timeout;
    /// [`Error::Unreachable`] or [`Error::Timeout`] when Redis does not answer a `PING`.
    pub fn build(self) -> Result<LockManager> {
        names::lease_millis("connect timeout", self.connect_timeout)?;
        names::lease_millis("response timeout", self.response_timeout)?;
        names::lease_millis("watchdog timeout", self.watchdog_timeout)?;
        if self.watchdog_timeout < MIN_WATCHDOG_TIMEOUT {
            return Err(Error::InvalidArgument(format!(
                "watchdog timeout of {:?} is shorter than the minimum of {MIN_WATCHDOG_TIMEOUT:?}",
                self.watchdog_timeout
            )));
        }
        let info: redis::ConnectionInfo = self
            .url
            .parse()
            .map_err(|err| Error::InvalidArgument(format!("bad redis url: {err}")))?;
        let client = Client::connect(Settings {
            info,
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            watchdog_timeout: self.watchdog_timeout,
            max_idle_connections: self.max_idle_connections,
            on_lost: self.on_lost,
        })?;
        Ok(LockManager { client })
    }
}
