//! The pause distribution as a small hand-written SVG chart: one line per series through its
//! percentiles, on a log scale of time, so the median and the tail read on one picture.

use crate::percentiles::{Durations, readable_us};

/// The percentiles drawn, left to right, evenly spaced.
const AT: [(&str, f64); 7] = [
    ("p50", 0.5),
    ("p75", 0.75),
    ("p90", 0.9),
    ("p99", 0.99),
    ("p99.9", 0.999),
    ("p99.99", 0.9999),
    ("max", 1.0),
];

/// A colour for each series, in order (more series reuse them).
const COLOURS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 110.0;

/// The chart of `series` (name, durations), titled `title`; series with nothing recorded are
/// left out.
pub fn pause_chart(title: &str, series: &[(&str, &Durations)]) -> String {
    let lines: Vec<(&str, Vec<u64>)> = series
        .iter()
        .filter(|(_, d)| d.summary().count > 0)
        .map(|(name, d)| (*name, AT.iter().map(|(_, q)| d.at(*q).max(1)).collect()))
        .collect();
    let values = lines.iter().flat_map(|(_, v)| v.iter().copied());
    let lowest = values.clone().min().unwrap_or(1);
    let highest = values.max().unwrap_or(10);
    // Whole decades of microseconds, at least one.
    let low = (lowest as f64).log10().floor();
    let high = (highest as f64).log10().ceil().max(low + 1.0);
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x = |i: usize| LEFT + plot_w * (i as f64 + 0.5) / AT.len() as f64;
    let y = |us: u64| TOP + plot_h * (high - (us as f64).log10()) / (high - low);

    let mut svg = String::new();
    let mut put = |text: String| svg.push_str(&text);
    put(format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">\n"
    ));
    put(format!(
        "<rect width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"28\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
        WIDTH / 2.0,
        escape(title)
    ));
    // Decades of time, with a grid line each.
    for decade in (low as i32)..=(high as i32) {
        let us = 10u64.pow(decade.max(0) as u32);
        let at = y(us);
        put(format!(
            "<line x1=\"{LEFT}\" y1=\"{at:.1}\" x2=\"{}\" y2=\"{at:.1}\" stroke=\"#ddd\"/>\n\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            WIDTH - RIGHT,
            LEFT - 8.0,
            at + 4.0,
            escape(&readable_us(us))
        ));
    }
    for (i, (label, _)) in AT.iter().enumerate() {
        put(format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{label}</text>\n",
            x(i),
            TOP + plot_h + 18.0
        ));
    }
    put(format!(
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{plot_w}\" height=\"{plot_h}\" fill=\"none\" \
         stroke=\"#444\"/>\n\
         <text x=\"18\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {:.1})\">\
         time (log scale)</text>\n",
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0
    ));
    for (n, (name, values)) in lines.iter().enumerate() {
        let colour = COLOURS[n % COLOURS.len()];
        let points: Vec<String> = values
            .iter()
            .enumerate()
            .map(|(i, us)| format!("{:.1},{:.1}", x(i), y(*us)))
            .collect();
        put(format!(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"/>\n",
            points.join(" ")
        ));
        for (i, us) in values.iter().enumerate() {
            put(format!(
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{colour}\">\
                 <title>{} {}: {}</title></circle>\n",
                x(i),
                y(*us),
                escape(name),
                AT[i].0,
                escape(&readable_us(*us))
            ));
        }
        let legend_y = TOP + plot_h + 44.0 + 18.0 * n as f64;
        put(format!(
            "<line x1=\"{LEFT}\" y1=\"{legend_y:.1}\" x2=\"{}\" y2=\"{legend_y:.1}\" \
             stroke=\"{colour}\" stroke-width=\"2\"/>\n\
             <text x=\"{}\" y=\"{:.1}\">{}</text>\n",
            LEFT + 24.0,
            LEFT + 32.0,
            legend_y + 4.0,
            escape(name)
        ));
    }
    put("</svg>\n".to_owned());
    svg
}

/// Text as SVG character data.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn durations(us: &[u64]) -> Durations {
        let mut d = Durations::new();
        for v in us {
            d.record(Duration::from_micros(*v));
        }
        d
    }

    #[test]
    fn a_chart_draws_each_series_through_every_percentile() {
        let a = durations(&[200, 220, 250, 900]);
        let b = durations(&[150, 160, 5_000]);
        let svg = pause_chart("pauses <4 KiB & 100>", &[("a", &a), ("b", &b)]);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 2 * AT.len());
        assert!(svg.contains("pauses &lt;4 KiB &amp; 100&gt;"));
        // Decades from 100 us to 10 ms.
        assert!(
            svg.contains(">100 us<") && svg.contains(">10.0 ms<"),
            "{svg}"
        );
    }

    #[test]
    fn an_empty_series_is_left_out() {
        let empty = Durations::new();
        let svg = pause_chart("t", &[("none", &empty)]);
        assert!(!svg.contains("<polyline"));
        assert!(svg.trim_end().ends_with("</svg>"));
    }
}
