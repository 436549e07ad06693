//! Host name lookups bounded by the caller's connect budget, with the last good addresses
//! cached.
//!
//! One [`Resolver`] serves one `host:port` and is shared by the command pool and the pub/sub
//! endpoint of a manager. An IP literal is parsed once and never looked up. A host name is
//! looked up with the system resolver (`getaddrinfo`, through [`ToSocketAddrs`]) on a
//! short-lived helper thread named `redlease-resolve`, while the caller waits at most its
//! budget; callers that arrive during a lookup wait on that one instead of starting another.
//!
//! The addresses of the last successful lookup are cached and trusted for
//! [`CACHE_TRUSTED_FOR`] without asking again, so bursts of new connections cost one lookup,
//! and a name moved by a failover is followed within seconds. After that a fresh lookup is
//! tried first, but with cached addresses to fall back on a caller waits for it at most half
//! its budget, so the connection itself keeps the other half; a lookup that fails or is too
//! slow then leaves the caller with the cached addresses (and a log line). A connection that
//! fails on every cached address ends their trust at once. Without cached addresses, a
//! lookup slower than the budget is an [`Error::Timeout`](crate::Error::Timeout).
//!
//! A TLS connection cannot use these addresses: redis-rs must be given the host name, which
//! its certificate is checked against, and looks the name up itself, unbounded. For it,
//! [`Resolver::confirm`] proves within the budget that the name answers now (a trusted cached
//! lookup, or a fresh one that succeeded in time), without falling back on older addresses,
//! so that a resolver known to be slow or failing ends the connect within its budget instead
//! of inside redis-rs's lookup.
//!
//! The lookup thread is the one thread of the crate that can outlive its manager, briefly:
//! `getaddrinfo` cannot be interrupted, so a thread stuck in it is left to finish when the
//! system resolver gives up (its own timeouts and attempts from `resolv.conf`). It holds only
//! an `Arc` of the lookup state, which it refreshes on success, and touches nothing else.

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use redis::{ConnectionAddr, ConnectionInfo};

use crate::error::Error;

/// How long the addresses of a successful lookup are used without a fresh lookup first.
pub(crate) const CACHE_TRUSTED_FOR: Duration = Duration::from_secs(5);

/// The addresses of one `host:port`, looked up within a budget.
pub(crate) struct Resolver {
    kind: Kind,
}

enum Kind {
    /// The host is an IP address: nothing to look up.
    Literal(SocketAddr),
    /// The host is a name, looked up on helper threads that share this state.
    Name(Arc<Lookups>),
}

/// What the caller and the lookup threads share.
struct Lookups {
    host: String,
    port: u16,
    state: Mutex<LookupState>,
    /// Notified when a lookup ends.
    finished: Condvar,
}

#[derive(Default)]
struct LookupState {
    /// The addresses of the last successful lookup.
    cached: Option<Cached>,
    /// A lookup thread is running; at most one is.
    in_flight: bool,
    /// How many lookups have ended, so a waiter knows when the one it waits on has.
    lookups_ended: u64,
    /// Why the last lookup failed, if it did.
    last_failure: Option<(io::ErrorKind, String)>,
}

struct Cached {
    addresses: Vec<SocketAddr>,
    looked_up_at: Instant,
    trusted_until: Instant,
}

/// Why no address is available.
#[derive(Debug)]
pub(crate) enum ResolveError {
    /// The lookup took longer than the caller's budget and nothing was cached.
    TimedOut(Duration),
    /// The system resolver answered with an error (or no address) and nothing was cached.
    Failed(io::Error),
    /// No lookup thread could be started and nothing was cached.
    ThreadSpawn(io::Error),
}

impl ResolveError {
    /// The crate error for a caller whose connect budget was `budget`.
    pub(crate) fn into_error(self, budget: Duration) -> Error {
        match self {
            ResolveError::TimedOut(_) => Error::Timeout(budget),
            ResolveError::Failed(err) => Error::Unreachable(err.into()),
            ResolveError::ThreadSpawn(err) => Error::ThreadSpawn(err),
        }
    }

