//! Unit tests of the SVG chart library: ticks, scales and escaping.

use super::*;

fn is_125(v: f64) -> bool {
    let p = 10f64.powf(v.abs().log10().floor());
    let m = v.abs() / p;
    [1.0, 2.0, 5.0].iter().any(|x| (m - x).abs() < 1e-6)
}

#[test]
fn steps_are_1_2_5() {
    assert_eq!(nice_step(0.7), 1.0);
    assert_eq!(nice_step(1.0), 1.0);
    assert_eq!(nice_step(1.1), 2.0);
    assert_eq!(nice_step(2.5), 5.0);
    assert_eq!(nice_step(6.0), 10.0);
    assert_eq!(nice_step(0.013), 0.02);
    assert_eq!(nice_step(340_000.0), 500_000.0);
    for raw in [1e-3, 0.37, 3.0, 17.0, 999.0, 1234.5, 7.7e8] {
        assert!(is_125(nice_step(raw)), "{raw}");
        assert!(nice_step(raw) >= raw);
        assert!(nice_step(raw) < raw * 2.5 + 1e-12);
    }
}

#[test]
fn linear_ticks_are_even_multiples() {
    let t = linear_ticks(0.0, 1000.0, 5);
    assert_eq!(t, vec![0.0, 200.0, 400.0, 600.0, 800.0, 1000.0]);
    let t = linear_ticks(0.0, 0.9, 6);
    assert_eq!(t, vec![0.0, 0.2, 0.4, 0.6, 0.8]);
    let t = linear_ticks(32_000.0, 17_300_000.0, 6);
    assert_eq!(t.first(), Some(&5_000_000.0));
    for w in t.windows(2) {
        assert!(is_125(w[1] - w[0]));
    }
    // Labels read as people write them.
    assert_eq!(label(0.3, Unit::Plain), "0.3");
    assert_eq!(label(2_500_000.0, Unit::Nanos), "2.5ms");
    assert_eq!(label(250_000.0, Unit::Nanos), "250us");
    assert_eq!(label(0.5, Unit::Seconds), "500ms");
    assert_eq!(label(20_000.0, Unit::Count), "20k");
    assert_eq!(label(1000.0, Unit::TailPercentile), "99.9%");
    assert_eq!(label(2.0, Unit::TailPercentile), "50%");
}

#[test]
fn log_ticks_are_1_2_5_per_decade() {
    assert_eq!(
        log_ticks(10.0, 1000.0),
        vec![10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]
    );
    let t = log_ticks(1e3, 1e9);
    assert_eq!(t, vec![1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9]);
    for v in log_ticks(2e4, 5e7) {
        assert!(is_125(v), "{v}");
    }
    assert_eq!(nice_below(32_730.0), 20_000.0);
    assert_eq!(nice_above(17_258_905.0), 20_000_000.0);
    assert_eq!(nice_above(5.0), 5.0);
    assert_eq!(nice_below(0.3), 0.2);
}

#[test]
fn scale_round_trips() {
    let ax = Axis::log("RTT", Unit::Nanos);
    let s = Scale::fitted(&ax, 32_000.0, 17e6, 300.0, 50.0);
    assert_eq!((s.lo, s.hi), (20_000.0, 20e6));
    for v in [20_000.0, 57_439.0, 1e6, 17e6] {
        assert!((s.invert(s.map(v)) - v).abs() / v < 1e-9);
    }
    assert_eq!(s.map(20_000.0), 300.0);
    assert_eq!(s.map(20e6), 50.0);
}

#[test]
fn text_is_escaped() {
    let mut c = Chart::new(
        "a<b & \"c\"",
        Axis::linear("x", Unit::Plain),
        Axis::linear("y", Unit::Plain),
    );
    c.push(Series::new("<script>", 0, Mark::Line(vec![(0.0, 1.0)])));
    let svg = c.render(true);
    assert!(!svg.contains("<script>"));
    assert!(svg.contains("a&lt;b &amp; &quot;c&quot;"));
}
