//! A tolerant reader for the CSV files edgemu writes (`,` separated, header first, one
//! row per line; a field may be quoted with `"`, a `""` inside it being one quote, as
//! `handoffs.csv` quotes its text columns). Rows with the wrong number of fields (a
//! truncated last line of a run in progress, a damaged file) are skipped and reported,
//! never a panic.

use super::ReportError;
use std::path::{Path, PathBuf};

/// A CSV file read into memory.
#[derive(Debug, Clone)]
pub struct Table {
    pub path: PathBuf,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// What was skipped, for the report's notes.
    pub skipped: Vec<String>,
}

impl Table {
    pub fn read(path: &Path) -> Result<Self, ReportError> {
        let text = std::fs::read_to_string(path).map_err(|source| ReportError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<Self, ReportError> {
        let mut lines = text.lines().enumerate();
        let header: Vec<String> = match lines.next() {
            Some((_, h)) if !h.trim().is_empty() => fields(h),
            _ => {
                return Err(ReportError::Csv {
                    path: path.to_path_buf(),
                    message: "empty file (no header)".into(),
                })
            }
        };
        let mut rows = Vec::new();
        let mut skipped = Vec::new();
        for (i, line) in lines {
            if line.trim().is_empty() {
                continue;
            }
            let fields = fields(line);
            if fields.len() == header.len() {
                rows.push(fields);
            } else {
                skipped.push(format!(
                    "{} line {}: {} fields, header has {} (truncated or damaged row skipped)",
                    path.display(),
                    i + 1,
                    fields.len(),
                    header.len()
                ));
            }
        }
        if !text.is_empty() && !text.ends_with('\n') && skipped.is_empty() {
            // A complete-looking last row without its newline: the writer may be mid-row.
            skipped.push(format!(
                "{}: last line has no newline (run still writing?)",
                path.display()
            ));
        }
        Ok(Self {
            path: path.to_path_buf(),
            header,
            rows,
            skipped,
        })
    }

    /// Index of a column, or an error naming the file and column.
    pub fn col(&self, name: &str) -> Result<usize, ReportError> {
        self.header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| ReportError::MissingColumn {
                path: self.path.clone(),
                column: name.to_string(),
            })
    }

    /// A field as f64 (empty or unparsable: NaN, so charts skip it).
    pub fn f64(row: &[String], col: usize) -> f64 {
        row.get(col)
            .and_then(|s| s.parse().ok())
            .unwrap_or(f64::NAN)
    }
}

/// The fields of one line: split at `,` outside quotes; a quoted field loses its quotes
/// and `""` inside it becomes `"`; unquoted fields are trimmed.
fn fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut quoted, mut in_quotes) = (false, false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if in_quotes && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' if in_quotes => in_quotes = false,
            '"' if cur.trim().is_empty() && !quoted => {
                cur.clear();
                quoted = true;
                in_quotes = true;
            }
            ',' if !in_quotes => {
                out.push(if quoted {
                    cur.clone()
                } else {
                    cur.trim().to_string()
                });
                cur.clear();
                quoted = false;
            }
            c => cur.push(c),
        }
    }
    out.push(if quoted { cur } else { cur.trim().to_string() });
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn quoted_fields_keep_their_commas_and_quotes() {
        let t = Table::parse(
            Path::new("h.csv"),
            "scheme,outcome,text\npriorityfec,\"ok\",\"Hello, \"\"world\"\"\"\n udp , x ,\"\"\n",
        )
        .unwrap();
        assert_eq!(t.rows.len(), 2, "{:?}", t.skipped);
        assert_eq!(t.rows[0], ["priorityfec", "ok", "Hello, \"world\""]);
        assert_eq!(t.rows[1], ["udp", "x", ""]);
    }

    use super::*;

    #[test]
    fn truncated_row_is_skipped_and_reported() {
        let t = Table::parse(Path::new("x.csv"), "a,b,c\n1,2,3\n4,5\n").unwrap();
        assert_eq!(t.rows.len(), 1);
        assert_eq!(t.skipped.len(), 1);
        assert!(t.skipped[0].contains("line 3"), "{:?}", t.skipped);
        assert_eq!(t.col("c").unwrap(), 2);
        assert!(matches!(t.col("d"), Err(ReportError::MissingColumn { .. })));
        assert!(Table::f64(&t.rows[0], 1) == 2.0 && Table::f64(&["x".into()], 0).is_nan());
    }

    #[test]
    fn empty_file_is_an_error() {
        assert!(matches!(
            Table::parse(Path::new("x.csv"), ""),
            Err(ReportError::Csv { .. })
        ));
    }
}
