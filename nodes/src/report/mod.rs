//! `edgemu report RUN_DIR… [--out DIR] [--format png,svg]`: plots and tables from results
//! folders. Each folder is recognized by what it holds:
//!
//! - a link run (`edgemu run`): `<host>/links.csv` (+ `events.jsonl`) → per link direction
//!   offered / achieved / configured rate, delay p50/p99 and loss over time, with chaos and
//!   control events as shaded spans ([`links`]), and the run's tables (latency per policy
//!   version, servers, handoffs, events: [`crate::results::summary`]);
//! - a LYREO experiment: `requests.csv` + `server_slots.csv` (+ `summary.json`) → latency
//!   CDF and box plot per policy, load-balance deviation per policy, per-server KV
//!   occupancy over time with the 90 % line, Table II ([`lyreo`]);
//! - a PriorityFEC experiment: `handoffs.csv` → recovered utility and task quality vs ρ per
//!   scheme with 95 % CI, ablation bars ([`pfec`]).
//!
//! Several folders are reported side by side in one `report.md` (one section each, file
//! names prefixed with the run's folder name). Anything skipped — a truncated CSV row, a
//! missing summary of a run still in progress, a chart with no data — is listed under
//! "Skipped" in the report and on stderr; a folder that is no run is an error.

pub(crate) mod csv;
pub(crate) mod events;
pub(crate) mod links;
mod lyreo;
pub(crate) mod pfec;

use crate::plots::{Formats, PlotError};
use crate::results::{render_csv, render_markdown};
use anyhow::{bail, Context as _, Result};
use clap::Args;
use std::path::{Path, PathBuf};

#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// Results folders (`results/<run-id>`), one or several.
    #[arg(required = true)]
    pub runs: Vec<PathBuf>,
    /// Output folder (default: `<RUN_DIR>/report` for one run, `./report` for several).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Image formats, comma-separated: png, svg.
    #[arg(long, default_value = "png,svg")]
    pub format: String,
}

/// Errors reading a results folder.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{path} is not a results folder: found none of {looked_for}")]
    NotARun { path: PathBuf, looked_for: String },
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Csv { path: PathBuf, message: String },
    #[error("{path}: no column {column:?}")]
    MissingColumn { path: PathBuf, column: String },
    #[error(transparent)]
    Plot(#[from] PlotError),
}

/// The report being written: images and tables go to `out`, text to `report.md`.
pub struct Report {
    pub out: PathBuf,
    pub formats: Formats,
    md: String,
    skipped: Vec<String>,
    files: usize,
}

impl Report {
    pub fn new(out: PathBuf, formats: Formats) -> Self {
        Self {
            out,
            formats,
            md: String::from("# edgemu report\n\n"),
            skipped: Vec::new(),
            files: 0,
        }
    }

    pub fn heading(&mut self, level: usize, text: &str) {
        self.md
            .push_str(&format!("{} {text}\n\n", "#".repeat(level)));
    }

    pub fn text(&mut self, text: &str) {
        self.md.push_str(text);
        self.md.push_str("\n\n");
    }

    pub fn skip(&mut self, what: impl Into<String>) {
        self.skipped.push(what.into());
    }

    /// Records a chart's result: the image in the Markdown, or a skip note.
    pub fn chart(&mut self, name: &str, caption: &str, result: Result<Vec<PathBuf>, PlotError>) {
        match result {
            Ok(files) => {
                self.files += files.len();
                let ext = if self.formats.png { "png" } else { "svg" };
                self.md.push_str(&format!("![{caption}]({name}.{ext})\n\n"));
            }
            Err(e) => self.skip(e.to_string()),
        }
    }

    /// Writes `<name>.csv` and puts the table in the Markdown.
    pub fn table(&mut self, name: &str, headers: &[&str], rows: &[Vec<String>]) -> Result<()> {
        let path = self.out.join(format!("{name}.csv"));
        std::fs::write(&path, render_csv(headers, rows))
            .with_context(|| format!("writing {}", path.display()))?;
        self.files += 1;
        self.md.push_str(&render_markdown(headers, rows));
        self.md
            .push_str(&format!("\n([{name}.csv]({name}.csv))\n\n"));
        Ok(())
    }

