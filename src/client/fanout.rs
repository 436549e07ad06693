//! Fan-out: one script call to each of several Redis servers for about the price of one.
//!
//! [`FanOut::send`] writes every request before any answer is read, so the servers work in
//! parallel and the whole costs about one round trip (the slowest), not one per server. The
//! caller then reads each answer against a deadline of its own, in the order it likes, and
//! may abandon the answers it no longer needs (queueing an undo behind the request), so a
//! server that is slow or frozen costs at most the deadline it is given, and a dead one its
//! refused connection. [`call_all`] reads every answer in order against one deadline. A
//! request that must first connect is sent after those with an idle connection, and its
//! answer gets as long again from its own send (each new connection adds at most one
//! attempt timeout). A server whose script cache is empty gets the script and the request
//! once more. A request may carry its server's replica acknowledgements: `WAIT` goes behind
//! it in the same write, and its answer is read after the request's, within the ack timeout
//! beyond the request's deadline (the servers wait for their replicas in parallel). Used by
//! the multi-server locks; talks to Redis only through the pools it is given, and so over
//! TLS where they do (a new TLS connection's handshake, made with the pool's `PING` within
//! its connect budget, runs before its request is written).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Connection, RedisResult, ServerErrorKind, Value};

use crate::client::call::replication::{Acked, ReplicaAcks};
use crate::client::call::runner;
use crate::client::topology::pool::{self, Pool, Pooled, Reading};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::protocol::ScriptCall;

/// After the deadline, an answer is still read if it is already there: reading in request
/// order must not turn one frozen server's delay into a timeout for all the others.
const GRACE_AFTER_DEADLINE: Duration = Duration::from_millis(1);

/// One script call to one server.
pub(crate) struct Request<'a> {
    pub(crate) pool: Arc<Pool>,
    pub(crate) call: ScriptCall,
    /// The acknowledgements the call's write waits for (its manager's setting, resolved for
    /// the server), if any.
    pub(crate) acks: Option<Cow<'a, ReplicaAcks>>,
}

impl<'a> Request<'a> {
    /// `call` through `client`: to the server (in cluster mode, the node) that serves its
    /// keys, in the dialect the deployment publishes in, with the client's acknowledgements.
    pub(crate) fn new(client: &'a Client, call: ScriptCall) -> Self {
        let call = client.in_dialect(call);
        let key = String::from_utf8_lossy(call.keys().next().unwrap_or_default()).into_owned();
        let pool = client.pool_for(&key);
        let acks = client
            .ack_setting()
            .and_then(|setting| setting.for_pool(&pool));
        Request { pool, call, acks }
    }

    /// The request without acknowledgements, for a write no failover may matter for.
    pub(crate) fn without_acks(self) -> Self {
        Request { acks: None, ..self }
    }
}

/// A request written to its server, whose answer is still to be read.
struct InFlight {
    connection: Pooled,
    /// The connection came from the idle list, so it may turn out to have been dead.
    was_idle: bool,
    /// How much longer than the caller's deadline its answer is awaited: a request that had
    /// to wait for a new connection gets the whole budget from its own send.
    extension: Duration,
}

/// A request's answer as read: on which connection, whether it came from the idle list, how
/// much longer than the caller's deadline it was awaited, and when it was due.
struct Read {
    connection: Pooled,
    was_idle: bool,
    extension: Duration,
    answer_by: Instant,
}

/// Sends every request's call to its server, all requests written before any answer is read,
/// and reads every answer, in order, until `deadline`. Answers one outcome per request.
pub(crate) fn call_all(requests: &[Request<'_>], deadline: Instant) -> Vec<Result<Acked<Value>>> {
    let mut fan_out = FanOut::send(requests, deadline);
    (0..requests.len())
        .map(|index| fan_out.read(index, deadline))
        .collect()
}

/// Requests written to their servers, whose answers the caller reads one by one, in the
/// order it likes, each until a deadline of its own; or abandons.
pub(crate) struct FanOut<'a> {
    requests: &'a [Request<'a>],
    packed: Vec<Vec<u8>>,
    /// Per request: written (and not read yet), or why not; `None` once read or abandoned.
    flights: Vec<Option<Result<InFlight>>>,
    /// The time the attempt was given, which a new connection also gets from its own send.
    budget: Duration,
}

