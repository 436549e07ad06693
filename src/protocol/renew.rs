//! The watchdog's script: renewing the leases of many locks in one call.

use redis::Value;

use super::script::{lua_script, ScriptCall};

lua_script!(RENEW = "renew.lua");

/// Extends to `lease_ms` the lease of each lock `(name, holder id)` its holder still holds.
pub(crate) fn renew<'a>(lease_ms: u64, locks: &[(&'a str, &'a str)]) -> ScriptCall {
    let names: Vec<&str> = locks.iter().map(|(name, _)| *name).collect();
    let mut call = ScriptCall::new(&RENEW, &names).arg(lease_ms);
    for (_, holder) in locks {
        call = call.arg(*holder);
    }
    call
}

/// Per lock of a renewal of `count` locks, whether its holder still held it and the lease was
/// extended; `None` for an answer that is not one flag per lock.
pub(crate) fn renewed(answer: &Value, count: usize) -> Option<Vec<bool>> {
    match answer {
        Value::Array(flags) if flags.len() == count => {
            Some(flags.iter().map(|flag| *flag == Value::Int(1)).collect())
        }
        _ => None,
    }
}
