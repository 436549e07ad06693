//! The TLS stream of the subscribed connection: one rustls session shared by the listener's
//! reading handle and the outbox's writing handle.
//!
//! A plaintext connection gives each side a clone of its socket (`try_clone`). A TLS session
//! cannot be cloned, so here the session (rustls's sans-I/O [`ClientConnection`]) sits behind
//! a mutex that every handle shares, and each handle has its own clone of the TCP socket:
//! - The reader blocks on its socket without the session's lock, for at most its read
//!   timeout (the listener's tick), then feeds what came under the lock: `read_tls`,
//!   `process_new_packets`, the plaintext drained into a buffer of the handles', and what
//!   rustls must send in answer (an alert, a key update) written at once, still under the
//!   lock, within the connect timeout.
//! - The writer encrypts under the lock and writes the records to its socket before letting
//!   go, by the deadline of its batch.
//!
//! Only the holder of the lock writes, so records reach the socket in the order rustls made
//! them. The lock is never held while waiting for the server to send; the hub's lock is never
//! taken under it, nor it under the hub's lock (the outbox writes outside the hub's lock, and
//! shutting down does not take it). A writer stalled on a full socket holds up the reader's
//! next batch of frames, at most until its deadline.
//!
//! Shutting down shuts the TCP socket down, which ends every clone, without the lock: a
//! blocked read or write returns at once. No `close_notify` is sent: it would need the lock,
//! and shutting down must never block. The handshake runs before the stream is cloned, within
//! the connect deadline.
//!
//! Touches only its sockets and the session; knows nothing of Redis.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustls::ClientConnection;

use crate::client::topology::deadline::time_left;

/// The most read from the socket at once: a whole TLS record with its header.
const SOCKET_CHUNK: usize = 16 * 1024 + 256;

/// One handle of a TLS connection; clones share the session and the decrypted bytes.
pub(in crate::client::pubsub) struct TlsStream {
    socket: TcpStream,
    session: Arc<Mutex<ClientConnection>>,
    /// Plaintext decrypted and not read yet. Only readers take this lock (there is one, the
    /// listener), and they hold it while they wait on the socket.
    unread: Arc<Mutex<Unread>>,
    /// How long the records rustls sends in answer to the server's (alerts, key updates) may
    /// take to write: the connect timeout.
    answer_write_timeout: Duration,
}

struct Unread {
    bytes: Vec<u8>,
    /// The server ended the TLS session (`close_notify`): nothing more will come.
    closed: bool,
    /// Where the bytes read from the socket land, kept from one read to the next.
    chunk: Vec<u8>,
}

impl Unread {
    fn new() -> Self {
        Unread {
            bytes: Vec::new(),
            closed: false,
            chunk: vec![0u8; SOCKET_CHUNK],
        }
    }
}

