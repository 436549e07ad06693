//! The renewal I/O: one pipeline per batch, with the release receipts to delete.
//!
//! A batch of renewals becomes the protocol's renewal calls of [`LOCKS_PER_SCRIPT_CALL`] locks
//! each, followed by `UNLINK`s of [`RECEIPTS_PER_UNLINK`] queued receipt keys each, all sent as
//! one pipeline and answered against one deadline ([`runner::run_pipelined`], which also
//! loads the script into an empty cache). The answer of each call is decoded into one
//! [`Outcome`] per lock; a failed deletion is only logged (the receipt still expires by its
//! TTL). With replica acknowledgements on, a `WAIT` ends a pipeline that renews anything.
//! Its answer is read after the outcomes are applied, and does not change them: a lease
//! extended on the master is kept either way, and is not held back while the replicas are
//! waited for.
//!
//! In cluster mode a batch is split by node first, one pipeline per node in turn, and within
//! a node the script calls go by slot (one call touches the keys of one slot), so locks that
//! share a hash tag share calls. A call answered `MOVED` (the slot moved) fails its renewals,
//! which are tried again shortly where the map now says; one answered `ASK` (its slot is
//! being migrated and its keys have left) is sent again at once to the node named.
//!
//! Runs on the watchdog thread, outside the state lock, and talks to Redis only through the
//! [`Router`] and its pools. It reads no entry: what it needs is copied into the
//! [`Renewal`]s.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use redis::{Cmd, ServerErrorKind, Value};

use crate::client::call::replication::{AckSetting, ReplicaAcks, Unreplicated};
use crate::client::call::route::{self, Redirect, Router};
use crate::client::call::runner;
use crate::client::topology::pool::{Pool, Reading};
use crate::error::RiskReason;
use crate::protocol::renew::{self, HoldKind};
use crate::protocol::slot::key_slot;
use crate::protocol::ScriptCall;

use super::registry::Slot;

/// How many locks one script call renews. Bounds the time one call blocks Redis (other
/// clients run between the calls of a pipeline) while keeping script calls few.
const LOCKS_PER_SCRIPT_CALL: usize = 1_000;

/// How many receipt keys one `UNLINK` deletes, for the same reason.
const RECEIPTS_PER_UNLINK: usize = 1_000;

/// One lock of a renewal batch.
pub(super) struct Renewal {
    /// The entry's slot in the registry.
    pub(super) slot: Slot,
    pub(super) name: Arc<str>,
    pub(super) kind: HoldKind,
    pub(super) holder: Arc<str>,
    pub(super) chain: u64,
    pub(super) lease_deadline: Instant,
}

pub(super) enum Outcome {
    Renewed,
    HolderGone,
    /// No answer, or not one that renews: the hold is at risk, for this reason.
    Failed(RiskReason),
}

/// Replica acknowledgements a renewal pipeline waits for: `WAIT` at its end (as `setting`
/// resolves it for the pipeline's master), its answer read until `by`.
#[derive(Clone, Copy)]
pub(super) struct AckWait<'a> {
    pub(super) setting: &'a AckSetting,
    pub(super) by: Instant,
}

impl<'a> AckWait<'a> {
    /// The `WAIT` a pipeline to `pool` renewing `batch` ends with, and when its answer is due:
    /// none when the master has no replica to wait for, or the pipeline renews nothing
    /// (receipt deletions alone need no acknowledgement: a receipt left behind only expires).
    fn for_share(self, pool: &Pool, batch: &[Renewal]) -> Option<(Cow<'a, ReplicaAcks>, Instant)> {
        if batch.is_empty() {
            return None;
        }
        Some((self.setting.for_pool(pool)?, self.by))
    }
}

/// When the answers of a batch taken at `taken_at` are due: `answer_by`, and the `WAIT`'s
/// answer as `acks` says, both as if the batch were sent when taken. Each pipeline moves them
/// on by the time from then to its own send (building the pipeline, the pipelines of other
/// nodes before it, a thread that waited for a core): the answers get their whole time.
#[derive(Clone, Copy)]
pub(super) struct Due<'a> {
    pub(super) taken_at: Instant,
    pub(super) answer_by: Instant,
    pub(super) acks: Option<AckWait<'a>>,
}

