//! The mesh's websocket: RFC 6455 framing over a TCP stream opened by
//! [`super::upgrade`]; fastwebsockets reads, and a session's writer frames
//! what it sends itself.
//!
//! Every mesh frame ([`edgemu_protocol::Frame`]) travels as one binary
//! websocket message. A frame of envelopes is written without copying its
//! envelopes' byte strings (KV frames, tunnelled packets): the rest of the
//! frame is encoded into one small buffer and the byte strings, taken out
//! of the envelopes being sent, are handed to the kernel from where they
//! lie in one vectored write ([`edgemu_codec::wire::GatheredFrame`]); the
//! dialing side (the websocket client, which masks) masks each part in
//! place. The receiver reads into one reused buffer and decodes the
//! payload where it lies (unmasking in place). The framing checks what a
//! peer sends: reserved bits, opcodes, control frame sizes and a message
//! size limit; fragmented messages are refused (no mesh peer sends them).
//! It does not check that a client's frames are masked and a server's are
//! not (fastwebsockets keeps that bit to itself): a frame masked the wrong
//! way decodes as garbage, which the frame decoder refuses and counts;
//! peers are authenticated anyway.
//!
//! Before the mesh handshake is done a message may be at most
//! [`HANDSHAKE_MESSAGE_BYTES`] (the framing reserves room for a frame's
//! declared length once it has its header: an unauthenticated peer must
//! not make it reserve megabytes); a session allows [`MAX_MESSAGE_BYTES`].
//!
//! During the mesh handshake the socket is used whole; a session splits it
//! into a [`MeshReader`] and a [`MeshWriter`] on the TCP stream's owned
//! halves, so reading never waits for a write. A ping read by the reader is
//! answered by the writer (the session passes it on).

use anyhow::{bail, Context as _, Result};
use edgemu_codec::wire::GatheredFrame;
use edgemu_codec::wire::MAX_FRAME_BYTES;
use edgemu_protocol::{encode_frame, encode_frame_into, gather_envelopes, Envelope, Frame};
use fastwebsockets::{OpCode, Payload, Role, WebSocket, WebSocketRead};
use std::io::IoSlice;
use tokio::io::AsyncWriteExt as _;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// Largest websocket message accepted in a session: a mesh frame and some slack.
const MAX_MESSAGE_BYTES: usize = MAX_FRAME_BYTES + 1024;
/// Largest message before the handshake is done (`Hello`, `Auth`).
const HANDSHAKE_MESSAGE_BYTES: usize = 64 * 1024;

/// What the reading side got.
pub(crate) enum Incoming<'a> {
    /// A binary message's bytes (a mesh frame to decode).
    Data(&'a [u8]),
    /// A ping to answer with a pong carrying these bytes.
    Ping(Vec<u8>),
    /// A text message or a pong: nothing the mesh uses.
    Ignored,
    /// The peer closed the websocket.
    Closed,
}

/// One mesh frame as a binary websocket message.
fn binary(frame: &Frame) -> Result<fastwebsockets::Frame<'static>> {
    Ok(fastwebsockets::Frame::binary(Payload::Owned(encode_frame(
        frame,
    )?)))
}

/// A mesh websocket after its HTTP upgrade.
pub(crate) struct MeshSocket {
    ws: WebSocket<TcpStream>,
    /// This side dialed (a websocket client): what it sends is masked.
    masks: bool,
}

impl MeshSocket {
    /// `tcp` after [`super::upgrade::client`] (`Role::Client`, which masks
    /// what it sends) or [`super::upgrade::server`] (`Role::Server`).
    pub(crate) fn new(tcp: TcpStream, role: Role) -> Self {
        let mut ws = WebSocket::after_handshake(tcp, role);
        ws.set_max_message_size(HANDSHAKE_MESSAGE_BYTES);
        ws.set_auto_pong(true);
        ws.set_auto_close(true);
        ws.set_writev(true);
        MeshSocket {
            ws,
            masks: matches!(role, Role::Client),
        }
    }

