//! `bench route`'s item-pool store side: the Redis server `--pool-store auto` starts for the
//! run ([`RedisServer`]: `redis-server` on a free loopback port, no persistence, its own temp
//! dir, stopped when dropped, also on error), and the few Redis commands the run sends to a
//! `redis://HOST:PORT[/DB]` store over a raw socket ([`call`]: PING, INFO, FLUSHDB; no client
//! crate).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::BenchError;

/// Installs the stores' packages (`redis-server` from Debian among them), relative to the
/// repository root.
pub const INSTALL: &str = "examples/store/install";
/// How long a started server has to answer PING.
const READY: Duration = Duration::from_secs(30);
/// How long one command may take, connect to reply.
const REPLY: Duration = Duration::from_secs(5);

/// `HOST:PORT` and the database of a `redis://HOST:PORT[/DB]` store; None for another store
/// (a Mooncake master's `host:port`).
pub fn redis_addr(store: &str) -> Option<(&str, Option<&str>)> {
    let rest = store.strip_prefix("redis://")?;
    let (addr, db) = match rest.split_once('/') {
        Some((a, d)) => (a, Some(d).filter(|d| !d.is_empty())),
        None => (rest, None),
    };
    Some((addr, db))
}

/// One reply in `buf` once it is whole: the text of a simple string, integer or bulk string
/// (empty for nil), or a Redis error as `Err`.
fn reply(buf: &[u8]) -> Option<Result<String, String>> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    let head = String::from_utf8_lossy(&buf[1..end]).into_owned();
    match buf[0] {
        b'+' | b':' => Some(Ok(head)),
        b'-' => Some(Err(head)),
        b'$' => {
            let Ok(len) = head.parse::<i64>() else {
                return Some(Err(format!("bad bulk length {head:?}")));
            };
            let Ok(len) = usize::try_from(len) else {
                return Some(Ok(String::new()));
            };
            let body = buf.get(end + 2..end + 2 + len)?;
            Some(Ok(String::from_utf8_lossy(body).into_owned()))
        }
        _ => Some(Err(format!("unexpected reply {:?}", &buf[..end]))),
    }
}

/// Sends `command` (inline, e.g. `INFO memory`) to the Redis store `store` (`SELECT`ing its
/// database first when the URL names one) and returns the reply; an error says why not
/// (not a redis:// store, no answer within 5 s, a Redis error).
pub async fn call(store: &str, command: &str) -> Result<String, String> {
    let Some((addr, db)) = redis_addr(store) else {
        return Err(format!("{store} is not a redis://HOST:PORT store"));
    };
    let ask = async {
        let mut conn = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        let mut commands = Vec::new();
        if let Some(db) = db {
            commands.push(format!("SELECT {db}"));
        }
        commands.push(command.to_string());
        let mut last = String::new();
        for c in commands {
            conn.write_all(format!("{c}\r\n").as_bytes())
                .await
                .map_err(|e| format!("sending {c} to {addr}: {e}"))?;
            let mut buf = Vec::new();
            last = loop {
                if let Some(r) = reply(&buf) {
                    break r.map_err(|e| format!("{c} on {addr}: {e}"))?;
                }
                let mut chunk = [0u8; 8192];
                let n = (conn.read(&mut chunk).await)
                    .map_err(|e| format!("reading {c}'s reply from {addr}: {e}"))?;
                if n == 0 {
                    return Err(format!("{addr} closed the connection before {c}'s reply"));
                }
                buf.extend_from_slice(&chunk[..n]);
            };
        }
        Ok(last)
    };
    tokio::time::timeout(REPLY, ask)
        .await
        .unwrap_or_else(|_| Err(format!("{store}: no reply to {command} within 5 s")))
}

/// Empties the store before a strategy's run, as the engines' caches are: a Redis store's
/// database (FLUSHDB; the replicas' connectors write only there). Ok(false) for a Mooncake
/// store, which is not flushed (the row says so).
pub async fn flush(store: &str) -> Result<bool, BenchError> {
    if redis_addr(store).is_none() {
        return Ok(false);
    }
    match call(store, "FLUSHDB").await {
        Ok(_) => Ok(true),
        Err(e) => Err(BenchError::Setup(format!(
            "--pool-store: could not empty the store before the strategy's run: {e}"
        ))),
    }
}

/// `name` on `PATH`, if there.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `redis-server`, installed with `install` (`examples/store/install`) when it is not on
/// `PATH`.
pub fn redis_server(install: &Path) -> Result<PathBuf, BenchError> {
    if let Some(found) = on_path("redis-server") {
        return Ok(found);
    }
    eprintln!(
        "bench: redis-server is not on PATH; running {}",
        install.display()
    );
    let status = Command::new(install)
        .stdout(Stdio::null())
        .status()
        .map_err(BenchError::io(format!(
            "running {} (run from the repository root)",
            install.display()
        )))?;
    if !status.success() {
        return Err(BenchError::Setup(format!(
            "--pool-store auto: {} failed ({status}), so there is no redis-server to start \
             (see its messages above; or install Debian's redis-server)",
            install.display()
        )));
    }
    on_path("redis-server").ok_or_else(|| {
        BenchError::Setup(format!(
            "--pool-store auto: {} ran but redis-server is still not on PATH",
            install.display()
        ))
    })
}

