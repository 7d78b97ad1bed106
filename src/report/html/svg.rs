//! Charts as inline SVG, built on the server side so a report needs no script to show
//! its figures and prints as it looks: a histogram with its CDF and percentile marks,
//! lines over a shared axis with moments and windows marked (laid out for the page's
//! script to zoom and toggle), and a request timeline. Hovering a bar, a point or a
//! segment shows its value (SVG `<title>`).

use std::fmt::Write;

pub const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 230.0;
const LEFT: f64 = 58.0;
const RIGHT: f64 = 34.0;
const TOP: f64 = 14.0;
const BOTTOM: f64 = 34.0;

/// Colours of series, in order (colour-blind safe, Okabe–Ito).
pub const PALETTE: [&str; 6] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9",
];

/// Text made safe for HTML and SVG.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A number as a person reads it: three significant figures, no trailing zeros.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let a = v.abs();
    let text = if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// About five round ticks from `0` (or `lo`) to `hi`.
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(f64::EPSILON);
    let raw = span / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(magnitude * 10.0);
    let mut out = Vec::new();
    let mut t = (lo / step).ceil() * step;
    while t <= hi + step * 1e-9 {
        out.push(t);
        t += step;
    }
    out
}

/// A plot area mapping data to pixels.
struct Frame {
    x: (f64, f64),
    y: (f64, f64),
    height: f64,
}

impl Frame {
    fn px(&self, x: f64) -> f64 {
        LEFT + (x - self.x.0) / (self.x.1 - self.x.0).max(f64::EPSILON) * (WIDTH - LEFT - RIGHT)
    }

    fn py(&self, y: f64) -> f64 {
        let inner = self.height - TOP - BOTTOM;
        TOP + inner - (y - self.y.0) / (self.y.1 - self.y.0).max(f64::EPSILON) * inner
    }

    /// The axes, grid lines and tick labels.
    fn axes(&self, out: &mut String, x_label: &str, y_label: &str) {
        let bottom = self.height - BOTTOM;
        // An axis without a label (the timeline's rows) has no scale to show.
        let y_ticks = if y_label.is_empty() {
            Vec::new()
        } else {
            ticks(self.y.0, self.y.1)
        };
        for t in y_ticks {
            let y = self.py(t);
            let _ = write!(
                out,
                r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" class="grid"/><text x="{}" y="{:.1}" class="tick" text-anchor="end">{}</text>"##,
                WIDTH - RIGHT,
                LEFT - 6.0,
                y + 4.0,
                num(t)
            );
        }
        for t in ticks(self.x.0, self.x.1) {
            let x = self.px(t);
            let _ = write!(
                out,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{bottom}" y2="{}" class="axis xtick"/><text x="{x:.1}" y="{}" class="tick xtick" text-anchor="middle">{}</text>"##,
                bottom + 4.0,
                bottom + 16.0,
                num(t)
            );
        }
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" x2="{}" y1="{bottom}" y2="{bottom}" class="axis"/><text x="{}" y="{}" class="label" text-anchor="middle">{}</text><text x="12" y="{}" class="label" transform="rotate(-90 12 {})" text-anchor="middle">{}</text>"##,
            WIDTH - RIGHT,
            (LEFT + WIDTH - RIGHT) / 2.0,
            self.height - 4.0,
            escape(x_label),
            self.height / 2.0,
            self.height / 2.0,
            escape(y_label)
        );
    }
}

fn open(out: &mut String, height: f64, title: &str) {
    let _ = write!(
        out,
        r##"<svg viewBox="0 0 {WIDTH} {height}" width="100%" role="img" aria-label="{}" xmlns="http://www.w3.org/2000/svg">"##,
        escape(title)
    );
}

