//! The non-reentrant kinds: a lock of another kind (the plain or the fair lock), with that
//! kind's scripts and rules, which the thread holding it cannot take again
//! ([`Error::AlreadyHeld`](crate::Error::AlreadyHeld), before anything is sent). Redisson's
//! `RedissonNonReentrantLock` and `RedissonNonReentrantFairLock` keep the layout of their
//! reentrant kinds, so each excludes both of them on a name. A try of this process's own is
//! never a re-entry in Redis: a new chain has a holder id of its own, and a try whose answer
//! was lost is undone and followed by a new chain's (the thread holds no chain meanwhile).

use std::time::Duration;

use super::{Chain, LockKind, RawLock};
use crate::client::pubsub::{Letterbox, PubSub, Subscription};
use crate::client::wait::back_off::BackOff;
use crate::error::Result;
use crate::protocol::lock::{LaidOutAs, LockScripts};
use crate::protocol::renew::HoldKind;

/// The kind `K` (the plain or the fair lock), not reentrant: every rule and script is `K`'s
/// but that one, and it is no group's member.
#[derive(Debug)]
pub(crate) struct NonReentrant<K>(pub(crate) K);

impl<K: LockScripts> LaidOutAs for NonReentrant<K> {
    type Layout = K;

    fn layout(&self) -> &K {
        &self.0
    }
}

impl<K: LockKind> LockKind for NonReentrant<K> {
    fn watch_key(&self, thread: u64) -> String {
        self.0.watch_key(thread)
    }

    fn hold_kind(&self) -> HoldKind {
        self.0.hold_kind()
    }

    fn is_locked(&self, lock: &RawLock) -> Result<bool> {
        self.0.is_locked(lock)
    }

    fn chain_to_join(&self, lock: &RawLock, thread: u64) -> Result<Option<Chain>> {
        self.0.chain_to_join(lock, thread)
    }

    fn subscribe(
        &self,
        pubsub: &PubSub,
        holder: &str,
        letters: &Letterbox,
    ) -> Result<Subscription> {
        self.0.subscribe(pubsub, holder, letters)
    }

    fn queue_place(&self) -> Option<Duration> {
        self.0.queue_place()
    }

    fn polls(&self) -> Option<BackOff> {
        self.0.polls()
    }

    fn hands_off(&self) -> bool {
        self.0.hands_off()
    }

    fn may_delay(&self) -> bool {
        self.0.may_delay()
    }

    fn reentrant(&self) -> bool {
        false
    }
}
