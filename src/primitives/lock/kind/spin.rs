//! The spin lock's rules: the lock's scripts and layout (so the two exclude each other on a
//! name), waited for by polling with a back-off instead of a subscription to its releases.
//! Redisson's `RedissonSpinLock`; releases still announce themselves on the lock's channel,
//! for the lock's waiters.

use super::{LockKind, Plain};
use crate::client::wait::back_off::BackOff;
use crate::protocol::lock::LaidOutAs;

/// A lock whose waiters poll, spacing their tries as `back_off` says.
#[derive(Debug)]
pub(crate) struct Spin {
    pub(crate) plain: Plain,
    pub(crate) back_off: BackOff,
}

impl LaidOutAs for Spin {
    type Layout = Plain;

    fn layout(&self) -> &Plain {
        &self.plain
    }
}

impl LockKind for Spin {
    /// A release hands the lock to a waiting thread of the process, as the lock's does: the
    /// line is the process's own, no subscription in Redis.
    fn hands_off(&self) -> bool {
        true
    }

    fn polls(&self) -> Option<BackOff> {
        Some(self.back_off)
    }

    fn may_delay(&self) -> bool {
        true
    }
}