impl TlsStream {
    /// Runs the handshake of `session` on `socket` until it completes or `give_up_at`.
    ///
    /// A server that answers with something else than TLS fails it with rustls's
    /// `InvalidContentType`; a server that refuses fails it with the alert it sent; both
    /// inside an `io::Error` of kind `InvalidData`, as redis-rs reports them.
    pub(in crate::client::pubsub) fn handshake(
        socket: TcpStream,
        mut session: ClientConnection,
        give_up_at: Instant,
        answer_write_timeout: Duration,
    ) -> io::Result<Self> {
        let mut unread = Unread::new();
        let mut chunk = std::mem::take(&mut unread.chunk);
        loop {
            write_pending(&mut session, &socket, give_up_at)?;
            if !session.is_handshaking() {
                break;
            }
            socket.set_read_timeout(Some(time_left(give_up_at)?))?;
            let read = match (&socket).read(&mut chunk) {
                Ok(read) => read,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            };
            if read == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection during the TLS handshake",
                ));
            }
            feed(
                &mut session,
                &chunk[..read],
                &mut unread,
                &socket,
                give_up_at,
            )?;
        }
        unread.chunk = chunk;
        Ok(TlsStream {
            socket,
            session: Arc::new(Mutex::new(session)),
            unread: Arc::new(Mutex::new(unread)),
            answer_write_timeout,
        })
    }

    /// Another handle of the same connection, with its own clone of the socket.
    pub(in crate::client::pubsub) fn try_clone(&self) -> io::Result<Self> {
        Ok(TlsStream {
            socket: self.socket.try_clone()?,
            session: Arc::clone(&self.session),
            unread: Arc::clone(&self.unread),
            answer_write_timeout: self.answer_write_timeout,
        })
    }

    /// Ends the connection for every handle, at once; never blocks.
    pub(in crate::client::pubsub) fn shutdown(&self) {
        let _ = self.socket.shutdown(Shutdown::Both);
    }

    /// The socket, for its timeouts.
    pub(in crate::client::pubsub) fn socket(&self) -> &TcpStream {
        &self.socket
    }

    /// Reads decrypted bytes: those already there, or else waits on the socket (at most its
    /// read timeout for each read) until a whole record has come. `Ok(0)` once the server has
    /// ended the connection.
    pub(in crate::client::pubsub) fn read(&self, buffer: &mut [u8]) -> io::Result<usize> {
        let mut unread = self.unread.lock();
        while unread.bytes.is_empty() {
            if unread.closed {
                return Ok(0);
            }
            let mut chunk = std::mem::take(&mut unread.chunk);
            let fed = self.read_and_feed(&mut chunk, &mut unread);
            unread.chunk = chunk;
            if fed? == 0 {
                return Ok(0);
            }
        }
        let count = buffer.len().min(unread.bytes.len());
        buffer[..count].copy_from_slice(&unread.bytes[..count]);
        unread.bytes.drain(..count);
        Ok(count)
    }

    /// Reads the socket into `chunk` (waiting at most its read timeout) and feeds what came to
    /// the session; answers how many bytes came (0: the server closed the connection).
    fn read_and_feed(&self, chunk: &mut [u8], unread: &mut Unread) -> io::Result<usize> {
        // Without the session's lock: the writer may encrypt and send meanwhile.
        let read = (&self.socket).read(chunk)?;
        if read > 0 {
            let mut session = self.session.lock();
            let answer_by = Instant::now() + self.answer_write_timeout;
            feed(
                &mut session,
                &chunk[..read],
                unread,
                &self.socket,
                answer_by,
            )?;
        }
        Ok(read)
    }

    /// Encrypts all of `bytes` and writes them by `give_up_at`.
    pub(in crate::client::pubsub) fn write_all_by(
        &self,
        mut bytes: &[u8],
        give_up_at: Instant,
    ) -> io::Result<()> {
        let mut session = self.session.lock();
        while !bytes.is_empty() {
            // rustls takes as much as its send buffer holds; what it took is written before
            // the rest is offered.
            let taken = session.writer().write(bytes)?;
            if taken == 0 && !session.wants_write() {
                return Err(io::ErrorKind::WriteZero.into());
            }
            bytes = &bytes[taken..];
            write_pending(&mut session, &self.socket, give_up_at)?;
        }
        Ok(())
    }
}

/// Hands `bytes` from the socket to the session, keeps the plaintext they complete in
/// `unread`, and writes what rustls has to send in answer by `write_by`.
fn feed(
    session: &mut ClientConnection,
    mut bytes: &[u8],
    unread: &mut Unread,
    socket: &TcpStream,
    write_by: Instant,
) -> io::Result<()> {
    while !bytes.is_empty() {
        session.read_tls(&mut bytes)?;
        if let Err(err) = session.process_new_packets() {
            // rustls has queued an alert that tells the server why; it may not get there.
            let _ = write_pending(session, socket, write_by);
            return Err(io::Error::new(io::ErrorKind::InvalidData, err));
        }
        // Drained every time, so rustls's plaintext buffer never fills up.
        match session.reader().read_to_end(&mut unread.bytes) {
            Ok(_) => unread.closed = true,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            Err(err) => return Err(err),
        }
    }
    write_pending(session, socket, write_by)
}

/// Writes the records rustls has ready by `give_up_at`.
fn write_pending(
    session: &mut ClientConnection,
    socket: &TcpStream,
    give_up_at: Instant,
) -> io::Result<()> {
    while session.wants_write() {
        socket.set_write_timeout(Some(time_left(give_up_at)?))?;
        match session.write_tls(&mut &*socket) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}
