//! A minimal static-JSON HTTP/1 server on its own thread and single-threaded runtime: the
//! stand-in upstream of the overhead benchmark (not recache, and cheap enough that the
//! benchmark measures the proxy rather than the upstream).

use std::net::SocketAddr;
use std::thread;

use bytes::Bytes;
use http::{Response, header};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::sync::oneshot;

use crate::error::BenchError;

/// The reply body: the shape of an engine's `/v1/models` answer.
pub const BODY: &str = r#"{"object":"list","data":[{"id":"tiny-qwen2","object":"model","created":0,"owned_by":"recache-bench","max_model_len":8192}]}"#;

/// A running static server; dropping it stops the server.
pub struct StaticUpstream {
    pub addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

/// Starts the server on `127.0.0.1:0`.
pub fn spawn() -> Result<StaticUpstream, BenchError> {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(BenchError::io("binding the static upstream"))?;
    std_listener
        .set_nonblocking(true)
        .map_err(BenchError::io("configuring the static upstream"))?;
    let addr = std_listener
        .local_addr()
        .map_err(BenchError::io("reading the static upstream address"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(BenchError::io("starting the static upstream runtime"))?;
    let (stop, stopped) = oneshot::channel::<()>();
    thread::Builder::new()
        .name("static-upstream".into())
        .spawn(move || runtime.block_on(serve(std_listener, stopped)))
        .map_err(BenchError::io("spawning the static upstream thread"))?;
    Ok(StaticUpstream { addr, _stop: stop })
}

async fn serve(std_listener: std::net::TcpListener, mut stopped: oneshot::Receiver<()>) {
    let Ok(listener) = tokio::net::TcpListener::from_std(std_listener) else {
        return;
    };
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => s,
                Err(_) => continue,
            },
            _ = &mut stopped => return,
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service = service_fn(|_req| async {
                let mut resp = Response::new(Full::new(Bytes::from_static(BODY.as_bytes())));
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("application/json"),
                );
                Ok::<_, std::convert::Infallible>(resp)
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
