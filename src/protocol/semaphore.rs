//! The scripts of the semaphore and of the permit-expirable semaphore, with their arguments
//! and the meaning of their replies, and the permit ids.
//!
//! Redisson's layout, which both share: a string under the name holds the number of permits
//! available (an absent key has none), and every change that may let a waiter through is
//! announced on the channel `redisson_sc:{name}` (the message is the new count). The
//! permit-expirable semaphore adds the zset `{name}:timeout` of the permits taken: permit id
//! (16 raw bytes) -> end of its lease in epoch ms, by the server's clock. Every script of it
//! that reads or takes permits first gives back those whose lease ran out
//! (`permit_reclaim.lua`). Every script starts with `semaphore_count.lua`, which reads a count
//! and refuses a key of another kind with `WRONGTYPE` before anything is written.

use std::time::Duration;

use redis::{FromRedisValue, Value};

use super::script::{lua_script, ScriptCall};
use super::Request;
use crate::error::{Error, Result};
use crate::layout;

lua_script!(
    TAKE = "semaphore_count.lua" + "request_begin.lua" + "semaphore_take.lua" + "request_end.lua"
);
lua_script!(
    ADD = "semaphore_count.lua" + "request_begin.lua" + "semaphore_add.lua" + "request_end.lua"
);
lua_script!(
    SET = "semaphore_count.lua" + "request_begin.lua" + "semaphore_set.lua" + "request_end.lua"
);
lua_script!(
    DRAIN = "semaphore_count.lua" + "request_begin.lua" + "semaphore_drain.lua" + "request_end.lua"
);
lua_script!(UNDO_TAKE = "semaphore_count.lua" + "request_undo.lua" + "semaphore_undo.lua");
lua_script!(AVAILABLE = "semaphore_count.lua" + "semaphore_available.lua");
lua_script!(
    PERMIT_TAKE = "semaphore_count.lua"
        + "permit_reclaim.lua"
        + "request_begin.lua"
        + "permit_take.lua"
        + "request_end.lua"
);
lua_script!(
    PERMIT_RELEASE = "semaphore_count.lua"
        + "permit_reclaim.lua"
        + "request_begin.lua"
        + "permit_release.lua"
        + "request_end.lua"
);
lua_script!(
    PERMIT_ADD = "semaphore_count.lua"
        + "permit_reclaim.lua"
        + "request_begin.lua"
        + "semaphore_add.lua"
        + "request_end.lua"
);
lua_script!(
    PERMIT_UNDO_TAKE =
        "semaphore_count.lua" + "request_undo.lua" + "permit_undo.lua" + "permit_release.lua"
);
lua_script!(
    PERMIT_AVAILABLE = "semaphore_count.lua" + "permit_reclaim.lua" + "semaphore_available.lua"
);

/// The largest count a semaphore keeps (`MAX_COUNT` in `semaphore_count.lua`): integers
/// beyond it are not exact in Lua.
pub(crate) const MAX_COUNT: u64 = (1 << 53) - 1;

/// The keys and channel of one semaphore, computed once per handle.
#[derive(Debug)]
pub(crate) struct SemaphoreKeys {
    /// The name, which is the key of the count.
    pub(crate) name: String,
    pub(crate) channel: String,
    /// The zset of permits taken (used by the permit-expirable semaphore only).
    pub(crate) timeouts: String,
}

impl SemaphoreKeys {
    pub(crate) fn new(name: &str) -> Self {
        SemaphoreKeys {
            name: name.to_owned(),
            channel: layout::semaphore_channel(name),
            timeouts: layout::permit_expiries(name),
        }
    }

    /// The keys, or [`Error::InvalidArgument`] for an empty name.
    pub(crate) fn checked(&self) -> Result<&Self> {
        if self.name.is_empty() {
            return Err(Error::InvalidArgument(
                "semaphore name must not be empty".into(),
            ));
        }
        Ok(self)
    }

