//! A Mooncake Store master for the engine tests of the item pool's cold tier: installed by
//! `examples/store/install` (its cached venv holds `mooncake_master`), started on given or
//! free loopback ports with its HTTP metadata server, stopped on [`StoreMaster::stop`] or drop.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{repo_root, wait_for};

/// `examples/store/install`'s venv (installing what is missing first).
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

/// A running `mooncake_master`.
pub struct StoreMaster {
    child: Option<Child>,
    venv: PathBuf,
    pub rpc: u16,
    pub http: u16,
}

impl StoreMaster {
    /// Starts a master on free ports and waits until both accept connections.
    pub async fn start(venv: &Path) -> StoreMaster {
        Self::start_on(venv, free_port(), free_port()).await
    }

    /// Starts a master on `rpc` (clients) and `http` (metadata) and waits for both ports.
    pub async fn start_on(venv: &Path, rpc: u16, http: u16) -> StoreMaster {
        let child = Command::new(venv.join("bin/mooncake_master"))
            .args([
                format!("--rpc_port={rpc}"),
                "--enable_http_metadata_server=true".into(),
                format!("--http_metadata_server_port={http}"),
                "--http_metadata_server_host=127.0.0.1".into(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting mooncake_master");
        let mut m = StoreMaster {
            child: Some(child),
            venv: venv.to_path_buf(),
            rpc,
            http,
        };
        for port in [rpc, http] {
            wait_for(
                format_args!("mooncake_master accepting on 127.0.0.1:{port}"),
                Duration::from_secs(30),
                async || {
                    if let Some(status) = m.child.as_mut().and_then(|c| c.try_wait().ok()?) {
                        panic!("mooncake_master exited ({status}) before listening on {port}");
                    }
                    tokio::net::TcpStream::connect(("127.0.0.1", port))
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                },
            )
            .await;
        }
        m
    }

    /// The master's client address (`--rank-pool-store`).
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.rpc)
    }

    /// The metadata server's URL.
    pub fn metadata(&self) -> String {
        format!("http://127.0.0.1:{}/metadata", self.http)
    }

    /// Stops the master (SIGKILL: a store that dies, not one that shuts down politely).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A new master on the same ports (empty: a restarted store).
    pub async fn restart(&mut self) {
        self.stop();
        *self = Self::start_on(&self.venv.clone(), self.rpc, self.http).await;
    }
}

impl Drop for StoreMaster {
    fn drop(&mut self) {
        self.stop();
    }
}
