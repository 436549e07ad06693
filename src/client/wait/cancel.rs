//! [`CancelToken`]: a way for one thread to end the waits of others.
//!
//! A token is shared by cloning; [`cancel`](CancelToken::cancel) ends, promptly, every wait of
//! a handle bound to it with [`Error::Cancelled`](crate::Error::Cancelled). The wake-up is the
//! disconnection of a channel no one sends on: a cancelled token's receiver is ready for
//! every waiter at once, and stays so. The wait loop selects on it next to the release
//! channels. No I/O here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

/// Ends the waits of every handle bound to it (what Redisson's `lockInterruptibly` gives
/// Java). Cheap to clone; all clones are the same token; once cancelled, it stays cancelled.
///
/// A handle is bound with `cancellable_by`, on [`Lock`](crate::Lock),
/// [`RedLock`](crate::RedLock), [`MultiLock`](crate::MultiLock) and the other primitives;
/// every blocking call on the bound handle (and on its clones) then returns
/// [`Error::Cancelled`](crate::Error::Cancelled) soon after [`cancel`](CancelToken::cancel),
/// leaving nothing behind: no subscription, no place in a fair lock's queue. A call that has
/// taken the lock by then returns it as usual.
///
/// ```
/// # fn main() -> redlease::Result<()> {
/// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
/// # let manager = redlease::LockManager::builder(redis.url()).build()?;
/// use redlease::{CancelToken, Error};
///
/// let held = manager.lock("migration").lock()?;
/// let stop = CancelToken::new();
/// let waiter = {
///     let lock = manager.lock("migration").cancellable_by(&stop);
///     std::thread::spawn(move || lock.lock().map(drop))
/// };
/// stop.cancel(); // e.g. on shutdown
/// assert!(matches!(waiter.join().unwrap(), Err(Error::Cancelled)));
/// # drop(held);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

struct Inner {
    cancelled: AtomicBool,
    /// Dropped by `cancel`: from then on `receiver` is disconnected, which every waiter sees.
    sender: Mutex<Option<Sender<()>>>,
    receiver: Receiver<()>,
}

impl CancelToken {
    /// A token not cancelled yet.
    pub fn new() -> Self {
        let (sender, receiver) = crossbeam_channel::bounded(0);
        CancelToken {
            inner: Arc::new(Inner {
                cancelled: AtomicBool::new(false),
                sender: Mutex::new(Some(sender)),
                receiver,
            }),
        }
    }

    /// Cancels the waits of every handle bound to the token, now and later.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        self.inner.sender.lock().take();
    }

    /// Whether [`cancel`](CancelToken::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Ready (disconnected) once the token is cancelled; never receives a message.
    pub(crate) fn receiver(&self) -> &Receiver<()> {
        &self.inner.receiver
    }
}

impl Default for CancelToken {
    fn default() -> Self {
        CancelToken::new()
    }
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}
