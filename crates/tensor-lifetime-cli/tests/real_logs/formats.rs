//! The formats other tools read, on the real example logs: the pprof profile read by
//! the real `go tool pprof` (Debian's `golang-go`; skipped without it unless
//! `TENSOR_LIFETIME_REQUIRE_GO=1` or `CI=true`), and the Markdown of a report and of a
//! diff rendered by a real Markdown renderer (pulldown-cmark, tables on).

use super::{cli, s};
use std::path::Path;
use std::process::Command;

const REQUIRE_GO: &str = "TENSOR_LIFETIME_REQUIRE_GO";

/// Whether `go` runs here; a skipped test says so on stderr.
fn go_available(test: &str) -> bool {
    if Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return true;
    }
    let set = |name: &str, value: &str| std::env::var(name).is_ok_and(|v| v == value);
    assert!(
        !set(REQUIRE_GO, "1") && !set("CI", "true"),
        "`go` is missing: this test reads the profile with the real pprof. Run the test \
         set-up (CI does): `apt-get update && apt-get install -y golang-go`"
    );
    eprintln!("{test}: skipped: go not installed; set {REQUIRE_GO}=1 to require it");
    false
}

/// The leak finding of an in-process JSON report: its site (`file`, `line`, `label`)
/// and bytes.
fn leak(json: &Path) -> (String, u64, String, u64) {
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let f = &report["findings"][0];
    assert_eq!(f["kind"], "leak", "{report:#}");
    let site = &f["site"];
    (
        site["file"].as_str().unwrap().to_string(),
        site["line"].as_u64().unwrap(),
        site["label"].as_str().unwrap().to_string(),
        f["bytes"].as_u64().unwrap(),
    )
}

/// `pprof` of the leaky run, read by `go tool pprof -top`: the leak's creation site is
/// the first row of `inuse_space`, with the finding's bytes.
pub fn pprof_top_shows_the_leak_site_with_its_bytes(dir: &Path, log: &Path, json: &Path) {
    if !go_available("pprof_top_shows_the_leak_site_with_its_bytes") {
        return;
    }
    let (file, line, label, bytes) = leak(json);
    let profile = dir.join("live.pb.gz");
    let out = cli(&["pprof", s(log), "-o", s(&profile)]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let top = Command::new("go")
        .args([
            "tool",
            "pprof",
            "-top",
            "-sample_index=inuse_space",
            "-unit=B",
            s(&profile),
        ])
        .env("HOME", dir)
        .output()
        .expect("go tool pprof runs");
    let text = String::from_utf8_lossy(&top.stdout);
    assert!(
        top.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&top.stderr)
    );
    // Rows follow the column header `flat  flat%   sum%        cum   cum%`.
    let mut rows = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"));
    let first = rows.nth(1).unwrap_or_else(|| panic!("no rows:\n{text}"));
    let cols: Vec<&str> = first.split_whitespace().collect();
    let name = cols[5..].join(" ");
    assert_eq!(name, format!("`{label}` ({file}:{line})"), "{text}");
    assert_eq!(
        cols[0],
        format!("{bytes}B"),
        "flat bytes of the leak:\n{text}"
    );
    println!("go tool pprof -top:\n{text}");
}

/// An HTML table row (`<tr>...</tr>`) of `html` that contains `needle`.
fn row_with<'a>(html: &'a str, needle: &str) -> &'a str {
    html.split("<tr>")
        .skip(1)
        .map(|r| r.split("</tr>").next().unwrap())
        .find(|r| r.contains(needle))
        .unwrap_or_else(|| panic!("no table row with {needle}:\n{html}"))
}

fn markdown(args: &[&str]) -> String {
    let out = Command::new(super::BIN)
        .args(args)
        .env("GITHUB_SERVER_URL", "https://github.com")
        .env("GITHUB_REPOSITORY", "acme/trainer")
        .env("GITHUB_SHA", "0123abc")
        .output()
        .expect("the CLI runs");
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn render(md: &str) -> String {
    let parser = pulldown_cmark::Parser::new_ext(md, pulldown_cmark::Options::ENABLE_TABLES);
    let mut html = String::new();
    pulldown_cmark::html::push_html(&mut html, parser);
    html
}

/// `report --format markdown` of the leaky run and `diff --format markdown` of the clean
/// run against it, rendered: a table whose row for the leak links its site to the line
/// at the commit, with its bytes; in the diff, the leak is the first row.
pub fn markdown_renders_tables_with_the_leak_linked(leaky: &Path, clean: &Path, json: &Path) {
    let (file, line, label, bytes) = leak(json);
    let href = format!("https://github.com/acme/trainer/blob/0123abc/{file}#L{line}");
    let link = format!("<a href=\"{href}\"><code>{file}:{line}</code></a> <code>{label}</code>");
    let size = tensor_lifetime_report::size::format_bytes(bytes);

    let md = markdown(&["report", s(leaky), "--format", "markdown"]);
    let html = render(&md);
    assert!(html.contains("<table>"), "{md}\n{html}");
    let row = row_with(&html, &href);
    assert!(row.contains(&link), "{row}");
    assert!(row.contains("<td>LEAK</td>"), "{row}");
    assert!(
        row.contains(&format!("<td style=\"text-align: right\">{size}</td>")),
        "{row}"
    );

    let md = markdown(&["diff", s(clean), s(leaky), "--format", "markdown"]);
    let html = render(&md);
    let rows: Vec<&str> = html
        .split("<tbody>")
        .nth(2)
        .unwrap_or_else(|| panic!("{md}\n{html}"))
        .split("<tr>")
        .skip(1)
        .collect();
    let first = rows.first().unwrap_or_else(|| panic!("{html}"));
    assert!(first.contains(&link), "the leak first:\n{html}");
    assert!(first.contains("<strong>LEAK+</strong>"), "{first}");
    assert!(first.contains(&format!("0 B → {size}")), "{first}");
    println!(
        "report --format markdown:\n{}",
        markdown(&["report", s(leaky), "--format", "markdown"])
    );
}