    /// Sends one mesh frame.
    pub(crate) async fn send(&mut self, frame: &Frame) -> Result<()> {
        let message = binary(frame)?;
        self.ws
            .write_frame(message)
            .await
            .context("websocket write")
    }

    /// Reads until a binary message arrives; returns its bytes (`None` when
    /// the peer closed). Pings are answered on the way.
    pub(crate) async fn recv(&mut self) -> Result<Option<Vec<u8>>> {
        loop {
            let frame = self.ws.read_frame().await.context("websocket read")?;
            if !frame.fin || frame.opcode == OpCode::Continuation {
                bail!("fragmented websocket message (the mesh sends whole messages)");
            }
            match frame.opcode {
                OpCode::Binary => return Ok(Some(frame.payload.to_vec())),
                OpCode::Close => return Ok(None),
                _ => continue,
            }
        }
    }

    /// Splits the socket for a session: fastwebsockets keeps reading (with
    /// whatever it has already buffered); the writer takes the TCP stream's
    /// write half.
    pub(crate) fn split(self) -> Result<(MeshReader, MeshWriter)> {
        let write_half = std::cell::Cell::new(None);
        let (mut r, _) = self.ws.split(|tcp: TcpStream| {
            let (r, w) = tcp.into_split();
            write_half.set(Some(w));
            (r, tokio::io::sink())
        });
        let tcp = write_half
            .into_inner()
            .context("the websocket split gave no write half")?;
        // Pongs and the echo of a peer's close are the session's to send:
        // the reader has no writer after a split (a whole socket answers
        // them itself).
        r.set_auto_pong(false);
        r.set_auto_close(false);
        // The handshake is done: a session carries whole mesh frames.
        r.set_max_message_size(MAX_MESSAGE_BYTES);
        Ok((
            MeshReader { ws: r },
            MeshWriter {
                tcp,
                masks: self.masks,
                buf: Vec::new(),
                gathered: GatheredFrame::new(),
            },
        ))
    }
}

/// The reading half of a session's socket.
pub(crate) struct MeshReader {
    ws: WebSocketRead<OwnedReadHalf>,
}

/// The obligations a split reader never has (its automatic pong and close
/// echo are off): its send function is never called.
async fn nothing_to_send(_: fastwebsockets::Frame<'_>) -> Result<(), std::io::Error> {
    Ok(())
}

impl MeshReader {
    /// Reads the next websocket message; `on` gets what arrived (a binary
    /// message's bytes only live until `on` returns).
    pub(crate) async fn next<T>(&mut self, on: impl FnOnce(Incoming<'_>) -> T) -> Result<T> {
        let frame = self
            .ws
            .read_frame(&mut nothing_to_send)
            .await
            .context("websocket read")?;
        if !frame.fin || frame.opcode == OpCode::Continuation {
            bail!("fragmented websocket message (the mesh sends whole messages)");
        }
        Ok(match frame.opcode {
            OpCode::Binary => on(Incoming::Data(&frame.payload)),
            OpCode::Ping => on(Incoming::Ping(frame.payload.to_vec())),
            OpCode::Close => on(Incoming::Closed),
            _ => on(Incoming::Ignored),
        })
    }
}

/// The writing half of a session's socket.
pub(crate) struct MeshWriter {
    tcp: OwnedWriteHalf,
    /// Whether this side masks (it dialed: a websocket client).
    masks: bool,
    /// Messages other than envelope lists are encoded into this one buffer.
    buf: Vec<u8>,
    /// Envelope lists are gathered here.
    gathered: GatheredFrame,
}

/// Opcodes of the frames a writer sends.
const BINARY: u8 = 0x2;
const CLOSE: u8 = 0x8;
const PONG: u8 = 0xA;

/// An RFC 6455 frame header (FIN set) for a `len`-byte payload.
fn frame_head(opcode: u8, len: usize, mask: Option<[u8; 4]>) -> ([u8; 14], usize) {
    let mut head = [0u8; 14];
    head[0] = 0x80 | opcode;
    let mut n = if len < 126 {
        head[1] = len as u8;
        2
    } else if let Ok(len16) = u16::try_from(len) {
        head[1] = 126;
        head[2..4].copy_from_slice(&len16.to_be_bytes());
        4
    } else {
        head[1] = 127;
        head[2..10].copy_from_slice(&(len as u64).to_be_bytes());
        10
    };
    if let Some(key) = mask {
        head[1] |= 0x80;
        head[n..n + 4].copy_from_slice(&key);
        n += 4;
    }
    (head, n)
}

/// Masks `part`, which starts `offset` bytes into a payload masked with
/// `key` (eight bytes at a time, which the compiler turns into vector
/// instructions).
fn mask_part(key: [u8; 4], offset: usize, part: &mut [u8]) {
    let k = [
        key[offset % 4],
        key[(offset + 1) % 4],
        key[(offset + 2) % 4],
        key[(offset + 3) % 4],
    ];
    let k8 = u64::from_ne_bytes([k[0], k[1], k[2], k[3], k[0], k[1], k[2], k[3]]);
    let mut chunks = part.chunks_exact_mut(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        c.copy_from_slice(&(u64::from_ne_bytes(w) ^ k8).to_ne_bytes());
    }
    // Whole chunks keep the key's phase (8 is a multiple of 4).
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= k[i % 4];
    }
}

