//! The counting semaphore: the [`Semaphore`] handle.
//!
//! A semaphore is a number of permits under its name in Redis (Redisson's `RSemaphore`
//! layout), taken and given back with the protocol's semaphore scripts. Permits have no owner
//! and no lease: a take is counted, or guarded by a [`SemaphoreGuard`] (in `taken`) that only
//! remembers to give them back. A waiter sleeps in the shared wait loop,
//! woken by every message on the semaphore's channel (each one may let several waiters
//! through); without a message it looks again only once per watchdog interval. The handle talks to Redis only
//! through its [`Client`]: the pool and the pub/sub service. The permit-expirable semaphore
//! (`crate::primitives::semaphore::permit`) runs its calls and subscribes through the same helpers.
//!
//! With replica acknowledgements on, a take that too few replicas acknowledged gives its
//! permits back and fails ([`Error::NotReplicated`]); a release stands, and is counted.

pub(crate) mod permit;
mod taken;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Connection, FromRedisValue};

use crate::client::call::replication::Acked;
use crate::client::pubsub::Subscription;
use crate::client::wait::cancel::CancelToken;
use crate::client::wait::{self, Attempt, WaitFor};
use crate::client::{Client, Release, Undoing};
use crate::error::{Error, Result};
use crate::protocol::semaphore::{self as protocol, Changed, SemaphoreKeys, MAX_COUNT};
use crate::protocol::{Request, ScriptCall};
pub use taken::SemaphoreGuard;

/// A handle to one named counting semaphore, shared by every process that uses the name.
/// Cheap to clone; `Send` and `Sync`.
///
/// Permits are plain counts, as in Redisson's `RSemaphore`: any thread or process may release
/// permits it never took. They are taken in two forms: counted
/// ([`acquire`](Semaphore::acquire) and its `try_` forms, given back by
/// [`release`](Semaphore::release), from anywhere), or with a guard
/// ([`acquire_guarded`](Semaphore::acquire_guarded) and its `try_` forms: a
/// [`SemaphoreGuard`] that gives them back when dropped, on `?` or a panic too). A holder
/// that dies keeps its permits forever; when that matters, use a
/// [`PermitSemaphore`](crate::PermitSemaphore), whose permits have a lease.
///
/// The semaphore does not exist until its permits are set: [`try_set_permits`](Semaphore::try_set_permits)
/// sets them once, [`add_permits`](Semaphore::add_permits) and [`release`](Semaphore::release)
/// add to them (creating it). A semaphore that does not exist has no permits available.
///
/// ```
/// # fn main() -> redlease::Result<()> {
/// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
/// # let manager = redlease::LockManager::builder(redis.url()).build()?;
/// use std::time::Duration;
///
/// let connections = manager.semaphore("db:connections");
/// connections.try_set_permits(2)?;
/// connections.acquire(2)?;
/// assert!(!connections.try_acquire_for(1, Duration::from_millis(50))?);
/// connections.release(2)?;
/// assert_eq!(connections.available_permits()?, 2);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    client: Arc<Client>,
    keys: Arc<SemaphoreKeys>,
    /// Ends this handle's waits when cancelled.
    cancel: Option<CancelToken>,
}

impl Semaphore {
    pub(crate) fn new(client: Arc<Client>, name: &str) -> Self {
        Semaphore {
            client,
            keys: Arc::new(SemaphoreKeys::new(name)),
            cancel: None,
        }
    }

    /// This handle, with its waits (and those of its clones) ended by `token`: once it is
    /// cancelled, they return [`Error::Cancelled`] promptly, leaving no subscription behind.
    pub fn cancellable_by(&self, token: &CancelToken) -> Semaphore {
        Semaphore {
            cancel: Some(token.clone()),
            ..self.clone()
        }
    }

    /// The semaphore name: the Redis key of its count.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// Sets the number of permits if the semaphore does not exist yet, and wakes its waiters;
    /// answers whether it was set (`false`: it existed, and nothing changed).
    ///
    /// # Errors
    /// [`Error::WrongType`] when the name holds a key of another kind.
    pub fn try_set_permits(&self, permits: u32) -> Result<bool> {
        let keys = self.keys()?;
        let set: i64 = self.client.change(&keys.name, |request| {
            protocol::try_set(keys, permits, request)
        })?;
        Ok(set == 1)
    }

