//! One attempt of a group lock: the acquire script sent to the members at once, the answers
//! read (trusted members first, silent ones only as a probe), the undo of what an attempt
//! must not keep, and the chain a successful attempt hands out.
//!
//! A member that did not answer its last request in time is silent: while the others can
//! make the quorum alone it is asked only once per [`SILENT_PROBE_INTERVAL`] (every request
//! to a frozen server leaves a connection in its accept queue), and its probe is read briefly
//! whatever the vote, so that one that came back is trusted again. Part of `group`: it may
//! use the group's state and the members' clients.
//!
//! A member whose manager asks for replica acknowledgements gets its `WAIT` behind the
//! acquire script; a member taken but acknowledged by too few replicas counts as a member
//! that failed (a failover could erase it) and is undone with the others the attempt must
//! not keep.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::group_guard::{Chain, MemberHold};
use super::{Group, GroupGuard};
use crate::client::call::replication::Acked;
use crate::client::fanout::{self, FanOut, Request};
use crate::client::wait;
use crate::client::wait::back_off::jittered;
use crate::client::watchdog::lease::clock_drift;
use crate::client::watchdog::{Grant, Holding};
use crate::error::{Error, Result};
use crate::primitives::hold::handle::Lease;
use crate::protocol::lock::{self as protocol, Acquired, TryArgs};
use crate::protocol::renew::HoldKind;

/// How often a member that stopped answering is asked again while the others can make the
/// quorum without it.
const SILENT_PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// What one attempt found.
struct Attempt {
    /// What each member taken granted.
    taken: Vec<Option<Grant<'static>>>,
    /// Members that may hold a level of the attempt it does not count, to be undone: their
    /// connection broke after the request went out (it may have run), or they were taken
    /// but too few replicas acknowledged it.
    uncounted: Vec<bool>,
    /// Members that did not answer in time or answered an error.
    failed: usize,
    /// Members whose answer was read.
    read: usize,
    first_error: Option<Error>,
    /// The shortest lease left among members held by others.
    shortest_ttl: Option<Duration>,
    sent_at: Instant,
}

/// Whom one attempt asks.
struct Asked {
    /// The members asked, by index, trusted ones first.
    members: Vec<usize>,
    /// Per member: whether its last answer did not come in time.
    silent: Vec<bool>,
    /// Whether the trusted members can make the quorum without the silent ones.
    trusted_alone: bool,
}

impl Attempt {
    fn taken_count(&self) -> usize {
        self.taken.iter().flatten().count()
    }

    /// The member at `index` failed with `err` (the first error is kept), and may hold a
    /// level of the attempt it does not count (`uncounted`), to be undone.
    fn fail(&mut self, index: usize, err: Error, uncounted: bool) {
        self.uncounted[index] = uncounted;
        self.failed += 1;
        self.first_error.get_or_insert(err);
    }

    /// A member was held by others, for `ttl` more if known: the shortest such lease is the
    /// wait's hint.
    fn held_for(&mut self, ttl: Option<Duration>) {
        if let Some(ttl) = ttl {
            let shortest = self.shortest_ttl.map_or(ttl, |shortest| shortest.min(ttl));
            self.shortest_ttl = Some(shortest);
        }
    }
}

impl Group {
    /// One attempt of a thread that does not hold the lock yet; undoes what it took when it
    /// fails.
    pub(super) fn attempt_once(
        self: &Arc<Self>,
        thread: u64,
        lease_ms: &[u64],
        shortest_lease: Duration,
        lease: Lease,
    ) -> Result<wait::Attempt<GroupGuard>> {
        let (holders, levels_held) = self.chains_to_join(thread);
        let attempt = self.attempt(&holders, lease_ms, &levels_held);
        let elapsed = attempt.sent_at.elapsed();
        let quorum = attempt.taken_count() >= self.required;
        let valid = shortest_lease > elapsed + clock_drift(shortest_lease);
        if quorum && valid {
            let (chain, given_up) = self.hold(thread, &holders, &attempt, lease);
            // Members whose connection broke after the request went out, or whose replicas did
            // not acknowledge, may hold a level of ours; levels that joined a chain given up
            // here belong to no live chain.
            let undo: Vec<bool> = (0..self.members.len())
                .map(|index| attempt.uncounted[index] || given_up[index])
                .collect();
            let keep: Vec<u32> = (0..self.members.len())
                .map(|index| {
                    if given_up[index] {
                        0
                    } else {
                        levels_held[index]
                    }
                })
                .collect();
            self.undo_members(&holders, &keep, &undo);
            return self.hand_out(thread, chain, shortest_lease, attempt.sent_at);
        }
        // Undo where the attempt took the lock, counted or not (answers not waited for have
        // their undo queued already); members held by others have nothing of ours.
        let undo: Vec<bool> = (0..self.members.len())
            .map(|index| attempt.taken[index].is_some() || attempt.uncounted[index])
            .collect();
        self.undo_members(&holders, &levels_held, &undo);
        if quorum {
            // Taken, but the lease was gone before the answers were: too short a lease for
            // these servers.
            return Err(Error::LeaseSpent {
                name: self.label(),
                elapsed,
            });
        }
        self.fell_short(attempt)
    }

