//! Just enough RESP2 to read a subscribed connection: an incremental frame parser.
//!
//! The listener reads with a timeout (to send keep-alive pings), so a frame may arrive in
//! pieces across reads. [`parse`] therefore works on a byte buffer and answers "not yet" for
//! an incomplete frame instead of losing the bytes read so far. Pure functions; no I/O.

/// One RESP2 value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Frame>>),
}

impl Frame {
    /// The bytes of a simple or bulk string.
    pub(crate) fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Frame::Simple(bytes) | Frame::Bulk(Some(bytes)) => Some(bytes),
            _ => None,
        }
    }
}

/// The stream broke the protocol; the connection must be dropped.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ProtocolError(pub(crate) String);

/// Parses the first frame of `buffer`: `Ok(Some((frame, bytes used)))`, or `Ok(None)` while
/// the frame is incomplete.
pub(crate) fn parse(buffer: &[u8]) -> Result<Option<(Frame, usize)>, ProtocolError> {
    let Some(line_end) = find_crlf(buffer) else {
        return Ok(None);
    };
    let Some((&kind, line)) = buffer[..line_end].split_first() else {
        return Err(ProtocolError("empty line".into()));
    };
    let after_line = line_end + 2;
    match kind {
        b'+' => Ok(Some((Frame::Simple(line.to_vec()), after_line))),
        b'-' => Ok(Some((Frame::Error(line.to_vec()), after_line))),
        b':' => Ok(Some((Frame::Integer(number(line)?), after_line))),
        b'$' => {
            let length = number(line)?;
            if length < 0 {
                return Ok(Some((Frame::Bulk(None), after_line)));
            }
            let end = after_line + length as usize;
            if buffer.len() < end + 2 {
                return Ok(None);
            }
            if &buffer[end..end + 2] != b"\r\n" {
                return Err(ProtocolError("bulk string without CRLF".into()));
            }
            let bytes = buffer[after_line..end].to_vec();
            Ok(Some((Frame::Bulk(Some(bytes)), end + 2)))
        }
        b'*' => {
            let length = number(line)?;
            if length < 0 {
                return Ok(Some((Frame::Array(None), after_line)));
            }
            let mut items = Vec::with_capacity(length.min(16) as usize);
            let mut used = after_line;
            for _ in 0..length {
                match parse(&buffer[used..])? {
                    Some((item, item_length)) => {
                        items.push(item);
                        used += item_length;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Frame::Array(Some(items)), used)))
        }
        other => Err(ProtocolError(format!("unknown type byte {other:#x}"))),
    }
}

fn find_crlf(buffer: &[u8]) -> Option<usize> {
    buffer.windows(2).position(|pair| pair == b"\r\n")
}

fn number(digits: &[u8]) -> Result<i64, ProtocolError> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| ProtocolError(format!("bad number {digits:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Frame {
        Frame::Bulk(Some(text.as_bytes().to_vec()))
    }

    #[test]
    fn parses_a_published_message() {
        let wire = b"*3\r\n$7\r\nmessage\r\n$4\r\nch:1\r\n$1\r\n0\r\n";
        let (frame, used) = parse(wire).unwrap().unwrap();
        assert_eq!(used, wire.len());
        assert_eq!(
            frame,
            Frame::Array(Some(vec![bulk("message"), bulk("ch:1"), bulk("0")]))
        );
    }

    #[test]
    fn waits_for_the_rest_of_a_split_frame() {
        let wire = b"*3\r\n$9\r\nsubscribe\r\n$2\r\nab\r\n:1\r\n+PONG\r\n";
        for cut in 0..wire.len() - 7 {
            assert_eq!(parse(&wire[..cut]), Ok(None), "cut at {cut}");
        }
        let (frame, used) = parse(wire).unwrap().unwrap();
        assert_eq!(
            frame,
            Frame::Array(Some(vec![bulk("subscribe"), bulk("ab"), Frame::Integer(1)]))
        );
        assert_eq!(
            parse(&wire[used..]).unwrap(),
            Some((Frame::Simple(b"PONG".to_vec()), 7))
        );
    }

    #[test]
    fn reports_errors_nulls_and_garbage() {
        assert_eq!(
            parse(b"-NOAUTH no\r\n").unwrap(),
            Some((Frame::Error(b"NOAUTH no".to_vec()), 12))
        );
        assert_eq!(parse(b"$-1\r\n").unwrap(), Some((Frame::Bulk(None), 5)));
        assert!(parse(b"?what\r\n").is_err());
        assert!(parse(b"$2\r\nabcd\r\n").is_err());
    }
}
