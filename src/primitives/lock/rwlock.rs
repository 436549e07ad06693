//! [`ReadWriteLock`]: a pair of [`Lock`]s on one name, many readers or one writer.
//!
//! Both halves are ordinary [`Lock`] handles of the read and write kinds (Redisson's layout: one
//! hash with a `mode` field, the readers' and the writer's counts, and a timeout key per read
//! level), so they wait, renew, report losses and fence like any lock. This module only
//! pairs them; the rules live in the protocol's scripts and in the lock's chain logic.

use std::sync::Arc;

use crate::client::Client;
use crate::primitives::lock::upgradable::UpgradableLock;
use crate::primitives::lock::{Lock, Read, Write};

/// A read-write lock: any number of readers together, or one writer alone, across all
/// processes. Cheap to clone; `Send` and `Sync`.
///
/// [`read`](ReadWriteLock::read) and [`write`](ReadWriteLock::write) hand out its two
/// [`Lock`]s, with the whole `Lock` API: reentrant per thread, renewed by the watchdog while
/// held, waits woken by pub/sub, lost signals and fencing tokens (one counter for both).
/// The thread that holds the write lock may take read levels too (and keeps them after it
/// releases the write lock); a thread that holds only read levels cannot take the write lock:
/// it gets [`Error::WriteWhileReading`](crate::Error::WriteWhileReading) rather than wait for
/// itself forever. A writer's release wakes every waiter, so all waiting readers enter at
/// once. Readers are not held back by a waiting writer (as in Redisson).
///
/// ```
/// # fn main() -> redlease::Result<()> {
/// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
/// # let manager = redlease::LockManager::builder(redis.url()).build()?;
/// let prices = manager.read_write_lock("price-table");
/// {
///     let _reading = prices.read().lock()?;
///     let other_reader = prices.clone();
///     std::thread::spawn(move || -> redlease::Result<()> {
///         assert!(other_reader.read().try_lock()?.is_some()); // readers share it
///         assert!(other_reader.write().try_lock()?.is_none()); // a writer waits for them
///         Ok(())
///     })
///     .join()
///     .unwrap()?;
///     // This thread reads: asking it for the write lock is an error, not a deadlock.
///     assert!(matches!(
///         prices.write().try_lock(),
///         Err(redlease::Error::WriteWhileReading { .. })
///     ));
/// }
/// let _writing = prices.write().lock()?;
/// let _also_reading = prices.read().lock()?; // the writer may read
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ReadWriteLock {
    read: Lock,
    write: Lock,
    upgradable: UpgradableLock,
}

impl ReadWriteLock {
    pub(crate) fn new(client: Arc<Client>, name: &str) -> Self {
        let write = Lock::of_kind(Arc::clone(&client), Arc::new(Write::new(name)));
        ReadWriteLock {
            read: Lock::of_kind(Arc::clone(&client), Arc::new(Read::new(name))),
            upgradable: UpgradableLock::of(client, name, &write),
            write,
        }
    }

    /// The name: the Redis key of the lock's hash.
    pub fn name(&self) -> &str {
        self.read.name()
    }

    /// The read lock: shared with every other reader.
    pub fn read(&self) -> &Lock {
        &self.read
    }

    /// The write lock: exclusive. Taken by the thread that holds the
    /// [`upgradable`](Self::upgradable) read, it is that hold's upgrade.
    pub fn write(&self) -> &Lock {
        &self.write
    }

    /// The upgradable read: shared with plain readers, held by one chain at a time, and
    /// turned into the write lock by its guard's
    /// [`upgrade`](crate::UpgradableGuard::upgrade) once the plain readers are gone, with no
    /// window for another writer. `redlease`'s own: Redisson has no upgrade, but its readers
    /// and writers on the same name see the upgradable reader as a reader (and, upgraded, as
    /// a writer).
    pub fn upgradable(&self) -> &UpgradableLock {
        &self.upgradable
    }
}