/// Bars of counts per bin, with the cumulative share as a line on a 0–100 % scale and
/// vertical marks (percentiles) labelled.
pub fn histogram(
    title: &str,
    unit: &str,
    bins: &[(f64, f64, u64)],
    marks: &[(&str, f64)],
) -> String {
    let mut out = String::new();
    open(&mut out, HEIGHT, title);
    let lo = bins.first().map_or(0.0, |b| b.0);
    let hi = bins.last().map_or(1.0, |b| b.1);
    let peak = bins.iter().map(|b| b.2).max().unwrap_or(1).max(1) as f64;
    let frame = Frame {
        x: (lo, hi),
        y: (0.0, peak * 1.05),
        height: HEIGHT,
    };
    frame.axes(&mut out, unit, "requests");
    let total: u64 = bins.iter().map(|b| b.2).sum();
    let mut cumulative = 0u64;
    let mut cdf = String::new();
    for (from, to, count) in bins {
        let (x0, x1) = (frame.px(*from), frame.px(*to));
        let y = frame.py(*count as f64);
        cumulative += count;
        let _ = write!(
            out,
            r##"<rect x="{x0:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" class="bar"><title>{}–{} {}: {count}</title></rect>"##,
            (x1 - x0 - 0.5).max(0.5),
            frame.py(0.0) - y,
            num(*from),
            num(*to),
            escape(unit)
        );
        let share = cumulative as f64 / total.max(1) as f64;
        let cy = TOP + (1.0 - share) * (HEIGHT - TOP - BOTTOM);
        let _ = write!(cdf, "{x1:.1},{cy:.1} ");
    }
    let _ = write!(
        out,
        r##"<polyline points="{}" class="cdf"><title>cumulative share</title></polyline>"##,
        cdf.trim_end()
    );
    // The cumulative share's own scale, on the right.
    for share in [0.0, 0.5, 1.0] {
        let y = TOP + (1.0 - share) * (HEIGHT - TOP - BOTTOM);
        let _ = write!(
            out,
            r##"<text x="{}" y="{:.1}" class="tick cdf-tick" text-anchor="start">{}%</text>"##,
            WIDTH - RIGHT + 2.0,
            y + 4.0,
            share * 100.0
        );
    }
    for (i, (name, value)) in marks.iter().enumerate() {
        let x = frame.px(value.clamp(lo, hi));
        // Labels near the right edge go left of their line, so none is cut off.
        let (label_x, anchor) = if x > WIDTH * 0.8 {
            (x - 3.0, "end")
        } else {
            (x + 3.0, "start")
        };
        let _ = write!(
            out,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{}" class="mark"/><text x="{label_x:.1}" y="{}" class="mark-label" text-anchor="{anchor}">{} {}</text>"##,
            HEIGHT - BOTTOM,
            TOP + 10.0 + 12.0 * i as f64,
            escape(name),
            num(*value)
        );
    }
    out.push_str("</svg>");
    out
}

/// One line of a line chart.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed (a target beside what was achieved).
    pub dashed: bool,
}

/// What is drawn behind a time axis: moments (stage starts, an abort) as dotted
/// lines, windows (a fault rule injecting) as shaded bands; each says what it is on
/// hover.
#[derive(Debug, Default)]
pub struct Marks {
    pub moments: Vec<(f64, String)>,
    /// (from, to, label, colour index into [`PALETTE`]).
    pub windows: Vec<(f64, f64, String, usize)>,
}

/// Lines over a shared x axis, a legend, and the marks behind them. The plot area is
/// a nested `<svg>` (it clips what a zoom moves outside it); the chart carries its
/// x domain and pixel range as data attributes, each series is a `g.series` and each
/// legend entry a `g.key-item` of the same index, for the page's script to zoom the
/// x axis and toggle series.
pub fn lines(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    marks: &Marks,
) -> String {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let x_hi = all().map(|p| p.0).fold(1.0, f64::max);
    let x_lo = all().map(|p| p.0).fold(x_hi, f64::min).min(0.0);
    let y_hi = all().map(|p| p.1).fold(0.0, f64::max).max(1e-9) * 1.1;
    let frame = Frame {
        x: (x_lo, x_hi),
        y: (0.0, y_hi),
        height: HEIGHT,
    };
    let (left, right) = (LEFT, WIDTH - RIGHT);
    let mut out = format!(
        r##"<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" aria-label="{}" xmlns="http://www.w3.org/2000/svg" class="lines" data-axis="{}" data-x0="{x_lo}" data-x1="{x_hi}" data-left="{left}" data-right="{right}">"##,
        escape(title),
        escape(x_label)
    );
    frame.axes(&mut out, x_label, y_label);
    let _ = write!(
        out,
        r##"<svg class="plot" x="{left}" y="0" width="{}" height="{HEIGHT}" viewBox="{left} 0 {} {HEIGHT}">"##,
        right - left,
        right - left
    );
    for (from, to, label, colour) in &marks.windows {
        let (x0, x1) = (frame.px(*from), frame.px(*to));
        let _ = write!(
            out,
            r##"<rect x="{x0:.1}" y="{TOP}" width="{:.1}" height="{}" fill="{}" class="window"><title>{}</title></rect>"##,
            (x1 - x0).max(1.0),
            HEIGHT - TOP - BOTTOM,
            PALETTE[(colour + 3) % PALETTE.len()],
            escape(label)
        );
    }
    for (at, label) in &marks.moments {
        let x = frame.px(*at);
        let _ = write!(
            out,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{}" class="event"><title>{}</title></line>"##,
            HEIGHT - BOTTOM,
            escape(label)
        );
    }
    let mut legend = String::new();
    for (i, s) in series
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.points.is_empty())
    {
        let colour = PALETTE[i % PALETTE.len()];
        series_path(&mut out, &frame, s, i, colour);
        let _ = write!(
            legend,
            r##"<g class="key-item" data-series="{i}"><rect x="{}" y="{}" width="10" height="3" fill="{colour}"/><text x="{}" y="{}" class="legend">{}</text></g>"##,
            LEFT + 8.0 + 150.0 * i as f64,
            TOP + 2.0,
            LEFT + 22.0 + 150.0 * i as f64,
            TOP + 6.0,
            escape(&s.name)
        );
    }
    out.push_str("</svg>");
    out.push_str(&legend);
    out.push_str("</svg>");
    out
}

