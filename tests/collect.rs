//! `redline collect` over HTTP: bad exports are answered and counted, never stored.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use redline::trace::receiver::{MAX_BODY_BYTES, SpanStore, app};

#[tokio::test]
async fn malformed_and_oversized_exports_are_rejected_and_counted() {
    let dir = common::temp_dir("collect-http");
    let collector = Arc::new(SpanStore::create(&dir, 1000).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(axum::serve(listener, app(collector.clone())).into_future());
    let http = common::client();
    let post = |content_type: &'static str, body: Vec<u8>| {
        let http = http.clone();
        async move {
            let request = Request::post(format!("http://{addr}/v1/traces"))
                .header("content-type", content_type)
                .body(Full::new(Bytes::from(body)))
                .unwrap();
            http.request(request).await.unwrap().status().as_u16()
        }
    };
    assert_eq!(
        post("application/x-protobuf", b"\xff\xfe\xfd".to_vec()).await,
        400
    );
    assert_eq!(
        post("application/json", b"{\"resourceSpans\": [1]}".to_vec()).await,
        400
    );
    assert_eq!(
        post("application/x-protobuf", vec![0; MAX_BODY_BYTES + 1]).await,
        413
    );
    assert_eq!(
        post("application/json", b"{\"resourceSpans\": []}".to_vec()).await,
        200
    );
    assert_eq!(collector.stats.rejected.load(Ordering::Relaxed), 3);
    assert_eq!(collector.stats.requests.load(Ordering::Relaxed), 1);
    assert_eq!(collector.stats.spans_stored.load(Ordering::Relaxed), 0);
    std::fs::remove_dir_all(dir).unwrap();
}