    /// The keys a permit script takes, in its order.
    fn permit_keys(&self) -> [&str; 3] {
        [&self.name, &self.channel, &self.timeouts]
    }

    /// The keys a permit script run once per request takes: the request's last.
    fn permit_keys_and<'a>(&'a self, request: &'a Request) -> [&'a str; 4] {
        [&self.name, &self.channel, &self.timeouts, request.key()]
    }
}

/// Takes `permits` (at least 1) if that many are available; answers 1 or 0.
pub(crate) fn take(keys: &SemaphoreKeys, permits: u32, request: &Request) -> ScriptCall {
    ScriptCall::new(&TAKE, &[&keys.name, request.key()])
        .arg(permits)
        .request_args(request)
}

/// Undoes the take `request` of `permits` whose answer never came: gives them back if it took
/// them, and keeps it from taking any later. Answers 1 when permits were given back.
pub(crate) fn undo_take(keys: &SemaphoreKeys, permits: u32, request: &Request) -> ScriptCall {
    ScriptCall::new(&UNDO_TAKE, &[&keys.name, &keys.channel, request.key()])
        .arg(permits)
        .request_args(request)
}

/// Adds `change` permits (negative: takes them away) and announces a rise.
pub(crate) fn add(keys: &SemaphoreKeys, change: i64, request: &Request) -> ScriptCall {
    ScriptCall::new(&ADD, &[&keys.name, &keys.channel, request.key()])
        .arg(change)
        .request_args(request)
}

/// Sets the count to `permits` unless the semaphore exists; answers 1 when set.
pub(crate) fn try_set(keys: &SemaphoreKeys, permits: u32, request: &Request) -> ScriptCall {
    ScriptCall::new(&SET, &[&keys.name, &keys.channel, request.key()])
        .arg(permits)
        .request_args(request)
}

/// Takes every available permit; answers how many.
pub(crate) fn drain(keys: &SemaphoreKeys, request: &Request) -> ScriptCall {
    ScriptCall::new(&DRAIN, &[&keys.name, request.key()]).request_args(request)
}

/// Answers the count of available permits (possibly below zero, set so by another client).
pub(crate) fn available(keys: &SemaphoreKeys) -> ScriptCall {
    ScriptCall::new(&AVAILABLE, &[&keys.name])
}

/// What a change of the count answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Changed {
    /// Done; the count is now this.
    Done { count: i64 },
    /// Refused, nothing changed: the count (this) would have gone below zero or above
    /// [`MAX_COUNT`].
    OutOfRange { count: i64 },
}

impl FromRedisValue for Changed {
    fn from_redis_value(value: Value) -> std::result::Result<Self, redis::ParsingError> {
        let (done, count): (i64, i64) = FromRedisValue::from_redis_value(value)?;
        Ok(match done {
            1 => Changed::Done { count },
            _ => Changed::OutOfRange { count },
        })
    }
}

/// The id of one permit of a permit-expirable semaphore: 16 random bytes, stored raw in the
/// zset as Redisson does, and shown as 32 lowercase hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PermitId([u8; 16]);

impl PermitId {
    /// A new id (the bytes of a random v4 UUID).
    pub(crate) fn random() -> Self {
        PermitId(*uuid::Uuid::new_v4().as_bytes())
    }

    /// Reads 32 hex digits (either case); `None` for anything else.
    pub(crate) fn from_hex(hex: &str) -> Option<Self> {
        let hex = hex.as_bytes();
        // (`from_str_radix` alone would take a sign.)
        if hex.len() != 32 || !hex.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        let mut bytes = [0; 16];
        for (byte, pair) in bytes.iter_mut().zip(hex.chunks(2)) {
            let digits = std::str::from_utf8(pair).ok()?;
            *byte = u8::from_str_radix(digits, 16).ok()?;
        }
        Some(PermitId(bytes))
    }