    pub(crate) fn into_io_error(self) -> io::Error {
        match self {
            ResolveError::TimedOut(budget) => io::Error::new(
                io::ErrorKind::TimedOut,
                format!("host name lookup took longer than {budget:?}"),
            ),
            ResolveError::Failed(err) | ResolveError::ThreadSpawn(err) => err,
        }
    }
}

impl Resolver {
    pub(crate) fn new(host: &str, port: u16) -> Self {
        // An IPv6 literal may come with the brackets of its URL form.
        let unbracketed = host
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'))
            .unwrap_or(host);
        let kind = match unbracketed.parse::<IpAddr>() {
            Ok(ip) => Kind::Literal(SocketAddr::new(ip, port)),
            Err(_) => Kind::Name(Arc::new(Lookups {
                host: host.to_owned(),
                port,
                state: Mutex::new(LookupState::default()),
                finished: Condvar::new(),
            })),
        };
        Resolver { kind }
    }

    /// The addresses to connect to, in the order the system resolver gave them, within
    /// `budget` (less when cached addresses can stand in for a slow lookup).
    pub(crate) fn resolve(&self, budget: Duration) -> Result<Vec<SocketAddr>, ResolveError> {
        match &self.kind {
            Kind::Literal(address) => Ok(vec![*address]),
            Kind::Name(lookups) => lookups.resolve(budget),
        }
    }

    /// Answers whether the name resolves now, within `budget`: the cached addresses while
    /// they are trusted, else a lookup that succeeds in time. Unlike
    /// [`resolve`](Resolver::resolve), never falls back on addresses found before.
    pub(crate) fn confirm(&self, budget: Duration) -> Result<(), ResolveError> {
        match &self.kind {
            Kind::Literal(_) => Ok(()),
            Kind::Name(lookups) => lookups.look_up_within(budget, Fallback::None).map(drop),
        }
    }

    /// Stops trusting the cached addresses: connecting to every one of them failed, and the
    /// name may have moved. The next caller looks the name up first.
    pub(crate) fn distrust_cache(&self) {
        if let Kind::Name(lookups) = &self.kind {
            if let Some(cached) = &mut lookups.state.lock().cached {
                cached.trusted_until = Instant::now();
            }
        }
    }
}

/// What a lookup that fails or is too slow may leave the caller with.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fallback {
    /// The addresses found before, if any (then the lookup gets half the budget).
    Cached,
    /// Nothing: the caller needs a fresh answer (the whole budget).
    None,
}

impl Lookups {
    fn resolve(self: &Arc<Self>, budget: Duration) -> Result<Vec<SocketAddr>, ResolveError> {
        self.look_up_within(budget, Fallback::Cached)
    }

    fn look_up_within(
        self: &Arc<Self>,
        budget: Duration,
        fallback: Fallback,
    ) -> Result<Vec<SocketAddr>, ResolveError> {
        let started = Instant::now();
        let mut state = self.state.lock();
        if let Some(cached) = &state.cached {
            if started < cached.trusted_until {
                return Ok(cached.addresses.clone());
            }
        }
        if fallback == Fallback::None {
            // Below, only what this lookup finds counts.
            return self.wait_for_fresh_lookup(state, started, budget);
        }
        let wait = if state.cached.is_some() {
            budget / 2
        } else {
            budget
        };
        if let Err(err) = self.start_lookup(&mut state) {
            return match &state.cached {
                Some(cached) => {
                    log::warn!(
                        "cannot start a lookup of {}: {err}; using the addresses found {:?} ago",
                        self.host,
                        cached.looked_up_at.elapsed()
                    );
                    Ok(cached.addresses.clone())
                }
                None => Err(ResolveError::ThreadSpawn(err)),
            };
        }
        if self.await_lookup(&mut state, started + wait) {
            if let Some(found) = self.lookup_ended(&state) {
                return found;
            }
        }
        self.lookup_late(&state, wait)
    }

