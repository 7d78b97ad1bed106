//! Execution segments: a worker's deterministic share of a run, so that several
//! processes (or machines) together send exactly the requests one process would.
//!
//! A segment is a half-open range `[from, to)` of `[0, 1)` with rational bounds, as in
//! k6. Each arrival of an open-loop or replay schedule has a point in `[0, 1)` and
//! belongs to the one segment holding it: every arrival goes to exactly one worker of
//! a set of segments that tile `[0, 1)`. The points follow a rank-1 lattice
//! (`i · P mod D`, with `D = 720720`, the least common multiple of 1…16, and `P` near
//! `D / φ` and prime to it), so each worker's arrivals are spread evenly over the
//! schedule rather than taken in blocks: at every prefix of the schedule each of `n`
//! equal segments holds its exact share within five arrivals (over 100,000), and every block of `D`
//! arrivals exactly when the bounds' denominators divide `D`.
//! Counts (a closed loop's slots, a request budget) are split as k6 splits VUs: the
//! segment gets `⌊to · n⌋ − ⌊from · n⌋` of `n`, which also tiles.

use std::fmt;

/// The lattice's modulus: 720720 = lcm(1, …, 16), so any split into up to 16 equal
/// parts (and many others) is exact on every block of this many arrivals.
const LATTICE: u64 = 720_720;
/// The lattice's step: ⌊D × 0.618…⌋ moved to the next number prime to D.
const STEP: u64 = 445_429;

/// A rational number `num / den`, `0 ≤ num ≤ den`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fraction {
    pub num: u64,
    pub den: u64,
}

impl Fraction {
    fn new(num: u64, den: u64) -> Result<Fraction, String> {
        if den == 0 {
            return Err(format!("{num}/{den} divides by zero"));
        }
        if num > den {
            return Err(format!("{num}/{den} is more than 1"));
        }
        let g = gcd(num, den);
        Ok(Fraction {
            num: num / g,
            den: den / g,
        })
    }

    /// `0`, `1`, `3/4` or a decimal such as `0.25`.
    fn parse(text: &str) -> Result<Fraction, String> {
        let text = text.trim();
        let number = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| format!("`{text}` is not a fraction such as 1/4, 0.25 or 1"))
        };
        if let Some((num, den)) = text.split_once('/') {
            return Fraction::new(number(num)?, number(den)?);
        }
        if let Some((whole, decimals)) = text.split_once('.') {
            if decimals.is_empty() || decimals.len() > 9 {
                return Err(format!("`{text}`: give a decimal with 1 to 9 digits"));
            }
            let den = 10u64.pow(decimals.len() as u32);
            let whole = if whole.is_empty() { 0 } else { number(whole)? };
            return Fraction::new(whole * den + number(decimals)?, den);
        }
        Fraction::new(number(text)?, 1)
    }

    /// `⌊self × n⌋`.
    fn of(self, n: u64) -> u64 {
        (u128::from(self.num) * u128::from(n) / u128::from(self.den)) as u64
    }

    /// `self ≤ m / LATTICE`.
    fn at_most(self, m: u64) -> bool {
        u128::from(self.num) * u128::from(LATTICE) <= u128::from(m) * u128::from(self.den)
    }
}

/// By value (fractions are kept in lowest terms, so equal values are equal fields).
impl Ord for Fraction {
    fn cmp(&self, other: &Fraction) -> std::cmp::Ordering {
        (u128::from(self.num) * u128::from(other.den))
            .cmp(&(u128::from(other.num) * u128::from(self.den)))
    }
}

impl PartialOrd for Fraction {
    fn partial_cmp(&self, other: &Fraction) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Fraction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.num, self.den) {
            (n, 1) => write!(f, "{n}"),
            (n, d) => write!(f, "{n}/{d}"),
        }
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a.max(1) } else { gcd(b, a % b) }
}

/// A worker's share of a run: `[from, to)` of `[0, 1)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub from: Fraction,
    pub to: Fraction,
}

impl Segment {
    /// The whole run: what a process without `--segment` sends.
    pub const WHOLE: Segment = Segment {
        from: Fraction { num: 0, den: 1 },
        to: Fraction { num: 1, den: 1 },
    };

    /// `K/N` (the K-th of N equal parts, from 1) or `FROM:TO` (`0:1/4`, `0.25:0.5`).
    pub fn parse(text: &str) -> Result<Segment, String> {
        let (from, to) = match text.split_once(':') {
            Some((from, to)) => (Fraction::parse(from)?, Fraction::parse(to)?),
            None => {
                let (k, n) = text.split_once('/').ok_or_else(|| {
                    format!("`{text}`: give K/N (the K-th of N equal parts) or FROM:TO")
                })?;
                let parse = |s: &str| s.trim().parse::<u64>().ok().filter(|&v| v > 0);
                let (Some(k), Some(n)) = (parse(k), parse(n)) else {
                    return Err(format!("`{text}`: K and N are whole numbers from 1"));
                };
                if k > n {
                    return Err(format!("`{text}`: there is no part {k} of {n}"));
                }
                (Fraction::new(k - 1, n)?, Fraction::new(k, n)?)
            }
        };
        if from >= to {
            return Err(format!(
                "`{text}`: the segment is empty ({from} is not below {to})"
            ));
        }
        Ok(Segment { from, to })
    }

