//! The reentrant lock's rules: the defaults, with releases that hand the lock to a waiting
//! thread of the process, and membership of group locks.

use super::{LockKind, Plain};

impl LockKind for Plain {
    fn hands_off(&self) -> bool {
        true
    }

    fn may_join_groups(&self) -> bool {
        true
    }
}