    /// Adds `change` permits (a negative change takes them away) and answers how many are
    /// available now. A rise wakes the waiters.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], and nothing changes, for a zero change or one that would
    /// leave fewer than no permits available (or more than 2^53 - 1).
    pub fn add_permits(&self, change: i64) -> Result<u64> {
        self.change(protocol::add, change)
    }

    /// Takes `permits`, waiting as long as it takes for that many to be available at once.
    ///
    /// Fails only for zero permits, when Redis cannot be reached or answers an error, or the
    /// manager is shut down; with replica acknowledgements (by default, on a master with replicas
    /// in sync), also when the permits were taken but too few replicas acknowledged it in time
    /// ([`Error::NotReplicated`]: they were given back). An acquisition whose answer does not come
    /// may have taken the permits nevertheless (as in Redisson): there is no owner to take them
    /// back from.
    pub fn acquire(&self, permits: u32) -> Result<()> {
        wait::without_deadline(|| self.acquire_until(permits, None))
    }

    /// Takes `permits` if that many are available now, without waiting.
    pub fn try_acquire(&self, permits: u32) -> Result<bool> {
        self.try_acquire_for(permits, Duration::ZERO)
    }

    /// Takes `permits`, waiting at most `wait` for that many to be available at once;
    /// `false` when the wait ran out. A zero `wait` tries once.
    pub fn try_acquire_for(&self, permits: u32, wait: Duration) -> Result<bool> {
        let deadline = wait::deadline_after(wait, "Semaphore::try_acquire_for")?;
        Ok(self.acquire_until(permits, Some(deadline))?.is_some())
    }

    /// Takes `permits`, waiting until `deadline` at most; `false` when it passed. A deadline
    /// in the past tries once.
    pub fn try_acquire_until(&self, permits: u32, deadline: Instant) -> Result<bool> {
        Ok(self.acquire_until(permits, Some(deadline))?.is_some())
    }

    /// Takes `permits` as [`acquire`](Semaphore::acquire) does, with a guard that gives them
    /// back when dropped.
    pub fn acquire_guarded(&self, permits: u32) -> Result<SemaphoreGuard> {
        self.acquire(permits)?;
        Ok(SemaphoreGuard::new(self, permits))
    }

    /// Takes `permits` if that many are available now, without waiting, with a guard that
    /// gives them back when dropped.
    pub fn try_acquire_guarded(&self, permits: u32) -> Result<Option<SemaphoreGuard>> {
        self.try_acquire_guarded_for(permits, Duration::ZERO)
    }

    /// Takes `permits`, waiting at most `wait`, with a guard that gives them back when
    /// dropped; `None` when the wait ran out.
    pub fn try_acquire_guarded_for(
        &self,
        permits: u32,
        wait: Duration,
    ) -> Result<Option<SemaphoreGuard>> {
        let taken = self.try_acquire_for(permits, wait)?;
        Ok(taken.then(|| SemaphoreGuard::new(self, permits)))
    }

    /// Takes `permits`, waiting until `deadline` at most, with a guard that gives them back
    /// when dropped; `None` when it passed.
    pub fn try_acquire_guarded_until(
        &self,
        permits: u32,
        deadline: Instant,
    ) -> Result<Option<SemaphoreGuard>> {
        let taken = self.try_acquire_until(permits, deadline)?;
        Ok(taken.then(|| SemaphoreGuard::new(self, permits)))
    }

    /// Gives `permits` back (or adds them: they need not have been taken) and wakes the
    /// waiters. With replica acknowledgements (by default, on a master with replicas in
    /// sync), a release that too few replicas acknowledged stands, and is counted in
    /// [`Stats::releases_unreplicated`](crate::Stats::releases_unreplicated).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for zero permits, or when the count would pass 2^53 - 1;
    /// [`Error::Indeterminate`] when Redis did not answer within the outage grace and the
    /// permits may have been given back (a repeat of the same call is not sent twice, but a
    /// new call is a new release).
    pub fn release(&self, permits: u32) -> Result<()> {
        self.give_back(permits, Release::Waited)
    }

