//! Guarded writes: writes to a caller's own keys that Redis applies only while a lock hold is
//! current, checked in the same script ([`guarded_check.lua`](self)). The fixed writes
//! ([`Write`]) run in one of the crate's scripts; a caller's own Lua body is wrapped into a
//! script of its own ([`script_around`]). Both run once per request (`request_begin.lua`).

use std::sync::Arc;

use redis::Value;

use super::script::{lua_script, LuaScript, ScriptCall, ScriptRef, PLAIN_PRELUDE};
use super::Request;

lua_script!(
    GUARDED_WRITE =
        "request_begin.lua" + "guarded_check.lua" + "guarded_write.lua" + "request_end.lua"
);

/// One write of a guarded write, on its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Write {
    /// `SET key value`, with `PX ttl_ms` when given.
    Set { value: Vec<u8>, ttl_ms: Option<u64> },
    /// `DEL key`.
    Delete,
    /// `HSET key field value`.
    HashSet { field: Vec<u8>, value: Vec<u8> },
    /// `INCRBY key amount`.
    IncrementBy(i64),
}

impl Write {
    /// The write's three arguments in `guarded_write.lua`.
    fn arguments(&self) -> [Vec<u8>; 3] {
        match self {
            Write::Set { value, ttl_ms } => [
                b"set".to_vec(),
                value.clone(),
                ttl_ms
                    .map(|ms| ms.to_string().into_bytes())
                    .unwrap_or_default(),
            ],
            Write::Delete => [b"del".to_vec(), Vec::new(), Vec::new()],
            Write::HashSet { field, value } => [b"hset".to_vec(), field.clone(), value.clone()],
            Write::IncrementBy(amount) => [
                b"incrby".to_vec(),
                amount.to_string().into_bytes(),
                Vec::new(),
            ],
        }
    }
}

/// Where a guarded call checks its hold: the lock's hash and the hold's field in it.
#[derive(Clone, Copy)]
pub(crate) struct HoldAt<'a> {
    pub(crate) hash: &'a str,
    pub(crate) field: &'a str,
}

/// Applies each `(key, write)` in order while `hold` is current, once for `request`.
pub(crate) fn guarded_write(
    writes: &[(String, Write)],
    hold: HoldAt<'_>,
    request: &Request,
) -> ScriptCall {
    let mut keys: Vec<&str> = writes.iter().map(|(key, _)| key.as_str()).collect();
    keys.extend([hold.hash, request.key()]);
    let mut call = ScriptCall::new(&GUARDED_WRITE, &keys);
    for (_, write) in writes {
        for argument in write.arguments() {
            call = call.arg(argument);
        }
    }
    call.arg(hold.field).request_args(request)
}

/// The source of a guarded script around a caller's Lua `body`: the hold is checked first,
/// and the body sees its own keys and arguments only.
pub(crate) fn script_around(body: &str) -> Arc<LuaScript> {
    let source = format!(
        "{PLAIN_PRELUDE}{}{}{body}\nend\n{}{}{}{}",
        include_str!("lua/deadline.lua"),
        include_str!("lua/guarded_script_begin.lua"),
        include_str!("lua/request_begin.lua"),
        include_str!("lua/guarded_check.lua"),
        include_str!("lua/guarded_script_call.lua"),
        include_str!("lua/request_end.lua"),
    );
    Arc::new(LuaScript::owned(source))
}

/// A call of the guarded `script` with the caller's `keys` and `args`, while `hold` is
/// current, once for `request`.
pub(crate) fn guarded_script(
    script: &Arc<LuaScript>,
    keys: &[&str],
    args: &[Vec<u8>],
    hold: HoldAt<'_>,
    request: &Request,
) -> ScriptCall {
    let mut all_keys = keys.to_vec();
    all_keys.extend([hold.hash, request.key()]);
    let mut call = ScriptCall::new(ScriptRef::Shared(Arc::clone(script)), &all_keys);
    for arg in args {
        call = call.arg(arg.as_slice());
    }
    call.arg(hold.field).request_args(request)
}

/// What a guarded call answered.
pub(crate) enum GuardedAnswer {
    /// The hold was current: the writes' answers in order (for a script, what its body
    /// answered).
    Written(Vec<Value>),
    /// The hold was not current: nothing was written.
    NotHeld,
    /// Redis refused a write (or the script's body failed) after `applied` writes went
    /// through, with this message.
    Failed { applied: usize, message: String },
    /// Not an answer of these scripts.
    Unexpected(Value),
}

/// Reads a guarded call's answer.
pub(crate) fn guarded_answer(answer: Value) -> GuardedAnswer {
    match answer {
        Value::Array(mut answers) if answers.first() == Some(&Value::Int(1)) => {
            answers.remove(0);
            GuardedAnswer::Written(answers)
        }
        Value::Array(answers) if answers == [Value::Int(0)] => GuardedAnswer::NotHeld,
        Value::Array(answers) if answers.first() == Some(&Value::Int(-1)) => {
            match answers.as_slice() {
                [_, Value::Int(applied), message] => GuardedAnswer::Failed {
                    applied: usize::try_from(*applied).unwrap_or(0),
                    message: redis::from_redis_value_ref::<String>(message)
                        .unwrap_or_else(|_| format!("{message:?}")),
                },
                _ => GuardedAnswer::Unexpected(Value::Array(answers)),
            }
        }
        other => GuardedAnswer::Unexpected(other),
    }
}
