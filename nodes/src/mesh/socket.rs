//! The mesh's websocket: RFC 6455 framing (fastwebsockets) over a TCP
//! stream opened by [`super::upgrade`].
//!
//! Every mesh frame ([`edgemu_protocol::Frame`]) travels as one binary
//! websocket message. The data path copies a frame's bytes once in user
//! space on each side: the sender encodes into one buffer, masks it in place
//! (the dialing side is the websocket client, which masks) and hands header
//! and payload to one vectored write; the receiver reads into one reused
//! buffer and decodes the payload where it lies (unmasking in place). The
//! framing checks what a peer sends: reserved bits, opcodes, control frame
//! sizes and a message size limit; fragmented messages are refused (no
//! mesh peer sends them). It does not check that a client's frames are
//! masked and a server's are not (fastwebsockets keeps that bit to
//! itself): a frame masked the wrong way decodes as garbage, which the
//! frame decoder refuses and counts; peers are authenticated anyway.
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
use edgemu_codec::wire::MAX_FRAME_BYTES;
use edgemu_protocol::{encode_frame, encode_frame_into, Frame};
use fastwebsockets::{OpCode, Payload, Role, WebSocket, WebSocketRead, WebSocketWrite};
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
        MeshSocket { ws }
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

    /// Splits the socket for a session.
    pub(crate) fn split(self) -> (MeshReader, MeshWriter) {
        let (mut r, mut w) = self.ws.split(TcpStream::into_split);
        // Pongs and the echo of a peer's close are the session's to send:
        // the reader has no writer after a split (a whole socket answers
        // them itself).
        r.set_auto_pong(false);
        r.set_auto_close(false);
        // The handshake is done: a session carries whole mesh frames.
        r.set_max_message_size(MAX_MESSAGE_BYTES);
        w.set_writev(true);
        (
            MeshReader { ws: r },
            MeshWriter {
                ws: w,
                buf: Vec::new(),
            },
        )
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
    ws: WebSocketWrite<OwnedWriteHalf>,
    /// Every frame is encoded into this one buffer (and masked there).
    buf: Vec<u8>,
}

impl MeshWriter {
    /// Sends one mesh frame: encoded into the writer's buffer, masked there
    /// when this side is the client, header and payload in one vectored
    /// write.
    pub(crate) async fn send(&mut self, frame: &Frame) -> Result<()> {
        encode_frame_into(frame, &mut self.buf)?;
        let message = fastwebsockets::Frame::binary(Payload::BorrowedMut(&mut self.buf));
        self.ws
            .write_frame(message)
            .await
            .context("websocket write")
    }

    /// Answers a ping.
    pub(crate) async fn pong(&mut self, payload: Vec<u8>) -> Result<()> {
        self.ws
            .write_frame(fastwebsockets::Frame::pong(Payload::Owned(payload)))
            .await
            .context("websocket write")
    }

    /// Sends a close frame (normal closure).
    pub(crate) async fn close(&mut self) -> Result<()> {
        self.ws
            .write_frame(fastwebsockets::Frame::close(1000, b""))
            .await
            .context("websocket write")
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
        MeshSocket::new(tcp, Role::Server).split()
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
