//! The HTTP/1.1 upgrade that opens a mesh websocket (RFC 6455 §4): the
//! I/O around `edgemu_codec::wire::upgrade`'s checks. Any standard
//! websocket client can open a session this way (and is then asked for the
//! mesh's own handshake).
//!
//! Both sides read the HTTP head one byte at a time, up to its blank line
//! and not one byte further: the peer may send its first websocket frame
//! right behind the head, and those bytes belong to the framing layer, not
//! to a buffer that would be thrown away. A head is at most
//! [`MAX_HEAD_BYTES`]; the callers bound the whole upgrade with a timeout.

use anyhow::{bail, Context as _, Result};
use edgemu_codec::wire::upgrade::{
    accept_response, check_request, check_response, client_request, new_key, refusal_response,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Longest request or response head accepted.
pub(crate) const MAX_HEAD_BYTES: usize = 8192;

/// Reads an HTTP head up to and including its blank line, never past it.
async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> Result<Vec<u8>> {
    let mut head = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_HEAD_BYTES {
            bail!("HTTP head longer than {MAX_HEAD_BYTES} bytes");
        }
        if s.read(&mut byte).await.context("reading the HTTP head")? == 0 {
            bail!(
                "connection closed in the HTTP head ({} bytes in)",
                head.len()
            );
        }
        head.push(byte[0]);
    }
    Ok(head)
}

/// The dialing side: asks `host` (the `Host` header) to upgrade `path`.
pub(crate) async fn client<S>(s: &mut S, host: &str, path: &str) -> Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let key = new_key(rand::random());
    s.write_all(client_request(host, path, &key).as_bytes())
        .await
        .context("sending the upgrade request")?;
    let head = read_head(s).await?;
    check_response(&head, &key)?;
    Ok(())
}

/// The listening side: reads the request and answers `101`, or a `400`
/// that says what is wrong (and fails).
pub(crate) async fn server<S>(s: &mut S) -> Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let head = read_head(s).await?;
    match check_request(&head) {
        Ok(key) => {
            s.write_all(accept_response(&key).as_bytes())
                .await
                .context("sending the upgrade response")?;
            Ok(())
        }
        Err(why) => {
            let _ = s.write_all(refusal_response(&why).as_bytes()).await;
            Err(why.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn client_and_server_agree_and_leave_the_next_bytes_unread() {
        let (mut a, mut b) = tokio::io::duplex(64 * 1024);
        let server = async {
            server(&mut b).await?;
            // A frame right behind the response stays for the framing layer.
            b.write_all(b"\x82\x01x").await?;
            anyhow::Ok(b)
        };
        let (c, s) = tokio::join!(client(&mut a, "h:1", "/mesh"), server);
        c.expect("client");
        let _b = s.expect("server");
        let mut next = [0u8; 3];
        a.read_exact(&mut next).await.expect("frame bytes");
        assert_eq!(&next, b"\x82\x01x");
    }

    async fn refused(request: &str) -> String {
        let (mut a, mut b) = tokio::io::duplex(64 * 1024);
        a.write_all(request.as_bytes()).await.expect("write");
        let err = server(&mut b).await.expect_err("refused").to_string();
        drop(b);
        let mut answer = String::new();
        a.read_to_string(&mut answer).await.expect("read");
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        err
    }

    #[tokio::test]
    async fn a_bad_request_gets_a_400_that_says_why() {
        let e = refused("POST /mesh HTTP/1.1\r\nHost: h\r\n\r\n").await;
        assert!(e.contains("not GET"), "{e}");
        let e = refused("\x00\x01garbage\r\n\r\n").await;
        assert!(e.contains("malformed"), "{e}");
    }

    #[tokio::test]
    async fn an_endless_head_is_cut_off() {
        let (mut a, mut b) = tokio::io::duplex(64 * 1024);
        let writer = async move {
            let line = vec![b'a'; 1024];
            for _ in 0..16 {
                if a.write_all(&line).await.is_err() {
                    break;
                }
            }
        };
        let (_, r) = tokio::join!(writer, server(&mut b));
        let e = r.expect_err("too long").to_string();
        assert!(e.contains("longer than"), "{e}");
    }

    #[tokio::test]
    async fn a_wrong_accept_key_is_refused_by_the_client() {
        let (mut a, mut b) = tokio::io::duplex(64 * 1024);
        let fake = async move {
            read_head(&mut b).await.expect("request");
            b.write_all(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                  Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
            )
            .await
            .expect("write");
        };
        let (r, _) = tokio::join!(client(&mut a, "h", "/mesh"), fake);
        let e = r.expect_err("mismatch").to_string();
        assert!(e.contains("does not match"), "{e}");
    }
}
