//! The Redis names of each primitive's keys and channels, derived from its name, and the
//! shape of holder ids.
//!
//! These are Redisson's naming rules, the wire format that the library follows too (its own
//! copy is private to it): a derived name is `prefix:{name}`, or `prefix:name` when the name
//! already has a `{`; a suffixed one is `{name}:suffix`, or `name:suffix`.

/// `prefix:{name}`, or `prefix:name` when `name` already carries a hash tag.
fn derived(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// `{name}:suffix`, or `name:suffix` when `name` already carries a hash tag.
fn suffixed(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// The release channel of a lock or fair lock; a fair-lock waiter's own channel is this
/// followed by `:<holder id>`.
pub fn lock_channel(name: &str) -> String {
    derived("redisson_lock__channel", name)
}

/// The fencing token counter of a lock of any kind.
pub fn token_counter(name: &str) -> String {
    derived("redisson_lock_token", name)
}

/// A fair lock's queue of waiters (a list of holder ids, first in line first).
pub fn fair_queue(name: &str) -> String {
    derived("redisson_lock_queue", name)
}

/// When each fair-lock waiter's place expires (a zset: holder id -> epoch ms).
pub fn fair_places(name: &str) -> String {
    derived("redisson_lock_timeout", name)
}

/// The channel of a read-write lock.
pub fn rwlock_channel(name: &str) -> String {
    derived("redisson_rwlock", name)
}

/// The key whose expiry is the lease of `holder`'s read level `level` of a read-write lock.
pub fn read_level_key(name: &str, holder: &str, level: u64) -> String {
    suffixed(name, &format!("{holder}:rwlock_timeout:{level}"))
}

/// The hash field of a read-write lock's writer is its holder id with this suffix.
pub const WRITER_SUFFIX: &str = ":write";

/// The field of a read-write lock's hash that says whether it is read or written.
pub const MODE_FIELD: &str = "mode";

/// The channel of a semaphore (either kind).
pub fn semaphore_channel(name: &str) -> String {
    derived("redisson_sc", name)
}

/// A permit-expirable semaphore's permits out (a zset: permit id -> expiry, epoch ms).
pub fn permit_expiries(name: &str) -> String {
    suffixed(name, "timeout")
}

/// The channel of a count-down latch: always in braces, without a colon.
pub fn latch_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// A holder id split into its client id and its number: `<client-uuid>:<number>`. The
/// number is the acquisition chain's in redlease, the thread's in Redisson.
#[derive(Debug, PartialEq, Eq)]
pub struct HolderId<'a> {
    pub client: &'a str,
    pub number: Option<u64>,
}

impl<'a> HolderId<'a> {
    /// Splits at the last colon; an id without a numeric tail is all client id.
    pub fn parse(id: &'a str) -> Self {
        match id.rsplit_once(':') {
            Some((client, number)) if !client.is_empty() => match number.parse() {
                Ok(number) => HolderId {
                    client,
                    number: Some(number),
                },
                Err(_) => HolderId {
                    client: id,
                    number: None,
                },
            },
            _ => HolderId {
                client: id,
                number: None,
            },
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
        assert_eq!(token_counter("job"), "redisson_lock_token:{job}");
        assert_eq!(fair_queue("job"), "redisson_lock_queue:{job}");
        assert_eq!(fair_places("job"), "redisson_lock_timeout:{job}");
        assert_eq!(rwlock_channel("prices"), "redisson_rwlock:{prices}");
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
