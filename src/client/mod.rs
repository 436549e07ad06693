//! [`Client`]: the one internal client every primitive talks to Redis through.
//!
//! A client is one Redis client identity (a random v4 UUID, the first half of every holder
//! id) with its command connection pool, its watchdog thread, its pub/sub listener thread,
//! its timeouts and its request ids. [`LockManager`](crate::LockManager) builds it and hands
//! an `Arc` of it to every handle it makes; the last `Arc` dropped stops and joins the
//! threads. In sentinel mode it also owns the master locator and the thread that hears
//! failovers, and moves the pool and the pub/sub listener to a new master. How it comes up is
//! in [`connect`]; [`cleanup`] is its thread that sends failed undos again, [`recount`] its
//! thread that reads how many replicas each master has in sync (for the default
//! acknowledgements), and [`fanout`] its way to call several servers at once.
//!
//! [`sync`] holds the locks and channels of the watchdog, the cleanup thread, the pub/sub
//! hubs and the wait loop (`shuttle`'s inside a schedule search of the unit tests).
//!
//! It knows nothing of the primitives above it: it may use the layers below (the watchdog,
//! pub/sub, the wait loop's recorder, the call runner and routing, the topology, the
//! protocol), nothing else.
//!
//! Every acquisition, release and fenced write of the primitives runs through
//! [`Client::run_acknowledged`], which sends the `WAIT` for replica acknowledgements behind
//! the call when the manager asks for them, and is the plain call when it does not.

pub(crate) mod call;
pub(crate) mod cleanup;
mod clock;
mod connect;
pub(crate) mod fanout;
pub(crate) mod pubsub;
mod recount;
pub(crate) mod server_check;
pub(crate) mod stats;
pub(crate) mod sync;
pub(crate) mod telemetry;
pub(crate) mod topology;
pub(crate) mod wait;
pub(crate) mod watchdog;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Connection, FromRedisValue, RedisError, RedisResult, Value};

use crate::client::call::replication::{
    AckSetting, Acked, ReplicaAcks, ShortfallLog, Unreplicated,
};
use crate::client::call::route::{self, Redirect, Routed, Router};
use crate::client::call::runner;
use crate::client::cleanup::{Cleanup, Undo};
use crate::client::clock::ServerClock;
use crate::client::pubsub::PubSub;
use crate::client::recount::Recount;
use crate::client::stats::{Stats, WaitRecorder};
use crate::client::topology::pool::Pool;
use crate::client::topology::sentinel::SwitchWatcher;
use crate::client::topology::tls::TlsOptions;
use crate::client::wait::line::Lines;
use crate::client::watchdog::{Callbacks, Watchdog};
use crate::error::{Error, Result};
use crate::protocol::names;
use crate::protocol::request::{self, Window};
use crate::protocol::{Request, ScriptCall};

/// What a client is built from; checked by the builder before.
pub(crate) struct Settings {
    /// The server; in sentinel mode only the credentials, database and TLS of the master.
    pub(crate) info: redis::ConnectionInfo,
    /// Sentinel mode: where the sentinels are and their name of the master.
    pub(crate) sentinel: Option<SentinelSettings>,
    /// Cluster mode: the nodes to ask for the slot map (`info` is then the first of them).
    pub(crate) cluster_seeds: Option<Vec<redis::ConnectionInfo>>,
    /// How long waits and changes ride out an outage (see [`Client::outage_grace`]).
    pub(crate) outage_grace: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) watchdog_timeout: Duration,
    /// How many command connections each pool keeps idle, and may have open at once.
    pub(crate) pool_sizes: crate::client::topology::pool::PoolSizes,
    /// What the watchdog tells of losses and risks.
    pub(crate) callbacks: Callbacks,
    /// `rediss://` settings.
    pub(crate) tls: TlsOptions,
    /// What acquisitions, renewals, releases and fenced writes wait for, if anything.
    pub(crate) ack_setting: Option<AckSetting>,
    /// How many times in a row a release may hand a plain or write lock to another thread of
    /// the process (0: never).
    pub(crate) local_handoffs: u32,
    /// Whether the manager subscribes at all (see `LockManagerBuilder::without_pubsub`).
    pub(crate) pubsub: bool,
}

