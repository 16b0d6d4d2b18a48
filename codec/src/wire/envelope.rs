//! The envelope: one actor-to-actor message, as routed between hosts.

use crate::ids::{ActorId, LinkId};
use serde::{Deserialize, Serialize};

/// One message `payload` from actor `src` to actor `dst`.
///
/// `via` names the link the message must cross before delivery; the link
/// actor on the sending host clears it (so the message is not impaired twice)
/// and sets `due_ns` to the time the link model said it arrives.
/// Times are nanoseconds since the run's epoch (the same instant on every host).
///
/// The codec is generic over the payload: the application (edgemu's actors)
/// defines the one message type `M` that actors say to each other.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope<M> {
    pub src: ActorId,
    pub dst: ActorId,
    pub via: Option<LinkId>,
    pub sent_at_ns: u64,
    /// Arrival time the link model computed (None when no link was crossed).
    pub due_ns: Option<u64>,
    pub payload: M,
}

/// What the codec needs to know of a payload to size buffers: the bytes
/// of bulk data it holds (byte strings, whose length dominates its encoded
/// size; the rest of a message encodes to a few dozen bytes).
pub trait BulkBytes {
    fn bulk_bytes(&self) -> usize;

    /// For a message that is an enum variant holding only a byte string:
    /// the string, taken out (leaving it empty), with the variant's index,
    /// so a sender can write the string from where it lies (see
    /// [`super::GatheredFrame`]). bincode encodes such a message as the
    /// index and the string (a varint length, then the bytes). `None` (the
    /// default) for any other message.
    fn take_trailing_bulk(&mut self) -> Option<TrailingBulk> {
        None
    }

    /// The inverse of [`Self::take_trailing_bulk`]: for a variant index
    /// whose variant holds only a byte string, the message holding what
    /// `bytes` reads (`None` when it reads nothing); `None` without calling
    /// `bytes` for any other variant (the decoder then decodes the message
    /// through serde). The default knows no such variant.
    fn from_trailing_bulk<'a>(
        variant: u32,
        bytes: impl FnOnce() -> Option<&'a [u8]>,
    ) -> Option<Self>
    where
        Self: Sized,
    {
        let _ = (variant, bytes);
        None
    }
}

/// A message's byte string and the index of the enum variant that held it.
#[derive(Debug)]
pub struct TrailingBulk {
    pub variant: u32,
    pub bytes: Vec<u8>,
}