impl<'a> Due<'a> {
    /// The deadlines of a pipeline sent now: moved on by the time since the batch was taken.
    fn sent_now(self) -> (Instant, Option<AckWait<'a>>) {
        let late = self.taken_at.elapsed();
        let acks = self.acks.map(|wait| AckWait {
            by: wait.by + late,
            ..wait
        });
        (self.answer_by + late, acks)
    }
}

/// Renews `batch` and deletes `receipts` wherever their keys are: as one pipeline on a single
/// server; in cluster mode one per node, in turn, each read against its deadlines moved on to
/// its own send ([`Due`]). Hands `apply` the outcomes of each part of the batch, and answers
/// why some renewals are not known to be on enough replicas, if they are not.
pub(super) fn renew_everywhere(
    router: &Router,
    lease_ms: u64,
    batch: Vec<Renewal>,
    receipts: Vec<String>,
    due: Due<'_>,
    mut apply: impl FnMut(&[Renewal], Vec<Outcome>),
) -> Option<Unreplicated> {
    let Router::Cluster(_) = router else {
        let pool = router.pool_for(b"");
        let share = Share {
            pool: &pool,
            batch: &batch,
            receipts: &receipts,
        };
        return renew(share, router, lease_ms, due, |outcomes| {
            apply(&batch, outcomes)
        });
    };
    let mut by_node: HashMap<*const Pool, NodeShare> = HashMap::new();
    for renewal in batch {
        let pool = router.pool_for(renewal_key(&renewal).as_bytes());
        by_node
            .entry(Arc::as_ptr(&pool))
            .or_insert_with(|| (pool, Vec::new(), Vec::new()))
            .1
            .push(renewal);
    }
    for receipt in receipts {
        let pool = router.pool_for(receipt.as_bytes());
        by_node
            .entry(Arc::as_ptr(&pool))
            .or_insert_with(|| (pool, Vec::new(), Vec::new()))
            .2
            .push(receipt);
    }
    let mut unreplicated = None;
    for (_, (pool, mut renewals, mut receipts)) in by_node {
        // One script call and one deletion per slot (and per thousand).
        renewals.sort_by_cached_key(|renewal| key_slot(renewal_key(renewal).as_bytes()));
        receipts.sort_by_cached_key(|receipt| key_slot(receipt.as_bytes()));
        let share = Share {
            pool: &pool,
            batch: &renewals,
            receipts: &receipts,
        };
        let why = renew(share, router, lease_ms, due, |outcomes| {
            apply(&renewals, outcomes)
        });
        unreplicated = unreplicated.or(why);
    }
    unreplicated
}

/// A node's share of a batch: its pool, the renewals of its keys, the receipts it keeps.
type NodeShare = (Arc<Pool>, Vec<Renewal>, Vec<String>);

/// The key a renewal's slot is the slot of.
fn renewal_key(renewal: &Renewal) -> std::borrow::Cow<'_, str> {
    renew::hold_key(renewal.kind, &renewal.name)
}

/// What one pipeline renews and deletes, and the pool it goes through.
#[derive(Clone, Copy)]
struct Share<'a> {
    pool: &'a Pool,
    batch: &'a [Renewal],
    receipts: &'a [String],
}

/// The commands of one pipeline: the renewal calls (each renews the renewals of its chunk)
/// and the receipt deletions.
struct Pipeline {
    chunks: Vec<Range<usize>>,
    calls: Vec<ScriptCall>,
    deletions: Vec<Cmd>,
}