    /// Writes `report.md`; returns its path.
    pub fn finish(mut self) -> Result<(PathBuf, usize, Vec<String>)> {
        if !self.skipped.is_empty() {
            self.md.push_str("## Skipped\n\n");
            for s in &self.skipped {
                self.md.push_str(&format!("- {s}\n"));
            }
            self.md.push('\n');
        }
        let path = self.out.join("report.md");
        std::fs::write(&path, &self.md).with_context(|| format!("writing {}", path.display()))?;
        Ok((path, self.files + 1, self.skipped))
    }
}

/// What kind of results folder a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    Links,
    Lyreo,
    PriorityFec,
}

/// Recognizes a results folder by the files it holds.
pub fn detect(dir: &Path) -> Result<RunKind, ReportError> {
    if !dir.is_dir() {
        return Err(ReportError::NotARun {
            path: dir.to_path_buf(),
            looked_for: "anything (not a folder)".into(),
        });
    }
    if dir.join("handoffs.csv").is_file() {
        return Ok(RunKind::PriorityFec);
    }
    if dir.join("requests.csv").is_file() || dir.join("server_slots.csv").is_file() {
        return Ok(RunKind::Lyreo);
    }
    if !links::link_host_dirs(dir).is_empty() {
        return Ok(RunKind::Links);
    }
    Err(ReportError::NotARun {
        path: dir.to_path_buf(),
        looked_for: "handoffs.csv, requests.csv, server_slots.csv, <host>/links.csv".into(),
    })
}

/// A file-name-safe version of `name` (ASCII letters, digits, `-`, `_`, `.`; others `_`).
pub(crate) fn safe_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A file-name-safe prefix from a run folder's name.
fn prefix(dir: &Path) -> String {
    safe_name(
        &dir.file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_else(|| "run".into()),
    )
}

/// Builds the report for `runs` into `out`.
pub fn build(
    runs: &[PathBuf],
    out: &Path,
    formats: Formats,
) -> Result<(PathBuf, usize, Vec<String>)> {
    let kinds = runs
        .iter()
        .map(|r| detect(r).map(|k| (r, k)))
        .collect::<Result<Vec<_>, _>>()?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut report = Report::new(out.to_path_buf(), formats);
    let several = runs.len() > 1;
    for (dir, kind) in kinds {
        let pre = if several {
            format!("{}-", prefix(dir))
        } else {
            String::new()
        };
        report.heading(2, &format!("{} ({kind:?})", dir.display()));
        let r = match kind {
            RunKind::Links => links::report(&mut report, dir, &pre)
                .and_then(|()| run_tables(&mut report, dir, &pre)),
            RunKind::Lyreo => lyreo::report(&mut report, dir, &pre),
            RunKind::PriorityFec => pfec::report(&mut report, dir, &pre),
        };
        if let Err(e) = r {
            report.skip(format!("{}: {e:#}", dir.display()));
        }
    }
    report.finish()
}

/// The end-of-run tables of a live run (`edgemu run`: latency per policy version,
/// servers, handoffs, events; [`crate::results::summary`]), each as a CSV beside the report.
fn run_tables(report: &mut Report, dir: &Path, pre: &str) -> Result<()> {
    let tables = crate::results::RunTables::read(dir, &[]);
    for s in tables.skipped {
        if !report.skipped.contains(&s) {
            report.skip(s);
        }
    }
    if tables.tables.is_empty() {
        return Ok(());
    }
    report.heading(3, "Run tables");
    for t in &tables.tables {
        report.text(&t.title);
        let headers: Vec<&str> = t.headers.iter().map(String::as_str).collect();
        report.table(&format!("{pre}{}", t.name), &headers, &t.rows)?;
    }
    Ok(())
}

/// `edgemu report`.
pub fn run(a: &ReportArgs) -> Result<()> {
    let formats: Formats = a.format.parse()?;
    let out = match (&a.out, a.runs.as_slice()) {
        (Some(o), _) => o.clone(),
        (None, [one]) => one.join("report"),
        (None, _) => PathBuf::from("report"),
    };
    if a.runs.is_empty() {
        bail!("no results folder given");
    }
    let (md, files, skipped) = build(&a.runs, &out, formats)?;
    for s in &skipped {
        eprintln!("skipped: {s}");
    }
    println!(
        "report: {} ({files} files written, {} items skipped)",
        md.display(),
        skipped.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests;
