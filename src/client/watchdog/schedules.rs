//! The watchdog's promises under the orders of its threads' steps, searched by `shuttle`: a
//! holder's thread that takes a lock (and maybe a reentrant level of it) and releases it,
//! taking it again by a new chain when it finds its first one lost; the watchdog's thread,
//! whose renewals the search answers as the case says (by a clock of its own: each round is
//! a renewal interval and a second later); and the pub/sub listener's thread, which hears
//! that the first chain was force-released. The locks of the watchdog's registry are
//! `shuttle`'s here (see [`client::sync`](crate::client::sync)): the threads switch at every
//! lock, wait and wake.
//!
//! The promises: no renewal of a chain is sent after its release (but for a chain lost and
//! replaced by a new chain of its thread while its renewal was on the wire: that renewal
//! finds its holder gone, and the release does not wait for it); a chain is told lost once
//! at most, and only for what happened to it (a renewal found its holder gone, renewals
//! failed until its lease ran out, it was force-released), on its lease state (where its
//! guards read it) as to the callback; a renewal answered for a chain replaced meanwhile is
//! not applied to the new one; no entry is left behind.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shuttle::thread;

use super::renewal::Outcome;
use super::schedule::DueNow;
use super::{Callbacks, Grant, Holding, Shared, Watchdog, Work};
use crate::client::call::route::Router;
use crate::client::sync::searched::{search_random, Events, NO_SERVER};
use crate::client::topology::pool::{Pool, PoolSizes, PoolTimeouts, Target};
use crate::client::watchdog::lease::LeaseState;
use crate::error::{LostReason, RiskReason};
use crate::protocol::renew::HoldKind;

const NAME: &str = "lock";
/// The registry key of the holder thread's chains.
const KEY: &str = "lock:1";
const TIMEOUT: Duration = Duration::from_secs(30);
/// The rounds of the watchdog's thread.
const ROUNDS: u32 = 3;
/// The random orders of each case.
const ORDERS: usize = 2000;

/// How the server answers every renewal.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Answer {
    Renewed,
    /// The holder is gone.
    Gone,
    /// No answer in time.
    Failed,
}

/// One case: the renewals' answer, whether the holder takes a reentrant level, and whether a
/// force-release notice of the first chain comes.
#[derive(Clone, Copy, Debug)]
struct Case {
    answer: Answer,
    reentrant: bool,
    notice: bool,
}

/// What the threads did, in order.
#[derive(Clone, Debug, PartialEq)]
enum Event {
    /// A renewal of the chain of this holder id was sent ...
    RenewalSent(String),
    /// ... and answered that the holder is gone.
    Gone(String),
    /// The release of a chain's last level was sent.
    ReleaseSent(String),
    /// The lost-lock callback was told.
    Lost(String, LostReason),
}

/// The search's clock: each round of the watchdog's thread moves it a renewal interval and a
/// second on.
struct Clock {
    start: Instant,
    round: AtomicU32,
}

impl Clock {
    fn round(&self) -> u32 {
        self.round.load(Ordering::SeqCst)
    }

    fn at(&self, round: u32) -> Instant {
        self.start + (TIMEOUT / 3 + Duration::from_secs(1)) * round
    }
}

/// A chain the holder's thread took: its holder id, its lease state, and whether its grant
/// came back late, two rounds or more after it was sent (its lease may have run out before
/// the watchdog knew of it).
struct Chain {
    holder: &'static str,
    lease: Arc<LeaseState>,
    late: bool,
}

/// A watchdog without its thread (the search plays it), whose losses are told to `events`.
fn watchdog(events: &Arc<Events<Event>>) -> Watchdog {
    let client = redis::Client::open(NO_SERVER).expect("an address");
    let target = Target::Fixed {
        client,
        resolver: None,
    };
    let timeouts = PoolTimeouts {
        connect: Duration::from_secs(1),
        response: Duration::from_secs(1),
    };
    let sizes = PoolSizes {
        max_idle: 1,
        max_open: 1,
    };
    let router = Arc::new(Router::Single(Arc::new(Pool::new(target, timeouts, sizes))));
    let told = Arc::clone(events);
    let callbacks = Callbacks {
        on_lost: Some(Arc::new(move |lost| {
            told.push(Event::Lost(lost.holder.clone(), lost.reason));
        })),
        ..Callbacks::default()
    };
    let shared = Shared::new(router, TIMEOUT, None, callbacks).expect("a watchdog");
    Watchdog {
        shared: Arc::new(shared),
        thread: crate::client::sync::Mutex::new(None),
    }
}

/// What the threads share.
struct World {
    watchdog: Watchdog,
    clock: Clock,
    events: Arc<Events<Event>>,
}

