//! [`GroupGuard`]: one held level of a [`RedLock`](super::RedLock) or
//! [`MultiLock`](super::MultiLock), and the chain of acquisitions it belongs to.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::Group;
use crate::client::watchdog::lease::LeaseState;
use crate::client::Release;
use crate::error::{LostReason, Result, RiskReason};
use crate::primitives::hold::guard::{Guard, Hold};
use crate::protocol::names::{self, MAX_LEASE};

/// One member a chain has taken: its fencing token and its lease, kept by its manager's
/// watchdog.
pub(super) struct MemberHold {
    pub(super) token: u64,
    pub(super) lease: Arc<LeaseState>,
}

/// The acquisition a thread holds a group lock by, shared by its reentrant levels.
pub(super) struct Chain {
    /// The holder id of the thread on each member's manager.
    pub(super) holders: Vec<String>,
    /// Per member: what was taken, or `None`.
    pub(super) members: Vec<Option<MemberHold>>,
    pub(super) fixed: Option<Duration>,
    required: usize,
    levels: AtomicU32,
    /// Records the loss of the group (too few members left) and its risk for the signals.
    state: Arc<LeaseState>,
    /// Held while the risk is judged.
    judging: Mutex<()>,
    /// The fencing token: the largest of the members' tokens.
    fence: u64,
}

impl Chain {
    pub(super) fn new(
        holders: Vec<String>,
        members: Vec<Option<MemberHold>>,
        fixed: Option<Duration>,
        required: usize,
    ) -> Arc<Self> {
        let fence = members
            .iter()
            .flatten()
            .map(|hold| hold.token)
            .max()
            .unwrap_or(0);
        let chain = Arc::new(Chain {
            holders,
            members,
            fixed,
            required,
            levels: AtomicU32::new(1),
            state: Arc::new(LeaseState::new(Instant::now(), MAX_LEASE, 0)),
            judging: Mutex::new(()),
            fence,
        });
        for hold in chain.members.iter().flatten() {
            let weak = Arc::downgrade(&chain);
            hold.lease.observe(Box::new(move |reason| {
                if let Some(chain) = weak.upgrade() {
                    if chain.alive() < chain.required {
                        chain.state.mark_lost(reason);
                    }
                    chain.judge_risk();
                }
            }));
            let weak = Arc::downgrade(&chain);
            hold.lease.observe_risk(Arc::new(move || {
                if let Some(chain) = weak.upgrade() {
                    chain.judge_risk();
                }
            }));
        }
        // A member this thread held already (a chain joined) may be at risk now.
        chain.judge_risk();
        chain
    }

    /// Raises the chain's risk while fewer than the required members are held and not at
    /// risk (with the reason of the first member at risk), and clears it once enough are
    /// again. Under the chain's own lock: the members' watchdogs may call at once.
    fn judge_risk(&self) {
        let _judging = self.judging.lock();
        let mut sound = 0;
        let mut reason = None;
        for hold in self.members.iter().flatten() {
            match (hold.lease.lost(), hold.lease.risk()) {
                (Some(_), _) => {}
                (None, Some(risk)) => reason = reason.or(Some(risk)),
                (None, None) => sound += 1,
            }
        }
        if sound >= self.required {
            self.state.clear_risk();
        } else {
            self.state
                .raise_risk(reason.unwrap_or(RiskReason::Unreachable));
        }
    }

    /// The chain's fencing token.
    pub(super) fn fence(&self) -> u64 {
        self.fence
    }

    /// Whether the members' tokens differ, so that their counters must be raised to the
    /// chain's token before it is handed out.
    pub(super) fn tokens_differ(&self) -> bool {
        self.members
            .iter()
            .flatten()
            .any(|hold| hold.token != self.fence)
    }

    pub(super) fn enter(&self) {
        self.levels.fetch_add(1, Ordering::AcqRel);
    }

    /// Ends one level; answers how many are left.
    fn leave(&self) -> u32 {
        self.levels.fetch_sub(1, Ordering::AcqRel).saturating_sub(1)
    }

