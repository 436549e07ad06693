//! The names of every key and channel a primitive uses in Redis, derived from its name:
//! Redisson's data layout, which `redlease` follows so that Rust and Java services share
//! names, written down once. The library computes its keys here, and so does the
//! `redlease-inspect` tool; an operator's script may too.
//!
//! The rule: a *derived* name is `prefix:{name}`, or `prefix:name` when the name already has a
//! `{` (its own hash tag); a *suffixed* name is `{name}:suffix`, or `name:suffix`. Either way
//! every key and channel of one primitive lands in the Redis Cluster slot of its name. The
//! count-down latch's channel is the one exception (always in braces, without a colon).
//!
//! ```
//! use redlease::layout;
//!
//! assert_eq!(layout::lock_channel("job"), "redisson_lock__channel:{job}");
//! assert_eq!(layout::lock_channel("{eu}:job"), "redisson_lock__channel:{eu}:job");
//! assert_eq!(layout::permit_expiries("pool"), "{pool}:timeout");
//!
//! let holder = layout::HolderId::parse("5f0c2a9e-7d3b-4c61-9a57-0e8d3f6b2c14:12");
//! assert_eq!(holder.number, Some(12));
//! ```
//!
//! Pure functions: no I/O, nothing of the rest of the crate.

/// `prefix:{name}`, or `prefix:name` when `name` already carries a hash tag.
pub(crate) fn derived(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// `{name}:suffix`, or `name:suffix` when `name` already carries a hash tag (Redisson's
/// `suffixName`).
pub(crate) fn suffixed(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// The release channel of a lock or fair lock (`redisson_lock__channel:{name}`).
pub fn lock_channel(name: &str) -> String {
    derived("redisson_lock__channel", name)
}

/// The channel a fair-lock waiter with holder id `holder` is woken on: the lock's channel
/// followed by `:<holder id>`.
pub fn fair_waiter_channel(name: &str, holder: &str) -> String {
    format!("{}:{holder}", lock_channel(name))
}

/// The fencing token counter of a lock of any kind (`redisson_lock_token:{name}`).
pub fn token_counter(name: &str) -> String {
    derived("redisson_lock_token", name)
}

/// The fair-lock waiters that accept a grant inside a release (`redlease_lock_grants:{name}`):
/// a hash of holder id -> the lease in ms it asks for. A release hands the lock to the first
/// in line when it is here; a waiter not here (a Redisson client) is woken to ask.
pub fn fair_grants(name: &str) -> String {
    derived("redlease_lock_grants", name)
}

/// A fair lock's queue of waiters: a list of holder ids, first in line first.
pub fn fair_queue(name: &str) -> String {
    derived("redisson_lock_queue", name)
}

/// When each fair-lock waiter's place expires: a zset of holder id -> epoch ms.
pub fn fair_places(name: &str) -> String {
    derived("redisson_lock_timeout", name)
}

/// The key that keeps the answer of the release of lock `name` with id `request_id`, for a
/// repeat of the same release (a release receipt; Redisson's "unlock latch").
pub fn release_receipt(name: &str, request_id: &str) -> String {
    let mut key = derived("redisson_unlock_latch", name);
    key.push(':');
    key.push_str(request_id);
    key
}

/// The channel of a read-write lock, for its readers and its writer.
pub fn rwlock_channel(name: &str) -> String {
    derived("redisson_rwlock", name)
}

/// The field of a read-write lock's hash that says whether it is read or written.
pub const MODE_FIELD: &str = "mode";

/// The field of a read-write lock's hash that names the holder id of its upgradable reader
/// (a `redlease` addition; Redisson's scripts pass over it, as its value is not a count).
pub const UPGRADER_FIELD: &str = "upgrader";

/// The field of a read-write lock's hash that, while its upgradable reader writes, holds the
/// id of the try that upgraded it (`try:<id>`), so that the undo of an earlier try whose
/// answer was lost cannot take the upgrade back. A `redlease` addition, as the above.
pub const UPGRADE_TRY_FIELD: &str = "upgrading";

/// The hash field of a read-write lock's writer is its holder id with this suffix.
pub const WRITER_SUFFIX: &str = ":write";

/// The hash field of the writer with holder id `holder` of a read-write lock.
pub fn writer_field(holder: &str) -> String {
    format!("{holder}{WRITER_SUFFIX}")
}

/// The prefix of the keys whose expiries are the leases of `holder`'s read levels of the
/// read-write lock `name`: level `n` has the key `<prefix>:<n>`.
pub fn read_level_prefix(name: &str, holder: &str) -> String {
    suffixed(name, &format!("{holder}:rwlock_timeout"))
}

/// The key whose expiry is the lease of `holder`'s read level `level` of the read-write lock
/// `name`.
pub fn read_level_key(name: &str, holder: &str, level: u64) -> String {
    format!("{}:{level}", read_level_prefix(name, holder))
}

/// The record of an election's leader (`redlease_leader:{name}`): a hash of its holder id,
/// value, term (its fencing token) and since when it leads (ms since the epoch, by the
/// server's clock). A `redlease` addition, like the two below.
pub fn leader_record(name: &str) -> String {
    derived("redlease_leader", name)
}

/// The log of an election's changes (`redlease_leader_log:{name}`): a stream with one entry
/// per election and resignation (`change`, `holder`, `value`, `term`, `since`).
pub fn leader_log(name: &str) -> String {
    derived("redlease_leader_log", name)
}

/// The channel on which an election announces its changes (`redlease_leader__channel:{name}`).
pub fn leader_channel(name: &str) -> String {
    derived("redlease_leader__channel", name)
}

/// The channel of a semaphore, either kind (`redisson_sc:{name}`).
pub fn semaphore_channel(name: &str) -> String {
    derived("redisson_sc", name)
}

/// A permit-expirable semaphore's permits out: a zset of permit id -> end of lease, epoch ms.
pub fn permit_expiries(name: &str) -> String {
    suffixed(name, "timeout")
}

/// The channel of a count-down latch: `redisson_countdownlatch__channel__{name}`, with no
/// colon and always in braces, even when the name has some (Redisson's own rule for latches).
pub fn latch_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// The key that keeps the highest fencing token that wrote the fenced value `key`
/// ([`FencedStore`](crate::FencedStore)), in the same Cluster slot.
pub fn fence_key(key: &str) -> String {
    derived("redlease_fence", key)
}

/// The key that keeps the answer of the request `id` of a state-changing call on the
/// primitive `name` (`redlease_request:{name}:<id>`), for a repeat of the same request.
pub fn request_key(name: &str, id: &str) -> String {
    let mut key = derived("redlease_request", name);
    key.push(':');
    key.push_str(id);
    key
}

/// The channel a force release is announced on, one message per holder of the freed lock:
/// `<fencing token> <holder id> <lock name>`. Every manager listens to it, so a holder learns
/// at once that its lock was taken away. (One channel for all names: force releases are rare,
/// and a channel per held lock would cost every acquisition a subscription.)
pub const FORCE_RELEASE_CHANNEL: &str = "redlease_lock__force_release";

/// A holder id split into its client id and its number: `<client-uuid>:<number>`. The
/// number is the acquisition chain's in `redlease`, the thread's in Redisson.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HolderId<'a> {
    /// The client id: the holding manager's, or Redisson client's, UUID.
    pub client: &'a str,
    /// The chain's (or thread's) number; `None` when the id has no numeric tail.
    pub number: Option<u64>,
}

impl<'a> HolderId<'a> {
    /// Splits at the last colon; an id without a numeric tail is all client id.
    pub fn parse(id: &'a str) -> Self {
        let whole = HolderId {
            client: id,
            number: None,
        };
        match id.rsplit_once(':') {
            Some((client, number)) if !client.is_empty() => match number.parse() {
                Ok(number) => HolderId {
                    client,
                    number: Some(number),
                },
                Err(_) => whole,
            },
            _ => whole,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_hash_tag_rule() {
        assert_eq!(lock_channel("job"), "redisson_lock__channel:{job}");
        assert_eq!(lock_channel("{eu}:job"), "redisson_lock__channel:{eu}:job");
        assert_eq!(
            fair_waiter_channel("job", "c:1"),
            "redisson_lock__channel:{job}:c:1"
        );
        assert_eq!(token_counter("job"), "redisson_lock_token:{job}");
        assert_eq!(fair_queue("job"), "redisson_lock_queue:{job}");
        assert_eq!(fair_places("job"), "redisson_lock_timeout:{job}");
        assert_eq!(fair_grants("job"), "redlease_lock_grants:{job}");
        assert_eq!(
            release_receipt("job", "r1"),
            "redisson_unlock_latch:{job}:r1"
        );
        assert_eq!(rwlock_channel("prices"), "redisson_rwlock:{prices}");
        assert_eq!(writer_field("c:7"), "c:7:write");
        assert_eq!(
            read_level_key("prices", "c:7", 2),
            "{prices}:c:7:rwlock_timeout:2"
        );
        assert_eq!(
            read_level_key("{eu}p", "c:7", 1),
            "{eu}p:c:7:rwlock_timeout:1"
        );
        assert_eq!(semaphore_channel("pool"), "redisson_sc:{pool}");
        assert_eq!(permit_expiries("pool"), "{pool}:timeout");
        assert_eq!(
            latch_channel("{eu}go"),
            "redisson_countdownlatch__channel__{{eu}go}"
        );
        assert_eq!(fence_key("balance"), "redlease_fence:{balance}");
        assert_eq!(request_key("pool", "7"), "redlease_request:{pool}:7");
    }

    #[test]
    fn holder_ids_split_at_the_last_colon() {
        let uuid = "5f0c2a9e-7d3b-4c61-9a57-0e8d3f6b2c14";
        assert_eq!(
            HolderId::parse(&format!("{uuid}:12")),
            HolderId {
                client: uuid,
                number: Some(12)
            }
        );
        for odd in ["plain", ":3", "a:b"] {
            assert_eq!(
                HolderId::parse(odd),
                HolderId {
                    client: odd,
                    number: None
                }
            );
        }
    }
}
