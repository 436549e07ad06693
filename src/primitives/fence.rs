//! [`FencedStore`]: the resource's half of fencing, for a value kept in Redis.
//!
//! A lock's fencing token tells holders apart in time; it only helps if the resource refuses
//! writes from a holder older than one it has already heard from. A fenced store keeps a
//! value under a key and, next to it (same Cluster slot), the highest token that wrote it;
//! the protocol's fenced write compares and writes in one step. Talks to Redis through its client's
//! pool. With the manager's replica acknowledgements on, a write waits for them like a lock's
//! acquisition: a store whose highest token a failover could roll back would take a stale
//! holder's write again.

use std::sync::Arc;

use redis::FromRedisValue;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::layout;
use crate::protocol::fence::fenced_write;

/// A value in Redis that takes a write only with a fencing token at least as high as every
/// token that wrote it before, so a holder whose lock was lost (paused past its lease, cut
/// off from Redis) cannot overwrite the work of the holder that came after it.
///
/// Get one with [`LockManager::fenced_store`](crate::LockManager::fenced_store); pass it the
/// [`fencing_token`](crate::LockGuard::fencing_token) of the guard under which you write.
/// Use the tokens of one lock name for one store: tokens of different names are not
/// comparable. The value is a plain Redis string under the given key, readable by anyone;
/// the token lives in `redlease_fence:{key}`, which stays after a delete.
///
/// A write with a token *equal* to the highest seen is taken: one holder writes as often as
/// it likes under one guard. Two holders with the same token would therefore both be taken,
/// which happens only if the lock's token counter itself was rolled back by a failover. On a
/// single server (with its data kept across restarts) tokens never repeat for a name. Behind
/// a failover they never repeat when every acquisition was acknowledged by the replica that
/// gets promoted: the default acknowledgements, from every replica in sync
/// ([`connected_replica_acks`](crate::LockManagerBuilder::connected_replica_acks)), or
/// [`replica_acks`](crate::LockManagerBuilder::replica_acks) with as many replicas as the
/// master has; a guard's
/// [`replicas_acknowledged`](crate::LockGuard::replicas_acknowledged) says how many had its
/// acquisition. Without acknowledgements, a failover may lose the last increments of the
/// counter along with the lock, and issue a token again.
///
/// ```
/// # fn main() -> redlease::Result<()> {
/// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
/// # let manager = redlease::LockManager::builder(redis.url()).build()?;
/// use redlease::Error;
///
/// let lock = manager.lock("report");
/// let report = manager.fenced_store("report:latest");
///
/// let first = lock.lock()?;
/// let stale_token = first.fencing_token();
/// first.unlock()?;
///
/// let second = lock.lock()?;
/// report.set(second.fencing_token(), "written by the second holder")?;
///
/// // The first holder comes back late: its write is refused.
/// let refused = report.set(stale_token, "written by the first holder");
/// assert!(matches!(refused, Err(Error::StaleToken { .. })));
/// assert_eq!(
///     report.get::<String>()?.as_deref(),
///     Some("written by the second holder")
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct FencedStore {
    client: Arc<Client>,
    key: String,
    fence: String,
}

impl FencedStore {
    pub(crate) fn new(client: Arc<Client>, key: &str) -> Self {
        FencedStore {
            client,
            key: key.to_owned(),
            fence: layout::fence_key(key),
        }
    }

    /// The key of the value.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Sets the value, unless a higher token has written it before.
    ///
    /// # Errors
    /// [`Error::StaleToken`] when the store has seen a higher token: nothing was written.
    ///
    /// With replica acknowledgements (by default, on a master with replicas in sync):
    /// [`Error::NotReplicated`] when the write was made but too few replicas acknowledged it
    /// in time. It stands on the master, and a failover now may lose it; writing again with
    /// the same token is safe (a token as high as the highest is taken).
    pub fn set(&self, token: u64, value: impl AsRef<[u8]>) -> Result<()> {
        self.write(token, "set", value.as_ref())
    }

    /// Deletes the value, unless a higher token has written it before. The highest token
    /// stays recorded.
    ///
    /// # Errors
    /// [`Error::StaleToken`] and [`Error::NotReplicated`] as for [`set`](FencedStore::set).
    pub fn delete(&self, token: u64) -> Result<()> {
        self.write(token, "del", b"")
    }

    /// The value, converted like any Redis reply (`String`, `Vec<u8>`, a number...); `None`
    /// when there is none. Reading needs no token.
    pub fn get<T: FromRedisValue>(&self) -> Result<Option<T>> {
        let key = self.checked_key()?;
        self.client.run(key, |connection| {
            redis::cmd("GET").arg(key).query(connection)
        })
    }

    /// The highest fencing token that has written the value (0 when none has).
    pub fn highest_token(&self) -> Result<u64> {
        self.checked_key()?;
        let token: Option<u64> = self.client.run(&self.fence, |connection| {
            redis::cmd("GET").arg(&self.fence).query(connection)
        })?;
        Ok(token.unwrap_or(0))
    }

    fn write(&self, token: u64, operation: &str, value: &[u8]) -> Result<()> {
        let key = self.checked_key()?;
        let acked = self
            .client
            .change_acknowledged::<(i64, u64)>(key, |request| {
                fenced_write(key, &self.fence, token, operation, value, request)
            })?;
        let (written, highest) = acked.answer;
        if written != 1 {
            return Err(Error::StaleToken {
                key: self.key.clone(),
                token,
                highest,
            });
        }
        match acked.unreplicated {
            Some(why) => Err(why.into_error(&self.key)),
            None => Ok(()),
        }
    }

    fn checked_key(&self) -> Result<&str> {
        if self.key.is_empty() {
            return Err(Error::InvalidArgument(
                "fenced store key must not be empty".into(),
            ));
        }
        Ok(&self.key)
    }
}

impl std::fmt::Debug for FencedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedStore")
            .field("key", &self.key)
            .finish()
    }
}
