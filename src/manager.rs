//! [`LockManager`]: the shared owner of the connections and threads every lock uses.
//!
//! One manager is one Redis client identity (a random v4 UUID, the first half of every holder
//! id). It owns the command connection pool, the watchdog thread and the pub/sub listener
//! thread; [`LockManager::shutdown`], or dropping the last clone, stops and joins both.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::fence::FencedStore;
use crate::lease::LostLock;
use crate::lock::{ForceReleaseNotice, Lock, FORCE_RELEASE_CHANNEL};
use crate::names;
use crate::pool::Pool;
use crate::pubsub::{Notices, PubSubHub};
use crate::resolve::Resolver;
use crate::watchdog::{LostCallback, Watchdog};

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
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    client_id: String,
    pub(crate) pool: Arc<Pool>,
    pub(crate) watchdog: Watchdog,
    pub(crate) hub: PubSubHub,
    pub(crate) watchdog_timeout_ms: u64,
    /// How long a release answer is kept for a retry of the same request.
    pub(crate) release_latch_ms: u64,
    next_request: AtomicU64,
    shut_down: AtomicBool,
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
        Lock::new(self.clone(), name)
    }

    /// A value under `key` that only takes writes carrying a fencing token at least as high
    /// as any it has seen (see [`FencedStore`]). Making the handle does no I/O.
    pub fn fenced_store(&self, key: &str) -> FencedStore {
        FencedStore::new(self.clone(), key)
    }

    /// The client id: the first half of every holder id of this manager.
    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    /// The lease of watchdog-kept locks; they are renewed every third of it.
    pub fn watchdog_timeout(&self) -> Duration {
        self.inner.watchdog.timeout()
    }

    /// How many locks held through this manager the watchdog tracks now: those it renews,
    /// and those with a fixed lease whose deadline it watches.
    pub fn watched_locks(&self) -> usize {
        self.inner.watchdog.len()
    }

    /// How many release channels the pub/sub listener is subscribed to (or busy subscribing
    /// or unsubscribing) for waiting threads now.
    pub fn subscribed_channels(&self) -> usize {
        self.inner.hub.channel_count()
    }

    /// Stops the watchdog and the pub/sub listener and joins their threads. Later
    /// acquisitions fail with [`Error::ShutDown`]; guards still held can release, and locks
    /// no longer renewed expire after their lease. Dropping the last clone does the same.
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }

    pub(crate) fn ensure_running(&self) -> Result<()> {
        if self.inner.shut_down.load(Ordering::Acquire) {
            Err(Error::ShutDown)
        } else {
            Ok(())
        }
    }

    /// A holder id for a new acquisition chain: `<client-id>:<chain-number>`.
    pub(crate) fn new_holder_id(&self) -> String {
        names::new_holder_id(&self.inner.client_id)
    }
}

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockManager")
            .field("client_id", &self.inner.client_id)
            .field("watchdog_timeout", &self.watchdog_timeout())
            .finish_non_exhaustive()
    }
}

impl Inner {
    /// A release request id unique to this client: the client id is random, the counter
    /// never repeats. (Cheaper than a fresh random UUID per release.)
    pub(crate) fn next_request_id(&self) -> String {
        let number = self.next_request.fetch_add(1, Ordering::Relaxed);
        format!("{}:{number}", self.client_id)
    }

    fn shutdown(&self) {
        if !self.shut_down.swap(true, Ordering::AcqRel) {
            self.watchdog.stop();
            self.hub.stop();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown();
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
        let watchdog_timeout_ms = names::lease_millis("watchdog timeout", self.watchdog_timeout)?;
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
        // No CLIENT SETINFO on new connections: it costs a round trip, and on a silent
        // server its ignored replies would make connecting take more than its timeout.
        let info = info
            .clone()
            .set_tcp_settings(info.tcp_settings().clone().set_nodelay(true))
            .set_redis_settings(info.redis_settings().clone().set_skip_set_lib_name());
        let client = redis::Client::open(info.clone())
            .map_err(|err| Error::InvalidArgument(format!("bad redis url: {err}")))?;
        // One resolver for the pool and the pub/sub connection, so they share one cache of
        // the host's addresses and never look it up twice at once.
        let resolver = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) => Some(Arc::new(Resolver::new(host, *port))),
            _ => None,
        };
        let pool = Arc::new(Pool::new(
            client,
            resolver.clone(),
            self.connect_timeout,
            self.response_timeout,
            self.max_idle_connections,
        ));
        pool.run(|connection| redis::cmd("PING").query::<()>(connection))?;
        let watchdog = Watchdog::start(Arc::clone(&pool), self.watchdog_timeout, self.on_lost)?;
        let sink = watchdog.notice_sink();
        let notices = Notices {
            channel: FORCE_RELEASE_CHANNEL.to_owned(),
            handler: Box::new(move |message| match ForceReleaseNotice::parse(message) {
                Some(notice) => sink.force_released(notice.name, notice.holder, notice.token),
                None => log::debug!("ignoring a malformed force-release notice"),
            }),
        };
        let hub = match PubSubHub::start(
            &info,
            resolver,
            self.connect_timeout,
            self.response_timeout,
            notices,
        ) {
            Ok(hub) => hub,
            Err(err) => {
                watchdog.stop();
                return Err(err);
            }
        };
        let release_latch_ms = (self.response_timeout * 4)
            .max(Duration::from_secs(10))
            .as_millis() as u64;
        Ok(LockManager {
            inner: Arc::new(Inner {
                client_id: uuid::Uuid::new_v4().to_string(),
                pool,
                watchdog,
                hub,
                watchdog_timeout_ms,
                release_latch_ms,
                next_request: AtomicU64::new(0),
                shut_down: AtomicBool::new(false),
            }),
        })
    }
}