    /// Gives `permits` back: by a caller that waits for the outcome ([`Release::Waited`]:
    /// sent again through an outage), or by a dropped guard ([`Release::Dropped`]: sent once,
    /// and unanswered, sent again by the cleanup thread for up to the outage grace, with the
    /// same request id).
    fn give_back(&self, permits: u32, how: Release) -> Result<()> {
        checked_permits(permits)?;
        let change = i64::from(permits);
        let keys = self.keys()?;
        let acked = match how {
            Release::Waited => self
                .client
                .change_acknowledged::<Changed>(&keys.name, |request| {
                    protocol::add(keys, change, request)
                })?,
            Release::Dropped => {
                let send_for = self.client.outage_grace();
                let release = |request: &_| protocol::add(keys, change, request);
                self.client
                    .release_by_request::<Changed>(&keys.name, send_for, release, how)?
            }
        };
        self.count_after(acked.answer, change)?;
        if let Some(why) = acked.unreplicated {
            self.client.release_unreplicated(self.name(), &why);
        }
        Ok(())
    }

    /// How many permits are available now (a count another client drove below zero reads
    /// as 0).
    pub fn available_permits(&self) -> Result<u64> {
        let count: i64 = self.run(&protocol::available(self.keys()?))?;
        Ok(count.max(0) as u64)
    }

    /// Takes every available permit and answers how many that was.
    pub fn drain_permits(&self) -> Result<u64> {
        let keys = self.keys()?;
        let drained: i64 = self
            .client
            .change(&keys.name, |request| protocol::drain(keys, request))?;
        Ok(drained.max(0) as u64)
    }

    pub(crate) fn keys(&self) -> Result<&SemaphoreKeys> {
        self.keys.checked()
    }

    /// The keys, for callers that checked them once already.
    pub(crate) fn keys_unchecked(&self) -> &SemaphoreKeys {
        &self.keys
    }

    /// The client the semaphore talks to Redis through.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Runs one protocol call, telling a key of another kind by [`Error::WrongType`].
    pub(crate) fn run<T: FromRedisValue>(&self, call: &ScriptCall) -> Result<T> {
        self.client
            .run_script(call)
            .map_err(|err| err.about_keys_of(&self.keys.name))
    }

    /// Runs an acquisition's or a release's call, with the `WAIT` for replica
    /// acknowledgements behind it when the manager asks for them (see
    /// `Client::run_acknowledged`), telling a key of another kind by [`Error::WrongType`].
    pub(crate) fn run_acknowledged<T: FromRedisValue>(
        &self,
        call: &ScriptCall,
        on_timeout: impl FnMut(&mut Connection),
    ) -> Result<Acked<T>> {
        self.client
            .run_acknowledged(call, on_timeout)
            .map_err(|err| err.about_keys_of(&self.keys.name))
    }

    /// Changes the count by `change` with the `call` made by `script`; answers the count.
    pub(crate) fn change(
        &self,
        script: fn(&SemaphoreKeys, i64, &Request) -> ScriptCall,
        change: i64,
    ) -> Result<u64> {
        let keys = self.keys()?;
        if change == 0 || change.unsigned_abs() > MAX_COUNT {
            return Err(Error::InvalidArgument(format!(
                "a change of {change} permits is out of range (1 ..= {MAX_COUNT} either way)"
            )));
        }
        let changed = self
            .client
            .change(&keys.name, |request| script(keys, change, request))?;
        self.count_after(changed, change)
    }

    /// The count after a change by `change` answered `changed`, or why it was refused.
    fn count_after(&self, changed: Changed, change: i64) -> Result<u64> {
        match changed {
            Changed::Done { count } => Ok(count.max(0) as u64),
            Changed::OutOfRange { count } => Err(Error::InvalidArgument(format!(
                "semaphore {:?} has {count} permits available: a change of {change} would \
                 take it out of range (0 ..= {MAX_COUNT})",
                self.keys.name
            ))),
        }
    }

