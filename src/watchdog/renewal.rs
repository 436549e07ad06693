//! The renewal I/O: one pipeline per batch, with the release latches to delete.
//!
//! A batch of renewals becomes script calls of [`LOCKS_PER_SCRIPT_CALL`] locks each
//! (`renew.lua`), followed by `UNLINK`s of [`LATCHES_PER_UNLINK`] queued latch keys each, all
//! sent as one pipeline and answered against one deadline. The answer of each script call is
//! decoded into one [`Outcome`] per lock; a failed deletion is only logged (the latch still
//! expires by its TTL). When the server's script cache is empty, the script calls alone are
//! sent again through [`evalsha_pipelined`], which loads the script.
//!
//! Runs on the watchdog thread, outside the state lock, and talks to Redis only through the
//! [`Pool`]. It reads no entry: what it needs is copied into the [`Renewal`]s.

use std::io;
use std::sync::{Arc, LazyLock};
use std::time::Instant;

use redis::{Connection, Pipeline, RedisResult, Script, ServerErrorKind, Value};

use crate::pool::Pool;
use crate::script::{evalsha_pipelined, ScriptCall};

static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("renew.lua")));

/// How many locks one script call renews. Bounds the time one call blocks Redis (other
/// clients run between the calls of a pipeline) while keeping script calls few.
const LOCKS_PER_SCRIPT_CALL: usize = 1_000;

/// How many latch keys one `UNLINK` deletes, for the same reason.
const LATCHES_PER_UNLINK: usize = 1_000;

/// One lock of a renewal batch.
pub(super) struct Renewal {
    pub(super) name: Arc<str>,
    pub(super) holder: Arc<str>,
    pub(super) chain: u64,
    pub(super) lease_deadline: Instant,
}

pub(super) enum Outcome {
    Renewed,
    HolderGone,
    Failed,
}

/// Sends the renewals of `batch` to a lease of `lease_ms`, and the deletion of `latches`, in
/// one pipeline, and reads the answers until `answer_by`. Answers one outcome per renewal.
pub(super) fn renew(
    pool: &Pool,
    lease_ms: u64,
    batch: &[Renewal],
    latches: &[String],
    answer_by: Instant,
) -> Vec<Outcome> {
    let lease_ms = lease_ms.to_string();
    let calls: Vec<ScriptCall<'_>> = batch
        .chunks(LOCKS_PER_SCRIPT_CALL)
        .map(|chunk| ScriptCall {
            keys: chunk.iter().map(|renewal| &*renewal.name).collect(),
            args: std::iter::once(lease_ms.as_str())
                .chain(chunk.iter().map(|renewal| &*renewal.holder))
                .collect(),
        })
        .collect();
    // The renewals go first: their answers matter more.
    let mut pipeline = redis::pipe();
    for call in &calls {
        pipeline
            .cmd("EVALSHA")
            .arg(RENEW.get_hash())
            .arg(call.keys.len())
            .arg(&call.keys)
            .arg(&call.args);
    }
    for chunk in latches.chunks(LATCHES_PER_UNLINK) {
        pipeline.cmd("UNLINK").arg(chunk);
    }
    let answers = pool
        .run_before(answer_by, |connection| {
            exchange(connection, &pipeline, &calls, answer_by)
        })
        .inspect_err(|err| {
            log::debug!(
                "renewal of {} locks and deletion of {} release latches failed: {err}",
                batch.len(),
                latches.len()
            )
        });
    let (renewal_answers, deletion_answers) = answers.unwrap_or_default();
    for answer in deletion_answers {
        if let Value::ServerError(err) = answer {
            log::debug!("deletion of release latches refused: {err:?}");
        }
    }
    decode(batch, renewal_answers)
}

/// Sends `pipeline`, the script `calls` followed by the deletions, and answers the answers
/// of the calls and of the deletions, all read before `deadline`.
fn exchange(
    connection: &mut Connection,
    pipeline: &Pipeline,
    calls: &[ScriptCall<'_>],
    deadline: Instant,
) -> RedisResult<(Vec<Value>, Vec<Value>)> {
    let mut answers = send_and_read(connection, pipeline, deadline)?;
    let deletion_answers = answers.split_off(calls.len());
    let cache_was_empty = answers.iter().any(|answer| {
        matches!(answer, Value::ServerError(err) if err.kind() == Some(ServerErrorKind::NoScript))
    });
    if cache_was_empty {
        // Loads the script and sends the calls again (renewals are safe to repeat); the
        // deletions were done.
        answers = evalsha_pipelined(connection, &RENEW, calls, deadline)?;
    }
    Ok((answers, deletion_answers))
}

/// Sends `pipeline` and reads its answers, server errors included, until `deadline`; the
/// first I/O error or timeout ends the reading (a silent server must not hold the thread for
/// the socket timeout once per answer). Like the reading of [`evalsha_pipelined`], for a
/// pipeline that holds more than script calls.
fn send_and_read(
    connection: &mut Connection,
    pipeline: &Pipeline,
    deadline: Instant,
) -> RedisResult<Vec<Value>> {
    set_timeouts_until(connection, deadline)?;
    connection.send_packed_command(&pipeline.get_packed_pipeline())?;
    let mut answers = Vec::with_capacity(pipeline.len());
    for _ in 0..pipeline.len() {
        set_timeouts_until(connection, deadline)?;
        answers.push(connection.recv_response()?);
    }
    Ok(answers)
}

/// Makes the socket timeouts end at `deadline`, or fails when it has passed.
fn set_timeouts_until(connection: &Connection, deadline: Instant) -> RedisResult<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed").into());
    }
    connection.set_read_timeout(Some(left))?;
    connection.set_write_timeout(Some(left))
}

/// One outcome per renewal of `batch` from the answers of its script calls; a renewal
/// without a well-formed answer failed.
fn decode(batch: &[Renewal], answers: Vec<Value>) -> Vec<Outcome> {
    let mut outcomes = Vec::with_capacity(batch.len());
    for (chunk, answer) in batch.chunks(LOCKS_PER_SCRIPT_CALL).zip(answers) {
        match answer {
            Value::Array(flags) if flags.len() == chunk.len() => {
                outcomes.extend(flags.iter().map(|flag| match flag {
                    Value::Int(1) => Outcome::Renewed,
                    _ => Outcome::HolderGone,
                }))
            }
            other => {
                log::debug!("renewal of {} locks refused: {other:?}", chunk.len());
                outcomes.extend(chunk.iter().map(|_| Outcome::Failed));
            }
        }
    }
    outcomes.resize_with(batch.len(), || Outcome::Failed);
    outcomes
}
