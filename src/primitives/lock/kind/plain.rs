//! The reentrant lock's rules: the defaults, with releases that hand the lock to a waiting
//! thread of the process, membership of group locks, and a lock delay.

use super::{LockKind, Plain};

impl LockKind for Plain {
    fn hands_off(&self) -> bool {
        true
    }

    fn may_join_groups(&self) -> bool {
        true
    }

    fn may_delay(&self) -> bool {
        true
    }
}
