//! The wait loop every blocking acquisition runs: try, subscribe, try again, sleep until a
//! release message or the hint of the last try, and so on until a deadline.
//!
//! A primitive gives [`wait_until`] its "try once" (which answers an [`Attempt`]), the way to
//! subscribe to the channels its releases are announced on, and a deadline. The loop
//! subscribes after the first failed try and tries again before it sleeps, so a release
//! between the two is never missed; it sleeps until a wake on any channel, the hint of the
//! last try (the holder's remaining lease, or for a polling waiter the next pause of its
//! [`back_off::BackOff`]), or the deadline; while a subscription is not live (the pub/sub
//! connection is down, or the manager has none) it polls. In cluster mode each subscription
//! follows its channel's slot before each sleep; one that moved (a failover, a migration)
//! makes the loop try again at once, as a release may have gone by while it was elsewhere. A
//! wake it took and did not use (the next try failed with an error) is passed on to another
//! waiter of the same lock. A cancel token, when
//! the handle has one, is checked before every try and wakes every sleep, and ends the wait
//! with [`Error::Cancelled`]. A subscription Redis refuses (the ACL user lacks the release
//! channel) ends the wait with its error, as a failed try does. A try that fails in an outage
//! (Redis unreachable, slow, loading or failing over) is repeated every
//! [`RETRY_DURING_OUTAGE`] until the wait's deadline, or without one for up to the outage
//! grace, before the error ends the wait; the same for every primitive on every deployment.
//! So is a grant that too few replicas (or disks) acknowledged, which the primitive gave
//! back ([`Error::NotReplicated`], [`Error::NotPersisted`]): a replica that lags catches up.
//! The other transient errors end the wait at once: a group lock without quorum, grants that
//! keep arriving after their lease ran out ([`Attempt::TooLate`]).
//! A wait may carry a [`Nudge`]: something it does once after it has waited a while (a
//! waiter that asks the holders to let go), whose time also ends a sleep.
//! It does no I/O of its own beyond the subscriptions it is handed. Its promises with the
//! pub/sub hub's wake rules are tested under the orders of its threads' steps (`schedules`,
//! run by `shuttle`).

pub(crate) mod back_off;
pub(crate) mod cancel;
pub(crate) mod line;
#[cfg(test)]
mod schedules;

use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::client::pubsub::Subscription;
use crate::client::stats::WaitRecorder;
use crate::client::wait::cancel::CancelToken;
use crate::error::{Error, Result};

/// While a release channel is not subscribed (the pub/sub connection is down), a waiter
/// tries at least this often instead of trusting a wake-up that may never come.
const POLL_WITHOUT_SUBSCRIPTION: Duration = Duration::from_millis(100);

/// How often a wait tries again while Redis fails in a way a failover may resolve.
pub(crate) const RETRY_DURING_OUTAGE: Duration = Duration::from_millis(100);

/// What one try found.
pub(crate) enum Attempt<T> {
    /// Taken: the loop ends with this.
    Taken(T),
    /// Held by others: wait for a release message, at most `hint` (the lease they have
    /// left, when known).
    Held { hint: Option<Duration> },
    /// Contenders collided (a split vote): wait `delay` without listening for releases,
    /// which are mostly the contenders' own undoing, then try again.
    BackOff { delay: Duration },
    /// Nothing to wait for: try again at once.
    Again,
    /// Granted, but so late that the lease had run out by the local clock (the grant was
    /// given back): try again at once, unless [`LATE_GRANTS_IN_A_ROW`] grants in a row came
    /// this late: the lease is too short for the link, and the wait ends with this error.
    TooLate(Error),
}

/// How many grants in a row may come after their lease before a wait gives up.
pub(crate) const LATE_GRANTS_IN_A_ROW: u32 = 3;

/// How the loop waits before the next try.
enum Pause {
    Listen { hint: Option<Duration> },
    BackOff { delay: Duration },
}

/// Something a wait does once, after it has waited `after` (asking the holders to let go):
/// `ask` answers whether it was done, and is tried again after [`RETRY_DURING_OUTAGE`] when
/// not.
pub(crate) struct Nudge<'a> {
    pub(crate) after: Duration,
    pub(crate) ask: &'a dyn Fn() -> bool,
}

