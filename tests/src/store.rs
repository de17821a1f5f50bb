//! The store for the engine tests of the item pool's cold tier, installed by
//! `examples/store/install`: a Redis server ([`RedisServer`], Debian's `redis-server`) started
//! on a given or free loopback port, logging beside the engines, stopped on `stop` or drop.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{repo_root, wait_for};

/// Installs what is missing of the stores (`examples/store/install`); returns its venv.
pub fn install() -> PathBuf {
    let out = Command::new(repo_root().join("examples/store/install"))
        .output()
        .expect("running examples/store/install");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "examples/store/install failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let venv = (stdout.lines())
        .find_map(|l| l.strip_prefix("VENV="))
        .unwrap_or_else(|| panic!("examples/store/install printed no VENV= line:\n{stdout}"));
    PathBuf::from(venv)
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local addr").port()
}

/// A running `redis-server` (no persistence: a restart comes back empty, as a lost store).
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
}

impl RedisServer {
    pub async fn start() -> RedisServer {
        Self::start_on(free_port()).await
    }

    pub async fn start_on(port: u16) -> RedisServer {
        let log = crate::testbed_home()
            .join("run")
            .join(format!("redis-{port}.log"));
        let out = std::fs::File::create(&log)
            .unwrap_or_else(|e| panic!("creating {}: {e}", log.display()));
        let err = out.try_clone().expect("log file handle");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("starting redis-server (examples/store/install installs it)");
        let mut r = RedisServer {
            child: Some(child),
            port,
        };
        wait_for(
            format_args!("redis-server accepting on 127.0.0.1:{port}"),
            Duration::from_secs(30),
            async || {
                if let Some(status) = r.child.as_mut().and_then(|c| c.try_wait().ok()?) {
                    panic!("redis-server exited ({status}) before listening on {port}");
                }
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            },
        )
        .await;
        r
    }

    /// `--rank-pool-store` and `up --pool-store`'s value.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops the server (SIGKILL: a store that dies).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A new, empty server on the same port.
    pub async fn restart(&mut self) {
        self.stop();
        *self = Self::start_on(self.port).await;
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
