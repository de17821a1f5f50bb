//! Loopback harness for proxy tests: a real `recache` server on `127.0.0.1:0` in front of
//! scripted upstreams (small hyper servers whose handler each test writes), and how a test
//! waits for an event ([`wait_for`], [`wait_until`]: the workspace's `recache-testkit`).

#![allow(dead_code)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use recache::config::ServeArgs;
use recache::service::AppState;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
// Each test binary uses some of the helpers (this module is compiled into every one).
#[allow(unused_imports)]
pub use recache_testkit::{wait_for, wait_until};

pub type UpBody = BoxBody<Bytes, std::io::Error>;

/// A scripted upstream; dropping it stops accepting (open connections are aborted too, a
/// moment later); [`FakeUpstream::stop`] returns once both are closed.
pub struct FakeUpstream {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
    quit: Option<oneshot::Sender<()>>,
}

impl FakeUpstream {
    pub async fn start<F, Fut>(handler: F) -> Self
    where
        F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response<UpBody>> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        Self::on(listener, handler)
    }

    pub fn on<F, Fut>(listener: TcpListener, handler: F) -> Self
    where
        F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response<UpBody>> + Send + 'static,
    {
        let addr = listener.local_addr().expect("addr");
        let handler = Arc::new(handler);
        let (quit, mut quitting) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    _ = &mut quitting => break,
                };
                let Ok((stream, _)) = accepted else { break };
                let handler = handler.clone();
                conns.spawn(async move {
                    let svc = service_fn(move |req| {
                        let h = handler.clone();
                        async move { Ok::<_, Infallible>(h(req).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
            drop(listener);
            // Every open connection aborted and closed before stop() returns.
            conns.shutdown().await;
        });
        Self {
            addr,
            task,
            quit: Some(quit),
        }
    }

    /// Stops accepting and closes every open connection; returns when both are done (the
    /// port refuses connections and recache's pooled connections see the close).
    pub async fn stop(mut self) {
        if let Some(quit) = self.quit.take() {
            let _ = quit.send(());
        }
        let _ = (&mut self.task).await;
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A complete body.
pub fn body(text: impl Into<Bytes>) -> UpBody {
    use http_body_util::BodyExt;
    http_body_util::Full::new(text.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

pub fn json(text: &'static str) -> Response<UpBody> {
    Response::builder()
        .header("content-type", "application/json")
        .body(body(text))
        .expect("response")
}

/// recache serving on loopback; `stop()` triggers graceful shutdown.
pub struct TestProxy {
    pub addr: SocketAddr,
    pub state: Arc<AppState>,
    stop: Option<oneshot::Sender<()>>,
    pub done: JoinHandle<bool>,
}

impl TestProxy {
    pub async fn start(upstreams: &[String], tweak: impl FnOnce(&mut ServeArgs)) -> Self {
        let mut args = ServeArgs {
            upstream: upstreams.to_vec(),
            health_interval: Some(Duration::from_millis(100)),
            ..Default::default()
        };
        tweak(&mut args);
        let config = args.resolve().expect("config");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("addr");
        let state = AppState::new(config).expect("state");
        let (tx, rx) = oneshot::channel::<()>();
        let done = tokio::spawn(recache::server::run(listener, state.clone(), async move {
            let _ = rx.await;
        }));
        Self {
            addr,
            state,
            stop: Some(tx),
            done,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    /// Waits until `/ready` answers 200 (the first health probe got through).
    pub async fn wait_ready(&self) {
        let client = reqwest::Client::new();
        let url = self.url("/ready");
        wait_for(
            "/ready answering 200",
            Duration::from_secs(10),
            async || match client.get(&url).send().await {
                Ok(r) if r.status() == 200 => Ok(()),
                Ok(r) => Err(format!("status {}", r.status())),
                Err(e) => Err(e.to_string()),
            },
        )
        .await
    }
}

/// An OpenAI-shaped error body's `error.code`, asserting the shape on the way.
pub async fn error_code(resp: reqwest::Response) -> String {
    let v: serde_json::Value = resp.json().await.expect("json error body");
    let err = &v["error"];
    assert!(
        err["message"].is_string() && err["type"].is_string(),
        "not OpenAI-shaped: {v}"
    );
    err["code"].as_str().expect("code").to_string()
}

/// POST /v1/completions with a minimal body through `proxy`.
pub async fn post_completion(client: &reqwest::Client, proxy: &TestProxy) -> reqwest::Response {
    client
        .post(proxy.url("/v1/completions"))
        .body(r#"{"prompt":"x"}"#)
        .send()
        .await
        .expect("send")
}
