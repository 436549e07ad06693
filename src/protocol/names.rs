//! The keys one lock handle uses, computed once from the naming rules of
//! [`layout`](crate::layout); the watchdog's keys; holder ids and thread numbers; the
//! force-release notice; argument checks. Pure functions only; no I/O.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::layout;

/// The longest lease or watchdog timeout accepted: about 34.8 years. Longer ones are surely
/// mistakes (and would overflow Redis's absolute expiry time if much longer).
pub(crate) const MAX_LEASE: Duration = Duration::from_millis(1 << 40);

/// The shortest lease accepted (the watchdog timeout has a floor of its own, higher). A hold is
/// certain for its lease less 1 % and 2 ms for clock drift, from when its request was sent: a
/// shorter lease would run out before most grants arrive, and a wait for one would never end.
pub(crate) const MIN_LEASE: Duration = Duration::from_millis(10);

/// The watchdog's key for the chain by which `thread` holds the lock `name` (a plain or fair
/// lock, a write lock, a member of a group lock). Keyed by thread, not by name: a grant that
/// should not have been (a demoted master's) must not stand in for another thread's hold.
pub(crate) fn holder_watch_key(name: &str, thread: u64) -> String {
    format!("{name}\0thread\0{thread}")
}

/// The watchdog's key for the read levels `thread` holds of the read-write lock `name`.
pub(crate) fn reader_watch_key(name: &str, thread: u64) -> String {
    format!("{name}\0read\0{thread}")
}

/// The watchdog's key for the upgradable read `thread` holds of the read-write lock `name`.
pub(crate) fn upgradable_watch_key(name: &str, thread: u64) -> String {
    format!("{name}\0upgradable\0{thread}")
}

/// The watchdog's key for the permit `id` of the permit-expirable semaphore `name`.
pub(crate) fn permit_watch_key(name: &str, id: &str) -> String {
    format!("{name}\0permit\0{id}")
}

/// What an election's lock adds to a plain lock's keys: the leader record, the change log
/// and the election's channel, and the value the candidate campaigns with.
#[derive(Debug)]
pub(crate) struct ElectionKeys {
    pub(crate) record: String,
    pub(crate) log: String,
    pub(crate) channel: String,
    pub(crate) value: String,
}

impl ElectionKeys {
    pub(crate) fn new(name: &str, value: &str) -> Self {
        ElectionKeys {
            record: layout::leader_record(name),
            log: layout::leader_log(name),
            channel: layout::leader_channel(name),
            value: value.to_owned(),
        }
    }
}

/// The keys and channel every lock kind uses (a kind adds its own: a fair lock's queue, an
/// election's record), computed once per [`Lock`](crate::Lock) handle.
#[derive(Debug)]
pub(crate) struct LockKeys {
    pub(crate) name: String,
    /// The release channel; for a fair lock, the prefix of each waiter's own channel
    /// (`<channel>:<holder id>`).
    pub(crate) channel: String,
    pub(crate) token: String,
}

impl LockKeys {
    /// The keys of the lock `name`, whose releases are published on `channel`.
    pub(crate) fn new(name: &str, channel: String) -> Self {
        LockKeys {
            name: name.to_owned(),
            channel,
            token: layout::token_counter(name),
        }
    }

    /// The keys, or [`Error::InvalidArgument`] for an empty lock name.
    pub(crate) fn checked(&self) -> Result<&Self> {
        if self.name.is_empty() {
            return Err(Error::InvalidArgument("lock name must not be empty".into()));
        }
        Ok(self)
    }

    /// The key under which the answer of the release with `request_id` is kept: its release
    /// receipt (Redisson's "unlock latch" key).
    pub(crate) fn release_receipt(&self, request_id: &str) -> String {
        layout::release_receipt(&self.name, request_id)
    }
}

/// The message published on the lock's channel when it is freed (Redisson's `UNLOCK_MESSAGE`):
/// it wakes one waiter.
pub(crate) const RELEASE_MESSAGE: &str = "0";

/// The message that wakes every waiter on the channel (Redisson's `READ_UNLOCK_MESSAGE`),
/// published when a write lock is released: all waiting readers may enter.
pub(crate) const WAKE_ALL_MESSAGE: &str = "1";

/// One message of the notice channel: a force release, as published by
/// `force_release.lua` (`<token> <holder> <name>`), or a revocation request, as published by
/// `revoke.lua` (`revoke <holder> <name>`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Notice<'a> {
    /// `name` was freed by force while `holder` held it and its token counter stood at
    /// `token`.
    ForceReleased {
        token: u64,
        holder: &'a str,
        name: &'a str,
    },
    /// Someone asks `holder` to let go of `name`.
    RevocationRequested { holder: &'a str, name: &'a str },
}

impl<'a> Notice<'a> {
    /// Reads a notice; `None` for a message that is not one. The first word and the holder
    /// id hold no spaces; the name, last, may.
    pub(crate) fn parse(message: &'a [u8]) -> Option<Self> {
        let message = std::str::from_utf8(message).ok()?;
        let mut parts = message.splitn(3, ' ');
        let first = parts.next()?;
        let holder = parts.next().filter(|holder| !holder.is_empty())?;
        let name = parts.next().filter(|name| !name.is_empty())?;
        if first == REVOKE_WORD {
            return Some(Notice::RevocationRequested { holder, name });
        }
        let token = first.parse().ok()?;
        Some(Notice::ForceReleased {
            token,
            holder,
            name,
        })
    }
}

