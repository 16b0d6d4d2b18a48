//! What LYREO actors say to each other: the protocol's LYREO messages
//! ([`LyreoMsg`], see `edgemu_protocol::lyreo`), and the prompt upload, a
//! declared-size [`Probe`] whose `seq` is the request id and whose `size`
//! is `⌈l_in·β/8⌉` bytes, so a link charges it like the real upload and
//! chaos can delay, drop or kill it.

pub use edgemu_protocol::lyreo::{Answer, Expected, LyreoMsg, Outcome, SlotReport, TokenChunk};
use edgemu_protocol::{Msg, Probe};

/// Bits uploaded per prompt token (`β`), from the radio model.
pub use edgemu_serving::radio::BITS_PER_TOKEN;

/// The declared-size upload packet of request `id` with `input_len` tokens.
pub fn upload_packet(id: u64, input_len: u32) -> Msg {
    let bits = f64::from(input_len) * BITS_PER_TOKEN;
    Msg::Probe(Probe {
        seq: id,
        size: ((bits / 8.0).ceil() as u32).max(1),
        pad: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_codec::ids::ActorId;

    #[test]
    fn a_payload_is_a_lyreo_message_or_not_and_uploads_have_their_size() {
        let m = LyreoMsg::Assign {
            id: 7,
            slot: 2,
            server: ActorId(3),
            rate_bps: 1.5e7,
            upload_ns: 12_345,
            policy: "least-loaded".into(),
            policy_version: "ab12".into(),
        };
        assert_eq!(LyreoMsg::from_msg(m.clone().into()), Some(m));
        assert_eq!(LyreoMsg::from_msg(Msg::KvFrame(b"nope".to_vec())), None);
        // 70 tokens × 16 bits = 1120 bits = 140 bytes.
        match upload_packet(1, 70) {
            Msg::Probe(p) => assert_eq!((p.seq, p.size), (1, 140)),
            other => panic!("{other:?}"),
        }
        assert_eq!(LyreoMsg::from_msg(upload_packet(1, 70)), None);
    }
}
