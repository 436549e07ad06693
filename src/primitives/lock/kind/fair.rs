//! The fair lock's rules: each waiter keeps a place in the queue and is woken, or granted
//! the lock, on a channel of its own.

use std::time::Duration;

use super::{Fair, LockKind};
use crate::client::pubsub::{Letterbox, PubSub, Subscription};
use crate::error::Result;
use crate::protocol::lock::LockScripts;

impl LockKind for Fair {
    /// A fair lock wakes or grants only the next in line, on its own channel, whose grants
    /// are kept in `letters`.
    fn subscribe(
        &self,
        pubsub: &PubSub,
        holder: &str,
        letters: &Letterbox,
    ) -> Result<Subscription> {
        let channel = self.waiter_channel(holder);
        pubsub.subscribe_with_letters(&channel, &self.keys().name, letters.clone())
    }

    fn queue_place(&self) -> Option<Duration> {
        Some(Duration::from_millis(self.place_ms))
    }
}
