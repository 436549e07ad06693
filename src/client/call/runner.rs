//! Running the protocol's script calls by their SHA1: one call ([`run`]), one call with the
//! `WAIT` for replica acknowledgements behind it ([`run_acknowledged`]), many calls in one
//! pipeline read against one deadline, optionally with one `WAIT` at its end whose answer
//! the caller reads when it likes ([`run_pipelined`]), and the fan-out to several servers
//! (`crate::client::fanout`) all meet an empty script cache (a restart, a `SCRIPT FLUSH`) the same
//! way: the server answers `NOSCRIPT`, the script is loaded ([`load_command`]) and the call
//! sent once more, with its `WAIT` behind it again.

use std::io;
use std::time::{Duration, Instant};

use redis::{Cmd, Connection, ErrorKind, FromRedisValue, RedisResult, ServerErrorKind, Value};

use crate::client::call::replication::{Acked, ReplicaAcks};
use crate::client::topology::deadline::time_left;
use crate::client::topology::pool::Reading;
use crate::protocol::ScriptCall as Call;

/// Runs one call; when the server's script cache is empty, loads the script and runs the call
/// once more.
pub(crate) fn run<T: FromRedisValue>(connection: &mut Connection, call: &Call) -> RedisResult<T> {
    // A send refused with `NOSCRIPT` did not run, and never will: the one after the load
    // is the same send, as far as copies on their way go.
    call.note_sent();
    match call.command().query(connection) {
        Err(err) if is_no_script(&err) => {
            load_command(call).query::<()>(connection)?;
            call.command().query(connection)
        }
        answer => answer,
    }
}

/// `SCRIPT LOAD` of the script of `call`, in its dialect.
pub(crate) fn load_command(call: &Call) -> Cmd {
    let mut load = redis::cmd("SCRIPT");
    load.arg("LOAD").arg(call.source());
    load
}

/// Whether the server answered that it does not know the script (`NOSCRIPT`).
pub(crate) fn is_no_script(err: &redis::RedisError) -> bool {
    matches!(err.kind(), ErrorKind::Server(ServerErrorKind::NoScript))
}

/// Sends `calls`, then the `other` commands, then (with `acks`) a `WAIT` in one pipeline,
/// and answers the answers of the calls and of the commands, all read before `deadline`.
/// `WAIT`'s answer is left for the caller to read ([`ReplicaAcks::read_answer`]), so that it
/// may act on the others first.
///
/// A call or command the server refused arrives as [`Value::ServerError`]; the caller decides
/// what that means for it. When any call met an empty script cache, its script is loaded and
/// the calls alone are sent once more, with the `WAIT` behind them again (the first one
/// vouched for nothing they wrote), so they must be safe to repeat.
pub(crate) fn run_pipelined(
    connection: &mut Connection,
    calls: &[Call],
    other: &[Cmd],
    deadline: Instant,
    acks: Option<&ReplicaAcks>,
) -> RedisResult<(Vec<Value>, Vec<Value>)> {
    let started = Instant::now();
    // Packed as they are, one after the other: no copy of the commands first.
    let mut pipeline = Vec::new();
    for call in calls {
        call.command().write_packed_command(&mut pipeline);
    }
    for command in other {
        command.write_packed_command(&mut pipeline);
    }
    if let Some(acks) = acks {
        acks.command().write_packed_command(&mut pipeline);
    }
    calls.iter().for_each(Call::note_sent);
    let mut answers = query_before(connection, &pipeline, calls.len() + other.len(), deadline)?;
    let other_answers = answers.split_off(calls.len());
    let missing = missing_scripts(calls, &answers);
    if missing.is_empty() {
        return Ok((answers, other_answers));
    }
    let deadline = match acks {
        Some(acks) => pass_stale_wait(connection, acks, deadline, started)?,
        None => deadline,
    };
    let reloaded = send_with_scripts(connection, calls, &answers, &missing, acks, deadline)?;
    Ok((reloaded, other_answers))
}

/// The calls whose `answers` say their script was missing (`NOSCRIPT`), one a script.
fn missing_scripts<'a>(calls: &'a [Call], answers: &[Value]) -> Vec<&'a Call> {
    let mut missing: Vec<&Call> = Vec::new();
    for (call, answer) in calls.iter().zip(answers) {
        if refused_no_script(answer) && !missing.iter().any(|other| same_script(other, call)) {
            missing.push(call);
        }
    }
    missing
}

/// Reads the answer of the `WAIT` behind calls some of which were refused for a missing
/// script: it answers before anything sent now, and vouched for nothing they wrote. It
/// answers within its own timeout: at once while enough replicas are there, only at its end
/// while they are not (a master that has just been promoted, its script cache empty, often
/// has fewer). Should it not come, a late answer would be read as the load's: nothing more
/// goes on this connection. Answers the pipeline's `deadline`, moved by the time this took.
fn pass_stale_wait(
    connection: &mut Connection,
    acks: &ReplicaAcks,
    deadline: Instant,
    started: Instant,
) -> RedisResult<Instant> {
    let stale_from = Instant::now();
    // As long as a `WAIT` behind a call that was answered in time gets.
    let stale_by = deadline.max(stale_from) + acks.timeout();
    let budget = stale_by.saturating_duration_since(started);
    if acks.read_answer(connection, stale_by, budget).1 == Reading::AnswerLeft {
        return Err(io::Error::new(io::ErrorKind::TimedOut, "WAIT did not answer").into());
    }
    Ok(deadline + stale_from.elapsed())
}