    /// What an attempt short of a quorum (and undone) tells the wait: an error when too many
    /// members failed for a quorum to be possible; a back-off after a split vote; else a wait
    /// for a release, or for the holders' lease to run out.
    fn fell_short(&self, attempt: Attempt) -> Result<wait::Attempt<GroupGuard>> {
        if attempt.failed > self.members.len() - self.required {
            return Err(match attempt.first_error {
                // Too few replicas is told as such: servers that answer are no lack of quorum.
                Some(err) if err.is_ack_shortfall() => err,
                Some(err) if !err.is_transient() => err,
                _ => Error::NoQuorum {
                    reachable: self.members.len() - attempt.failed,
                    required: self.required,
                    masters: self.members.len(),
                },
            });
        }
        Ok(if attempt.taken_count() > 0 {
            // A split vote: back off at random so that the contenders do not collide again.
            wait::Attempt::BackOff {
                delay: jittered(self.retry_delay),
            }
        } else {
            // Others hold it: wait for a release message, or for their lease to run out.
            wait::Attempt::Held {
                hint: attempt.shortest_ttl,
            }
        })
    }

    /// Hands out the chain of a successful attempt sent at `sent_at`, once a quorum of its
    /// members is still held and their token counters agree (raised to the largest token
    /// when they did not), while the lease is still valid; otherwise releases it: the attempt
    /// failed.
    fn hand_out(
        self: &Arc<Self>,
        thread: u64,
        chain: Arc<Chain>,
        shortest_lease: Duration,
        sent_at: Instant,
    ) -> Result<wait::Attempt<GroupGuard>> {
        let give_back = |chain: &Chain| {
            if let Err(err) = self.release(chain) {
                log::debug!("lock {:?}: release failed: {err}", self.label());
            }
        };
        if chain.alive() < self.required {
            give_back(&chain);
            return Ok(wait::Attempt::Again);
        }
        if chain.tokens_differ() {
            if let Err(err) = self.raise_token(&chain, chain.fence()) {
                // Too few members still held, or answered, to hand out a token that later
                // holders are sure to exceed.
                give_back(&chain);
                return match err {
                    Error::NoQuorum { .. } => Err(err),
                    _ => Ok(wait::Attempt::Again),
                };
            }
            let elapsed = sent_at.elapsed();
            if shortest_lease <= elapsed + clock_drift(shortest_lease) {
                give_back(&chain);
                return Err(Error::LeaseSpent {
                    name: self.label(),
                    elapsed,
                });
            }
        }
        self.holds.lock().insert(thread, Arc::clone(&chain));
        Ok(wait::Attempt::Taken(GroupGuard::new(
            Arc::clone(self),
            chain,
        )))
    }

    /// Per member: the holder id and levels of the chain `thread` holds there already (a
    /// single lock on the same name), or a new holder id and no levels.
    fn chains_to_join(&self, thread: u64) -> (Vec<String>, Vec<u32>) {
        self.members
            .iter()
            .map(|member| {
                let watchdog = member.raw().client().watchdog();
                match watchdog.chain_of(&member.raw().watch_key(thread), thread) {
                    Some((holder, levels)) => (holder.to_string(), levels),
                    None => (member.raw().client().new_holder_id(), 0),
                }
            })
            .unzip()
    }

