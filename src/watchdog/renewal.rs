//! The renewal I/O: one pipeline per batch, with the release latches to delete.
//!
//! A batch of renewals becomes the protocol's renewal calls of [`LOCKS_PER_SCRIPT_CALL`] locks
//! each, followed by `UNLINK`s of [`LATCHES_PER_UNLINK`] queued latch keys each, all sent as
//! one pipeline and answered against one deadline ([`script::run_pipelined`], which also
//! loads the script into an empty cache). The answer of each call is decoded into one
//! [`Outcome`] per lock; a failed deletion is only logged (the latch still expires by its
//! TTL). With replica acknowledgements on, a `WAIT` ends a pipeline that renews anything.
//! Its answer is read after the outcomes are applied, and does not change them: a lease
//! extended on the master is kept either way, and is not held back while the replicas are
//! waited for.
//!
//! Runs on the watchdog thread, outside the state lock, and talks to Redis only through the
//! [`Pool`]. It reads no entry: what it needs is copied into the [`Renewal`]s.

use std::sync::Arc;
use std::time::Instant;

use redis::{Cmd, ServerErrorKind, Value};

use crate::pool::{Pool, Reading};
use crate::protocol::renew::{self, HoldKind};
use crate::replication::{ReplicaAcks, Unreplicated};
use crate::script;

/// How many locks one script call renews. Bounds the time one call blocks Redis (other
/// clients run between the calls of a pipeline) while keeping script calls few.
const LOCKS_PER_SCRIPT_CALL: usize = 1_000;

/// How many latch keys one `UNLINK` deletes, for the same reason.
const LATCHES_PER_UNLINK: usize = 1_000;

/// One lock of a renewal batch.
pub(super) struct Renewal {
    /// The entry's key in the registry.
    pub(super) key: Arc<str>,
    pub(super) name: Arc<str>,
    pub(super) kind: HoldKind,
    pub(super) holder: Arc<str>,
    pub(super) chain: u64,
    pub(super) lease_deadline: Instant,
}

pub(super) enum Outcome {
    Renewed,
    HolderGone,
    Failed,
}

/// Replica acknowledgements a renewal pipeline waits for: `WAIT` at its end, its answer
/// read until `by`.
#[derive(Clone, Copy)]
pub(super) struct AckWait<'a> {
    pub(super) acks: &'a ReplicaAcks,
    pub(super) by: Instant,
}

/// Sends the renewals of `batch` to a lease of `lease_ms`, and the deletion of `latches`, in
/// one pipeline (with the `WAIT` of `acks` at its end when it renews anything), reads the
/// answers until `answer_by`, and hands `apply` one outcome per renewal (once, whatever
/// happens). Then reads `WAIT`'s answer, and answers why the renewals are not known to be on
/// enough replicas, if they are not.
pub(super) fn renew(
    pool: &Pool,
    lease_ms: u64,
    batch: &[Renewal],
    latches: &[String],
    answer_by: Instant,
    acks: Option<AckWait<'_>>,
    apply: impl FnOnce(Vec<Outcome>),
) -> Option<Unreplicated> {
    let calls: Vec<_> = batch
        .chunks(LOCKS_PER_SCRIPT_CALL)
        .map(|chunk| {
            let locks: Vec<(HoldKind, &str, &str)> = chunk
                .iter()
                .map(|renewal| (renewal.kind, &*renewal.name, &*renewal.holder))
                .collect();
            renew::renew(lease_ms, &locks)
        })
        .collect();
    let deletions: Vec<Cmd> = latches
        .chunks(LATCHES_PER_UNLINK)
        .map(|chunk| {
            let mut unlink = redis::cmd("UNLINK");
            unlink.arg(chunk);
            unlink
        })
        .collect();
    // Latch deletions alone need no acknowledgement: a latch left behind only expires.
    let acks = acks.filter(|_| !batch.is_empty());
    let read_by = acks.map_or(answer_by, |wait| wait.by.max(answer_by));
    let started = Instant::now();
    let mut apply = Some(apply);
    // The renewals go first: their answers matter more.
    let waited = pool.run_before(read_by, |connection| {
        let (renewal_answers, deletion_answers) = script::run_pipelined(
            connection,
            &calls,
            &deletions,
            answer_by,
            acks.map(|wait| wait.acks),
        )?;
        for answer in deletion_answers {
            if let Value::ServerError(err) = answer {
                log::debug!("deletion of release latches refused: {err:?}");
            }
        }
        let refused_as_replica = renewal_answers.iter().any(|answer| {
            matches!(answer, Value::ServerError(err)
                if err.kind() == Some(ServerErrorKind::ReadOnly))
        });
        if refused_as_replica {
            // The master was demoted under a connection that stays open.
            pool.master_in_doubt();
        }
        // The leases count as extended from now: waiting for the replicas must not hold the
        // outcomes back past a lease deadline.
        if let Some(apply) = apply.take() {
            apply(decode(batch, renewal_answers));
        }
        Ok(match acks {
            Some(wait) => {
                // Later when the scripts had to be loaded first, behind a `WAIT` that took
                // its time (a master just promoted): `WAIT` answers within its own timeout.
                let response_budget = answer_by.saturating_duration_since(started);
                let by = wait
                    .by
                    .max(Instant::now() + response_budget + wait.acks.timeout());
                let budget = by.saturating_duration_since(started);
                wait.acks.read_answer(connection, by, budget)
            }
            None => (None, Reading::Complete),
        })
    });
    match waited {
        Ok(unreplicated) => unreplicated,
        Err(err) => {
            log::debug!(
                "renewal of {} locks and deletion of {} release latches failed: {err}",
                batch.len(),
                latches.len()
            );
            if let Some(apply) = apply.take() {
                apply(decode(batch, Vec::new()));
            }
            None
        }
    }
}

/// One outcome per renewal of `batch` from the answers of its script calls; a renewal
/// without a well-formed answer failed.
fn decode(batch: &[Renewal], answers: Vec<Value>) -> Vec<Outcome> {
    let mut outcomes = Vec::with_capacity(batch.len());
    for (chunk, answer) in batch.chunks(LOCKS_PER_SCRIPT_CALL).zip(answers) {
        match renew::renewed(&answer, chunk.len()) {
            Some(flags) => outcomes.extend(flags.into_iter().map(|held| match held {
                true => Outcome::Renewed,
                false => Outcome::HolderGone,
            })),
            None => {
                log::debug!("renewal of {} locks refused: {answer:?}", chunk.len());
                outcomes.extend(chunk.iter().map(|_| Outcome::Failed));
            }
        }
    }
    outcomes.resize_with(batch.len(), || Outcome::Failed);
    outcomes
}