/// The loop's settings.
pub(crate) struct WaitFor<'a, S, A, R> {
    /// The name waited for, for the manager's list of the names waited for longest (`None`:
    /// a wait that is no contention, such as an observer's for the next change).
    pub(crate) name: Option<&'a str>,
    /// When to give up (`None`: never).
    pub(crate) deadline: Option<Instant>,
    /// How long to sleep when a try gave no hint.
    pub(crate) default_hint: Duration,
    /// Subscribes to the channels on which releases are announced.
    pub(crate) subscribe: S,
    /// Tries once.
    pub(crate) attempt: A,
    /// Fails once the client is shut down.
    pub(crate) ensure_running: R,
    /// Ends the wait when cancelled.
    pub(crate) cancel: Option<&'a CancelToken>,
    /// Without a deadline, how long outage errors in a row are tried through before the wait
    /// fails with the last one (with one, they are tried through until it); zero: none are.
    pub(crate) outage_grace: Duration,
    /// Counts the waiting threads, the acquisitions and their wait times.
    pub(crate) recorder: &'a WaitRecorder,
    /// Done once the wait has lasted this long, if it is still waiting.
    pub(crate) nudge: Option<Nudge<'a>>,
    /// Subscribes before the first try, rather than after it: for a wait that will most
    /// likely find the lock held (other threads of the process wait for it already), whose
    /// first try would only tell it so.
    pub(crate) subscribe_first: bool,
}