impl Pipeline {
    /// `share`'s renewals to a lease of `lease_ms`, in calls of at most
    /// [`LOCKS_PER_SCRIPT_CALL`] locks, and its deletions, in `UNLINK`s of at most
    /// [`RECEIPTS_PER_UNLINK`] keys; `by_slot`, each of one slot.
    fn of(share: Share<'_>, lease_ms: u64, by_slot: bool) -> Pipeline {
        let Share {
            batch, receipts, ..
        } = share;
        let chunks = slot_runs(
            batch.len(),
            |index| renewal_key(&batch[index]),
            by_slot,
            LOCKS_PER_SCRIPT_CALL,
        );
        let calls = chunks
            .iter()
            .map(|range| {
                let locks: Vec<(HoldKind, &str, &str)> = batch[range.clone()]
                    .iter()
                    .map(|renewal| (renewal.kind, &*renewal.name, &*renewal.holder))
                    .collect();
                renew::renew(lease_ms, &locks)
            })
            .collect();
        let deletion_runs = slot_runs(
            receipts.len(),
            |index| std::borrow::Cow::Borrowed(receipts[index].as_str()),
            by_slot,
            RECEIPTS_PER_UNLINK,
        );
        let deletions = deletion_runs
            .into_iter()
            .map(|range| {
                let mut unlink = redis::cmd("UNLINK");
                unlink.arg(&receipts[range]);
                unlink
            })
            .collect();
        Pipeline {
            chunks,
            calls,
            deletions,
        }
    }
}

/// Sends the renewals of `share` to a lease of `lease_ms`, and the deletion of its receipts,
/// in one pipeline (with the `WAIT` of its acknowledgements at its end when it renews
/// anything), reads the answers until they are `due`, and hands `apply` one outcome per
/// renewal (once, whatever happens). Then reads `WAIT`'s answer, and answers why the renewals
/// are not known to be on enough replicas, if they are not.
fn renew(
    share: Share<'_>,
    router: &Router,
    lease_ms: u64,
    due: Due<'_>,
    apply: impl FnOnce(Vec<Outcome>),
) -> Option<Unreplicated> {
    let Share {
        pool,
        batch,
        receipts,
    } = share;
    let pipeline = Pipeline::of(share, lease_ms, router.cluster().is_some());
    let (answer_by, acks) = due.sent_now();
    let acks = acks.and_then(|wait| wait.for_share(pool, batch));
    let read_by = acks
        .as_ref()
        .map_or(answer_by, |(_, by)| (*by).max(answer_by));
    let started = Instant::now();
    let mut apply = Some(apply);
    // The renewals go first: their answers matter more.
    let waited = pool.run_before(read_by, |connection| {
        let (renewal_answers, deletion_answers) = runner::run_pipelined(
            connection,
            &pipeline.calls,
            &pipeline.deletions,
            answer_by,
            acks.as_ref().map(|(acks, _)| &**acks),
        )?;
        note_refusals(pool, &renewal_answers, &deletion_answers);
        // The leases count as extended from now: waiting for the replicas must not hold the
        // outcomes back past a lease deadline.
        let renewal_answers = follow_redirections(router, &pipeline.calls, renewal_answers);
        if let Some(apply) = apply.take() {
            let unanswered = RiskReason::Unanswered;
            apply(decode(batch, &pipeline.chunks, renewal_answers, unanswered));
        }
        Ok(match &acks {
            Some((acks, by)) => read_acks(connection, acks, *by, answer_by, started),
            None => (None, Reading::Complete),
        })
    });
    match waited {
        Ok(unreplicated) => unreplicated,
        Err(err) => {
            log::debug!(
                "renewal of {} locks and deletion of {} release receipts failed: {err}",
                batch.len(),
                receipts.len()
            );
            if let Some(apply) = apply.take() {
                let reason = RiskReason::of_error(&err);
                apply(decode(batch, &pipeline.chunks, Vec::new(), reason));
            }
            None
        }
    }
}

/// Logs refused deletions, and tells `pool` when a renewal was refused as by a replica: the
/// master was demoted under a connection that stays open.
fn note_refusals(pool: &Pool, renewal_answers: &[Value], deletion_answers: &[Value]) {
    for answer in deletion_answers {
        if let Value::ServerError(err) = answer {
            log::debug!("deletion of release receipts refused: {err:?}");
        }
    }
    let refused_as_replica = renewal_answers.iter().any(|answer| {
        matches!(answer, Value::ServerError(err)
            if err.kind() == Some(ServerErrorKind::ReadOnly))
    });
    if refused_as_replica {
        pool.master_in_doubt();
    }
}

