//! Running the protocol's script calls by their SHA1: one call ([`run`]), many calls in one
//! pipeline read against one deadline ([`run_pipelined`]), and the fan-out to several
//! servers (`crate::fanout`) all meet an empty script cache (a restart, a `SCRIPT FLUSH`) the
//! same way: the server answers `NOSCRIPT`, the script is loaded ([`load_command`]) and the
//! call sent once more.

use std::io;
use std::time::Instant;

use redis::{
    Cmd, Connection, ErrorKind, FromRedisValue, Pipeline, RedisResult, ServerErrorKind, Value,
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

/// Sends `calls` and then the `other` commands in one pipeline and answers the answers of
/// each, all read before `deadline`.
///
/// A call or command the server refused arrives as [`Value::ServerError`]; the caller decides
/// what that means for it. When any call met an empty script cache, its script is loaded and
/// the calls alone are sent once more, so they must be safe to repeat.
pub(crate) fn run_pipelined(
    connection: &mut Connection,
    calls: &[Call],
    other: &[Cmd],
    deadline: Instant,
) -> RedisResult<(Vec<Value>, Vec<Value>)> {
    let mut pipeline = redis::pipe();
    for call in calls {
        pipeline.add_command(call.command().clone());
    }
    for command in other {
        pipeline.add_command(command.clone());
    }
    let mut answers = query_before(connection, &pipeline, deadline)?;
    let other_answers = answers.split_off(calls.len());
    let mut missing: Vec<&'static LuaScript> = Vec::new();
    for (call, answer) in calls.iter().zip(&answers) {
        let no_script = matches!(answer,
            Value::ServerError(err) if err.kind() == Some(ServerErrorKind::NoScript));
        if no_script
            && !missing
                .iter()
                .any(|script| std::ptr::eq(*script, call.script()))
        {
            missing.push(call.script());
        }
    }
    if missing.is_empty() {
        return Ok((answers, other_answers));
    }
    let mut again = redis::pipe();
    for script in &missing {
        again.add_command(load_command(script));
    }
    for call in calls {
        again.add_command(call.command().clone());
    }
    let reloaded = query_before(connection, &again, deadline)?;
    Ok((
        reloaded.into_iter().skip(missing.len()).collect(),
        other_answers,
    ))
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
