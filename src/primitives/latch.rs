//! The count-down latch: the [`CountDownLatch`] handle.
//!
//! A latch names one Redis string holding a count; it is open when the key is absent (or
//! holds zero or less). Setting a count, counting down and deleting are the protocol's latch
//! scripts; reading the count is a `GET`. A waiter runs the shared wait loop, subscribed so
//! that every message on the latch's channel wakes it: the step to zero is announced once,
//! and must wake every waiter of every process. It talks to Redis only through its
//! [`Client`]: the pool for commands, the pub/sub service for wake-ups.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::wait::cancel::CancelToken;
use crate::client::wait::{self, Attempt, WaitFor};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::protocol::latch::{self as protocol, LatchKeys};

/// The largest count a latch takes: Redis counts in signed 64-bit integers.
const MAX_COUNT: u64 = i64::MAX as u64;

/// A handle to one named distributed count-down latch. Cheap to clone; `Send` and `Sync`.
///
/// Someone gives the latch a count with [`try_set_count`](CountDownLatch::try_set_count);
/// every [`count_down`](CountDownLatch::count_down), from any thread of any process, takes
/// one off it; the one that reaches zero opens the latch and wakes every thread waiting in
/// [`wait`](CountDownLatch::wait) or [`wait_for`](CountDownLatch::wait_for), in all
/// processes. An open latch takes a new count, which closes it again.
///
/// The layout is Redisson's `RCountDownLatch`: the count is a Redis string under the latch
/// name, deleted when it reaches zero, and the channel is
/// `redisson_countdownlatch__channel__{name}`.
///
/// ```
/// # fn main() -> redlease::Result<()> {
/// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
/// # let url = redis.url();
/// use std::time::Duration;
///
/// let manager = redlease::LockManager::builder(url.as_str()).build()?;
/// let loaded = manager.count_down_latch("shards-loaded");
/// assert!(loaded.try_set_count(3)?);
///
/// let workers: Vec<_> = (0..3)
///     .map(|_| {
///         let loaded = loaded.clone();
///         std::thread::spawn(move || {
///             // ... load one shard ...
///             loaded.count_down()
///         })
///     })
///     .collect();
///
/// loaded.wait()?; // returns once all three have counted down
/// assert_eq!(loaded.count()?, 0);
/// # for worker in workers { worker.join().unwrap()?; }
/// assert!(loaded.wait_for(Duration::ZERO)?); // an open latch lets everyone through
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    client: Arc<Client>,
    keys: Arc<LatchKeys>,
    /// Ends this handle's waits when cancelled.
    cancel: Option<CancelToken>,
}

impl CountDownLatch {
    pub(crate) fn new(client: Arc<Client>, name: &str) -> Self {
        CountDownLatch {
            client,
            keys: Arc::new(LatchKeys::new(name)),
            cancel: None,
        }
    }

    /// This handle, with its waits (and those of its clones) ended by `token`: once it is
    /// cancelled, they return [`Error::Cancelled`] promptly, leaving no subscription behind.
    pub fn cancellable_by(&self, token: &CancelToken) -> CountDownLatch {
        CountDownLatch {
            cancel: Some(token.clone()),
            ..self.clone()
        }
    }

    /// The latch name: the Redis key of its count.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// Gives the latch `count` when it has none (it is open), which closes it; answers
    /// whether it did. A latch that has a count keeps it: `Ok(false)`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a count of zero (a latch that is to open at once needs
    /// no count: leave it open; Redisson would store a `0` that blocks the next count) or
    /// above `i64::MAX`; [`Error::WrongType`] when the key holds something other than a count.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// let latch = manager.count_down_latch("migration-steps");
    /// assert!(latch.try_set_count(2)?);
    /// assert!(!latch.try_set_count(5)?, "the first count stays");
    /// assert_eq!(latch.count()?, 2);
    /// assert!(matches!(latch.try_set_count(0), Err(redlease::Error::InvalidArgument(_))));
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_set_count(&self, count: u64) -> Result<bool> {
        if count == 0 {
            return Err(Error::InvalidArgument(
                "a latch count must be at least 1".into(),
            ));
        }
        if count > MAX_COUNT {
            return Err(Error::InvalidArgument(format!(
                "a latch count of {count} is more than the maximum of {MAX_COUNT}"
            )));
        }
        let keys = self.keys()?;
        let set: i64 = self.client.change(&keys.name, |request| {
            protocol::set_count(keys, count, request)
        })?;
        Ok(set == 1)
    }