    /// Sends the acquire script to the members at once and reads the answers: trusted
    /// members first, then those whose last answer did not come in time, unless the vote is
    /// settled by then. A silent member is only asked when the others cannot make the quorum
    /// alone, or as a probe once per [`SILENT_PROBE_INTERVAL`]: every request to a frozen
    /// server costs a connection in its accept queue. Answers not waited for get an undo
    /// queued behind their request.
    fn attempt(&self, holders: &[String], lease_ms: &[u64], levels_held: &[u32]) -> Attempt {
        let count = self.members.len();
        let sent_at = Instant::now();
        let asked = self.who_to_ask(sent_at);
        let requests = self.acquire_requests(&asked, holders, lease_ms, levels_held);
        let deadline = sent_at + self.attempt_timeout;
        let mut fan_out = FanOut::send(&requests, deadline);
        let mut attempt = Attempt {
            taken: vec![None; count],
            uncounted: vec![false; count],
            // Members not asked count as failed.
            failed: count - asked.members.len(),
            read: count - asked.members.len(),
            first_error: None,
            shortest_ttl: None,
            sent_at,
        };
        let mut probe_deadline = None;
        for (position, &index) in asked.members.iter().enumerate() {
            let probe = asked.silent[index] && asked.trusted_alone;
            // An undo queued behind a request that waits for replicas would sit behind its
            // `WAIT`, and a server frees a client blocked in `WAIT` as soon as it sees the
            // connection closed, unread commands and all: such a request is read, and undone
            // like one taken.
            let waits_for_replicas = requests[position].acks.is_some();
            if !probe
                && !waits_for_replicas
                && attempt.taken_count() + (count - attempt.read) < self.required
            {
                // No quorum whatever the rest answer: not waited for (undone below).
                continue;
            }
            let deadline = if probe {
                // Read whatever the vote: as long again as the trusted members took, enough
                // for a member that has come back to be trusted again.
                *probe_deadline.get_or_insert_with(|| {
                    let now = Instant::now();
                    (now + (now - sent_at).max(Duration::from_millis(1))).min(deadline)
                })
            } else {
                deadline
            };
            let answer = fan_out
                .read(position, deadline)
                .and_then(Acked::read_as::<Acquired>);
            attempt.read += 1;
            self.note_silence(index, &answer, sent_at);
            self.count(
                &mut attempt,
                index,
                answer,
                &holders[index],
                levels_held[index],
            );
        }
        self.abandon_pending(&mut fan_out, &asked, holders, levels_held);
        attempt
    }

