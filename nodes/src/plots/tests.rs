//! Renders every chart kind to a temporary folder; checks the PNG decodes with the expected
//! size and the SVG carries the labels (text laid out through the bundled font).

use super::*;
use std::path::PathBuf;

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("edgemu-plots-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn png_size(path: &Path) -> (u32, u32) {
    let file = std::fs::File::open(path).expect("png exists");
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .expect("png header");
    let mut buf = vec![0; reader.output_buffer_size()];
    reader.next_frame(&mut buf).expect("png decodes");
    (reader.info().width, reader.info().height)
}

fn check(written: &[PathBuf], size: (u32, u32), texts: &[&str]) {
    assert_eq!(written.len(), 2, "{written:?}");
    assert_eq!(png_size(&written[0]), size);
    let svg = std::fs::read_to_string(&written[1]).expect("svg exists");
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(100)]);
    for t in texts {
        assert!(svg.contains(t), "svg lacks {t:?}");
    }
}

fn labels() -> Labels {
    Labels::new("Test chart", "x axis", "y axis")
}

#[test]
fn lines_with_ci_renders() {
    let d = temp_dir("ci");
    let s = |label: &str, k: f64| CiSeries {
        label: label.into(),
        points: (0..5)
            .filter_map(|i| {
                let x = 0.2 * i as f64;
                CiPoint::from_samples(x, &[k * x, k * x + 0.1, k * x - 0.05])
            })
            .collect(),
    };
    let w = lines_with_ci(
        &d,
        "ci",
        Formats::default(),
        &labels(),
        &[s("PriorityFEC", 1.0), s("UDP", 0.5)],
    )
    .unwrap();
    check(
        &w,
        (900, 540),
        &["PriorityFEC", "UDP", "Test chart", "x axis"],
    );
}

#[test]
fn grouped_bars_render() {
    let d = temp_dir("bars");
    let groups = vec!["rho=0.6".to_string(), "rho=0.8".to_string()];
    let series = [
        BarSeries {
            label: "full".into(),
            values: vec![0.9, 0.99],
        },
        BarSeries {
            label: "priority-only".into(),
            values: vec![0.7, f64::NAN],
        },
    ];
    let w = grouped_bars(&d, "bars", Formats::default(), &labels(), &groups, &series).unwrap();
    check(
        &w,
        (900, 540),
        &["full", "priority-only", "rho=0.6", "rho=0.8"],
    );
}

#[test]
fn cdf_and_box_render() {
    let d = temp_dir("cdfbox");
    let samples = [
        Samples {
            label: "lyreo".into(),
            values: (0..50).map(|i| i as f64 * 0.1).collect(),
        },
        Samples {
            label: "random".into(),
            values: vec![1.0, 2.0, 8.0, f64::NAN],
        },
    ];
    let w = cdf(&d, "cdf", Formats::default(), &labels(), &samples).unwrap();
    check(&w, (900, 540), &["lyreo", "random"]);
    let w = box_plot(&d, "box", Formats::default(), &labels(), &samples).unwrap();
    check(&w, (900, 540), &["lyreo", "random"]);
}

#[test]
fn time_series_with_spans_renders() {
    let d = temp_dir("ts");
    let series = [Series {
        label: "achieved".into(),
        points: (0..20).map(|i| (i as f64, (i % 5) as f64)).collect(),
    }];
    let spans = [
        Span {
            start: 3.0,
            end: 8.0,
            label: "link.kill a->b".into(),
        },
        Span {
            start: 12.0,
            end: 12.0,
            label: "link.set".into(),
        },
    ];
    let refs = [RefLine {
        y: 3.6,
        label: "90% KV".into(),
    }];
    let w = time_series(
        &d,
        "ts",
        Formats::default(),
        &labels(),
        &series,
        &spans,
        &refs,
    )
    .unwrap();
    check(
        &w,
        (900, 540),
        &["achieved", "link.kill a-&gt;b", "link.set", "90% KV"],
    );
}

#[test]
fn heatmap_renders() {
    let d = temp_dir("heat");
    let grid = Grid {
        rows: (0..3).map(|i| format!("layers {i}")).collect(),
        cols: (0..4).map(|i| format!("pos {i}")).collect(),
        values: (0..3)
            .map(|r| (0..4).map(|c| (r * 4 + c) as f64 / 11.0).collect())
            .collect(),
    };
    let w = heatmap(&d, "heat", Formats::default(), &labels(), &grid).unwrap();
    check(&w, (1000, 600), &["layers 2", "pos 3", "0.545"]);
}

#[test]
fn empty_or_nonfinite_data_is_an_error_not_a_panic() {
    let d = temp_dir("empty");
    let r = cdf(
        &d,
        "e",
        Formats::default(),
        &labels(),
        &[Samples {
            label: "a".into(),
            values: vec![f64::NAN],
        }],
    );
    assert!(matches!(r, Err(PlotError::NoData { .. })));
    let r = heatmap(
        &d,
        "e",
        Formats::default(),
        &labels(),
        &Grid {
            rows: vec![],
            cols: vec![],
            values: vec![],
        },
    );
    assert!(matches!(r, Err(PlotError::NoData { .. })));
    let r = box_plot(&d, "e", Formats::default(), &labels(), &[]);
    assert!(matches!(r, Err(PlotError::NoData { .. })));
}

#[test]
fn formats_parse() {
    assert_eq!(
        "png".parse::<Formats>().unwrap(),
        Formats {
            png: true,
            svg: false
        }
    );
    assert_eq!("svg, png".parse::<Formats>().unwrap(), Formats::default());
    assert!("gif".parse::<Formats>().is_err());
    assert!("".parse::<Formats>().is_err());
}

#[test]
fn only_requested_formats_are_written() {
    let d = temp_dir("fmt");
    let s = [Samples {
        label: "a".into(),
        values: vec![1.0, 2.0],
    }];
    let w = cdf(
        &d,
        "only",
        Formats {
            png: false,
            svg: true,
        },
        &labels(),
        &s,
    )
    .unwrap();
    assert_eq!(w, vec![d.join("only.svg")]);
    assert!(!d.join("only.png").exists());
}
