//! Unit tests of `error`.

use super::*;

#[test]
fn renders_the_openai_shape_with_status() {
    let err = ApiError::BadRequest {
        message: "'prompt' is required".into(),
        param: Some("prompt".into()),
    };
    assert_eq!(err.status(), StatusCode::BAD_REQUEST);
    let json = err.to_json();
    assert_eq!(json["error"]["message"], "'prompt' is required");
    assert_eq!(json["error"]["type"], "invalid_request_error");
    assert_eq!(json["error"]["code"], "invalid_request");
    assert_eq!(json["error"]["param"], "prompt");
    let none = ApiError::from(ClientError::NoHealthyUpstream);
    assert_eq!(none.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(none.to_json()["error"]["type"], "upstream_error");
    assert_eq!(none.to_json()["error"]["code"], "no_healthy_upstream");
}