    /// The acquisition requests of an attempt, one a member `asked`.
    fn acquire_requests(
        &self,
        asked: &Asked,
        holders: &[String],
        lease_ms: &[u64],
        levels_held: &[u32],
    ) -> Vec<Request<'_>> {
        asked
            .members
            .iter()
            .map(|&index| {
                let member = self.members[index].raw();
                let this_try = TryArgs {
                    holder: &holders[index],
                    levels_held: levels_held[index],
                    lease_ms: lease_ms[index],
                    upgrade: None,
                    writer: None,
                    accepts_grant: false,
                    // Read until the attempt's deadline: a try that comes later is refused.
                    deadline_ms: member.client().window(self.attempt_timeout).deadline_ms(),
                };
                let call = protocol::acquire(member.kind(), &this_try);
                Request::new(member.client(), call)
            })
            .collect()
    }

    /// Abandons the tries of the attempt whose answers were not read, each with its undo
    /// sent behind it, once, within the attempt (see the module's doc).
    fn abandon_pending(
        &self,
        fan_out: &mut FanOut<'_>,
        asked: &Asked,
        holders: &[String],
        levels_held: &[u32],
    ) {
        for (position, &index) in asked.members.iter().enumerate() {
            if !fan_out.is_pending(position) {
                continue;
            }
            let member = self.members[index].raw();
            let undo = member.undo_of(&holders[index], levels_held[index]);
            let undo = member.client().in_dialect(undo);
            fan_out.abandon(position, &undo.as_eval().get_packed_command());
        }
    }

    /// The members an attempt starting `now` asks, trusted ones first: the silent ones too
    /// when the trusted cannot make the quorum alone, else those whose probe turn it is.
    fn who_to_ask(&self, now: Instant) -> Asked {
        let count = self.members.len();
        let silent: Vec<bool> = self.silence.iter().map(|s| s.lock().is_some()).collect();
        let trusted = silent.iter().filter(|silent| !**silent).count();
        let trusted_alone = trusted >= self.required;
        let members =
            (0..count)
                .filter(|&index| !silent[index])
                .chain((0..count).filter(|&index| {
                    silent[index] && (!trusted_alone || self.probe_turn(index, now))
                }))
                .collect();
        Asked {
            members,
            silent,
            trusted_alone,
        }
    }

    /// Records whether member `index` answered in time: a timeout marks it silent (since
    /// the attempt's send), anything else trusted again.
    fn note_silence(&self, index: usize, answer: &Result<Acked<Acquired>>, sent_at: Instant) {
        let mut silence = self.silence[index].lock();
        match answer {
            Err(Error::Timeout(_)) => {
                silence.get_or_insert(sent_at);
            }
            _ => *silence = None,
        }
    }

    /// Counts member `index`'s `answer` to the acquisition by `holder` (which held
    /// `levels_held` levels there) in `attempt`.
    fn count(
        &self,
        attempt: &mut Attempt,
        index: usize,
        answer: Result<Acked<Acquired>>,
        holder: &str,
        levels_held: u32,
    ) {
        match answer {
            Ok(Acked {
                answer: Acquired::Taken { token },
                unreplicated: None,
                ..
            }) => attempt.taken[index] = Some(Grant::of(token, levels_held > 0)),
            Ok(Acked {
                answer: Acquired::Taken { .. },
                unreplicated: Some(why),
                ..
            }) => {
                let member = self.members[index].name();
                attempt.fail(index, why.into_error(member), true);
            }
            Ok(Acked {
                answer: Acquired::ChainGone | Acquired::UpgradableGone,
                ..
            }) => {
                // The member's chain (a single lock of this thread) is gone: the next
                // attempt starts a new one there.
                let member = self.members[index].raw();
                let key = member.watch_key(crate::protocol::names::thread_number());
                member.client().watchdog().chain_gone(&key, holder);
            }
            Ok(Acked {
                answer: Acquired::Late { server_ms },
                ..
            }) => {
                // Refused for coming after its deadline: nothing taken, the clock read anew.
                self.members[index]
                    .raw()
                    .client()
                    .server_time_was(server_ms);
            }
            Ok(Acked {
                answer: Acquired::Held { ttl, .. },
                ..
            }) => attempt.held_for(ttl),
            Err(err) => {
                // A request that went out on a connection that then broke may have run.
                let may_have_run =
                    matches!(&err, Error::Unreachable(cause) if !cause.is_connection_refusal());
                attempt.fail(index, err, may_have_run);
            }
        }
    }

    /// Whether the silent member `index` is to be probed by an attempt starting `now`; at
    /// most one attempt (of any thread) probes it per [`SILENT_PROBE_INTERVAL`].
    fn probe_turn(&self, index: usize, now: Instant) -> bool {
        let mut silence = self.silence[index].lock();
        match *silence {
            Some(last_probe)
                if now.saturating_duration_since(last_probe) >= SILENT_PROBE_INTERVAL =>
            {
                *silence = Some(now);
                true
            }
            _ => false,
        }
    }

    /// The chain of a successful attempt: every member taken goes to its client's watchdog.
    /// Also answers, per member, whether its level joined a chain given up there meanwhile
    /// (it is not part of the new chain, and its hold is to be taken back).
    fn hold(
        &self,
        thread: u64,
        holders: &[String],
        attempt: &Attempt,
        lease: Lease,
    ) -> (Arc<Chain>, Vec<bool>) {
        let fixed = lease.fixed_duration();
        let mut given_up = vec![false; self.members.len()];
        let members = self
            .members
            .iter()
            .zip(holders)
            .zip(&attempt.taken)
            .enumerate()
            .map(|(index, ((member, holder), grant))| {
                let grant = (*grant)?;
                let key = member.raw().watch_key(thread);
                let holding = Holding {
                    key: &key,
                    name: member.name(),
                    holder,
                    kind: HoldKind::Lock { delay_ms: 0 },
                    thread,
                };
                let watched =
                    member
                        .raw()
                        .client()
                        .watchdog()
                        .watch(holding, grant, attempt.sent_at, fixed);
                given_up[index] = watched.is_none();
                watched.map(|(lease, token)| MemberHold { token, lease })
            })
            .collect();
        let chain = Chain::new(holders.to_vec(), members, fixed, self.required);
        (chain, given_up)
    }

    /// Takes back what an attempt added on the members marked in `which`, leaving
    /// `levels_held`, all at once.
    fn undo_members(&self, holders: &[String], levels_held: &[u32], which: &[bool]) {
        let requests: Vec<Request<'_>> = (0..self.members.len())
            .filter(|&index| which[index])
            .map(|index| {
                let member = &self.members[index];
                Request::new(
                    member.raw().client(),
                    member.raw().undo_of(&holders[index], levels_held[index]),
                )
                .without_acks()
            })
            .collect();
        if requests.is_empty() {
            return;
        }
        let deadline = Instant::now() + self.attempt_timeout;
        for answer in fanout::call_all(&requests, deadline) {
            if let Err(err) = answer {
                log::debug!("lock {:?}: undo of an attempt failed: {err}", self.label());
            }
        }
    }
}
