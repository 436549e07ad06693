//! The watchdog's script: renewing the leases of many holds in one call, whatever their kind.

use crate::layout;
use std::borrow::Cow;

use redis::Value;

use super::script::{lua_script, ScriptCall};
use super::semaphore::PermitId;

lua_script!(RENEW = "renew.lua");

/// What a watched hold is, which decides how it is renewed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HoldKind {
    /// A field of a lock hash (a lock, a fair lock): the hash's TTL is the lease, and
    /// `delay_ms` more for a lock with a lock delay (kept from others that long after a
    /// holder lost without a release).
    Lock { delay_ms: u64 },
    /// The writer's field of a read-write lock hash (`<holder>:write`).
    WriteLock,
    /// A reader's field of a read-write lock hash, with one timeout key per level.
    ReadLock,
    /// A permit of a permit-expirable semaphore: its score in the timeout zset.
    Permit,
}

impl HoldKind {
    /// The kind of a chain of this kind that a level of `level` joins: a lock keeps the
    /// longer lock delay of the two.
    pub(crate) fn joined_by(self, level: HoldKind) -> HoldKind {
        match (self, level) {
            (HoldKind::Lock { delay_ms }, HoldKind::Lock { delay_ms: joined }) => HoldKind::Lock {
                delay_ms: delay_ms.max(joined),
            },
            (kind, _) => kind,
        }
    }

    /// The script's code for the kind.
    fn code(self) -> &'static str {
        match self {
            HoldKind::Lock { .. } | HoldKind::WriteLock => "field",
            HoldKind::ReadLock => "read",
            HoldKind::Permit => "permit",
        }
    }
}

/// The key whose lease a hold of `kind` on `name` is: the lock's hash, or a permit
/// semaphore's timeout zset. A renewal call's keys, and the slot a renewal is sent to.
pub(crate) fn hold_key(kind: HoldKind, name: &str) -> Cow<'_, str> {
    match kind {
        HoldKind::Permit => Cow::Owned(layout::permit_expiries(name)),
        _ => Cow::Borrowed(name),
    }
}

/// Extends to `lease_ms` each hold `(kind, name, holder id)` that its holder still has.
pub(crate) fn renew(lease_ms: u64, holds: &[(HoldKind, &str, &str)]) -> ScriptCall {
    let keys: Vec<Cow<'_, str>> = holds
        .iter()
        .map(|&(kind, name, _)| hold_key(kind, name))
        .collect();
    let keys: Vec<&str> = keys.iter().map(|key| &**key).collect();
    let mut call = ScriptCall::new(&RENEW, &keys).arg(lease_ms);
    for &(kind, name, holder) in holds {
        call = call.arg(kind.code());
        call = match kind {
            HoldKind::WriteLock => call.arg(layout::writer_field(holder)).arg(""),
            HoldKind::ReadLock => call
                .arg(holder)
                .arg(layout::read_level_prefix(name, holder)),
            HoldKind::Lock { delay_ms: 0 } => call.arg(holder).arg(""),
            HoldKind::Lock { delay_ms } => call.arg(holder).arg(delay_ms),
            // The zset holds a permit's id as raw bytes; the watchdog knows it by its hex.
            HoldKind::Permit => match PermitId::from_hex(holder) {
                Some(id) => call.arg(&id.as_bytes()[..]).arg(""),
                None => call.arg(holder).arg(""),
            },
        };
    }
    call
}

/// Per hold of a renewal of `count` holds, whether its holder still had it and the lease was
/// extended; `None` for an answer that is not one flag per hold.
pub(crate) fn renewed(answer: &Value, count: usize) -> Option<Vec<bool>> {
    match answer {
        Value::Array(flags) if flags.len() == count => {
            Some(flags.iter().map(|flag| *flag == Value::Int(1)).collect())
        }
        _ => None,
    }
}
