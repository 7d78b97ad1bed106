//! Prometheus both ways: a run's own metrics served while it runs ([`live`]), and
//! the server's metrics scraped during a run ([`scrape`]).

pub mod live;
pub mod scrape;
