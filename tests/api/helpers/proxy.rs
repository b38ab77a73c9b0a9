//! A TCP proxy between the app and PostgreSQL that injects network faults. It reads just enough of
//! PostgreSQL's wire protocol (message framing, and the SQL inside `Query`, `Parse` and `Bind`) to
//! act on the message that runs a given statement, e.g. lose the answer to a `COMMIT`.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{
        TcpListener, TcpStream,
        tcp::{OwnedReadHalf, OwnedWriteHalf},
    },
};

/// What the proxy does to the traffic from now on.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Forward everything.
    None,
    /// The next statement whose SQL contains this text is forwarded; its answer is swallowed and
    /// the connection closed once the server has fully answered it.
    LoseAnswerTo(&'static str),
    /// The next statement whose SQL contains this text is not forwarded: the connection is closed
    /// instead.
    CutBefore(&'static str),
    /// Every message from the app waits this long before it is forwarded.
    Delay(Duration),
    /// Nothing is forwarded any more, on connections open or opened later, and nothing is closed:
    /// packets simply vanish. A connection silenced stays silent.
    Silent,
    /// The connections open now go silent for good; new ones work.
    SilenceOpenConnections,
    /// The next statement whose SQL contains this text is not forwarded, and its connection goes
    /// silent for good (nothing answered, nothing closed): a worker caught mid-statement by a
    /// network that drops packets. Other connections work.
    SilenceAt(&'static str),
}

struct Shared {
    upstream: SocketAddr,
    fault: Mutex<Fault>,
    /// Connections numbered below this are silent.
    silent_below: AtomicU64,
    next_id: AtomicU64,
    /// Statements counted by a text their SQL contains ([`FaultProxy::count`]).
    counted: Mutex<Vec<(&'static str, Arc<AtomicU64>)>>,
}

pub struct FaultProxy {
    pub address: SocketAddr,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let shared = Arc::new(Shared {
            upstream,
            fault: Mutex::new(Fault::None),
            silent_below: AtomicU64::new(0),
            next_id: AtomicU64::new(0),
            counted: Mutex::new(Vec::new()),
        });
        let address = listener.local_addr().unwrap();
        tokio::spawn(accept(listener, shared.clone()));
        Self { address, shared }
    }

    /// Whether a one-shot fault is still waiting for its statement.
    pub fn armed(&self) -> bool {
        matches!(
            *self.shared.fault.lock().unwrap(),
            Fault::LoseAnswerTo(_) | Fault::CutBefore(_) | Fault::SilenceAt(_)
        )
    }

    /// Counts, from now on, the statements run whose SQL contains `pattern`.
    pub fn count(&self, pattern: &'static str) -> Arc<AtomicU64> {
        let counter = Arc::new(AtomicU64::new(0));
        let mut counted = self.shared.counted.lock().unwrap();
        counted.push((pattern, counter.clone()));
        counter
    }

    pub fn set(&self, fault: Fault) {
        if fault == Fault::SilenceOpenConnections || fault == Fault::Silent {
            let next = self.shared.next_id.load(Ordering::SeqCst);
            self.shared.silent_below.store(next, Ordering::SeqCst);
        }
        *self.shared.fault.lock().unwrap() = fault;
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(relay(client, id, shared.clone()));
    }
}

/// One connection. Each direction is a pump; when either ends, both sockets close.
async fn relay(client: TcpStream, id: u64, shared: Arc<Shared>) {
    let (mut from_app, to_app) = client.into_split();
    if *shared.fault.lock().unwrap() == Fault::Silent {
        return swallow(&mut from_app).await;
    }
    let Ok(server) = TcpStream::connect(shared.upstream).await else {
        return;
    };
    let (from_db, to_db) = server.into_split();
    let connection = Arc::new(Connection {
        id,
        shared,
        doomed: std::sync::atomic::AtomicBool::new(false),
        silenced: std::sync::atomic::AtomicBool::new(false),
    });
    tokio::select! {
        () = connection.clone().pump_to_db(from_app, to_db) => {}
        () = connection.pump_to_app(from_db, to_app) => {}
    }
}

struct Connection {
    id: u64,
    shared: Arc<Shared>,
    /// The answer now coming belongs to a statement whose answer is to be lost.
    doomed: std::sync::atomic::AtomicBool,
    /// This connection went silent at a statement ([`Fault::SilenceAt`]).
    silenced: std::sync::atomic::AtomicBool,
}

/// What the pump does with one message from the app.
enum Verdict {
    Forward,
    ForwardAndLoseAnswer,
    Cut,
    Silence,
}

impl Connection {
    fn silent(&self) -> bool {
        self.id < self.shared.silent_below.load(Ordering::SeqCst)
            || self.silenced.load(Ordering::SeqCst)
    }

    async fn pump_to_db(self: Arc<Self>, mut from_app: OwnedReadHalf, mut to_db: OwnedWriteHalf) {
        // The startup message has no type byte; everything after it has one.
        let Some(startup) = read_message(&mut from_app, false).await else {
            return;
        };
        if to_db.write_all(&startup).await.is_err() {
            return;
        }
        // Statement names and the SQL they were prepared with, so a `Bind` can be matched too.
        let mut prepared: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        while let Some(message) = read_message(&mut from_app, true).await {
            if self.silent() {
                continue;
            }
            let sql = statement_sql(&message, &mut prepared);
            if let Some(sql) = &sql {
                for (pattern, counter) in self.shared.counted.lock().unwrap().iter() {
                    if contains(sql, pattern.as_bytes()) {
                        counter.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
            match self.verdict(sql.as_deref()) {
                Verdict::Cut => {
                    return;
                }
                Verdict::Silence => {
                    self.silenced.store(true, Ordering::SeqCst);
                    continue;
                }
                Verdict::ForwardAndLoseAnswer => self.doomed.store(true, Ordering::SeqCst),
                Verdict::Forward => {}
            }
            let fault = self.shared.fault.lock().unwrap().clone();
            if let Fault::Delay(delay) = fault {
                tokio::time::sleep(delay).await;
            }
            if to_db.write_all(&message).await.is_err() {
                return;
            }
        }
    }

    /// Decides, and disarms a one-shot fault that acts now.
    fn verdict(&self, sql: Option<&[u8]>) -> Verdict {
        let Some(sql) = sql else {
            return Verdict::Forward;
        };
        let mut fault = self.shared.fault.lock().unwrap();
        let (pattern, verdict) = match *fault {
            Fault::LoseAnswerTo(pattern) => (pattern, Verdict::ForwardAndLoseAnswer),
            Fault::CutBefore(pattern) => (pattern, Verdict::Cut),
            Fault::SilenceAt(pattern) => (pattern, Verdict::Silence),
            _ => return Verdict::Forward,
        };
        if !contains(sql, pattern.as_bytes()) {
            return Verdict::Forward;
        }
        *fault = Fault::None;
        verdict
    }

    async fn pump_to_app(&self, mut from_db: OwnedReadHalf, mut to_app: OwnedWriteHalf) {
        while let Some(message) = read_message(&mut from_db, true).await {
            if self.silent() {
                continue;
            }
            if self.doomed.load(Ordering::SeqCst) {
                // ReadyForQuery: the server has answered the doomed statement whole.
                if message[0] == b'Z' {
                    return;
                }
                continue;
            }
            if to_app.write_all(&message).await.is_err() {
                return;
            }
        }
    }
}

/// Reads and drops everything, never answering and never closing: a network that went silent.
async fn swallow(from: &mut OwnedReadHalf) {
    let mut buffer = [0u8; 4096];
    while matches!(from.read(&mut buffer).await, Ok(n) if n > 0) {}
}

/// One whole protocol message, framing included; `None` at the end of the stream.
async fn read_message(from: &mut OwnedReadHalf, typed: bool) -> Option<Vec<u8>> {
    let mut message = Vec::new();
    if typed {
        message.push(from.read_u8().await.ok()?);
    }
    let length = from.read_u32().await.ok()?;
    message.extend_from_slice(&length.to_be_bytes());
    let mut body = vec![0u8; (length as usize).checked_sub(4)?];
    from.read_exact(&mut body).await.ok()?;
    message.extend_from_slice(&body);
    Some(message)
}

/// The SQL a message runs, if it runs one: a simple `Query`, or the `Bind` of a prepared statement
/// (its `Parse` only prepares it, so it is remembered, not matched).
fn statement_sql(message: &[u8], prepared: &mut HashMap<Vec<u8>, Vec<u8>>) -> Option<Vec<u8>> {
    let body = &message[5..];
    let mut fields = body.split(|&b| b == 0);
    match message[0] {
        b'Q' => fields.next().map(<[u8]>::to_vec),
        b'P' => {
            let name = fields.next()?.to_vec();
            let sql = fields.next()?.to_vec();
            prepared.insert(name, sql);
            None
        }
        b'B' => {
            let _portal = fields.next()?;
            prepared.get(fields.next()?).cloned()
        }
        _ => None,
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}
