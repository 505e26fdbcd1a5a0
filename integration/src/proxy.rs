//! A loopback TCP proxy in front of one server address, for network faults:
//! black-hole a connection, freeze the replies, cut every connection.
//!
//! The proxy owns a thread running a current-thread tokio runtime. Each
//! accepted client gets its own connection to the target and two pumps, one
//! per direction. A stopped direction simply stops reading: the bytes wait
//! in the socket buffers (plus at most one chunk the pump had read when the
//! mode changed), exactly as TCP keeps retransmitting through a partition.
//! When the direction is allowed again the held bytes are delivered first,
//! in order.

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::bounded;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

/// What a [`Proxy`] forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    /// Everything, both ways.
    Pass,
    /// Nothing either way; connections stay open and new ones are accepted
    /// but not connected upstream. A client's requests time out.
    Blackhole,
    /// Client → server only; the server's replies are held.
    FreezeReplies,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    ToServer,
    ToClient,
}

impl ProxyMode {
    fn forwards(self, direction: Direction) -> bool {
        match self {
            ProxyMode::Pass => true,
            ProxyMode::Blackhole => false,
            ProxyMode::FreezeReplies => direction == Direction::ToServer,
        }
    }
}

enum Control {
    DropConnections(crossbeam_channel::Sender<()>),
    Shutdown,
}

/// A TCP proxy from its own loopback port to one target address.
///
/// Dropping it closes its port and every connection and joins its thread.
pub struct Proxy {
    addr: SocketAddr,
    target: SocketAddr,
    mode: watch::Sender<ProxyMode>,
    control: mpsc::UnboundedSender<Control>,
    connections: Arc<AtomicUsize>,
    accepted: Arc<AtomicUsize>,
    /// Added to every reply chunk, in microseconds ([`Proxy::set_delay`]).
    delay: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .field("target", &self.target)
            .field("mode", &self.mode())
            .field("connections", &self.connection_count())
            .field("accepted", &self.accepted_count())
            .finish()
    }
}

impl Proxy {
    /// Starts a proxy in [`ProxyMode::Pass`] on a free loopback port.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound or the thread cannot start.
    pub fn start(target: SocketAddr) -> Proxy {
        Proxy::try_start(target).unwrap_or_else(|e| panic!("cannot start a proxy to {target}: {e}"))
    }

