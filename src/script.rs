//! Running the crate's Lua scripts by their SHA1, many calls to one round trip.
//!
//! Single calls go through [`redis::Script::invoke`], which sends `EVALSHA` and loads the
//! script when the server answers `NOSCRIPT` (an empty script cache after a restart or a
//! `SCRIPT FLUSH`). [`evalsha_pipelined`] does the same for a batch of calls sent as one
//! pipeline. The `.lua` sources live next to the modules that call them.

use redis::{Connection, RedisResult, Script, ServerErrorKind, Value};

/// One call of a script: its keys and its arguments.
pub(crate) struct ScriptCall<'a> {
    pub(crate) keys: Vec<&'a str>,
    pub(crate) args: Vec<&'a str>,
}

/// Sends every call of `script` in one pipeline and answers one value per call, in order.
///
/// A call the server refused arrives as [`Value::ServerError`]; the caller decides what that
/// means for its call. When any call met an empty script cache, the script is loaded and the
/// whole pipeline sent once more, so the calls must be safe to repeat.
pub(crate) fn evalsha_pipelined(
    connection: &mut Connection,
    script: &Script,
    calls: &[ScriptCall<'_>],
) -> RedisResult<Vec<Value>> {
    let mut pipeline = redis::pipe();
    pipeline.ignore_errors();
    for call in calls {
        pipeline
            .cmd("EVALSHA")
            .arg(script.get_hash())
            .arg(call.keys.len())
            .arg(&call.keys)
            .arg(&call.args);
    }
    let answers: Vec<Value> = pipeline.query(connection)?;
    let cache_was_empty = answers.iter().any(|answer| {
        matches!(answer, Value::ServerError(err) if err.kind() == Some(ServerErrorKind::NoScript))
    });
    if cache_was_empty {
        script.prepare_invoke().load(connection)?;
        return pipeline.query(connection);
    }
    Ok(answers)
}