/// Loads the `missing` scripts and sends `calls` once more, with the `WAIT` behind them
/// again (the calls whose first answers, `answered`, say they ran are counted as sent
/// twice); answers the calls' new answers, read before `deadline`.
fn send_with_scripts(
    connection: &mut Connection,
    calls: &[Call],
    answered: &[Value],
    missing: &[&Call],
    acks: Option<&ReplicaAcks>,
    deadline: Instant,
) -> RedisResult<Vec<Value>> {
    let mut again = Vec::new();
    for call in missing {
        load_command(call).write_packed_command(&mut again);
    }
    for call in calls {
        call.command().write_packed_command(&mut again);
    }
    if let Some(acks) = acks {
        acks.command().write_packed_command(&mut again);
    }
    // Sent again: the calls that ran the first time (a call refused with `NOSCRIPT` did not).
    for (call, answer) in calls.iter().zip(answered) {
        if !refused_no_script(answer) {
            call.note_sent();
        }
    }
    let reloaded = query_before(connection, &again, missing.len() + calls.len(), deadline)?;
    Ok(reloaded.into_iter().skip(missing.len()).collect())
}

/// Whether a call's answer read off a pipeline is the server's `NOSCRIPT`.
fn refused_no_script(answer: &Value) -> bool {
    matches!(answer, Value::ServerError(err) if err.kind() == Some(ServerErrorKind::NoScript))
}

/// Whether two calls run the same script in the same dialect.
fn same_script(one: &Call, other: &Call) -> bool {
    std::ptr::eq(one.script(), other.script()) && one.is_sharded() == other.is_sharded()
}

/// Runs one call with the `WAIT` of `acks` behind it, in one round trip: the call's answer
/// (after loading its script into an empty cache) read until `answer_by`, `WAIT`'s until the
/// ack timeout after that. Answers the call's answer as it came (a refusal included, for the
/// caller to read), and how the answers were read.
pub(crate) fn run_acknowledged(
    connection: &mut Connection,
    call: &Call,
    acks: &ReplicaAcks,
    answer_by: Instant,
) -> RedisResult<(Acked<Value>, Reading)> {
    let started = Instant::now();
    let (answers, _) = run_pipelined(
        connection,
        std::slice::from_ref(call),
        &[],
        answer_by,
        Some(acks),
    )?;
    // Later when the script had to be loaded first, behind a `WAIT` that took its time: the
    // call's answer then came late, and the `WAIT` behind it still gets its full time.
    let response_budget = answer_by.saturating_duration_since(started);
    let acks_by = answer_by.max(Instant::now() + response_budget) + acks.timeout();
    let budget = acks_by.saturating_duration_since(started);
    let (judged, reading) = acks.read_answer(connection, acks_by, budget);
    let answer = answers.into_iter().next().unwrap_or(Value::Nil);
    Ok((Acked::judged(answer, judged), reading))
}

/// Sends the packed commands of `pipeline` and reads the answers of its first `count`,
/// server errors included, until `deadline`.
///
/// `Pipeline::query` waits the full socket timeout for every answer, even after one timed
/// out, so a silent server would hold it for that timeout times the pipeline's length. Here
/// the first I/O error or timeout ends the reading.
///
/// A process slow to send or to read (starved of CPU, stopped by a quota) does not count that
/// against the server: the answers get the time they had left when the sending began, from
/// when it ended, and past their deadline what has arrived is still read ([`LAST_LOOK`]).
fn query_before(
    connection: &mut Connection,
    pipeline: &[u8],
    count: usize,
    deadline: Instant,
) -> RedisResult<Vec<Value>> {
    let answers_within = deadline.saturating_duration_since(Instant::now());
    set_timeout_until(connection, deadline)?;
    connection.send_packed_command(pipeline)?;
    let deadline = deadline.max(Instant::now() + answers_within);
    let mut answers = Vec::with_capacity(count);
    let mut read_timeout = ReadTimeout::default();
    for _ in 0..count {
        read_timeout.until(connection, deadline)?;
        answers.push(connection.recv_response()?);
    }
    Ok(answers)
}

/// The read timeout of a connection reading answers until a deadline, set again only when
/// [`TIMEOUT_KEPT`] has gone by since it was last set: most answers of a pipeline are read
/// from what has arrived already, and two system calls an answer were most of the CPU a
/// renewal of a cluster's lock costs (one script call a slot). A read (one system call) that
/// waits ends at most [`TIMEOUT_KEPT`] past the deadline.
#[derive(Default)]
struct ReadTimeout {
    set_at: Option<Instant>,
}

impl ReadTimeout {
    fn until(&mut self, connection: &Connection, deadline: Instant) -> RedisResult<()> {
        let now = Instant::now();
        let fresh = self
            .set_at
            .is_some_and(|set_at| now.saturating_duration_since(set_at) < TIMEOUT_KEPT);
        if !fresh {
            let left = time_left(deadline).unwrap_or(LAST_LOOK);
            connection.set_read_timeout(Some(left))?;
            self.set_at = Some(now);
        }
        Ok(())
    }
}

/// How long a read timeout set for a deadline is kept for the next reads.
const TIMEOUT_KEPT: Duration = Duration::from_millis(1);

/// How long a read or write past its deadline may still wait: only for what is there
/// already (a socket timeout of zero would mean "wait forever").
const LAST_LOOK: Duration = Duration::from_millis(1);

/// Makes the socket timeouts end at `deadline`, or, once it has passed, wait no more than
/// [`LAST_LOOK`].
fn set_timeout_until(connection: &Connection, deadline: Instant) -> RedisResult<()> {
    let left = time_left(deadline).unwrap_or(LAST_LOOK);
    connection.set_read_timeout(Some(left))?;
    connection.set_write_timeout(Some(left))
}