/// Runs the loop; `Ok(None)` when the deadline passed.
pub(crate) fn wait_until<T, S, A, R>(settings: WaitFor<'_, S, A, R>) -> Result<Option<T>>
where
    S: FnOnce() -> Result<Vec<Subscription>>,
    A: FnMut() -> Result<Attempt<T>>,
    R: Fn() -> Result<()>,
{
    let WaitFor {
        name,
        deadline,
        default_hint,
        subscribe,
        mut attempt,
        ensure_running,
        cancel,
        outage_grace,
        recorder,
        nudge,
        subscribe_first,
    } = settings;
    let started = Instant::now();
    // Set once the thread first sleeps: a try that succeeds at once never waited.
    let mut waiting = None;
    let mut subscribe = Some(subscribe);
    let nudge = nudge.map(|nudge| (started + nudge.after, nudge.ask));
    let mut state = Waiting::new(deadline, default_hint, outage_grace, cancel, nudge);
    if subscribe_first {
        state.subscribe(&mut subscribe)?;
    }
    loop {
        if cancel.is_some_and(CancelToken::is_cancelled) {
            return state.fail(Error::Cancelled);
        }
        let pause = match state.judge(attempt()) {
            Next::Taken(taken) => {
                recorder.acquired(started.elapsed());
                return Ok(Some(taken));
            }
            Next::Again if state.is_past_deadline(Instant::now()) => return Ok(None),
            Next::Again => {
                ensure_running()?;
                continue;
            }
            Next::Pause(pause) => pause,
            Next::Fail(err) => return state.fail(err),
        };
        let now = Instant::now();
        if state.is_past_deadline(now) {
            return Ok(None);
        }
        if state.must_look_again(&mut subscribe)? {
            continue;
        }
        waiting.get_or_insert_with(|| recorder.start_waiting(name, started));
        state.nudge_if_due(now);
        state.pause(pause, now);
        ensure_running()?;
    }
}

/// What the loop does after a try.
enum Next<T> {
    /// Ends the wait with this.
    Taken(T),
    /// Tries again at once.
    Again,
    /// Waits, then tries again.
    Pause(Pause),
    /// Ends the wait with this error.
    Fail(Error),
}

/// The loop's state between tries.
struct Waiting<'a> {
    deadline: Option<Instant>,
    default_hint: Duration,
    outage_grace: Duration,
    cancel: Option<&'a Receiver<()>>,
    subscriptions: Vec<Subscription>,
    /// The subscriptions whose wake the last sleep took.
    woken: Vec<usize>,
    /// Since when the tries fail with transient errors, if the last one did.
    outage_since: Option<Instant>,
    /// The nudge still to do, and when: the next sleep ends then at the latest.
    nudge: Option<(Instant, &'a dyn Fn() -> bool)>,
    /// How many tries in a row were granted after their lease ran out.
    late_grants: u32,
}

impl<'a> Waiting<'a> {
    /// The state before the first try: nothing subscribed, no outage, no late grant.
    fn new(
        deadline: Option<Instant>,
        default_hint: Duration,
        outage_grace: Duration,
        cancel: Option<&'a CancelToken>,
        nudge: Option<(Instant, &'a dyn Fn() -> bool)>,
    ) -> Self {
        Waiting {
            deadline,
            default_hint,
            outage_grace,
            cancel: cancel.map(CancelToken::receiver),
            subscriptions: Vec::new(),
            woken: Vec::new(),
            outage_since: None,
            nudge,
            late_grants: 0,
        }
    }

    fn is_past_deadline(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|deadline| now >= deadline)
    }

    /// Subscribes, unless done already (`subscribe` taken).
    fn subscribe<S>(&mut self, subscribe: &mut Option<S>) -> Result<()>
    where
        S: FnOnce() -> Result<Vec<Subscription>>,
    {
        if let Some(subscribe) = subscribe.take() {
            self.subscriptions = subscribe()?;
        }
        Ok(())
    }

    /// Before the loop sleeps: subscribes (on its first pause), or clears the wakes of the
    /// last sleep and has each subscription follow its channel's slot (cluster mode).
    /// Answers whether a release may have gone by unheard meanwhile, so that the loop must
    /// look again before sleeping.
    fn must_look_again<S>(&mut self, subscribe: &mut Option<S>) -> Result<bool>
    where
        S: FnOnce() -> Result<Vec<Subscription>>,
    {
        if subscribe.is_some() {
            self.subscribe(subscribe)?;
            return Ok(true);
        }
        self.woken.clear();
        follow_slots(&mut self.subscriptions)
    }

    /// What a try's outcome means: an outage error, or a grant too few replicas (or disks)
    /// acknowledged (given back), is ridden out (until the deadline, or for the grace without
    /// one), any other error ends the wait.
    fn judge<T>(&mut self, tried: Result<Attempt<T>>) -> Next<T> {
        if tried.is_ok() {
            self.outage_since = None;
        }
        match &tried {
            Ok(Attempt::TooLate(_)) => self.late_grants += 1,
            _ => self.late_grants = 0,
        }
        match tried {
            Ok(Attempt::Taken(taken)) => Next::Taken(taken),
            Ok(Attempt::Again) => Next::Again,
            Ok(Attempt::TooLate(err)) if self.late_grants >= LATE_GRANTS_IN_A_ROW => {
                Next::Fail(err)
            }
            Ok(Attempt::TooLate(_)) => Next::Again,
            Ok(Attempt::Held { hint }) => Next::Pause(Pause::Listen { hint }),
            Ok(Attempt::BackOff { delay }) => Next::Pause(Pause::BackOff { delay }),
            Err(err)
                if (err.is_outage() || err.is_ack_shortfall())
                    && rides_out(
                        self.deadline,
                        *self.outage_since.get_or_insert_with(Instant::now),
                        self.outage_grace,
                    ) =>
            {
                log::debug!("trying again through an outage: {err}");
                Next::Pause(Pause::BackOff {
                    delay: RETRY_DURING_OUTAGE,
                })
            }
            Err(err) => Next::Fail(err),
        }
    }

    /// Ends the wait with `err`, passing on the wakes the last sleep took and did not use.
    fn fail<T>(&self, err: Error) -> Result<T> {
        pass_wakes_on(&self.subscriptions, &self.woken);
        Err(err)
    }

    /// Does the nudge if it is due by `now`: once done, it is gone; when it could not be
    /// done, it is due again after [`RETRY_DURING_OUTAGE`].
    fn nudge_if_due(&mut self, now: Instant) {
        if let Some((at, ask)) = self.nudge {
            self.nudge = match now < at {
                true => Some((at, ask)),
                false if ask() => None,
                false => Some((now + RETRY_DURING_OUTAGE, ask)),
            };
        }
    }

    /// Sleeps as `pause` says, at most until the deadline or a nudge due (`now` is when the
    /// pause began).
    fn pause(&mut self, pause: Pause, now: Instant) {
        let nudge_at = self.nudge.map(|(at, _)| at);
        let wake_by = match (self.deadline, nudge_at) {
            (Some(deadline), Some(nudge)) => Some(deadline.min(nudge)),
            (one, other) => one.or(other),
        };
        let until_deadline = |sleep: Duration| match wake_by {
            Some(wake_by) => sleep.min(wake_by.saturating_duration_since(now)),
            None => sleep,
        };
        match pause {
            Pause::BackOff { delay } => {
                sleep(until_deadline(delay), self.cancel);
                // A back-off tries again after its delay whatever came: its wakes are spent.
                for subscription in &self.subscriptions {
                    while subscription.woken().try_recv().is_ok() {}
                }
            }
            Pause::Listen { hint } => {
                let mut sleep = hint.unwrap_or(self.default_hint);
                if self
                    .subscriptions
                    .iter()
                    .any(|subscription| !subscription.is_live())
                {
                    sleep = sleep.min(POLL_WITHOUT_SUBSCRIPTION);
                }
                self.woken = wait_for_any(
                    &self.subscriptions,
                    self.cancel,
                    until_deadline(sleep).max(Duration::from_millis(1)),
                );
            }
        }
    }
}

/// Whether a wait tries again after an outage error (one of a run since `since`): until its
/// deadline, or without one for up to `grace`.
fn rides_out(deadline: Option<Instant>, since: Instant, grace: Duration) -> bool {
    if grace.is_zero() {
        return false;
    }
    let next_try = Instant::now() + RETRY_DURING_OUTAGE;
    match deadline {
        Some(deadline) => next_try < deadline,
        None => next_try < since + grace,
    }
}

/// Runs `acquire`, a wait without deadline, until it takes the lock or fails: such a wait
/// answers no "ran out of time", so there is no error to make up for one.
pub(crate) fn without_deadline<T>(mut acquire: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    loop {
        if let Some(taken) = acquire()? {
            return Ok(taken);
        }
    }
}

/// The deadline of a wait of `wait` from now, for the call `call` (named in the error).
///
/// # Errors
/// [`Error::InvalidArgument`] when the deadline lies beyond what the clock can count.
pub(crate) fn deadline_after(wait: Duration, call: &str) -> Result<Instant> {
    Instant::now().checked_add(wait).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{call}: a wait of {wait:?} is too long; wait without a deadline instead"
        ))
    })
}