    /// Starts a proxy in [`ProxyMode::Pass`] on a free loopback port.
    ///
    /// # Errors
    ///
    /// When no loopback port can be bound or the thread cannot start.
    pub fn try_start(target: SocketAddr) -> io::Result<Proxy> {
        // The proxy keeps its listener for life, so an ephemeral port is safe.
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (mode, mode_rx) = watch::channel(ProxyMode::Pass);
        let (control, control_rx) = mpsc::unbounded_channel();
        let connections = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicUsize::new(0));
        let delay = Arc::new(AtomicU64::new(0));
        let counters = Counters {
            open: connections.clone(),
            accepted: accepted.clone(),
            delay: delay.clone(),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name(format!("proxy-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    match TcpListener::from_std(listener) {
                        Ok(listener) => {
                            accept_loop(listener, target, mode_rx, control_rx, counters).await
                        }
                        Err(e) => log::warn!("[proxy {addr}] cannot register listener: {e}"),
                    }
                });
                // Dropping the runtime here drops every connection task.
            })?;
        Ok(Proxy {
            addr,
            target,
            mode,
            control,
            connections,
            accepted,
            delay,
            thread: Some(thread),
        })
    }

    /// The proxy's own address; point clients here.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address it forwards to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// The current mode.
    pub fn mode(&self) -> ProxyMode {
        *self.mode.borrow()
    }

    /// Client connections currently open through the proxy.
    pub fn connection_count(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Client connections accepted since the proxy started (a client that
    /// reconnected counts twice).
    pub fn accepted_count(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Forwards nothing either way from now on; connections stay open.
    pub fn blackhole(&self) {
        self.mode.send_replace(ProxyMode::Blackhole);
    }

    /// Forwards client → server but holds the server's replies from now on.
    pub fn freeze_replies(&self) {
        self.mode.send_replace(ProxyMode::FreezeReplies);
    }

    /// Back to forwarding everything; held bytes are delivered first, in
    /// order.
    pub fn restore(&self) {
        self.mode.send_replace(ProxyMode::Pass);
    }

    /// Holds every chunk of the server's replies for `delay` before
    /// passing it on (zero: none, the default), on every connection from
    /// now on: each round trip through the proxy takes `delay` longer, as
    /// on a distant network. Chunks keep their order.
    pub fn set_delay(&self, delay: Duration) {
        let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.delay.store(micros, Ordering::SeqCst);
    }

    /// Closes every current connection (held bytes are lost) and returns
    /// once they are closed. New connections are accepted; the mode stays.
    pub fn drop_connections(&self) {
        let (ack, done) = bounded(1);
        if self.control.send(Control::DropConnections(ack)).is_ok() {
            let _ = done.recv();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.control.send(Control::Shutdown);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    mode: watch::Receiver<ProxyMode>,
    mut control: mpsc::UnboundedReceiver<Control>,
    counters: Counters,
) {
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    counters.accepted.fetch_add(1, Ordering::SeqCst);
                    let open = OpenConnection::new(&counters.open);
                    tasks.spawn(serve(client, target, mode.clone(), open, counters.delay.clone()));
                }
                Err(e) => log::debug!("[proxy {target}] accept failed: {e}"),
            },
            command = control.recv() => match command {
                Some(Control::DropConnections(ack)) => {
                    tasks.abort_all();
                    while tasks.join_next().await.is_some() {}
                    let _ = ack.send(());
                }
                Some(Control::Shutdown) | None => return,
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
}

struct Counters {
    open: Arc<AtomicUsize>,
    accepted: Arc<AtomicUsize>,
    delay: Arc<AtomicU64>,
}

/// Counts an open client connection for as long as it lives.
struct OpenConnection(Arc<AtomicUsize>);

impl OpenConnection {
    fn new(counter: &Arc<AtomicUsize>) -> OpenConnection {
        counter.fetch_add(1, Ordering::SeqCst);
        OpenConnection(counter.clone())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn serve(
    mut client: TcpStream,
    target: SocketAddr,
    mut mode: watch::Receiver<ProxyMode>,
    _open: OpenConnection,
    delay: Arc<AtomicU64>,
) {
    // Through a partition a connect would hang too: connect upstream only
    // once something may flow.
    while *mode.borrow_and_update() == ProxyMode::Blackhole {
        if mode.changed().await.is_err() {
            return;
        }
    }
    let mut server = match TcpStream::connect(target).await {
        Ok(server) => server,
        // The client sees its connection closed, as with a refused connect.
        Err(e) => {
            log::debug!("[proxy {target}] upstream connect failed: {e}");
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.split();
    let (server_read, server_write) = server.split();
    let result = tokio::try_join!(
        pump(
            client_read,
            server_write,
            Direction::ToServer,
            mode.clone(),
            None
        ),
        pump(
            server_read,
            client_write,
            Direction::ToClient,
            mode,
            Some(delay)
        ),
    );
    if let Err(e) = result {
        log::debug!("[proxy {target}] connection ended: {e}");
    }
}

async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    direction: Direction,
    mut mode: watch::Receiver<ProxyMode>,
    delay: Option<Arc<AtomicU64>>,
) -> io::Result<()> {
    let mut buffer = vec![0u8; 64 * 1024];
    let mut held: Vec<u8> = Vec::new();
    loop {
        loop {
            let forwards = mode.borrow_and_update().forwards(direction);
            if forwards {
                break;
            }
            if mode.changed().await.is_err() {
                return Ok(());
            }
        }
        if !held.is_empty() {
            to.write_all(&held).await?;
            held.clear();
        }
        let n = from.read(&mut buffer).await?;
        if n == 0 {
            // Pass the half-close on; the other direction keeps flowing.
            let _ = to.shutdown().await;
            return Ok(());
        }
        // The mode may have changed while we waited for these bytes.
        let micros = delay.as_ref().map_or(0, |d| d.load(Ordering::SeqCst));
        if micros > 0 {
            tokio::time::sleep(Duration::from_micros(micros)).await;
        }
        let forwards = mode.borrow().forwards(direction);
        if forwards {
            to.write_all(&buffer[..n]).await?;
        } else {
            held.extend_from_slice(&buffer[..n]);
        }
    }
}
