//! Errors: [`ConfigError`] for a whole file, [`ActionError`] for one control
//! command (or one `[[chaos]]` entry, which goes through the same parser).

use std::fmt;
use std::path::PathBuf;

/// One problem in a config file, with the place it is at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: PathBuf,
    /// 1-based.
    pub line: usize,
    /// 1-based, in characters.
    pub column: usize,
    /// What was wrong and what was expected.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file.display(),
            self.line,
            self.column,
            self.message
        )
    }
}

/// All problems found in a file, in file order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file (or a trace file it names, when no better place is known) could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Syntax or validation errors, each with file, line and column.
    #[error("{0}")]
    Invalid(Diagnostics),
}

impl ConfigError {
    /// The located problems (empty for [`ConfigError::Io`]).
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            ConfigError::Invalid(d) => &d.0,
            ConfigError::Io { .. } => &[],
        }
    }
}

/// A control command (or `[[chaos]]` entry) that cannot be turned into a
/// [`crate::command::Resolved`]. `field` is the key at fault, dotted for nested
/// tables (`"loss.p"`).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ActionError {
    #[error("unknown command {command:?}; expected one of: {}", valid.join(", "))]
    UnknownCommand { command: String, valid: Vec<String> },
    #[error("key `{}` is not valid for {context}; valid keys: {}", leaf(field), valid.join(", "))]
    UnknownField {
        field: String,
        context: String,
        valid: Vec<String>,
    },
    #[error("missing required key `{field}`: expected {expected}")]
    MissingField { field: String, expected: String },
    #[error("`{field}`: {message}")]
    InvalidValue { field: String, message: String },
    #[error(
        "`{field}`: no {what} named {name:?}; defined {what}s: {}",
        list_or_none(known)
    )]
    UnknownName {
        field: String,
        what: &'static str,
        name: String,
        known: Vec<String>,
    },
}

/// The last part of a dotted field name.
fn leaf(field: &str) -> &str {
    field.rsplit('.').next().unwrap_or(field)
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "(none)".into()
    } else {
        names.join(", ")
    }
}

impl ActionError {
    /// The key at fault (dotted for nested tables), if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            ActionError::UnknownCommand { .. } => None,
            ActionError::UnknownField { field, .. }
            | ActionError::MissingField { field, .. }
            | ActionError::InvalidValue { field, .. }
            | ActionError::UnknownName { field, .. } => Some(field),
        }
    }

    /// The same error with `prefix.` put before its field (for nested tables).
    pub(crate) fn nested(mut self, prefix: &str) -> Self {
        match &mut self {
            ActionError::UnknownCommand { .. } => {}
            ActionError::UnknownField { field, .. }
            | ActionError::MissingField { field, .. }
            | ActionError::InvalidValue { field, .. }
            | ActionError::UnknownName { field, .. } => *field = format!("{prefix}.{field}"),
        }
        self
    }

    pub(crate) fn invalid(field: &str, message: impl Into<String>) -> Self {
        ActionError::InvalidValue {
            field: field.to_string(),
            message: message.into(),
        }
    }
}
