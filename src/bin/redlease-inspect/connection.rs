//! The tool's one connection to Redis, every call on it bounded in time, and the failures
//! that end the tool with their exit codes.

use std::sync::mpsc;
use std::time::Duration;

use redlease::redis::{self, Connection, RedisError};

/// Why a command did not do its job, and so how the tool exits.
#[derive(Debug)]
pub enum Failure {
    /// Nothing of the kind asked for is there (exit code 1).
    NotFound(String),
    /// The operator did not confirm (exit code 1).
    Declined(String),
    /// The arguments do not fit, or the server cannot be asked (exit code 2).
    Usage(String),
}

impl Failure {
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::NotFound(_) | Failure::Declined(_) => 1,
            Failure::Usage(_) => 2,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Failure::NotFound(message) | Failure::Declined(message) | Failure::Usage(message) => {
                message
            }
        }
    }
}

impl From<RedisError> for Failure {
    fn from(error: RedisError) -> Self {
        Failure::Usage(format!("redis: {error}"))
    }
}

impl From<redlease::Error> for Failure {
    fn from(error: redlease::Error) -> Self {
        Failure::Usage(format!("redis: {error}"))
    }
}

/// Connects `client` within `connect_timeout`, name lookup and handshake included, and sets
/// `response_timeout` on the socket so that no later call waits longer.
///
/// redis-rs bounds the TCP connect but neither the host name lookup nor the handshake
/// (AUTH, SELECT), so the connection is made on a thread of its own and abandoned if it is
/// not there in time: the tool exits soon after, taking the thread with it.
pub fn connect(
    client: redis::Client,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<Connection, Failure> {
    // The URL may carry a password: messages name only the server's address.
    let server = client.get_connection_info().addr().to_string();
    let (done, outcome) = mpsc::channel();
    std::thread::spawn(move || {
        let connection = client
            .get_connection_with_timeout(connect_timeout)
            .and_then(|connection| {
                connection.set_read_timeout(Some(response_timeout))?;
                connection.set_write_timeout(Some(response_timeout))?;
                Ok(connection)
            });
        let _ = done.send(connection);
    });
    match outcome.recv_timeout(connect_timeout) {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(error)) => Err(Failure::Usage(format!(
            "cannot connect to {server}: {error}"
        ))),
        Err(_) => Err(Failure::Usage(format!(
            "cannot connect to {server}: no connection within {connect_timeout:?}"
        ))),
    }
}
