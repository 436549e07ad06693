//! [`CuttingProxy`]: a TCP proxy in front of a throwaway server that lets a command run and
//! cuts its connection before the answer comes back, for tests of what a lost answer does,
//! and holds a command back for as long as a test likes ([`Held`]), for tests of what a copy
//! of a call that arrives late does.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A proxy on a free loopback port that forwards every connection to a server, can delay
/// requests and answers ([`set_latency`](Self::set_latency),
/// [`set_answer_latency`](Self::set_answer_latency)) or close every connection
/// ([`reset_all`](Self::reset_all)), and can be armed to cut one connection: the next request whose bytes contain every one of some words is sent on
/// to the server, which runs it, and its connection is closed before the answer reaches the
/// client. The client sees its connection dropped with the command sent, as when a network
/// or a server restart cuts it; the server has done the work.
///
/// ```
/// use std::time::Duration;
/// use redlease_testing::{CuttingProxy, RedisServer};
///
/// let redis = RedisServer::start().expect("redis-server");
/// let proxy = CuttingProxy::start(redis.port()).unwrap();
/// let manager = redlease::LockManager::builder(proxy.url())
///     .outage_grace(Duration::from_secs(5))
///     .build()
///     .unwrap();
/// let latch = manager.count_down_latch("cut");
/// latch.try_set_count(3).unwrap();
/// proxy.cut_next(&["EVALSHA", "cut"]);
/// latch.count_down().unwrap(); // its answer is lost once; the repeat is answered
/// assert_eq!(proxy.cuts(), 1);
/// assert_eq!(latch.count().unwrap(), 2, "counted once");
/// ```
///
/// It can also hold a command back ([`hold_next`](Self::hold_next)): the client sees no answer,
/// times out and sends the command again on another connection, while the first copy waits in
/// the proxy until the test [delivers](Held::deliver) it, as a congested link or a
/// retransmission back-off would deliver it late.
pub struct CuttingProxy {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    /// The words of the next requests to cut after they are sent on, and how many more to
    /// cut, while armed.
    armed: Mutex<Option<(Vec<Vec<u8>>, u32)>>,
    cuts: AtomicU64,
    /// How long each request waits before it is sent on, in µs.
    latency_micros: AtomicU64,
    /// How long each answer (or message) waits before it is passed on, in µs.
    answer_latency_micros: AtomicU64,
    stopping: AtomicBool,
    /// Every connection's two streams, to close them all on drop.
    streams: Mutex<Vec<TcpStream>>,
    /// The next request to hold back, while armed.
    hold: Mutex<Option<Arc<Holding>>>,
}

/// A request the proxy holds back (see [`CuttingProxy::hold_next`]): it and whatever its
/// client sends after it on the same connection wait in the proxy until
/// [`deliver`](Held::deliver) or [`deliver_first_then_cut`](Held::deliver_first_then_cut).
/// Dropped without either, they are never delivered.
pub struct Held {
    holding: Arc<Holding>,
}

struct Holding {
    words: Vec<Vec<u8>>,
    state: Mutex<HoldState>,
    changed: Condvar,
}

#[derive(Default)]
struct HoldState {
    /// The two streams of the connection whose request matched, once one did.
    streams: Option<(TcpStream, TcpStream)>,
    /// What the client sent on it since, in order, not passed on yet.
    queue: Vec<Vec<u8>>,
    /// Passed on: what the client sends from now on goes through.
    released: bool,
    /// The client closed its side while its bytes were held.
    client_closed: bool,
    /// What the server answered on the connection after the delivery.
    replies: Vec<u8>,
}

impl Held {
    /// Waits up to `within` for a request to match; answers whether one did.
    pub fn wait_until_held(&self, within: Duration) -> bool {
        let give_up_at = Instant::now() + within;
        let mut state = self.holding.state.lock().unwrap();
        while state.streams.is_none() {
            let left = give_up_at.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self.holding.changed.wait_timeout(state, left).unwrap().0;
        }
        true
    }

    /// Passes the held request on to the server, with whatever its client sent after it on
    /// the same connection, and waits up to 10 s for the server's answer, which it answers
    /// (the raw bytes; the client, which gave up on it, never sees it).
    pub fn deliver(self) -> io::Result<Vec<u8>> {
        self.pass_on(false)
    }

    /// Passes only the held request on, waits for the server's answer (answered as by
    /// [`deliver`](Self::deliver)), then closes the connection: what its client sent after it
    /// (an undo queued behind a request that timed out) never reaches the server, as when a
    /// middlebox delivers a late packet and then drops the connection.
    pub fn deliver_first_then_cut(self) -> io::Result<Vec<u8>> {
        self.pass_on(true)
    }