    pub(crate) fn to_hex(self) -> String {
        self.0.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    pub(crate) fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

/// Takes one permit under `id` with a lease of `lease_ms`, giving back expired ones first.
pub(crate) fn take_permit(
    keys: &SemaphoreKeys,
    id: &PermitId,
    lease_ms: u64,
    request: &Request,
) -> ScriptCall {
    ScriptCall::new(&PERMIT_TAKE, &keys.permit_keys_and(request))
        .arg(&id.as_bytes()[..])
        .arg(lease_ms)
        .request_args(request)
}

/// Undoes the take `request` of the permit `id` whose answer never came: gives the permit
/// back if it was taken, and keeps the take from taking it later. Answers 1 when given back.
pub(crate) fn undo_take_permit(
    keys: &SemaphoreKeys,
    id: &PermitId,
    request: &Request,
) -> ScriptCall {
    ScriptCall::new(&PERMIT_UNDO_TAKE, &keys.permit_keys_and(request))
        .arg(&id.as_bytes()[..])
        .request_args(request)
}

/// What taking a permit answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PermitTaken {
    Taken,
    /// None available; the first lease of a permit taken runs out in this long, if any has a
    /// lease.
    Held {
        first_expiry: Option<Duration>,
    },
}

impl FromRedisValue for PermitTaken {
    fn from_redis_value(value: Value) -> std::result::Result<Self, redis::ParsingError> {
        let (taken, expiry): (i64, i64) = FromRedisValue::from_redis_value(value)?;
        Ok(match taken {
            1 => PermitTaken::Taken,
            _ => PermitTaken::Held {
                first_expiry: u64::try_from(expiry).ok().map(Duration::from_millis),
            },
        })
    }
}

/// Gives the permit `id` back, expired ones first; answers 1 when it was taken, 0 when not.
pub(crate) fn release_permit(keys: &SemaphoreKeys, id: &PermitId, request: &Request) -> ScriptCall {
    ScriptCall::new(&PERMIT_RELEASE, &keys.permit_keys_and(request))
        .arg(&id.as_bytes()[..])
        .request_args(request)
}

/// Like [`add`], giving back expired permits first.
pub(crate) fn add_reclaiming(keys: &SemaphoreKeys, change: i64, request: &Request) -> ScriptCall {
    ScriptCall::new(&PERMIT_ADD, &keys.permit_keys_and(request))
        .arg(change)
        .request_args(request)
}

/// Like [`available`], giving back expired permits first.
pub(crate) fn available_reclaiming(keys: &SemaphoreKeys) -> ScriptCall {
    ScriptCall::new(&PERMIT_AVAILABLE, &keys.permit_keys())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permit_ids_read_back_from_their_hex_and_nothing_else_reads() {
        let id = PermitId::random();
        let hex = id.to_hex();
        assert_eq!(hex.len(), 32);
        assert_eq!(PermitId::from_hex(&hex), Some(id));
        assert_eq!(PermitId::from_hex(&hex.to_uppercase()), Some(id));
        assert_ne!(PermitId::random(), id);
        for junk in [
            "",
            "00",
            &hex[1..],
            &format!("{hex}0"),
            &format!("{}g", &hex[1..]),
        ] {
            assert_eq!(PermitId::from_hex(junk), None, "{junk:?}");
        }
        assert_eq!(PermitId::from_hex("+f000000000000000000000000000000"), None);
        assert_eq!(PermitId::from_hex("é000000000000000000000000000000"), None);
    }

    #[test]
    fn the_layout_is_redissons() {
        let keys = SemaphoreKeys::new("pool");
        assert_eq!(keys.channel, "redisson_sc:{pool}");
        assert_eq!(keys.timeouts, "{pool}:timeout");
        let tagged = SemaphoreKeys::new("{eu}:pool");
        assert_eq!(tagged.channel, "redisson_sc:{eu}:pool");
        assert_eq!(tagged.timeouts, "{eu}:pool:timeout");
        assert!(SemaphoreKeys::new("").checked().is_err());
    }
}