/// The sentinels of a master and its name.
pub(crate) struct SentinelSettings {
    pub(crate) sentinels: Vec<redis::ConnectionInfo>,
    pub(crate) master_name: String,
}

/// Who sends an undo first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Undoing {
    /// The caller, at once: the server answered the call (a grant short of replica
    /// acknowledgements), or the caller gives up a wait.
    Now,
    /// The cleanup thread only: the server did not answer the call, and the caller would
    /// wait for another timeout.
    Later,
}

/// Who releases a hold, which decides what an outage does to the release.
// `pub` in a private module: it appears in the guards' crate-internal `Hold` trait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// Its owner, who waits for the outcome: sent again through an outage, for up to the
    /// outage grace.
    Waited,
    /// A guard's drop, which must not block: sent once, then by the cleanup thread.
    Dropped,
}

pub(crate) struct Client {
    id: String,
    router: Arc<Router>,
    watchdog: Watchdog,
    pubsub: Arc<PubSub>,
    /// Hears failovers, in sentinel mode.
    switch_watcher: Option<SwitchWatcher>,
    /// How long waits and changes ride out an outage.
    outage_grace: Duration,
    /// How long one send may take: a new connection and an answer.
    one_send: Duration,
    /// The server's clock, on which requests have their deadlines.
    clock: ServerClock,
    /// Sends again the undos that failed.
    cleanup: Cleanup,
    /// Reads the masters' replicas in sync, in connected mode.
    recount: Option<Recount>,
    next_request: AtomicU64,
    shut_down: AtomicBool,
    waits: WaitRecorder,
    /// The threads waiting for each plain or write lock, which a release may hand it to.
    handoffs: Lines,
    acks: Option<AckSetting>,
    /// Releases that stood without enough replica acknowledgements.
    releases_unreplicated: AtomicU64,
    /// Acquisitions handed to waiting threads inside a release.
    handoffs_taken: AtomicU64,
    unreplicated_releases_log: ShortfallLog,
}

impl Client {
    /// The replica acknowledgements this client's writes wait for, if any.
    pub(crate) fn ack_setting(&self) -> Option<&AckSetting> {
        self.acks.as_ref()
    }

    /// Whether a write of `key` waits for replica acknowledgements now: with fixed ones,
    /// always; in connected mode, while its master has replicas in sync.
    pub(crate) fn waits_for_replicas(&self, key: &str) -> bool {
        self.acks
            .as_ref()
            .is_some_and(|setting| setting.waits_at(&self.pool_for(key)))
    }

    /// What the masters' settings put at risk (see [`server_check`]).
    pub(crate) fn check_server(&self) -> Result<Vec<crate::error::Finding>> {
        self.ensure_running()?;
        let fixed = self.acks.as_ref().and_then(AckSetting::fixed);
        Ok(server_check::check(&self.router, fixed))
    }

    /// Runs `call` on a pooled connection and answers its answer. With replica
    /// acknowledgements on, the `WAIT` for them follows the call in the same round trip (its
    /// answer within the ack timeout after the call's, itself within the response timeout),
    /// and the answer tells whether enough replicas acknowledged; the caller decides what a
    /// shortfall means. With them off, this is the plain call, with nothing more sent.
    ///
    /// `on_timeout` runs on the connection when the call's own answer did not come in time,
    /// while the call may still run: to queue its undo right behind it. (With
    /// acknowledgements on, the undo waits behind the `WAIT`; should the server see the
    /// connection closed while that `WAIT` still blocks, it drops the undo, and a late grant
    /// runs out with its lease instead. That takes a server too slow to answer the call and
    /// replicas too slow to acknowledge it, at once.)
    pub(crate) fn run_acknowledged<T: FromRedisValue>(
        &self,
        call: &ScriptCall,
        mut on_timeout: impl FnMut(&mut Connection),
    ) -> Result<Acked<T>> {
        let call = &*self.router.prepare(call)?;
        let key = call.keys().next().unwrap_or_default();
        self.router.route(key, |pool, asking| {
            match self
                .acks
                .as_ref()
                .and_then(|setting| setting.for_pool(pool))
            {
                None => pool.run(|connection| {
                    route::ask_first(connection, asking)?;
                    let answer = runner::run(connection, call);
                    if answer.as_ref().is_err_and(RedisError::is_timeout) {
                        on_timeout(connection);
                    }
                    route::intercept(answer.map(Acked::unasked))
                }),
                Some(acks) => self.run_with_acks(pool, asking, call, &acks, &mut on_timeout),
            }
        })
    }

