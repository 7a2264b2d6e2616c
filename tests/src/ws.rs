//! The WebSocket protocol (RFC 6455) as far as the conformance suite's WebSocket test
//! uses it: the opening handshake (`Sec-WebSocket-Accept` computed from the key), text
//! and binary frames (masked from the client, unmasked from the server), ping, pong and
//! close. lab-backend's echo answers with it (as the suite's echo server does on `/ws`),
//! lab-client's `ws-echo` speaks it through the proxies.

use base64::Engine;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The GUID RFC 6455 (section 1.3) appends to the key.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

pub const TEXT: u8 = 0x1;
pub const BINARY: u8 = 0x2;
pub const CLOSE: u8 = 0x8;
pub const PING: u8 = 0x9;
pub const PONG: u8 = 0xA;

/// The `Sec-WebSocket-Accept` answer to `key`: base64(SHA-1(key + GUID)).
pub fn accept_key(key: &str) -> String {
    let d = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("{}{GUID}", key.trim()).as_bytes(),
    );
    base64::engine::general_purpose::STANDARD.encode(d.as_ref())
}

/// One frame (FIN set, no fragmentation: the test's messages are small), masked with
/// `mask` when given (a client must mask, a server must not).
pub fn encode(opcode: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut out = vec![0x80 | opcode];
    let m = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => out.push(m | n as u8),
        n if n <= 0xFFFF => {
            out.push(m | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(m | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        Some(k) => {
            out.extend_from_slice(&k);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ k[i % 4]));
        }
        None => out.extend_from_slice(payload),
    }
    out
}

/// A decoded frame: its opcode, its payload (unmasked), whether it was masked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub opcode: u8,
    pub payload: Vec<u8>,
    pub masked: bool,
}

/// The first frame of `buf` and how many bytes it took; None while incomplete.
pub fn decode(buf: &[u8]) -> Option<(Frame, usize)> {
    let (b0, b1) = (*buf.first()?, *buf.get(1)?);
    let masked = b1 & 0x80 != 0;
    let (len, mut at) = match b1 & 0x7F {
        126 => (
            u16::from_be_bytes(buf.get(2..4)?.try_into().ok()?) as usize,
            4,
        ),
        127 => (
            usize::try_from(u64::from_be_bytes(buf.get(2..10)?.try_into().ok()?)).ok()?,
            10,
        ),
        n => (n as usize, 2),
    };
    let key: Option<[u8; 4]> = if masked {
        let k = buf.get(at..at + 4)?.try_into().ok()?;
        at += 4;
        Some(k)
    } else {
        None
    };
    let data = buf.get(at..at.checked_add(len)?)?;
    let payload = match key {
        Some(k) => data.iter().enumerate().map(|(i, b)| b ^ k[i % 4]).collect(),
        None => data.to_vec(),
    };
    Some((
        Frame {
            opcode: b0 & 0x0F,
            payload,
            masked,
        },
        at + len,
    ))
}

fn read_frame(c: &mut TcpStream, buf: &mut Vec<u8>) -> Result<Frame, String> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((f, n)) = decode(buf) {
            buf.drain(..n);
            return Ok(f);
        }
        let n = c.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("connection closed".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// What the suite's WebSocket test does (`HTTPRouteBackendProtocolWebSocket`, v1.6.1):
/// open `ws://<addr><path>` (Host `host`, Origin `origin`), check the handshake's answer
/// (`101`, the accept key), send the text message `Websocket Support!` and read it back,
/// then the binary message 1..=7 and read it back. Err: what went wrong.
pub fn echo_round_trip(addr: SocketAddr, host: &str, path: &str) -> Result<(), String> {
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    c.set_read_timeout(Some(Duration::from_secs(3)))
        .map_err(|e| e.to_string())?;
    let key = "x3JJHMbDL1EzLkh9GBhXDw==";
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nOrigin: ws://gateway/{path}\r\n\r\n"
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if c.read(&mut byte).map_err(|e| format!("handshake: {e}"))? == 0 {
            return Err(format!(
                "handshake: closed after {:?}",
                String::from_utf8_lossy(&buf)
            ));
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("101") {
        return Err(format!("handshake answered {status:?}"));
    }
    let accept = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("sec-websocket-accept")
            .then(|| v.trim().to_string())
    });
    if accept.as_deref() != Some(accept_key(key).as_str()) {
        return Err(format!("bad Sec-WebSocket-Accept: {accept:?}"));
    }
    let mut rest = Vec::new();
    for (opcode, msg) in [
        (TEXT, b"Websocket Support!".to_vec()),
        (BINARY, vec![1, 2, 3, 4, 5, 6, 7]),
    ] {
        c.write_all(&encode(opcode, &msg, Some([0x12, 0x34, 0x56, 0x78])))
            .map_err(|e| format!("send: {e}"))?;
        let f = read_frame(&mut c, &mut rest)?;
        if f.masked || f.opcode != opcode || f.payload != msg {
            return Err(format!("sent opcode {opcode} {msg:?}, got {f:?}"));
        }
    }
    let _ = c.write_all(&encode(CLOSE, &1000u16.to_be_bytes(), Some([1, 2, 3, 4])));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_key_is_the_one_rfc_6455_gives_for_its_sample_key() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn frames_encode_and_decode_as_rfc_6455_section_5_7_shows() {
        // A single-frame unmasked text message "Hello" and its masked form.
        let plain = [0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f];
        let masked = [
            0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
        ];
        assert_eq!(encode(TEXT, b"Hello", None), plain);
        assert_eq!(
            encode(TEXT, b"Hello", Some([0x37, 0xfa, 0x21, 0x3d])),
            masked
        );
        let (f, n) = decode(&masked).unwrap();
        assert_eq!(
            (f.opcode, f.payload.as_slice(), f.masked, n),
            (TEXT, &b"Hello"[..], true, 11)
        );
        assert_eq!(decode(&masked[..10]), None, "incomplete");
        // A 256-byte binary message takes the 16-bit length.
        let big = vec![7u8; 256];
        let e = encode(BINARY, &big, None);
        assert_eq!(&e[..4], &[0x82, 126, 0x01, 0x00]);
        assert_eq!(decode(&e).unwrap().0.payload, big);
    }
}
