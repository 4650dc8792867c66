//! A hostile gRPC client on raw HTTP/2 (the `h2` crate, no tonic): streams opened and left
//! unfinished, messages whose length prefix promises more than ever comes, long-lived calls
//! left idle, from any loopback address. What a client can make sluice hold is measured with
//! it ([`attack`]: `crates/sluice/tests/memory_bounds.rs`, `loadtest/pin-memory.sh`).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use h2::client::SendRequest;
use tokio::net::TcpSocket;
use tokio::task::JoinHandle;

pub mod attack;

/// How a stream ended, as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The server answered with this `grpc-status` (in the headers or the trailers).
    Status(i32),
    /// The server reset the stream (RST_STREAM) with this reason.
    Reset(h2::Reason),
    /// The connection failed or closed under the stream.
    Gone(String),
}

impl End {
    /// Whether the server refused or cut the stream (anything but `grpc-status: 0`).
    pub fn refused(&self) -> bool {
        !matches!(self, End::Status(0))
    }
}

/// One HTTP/2 connection to a gRPC server.
pub struct Client {
    send: SendRequest<Bytes>,
    driver: JoinHandle<()>,
}

/// A stream this client opened and keeps open (its send half is held, so it is never reset or
/// ended by the client unless asked).
pub struct Open {
    send: h2::SendStream<Bytes>,
    end: Arc<Mutex<Option<End>>>,
}

impl Client {
    /// Connects to `server` from `from` (any address of `127.0.0.0/8` is this host's loopback,
    /// so each is a different client address to the server).
    pub async fn connect(server: SocketAddr, from: IpAddr) -> io::Result<Self> {
        Self::connect_with_window(server, from, u32::MAX >> 1).await
    }

    /// [`connect`](Self::connect) with the flow-control windows the client grants the server:
    /// 0 and the server can send no answer's body at all (a client that never reads).
    pub async fn connect_with_window(
        server: SocketAddr,
        from: IpAddr,
        window: u32,
    ) -> io::Result<Self> {
        let socket = match from {
            IpAddr::V4(_) => TcpSocket::new_v4()?,
            IpAddr::V6(_) => TcpSocket::new_v6()?,
        };
        socket.bind(SocketAddr::new(from, 0))?;
        let tcp = socket.connect(server).await?;
        tcp.set_nodelay(true)?;
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(window)
            .initial_connection_window_size(window.max(65_535))
            .handshake(tcp)
            .await
            .map_err(io::Error::other)?;
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Self { send, driver })
    }

    /// Opens a call to `path` (`/package.Service/Method`), sends `body`, and ends the request
    /// if `end`; the answer is read in the background ([`Open::end`]). Waits while the
    /// connection has no stream to spare (the server's `SETTINGS_MAX_CONCURRENT_STREAMS`).
    pub async fn open(&mut self, path: &str, body: Bytes, end: bool) -> io::Result<Open> {
        let request = http::Request::post(format!("http://sluice{path}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .map_err(io::Error::other)?;
        let ready = self.send.clone().ready().await.map_err(io::Error::other)?;
        self.send = ready;
        let (response, mut send) = self
            .send
            .send_request(request, body.is_empty() && end)
            .map_err(io::Error::other)?;
        if !body.is_empty() {
            send.send_data(body, end).map_err(io::Error::other)?;
        }
        let slot = Arc::new(Mutex::new(None));
        let seen = Arc::clone(&slot);
        tokio::spawn(async move {
            let end = read_to_end(response).await;
            *seen.lock().expect("not poisoned") = Some(end);
        });
        Ok(Open { send, end: slot })
    }

    /// Whether the connection is still up.
    pub fn is_open(&self) -> bool {
        !self.driver.is_finished()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl Open {
    /// How the stream ended, if it has.
    pub fn end(&self) -> Option<End> {
        self.end.lock().expect("not poisoned").clone()
    }

    /// Sends more of the request body (`end`: and ends it).
    pub fn send(&mut self, data: Bytes, end: bool) -> io::Result<()> {
        self.send.send_data(data, end).map_err(io::Error::other)
    }
}

/// Reads an answer to its end: its `grpc-status`, or how it was cut.
async fn read_to_end(response: h2::client::ResponseFuture) -> End {
    let gone = |e: h2::Error| match e.reason() {
        Some(reason) if e.is_reset() => End::Reset(reason),
        _ => End::Gone(e.to_string()),
    };
    let response = match response.await {
        Ok(response) => response,
        Err(e) => return gone(e),
    };
    if let Some(code) = status_of(response.headers()) {
        return End::Status(code);
    }
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        match chunk {
            Ok(data) => {
                let _ = body.flow_control().release_capacity(data.len());
            }
            Err(e) => return gone(e),
        }
    }
    match body.trailers().await {
        Ok(Some(trailers)) => {
            status_of(&trailers).map_or(End::Gone("no grpc-status".into()), End::Status)
        }
        Ok(None) => End::Gone("no trailers".into()),
        Err(e) => gone(e),
    }
}

fn status_of(headers: &http::HeaderMap) -> Option<i32> {
    headers.get("grpc-status")?.to_str().ok()?.parse().ok()
}

/// A gRPC message frame: the 5-byte prefix (uncompressed, `declared` bytes long) and `payload`
/// (which may be shorter than declared: a message that never finishes).
pub fn frame(declared: u32, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + payload.len());
    out.put_u8(0);
    out.put_u32(declared);
    out.put_slice(payload);
    out.freeze()
}

/// The resident set size of process `pid`, in bytes (Linux: `/proc/PID/status`).
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// The largest RSS of `pid` seen while `during` runs, sampled every `every`.
pub async fn peak_rss<F: std::future::Future>(
    pid: u32,
    every: Duration,
    during: F,
) -> (u64, F::Output) {
    let mut peak = rss_bytes(pid);
    let mut tick = tokio::time::interval(every);
    let mut during = std::pin::pin!(during);
    loop {
        tokio::select! {
            out = &mut during => return (peak.max(rss_bytes(pid)), out),
            _ = tick.tick() => peak = peak.max(rss_bytes(pid)),
        }
    }
}