    /// What a lookup that ended tells: the addresses it found, or after a failure those found
    /// before (if any), or the failure; `None` when it left nothing to tell.
    fn lookup_ended(&self, state: &LookupState) -> Option<Result<Vec<SocketAddr>, ResolveError>> {
        let fallback = state.cached.as_ref().map(|cached| cached.addresses.clone());
        match (&state.last_failure, fallback) {
            // A success has just filled the cache.
            (None, Some(addresses)) => Some(Ok(addresses)),
            (Some((_, message)), Some(addresses)) => {
                log::warn!(
                    "looking up {} failed ({message}); using the addresses found {:?} ago",
                    self.host,
                    self.cache_age(state)
                );
                Some(Ok(addresses))
            }
            (Some((kind, message)), None) => Some(Err(ResolveError::Failed(io::Error::new(
                *kind,
                message.clone(),
            )))),
            (None, None) => None,
        }
    }

    /// A lookup still under way after `wait`: the addresses found before, if any.
    fn lookup_late(
        &self,
        state: &LookupState,
        wait: Duration,
    ) -> Result<Vec<SocketAddr>, ResolveError> {
        if let Some(cached) = &state.cached {
            log::warn!(
                "looking up {} took longer than {wait:?}; using the addresses found {:?} ago",
                self.host,
                self.cache_age(state)
            );
            return Ok(cached.addresses.clone());
        }
        log::warn!(
            "looking up {} took longer than {wait:?}, the connect budget",
            self.host
        );
        Err(ResolveError::TimedOut(wait))
    }

    /// Starts a lookup unless one is under way, and waits for it until `budget` has passed
    /// since `started`; answers what it found, or why nothing.
    fn wait_for_fresh_lookup(
        self: &Arc<Self>,
        mut state: MutexGuard<'_, LookupState>,
        started: Instant,
        budget: Duration,
    ) -> Result<Vec<SocketAddr>, ResolveError> {
        self.start_lookup(&mut state)
            .map_err(ResolveError::ThreadSpawn)?;
        if !self.await_lookup(&mut state, started + budget) {
            log::warn!(
                "looking up {} took longer than {budget:?}, the connect budget",
                self.host
            );
            return Err(ResolveError::TimedOut(budget));
        }
        match (&state.last_failure, &state.cached) {
            (None, Some(cached)) => Ok(cached.addresses.clone()),
            (Some((kind, message)), _) => {
                Err(ResolveError::Failed(io::Error::new(*kind, message.clone())))
            }
            (None, None) => Err(ResolveError::Failed(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} resolved to no address", self.host),
            ))),
        }
    }

    /// Starts the lookup thread unless one is under way already.
    fn start_lookup(self: &Arc<Self>, state: &mut LookupState) -> io::Result<()> {
        if !state.in_flight {
            let lookups = Arc::clone(self);
            std::thread::Builder::new()
                .name("redlease-resolve".into())
                .spawn(move || lookups.look_up())?;
            state.in_flight = true;
        }
        Ok(())
    }

    /// Waits until `give_up_at` at most for the lookup in flight to end; answers whether it
    /// did. (At most one lookup runs: the next one to end is the one in flight now.)
    fn await_lookup(&self, state: &mut MutexGuard<'_, LookupState>, give_up_at: Instant) -> bool {
        let awaited = state.lookups_ended + 1;
        while state.lookups_ended < awaited {
            if self.finished.wait_until(state, give_up_at).timed_out() {
                break;
            }
        }
        state.lookups_ended >= awaited
    }

    fn cache_age(&self, state: &LookupState) -> Duration {
        state
            .cached
            .as_ref()
            .map_or(Duration::ZERO, |cached| cached.looked_up_at.elapsed())
    }

    /// Body of the lookup thread: asks the system resolver, for as long as it takes, and
    /// records the answer for every caller, those that stopped waiting included.
    fn look_up(&self) {
        let started = Instant::now();
        let outcome = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map(Iterator::collect::<Vec<_>>);
        let took = started.elapsed();
        let mut state = self.state.lock();
        state.in_flight = false;
        state.lookups_ended += 1;
        match outcome {
            Ok(addresses) if !addresses.is_empty() => {
                let now = Instant::now();
                state.cached = Some(Cached {
                    addresses,
                    looked_up_at: now,
                    trusted_until: now + CACHE_TRUSTED_FOR,
                });
                state.last_failure = None;
            }
            Ok(_) => {
                state.last_failure = Some((
                    io::ErrorKind::NotFound,
                    format!("{} resolved to no address", self.host),
                ));
            }
            Err(err) => {
                log::debug!("looking up {} failed after {took:?}: {err}", self.host);
                state.last_failure = Some((err.kind(), err.to_string()));
            }
        }
        drop(state);
        self.finished.notify_all();
    }
}

