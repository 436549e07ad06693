//! Running the protocol's script calls by their SHA1: one call ([`run`]), many calls in one
//! pipeline read against one deadline ([`evalsha_pipelined`]), and the fan-out to several
//! servers (`crate::fanout`) all meet an empty script cache (a restart, a `SCRIPT FLUSH`) the
//! same way: the server answers `NOSCRIPT`, the script is loaded ([`load_command`]) and the
//! call sent once more.

use std::io;
use std::time::Instant;

use redis::{
    Cmd, Connection, ErrorKind, FromRedisValue, Pipeline, RedisResult, Script, ServerErrorKind,
    Value,
};

use crate::protocol::script::LuaScript;
use crate::protocol::ScriptCall as Call;

/// Runs one call; when the server's script cache is empty, loads the script and runs the call
/// once more.
pub(crate) fn run<T: FromRedisValue>(connection: &mut Connection, call: &Call) -> RedisResult<T> {
    match call.command().query(connection) {
        Err(err) if is_no_script(&err) => {
            load_command(call.script()).query::<()>(connection)?;
            call.command().query(connection)
        }
        answer => answer,
    }
}

/// `SCRIPT LOAD` of `script`.
pub(crate) fn load_command(script: &LuaScript) -> Cmd {
    let mut load = redis::cmd("SCRIPT");
    load.arg("LOAD").arg(script.source());
    load
}

/// Whether the server answered that it does not know the script (`NOSCRIPT`).
pub(crate) fn is_no_script(err: &redis::RedisError) -> bool {
    matches!(err.kind(), ErrorKind::Server(ServerErrorKind::NoScript))
}

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
