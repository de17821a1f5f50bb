//! Loopback harness for proxy tests: a real `recache` server on `127.0.0.1:0` in front of
//! scripted upstreams (small hyper servers whose handler each test writes).

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

pub type UpBody = BoxBody<Bytes, std::io::Error>;

/// A scripted upstream; dropping it stops accepting (open connections are aborted too).
pub struct FakeUpstream {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
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
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
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
        });
        Self { addr, task }
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
        for _ in 0..100 {
            if let Ok(r) = client.get(self.url("/ready")).send().await {
                if r.status() == 200 {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("proxy never became ready");
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