impl<'a> FanOut<'a> {
    /// Writes every request, those with an idle connection first: a server that needs a new
    /// one (slow to connect, or not there) must not hold them up.
    pub(crate) fn send(requests: &'a [Request<'a>], deadline: Instant) -> Self {
        let budget = deadline.saturating_duration_since(Instant::now());
        let packed: Vec<Vec<u8>> = requests.iter().map(packed_request).collect();
        let idle: Vec<Option<Pooled>> = requests
            .iter()
            .map(|request| request.pool.take_idle())
            .collect();
        let mut flights: Vec<Option<Result<InFlight>>> = requests
            .iter()
            .zip(&packed)
            .zip(idle)
            .map(|((request, packed), idle)| {
                idle.map(|connection| {
                    request.call.note_sent();
                    send(&request.pool, packed, Some(connection), deadline, budget)
                })
            })
            .collect();
        for ((request, packed), flight) in requests.iter().zip(&packed).zip(&mut flights) {
            if flight.is_none() {
                request.call.note_sent();
                *flight = Some(send(&request.pool, packed, None, deadline, budget));
            }
        }
        FanOut {
            requests,
            packed,
            flights,
            budget,
        }
    }

    /// Reads the answer to request `index`, waiting no later than `deadline` (or, for a
    /// request that had to wait for a new connection, as long again from its send), and
    /// its `WAIT`'s, if it has one, until the ack timeout after that. A server whose script
    /// cache is empty gets the script and the request once more. After a timeout of the
    /// request's own answer it stays pending: the caller may [`abandon`](FanOut::abandon) it.
    pub(crate) fn read(&mut self, index: usize, deadline: Instant) -> Result<Acked<Value>> {
        let budget = self.budget;
        let InFlight {
            mut connection,
            was_idle,
            extension,
        } = self.flights[index]
            .take()
            .unwrap_or(Err(Error::Timeout(budget)))?;
        let request = &self.requests[index];
        let mut answer_by = deadline + extension;
        let answer = match read_in_time(&mut connection, answer_by) {
            Ok(Value::ServerError(err)) if err.kind() == Some(ServerErrorKind::NoScript) => {
                let (answer, reload_by) = self.reload(index, &mut connection, answer_by)?;
                // The `WAIT` behind the call sent again gets its time after this answer.
                answer_by = reload_by;
                answer
            }
            // The idle connection was dead before the request reached the server: once more
            // on a fresh one (a fresh connection is not retried, so this ends).
            Err(err) if was_idle && pool::is_stale_connection(&err) => {
                // Its place goes back first: the pool may have no other for the new one.
                drop(connection);
                request.call.note_sent();
                let packed = &self.packed[index];
                self.flights[index] = Some(send(&request.pool, packed, None, answer_by, budget));
                return self.read(index, answer_by);
            }
            answer => answer,
        };
        let read = Read {
            connection,
            was_idle,
            extension,
            answer_by,
        };
        self.settle(index, read, answer)
    }

    /// Request `index` again, on `connection`, after its server refused it for want of its
    /// script: the `WAIT` behind the refused call, which vouched for nothing, is read first
    /// (within its own timeout: only at its end while replicas are short), then the script
    /// is loaded and the request sent once more. Answers its answer and when it was due.
    fn reload(
        &self,
        index: usize,
        connection: &mut Connection,
        answer_by: Instant,
    ) -> Result<(RedisResult<Value>, Instant)> {
        let budget = self.budget;
        let request = &self.requests[index];
        let in_step = match request.acks.as_deref() {
            Some(acks) => {
                let stale_by = answer_by.max(Instant::now()) + acks.timeout();
                acks.read_answer(connection, stale_by, budget).1
            }
            None => Reading::Complete,
        };
        if in_step == Reading::AnswerLeft {
            return Err(Error::Timeout(budget));
        }
        let mut both = runner::load_command(&request.call).get_packed_command();
        both.extend_from_slice(&self.packed[index]);
        let reload_by = Instant::now() + budget;
        let answer = connection
            .send_packed_command(&both)
            .and_then(|()| read_in_time(connection, reload_by))
            .and_then(|_loaded| read_in_time(connection, reload_by));
        Ok((answer, reload_by))
    }

    /// Settles request `index` by the `answer` `read` on its connection: a timeout leaves it
    /// pending (it may still run; its connection stays for an undo behind it) and answers
    /// [`Error::Timeout`]; any other answer is finished (an answer's `WAIT` read, when it has
    /// one), and a new connection's failure explained.
    fn settle(
        &mut self,
        index: usize,
        read: Read,
        answer: RedisResult<Value>,
    ) -> Result<Acked<Value>> {
        let budget = self.budget;
        let Read {
            connection,
            was_idle,
            extension,
            answer_by,
        } = read;
        if matches!(&answer, Err(err) if err.is_timeout()) {
            self.flights[index] = Some(Ok(InFlight {
                connection,
                was_idle: false,
                extension,
            }));
            return Err(Error::Timeout(budget));
        }
        let request = &self.requests[index];
        let outcome = finish(request, connection, answer, answer_by, budget);
        if was_idle {
            return outcome;
        }
        // A new connection ended without an answer may have met a TLS-only server.
        let pool = &request.pool;
        outcome.map_err(|err| pool.explain_fresh_failure(err, pool::Stage::FirstCommand, answer_by))
    }

    /// Gives up on the answer to request `index`: writes `then` behind the request on its
    /// connection, so that the server runs it right after the request should the request
    /// ever run, and drops the connection without waiting. Answers whether `then` went out
    /// (it cannot where the request never did).
    ///
    /// Behind a request with a `WAIT`, `then` runs only if the server has not seen the
    /// connection closed while the `WAIT` still blocked: it frees such a client with its
    /// unread commands. Give up on such a request only when its answer did not come.
    pub(crate) fn abandon(&mut self, index: usize, then: &[u8]) -> bool {
        match self.flights[index].take() {
            Some(Ok(mut flight)) => flight.connection.send_packed_command(then).is_ok(),
            _ => false,
        }
    }

    /// Whether the answer to request `index` is still to be read (or was awaited in vain).
    pub(crate) fn is_pending(&self, index: usize) -> bool {
        matches!(self.flights[index], Some(Ok(_)))
    }
}

