//! Running the crate's Lua scripts by their SHA1, many calls to one round trip.
//!
//! Single calls go through [`redis::Script::invoke`], which sends `EVALSHA` and loads the
//! script when the server answers `NOSCRIPT` (an empty script cache after a restart or a
//! `SCRIPT FLUSH`). [`evalsha_pipelined`] does the same for a batch of calls sent as one
//! pipeline, and reads the answers against one deadline. The `.lua` sources live next to the modules that call them.

use std::io;
use std::time::Instant;

use redis::{Connection, Pipeline, RedisResult, Script, ServerErrorKind, Value};

/// One call of a script: its keys and its arguments.
pub(crate) struct ScriptCall<'a> {
    pub(crate) keys: Vec<&'a str>,
    pub(crate) args: Vec<&'a str>,
}

/// Sends every call of `script` in one pipeline and answers one value per call, in order,
/// all before `deadline`.
///
/// A call the server refused arrives as [`Value::ServerError`]; the caller decides what that
/// means for its call. When any call met an empty script cache, the script is loaded and the
/// whole pipeline sent once more, so the calls must be safe to repeat.
pub(crate) fn evalsha_pipelined(
    connection: &mut Connection,
    script: &Script,
    calls: &[ScriptCall<'_>],
    deadline: Instant,
) -> RedisResult<Vec<Value>> {
    let mut pipeline = redis::pipe();
    for call in calls {
        pipeline
            .cmd("EVALSHA")
            .arg(script.get_hash())
            .arg(call.keys.len())
            .arg(&call.keys)
            .arg(&call.args);
    }
    let answers = query_before(connection, &pipeline, deadline)?;
    let cache_was_empty = answers.iter().any(|answer| {
        matches!(answer, Value::ServerError(err) if err.kind() == Some(ServerErrorKind::NoScript))
    });
    if cache_was_empty {
        set_timeout_until(connection, deadline)?;
        script.prepare_invoke().load(connection)?;
        return query_before(connection, &pipeline, deadline);
    }
    Ok(answers)
}

/// Sends `pipeline` and reads its answers, server errors included, until `deadline`.
///
/// `Pipeline::query` waits the full socket timeout for every answer, even after one timed
/// out, so a silent server would hold it for that timeout times the pipeline's length. Here
/// the first I/O error or timeout ends the reading.
fn query_before(
    connection: &mut Connection,
    pipeline: &Pipeline,
    deadline: Instant,
) -> RedisResult<Vec<Value>> {
    set_timeout_until(connection, deadline)?;
    connection.send_packed_command(&pipeline.get_packed_pipeline())?;
    let mut answers = Vec::with_capacity(pipeline.len());
    for _ in 0..pipeline.len() {
        set_timeout_until(connection, deadline)?;
        answers.push(connection.recv_response()?);
    }
    Ok(answers)
}

/// Makes the socket timeouts end at `deadline`, or fails when it has passed.
fn set_timeout_until(connection: &Connection, deadline: Instant) -> RedisResult<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed").into());
    }
    connection.set_read_timeout(Some(left))?;
    connection.set_write_timeout(Some(left))
}