/// One series: its line and, for up to 400 points, a dot per point with its value.
fn series_path(out: &mut String, frame: &Frame, s: &Series, i: usize, colour: &str) {
    let points: String = s
        .points
        .iter()
        .map(|(x, y)| format!("{:.1},{:.1}", frame.px(*x), frame.py(*y)))
        .collect::<Vec<_>>()
        .join(" ");
    let dash = if s.dashed {
        r#" stroke-dasharray="5 4""#
    } else {
        ""
    };
    let _ = write!(
        out,
        r##"<g class="series" data-series="{i}"><polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.6"{dash}/>"##
    );
    for (x, y) in s.points.iter().filter(|_| s.points.len() <= 400) {
        let _ = write!(
            out,
            r##"<circle cx="{:.1}" cy="{:.1}" r="2.2" fill="{colour}"><title>{}: {} at {}</title></circle>"##,
            frame.px(*x),
            frame.py(*y),
            escape(&s.name),
            num(*y),
            num(*x)
        );
    }
    out.push_str("</g>");
}

/// One request's bar in the timeline, seconds from the run's start.
pub struct Bar {
    pub name: String,
    pub intended: f64,
    pub sent: Option<f64>,
    pub first_token: Option<f64>,
    pub done: f64,
    pub failed: Option<String>,
    /// (start, length) of gaps between tokens drawn as stalls.
    pub stalls: Vec<(f64, f64)>,
}

/// The request timeline: a row per request, waiting (intended → sent), time to first
/// token, then decoding; stalls in red, failures marked by kind at their end.
pub fn timeline(title: &str, bars: &[Bar]) -> String {
    const ROW: f64 = 4.0;
    let height = TOP + BOTTOM + ROW * bars.len().max(1) as f64;
    let mut out = String::new();
    open(&mut out, height, title);
    let end = bars.iter().map(|b| b.done).fold(0.001, f64::max);
    let frame = Frame {
        x: (0.0, end),
        y: (0.0, 1.0),
        height,
    };
    frame.axes(&mut out, "seconds into the run", "");
    for (i, bar) in bars.iter().enumerate() {
        let y = TOP + ROW * i as f64;
        let sent = bar.sent.unwrap_or(bar.done);
        let first = bar.first_token.unwrap_or(bar.done);
        let segment = |out: &mut String, from: f64, to: f64, class: &str, what: &str| {
            let (x0, x1) = (frame.px(from), frame.px(to.max(from)));
            let _ = write!(
                out,
                r##"<rect x="{x0:.1}" y="{y:.1}" width="{:.2}" height="{:.1}" class="{class}"><title>{}: {what} {} ms</title></rect>"##,
                (x1 - x0).max(0.6),
                ROW - 1.0,
                escape(&bar.name),
                num((to - from) * 1e3)
            );
        };
        segment(&mut out, bar.intended, sent, "wait", "waited to send");
        segment(&mut out, sent, first, "ttft", "time to first token");
        if bar.first_token.is_some() {
            segment(&mut out, first, bar.done, "decode", "decoding");
        }
        for (at, gap) in &bar.stalls {
            segment(&mut out, *at, at + gap, "stall", "stall between tokens");
        }
        if let Some(kind) = &bar.failed {
            let x = frame.px(bar.done);
            let _ = write!(
                out,
                r##"<circle cx="{x:.1}" cy="{:.1}" r="2.6" class="failed"><title>{}: {}</title></circle>"##,
                y + ROW / 2.0,
                escape(&bar.name),
                escape(kind)
            );
        }
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        let labels = |lo, hi| ticks(lo, hi).into_iter().map(num).collect::<Vec<_>>();
        assert_eq!(labels(0.0, 10.0), ["0", "2", "4", "6", "8", "10"]);
        assert_eq!(labels(0.0, 0.9), ["0", "0.2", "0.4", "0.6", "0.8"]);
        assert_eq!(labels(3.0, 1234.0), ["250", "500", "750", "1000"]);
        assert_eq!(num(1234.6), "1235");
        assert_eq!(num(12.34), "12.3");
        assert_eq!(num(0.5), "0.5");
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
