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

/// Why a control command failed: the control path's error from the host
/// that received the command to the hosts that own its targets and back.
/// Hosts pass it to each other as it is (bincode, in a forwarded command's
/// reply); only the control socket writes it as text, in its JSON reply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum ControlError {
    /// The command does not parse or resolve on this host (an
    /// [`ActionError`]'s message, which names the key at fault).
    #[error("{0}")]
    Invalid(String),
    #[error("metrics.subscribe is answered by the control socket it was sent to")]
    SubscribeElsewhere,
    #[error("target is owned by another host and this host has no mesh")]
    TargetNeedsMesh,
    #[error("the command has no target on any host")]
    NoTarget,
    #[error("no actor with id {0}")]
    NoSuchActor(u32),
    #[error("the actor is owned by another host; not forwarded again")]
    NotForwardedAgain,
    #[error("the actor is owned by another host and this host has no mesh")]
    ActorNeedsMesh,
    /// The route planned for a command does not fit it (a bug, not input).
    #[error("the command does not fit its route ({0})")]
    RouteMismatch(String),
    #[error("actor {actor:?} on host {host} has no policy slot")]
    NoPolicySlot { actor: String, host: String },
    /// The policy slot refused the command (weights unreadable or invalid,
    /// unknown policy, nothing to roll back to); the old policy stays.
    #[error("{actor}: {reason}; the active policy is unchanged")]
    PolicyRefused { actor: String, reason: String },
    /// Every target of the command failed, one line per target or host.
    #[error("{}", .0.join("; "))]
    NothingApplied(Vec<String>),
    #[error("run has not started on this host")]
    NotStarted,
    /// A task on the host's blocking pool did not finish (it panicked or
    /// the runtime is shutting down).
    #[error("{task} failed: {reason}")]
    TaskFailed { task: String, reason: String },
    /// The host's supervisor is gone (the run ended) or its task failed.
    #[error("host is shutting down: {0}")]
    HostStopping(String),
    #[error("no reply within {0:?}")]
    NoReply(std::time::Duration),
    #[error("this host has no mesh")]
    NoMesh,
    #[error("no such peer host#{0}")]
    NoSuchPeer(u16),
    #[error("host {0} is down")]
    PeerDown(String),
    #[error("control queue to host {0} is full")]
    PeerQueueFull(String),
    #[error("host {0} is shutting down")]
    PeerLeaving(String),
    #[error("host {0} went down before answering")]
    PeerLost(String),
    #[error("host {host} did not answer within {after:?}")]
    PeerSilent {
        host: String,
        after: std::time::Duration,
    },
    /// Host `host` refused or failed the command forwarded to it. Never on
    /// the wire (`serde(skip)`): a command is forwarded once, so a host's
    /// reply never carries another host's error, and an error decoded from
    /// a peer cannot nest.
    /// Keep it the last variant: a skipped variant before others would
    /// shift their binary tags between encoding and decoding.
    #[serde(skip)]
    #[error("{host}: {error}")]
    Remote {
        host: String,
        error: Box<ControlError>,
    },
}

impl From<ActionError> for ControlError {
    fn from(e: ActionError) -> Self {
        ControlError::Invalid(e.to_string())
    }
}