impl World {
    /// Watches a level of the chain `holder`, granted by a request sent now (`joins`: a
    /// reentrant level). Answers its lease state and token, and whether the grant came late.
    fn watch(&self, holder: &str, joins: bool) -> Option<(Arc<LeaseState>, u64, bool)> {
        let sent = self.clock.round();
        let holding = Holding {
            key: KEY,
            name: NAME,
            holder,
            kind: HoldKind::Lock { delay_ms: 0 },
            thread: 1,
        };
        let grant = Grant::of(7, joins);
        let watched = self
            .watchdog
            .watch(holding, grant, self.clock.at(sent), None);
        let late = self.clock.round() >= sent + 2;
        watched.map(|(lease, token)| (lease, token, late))
    }

    /// Ends a level of the chain `holder`: the release is sent if it was the last.
    fn release(&self, holder: &str, lease: &Arc<LeaseState>) {
        let left = self.watchdog.unwatch(KEY, lease, false);
        if left.total() == 0 {
            self.events.push(Event::ReleaseSent(holder.to_owned()));
        }
    }
}

/// The holder's thread: takes the lock (chain `h1`), maybe a reentrant level of it, and
/// releases it; if it finds `h1` lost first, it takes the lock again (chain `h2`) and
/// releases that. Answers its chains.
fn holder(world: &World, case: Case) -> Vec<Chain> {
    let (first, token, late) = world.watch("h1", false).expect("a first chain");
    let mut chains = vec![Chain {
        holder: "h1",
        lease: Arc::clone(&first),
        late,
    }];
    if case.reentrant {
        // A level that joined a chain lost meanwhile belongs to none: nothing to release.
        if let Some((joined, joined_token, _)) = world.watch("h1", true) {
            assert!(
                Arc::ptr_eq(&joined, &first),
                "{case:?}: joined another chain"
            );
            assert_eq!(joined_token, token, "{case:?}: a level's token");
            thread::yield_now();
            world.release("h1", &joined);
        }
    }
    thread::yield_now();
    if first.lost().is_some() {
        let (second, _, late) = world.watch("h2", false).expect("a new chain");
        chains.push(Chain {
            holder: "h2",
            lease: Arc::clone(&second),
            late,
        });
        thread::yield_now();
        world.release("h2", &second);
    }
    world.release("h1", &first);
    chains
}

/// The watchdog's thread: each round moves the clock on and does the work due then, the
/// renewals answered as `answer` says.
fn renewer(world: &World, answer: Answer) {
    let shared = &*world.watchdog.shared;
    let mut due_now = DueNow::default();
    for round in 1..=ROUNDS {
        world.clock.round.store(round, Ordering::SeqCst);
        let now = world.clock.at(round);
        let work = shared.work_due(&mut shared.state.lock(), now, &mut due_now);
        match work {
            None => {}
            Some(Work::Tell(risks, revocations, losses)) => {
                shared.tell(risks, revocations, losses);
            }
            Some(Work::Renew { batch, sent_at, .. }) => {
                // The batch goes out after the state lock is let go ...
                thread::yield_now();
                for renewal in &batch {
                    let holder = renewal.holder.to_string();
                    world.events.push(Event::RenewalSent(holder));
                }
                // ... and its answers come back later.
                thread::yield_now();
                let outcomes = batch.iter().map(|renewal| {
                    let holder = renewal.holder.to_string();
                    match answer {
                        Answer::Renewed => Outcome::Renewed,
                        Answer::Gone => {
                            world.events.push(Event::Gone(holder));
                            Outcome::HolderGone
                        }
                        Answer::Failed => Outcome::Failed(RiskReason::Unanswered),
                    }
                });
                shared.apply(&batch, outcomes.collect(), sent_at);
            }
        }
    }
}

/// How many runs of a case made what a case is for.
#[derive(Default)]
struct Seen {
    /// A renewal was sent.
    renewals: AtomicUsize,
    /// A chain was told lost.
    losses: AtomicUsize,
    /// The holder took the lock again by a second chain.
    second_chains: AtomicUsize,
}

impl Seen {
    fn count(&self, events: &[Event], chains: &[Chain]) {
        let renewed = events
            .iter()
            .any(|event| matches!(event, Event::RenewalSent(_)));
        let lost = events.iter().any(|event| matches!(event, Event::Lost(..)));
        for (seen, counter) in [
            (renewed, &self.renewals),
            (lost, &self.losses),
            (chains.len() > 1, &self.second_chains),
        ] {
            counter.fetch_add(usize::from(seen), Ordering::SeqCst);
        }
    }
}