    /// Waits in the shared wait loop until `attempt` takes what it is after or `deadline`
    /// passes, woken by every message on the semaphore's channel. Without a message, it looks
    /// again after the hint of the last attempt, or once per watchdog interval (a count
    /// changed by hand announces nothing). `cancel` ends the wait.
    pub(crate) fn wait_until<T>(
        &self,
        deadline: Option<Instant>,
        cancel: Option<&CancelToken>,
        attempt: impl FnMut() -> Result<Attempt<T>>,
    ) -> Result<Option<T>> {
        self.client.ensure_running()?;
        let keys = self.keys()?;
        wait::wait_until(WaitFor {
            name: Some(self.name()),
            deadline,
            default_hint: self.client.watchdog_timeout() / 3,
            subscribe: || -> Result<Vec<Subscription>> {
                let pubsub = self.client.pubsub();
                Ok(vec![pubsub.subscribe_to_every_message(&keys.channel)?])
            },
            attempt,
            ensure_running: || self.client.ensure_running(),
            cancel,
            outage_grace: self.client.outage_grace(),
            recorder: self.client.wait_recorder(),
            nudge: None,
            subscribe_first: false,
        })
    }

    fn acquire_until(&self, permits: u32, deadline: Option<Instant>) -> Result<Option<()>> {
        checked_permits(permits)?;
        let keys = self.keys()?;
        self.wait_until(deadline, self.cancel.as_ref(), || {
            let request = self
                .client
                .take_request(&keys.name, &self.client.next_request_id());
            let call = protocol::take(keys, permits, &request);
            let taken = self.run_acknowledged::<i64>(&call, |connection| {
                // The take may still run: queue its undo right behind it, on the same
                // connection, so it runs after it and before any later request of ours.
                let undo = protocol::undo_take(keys, permits, &request);
                let undo = self.client.in_dialect(undo).as_eval();
                let _ = connection.send_packed_command(&undo.get_packed_command());
            });
            match taken {
                Ok(Acked {
                    answer,
                    unreplicated: None,
                    ..
                }) => {
                    self.client.forget(request, &call);
                    // No lease runs out here: only a release (or the fallback look) helps.
                    Ok(match answer {
                        1 => Attempt::Taken(()),
                        _ => Attempt::Held { hint: None },
                    })
                }
                Ok(Acked {
                    answer,
                    unreplicated: Some(why),
                    ..
                }) => {
                    if answer != 1 {
                        self.client.forget(request, &call);
                        return Ok(Attempt::Held { hint: None });
                    }
                    // A failover now could erase the take: it must not count.
                    self.undo_take(permits, request, &why, Undoing::Now);
                    Err(why.into_error(self.name()))
                }
                // Refused for coming late: it took nothing, and the clock is read anew.
                Err(err) if self.client.refused_late(&err) => Ok(Attempt::Again),
                Err(err) => {
                    if err.may_have_run() {
                        self.undo_take(permits, request, &err, Undoing::Later);
                    }
                    Err(err)
                }
            }
        })
    }

    /// Gives back what the take `request` of `permits` took, if it ran, after `cause`; the
    /// cleanup thread sends the undo again until the server answers (the permits have no
    /// lease: nothing else would give them back).
    fn undo_take(
        &self,
        permits: u32,
        request: Request,
        cause: &dyn std::fmt::Display,
        when: Undoing,
    ) {
        let keys = self.keys_unchecked();
        self.client.undo(
            when,
            || format!("semaphore {:?}: take of {permits} after {cause}", keys.name),
            protocol::undo_take(keys, permits, &request),
            request.undo_until(),
        );
    }
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.keys.name)
            .finish()
    }
}

/// [`Error::InvalidArgument`] for zero permits: taking or giving back none is surely a
/// mistake.
fn checked_permits(permits: u32) -> Result<()> {
    if permits == 0 {
        return Err(Error::InvalidArgument(
            "the number of permits must not be zero".into(),
        ));
    }
    Ok(())
}