    /// [`Client::run_acknowledged`] on `pool`, with the `WAIT` of `acks` behind the call.
    fn run_with_acks<T: FromRedisValue>(
        &self,
        pool: &Pool,
        asking: bool,
        call: &ScriptCall,
        acks: &ReplicaAcks,
        on_timeout: &mut impl FnMut(&mut Connection),
    ) -> Result<Routed<Acked<T>>> {
        let response_timeout = self.router.response_timeout();
        let routed = pool.run_for(response_timeout + acks.timeout(), |connection| {
            route::ask_first(connection, asking)?;
            let answer_by = Instant::now() + response_timeout;
            let outcome = runner::run_acknowledged(connection, call, acks, answer_by);
            if outcome.as_ref().is_err_and(RedisError::is_timeout) {
                on_timeout(connection);
            }
            let (acked, reading) = outcome?;
            Ok(match Redirect::of_value(&acked.answer) {
                Some(redirect) => (Routed::Redirected(redirect), reading),
                None => (Routed::Done(acked), reading),
            })
        })?;
        // As a refusal read alone is, once the connection is back (the sentinels asked again
        // for a demoted master, the cluster's map read again).
        if let Routed::Done(Acked {
            answer: Value::ServerError(refused),
            ..
        }) = &routed
        {
            pool.failed(&refused.clone().into());
        }
        Ok(match routed {
            Routed::Done(acked) => Routed::Done(acked.read_as()?),
            Routed::Redirected(redirect) => Routed::Redirected(redirect),
        })
    }

    /// Runs one protocol call on the node that serves its keys, and answers its answer.
    pub(crate) fn run_script<T: FromRedisValue>(&self, call: &ScriptCall) -> Result<T> {
        self.router.run_script(call)
    }

