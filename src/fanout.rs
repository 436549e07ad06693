//! Fan-out: one script call to each of several Redis servers for about the price of one.
//!
//! [`call_all`] writes every request before it reads any answer, so the servers work in
//! parallel and the whole costs about one round trip (the slowest), not one per server.
//! Answers are read against one deadline, so a server that is slow or frozen costs at most
//! that deadline, and a dead one costs its refused connection. A request that must first
//! connect is sent after those with an idle connection, and its answer gets as long again
//! from its own send (each new connection adds at most one attempt timeout). Used by the
//! multi-server locks; talks to Redis only through the pools it is given.

use std::time::{Duration, Instant};

use redis::{Connection, RedisResult, Script, ServerErrorKind, Value};

use crate::error::{Error, Result};
use crate::pool::{self, Pool};

/// After the deadline, an answer is still read if it is already there: reading in request
/// order must not turn one frozen server's delay into a timeout for all the others.
const GRACE_AFTER_DEADLINE: Duration = Duration::from_millis(1);

/// One script call to one server.
pub(crate) struct Request<'a> {
    pub(crate) pool: &'a Pool,
    pub(crate) keys: Vec<&'a str>,
    pub(crate) args: Vec<String>,
}

/// A request written to its server, whose answer is still to be read.
struct InFlight {
    connection: Connection,
    /// The connection came from the idle list, so it may turn out to have been dead.
    was_idle: bool,
    /// Until when its answer is awaited: the attempt's deadline, later for a request that
    /// had to wait for a new connection.
    answer_by: Instant,
}

/// Calls `script` (whose Lua `source` it is) on every request's server, all requests written
/// before any answer is read, and reads every answer until `deadline`. Answers one outcome
/// per request, in order. Servers whose script cache is empty get the script and the request
/// once more, again all at once, with as much time again.
pub(crate) fn call_all(
    script: &Script,
    source: &str,
    requests: &[Request<'_>],
    deadline: Instant,
) -> Vec<Result<Value>> {
    let budget = deadline.saturating_duration_since(Instant::now());
    let packed: Vec<Vec<u8>> = requests
        .iter()
        .map(|request| {
            redis::cmd("EVALSHA")
                .arg(script.get_hash())
                .arg(request.keys.len())
                .arg(&request.keys)
                .arg(&request.args)
                .get_packed_command()
        })
        .collect();
    // Requests with an idle connection go first: a server that needs a new one (slow to
    // connect, or not there) must not hold them up.
    let idle: Vec<Option<Connection>> = requests
        .iter()
        .map(|request| request.pool.take_idle())
        .collect();
    let mut in_flight: Vec<Option<Result<InFlight>>> = requests
        .iter()
        .zip(&packed)
        .zip(idle)
        .map(|((request, packed), idle)| {
            idle.map(|connection| send(request.pool, packed, Some(connection), deadline, budget))
        })
        .collect();
    for ((request, packed), flight) in requests.iter().zip(&packed).zip(&mut in_flight) {
        if flight.is_none() {
            *flight = Some(send(request.pool, packed, None, deadline, budget));
        }
    }
    let mut outcomes = Vec::with_capacity(requests.len());
    let mut reloads = Vec::new();
    for (index, ((request, packed), flight)) in
        requests.iter().zip(&packed).zip(in_flight).enumerate()
    {
        let flight = flight.unwrap_or(Err(Error::Timeout(budget)));
        match flight.and_then(|flight| receive(request.pool, flight, packed, budget)) {
            Ok(Received::Answer(value)) => outcomes.push(Ok(value)),
            Ok(Received::NoScript(connection)) => {
                outcomes.push(Err(Error::Timeout(budget)));
                reloads.push((index, connection));
            }
            Err(err) => outcomes.push(Err(err)),
        }
    }
    if !reloads.is_empty() {
        let load = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(source)
            .get_packed_command();
        let deadline = Instant::now() + budget;
        let mut sent = Vec::new();
        for (index, mut connection) in reloads {
            let mut both = load.clone();
            both.extend_from_slice(&packed[index]);
            match connection.send_packed_command(&both) {
                Ok(()) => sent.push((index, connection)),
                Err(err) => outcomes[index] = Err(Error::from_redis(err, budget)),
            }
        }
        for (index, mut connection) in sent {
            let answer = read_in_time(&mut connection, deadline)
                .and_then(|_loaded| read_in_time(&mut connection, deadline));
            outcomes[index] = finish(requests[index].pool, connection, answer, budget);
        }
    }
    outcomes
}

/// What came back for one request.
enum Received {
    Answer(Value),
    /// The server's script cache is empty: the request must be sent again with the script.
    NoScript(Connection),
}

/// Writes `packed` on `idle`, or on a new connection; a dead idle connection is replaced
/// once.
fn send(
    pool: &Pool,
    packed: &[u8],
    idle: Option<Connection>,
    deadline: Instant,
    budget: Duration,
) -> Result<InFlight> {
    let was_idle = idle.is_some();
    let mut connection = match idle {
        Some(connection) => connection,
        None => pool.connect_within(budget)?,
    };
    // No write timeout of its own: a request is small and the socket's send buffer empty,
    // and the pool's write timeout bounds the rare exception.
    match connection.send_packed_command(packed) {
        Ok(()) => Ok(InFlight {
            connection,
            was_idle,
            answer_by: deadline.max(Instant::now() + budget),
        }),
        Err(err) if was_idle && pool::is_stale_connection(&err) => {
            send(pool, packed, None, deadline, budget)
        }
        Err(err) => Err(Error::from_redis(err, budget)),
    }
}

fn receive(pool: &Pool, flight: InFlight, packed: &[u8], budget: Duration) -> Result<Received> {
    let InFlight {
        mut connection,
        was_idle,
        answer_by,
    } = flight;
    match read_in_time(&mut connection, answer_by) {
        Ok(Value::ServerError(err)) if err.kind() == Some(ServerErrorKind::NoScript) => {
            Ok(Received::NoScript(connection))
        }
        // The idle connection was dead before the request reached the server: once more on
        // a fresh one (a fresh connection is not retried, so this ends).
        Err(err) if was_idle && pool::is_stale_connection(&err) => {
            let flight = send(pool, packed, None, answer_by, budget)?;
            receive(pool, flight, packed, budget)
        }
        answer => finish(pool, connection, answer, budget).map(Received::Answer),
    }
}

/// Reads one answer: until `deadline`, or, when it has passed, one that is already there.
fn read_in_time(connection: &mut Connection, deadline: Instant) -> RedisResult<Value> {
    let left = deadline.saturating_duration_since(Instant::now());
    connection.set_read_timeout(Some(left.max(GRACE_AFTER_DEADLINE)))?;
    connection.recv_response()
}

/// Turns an answer into an outcome, and gives the connection back when it is in step.
fn finish(
    pool: &Pool,
    connection: Connection,
    answer: RedisResult<Value>,
    budget: Duration,
) -> Result<Value> {
    match answer {
        Ok(Value::ServerError(err)) => {
            pool.give_back(connection);
            Err(Error::Redis(err.into()))
        }
        Ok(value) => {
            pool.give_back(connection);
            Ok(value)
        }
        // Dropped: the stream may still carry the late answer.
        Err(err) => Err(Error::from_redis(err, budget)),
    }
}