    /// Takes one off the count; the step to zero opens the latch and wakes every waiter. On
    /// an open latch it does nothing. Counted once, however often an outage makes it be sent
    /// (see the crate's "On a bad day").
    ///
    /// # Errors
    /// [`Error::WrongType`] when the key holds something other than a count;
    /// [`Error::Indeterminate`] when Redis did not answer within the outage grace and the
    /// count-down may have been counted: look at [`count`](CountDownLatch::count) before
    /// counting down again.
    pub fn count_down(&self) -> Result<()> {
        let keys = self.keys()?;
        let _left: i64 = self
            .client
            .change(&keys.name, |request| protocol::count_down(keys, request))?;
        Ok(())
    }

    /// The count now: 0 when the latch is open.
    ///
    /// # Errors
    /// [`Error::WrongType`] when the key holds something other than a count.
    pub fn count(&self) -> Result<u64> {
        let name = &self.keys()?.name;
        let value: Option<Vec<u8>> = self
            .client
            .run(name, |connection| {
                redis::cmd("GET").arg(name).query(connection)
            })
            .map_err(|err| err.about_keys_of(&self.keys.name))?;
        protocol::count_from(value.as_deref()).ok_or_else(|| self.wrong_type())
    }

    /// Deletes the count, which opens the latch and wakes its waiters; answers whether there
    /// was a count. (Like Redisson, it announces a delete as a new count, `1`, which every
    /// `redlease` waiter takes as a reason to look at the count; Redisson's own waiters are
    /// not woken by it.)
    ///
    /// # Errors
    /// [`Error::WrongType`], and nothing deleted, when the key holds something other than a
    /// count.
    pub fn delete(&self) -> Result<bool> {
        let keys = self.keys()?;
        let deleted: i64 = self
            .client
            .change(&keys.name, |request| protocol::delete(keys, request))?;
        Ok(deleted == 1)
    }

    /// Waits until the latch is open, as long as it takes.
    ///
    /// Fails only when Redis cannot be reached or answers an error, or the manager is shut
    /// down.
    pub fn wait(&self) -> Result<()> {
        wait::without_deadline(|| self.wait_open(None))
    }

    /// Waits at most `wait` until the latch is open; answers whether it is. A zero `wait`
    /// looks once.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// use std::time::Duration;
    ///
    /// let latch = manager.count_down_latch("replicas-ready");
    /// latch.try_set_count(1)?;
    /// assert!(!latch.wait_for(Duration::from_millis(50))?);
    /// latch.count_down()?;
    /// assert!(latch.wait_for(Duration::from_millis(50))?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait_for(&self, wait: Duration) -> Result<bool> {
        self.wait_until(wait::deadline_after(wait, "CountDownLatch::wait_for")?)
    }

    /// Waits until the latch is open, at most until `deadline`; answers whether it is.
    pub fn wait_until(&self, deadline: Instant) -> Result<bool> {
        Ok(self.wait_open(Some(deadline))?.is_some())
    }

    /// Looks until `deadline` (forever with `None`), in the shared wait loop: subscribed to
    /// every message on the latch's channel after the first look and before the next.
    fn wait_open(&self, deadline: Option<Instant>) -> Result<Option<()>> {
        self.client.ensure_running()?;
        let keys = self.keys()?;
        wait::wait_until(WaitFor {
            name: Some(self.name()),
            deadline,
            // Only a message announces the step to zero (the key has no expiry): look again
            // once per watchdog interval all the same, as a waiter for a lock does.
            default_hint: self.client.watchdog_timeout() / 3,
            subscribe: || {
                let pubsub = self.client.pubsub();
                Ok(vec![pubsub.subscribe_to_every_message(&keys.channel)?])
            },
            attempt: || {
                Ok(match self.count()? {
                    0 => Attempt::Taken(()),
                    _ => Attempt::Held { hint: None },
                })
            },
            ensure_running: || self.client.ensure_running(),
            cancel: self.cancel.as_ref(),
            outage_grace: self.client.outage_grace(),
            recorder: self.client.wait_recorder(),
            nudge: None,
            subscribe_first: false,
        })
    }

    /// The keys, or [`Error::InvalidArgument`] for an empty latch name.
    fn keys(&self) -> Result<&LatchKeys> {
        if self.keys.name.is_empty() {
            return Err(Error::InvalidArgument(
                "latch name must not be empty".into(),
            ));
        }
        Ok(&self.keys)
    }

    fn wrong_type(&self) -> Error {
        Error::WrongType {
            name: self.keys.name.clone(),
        }
    }
}

impl std::fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountDownLatch")
            .field("name", &self.keys.name)
            .finish()
    }
}
