//! The body of a proxied response: upstream frames are passed on one by one as they arrive
//! (never buffered whole), and the request stays counted as in flight until the last one.
//!
//! If the upstream dies mid-stream, an SSE client first receives an OpenAI-shaped error event
//! (`data: {"error": ...}`), then the body fails so hyper closes the connection: the client
//! cannot mistake a truncated stream for a complete one. recache itself keeps serving.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use crate::client::h1::AnswerBody;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};

use crate::BoxError;
use crate::client::replica::{FailureKind, InFlight};
use crate::error::error_json;
use crate::metrics::RequestRecord;

/// How long the error event gets to reach the client before the connection is cut.
const FLUSH_GRACE: std::time::Duration = std::time::Duration::from_millis(20);

pin_project_lite::pin_project! {
    /// A streaming upstream body with its bookkeeping attached.
    pub struct UpstreamBody {
        #[pin]
        inner: AnswerBody,
        sse: bool,
        failure: Option<(BoxError, Pin<Box<tokio::time::Sleep>>)>,
        in_flight: Option<InFlight>,
        _record: RequestRecord,
    }
}

impl UpstreamBody {
    pub fn new(inner: AnswerBody, sse: bool, in_flight: InFlight, record: RequestRecord) -> Self {
        Self {
            inner,
            sse,
            failure: None,
            in_flight: Some(in_flight),
            _record: record,
        }
    }
}

impl HttpBody for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        if let Some((_, flushed)) = this.failure.as_mut() {
            // hyper flushes its write buffer while the body is pending; aborting at once would
            // drop the error event with the connection.
            ready!(flushed.as_mut().poll(cx));
            if let Some((err, _)) = this.failure.take() {
                return Poll::Ready(Some(Err(err)));
            }
        }
        match ready!(this.inner.poll_frame(cx)) {
            Some(Ok(frame)) => Poll::Ready(Some(Ok(frame))),
            None => {
                // Finished: the upstream no longer serves this request, and its connection
                // can serve the next one.
                drop(this.in_flight.take());
                Poll::Ready(None)
            }
            Some(Err(err)) => {
                let Some(in_flight) = this.in_flight.take() else {
                    return Poll::Ready(Some(Err(err.into())));
                };
                let upstream = in_flight.replica();
                tracing::warn!(upstream = %upstream.label, error = %err, "upstream failed mid-stream");
                upstream.count_failure(FailureKind::Stream);
                // Its health probe decides when it is back.
                upstream.set_healthy(false);
                if !*this.sse {
                    return Poll::Ready(Some(Err(err.into())));
                }
                let message = format!("upstream {} failed mid-stream: {err}", upstream.label);
                let event = error_json(&message, "upstream_error", "upstream_stream_error", None);
                *this.failure = Some((err.into(), Box::pin(tokio::time::sleep(FLUSH_GRACE))));
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(format!(
                    "data: {event}\n\n"
                ))))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failure.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
