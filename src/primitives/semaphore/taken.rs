//! [`SemaphoreGuard`]: permits of a [`Semaphore`] taken by a guard form, given back when
//! dropped.

use super::Semaphore;
use crate::client::Release;
use crate::error::Result;

/// Permits of a [`Semaphore`], given back when the guard is dropped: on `?`, on a panic,
/// at the end of a scope. Taken with [`Semaphore::acquire_guarded`] and its `try_` forms.
///
/// Counted permits have no owner and no lease, so the guard is `Send` (another thread may
/// give them back), tells nothing of being lost, and is not renewed: it only remembers to
/// give back what it took. [`release`](SemaphoreGuard::release) gives them back and says
/// how it went, where `Drop` can only log a failure; [`forget`](SemaphoreGuard::forget)
/// keeps them taken (to be given back by [`Semaphore::release`], from anywhere).
///
/// A drop never blocks for an outage: its release is sent once, and, unanswered, sent again
/// by the manager's cleanup thread (with the same request id, so that it counts once) until
/// Redis answers, for up to the [`outage_grace`](crate::LockManagerBuilder::outage_grace).
///
/// ```
/// # fn main() -> redlease::Result<()> {
/// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
/// # let manager = redlease::LockManager::builder(redis.url()).build()?;
/// let slots = manager.semaphore("render:slots");
/// slots.try_set_permits(4)?;
/// fn render(slots: &redlease::Semaphore) -> redlease::Result<()> {
///     let _taken = slots.acquire_guarded(3)?;
///     // ... an early return with `?`, or a panic, gives the permits back too ...
///     Ok(())
/// }
/// render(&slots)?;
/// assert_eq!(slots.available_permits()?, 4);
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard gives the permits back at once"]
pub struct SemaphoreGuard {
    semaphore: Semaphore,
    permits: u32,
    /// Whether the permits are given back already, or kept on purpose.
    done: bool,
}

impl SemaphoreGuard {
    pub(super) fn new(semaphore: &Semaphore, permits: u32) -> Self {
        SemaphoreGuard {
            semaphore: semaphore.clone(),
            permits,
            done: false,
        }
    }

    /// The semaphore the permits belong to.
    pub fn semaphore(&self) -> &Semaphore {
        &self.semaphore
    }

    /// How many permits the guard holds.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Gives the permits back now and wakes the waiters, as [`Semaphore::release`] does, with
    /// its errors: [`Indeterminate`](crate::Error::Indeterminate) when Redis did not answer
    /// within the outage grace (see the crate's "On a bad day").
    pub fn release(mut self) -> Result<()> {
        self.done = true;
        self.semaphore.give_back(self.permits, Release::Waited)
    }

    /// Keeps the permits taken and answers how many: nothing gives them back but a
    /// [`Semaphore::release`].
    pub fn forget(mut self) -> u32 {
        self.done = true;
        self.permits
    }
}

impl Drop for SemaphoreGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Err(err) = self.semaphore.give_back(self.permits, Release::Dropped) {
            log::warn!(
                "semaphore {:?}: a dropped guard's {} permits: {err}",
                self.semaphore.name(),
                self.permits
            );
        }
    }
}

impl std::fmt::Debug for SemaphoreGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemaphoreGuard")
            .field("semaphore", &self.semaphore.name())
            .field("permits", &self.permits)
            .finish()
    }
}