fn free_port() -> Result<u16, BenchError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(BenchError::io("binding a free port"))?;
    Ok(l.local_addr()
        .map_err(BenchError::io("a free port"))?
        .port())
}

/// A Redis server the run started (no persistence: it holds only this run's entries), stopped
/// when dropped.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    /// Its working dir and log, removed with it.
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts `server` (a `redis-server`) on a free loopback port and waits until it answers
    /// PING.
    pub async fn start(server: &Path) -> Result<Self, BenchError> {
        // A port picked free may be taken before the server binds it: then another one.
        let mut last = None;
        for _ in 0..3 {
            match Self::start_on(server, free_port()?).await {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| BenchError::Setup("redis-server did not start".into())))
    }

    async fn start_on(server: &Path, port: u16) -> Result<Self, BenchError> {
        let dir = tempfile::Builder::new()
            .prefix("recache-route-redis-")
            .tempdir()
            .map_err(BenchError::io("creating redis-server's temp dir"))?;
        let log_path = dir.path().join("redis.log");
        let log = std::fs::File::create(&log_path)
            .map_err(BenchError::io(format!("creating {}", log_path.display())))?;
        let err = log
            .try_clone()
            .map_err(BenchError::io("redis-server's log"))?;
        let child = Command::new(server)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(BenchError::io(format!("starting {}", server.display())))?;
        let mut s = RedisServer {
            child: Some(child),
            port,
            dir,
        };
        let deadline = Instant::now() + READY;
        let url = s.url();
        loop {
            let last = match call(&url, "PING").await {
                Ok(pong) if pong == "PONG" => break,
                Ok(other) => format!("answered {other:?}"),
                Err(e) => e,
            };
            let exited = s.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() >= deadline {
                let why = match exited {
                    Some(status) => format!("exited ({status})"),
                    None => format!("did not answer PING within {}s ({last})", READY.as_secs()),
                };
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                return Err(BenchError::Setup(format!(
                    "--pool-store auto: {} on 127.0.0.1:{port} {why}; its log ends:\n{}",
                    server.display(),
                    tail.join("\n")
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!(
            "bench: started redis-server on 127.0.0.1:{port} (dir {})",
            s.dir.path().display()
        );
        Ok(s)
    }

    /// The store's address, as `up --pool-store` and `--rank-pool-store` take it.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops the server (it holds nothing worth saving).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            eprintln!("bench: stopped redis-server on 127.0.0.1:{}", self.port);
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_once_whole() {
        assert_eq!(reply(b"+PONG\r\n"), Some(Ok("PONG".into())));
        assert_eq!(reply(b"+PON"), None);
        assert_eq!(reply(b":42\r\n"), Some(Ok("42".into())));
        assert_eq!(reply(b"-ERR no\r\n"), Some(Err("ERR no".into())));
        assert_eq!(reply(b"$5\r\nhel"), None);
        assert_eq!(reply(b"$5\r\nhello\r\n"), Some(Ok("hello".into())));
        assert_eq!(reply(b"$-1\r\n"), Some(Ok(String::new())));
        assert!(matches!(reply(b"$x\r\n"), Some(Err(_))));
        assert_eq!(
            redis_addr("redis://h:1/2"),
            Some(("h:1", Some("2"))),
            "the database"
        );
        assert_eq!(redis_addr("redis://h:1"), Some(("h:1", None)));
        assert_eq!(redis_addr("127.0.0.1:50051"), None, "a Mooncake master");
    }

    /// The real `redis-server` (examples/store/install installs it): started, answering,
    /// flushed, and gone once dropped.
    #[tokio::test]
    async fn redis_server_starts_flushes_and_stops() {
        let server = redis_server(Path::new("../examples/store/install")).expect("redis-server");
        let redis = RedisServer::start(&server).await.expect("started");
        let url = redis.url();
        assert_eq!(call(&url, "PING").await, Ok("PONG".into()));
        for k in ["recache/a", "recache/b"] {
            assert_eq!(call(&url, &format!("SET {k} v")).await, Ok("OK".into()));
        }
        assert_eq!(call(&url, "DBSIZE").await, Ok("2".into()));
        // Another database is left alone by a flush of the URL's.
        let db1 = format!("{url}/1");
        assert_eq!(call(&db1, "SET other v").await, Ok("OK".into()));
        assert!(flush(&url).await.expect("flushed"));
        assert_eq!(call(&url, "DBSIZE").await, Ok("0".into()));
        assert_eq!(call(&db1, "DBSIZE").await, Ok("1".into()));
        assert!(flush(&db1).await.expect("flushed"));
        assert_eq!(call(&db1, "DBSIZE").await, Ok("0".into()));
        assert!(call(&url, "NOSUCHCOMMAND").await.is_err(), "a Redis error");
        let memory = crate::route::pool::store_memory(&url).await;
        assert!(memory.is_some_and(|(used, _)| used > 0), "{memory:?}");
        assert!(!flush("127.0.0.1:50051").await.expect("not Redis"));
        let dir = redis.dir.path().to_path_buf();
        drop(redis);
        assert!(call(&url, "PING").await.is_err(), "stopped");
        assert!(!dir.exists(), "its temp dir removed");
        let gone = flush(&url).await.err().map(|e| e.to_string());
        assert!(
            gone.is_some_and(|e| e.contains("could not empty")),
            "a store that does not answer is an error"
        );
    }
}