/// Asks every subscription to follow its channel's slot (cluster mode; nothing on a single
/// server); answers whether any moved and is live.
fn follow_slots(subscriptions: &mut [Subscription]) -> Result<bool> {
    let mut moved = false;
    for subscription in subscriptions {
        moved |= subscription.follow()?;
    }
    Ok(moved)
}

/// Gives the wakes a wait took and will not use back to their subscriptions, for other
/// waiters of the same lock.
fn pass_wakes_on(subscriptions: &[Subscription], woken: &[usize]) {
    for &index in woken {
        subscriptions[index].pass_wake_on();
    }
}

/// Sleeps `timeout`, or less when `cancel` turns ready.
fn sleep(timeout: Duration, cancel: Option<&Receiver<()>>) {
    match cancel {
        Some(cancel) => {
            let _ = cancel.recv_timeout(timeout);
        }
        None => std::thread::sleep(timeout),
    }
}

/// Blocks until any of `subscriptions` is woken, `cancel` turns ready, or `timeout` passes;
/// takes the wakes that are there then and answers whose they were.
fn wait_for_any(
    subscriptions: &[Subscription],
    cancel: Option<&Receiver<()>>,
    timeout: Duration,
) -> Vec<usize> {
    match (subscriptions, cancel) {
        ([], cancel) => sleep(timeout, cancel),
        ([only], None) => {
            return if only.wait(timeout) {
                vec![0]
            } else {
                Vec::new()
            };
        }
        (several, cancel) => {
            let woken: Vec<_> = several.iter().map(Subscription::woken).collect();
            crate::client::sync::wait_ready(&woken, cancel, timeout);
        }
    }
    subscriptions
        .iter()
        .enumerate()
        .filter(|(_, subscription)| subscription.woken().try_recv().is_ok())
        .map(|(index, _)| index)
        .collect()
}