    /// How many members are still held.
    /// When fewer than `required` members will be left by their leases' deadlines: the
    /// `required`-th latest deadline of the members not known lost (`None` with too few).
    fn quorum_deadline(&self) -> Option<Instant> {
        let mut deadlines: Vec<Instant> = self
            .members
            .iter()
            .flatten()
            .filter(|hold| hold.lease.lost().is_none())
            .map(|hold| hold.lease.deadline())
            .collect();
        deadlines.sort_unstable_by(|a, b| b.cmp(a));
        deadlines.get(self.required.checked_sub(1)?).copied()
    }

    pub(super) fn alive(&self) -> usize {
        self.members
            .iter()
            .flatten()
            .filter(|hold| hold.lease.lost().is_none())
            .count()
    }

    pub(super) fn is_lost(&self) -> bool {
        self.lost().is_some()
    }

    fn lost(&self) -> Option<LostReason> {
        if let Some(reason) = self.state.lost() {
            return Some(reason);
        }
        if self.alive() >= self.required {
            return None;
        }
        // Lost by the members' deadlines before their watchdogs said so.
        self.members
            .iter()
            .flatten()
            .find_map(|hold| hold.lease.lost())
            .or(Some(LostReason::NotHeldAnymore))
    }
}

/// One held level of a [`RedLock`](super::RedLock) or [`MultiLock`](super::MultiLock),
/// taken by the current thread; dropping it releases the level, the last one releases every
/// member.
///
/// A [`Guard`] (with its `is_lost`, `check`, `lost_signal` and `unlock`) that also knows its
/// fencing token and how many members it still holds. Like [`LockGuard`](crate::LockGuard),
/// it is not `Send` but `Sync`, and [`unlock`](Guard::unlock) reports what dropping can only
/// log: [`Error::NotHeld`](crate::Error::NotHeld) when too few members were still held,
/// [`Error::NoQuorum`](crate::Error::NoQuorum) when too few servers answered. Its lost signal
/// no longer fires once the members' managers are shut down.
pub type GroupGuard = Guard<GroupHold>;

/// What a [`GroupGuard`] holds: one level of a chain (`pub` in a private module: it names
/// the guard's type).
pub struct GroupHold {
    group: Arc<Group>,
    chain: Arc<Chain>,
}

impl Hold for GroupHold {
    const GUARD: &'static str = "GroupGuard";

    fn debug_fields(&self, guard: &mut std::fmt::DebugStruct<'_, '_>) {
        guard.field("held_members", &self.chain.alive());
        guard.field("required", &self.group.required);
    }

    fn label(&self) -> String {
        self.group.label()
    }

    /// Lost when too few members are still held, which the chain's own lease records only
    /// once a member's watchdog told.
    fn lost_beyond_lease(&self) -> Option<LostReason> {
        self.chain.lost()
    }

    /// When fewer than the required members will be left by their own deadlines.
    fn deadline_beyond_lease(&self) -> Option<Instant> {
        self.chain.quorum_deadline()
    }

    /// The last level of the chain releases every member it still holds.
    fn release(&self, _how: Release) -> Result<()> {
        if self.chain.leave() > 0 {
            return Ok(());
        }
        {
            let mut holds = self.group.holds.lock();
            let thread = names::thread_number();
            if holds
                .get(&thread)
                .is_some_and(|chain| Arc::ptr_eq(chain, &self.chain))
            {
                holds.remove(&thread);
            }
        }
        self.group.release(&self.chain)
    }
}

impl Guard<GroupHold> {
    pub(super) fn new(group: Arc<Group>, chain: Arc<Chain>) -> Self {
        let lease = Arc::clone(&chain.state);
        Guard::from_hold(GroupHold { group, chain }, lease)
    }

    /// How many members (servers, or locks of a multi-lock) are still held.
    pub fn held_members(&self) -> usize {
        self.hold().chain.alive()
    }

    /// The fencing token of this acquisition: greater than the token of every earlier
    /// holder; reentrant levels share it. Cheap: no I/O.
    ///
    /// The members' token counters advance independently, so an acquisition whose members
    /// answered different tokens first raises every member's counter to the largest (one more
    /// round trip, only then); any later acquisition takes a higher token on at least one of
    /// those members.
    pub fn fencing_token(&self) -> u64 {
        self.hold().chain.fence()
    }
}
