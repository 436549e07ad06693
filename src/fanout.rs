//! Fan-out: one script call to each of several Redis servers for about the price of one.
//!
//! [`call_all`] writes every request before it reads any answer, so the servers work in
//! parallel and the whole costs about one round trip (the slowest), not one per server.
//! Every answer is read against one deadline, so a server that is slow or frozen costs at
//! most that deadline, and a dead one costs nothing beyond its refused connection. Used by
//! the multi-master locks; talks to Redis only through the pools it is given.

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
    let in_flight: Vec<Result<InFlight>> = requests
        .iter()
        .zip(&packed)
        .map(|(request, packed)| send(request.pool, packed, deadline, false, budget))
        .collect();
    let mut outcomes = Vec::with_capacity(requests.len());
    let mut reloads = Vec::new();
    for (index, ((request, packed), flight)) in
        requests.iter().zip(&packed).zip(in_flight).enumerate()
    {
        match flight.and_then(|flight| receive(request.pool, flight, packed, deadline, budget)) {
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

fn send(
    pool: &Pool,
    packed: &[u8],
    deadline: Instant,
    fresh: bool,
    budget: Duration,
) -> Result<InFlight> {
    let (mut connection, was_idle) = pool.take(deadline, fresh)?;
    // No write timeout of its own: a request is small and the socket's send buffer empty,
    // and the pool's write timeout bounds the rare exception.
    let sent = connection.send_packed_command(packed);
    match sent {
        Ok(()) => Ok(InFlight {
            connection,
            was_idle,
        }),
        Err(err) if was_idle && pool::is_stale_connection(&err) => {
            send(pool, packed, deadline, true, budget)
        }
        Err(err) => Err(Error::from_redis(err, budget)),
    }
}

fn receive(
    pool: &Pool,
    flight: InFlight,
    packed: &[u8],
    deadline: Instant,
    budget: Duration,
) -> Result<Received> {
    let InFlight {
        mut connection,
        was_idle,
    } = flight;
    match read_in_time(&mut connection, deadline) {
        Ok(Value::ServerError(err)) if err.kind() == Some(ServerErrorKind::NoScript) => {
            Ok(Received::NoScript(connection))
        }
        // The idle connection was dead before the request reached the server: once more on
        // a fresh one (a fresh connection is not retried, so this ends).
        Err(err) if was_idle && pool::is_stale_connection(&err) => {
            let flight = send(pool, packed, deadline, true, budget)?;
            receive(pool, flight, packed, deadline, budget)
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