/// `template`'s settings (credentials, database, TLS) at `host:port`: a node a sentinel or a
/// cluster names, reached as the manager's URL says.
pub(crate) fn info_at(template: &ConnectionInfo, host: String, port: u16) -> ConnectionInfo {
    let addr = match template.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host, port),
    };
    template.clone().set_addr(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv4_literal_is_never_looked_up() {
        let resolver = Resolver::new("127.0.0.1", 6379);
        assert!(matches!(resolver.kind, Kind::Literal(_)));
        // No budget at all: a lookup could not have answered.
        let addresses = resolver.resolve(Duration::ZERO).unwrap();
        assert_eq!(addresses, vec!["127.0.0.1:6379".parse().unwrap()]);
    }

    #[test]
    fn an_ipv6_literal_is_never_looked_up_with_or_without_brackets() {
        for host in ["::1", "[::1]"] {
            let resolver = Resolver::new(host, 6380);
            assert!(matches!(resolver.kind, Kind::Literal(_)), "{host}");
            let addresses = resolver.resolve(Duration::ZERO).unwrap();
            assert_eq!(addresses, vec!["[::1]:6380".parse().unwrap()], "{host}");
        }
    }

    #[test]
    fn a_literal_ignores_distrust() {
        let resolver = Resolver::new("10.1.2.3", 7000);
        resolver.distrust_cache();
        assert_eq!(
            resolver.resolve(Duration::ZERO).unwrap(),
            vec!["10.1.2.3:7000".parse().unwrap()]
        );
    }

    #[test]
    fn a_name_is_looked_up_once_and_then_served_from_the_cache() {
        let resolver = Resolver::new("localhost", 6379);
        let Kind::Name(lookups) = &resolver.kind else {
            panic!("localhost is a name");
        };
        let first = resolver.resolve(Duration::from_secs(5)).unwrap();
        assert!(!first.is_empty());
        assert!(first.iter().all(|address| address.ip().is_loopback()));
        assert_eq!(lookups.state.lock().lookups_ended, 1);
        let second = resolver.resolve(Duration::ZERO).unwrap();
        assert_eq!(second, first);
        assert_eq!(
            lookups.state.lock().lookups_ended,
            1,
            "served from the cache"
        );
    }

    #[test]
    fn confirming_a_name_uses_the_trusted_cache_or_a_fresh_lookup() {
        let resolver = Resolver::new("localhost", 6379);
        let Kind::Name(lookups) = &resolver.kind else {
            panic!("localhost is a name");
        };
        resolver.confirm(Duration::from_secs(5)).unwrap();
        assert_eq!(lookups.state.lock().lookups_ended, 1);
        resolver.confirm(Duration::ZERO).unwrap();
        assert_eq!(lookups.state.lock().lookups_ended, 1, "trusted cache");
        resolver.distrust_cache();
        // Distrusted: a fresh lookup or nothing, never the old addresses.
        assert!(matches!(
            resolver.confirm(Duration::ZERO),
            Err(ResolveError::TimedOut(_))
        ));
        resolver.confirm(Duration::from_secs(5)).unwrap();
        assert!(lookups.state.lock().lookups_ended >= 2);
    }

    #[test]
    fn distrusted_addresses_are_looked_up_again() {
        let resolver = Resolver::new("localhost", 6379);
        let Kind::Name(lookups) = &resolver.kind else {
            panic!("localhost is a name");
        };
        resolver.resolve(Duration::from_secs(5)).unwrap();
        resolver.distrust_cache();
        resolver.resolve(Duration::from_secs(10)).unwrap();
        assert_eq!(lookups.state.lock().lookups_ended, 2);
    }
}
