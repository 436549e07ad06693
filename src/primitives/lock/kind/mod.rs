//! The kinds of lock: each kind's rules in this process, beside its scripts.
//!
//! A kind is one type (the reentrant lock's [`Plain`], [`Fair`], [`Spin`], a read-write lock's
//! [`Read`], [`Write`] and [`Upgradable`], an election's lock in `election`) with its scripts in
//! `protocol::lock` ([`LockScripts`]) and its rules here ([`LockKind`]), one file each:
//! the watchdog's key and renewal of its holds, the chain a new acquisition joins, what a
//! waiter subscribes to, whether it keeps a place in a queue, whether a release hands it on,
//! whether its waiters poll instead ([`Spin`]), whether its holder may take it again
//! ([`NonReentrant`] wraps a kind that may not).
//! [`RawLock`](super::RawLock) asks its kind and never matches over kinds. It may touch the
//! lock's raw type, the client's watchdog and pub/sub, and the protocol.

mod fair;
mod non_reentrant;
mod plain;
mod read;
mod spin;
mod upgradable_read;
mod write;

use std::fmt;
use std::time::Duration;

use super::{Chain, RawLock};
use crate::client::pubsub::{Letterbox, PubSub, Subscription};
use crate::client::wait::back_off::BackOff;
use crate::error::Result;
use crate::protocol::lock::LockScripts;
use crate::protocol::names;
use crate::protocol::renew::HoldKind;

pub(crate) use crate::protocol::lock::fair::Fair;
pub(crate) use crate::protocol::lock::plain::Plain;
pub(crate) use crate::protocol::lock::rwlock::{Read, Upgradable, Write};
pub(crate) use non_reentrant::NonReentrant;
pub(crate) use spin::Spin;

/// One kind of lock's rules in this process, over its scripts. Each rule's default is the
/// answer of most kinds (a plain lock's, except that it hands on and joins groups: only the
/// plain and write locks hand on, only the plain lock joins groups); a kind writes down where
/// it differs.
pub(crate) trait LockKind: LockScripts + fmt::Debug {
    /// The watchdog's key for `thread`'s chain of this lock.
    fn watch_key(&self, thread: u64) -> String {
        names::holder_watch_key(&self.keys().name, thread)
    }

    /// How the watchdog renews a hold of this lock.
    fn hold_kind(&self) -> HoldKind {
        HoldKind::Lock { delay_ms: 0 }
    }

    /// Whether anyone holds the lock (in this kind's mode).
    fn is_locked(&self, lock: &RawLock) -> Result<bool> {
        lock.query(redis::cmd("EXISTS").arg(&self.keys().name))
    }

    /// For a thread without a chain of this lock: the chain its kin locks' holds make it
    /// start (the upgradable chain a writer upgrades; for a reader whose thread holds the
    /// write lock, a new chain let in beside it), or an error when the thread's holds forbid
    /// this acquisition. `None`: a new chain of its own.
    fn chain_to_join(&self, _lock: &RawLock, _thread: u64) -> Result<Option<Chain>> {
        Ok(None)
    }

    /// Subscribes the chain `holder` to what announces a release (grants kept in
    /// `letters`, for a kind whose releases grant the lock by message). Not asked of a kind
    /// whose waiters poll.
    fn subscribe(
        &self,
        pubsub: &PubSub,
        _holder: &str,
        _letters: &Letterbox,
    ) -> Result<Subscription> {
        let keys = self.keys();
        pubsub.subscribe(&keys.channel, &keys.name)
    }

    /// For a kind whose waiters queue (the fair lock): how long a place is kept after the one
    /// ahead of it expires. `Some` says the rest of a queue's rules too: a waiter that gives
    /// up is taken out of the queue, and a release may grant the lock to the next in line,
    /// by message.
    fn queue_place(&self) -> Option<Duration> {
        None
    }

    /// For a kind whose waiters poll (the spin lock): how they space their tries. `Some`
    /// says they subscribe to nothing in Redis: a try that finds the lock held is followed by
    /// the back-off's next pause (at most the holder's lease left), and a release of the
    /// process may still hand them the lock, in the process.
    fn polls(&self) -> Option<BackOff> {
        None
    }

    /// Whether a release of the last level may hand the lock to a waiting chain of the
    /// releasing process (in the same script).
    fn hands_off(&self) -> bool {
        false
    }

    /// Whether the lock may be a member of a group lock (a RedLock or MultiLock).
    fn may_join_groups(&self) -> bool {
        false
    }

    /// Whether a handle of the lock may carry a lock delay (see `Lock::delayed_after_loss`):
    /// a kind whose key is one hash with one TTL, which a lost holder leaves behind.
    fn may_delay(&self) -> bool {
        false
    }

    /// Whether the thread that holds the lock may take it again, a level more (else its
    /// second acquisition is [`Error::AlreadyHeld`](crate::Error::AlreadyHeld), at once).
    fn reentrant(&self) -> bool {
        true
    }
}