/// The first word of a revocation request's notice.
const REVOKE_WORD: &str = "revoke";

static NEXT_THREAD_NUMBER: AtomicU64 = AtomicU64::new(1);
static NEXT_CHAIN_NUMBER: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_NUMBER: Cell<u64> = const { Cell::new(0) };
}

/// A number that identifies the calling thread within this process, stable for its lifetime
/// and never reused.
pub(crate) fn thread_number() -> u64 {
    THREAD_NUMBER.with(|number| {
        if number.get() == 0 {
            number.set(NEXT_THREAD_NUMBER.fetch_add(1, Ordering::Relaxed));
        }
        number.get()
    })
}

/// A holder id for a new acquisition chain (a thread's hold of one lock, from its first level
/// to its last): `<client-id>:<chain-number>`, never reused in this process.
///
/// Redisson's holder ids are `<client-id>:<thread-id>`, the same for every chain of a thread;
/// a number per chain keeps that shape, and means that a release or renewal of an earlier
/// chain that arrives late finds nothing of its own in a later chain of the same thread.
pub(crate) fn new_holder_id(client_id: &str) -> String {
    format!(
        "{client_id}:{}",
        NEXT_CHAIN_NUMBER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A lease as whole milliseconds (rounded up), checked against `MIN_LEASE ..= MAX_LEASE`.
pub(crate) fn holdable_lease_millis(what: &str, lease: Duration) -> Result<u64> {
    if !lease.is_zero() && lease < MIN_LEASE {
        return Err(Error::InvalidArgument(format!(
            "{what} of {lease:?} is shorter than the minimum of {MIN_LEASE:?}: no grant \
             would arrive in time to hold it"
        )));
    }
    lease_millis(what, lease)
}

/// A lease or timeout as whole milliseconds (rounded up), checked against `1 ms ..= MAX_LEASE`.
pub(crate) fn lease_millis(what: &str, lease: Duration) -> Result<u64> {
    if lease.is_zero() {
        return Err(Error::InvalidArgument(format!("{what} must not be zero")));
    }
    if lease > MAX_LEASE {
        return Err(Error::InvalidArgument(format!(
            "{what} of {lease:?} is longer than the maximum of {MAX_LEASE:?}"
        )));
    }
    let millis = lease.as_millis() as u64;
    Ok(if Duration::from_millis(millis) < lease {
        millis + 1
    } else {
        millis
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_are_read_with_names_that_hold_spaces() {
        let notice = Notice::parse(b"42 0c1f:7 nightly report {eu}");
        assert_eq!(
            notice,
            Some(Notice::ForceReleased {
                token: 42,
                holder: "0c1f:7",
                name: "nightly report {eu}",
            })
        );
        let notice = Notice::parse(b"revoke 0c1f:7 nightly report");
        assert_eq!(
            notice,
            Some(Notice::RevocationRequested {
                holder: "0c1f:7",
                name: "nightly report",
            })
        );
        for junk in [
            &b""[..],
            b"0",
            b"x h n",
            b"1 h",
            b"1  n",
            b"\xff h n",
            b"revoke h",
        ] {
            assert_eq!(Notice::parse(junk), None, "{junk:?}");
        }
    }

    #[test]
    fn derived_names_share_the_hash_slot_of_the_lock() {
        assert_eq!(layout::derived("p", "orders"), "p:{orders}");
        assert_eq!(layout::derived("p", "{orders}:7"), "p:{orders}:7");
        assert_eq!(layout::derived("p", "a b ü"), "p:{a b ü}");
        let keys = LockKeys::new("job", layout::lock_channel("job"));
        assert_eq!(keys.channel, "redisson_lock__channel:{job}");
        assert_eq!(keys.token, "redisson_lock_token:{job}");
        assert_eq!(keys.release_receipt("r1"), "redisson_unlock_latch:{job}:r1");
    }

    #[test]
    fn empty_names_are_rejected() {
        assert!(matches!(
            LockKeys::new("", layout::lock_channel("")).checked(),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn leases_round_up_to_milliseconds_and_are_bounded() {
        assert_eq!(lease_millis("lease", Duration::from_micros(1)).unwrap(), 1);
        assert_eq!(
            lease_millis("lease", Duration::from_millis(30)).unwrap(),
            30
        );
        assert_eq!(
            lease_millis("lease", Duration::from_micros(30_001)).unwrap(),
            31
        );
        assert!(lease_millis("lease", Duration::ZERO).is_err());
        assert!(lease_millis("lease", Duration::MAX).is_err());
        assert!(holdable_lease_millis("lease", Duration::from_nanos(1)).is_err());
        assert!(holdable_lease_millis("lease", Duration::from_millis(9)).is_err());
        assert_eq!(holdable_lease_millis("lease", MIN_LEASE).unwrap(), 10);
    }

    #[test]
    fn thread_numbers_differ_between_threads_and_stay_put_within_one() {
        let here = thread_number();
        assert_eq!(here, thread_number());
        let there = std::thread::spawn(thread_number).join().unwrap();
        assert_ne!(here, there);
    }
}
