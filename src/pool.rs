//! A small pool of command connections to one Redis server.
//!
//! Every connection is made with the connect timeout and carries the response timeout as its
//! socket read and write timeout, so no command waits unbounded. A connection that saw an I/O
//! error or a timeout is dropped, never reused: its stream may hold a late answer. No thread
//! of its own; connections are made on demand by the calling thread and kept idle up to a
//! bound.

use std::time::Duration;

use parking_lot::Mutex;
use redis::{Connection, ConnectionLike, RedisResult};

use crate::error::{Error, Result};

pub(crate) struct Pool {
    client: redis::Client,
    idle: Mutex<Vec<Connection>>,
    max_idle: usize,
    connect_timeout: Duration,
    response_timeout: Duration,
}

impl Pool {
    pub(crate) fn new(
        client: redis::Client,
        connect_timeout: Duration,
        response_timeout: Duration,
        max_idle: usize,
    ) -> Self {
        Pool {
            client,
            idle: Mutex::new(Vec::new()),
            max_idle,
            connect_timeout,
            response_timeout,
        }
    }

    pub(crate) fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// Runs `command` on a pooled connection with the configured response timeout.
    ///
    /// When a connection that sat idle turns out to be dead (the server restarted or closed
    /// it), all idle connections are dropped and `command` runs once more on a fresh one.
    pub(crate) fn run<T>(
        &self,
        command: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> Result<T> {
        self.run_with_timeout(self.response_timeout, command)
    }

    /// Like [`Pool::run`], with `timeout` as this call's response timeout and as the most a
    /// new connection for it may take.
    pub(crate) fn run_with_timeout<T>(
        &self,
        timeout: Duration,
        mut command: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> Result<T> {
        let timeout = timeout.max(Duration::from_millis(1));
        let pooled = self.idle.lock().pop();
        if let Some(connection) = pooled {
            match self.run_on(connection, timeout, &mut command) {
                Err(err) if is_stale_connection(&err) => {
                    log::debug!("dropping idle redis connections after: {err}");
                    self.idle.lock().clear();
                }
                outcome => return outcome.map_err(|err| Error::from_redis(err, timeout)),
            }
        }
        let connection = self.connect(self.connect_timeout.min(timeout))?;
        self.run_on(connection, timeout, &mut command)
            .map_err(|err| Error::from_redis(err, timeout))
    }

    fn run_on<T>(
        &self,
        mut connection: Connection,
        timeout: Duration,
        command: &mut impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let custom_timeout = timeout != self.response_timeout;
        if custom_timeout {
            connection.set_read_timeout(Some(timeout))?;
        }
        let outcome = command(&mut connection);
        let reusable = match &outcome {
            Ok(_) => connection.is_open(),
            // The server answered: the stream is in step with our requests.
            Err(err) => !(err.is_io_error() || err.is_timeout()) && connection.is_open(),
        };
        if reusable
            && (!custom_timeout
                || connection
                    .set_read_timeout(Some(self.response_timeout))
                    .is_ok())
        {
            let mut idle = self.idle.lock();
            if idle.len() < self.max_idle {
                idle.push(connection);
            }
        }
        outcome
    }

    fn connect(&self, timeout: Duration) -> Result<Connection> {
        let connection = self
            .client
            .get_connection_with_timeout(timeout)
            .map_err(|err| Error::from_redis(err, timeout))?;
        for outcome in [
            connection.set_read_timeout(Some(self.response_timeout)),
            connection.set_write_timeout(Some(self.response_timeout)),
        ] {
            outcome.map_err(|err| Error::from_redis(err, timeout))?;
        }
        Ok(connection)
    }
}

/// An error that says the connection was dead before we used it, not that the server is slow.
fn is_stale_connection(err: &redis::RedisError) -> bool {
    !err.is_timeout() && (err.is_connection_dropped() || err.is_io_error())
}