    /// Runs `command` on a pooled connection of the node that serves `key`.
    pub(crate) fn run<T>(
        &self,
        key: impl AsRef<[u8]>,
        mut command: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> Result<T> {
        self.router.route(key.as_ref(), |pool, asking| {
            pool.run(|connection| {
                route::ask_first(connection, asking)?;
                route::intercept(command(connection))
            })
        })
    }

    /// `call` in the dialect this deployment publishes releases in (see `Router::dialect`),
    /// for a call sent by other means than [`Client::run_script`].
    pub(crate) fn in_dialect(&self, call: ScriptCall) -> ScriptCall {
        match self.router.dialect(&call) {
            std::borrow::Cow::Owned(sharded) => sharded,
            std::borrow::Cow::Borrowed(_) => call,
        }
    }

    /// A release of the primitive `name` stood without enough replica acknowledgements: it
    /// is counted and reported (a warning at most every few seconds).
    pub(crate) fn release_unreplicated(&self, name: &str, why: &Unreplicated) {
        self.releases_unreplicated.fetch_add(1, Ordering::Relaxed);
        self.unreplicated_releases_log
            .report(1, format_args!("release of {name:?}"), why);
    }

    /// The lines of this process's waiters that a release may hand a plain or write lock to.
    pub(crate) fn handoffs(&self) -> &Lines {
        &self.handoffs
    }

    /// A waiting thread holds a lock a release handed it.
    pub(crate) fn count_handoff(&self) {
        self.handoffs_taken.fetch_add(1, Ordering::Relaxed);
        telemetry::handoff();
    }

    /// Where the wait loop counts this client's waits and acquisitions.
    pub(crate) fn wait_recorder(&self) -> &WaitRecorder {
        &self.waits
    }

    /// A snapshot of the counters of the client's waits, watchdog and pub/sub service.
    pub(crate) fn stats(&self) -> Stats {
        let watchdog = self.watchdog.counts();
        Stats {
            held: watchdog.held,
            waiting: self.waits.waiting(),
            acquisitions: self.waits.acquisitions(),
            renewals_sent: watchdog.renewals_sent,
            renewals_failed: watchdog.renewals_failed,
            renewal_batches: watchdog.renewal_batches,
            renewals_unreplicated: watchdog.renewals_unreplicated,
            releases_unreplicated: self.releases_unreplicated.load(Ordering::Relaxed),
            lost_not_held_anymore: watchdog.lost.not_held_anymore,
            lost_lease_expired: watchdog.lost.lease_expired,
            lost_force_released: watchdog.lost.force_released,
            at_risk: watchdog.at_risk,
            risks_raised: watchdog.risks.raised,
            risks_cleared: watchdog.risks.cleared,
            revocations_requested: watchdog.revocations_requested,
            handoffs: self.handoffs_taken.load(Ordering::Relaxed),
            cleanup_pending: self.cleanup.counts().pending(),
            cleanup_done: self.cleanup.counts().done(),
            cleanup_abandoned: self.cleanup.counts().abandoned(),
            pubsub_reconnects: self.pubsub.reconnects(),
            wait_times: self.waits.wait_times(),
            hold_times: watchdog.hold_times,
            renewal_times: watchdog.renewal_times,
            most_waited: self.waits.most_waited(),
        }
    }

    /// The client id: the first half of every holder id.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Where the calls for a key go.
    pub(crate) fn router(&self) -> &Router {
        &self.router
    }

    /// The command connections of the node that serves `key` now.
    pub(crate) fn pool_for(&self, key: &str) -> Arc<Pool> {
        self.router.pool_for(key.as_bytes())
    }

    /// The thread that renews leases and reports losses.
    pub(crate) fn watchdog(&self) -> &Watchdog {
        &self.watchdog
    }

    /// The pub/sub listener that wakes waiters.
    pub(crate) fn pubsub(&self) -> &PubSub {
        &self.pubsub
    }

    /// How long a wait without deadline, or a change, goes on through an outage (Redis
    /// unreachable, slow, or refusing writes while it fails over), trying again, before it
    /// gives up with the error; the same on every deployment.
    pub(crate) fn outage_grace(&self) -> Duration {
        self.outage_grace
    }

    /// A new request of a call that changes the primitive `name`, sent through an outage
    /// ([`Client::settle`]): its own id, copies sent for up to the outage grace, none run
    /// after that (see [`Request`]).
    pub(crate) fn request(&self, name: &str) -> Request {
        self.request_sent_for(name, self.outage_grace + self.one_send)
    }

    /// A new request of a take (of permits, of a permit under the id `id`): sent once, and
    /// undone through an outage should its answer not come.
    pub(crate) fn take_request(&self, name: &str, id: &str) -> Request {
        let window = Window {
            // Its undo finds what it took for as long as the undo may be sent.
            keep_after: self.outage_grace + self.one_send,
            ..self.window(self.one_send)
        };
        Request::new(name, id, window)
    }

    /// A new request whose copies may be sent for `send_for` (a dropped guard's release,
    /// sent by the cleanup thread until the lease would have run out, or for the outage
    /// grace where there is no lease: a semaphore guard's).
    fn request_sent_for(&self, name: &str, send_for: Duration) -> Request {
        Request::new(name, &self.next_request_id(), self.window(send_for))
    }

    /// How long a call (a request, a release) made now is sent, and its answer kept after
    /// its deadline: one send longer, so that a copy that reaches the server just after it
    /// still finds the answer.
    pub(crate) fn window(&self, send_for: Duration) -> Window {
        Window {
            server_now_ms: self.clock.now_ms(),
            send_for,
            keep_after: self.one_send,
        }
    }

    /// The answer of `request` has arrived for its `call`: when that call was sent once, no
    /// other copy of it is on its way, and its key is deleted in the background (it would
    /// expire anyway). A call sent more than once keeps its key until it expires, after the
    /// request's deadline: a copy still on its way finds the answer, or comes too late to
    /// run.
    pub(crate) fn forget(&self, request: Request, call: &ScriptCall) {
        if call.sent_once() {
            self.watchdog.discard_receipt(request.into_key());
        }
    }

    /// Whether `err` is the refusal of a copy of a request that reached the server after its
    /// deadline; if so, the estimate of the server's clock is read anew from it.
    pub(crate) fn refused_late(&self, err: &Error) -> bool {
        let Error::Redis(err) = err else {
            return false;
        };
        let Some(server_ms) = request::refused_late(err) else {
            return false;
        };
        self.server_time_was(server_ms);
        log::debug!("a request reached the server after its deadline: {err}");
        true
    }

    /// The server answered, just now, that its time was `server_ms` (refusing a copy that
    /// came after its deadline): the estimate of its clock is read anew from it.
    pub(crate) fn server_time_was(&self, server_ms: u64) {
        let now = Instant::now();
        self.clock.read(server_ms, now, now);
    }

    /// The deadline of an acquisition try sent now, on the server's clock (ms since the
    /// epoch): a copy of it that reaches the server later is refused. One send from now (a
    /// new connection and an answer, after which the caller gives up on it) and the margin
    /// of the clock's estimate.
    pub(crate) fn try_deadline_ms(&self) -> u64 {
        self.window(self.one_send).deadline_ms()
    }

    /// A little after the server's clock passes `deadline_ms`, by the local clock (as the
    /// estimate of the server's clock has it): when an undo sent then finds that no copy of
    /// what it undoes can come any more.
    pub(crate) fn past(&self, deadline_ms: u64) -> Instant {
        let left = deadline_ms.saturating_sub(self.clock.now_ms());
        Instant::now() + Duration::from_millis(left) + request::DEADLINE_MARGIN
    }

    /// The window of a release whose copies may be sent for `send_for` (through an outage,
    /// or by the cleanup thread until the lease would run out): one send more.
    pub(crate) fn release_window(&self, send_for: Duration) -> Window {
        self.window(send_for + self.one_send)
    }

    /// Sends a call that changes the primitive `name` and carries a request id (or is safe
    /// to send twice by itself), through an outage: sent again every
    /// [`RETRY_DURING_OUTAGE`](wait::RETRY_DURING_OUTAGE) until it is answered, for up to the
    /// outage grace. When no answer came, a call that may have run answers
    /// [`Error::Indeterminate`]; one that surely did not (every connection refused) answers
    /// its error.
    pub(crate) fn settle<R>(&self, name: &str, send: impl FnMut() -> Result<R>) -> Result<R> {
        self.settle_until(name, Instant::now() + self.outage_grace, send)
    }

    /// Like [`Client::settle`], sent again until `give_up_at` rather than for the outage
    /// grace (sent once at least).
    pub(crate) fn settle_until<R>(
        &self,
        name: &str,
        give_up_at: Instant,
        mut send: impl FnMut() -> Result<R>,
    ) -> Result<R> {
        let mut may_have_run = false;
        loop {
            let err = match send() {
                Err(err) if err.is_outage() => err,
                answer => return answer,
            };
            may_have_run |= err.may_have_run();
            let stopped = self.ensure_running().is_err();
            if stopped || Instant::now() + wait::RETRY_DURING_OUTAGE >= give_up_at {
                return Err(match may_have_run {
                    true => Error::Indeterminate {
                        name: name.to_owned(),
                        cause: Box::new(err),
                    },
                    false => err,
                });
            }
            log::debug!("{name:?}: sending the same request again after: {err}");
            std::thread::sleep(wait::RETRY_DURING_OUTAGE);
        }
    }

    /// Runs the call `call` makes for a new request on the primitive `name`: once, sent again
    /// with the same request through an outage ([`Client::settle`]); the request's key is
    /// forgotten once answered. `WRONGTYPE` is [`Error::WrongType`] of `name`.
    pub(crate) fn change<T: FromRedisValue>(
        &self,
        name: &str,
        call: impl Fn(&Request) -> ScriptCall,
    ) -> Result<T> {
        self.change_by(name, call, |call| self.run_script(call))
    }

    /// Like [`Client::change`], with the `WAIT` for replica acknowledgements behind the call
    /// when the manager asks for them ([`Client::run_acknowledged`]).
    pub(crate) fn change_acknowledged<T: FromRedisValue>(
        &self,
        name: &str,
        call: impl Fn(&Request) -> ScriptCall,
    ) -> Result<Acked<T>> {
        self.change_by(name, call, |call| self.run_acknowledged(call, |_| {}))
    }

    /// [`Client::change`], sending the call by `send`. A request refused for coming after
    /// its deadline, when no other copy of it may have run, is made again once with a new
    /// deadline (the estimate of the server's clock was off, and is read anew from the
    /// refusal); when another copy may have run, its outcome is unknown
    /// ([`Error::Indeterminate`]).
    fn change_by<R>(
        &self,
        name: &str,
        call: impl Fn(&Request) -> ScriptCall,
        send: impl Fn(&ScriptCall) -> Result<R>,
    ) -> Result<R> {
        let mut made_again = false;
        loop {
            let request = self.request(name);
            let call = call(&request);
            let mut may_have_run = false;
            let answer = self.settle(name, || {
                let answer = send(&call);
                if let Err(err) = &answer {
                    may_have_run |= err.may_have_run();
                }
                answer
            });
            match &answer {
                Ok(_) => self.forget(request, &call),
                Err(err) if self.refused_late(err) => {
                    if !may_have_run && !made_again {
                        made_again = true;
                        continue;
                    }
                    if may_have_run {
                        return Err(Error::Indeterminate {
                            name: name.to_owned(),
                            cause: Box::new(answer.err().expect("an error")),
                        });
                    }
                }
                Err(_) => {}
            }
            return answer.map_err(|err| err.about_keys_of(name));
        }
    }

    /// [`Client::release`] of a release that carries a request of its own, made by `call`
    /// from it: its answer is kept under the request's key, and a dropped guard's is sent by
    /// the cleanup thread for `send_for` (see [`Client::request_sent_for`]).
    pub(crate) fn release_by_request<T: FromRedisValue>(
        &self,
        name: &str,
        send_for: Duration,
        call: impl FnOnce(&Request) -> ScriptCall,
        how: Release,
    ) -> Result<Acked<T>> {
        let request = self.request_sent_for(name, send_for);
        let call = call(&request);
        let key = request.key().to_owned();
        self.release(name, call, None, key, how, || request.send_until())
    }

    /// Sends a release of the primitive `name` whose answer is kept under `key` (its unlock
    /// receipt, or its request's key), safe to send twice. Released by the owner
    /// ([`Release::Waited`]), it is sent again through an outage as a change is
    /// ([`Client::settle`]); by a dropping guard ([`Release::Dropped`]), which must not block,
    /// it is sent once and, unanswered, handed to the cleanup thread until `until` (when the
    /// lease would have run out anyway, or the outage grace for a semaphore guard's permits,
    /// which have none). Every send after the first is `again` when given:
    /// the same release with the same key, without what only its first send may do (hand
    /// the lock to a waiting thread, which may have stopped waiting by then); should the
    /// first run late, it finds the answer of a repeat that ran before it, and does nothing.
    /// The key is forgotten once answered.
    pub(crate) fn release<T: FromRedisValue>(
        &self,
        name: &str,
        call: ScriptCall,
        again: Option<ScriptCall>,
        key: String,
        how: Release,
        until: impl FnOnce() -> Instant,
    ) -> Result<Acked<T>> {
        let call = call.counting_sends();
        let again = again.map(|again| again.sharing_sends_of(&call));
        let mut sent = false;
        let mut send = || {
            let call = match (&again, sent) {
                (Some(again), true) => again,
                _ => &call,
            };
            sent = true;
            self.run_acknowledged(call, |_| {})
        };
        let answer = match how {
            Release::Waited => self.settle(name, send),
            Release::Dropped => send().inspect_err(|err| {
                if err.is_outage() {
                    self.cleanup.keep_trying(Undo {
                        what: format!("{name:?}: release by a dropped guard"),
                        call: again.unwrap_or_else(|| call.clone()),
                        until: until(),
                        then: None,
                        after: None,
                    });
                }
            }),
        };
        match &answer {
            // A release sent more than once keeps its receipt until it expires: a copy still
            // on its way finds it.
            Ok(_) if call.sent_once() => self.watchdog.discard_receipt(key),
            // (A permit's release, refused for coming after its deadline: it did nothing; the
            // clock is read anew, and the error stands.)
            Err(err) => _ = self.refused_late(err),
            Ok(_) => {}
        }
        answer.map_err(|err| err.about_keys_of(name))
    }

    /// Has `undo` (safe to send twice) sent until the server answers it, or until `until`:
    /// [`Undoing::Now`] sends it from the caller's thread first, [`Undoing::Later`] only
    /// from the cleanup thread, the caller going on at once.
    pub(crate) fn undo(
        &self,
        when: Undoing,
        what: impl FnOnce() -> String,
        call: ScriptCall,
        until: Instant,
    ) {
        let mut after = None;
        if when == Undoing::Now {
            match self.run_script::<redis::Value>(&call) {
                // A copy of what it undoes may still come: the cleanup thread sends it again
                // once none can.
                Ok(answer) => match request::undo_again(&answer) {
                    Some(left) => after = Some(Instant::now() + left),
                    None => return,
                },
                Err(err) if err.is_outage() => {}
                Err(err) => return log::warn!("{}: the undo was refused: {err}", what()),
            }
        }
        self.cleanup.keep_trying(Undo {
            what: what(),
            call,
            until,
            then: None,
            after,
        });
    }

    /// Has `call` (safe to send twice) sent by the cleanup thread until the server answers it,
    /// or until `until`, and its answer handed to `then` there.
    pub(crate) fn resend_then(
        &self,
        what: String,
        call: ScriptCall,
        until: Instant,
        then: impl FnOnce(&redis::Value) + Send + 'static,
    ) {
        self.cleanup.keep_trying(Undo {
            what,
            call,
            until,
            then: Some(Box::new(then)),
            after: None,
        });
    }

    /// The lease of watched locks.
    pub(crate) fn watchdog_timeout(&self) -> Duration {
        self.watchdog.timeout()
    }

    /// The lease of watched locks in whole milliseconds, as scripts take it.
    pub(crate) fn watchdog_timeout_ms(&self) -> u64 {
        self.watchdog.timeout_ms()
    }

    /// A release request id unique to this client: the client id is random, the counter
    /// never repeats. (Cheaper than a fresh random UUID per release.)
    pub(crate) fn next_request_id(&self) -> String {
        let number = self.next_request.fetch_add(1, Ordering::Relaxed);
        format!("{}:{number}", self.id)
    }

    /// A holder id for a new acquisition chain: `<client-id>:<chain-number>`.
    pub(crate) fn new_holder_id(&self) -> String {
        names::new_holder_id(&self.id)
    }

    /// [`Error::ShutDown`] once the client is shut down.
    pub(crate) fn ensure_running(&self) -> Result<()> {
        if self.shut_down.load(Ordering::Acquire) {
            Err(Error::ShutDown)
        } else {
            Ok(())
        }
    }

    /// Stops the watchdog and the pub/sub listener and joins their threads (once).
    pub(crate) fn shutdown(&self) {
        if !self.shut_down.swap(true, Ordering::AcqRel) {
            if let Some(watcher) = &self.switch_watcher {
                watcher.stop();
            }
            self.watchdog.stop();
            self.pubsub.stop();
            self.cleanup.stop();
            if let Some(recount) = &self.recount {
                recount.stop();
            }
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.shutdown();
    }
}
