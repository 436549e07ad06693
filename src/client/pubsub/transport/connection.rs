//! The transport of the subscribed connection: where it goes (a host and port looked up
//! through the manager's resolver, a Unix socket, the master the sentinels name now, or a
//! node of a cluster),
//! connecting within the connect timeout (for `rediss://`, the TLS handshake included: see
//! [`super::tls_stream`]), `AUTH`, and the handles with their timeouts.
//!
//! Knows nothing of channels or waiters; touches only sockets, the TLS stream, the resolver
//! and the master locator (and reads a cluster node's address).

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
#[cfg(unix)]
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ConnectionInfo};

use super::frame::{self, Frame};
#[cfg(feature = "tls")]
use super::tls_stream::TlsStream;
use crate::client::pubsub::LoginRefused;
use crate::client::topology::cluster::NodeAddress;
use crate::client::topology::deadline::time_left;
use crate::client::topology::resolve::{ResolveError, Resolver};
use crate::client::topology::sentinel::MasterLocator;
use crate::client::topology::tls::TlsConnector;
use crate::error::{Error, Result};

/// Where the subscribed connection goes, and how it authenticates.
pub(in crate::client::pubsub) struct Endpoint {
    address: Address,
    /// For `rediss://`: the TLS set-up the command connections use too (shared by the node
    /// hubs of a cluster).
    tls: Option<Arc<TlsConnector>>,
    /// The name the server's certificate must be valid for, when not the URL's host: a
    /// cluster node's host, as the cluster names it.
    tls_host: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

enum Address {
    /// A host and port, looked up through the manager's resolver.
    Tcp(Arc<Resolver>),
    #[cfg(unix)]
    Unix(PathBuf),
    /// The master the sentinels name at the time of connecting.
    Master(Arc<MasterLocator>),
}

impl Endpoint {
    /// The endpoint of `info`'s address, or of the master `located` names (then `info` gives
    /// only the credentials).
    pub(in crate::client::pubsub) fn from_info(
        info: &ConnectionInfo,
        resolver: Option<Arc<Resolver>>,
        located: Option<Arc<MasterLocator>>,
        tls: Option<TlsConnector>,
    ) -> Result<Self> {
        let address = match (located, info.addr(), &tls) {
            (Some(locator), _, _) => Address::Master(locator),
            (None, ConnectionAddr::Tcp(host, port), None)
            | (None, ConnectionAddr::TcpTls { host, port, .. }, Some(_)) => {
                Address::Tcp(resolver.unwrap_or_else(|| Arc::new(Resolver::new(host, *port))))
            }
            #[cfg(unix)]
            (None, ConnectionAddr::Unix(path), None) => Address::Unix(path.clone()),
            (None, other, _) => {
                return Err(Error::InvalidArgument(format!(
                    "unsupported redis address {other}: use redis://, rediss:// or redis+unix://"
                )))
            }
        };
        let settings = info.redis_settings();
        Ok(Endpoint {
            address,
            tls: tls.map(Arc::new),
            tls_host: None,
            username: settings.username().map(str::to_owned),
            password: settings.password().map(str::to_owned),
        })
    }

    /// The endpoint of a cluster node at `address`, with the credentials of `info` (the
    /// manager's settings at that node), over TLS when `info` asks for it; the node's
    /// certificate is checked against the host the cluster names, as the command connections
    /// check it.
    pub(in crate::client::pubsub) fn node(
        address: &NodeAddress,
        info: &ConnectionInfo,
        tls: Option<Arc<TlsConnector>>,
    ) -> Result<Self> {
        match (info.addr(), &tls) {
            (ConnectionAddr::Tcp(..), None) | (ConnectionAddr::TcpTls { .. }, Some(_)) => {}
            (other, _) => {
                return Err(Error::InvalidArgument(format!(
                    "unsupported redis address {other} for a cluster node: use redis:// or \
                     rediss://"
                )))
            }
        }
        let settings = info.redis_settings();
        Ok(Endpoint {
            address: Address::Tcp(Arc::new(Resolver::new(&address.host, address.port))),
            tls_host: tls.as_ref().map(|_| address.host.clone()),
            tls,
            username: settings.username().map(str::to_owned),
            password: settings.password().map(str::to_owned),
        })
    }