    pub fn is_whole(&self) -> bool {
        *self == Segment::WHOLE
    }

    /// Whether the `index`-th arrival of a schedule (from 0) is this segment's.
    pub fn owns(&self, index: u64) -> bool {
        let point = index % LATTICE * STEP % LATTICE;
        self.from.at_most(point) && !self.to.at_most(point)
    }

    /// This segment's part of `n` things (slots, a budget), as a range of their
    /// indices: the parts of segments that tile `[0, 1)` tile `0..n`.
    pub fn share(&self, n: u64) -> std::ops::Range<u64> {
        self.from.of(n)..self.to.of(n)
    }
}

impl Segment {
    /// Where this segment numbers the requests it makes up as it goes (a closed loop's,
    /// a session's turns): `(⌊from × 4096⌋ + 1) × 2⁴⁰`, above any schedule's
    /// positions and below 2⁵³ (so a JavaScript reader keeps it exact); segments of one
    /// run whose starts are 1/4096 or more apart never share a number. Zero for the
    /// whole run.
    pub fn seq_base(&self) -> u64 {
        if self.is_whole() {
            0
        } else {
            (self.from.of(4096) + 1) << 40
        }
    }
}

impl fmt::Display for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.from, self.to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn equal_parts(n: u64) -> Vec<Segment> {
        (1..=n)
            .map(|k| Segment::parse(&format!("{k}/{n}")).unwrap())
            .collect()
    }

    #[test]
    fn parts_and_bounds_parse_to_the_same_segments() {
        assert_eq!(Segment::parse("2/4"), Segment::parse("1/4:1/2"));
        assert_eq!(Segment::parse("2/4"), Segment::parse("0.25:0.5"));
        assert_eq!(Segment::parse("1/1").unwrap(), Segment::WHOLE);
        assert_eq!(Segment::parse("3/4").unwrap().to_string(), "1/2:3/4");
        for bad in [
            "5/4", "0/4", "1/2:1/4", "1/4:1/4", "a/b", "1:2", "1/0:1", "x",
        ] {
            assert!(Segment::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_arrival_belongs_to_exactly_one_of_a_tiling() {
        let uneven = ["0:1/3", "1/3:0.5", "0.5:7/8", "7/8:1"]
            .map(|s| Segment::parse(s).unwrap())
            .to_vec();
        for tiling in [
            equal_parts(1),
            equal_parts(3),
            equal_parts(4),
            equal_parts(7),
            uneven,
        ] {
            for index in 0..50_000 {
                let owners = tiling.iter().filter(|s| s.owns(index)).count();
                assert_eq!(owners, 1, "arrival {index} in {tiling:?}");
            }
        }
    }

    #[test]
    fn each_worker_s_arrivals_are_spread_over_the_schedule() {
        // At every prefix of 100,000 each of n equal parts holds its share within 5
        // arrivals (4.5 at worst, measured).
        for n in [2, 3, 4, 5, 7, 16] {
            let parts = equal_parts(n);
            let mut held = vec![0u64; n as usize];
            for index in 0..100_000u64 {
                let owner = parts.iter().position(|s| s.owns(index)).unwrap();
                held[owner] += 1;
                let share = (index + 1) as f64 / n as f64;
                let worst = held
                    .iter()
                    .map(|&h| (h as f64 - share).abs())
                    .fold(0.0, f64::max);
                assert!(worst <= 5.0, "n = {n}, after {index}: {held:?}");
            }
        }
        // On a whole block of the lattice the shares are exact.
        let parts = equal_parts(3);
        let first = (0..LATTICE).filter(|&i| parts[0].owns(i)).count() as u64;
        assert_eq!(first, LATTICE / 3);
    }

    #[test]
    fn counts_are_split_without_gaps_or_overlaps() {
        for n in [0u64, 1, 5, 64, 1000] {
            let ranges: Vec<_> = equal_parts(3).iter().map(|s| s.share(n)).collect();
            assert_eq!(ranges[0].start, 0);
            assert_eq!(ranges[2].end, n);
            assert_eq!(ranges[0].end, ranges[1].start);
            assert_eq!(ranges[1].end, ranges[2].start);
        }
        assert_eq!(Segment::parse("2/4").unwrap().share(64), 16..32);
    }
}