/// The bytes of a request: its call, and the `WAIT` behind it when it has one.
fn packed_request(request: &Request<'_>) -> Vec<u8> {
    let mut packed = request.call.command().get_packed_command();
    if let Some(acks) = request.acks.as_deref() {
        acks.command().write_packed_command(&mut packed);
    }
    packed
}

/// Writes `packed` on `idle`, or on a new connection; a dead idle connection is replaced
/// once.
fn send(
    pool: &Pool,
    packed: &[u8],
    idle: Option<Pooled>,
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
            extension: (Instant::now() + budget).saturating_duration_since(deadline),
        }),
        Err(err) if was_idle && pool::is_stale_connection(&err) => {
            // Its place goes back first: the pool may have no other for the new one.
            drop(connection);
            send(pool, packed, None, deadline, budget)
        }
        Err(err) => Err(Error::from_redis(err, budget)),
    }
}

/// Reads one answer: until `deadline`, or, when it has passed, one that is already there.
fn read_in_time(connection: &mut Connection, deadline: Instant) -> RedisResult<Value> {
    let left = deadline.saturating_duration_since(Instant::now());
    connection.set_read_timeout(Some(left.max(GRACE_AFTER_DEADLINE)))?;
    connection.recv_response()
}

/// Turns an answer into an outcome, with what the replicas acknowledged when the request
/// asked (its `WAIT` read until the ack timeout after `answer_by`), and gives the connection
/// back when it is in step.
fn finish(
    request: &Request<'_>,
    mut connection: Pooled,
    answer: RedisResult<Value>,
    answer_by: Instant,
    budget: Duration,
) -> Result<Acked<Value>> {
    let value = match answer {
        Ok(value) => value,
        // Dropped: the stream may still carry the late answer.
        Err(err) => return Err(Error::from_redis(err, budget)),
    };
    let (judged, reading) = match request.acks.as_deref() {
        Some(acks) => {
            let acks_by = answer_by + acks.timeout();
            let (judged, reading) =
                acks.read_answer(&mut connection, acks_by, budget + acks.timeout());
            (Some(judged), reading)
        }
        None => (None, Reading::Complete),
    };
    // Read on a connection to a server that may have been demoted since it was made.
    let current = request.pool.check_current(&connection);
    if reading == Reading::Complete {
        request.pool.give_back(connection);
    }
    current?;
    match value {
        Value::ServerError(err) => {
            let err = err.into();
            // A `MOVED` answer in cluster mode: the map learns it for the next attempt.
            request.pool.failed(&err);
            Err(Error::from_server(err).for_user(request.pool.user()))
        }
        answer => Ok(match judged {
            Some(judged) => Acked::judged(answer, judged),
            None => Acked::unasked(answer),
        }),
    }
}