/// Reads the answer of the pipeline's `WAIT` for `acks` (sent at `started`, its calls
/// answered by `answer_by`, its own due by `by`): why the renewals are not on enough
/// replicas, if they are not.
fn read_acks(
    connection: &mut redis::Connection,
    acks: &ReplicaAcks,
    by: Instant,
    answer_by: Instant,
    started: Instant,
) -> (Option<Unreplicated>, Reading) {
    // Later when the scripts had to be loaded first, behind a `WAIT` that took its time (a
    // master just promoted): `WAIT` answers within its own timeout.
    let response_budget = answer_by.saturating_duration_since(started);
    let by = by.max(Instant::now() + response_budget + acks.timeout());
    let budget = by.saturating_duration_since(started);
    let (judged, reading) = acks.read_answer(connection, by, budget);
    (judged.unreplicated, reading)
}

/// Splits `count` items into runs of at most `most`, and, with `by_slot`, of one slot each
/// (the items come sorted by slot).
fn slot_runs<'a>(
    count: usize,
    key: impl Fn(usize) -> std::borrow::Cow<'a, str>,
    by_slot: bool,
    most: usize,
) -> Vec<Range<usize>> {
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut slot = None;
    for index in 0..count {
        let this_slot = by_slot.then(|| key_slot(key(index).as_bytes()));
        if index > start && (index - start == most || this_slot != slot) {
            chunks.push(start..index);
            start = index;
        }
        slot = this_slot;
    }
    if start < count {
        chunks.push(start..count);
    }
    chunks
}

/// The answers, with each `ASK` followed: the call sent again, after `ASKING`, to the node
/// that imports its slot. A `MOVED` answer tells the map, and fails its renewals, which are
/// tried again shortly where the map then says.
fn follow_redirections(router: &Router, calls: &[ScriptCall], answers: Vec<Value>) -> Vec<Value> {
    let Some(cluster) = router.cluster() else {
        return answers;
    };
    answers
        .into_iter()
        .zip(calls)
        .map(|(answer, call)| {
            let Some(redirect) = Redirect::of_value(&answer) else {
                return answer;
            };
            let Some(importing) = redirect.ask_target() else {
                cluster.call_failed(&redirect.into_error());
                return answer;
            };
            cluster
                .pool_at(importing)
                .run(|connection| {
                    route::ask_first(connection, true)?;
                    runner::run::<Value>(connection, call)
                })
                .unwrap_or(answer)
        })
        .collect()
}

/// One outcome per renewal of `batch` from the answers of its script calls, one per chunk;
/// a renewal without a well-formed answer failed, for `unanswered` when it got none.
fn decode(
    batch: &[Renewal],
    chunks: &[Range<usize>],
    answers: Vec<Value>,
    unanswered: RiskReason,
) -> Vec<Outcome> {
    let mut outcomes = Vec::with_capacity(batch.len());
    for (range, answer) in chunks.iter().zip(answers) {
        let chunk = &batch[range.clone()];
        match renew::renewed(&answer, chunk.len()) {
            Some(flags) => outcomes.extend(flags.into_iter().map(|held| match held {
                true => Outcome::Renewed,
                false => Outcome::HolderGone,
            })),
            None => {
                log::debug!("renewal of {} locks refused: {answer:?}", chunk.len());
                let reason = match &answer {
                    Value::ServerError(err) => err
                        .kind()
                        .map_or(RiskReason::Refused, |kind| RiskReason::of_kind(kind.into())),
                    _ => RiskReason::Refused,
                };
                outcomes.extend(chunk.iter().map(|_| Outcome::Failed(reason)));
            }
        }
    }
    outcomes.resize_with(batch.len(), || Outcome::Failed(unanswered));
    outcomes
}
