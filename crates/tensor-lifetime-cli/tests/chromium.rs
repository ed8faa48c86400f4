//! The HTML report opened in a real headless Chromium (Debian's `chromium` package, which
//! the test set-up installs: `apt-get install -y chromium`): a screenshot shows the plot
//! drawn, and the DOM after the page's script ran has the expected elements. Without
//! Chromium the tests are skipped, unless `TENSOR_LIFETIME_REQUIRE_CHROMIUM=1` (as in CI).

mod common;

use common::{run_chromium, Logs};
use std::path::PathBuf;

/// The first series colour (`html::PALETTE[0]`): the site with the most live bytes, here
/// the leaking dataset cache.
const FIRST_SERIES: [u8; 3] = [0x4e, 0x79, 0xa7];

fn html_page(logs: &Logs) -> PathBuf {
    let out = logs.run(&["html", "leaky.jsonl", "-o", "report.html"]);
    assert_eq!(out.status.code(), Some(0), "{}", common::transcript(&out));
    logs.path("report.html")
}

#[test]
fn the_html_report_draws_its_plot_in_chromium() {
    if !common::chromium_available("the_html_report_draws_its_plot_in_chromium") {
        return;
    }
    let logs = Logs::new();
    let page = html_page(&logs);
    let png_path = logs.path("shot.png");
    run_chromium(
        &page,
        &logs.path("profile-shot"),
        &[
            format!("--screenshot={}", png_path.display()),
            "--window-size=1400,1000".to_string(),
        ],
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&png_path).expect("chromium wrote the screenshot"),
    ));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("a size")];
    let info = reader.next_frame(&mut buf).expect("a frame");
    assert_eq!((info.width, info.height), (1400, 1000));
    let channels = info.color_type.samples();
    assert!(channels >= 3, "{:?}", info.color_type);
    let (w, h) = (info.width as usize, info.height as usize);

    let mut colors = std::collections::HashSet::new();
    let mut non_white = 0usize;
    let (mut series, mut min_x, mut max_x, mut min_y, mut max_y) = (0usize, w, 0, h, 0);
    for y in 0..h {
        for x in 0..w {
            let i = (y * w + x) * channels;
            let px = [buf[i], buf[i + 1], buf[i + 2]];
            colors.insert(px);
            if px != [255, 255, 255] {
                non_white += 1;
            }
            if px.iter().zip(FIRST_SERIES).all(|(a, b)| a.abs_diff(b) <= 3) {
                series += 1;
                min_x = min_x.min(x);
                max_x = max_x.max(x);
                min_y = min_y.min(y);
                max_y = max_y.max(y);
            }
        }
    }
    assert!(colors.len() > 50, "a blank page: {} colours", colors.len());
    assert!(
        non_white > 50_000,
        "a blank page: {non_white} non-white pixels"
    );
    // The leak's area is drawn: large, spanning most of the time axis, in the chart's
    // place (under the title, above the tables).
    assert!(series > 50_000, "the stacked area has {series} pixels");
    assert!(max_x - min_x > 900, "the area spans x {min_x}..{max_x}");
    assert!(
        min_y > 100 && max_y < 700,
        "the area spans y {min_y}..{max_y}"
    );
}

#[test]
fn the_html_report_dom_has_the_chart_tables_and_ran_its_script() {
    if !common::chromium_available("the_html_report_dom_has_the_chart_tables_and_ran_its_script") {
        return;
    }
    let logs = Logs::new();
    let page = html_page(&logs);
    let dom = run_chromium(
        &page,
        &logs.path("profile-dom"),
        &["--dump-dom".to_string()],
    );
    let dom = String::from_utf8(dom).expect("UTF-8 DOM");
    assert!(
        dom.contains("data-ready=\"1\""),
        "the page's script did not finish"
    );
    assert!(dom.contains("<svg id=\"timeline\""), "no chart");
    assert_eq!(
        dom.matches("<path class=\"area").count(),
        2,
        "two sites stacked"
    );
    assert_eq!(
        dom.matches("<polyline class=\"pool\"").count(),
        2,
        "pool lines"
    );
    assert!(dom.contains("<table id=\"findings\""), "no findings table");
    assert_eq!(dom.matches("<tr class=\"leak\"").count(), 1, "one leak row");
    assert!(
        dom.contains("<article class=\"site\" id=\"site-6\""),
        "no site detail"
    );
    assert!(dom.contains("stored into `self.cache` at src/dataset.rs:42"));
}

/// `html::PALETTE[3]`: the line of rank 3 in the ranks chart.
const RANK_3: [u8; 3] = [0x76, 0xb7, 0xb2];

#[test]
fn the_merged_page_of_four_ranks_shows_every_rank_in_chromium() {
    if !common::chromium_available("the_merged_page_of_four_ranks_shows_every_rank_in_chromium") {
        return;
    }
    let logs = Logs::new();
    common::write_rank_logs(&logs.path("job"), 4, &[3]);
    let out = logs.run(&["html", "job", "-o", "ranks.html"]);
    assert_eq!(out.status.code(), Some(0), "{}", common::transcript(&out));
    let page = logs.path("ranks.html");
    let dom = run_chromium(
        &page,
        &logs.path("profile-dom"),
        &["--dump-dom".to_string()],
    );
    let dom = String::from_utf8(dom).expect("UTF-8 DOM");
    assert!(
        dom.contains("data-ready=\"1\""),
        "the page's script did not finish"
    );
    assert!(
        dom.contains("<section id=\"ranks-section\">"),
        "no ranks section"
    );
    assert_eq!(
        dom.matches("<polyline class=\"rank-line\"").count(),
        4,
        "a line per rank"
    );
    assert_eq!(
        dom.matches("<tr class=\"leaking\" data-rank=\"3\">")
            .count(),
        1
    );
    // The single-run page of rank 3 follows: its chart and the merged findings.
    assert!(dom.contains("<svg id=\"timeline\""), "no timeline");
    assert!(dom.contains("<table id=\"findings\""), "no findings table");

    let png_path = logs.path("ranks.png");
    run_chromium(
        &page,
        &logs.path("profile-shot"),
        &[
            format!("--screenshot={}", png_path.display()),
            "--window-size=1400,1000".to_string(),
        ],
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&png_path).expect("chromium wrote the screenshot"),
    ));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("a size")];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let channels = info.color_type.samples();
    let rank3 = buf
        .chunks_exact(channels)
        .filter(|px| px.iter().zip(RANK_3).all(|(a, b)| a.abs_diff(b) <= 3))
        .count();
    // Rank 3's line, drawn thick because it leaks, across the chart's width.
    assert!(rank3 > 1000, "rank 3's line has {rank3} pixels");
}