    fn pass_on(self, first_only: bool) -> io::Result<Vec<u8>> {
        let holding = &self.holding;
        let mut state = holding.state.lock().unwrap();
        let Some((_, server)) = &state.streams else {
            return Err(io::Error::other("no request was held"));
        };
        let mut server = server.try_clone()?;
        let queue = std::mem::take(&mut state.queue);
        let count = if first_only { 1 } else { queue.len() };
        for chunk in queue.iter().take(count) {
            server.write_all(chunk)?;
        }
        state.released = !first_only;
        let give_up_at = Instant::now() + Duration::from_secs(10);
        while state.replies.is_empty() {
            let left = give_up_at.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "no answer"));
            }
            state = holding.changed.wait_timeout(state, left).unwrap().0;
        }
        if first_only || state.client_closed {
            if let Some((client, server)) = &state.streams {
                let _ = server.shutdown(Shutdown::Both);
                if first_only {
                    let _ = client.shutdown(Shutdown::Both);
                }
            }
        }
        Ok(std::mem::take(&mut state.replies))
    }
}

impl CuttingProxy {
    /// Starts the proxy in front of the server on `127.0.0.1:target_port`.
    pub fn start(target_port: u16) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared::default());
        let acceptor = std::thread::Builder::new()
            .name("cutting-proxy".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || accept(&listener, target_port, &shared)
            })?;
        Ok(CuttingProxy {
            port,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// `redis://127.0.0.1:<port>/`: the proxy's address.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Arms the proxy: the next request that contains every one of `words` reaches the
    /// server, and its connection is closed before the answer is passed on.
    pub fn cut_next(&self, words: &[&str]) {
        self.cut_next_times(words, 1);
    }

    /// Like [`cut_next`](Self::cut_next), for the next `times` such requests.
    pub fn cut_next_times(&self, words: &[&str], times: u32) {
        let words = words.iter().map(|word| word.as_bytes().to_vec()).collect();
        *self.shared.armed.lock().unwrap() = (times > 0).then_some((words, times));
    }

    /// Arms the proxy to hold back the next request that contains every one of `words` (see
    /// [`Held`]): neither it nor what its client sends after it on its connection reaches
    /// the server until the test passes them on.
    pub fn hold_next(&self, words: &[&str]) -> Held {
        let holding = Arc::new(Holding {
            words: words.iter().map(|word| word.as_bytes().to_vec()).collect(),
            state: Mutex::new(HoldState::default()),
            changed: Condvar::new(),
        });
        *self.shared.hold.lock().unwrap() = Some(Arc::clone(&holding));
        Held { holding }
    }

    /// Whether the proxy is still armed (no request matched since [`cut_next`](Self::cut_next)).
    pub fn is_armed(&self) -> bool {
        self.shared.armed.lock().unwrap().is_some()
    }

    /// Delays every request by `latency` before it is sent on (zero: none), as a slow
    /// network would.
    pub fn set_latency(&self, latency: Duration) {
        store_micros(&self.shared.latency_micros, latency);
    }

    /// Delays every answer, and every message of a subscription, by `latency` before it is
    /// passed on to the client (zero: none); with [`set_latency`](Self::set_latency), a
    /// network with a round trip of twice `latency` and more (the proxy's own sleeps and
    /// hops, measured by a round trip through it).
    pub fn set_answer_latency(&self, latency: Duration) {
        store_micros(&self.shared.answer_latency_micros, latency);
    }

    /// How many connections were cut so far.
    pub fn cuts(&self) -> u64 {
        self.shared.cuts.load(Ordering::SeqCst)
    }

    /// Closes every connection open through the proxy now (new ones are still taken), as a
    /// network blip would.
    pub fn reset_all(&self) {
        for stream in self.shared.streams.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for CuttingProxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wakes the acceptor.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        self.reset_all();
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept(listener: &TcpListener, target_port: u16, shared: &Arc<Shared>) {
    let mut pumps = Vec::new();
    for client in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let Ok(client) = client else { continue };
        let Ok(server) = TcpStream::connect(("127.0.0.1", target_port)) else {
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        if let Ok(mut pair) = connect_pumps(client, server, shared) {
            pumps.append(&mut pair);
        }
        pumps.retain(|pump: &JoinHandle<()>| !pump.is_finished());
    }
    for pump in pumps {
        let _ = pump.join();
    }
}

/// Starts the two pumps of one connection.
fn connect_pumps(
    client: TcpStream,
    server: TcpStream,
    shared: &Arc<Shared>,
) -> io::Result<Vec<JoinHandle<()>>> {
    {
        let mut streams = shared.streams.lock().unwrap();
        streams.push(client.try_clone()?);
        streams.push(server.try_clone()?);
    }
    // Set by the client's pump once a request to cut went out: the server's pump then drops
    // the answer and closes both.
    let cutting = Arc::new(AtomicBool::new(false));
    // Set by the client's pump once it holds a request back on this connection: the server's
    // pump then tells it of the answers.
    let held: Arc<Mutex<Option<Arc<Holding>>>> = Arc::default();
    let upstream = {
        let (from, to) = (client.try_clone()?, server.try_clone()?);
        let streams = (client.try_clone()?, server.try_clone()?);
        let (shared, cutting, held) = (Arc::clone(shared), Arc::clone(&cutting), Arc::clone(&held));
        std::thread::Builder::new()
            .name("cutting-proxy-up".into())
            .spawn(move || pump_up(from, to, &shared, &cutting, &held, streams))?
    };
    let downstream = {
        let shared = Arc::clone(shared);
        std::thread::Builder::new()
            .name("cutting-proxy-down".into())
            .spawn(move || pump_down(server, client, &shared, &cutting, &held))?
    };
    Ok(vec![upstream, downstream])
}

/// Client to server: every byte; a request that matches the armed words arms the cut, or is
/// held back with what follows it.
fn pump_up(
    mut from: TcpStream,
    mut to: TcpStream,
    shared: &Shared,
    cutting: &AtomicBool,
    held: &Mutex<Option<Arc<Holding>>>,
    streams: (TcpStream, TcpStream),
) {
    let mut streams = Some(streams);
    let mut buffer = vec![0; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        let chunk = &buffer[..read];
        delay(&shared.latency_micros);
        arm_cut(shared, chunk, cutting);
        if hold_back(shared, chunk, held, &mut streams) {
            continue;
        }
        if to.write_all(chunk).is_err() {
            break;
        }
    }
    if let Some(holding) = &*held.lock().unwrap() {
        let mut state = holding.state.lock().unwrap();
        if !state.released {
            // The held bytes still go out, when the test says: the server must not see the
            // connection end before them.
            state.client_closed = true;
            return;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Arms the cut of this connection when `chunk` matches the words of the cut armed.
fn arm_cut(shared: &Shared, chunk: &[u8], cutting: &AtomicBool) {
    let mut armed = shared.armed.lock().unwrap();
    let matches = armed
        .as_ref()
        .is_some_and(|(words, _)| words.iter().all(|word| contains(chunk, word)));
    if matches {
        if let Some((_, times)) = armed.as_mut() {
            *times -= 1;
            if *times == 0 {
                *armed = None;
            }
        }
        cutting.store(true, Ordering::SeqCst);
    }
}

/// Holds `chunk` back when this connection holds its bytes back (not yet passed on), or when
/// it matches the words of the hold armed (this connection then holds its bytes from now
/// on); answers whether it did.
fn hold_back(
    shared: &Shared,
    chunk: &[u8],
    held: &Mutex<Option<Arc<Holding>>>,
    streams: &mut Option<(TcpStream, TcpStream)>,
) -> bool {
    let mut held = held.lock().unwrap();
    if held.is_none() {
        let mut armed = shared.hold.lock().unwrap();
        let matches = armed
            .as_ref()
            .is_some_and(|holding| holding.words.iter().all(|word| contains(chunk, word)));
        if !matches {
            return false;
        }
        let holding = armed.take().expect("armed");
        holding.state.lock().unwrap().streams = streams.take();
        *held = Some(holding);
    }
    let holding = held.as_ref().expect("holding");
    let mut state = holding.state.lock().unwrap();
    if state.released {
        return false;
    }
    state.queue.push(chunk.to_vec());
    holding.changed.notify_all();
    true
}

/// Server to client: every byte, unless a cut is armed on this connection: then the answer
/// is dropped and both sides closed. On a connection that held a request back, what the
/// server answers is also told to the holder.
fn pump_down(
    mut from: TcpStream,
    mut to: TcpStream,
    shared: &Shared,
    cutting: &AtomicBool,
    held: &Mutex<Option<Arc<Holding>>>,
) {
    let mut buffer = vec![0; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if let Some(holding) = &*held.lock().unwrap() {
            let mut state = holding.state.lock().unwrap();
            state.replies.extend_from_slice(&buffer[..read]);
            holding.changed.notify_all();
        }
        if cutting.load(Ordering::SeqCst) {
            shared.cuts.fetch_add(1, Ordering::SeqCst);
            let _ = to.shutdown(Shutdown::Both);
            let _ = from.shutdown(Shutdown::Both);
            return;
        }
        delay(&shared.answer_latency_micros);
        if to.write_all(&buffer[..read]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}

fn store_micros(micros: &AtomicU64, latency: Duration) {
    let value = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
    micros.store(value, Ordering::SeqCst);
}

/// Sleeps for the latency set in `micros`, if any.
fn delay(micros: &AtomicU64) {
    let latency = micros.load(Ordering::SeqCst);
    if latency > 0 {
        std::thread::sleep(Duration::from_micros(latency));
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty()
        || haystack
            .windows(needle.len())
            .any(|window| window == needle)
}
