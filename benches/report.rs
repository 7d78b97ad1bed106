//! Building a run's pictures (`report.html` and `timeline.json`, one pass over the
//! records each) for 100,000 requests over 500 s: what `redline run` adds at its end
//! and what `redline report` costs. docs/report.md quotes the figure.

use criterion::{Criterion, criterion_group, criterion_main};

#[path = "../tests/common/synthetic.rs"]
mod synthetic;

fn pictures(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("redline-bench-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let summary = synthetic::chat_run(&dir, 100_000, 32);
    let mut group = c.benchmark_group("report_100k_requests");
    group.sample_size(10);
    group.bench_function("report_html_and_timeline_json", |b| {
        b.iter(|| redline::report::outputs::write_pictures(&summary, &dir, None).unwrap())
    });
    group.finish();
    let sizes = ["report.html", "timeline.json"].map(|f| {
        let bytes = std::fs::metadata(dir.join(f)).unwrap().len();
        format!("{f} {:.2} MB", bytes as f64 / 1e6)
    });
    println!("{}", sizes.join(", "));
    std::fs::remove_dir_all(dir).unwrap();
}

criterion_group!(benches, pictures);
criterion_main!(benches);
