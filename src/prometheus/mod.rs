//! Prometheus both ways: a run's own metrics served while it runs ([`live`]), and
//! the server's metrics scraped during a run ([`scrape`]), and range queries over its
//! HTTP API for `redline watch` ([`query`]).

pub mod live;
pub mod query;
pub mod scrape;
