//! A hashed timer wheel: items due at an [`Instant`], collected in ticks.
//!
//! Deadlines are rounded up to the next tick, so items that fall due within one tick come out
//! together; that is what lets the watchdog renew them in one batch. Insertion is O(1);
//! collecting visits only the slots of the elapsed ticks. An item more than one turn of the
//! wheel away waits in its slot for the turn it is due in. Plain data; no clock reads.

use std::time::{Duration, Instant};

pub(crate) struct TimerWheel<T> {
    origin: Instant,
    tick: Duration,
    /// Slot `t % slots.len()` holds the items due at tick `t`, each with its tick.
    slots: Vec<Vec<(u64, T)>>,
    /// Every tick up to and including this one has been collected.
    collected_through: u64,
    len: usize,
}

impl<T> TimerWheel<T> {
    pub(crate) fn new(origin: Instant, tick: Duration, slots: usize) -> Self {
        assert!(!tick.is_zero() && slots > 0);
        TimerWheel {
            origin,
            tick,
            slots: (0..slots).map(|_| Vec::new()).collect(),
            collected_through: 0,
            len: 0,
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Schedules `item` for the first tick at or after `due` (and after every collected tick).
    pub(crate) fn insert(&mut self, due: Instant, item: T) {
        let since_origin = due.saturating_duration_since(self.origin);
        let tick = since_origin.as_nanos().div_ceil(self.tick.as_nanos());
        let tick = u64::try_from(tick)
            .unwrap_or(u64::MAX)
            .max(self.collected_through + 1);
        let slot = self.slot_of(tick);
        self.slots[slot].push((tick, item));
        self.len += 1;
    }

    /// Moves every item due at or before `now` into `due`.
    pub(crate) fn collect(&mut self, now: Instant, due: &mut Vec<T>) {
        let now_tick = self.tick_at_or_before(now);
        if now_tick <= self.collected_through {
            return;
        }
        let elapsed = now_tick - self.collected_through;
        let first = self.collected_through + 1;
        let visits = elapsed.min(self.slots.len() as u64);
        for tick in first..first + visits {
            let slot = self.slot_of(tick);
            let items = std::mem::take(&mut self.slots[slot]);
            for (item_tick, item) in items {
                if item_tick <= now_tick {
                    due.push(item);
                    self.len -= 1;
                } else {
                    self.slots[slot].push((item_tick, item));
                }
            }
        }
        self.collected_through = now_tick;
    }

    /// When the earliest item falls due, if there is one.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        if self.len == 0 {
            return None;
        }
        let turn = self.slots.len() as u64;
        let first = self.collected_through + 1;
        let earliest = (first..first + turn)
            .find(|&tick| {
                self.slots[self.slot_of(tick)]
                    .iter()
                    .any(|(item_tick, _)| *item_tick == tick)
            })
            .or_else(|| {
                // Everything is at least one turn away: rare, so a full scan is fine.
                self.slots.iter().flatten().map(|(tick, _)| *tick).min()
            })?;
        Some(self.instant_of(earliest))
    }

    fn slot_of(&self, tick: u64) -> usize {
        (tick % self.slots.len() as u64) as usize
    }

    fn tick_at_or_before(&self, now: Instant) -> u64 {
        let since_origin = now.saturating_duration_since(self.origin);
        u64::try_from(since_origin.as_nanos() / self.tick.as_nanos()).unwrap_or(u64::MAX)
    }

    fn instant_of(&self, tick: u64) -> Instant {
        let nanos = u128::from(tick) * self.tick.as_nanos();
        let offset = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        self.origin.checked_add(offset).unwrap_or(self.origin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(10);

    fn collect(wheel: &mut TimerWheel<u32>, at: Instant) -> Vec<u32> {
        let mut due = Vec::new();
        wheel.collect(at, &mut due);
        due.sort_unstable();
        due
    }

    #[test]
    fn items_come_out_at_their_tick_and_not_before() {
        let origin = Instant::now();
        let mut wheel = TimerWheel::new(origin, TICK, 8);
        wheel.insert(origin + Duration::from_millis(25), 1);
        wheel.insert(origin + Duration::from_millis(21), 2);
        wheel.insert(origin + Duration::from_millis(45), 3);
        assert_eq!(wheel.next_due(), Some(origin + Duration::from_millis(30)));
        assert!(collect(&mut wheel, origin + Duration::from_millis(29)).is_empty());
        assert_eq!(
            collect(&mut wheel, origin + Duration::from_millis(30)),
            [1, 2]
        );
        assert_eq!(wheel.len(), 1);
        assert_eq!(wheel.next_due(), Some(origin + Duration::from_millis(50)));
        assert_eq!(collect(&mut wheel, origin + Duration::from_millis(55)), [3]);
        assert_eq!(wheel.next_due(), None);
    }

    #[test]
    fn items_several_turns_away_wait_for_their_turn() {
        let origin = Instant::now();
        let mut wheel = TimerWheel::new(origin, TICK, 4);
        wheel.insert(origin + Duration::from_millis(10), 1);
        wheel.insert(origin + Duration::from_millis(130), 2);
        assert_eq!(collect(&mut wheel, origin + Duration::from_millis(50)), [1]);
        assert_eq!(wheel.next_due(), Some(origin + Duration::from_millis(130)));
        assert!(collect(&mut wheel, origin + Duration::from_millis(90)).is_empty());
        assert_eq!(
            collect(&mut wheel, origin + Duration::from_millis(500)),
            [2]
        );
        assert_eq!(wheel.len(), 0);
    }

    #[test]
    fn overdue_items_go_to_the_next_uncollected_tick() {
        let origin = Instant::now();
        let mut wheel = TimerWheel::new(origin, TICK, 4);
        assert!(collect(&mut wheel, origin + Duration::from_millis(100)).is_empty());
        wheel.insert(origin, 7);
        assert_eq!(wheel.next_due(), Some(origin + Duration::from_millis(110)));
        assert_eq!(
            collect(&mut wheel, origin + Duration::from_millis(110)),
            [7]
        );
    }
}