/// Runs `case` once, in the order shuttle chose, checks the promises, and counts what it
/// made into `seen`.
fn run(case: Case, seen: &Seen) {
    let events = Arc::new(Events::new());
    let world = Arc::new(World {
        watchdog: watchdog(&events),
        clock: Clock {
            start: Instant::now(),
            round: AtomicU32::new(0),
        },
        events: Arc::clone(&events),
    });
    let holding = {
        let world = Arc::clone(&world);
        thread::spawn(move || holder(&world, case))
    };
    let renewing = {
        let world = Arc::clone(&world);
        thread::spawn(move || renewer(&world, case.answer))
    };
    if case.notice {
        world.watchdog.notice_sink().force_released(NAME, "h1", 0);
    }
    let chains = holding.join().expect("the holder");
    renewing.join().expect("the watchdog's thread");
    // The losses found last are told too.
    let shared = &*world.watchdog.shared;
    let last = world.clock.at(ROUNDS);
    let work = shared.work_due(&mut shared.state.lock(), last, &mut DueNow::default());
    if let Some(Work::Tell(risks, revocations, losses)) = work {
        shared.tell(risks, revocations, losses);
    }
    let events = events.all();
    check(case, &events, &chains);
    assert_eq!(world.watchdog.len(), 0, "{case:?}: an entry left behind");
    seen.count(&events, &chains);
}

/// The promises, from what happened (`events`) and the holder's chains (the first one
/// replaced by the second, if there is one: a renewal of the first may then go out after its
/// release).
fn check(case: Case, events: &[Event], chains: &[Chain]) {
    for (index, chain) in chains.iter().enumerate() {
        let holder = &chain.holder.to_owned();
        let at = |wanted: &dyn Fn(&Event) -> bool| events.iter().position(wanted);
        let released = at(&|event| *event == Event::ReleaseSent(holder.clone()));
        let renewed_last = events
            .iter()
            .rposition(|event| *event == Event::RenewalSent(holder.clone()));
        let replaced = index + 1 < chains.len();
        if let (Some(released), Some(renewed), false) = (released, renewed_last, replaced) {
            assert!(
                renewed < released,
                "{case:?}: {holder} renewed after its release: {events:?}"
            );
        }
        let lost: Vec<LostReason> = events
            .iter()
            .filter_map(|event| match event {
                Event::Lost(lost, reason) if lost == holder => Some(*reason),
                _ => None,
            })
            .collect();
        assert!(
            lost.len() <= 1,
            "{case:?}: {holder} told lost twice: {events:?}"
        );
        assert_eq!(
            chain.lease.lost(),
            lost.first().copied(),
            "{case:?}: {holder}'s lease state and the callback disagree: {events:?}"
        );
        if events.contains(&Event::Gone(holder.clone())) {
            assert!(
                !lost.is_empty(),
                "{case:?}: {holder}'s renewal found it gone, untold: {events:?}"
            );
        }
        if let Some(&reason) = lost.first() {
            let why = match reason {
                LostReason::NotHeldAnymore => events.contains(&Event::Gone(holder.clone())),
                LostReason::LeaseExpired => case.answer == Answer::Failed || chain.late,
                LostReason::ForceReleased => case.notice && holder == "h1",
            };
            assert!(
                why,
                "{case:?}: {holder} told lost ({reason:?}) for nothing: {events:?}"
            );
        }
    }
}

/// Every case of the renewals' `answer`, each in `ORDERS` random orders; each case made
/// what it is for in some of them (a renewal sent; a loss, but for renewals that succeed
/// with no notice; a second chain, with a notice).
fn search(answer: Answer) {
    for reentrant in [false, true] {
        for notice in [false, true] {
            let case = Case {
                answer,
                reentrant,
                notice,
            };
            let seen = Arc::new(Seen::default());
            search_random(ORDERS, {
                let seen = Arc::clone(&seen);
                move || run(case, &seen)
            });
            let made = |counter: &AtomicUsize| counter.load(Ordering::SeqCst) > 0;
            assert!(made(&seen.renewals), "{case:?}: no renewal sent");
            if answer != Answer::Renewed || notice {
                assert!(made(&seen.losses), "{case:?}: no loss");
            }
            if notice {
                assert!(made(&seen.second_chains), "{case:?}: no second chain");
            }
        }
    }
}

#[test]
fn renewed_chains_keep_their_promises_in_random_orders() {
    search(Answer::Renewed);
}

#[test]
fn chains_found_gone_keep_their_promises_in_random_orders() {
    search(Answer::Gone);
}

#[test]
fn chains_whose_renewals_fail_keep_their_promises_in_random_orders() {
    search(Answer::Failed);
}