    /// Connects (the host name lookup and the TLS handshake included) within `timeout`, then
    /// authenticates within `timeout` again.
    pub(in crate::client::pubsub) fn connect(&self, timeout: Duration) -> io::Result<Stream> {
        let give_up_at = Instant::now() + timeout;
        let stream = match &self.address {
            Address::Tcp(resolver) => {
                let socket = connect_tcp(resolver, give_up_at)?;
                self.secure(socket, self.tls_host.as_deref(), give_up_at, timeout)?
            }
            #[cfg(unix)]
            Address::Unix(path) => Stream::Unix(UnixStream::connect(path)?),
            Address::Master(locator) => {
                let (host, port) = locator.address();
                let connected = connect_tcp(&Resolver::new(&host, port), give_up_at);
                if connected.is_err() {
                    // The master may have moved: the next try goes where the sentinels say.
                    locator.ask_again();
                }
                self.secure(connected?, Some(&host), give_up_at, timeout)?
            }
        };
        if let Some(password) = &self.password {
            let give_up_at = Instant::now() + timeout;
            let mut auth = redis::cmd("AUTH");
            if let Some(username) = &self.username {
                auth.arg(username);
            }
            stream.write_all_by(&auth.arg(password).get_packed_command(), give_up_at)?;
            if let Frame::Error(message) = read_one_frame(&stream, give_up_at)? {
                let reply = String::from_utf8_lossy(&message).into_owned();
                return Err(io::Error::other(LoginRefused(reply)));
            }
        }
        Ok(stream)
    }
}

impl Endpoint {
    /// `socket` as it is, or with TLS over it for `rediss://` (the certificate checked
    /// against `host` when given, else against the URL's host), the handshake done by
    /// `give_up_at`.
    fn secure(
        &self,
        socket: TcpStream,
        host: Option<&str>,
        give_up_at: Instant,
        timeout: Duration,
    ) -> io::Result<Stream> {
        match &self.tls {
            None => Ok(Stream::Tcp(socket)),
            #[cfg(feature = "tls")]
            Some(connector) => {
                let session = match host {
                    Some(host) => connector.session_for(host)?,
                    None => connector.session()?,
                };
                let stream = TlsStream::handshake(socket, session, give_up_at, timeout)?;
                Ok(Stream::Tls(stream))
            }
            #[cfg(not(feature = "tls"))]
            Some(never) => {
                let _ = (socket, host, give_up_at, timeout);
                match **never {}
            }
        }
    }
}

/// Tries the addresses the resolver gives for the host, in order, until one answers.
fn connect_tcp(resolver: &Resolver, give_up_at: Instant) -> io::Result<TcpStream> {
    // The lookup and the TCP connect share the timeout.
    let addresses = resolver
        .resolve(give_up_at.saturating_duration_since(Instant::now()))
        .map_err(ResolveError::into_io_error)?;
    let mut last_error = None;
    for address in addresses {
        let left = give_up_at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(&address, left) {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Err(err) => last_error = Some(err),
        }
    }
    match last_error {
        Some(err) => {
            // The name may have moved (a failover): look it up again next time.
            resolver.distrust_cache();
            Err(err)
        }
        None => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "no time left to connect after the host name lookup",
        )),
    }
}

/// Reads one reply (to `AUTH`) before `give_up_at`.
fn read_one_frame(stream: &Stream, give_up_at: Instant) -> io::Result<Frame> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        let read = stream.read_by(&mut chunk, give_up_at)?;
        if read == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buffer.extend_from_slice(&chunk[..read]);
        if let Some((frame, _)) = frame::parse(&buffer).map_err(|err| io::Error::other(err.0))? {
            return Ok(frame);
        }
    }
}

/// A TCP or Unix socket, or a TLS stream over TCP. The listener reads from one handle while
/// the writer of the hub's outbox writes to a clone of it (see `try_clone`); either may end
/// the connection for both.
pub(in crate::client::pubsub) enum Stream {
    Tcp(TcpStream),
    /// Its clones share one TLS session (see [`super::tls_stream`]).
    #[cfg(feature = "tls")]
    Tls(TlsStream),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl Stream {
    pub(in crate::client::pubsub) fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(stream) => Stream::Tcp(stream.try_clone()?),
            #[cfg(feature = "tls")]
            Stream::Tls(stream) => Stream::Tls(stream.try_clone()?),
            #[cfg(unix)]
            Stream::Unix(stream) => Stream::Unix(stream.try_clone()?),
        })
    }

    /// Ends the connection for every handle; a blocked read or write returns at once. Never
    /// blocks, so it may be called under the hub's lock.
    pub(in crate::client::pubsub) fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(stream) => stream.shutdown(Shutdown::Both),
            #[cfg(feature = "tls")]
            Stream::Tls(stream) => {
                stream.shutdown();
                Ok(())
            }
            #[cfg(unix)]
            Stream::Unix(stream) => stream.shutdown(Shutdown::Both),
        };
    }

    pub(in crate::client::pubsub) fn set_read_timeout(
        &self,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.set_read_timeout(timeout),
            #[cfg(feature = "tls")]
            Stream::Tls(stream) => stream.socket().set_read_timeout(timeout),
            #[cfg(unix)]
            Stream::Unix(stream) => stream.set_read_timeout(timeout),
        }
    }

    /// Reads what has arrived, waiting at most the read timeout set last (for TLS: for each
    /// read of the socket, until a whole record has come).
    pub(in crate::client::pubsub) fn read(&self, buffer: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => (&*stream).read(buffer),
            #[cfg(feature = "tls")]
            Stream::Tls(stream) => stream.read(buffer),
            #[cfg(unix)]
            Stream::Unix(stream) => (&*stream).read(buffer),
        }
    }

    /// Reads what has arrived, waiting at most until `give_up_at`.
    fn read_by(&self, buffer: &mut [u8], give_up_at: Instant) -> io::Result<usize> {
        loop {
            self.set_read_timeout(Some(time_left(give_up_at)?))?;
            match self.read(buffer) {
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                result => return result,
            }
        }
    }

    /// Writes all of `bytes` by `give_up_at`: a server that takes them slowly does not extend
    /// the wait.
    pub(in crate::client::pubsub) fn write_all_by(
        &self,
        mut bytes: &[u8],
        give_up_at: Instant,
    ) -> io::Result<()> {
        while !bytes.is_empty() {
            let written = match self {
                Stream::Tcp(stream) => {
                    stream.set_write_timeout(Some(time_left(give_up_at)?))?;
                    (&*stream).write(bytes)
                }
                #[cfg(feature = "tls")]
                Stream::Tls(stream) => return stream.write_all_by(bytes, give_up_at),
                #[cfg(unix)]
                Stream::Unix(stream) => {
                    stream.set_write_timeout(Some(time_left(give_up_at)?))?;
                    (&*stream).write(bytes)
                }
            };
            match written {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(written) => bytes = &bytes[written..],
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }
}