/// Writes all of `slices` (advancing through partial writes).
async fn write_all_vectored(
    tcp: &mut OwnedWriteHalf,
    mut slices: &mut [IoSlice<'_>],
) -> Result<()> {
    while !slices.is_empty() {
        let n = tcp
            .write_vectored(slices)
            .await
            .context("websocket write")?;
        if n == 0 {
            bail!("websocket write: the connection took no bytes");
        }
        IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}

impl MeshWriter {
    /// A fresh masking key when this side masks (RFC 6455 asks a client for
    /// an unpredictable one per frame).
    fn key(&self) -> Option<[u8; 4]> {
        self.masks.then(rand::random::<[u8; 4]>)
    }

    /// Sends the writer's buffer as one message of `opcode`: masked in
    /// place when this side is the client, header and payload in one
    /// vectored write.
    async fn send_buf(&mut self, opcode: u8) -> Result<()> {
        let key = self.key();
        let (head, n) = frame_head(opcode, self.buf.len(), key);
        if let Some(key) = key {
            mask_part(key, 0, &mut self.buf);
        }
        let mut slices = [IoSlice::new(&head[..n]), IoSlice::new(&self.buf)];
        write_all_vectored(&mut self.tcp, &mut slices).await
    }

    /// Sends one mesh frame (encoded into the writer's buffer).
    pub(crate) async fn send(&mut self, frame: &Frame) -> Result<()> {
        encode_frame_into(frame, &mut self.buf)?;
        self.send_buf(BINARY).await
    }

    /// Sends `envs` as one frame, their byte strings written from their
    /// own buffers.
    pub(crate) async fn send_envelopes(
        &mut self,
        envs: impl ExactSizeIterator<Item = Envelope>,
    ) -> Result<()> {
        gather_envelopes(envs, &mut self.gathered)?;
        let key = self.key();
        let (head, n) = frame_head(BINARY, self.gathered.len(), key);
        if let Some(key) = key {
            self.gathered
                .for_each_part_mut(|offset, part| mask_part(key, offset, part));
        }
        let mut slices = Vec::with_capacity(2 * self.gathered.gathered_parts() + 2);
        slices.push(IoSlice::new(&head[..n]));
        self.gathered.io_slices(&mut slices);
        let r = write_all_vectored(&mut self.tcp, &mut slices).await;
        self.gathered.clear();
        r
    }

    /// Answers a ping.
    pub(crate) async fn pong(&mut self, payload: Vec<u8>) -> Result<()> {
        self.buf.clear();
        self.buf.extend_from_slice(&payload);
        self.send_buf(PONG).await
    }

    /// Sends a close frame (normal closure).
    pub(crate) async fn close(&mut self) -> Result<()> {
        self.buf.clear();
        self.buf.extend_from_slice(&1000u16.to_be_bytes());
        self.send_buf(CLOSE).await
    }
}

#[cfg(test)]
mod tests {
    //! Against tungstenite, an independent RFC 6455 implementation.
    use super::*;
    use edgemu_codec::wire::Heartbeat;
    use edgemu_protocol::decode_frame;
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;

    fn heartbeat(seq: u64) -> Frame {
        Frame::Heartbeat(Heartbeat {
            seq,
            sent_ns: 7,
            echo_ns: None,
            echo_hold_ns: 0,
        })
    }

    async fn listen() -> (tokio::net::TcpListener, std::net::SocketAddr) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        (listener, addr)
    }

    /// The next connection, upgraded and split as the mesh's listener does.
    async fn accept(listener: &tokio::net::TcpListener) -> (MeshReader, MeshWriter) {
        let (mut tcp, _) = listener.accept().await.expect("accept");
        super::super::upgrade::server(&mut tcp)
            .await
            .expect("upgrade");
        MeshSocket::new(tcp, Role::Server).split().expect("split")
    }

    #[tokio::test]
    async fn a_standard_client_opens_a_session_and_frames_go_both_ways() {
        let (listener, addr) = listen().await;
        let ours = async {
            let (mut rx, mut tx) = accept(&listener).await;
            tx.send(&heartbeat(1)).await.expect("send");
            // A ping, then a binary message (masked by the client).
            let ping = rx
                .next(|m| match m {
                    Incoming::Ping(p) => p,
                    _ => panic!("expected the ping first"),
                })
                .await
                .expect("read");
            tx.pong(ping).await.expect("pong");
            let got = rx
                .next(|m| match m {
                    Incoming::Data(b) => decode_frame(b).expect("decode"),
                    _ => panic!("expected data"),
                })
                .await
                .expect("read");
            assert!(matches!(got, Frame::Heartbeat(h) if h.seq == 2));
            let closed = rx
                .next(|m| matches!(m, Incoming::Closed))
                .await
                .expect("read");
            assert!(closed);
        };
        let theirs = async {
            let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/mesh"))
                .await
                .expect("connect");
            let first = ws.next().await.expect("a message").expect("ok");
            let f = decode_frame(&first.into_data()).expect("decode");
            assert!(matches!(f, Frame::Heartbeat(h) if h.seq == 1));
            ws.send(Message::Ping(b"hi".to_vec().into()))
                .await
                .expect("ping");
            let pong = ws.next().await.expect("a message").expect("ok");
            assert_eq!(pong, Message::Pong(b"hi".to_vec().into()));
            let bytes = encode_frame(&heartbeat(2)).expect("encode");
            ws.send(Message::binary(bytes)).await.expect("send");
            ws.close(None).await.expect("close");
        };
        tokio::join!(ours, theirs);
    }

    #[test]
    fn masking_in_parts_at_any_offset_is_masking_the_whole() {
        let key = [0x9a, 0x41, 0x07, 0xee];
        let data: Vec<u8> = (0..300u32).map(|i| (i * 31 % 251) as u8).collect();
        let expected: Vec<u8> = data
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ key[i % 4])
            .collect();
        for cut in [0usize, 1, 3, 7, 8, 13, 64, 299, 300] {
            let mut masked = data.clone();
            let (a, b) = masked.split_at_mut(cut);
            mask_part(key, 0, a);
            mask_part(key, cut, b);
            assert_eq!(masked, expected, "cut at {cut}");
        }
    }

    #[tokio::test]
    async fn a_message_over_the_limit_ends_the_read() {
        let (listener, addr) = listen().await;
        let ours = async {
            let (mut rx, _tx) = accept(&listener).await;
            let r = rx.next(|_| ()).await;
            assert!(r.is_err(), "a {} B message was read", MAX_MESSAGE_BYTES + 1);
        };
        let theirs = async {
            let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/mesh"))
                .await
                .expect("connect");
            let _ = ws
                .send(Message::binary(vec![0u8; MAX_MESSAGE_BYTES + 1]))
                .await;
        };
        tokio::join!(ours, theirs);
    }
}
