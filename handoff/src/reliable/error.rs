//! Errors of the reliable baselines.

/// What went wrong setting up or driving a reliable transfer.
#[derive(Debug, thiserror::Error)]
pub enum ReliableError {
    #[error("{protocol}: TLS setup failed: {what}")]
    Tls {
        protocol: &'static str,
        what: String,
    },
    #[error("{protocol}: could not open the connection: {what}")]
    Connect {
        protocol: &'static str,
        what: String,
    },
    #[error("{protocol}: connection failed at {at_ns} ns: {what}")]
    ConnectionLost {
        protocol: &'static str,
        at_ns: u64,
        what: String,
    },
    #[error("{protocol}: receiver read wrong data at stream offset {offset}")]
    Corrupt { protocol: &'static str, offset: u64 },
    #[error(
        "{protocol}: nothing left to happen at {at_ns} ns with {delivered} of {bytes} bytes read"
    )]
    Stalled {
        protocol: &'static str,
        at_ns: u64,
        delivered: u64,
        bytes: u64,
    },
}
