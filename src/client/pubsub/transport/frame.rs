//! Just enough RESP2 to read a subscribed connection: an incremental frame parser.
//!
//! The listener reads with a timeout (to send keep-alive pings), so a frame may arrive in
//! pieces across reads. [`parse`] therefore works on a byte buffer and answers "not yet" for
//! an incomplete frame instead of losing the bytes read so far. Pure functions; no I/O.
//!
//! The parser is total: whatever the bytes, it answers a frame, "not yet" or a
//! [`ProtocolError`], and never panics, overflows or recurses without bound. A frame may
//! nest at most [`MAX_DEPTH`] arrays, hold at most [`MAX_ARRAY_LENGTH`] items per array,
//! and take at most [`MAX_FRAME_LENGTH`] bytes; a line may take at most [`MAX_LINE_LENGTH`]
//! bytes. A subscribed connection only ever carries arrays of three or four short strings,
//! so anything beyond these limits is a broken or hostile stream, and waiting for the rest of
//! it would only grow the listener's buffer.

/// The deepest nesting of arrays accepted (a subscribed connection uses 1).
pub(crate) const MAX_DEPTH: usize = 8;
/// The most items one array may announce (a subscribed connection uses 3 or 4).
pub(crate) const MAX_ARRAY_LENGTH: i64 = 1024;
/// The most bytes one frame, with everything nested in it, may take: lock names and notice
/// payloads are far shorter.
pub(crate) const MAX_FRAME_LENGTH: usize = 16 * 1024 * 1024;
/// The most bytes of a type byte and line (a simple string, an error, a number) before its
/// CRLF.
pub(crate) const MAX_LINE_LENGTH: usize = 64 * 1024;

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

/// The stream broke the protocol or the limits above; the connection must be dropped.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ProtocolError(pub(crate) String);

/// Parses the first frame of `buffer`: `Ok(Some((frame, bytes used)))`, or `Ok(None)` while
/// the frame is incomplete.
pub(crate) fn parse(buffer: &[u8]) -> Result<Option<(Frame, usize)>, ProtocolError> {
    // Nothing in a frame can end past the frame limit, so only that much is looked at.
    let window = &buffer[..buffer.len().min(MAX_FRAME_LENGTH)];
    match parse_at(window, 0, 0)? {
        Some(parsed) => Ok(Some(parsed)),
        None if buffer.len() >= MAX_FRAME_LENGTH => Err(ProtocolError(format!(
            "frame longer than {MAX_FRAME_LENGTH} bytes"
        ))),
        None => Ok(None),
    }
}

/// Parses the frame that starts at `start`, nested in `depth` arrays; answers it with the
/// offset just past it.
fn parse_at(
    buffer: &[u8],
    start: usize,
    depth: usize,
) -> Result<Option<(Frame, usize)>, ProtocolError> {
    let Some(Line {
        kind,
        content: line,
        end: after_line,
    }) = line_at(buffer, start)?
    else {
        return Ok(None);
    };
    match kind {
        b'+' => Ok(Some((Frame::Simple(line.to_vec()), after_line))),
        b'-' => Ok(Some((Frame::Error(line.to_vec()), after_line))),
        b':' => Ok(Some((Frame::Integer(number(line)?), after_line))),
        b'$' => {
            let Some(length) = length(line, MAX_FRAME_LENGTH as i64)? else {
                return Ok(Some((Frame::Bulk(None), after_line)));
            };
            // Both bounded by the buffer and the frame limit: no overflow.
            let end = after_line + length;
            let Some(terminator) = buffer.get(end..end + 2) else {
                return Ok(None);
            };
            if terminator != b"\r\n" {
                return Err(ProtocolError("bulk string without CRLF".into()));
            }
            let bytes = buffer[after_line..end].to_vec();
            Ok(Some((Frame::Bulk(Some(bytes)), end + 2)))
        }
        b'*' => {
            let Some(length) = length(line, MAX_ARRAY_LENGTH)? else {
                return Ok(Some((Frame::Array(None), after_line)));
            };
            if depth >= MAX_DEPTH {
                return Err(ProtocolError(format!(
                    "arrays nested deeper than {MAX_DEPTH}"
                )));
            }
            let mut items = Vec::with_capacity(length.min(16));
            let mut next = after_line;
            for _ in 0..length {
                let Some((item, after_item)) = parse_at(buffer, next, depth + 1)? else {
                    return Ok(None);
                };
                items.push(item);
                next = after_item;
            }
            Ok(Some((Frame::Array(Some(items)), next)))
        }
        other => Err(ProtocolError(format!("unknown type byte {other:#x}"))),
    }
}

/// One line of the stream: a type byte and what follows it up to the CRLF.
struct Line<'a> {
    kind: u8,
    content: &'a [u8],
    /// The offset just past the CRLF.
    end: usize,
}

/// The line that starts at `start`; `None` while its CRLF has not arrived.
fn line_at(buffer: &[u8], start: usize) -> Result<Option<Line<'_>>, ProtocolError> {
    let rest = buffer.get(start..).unwrap_or_default();
    let searched = &rest[..rest.len().min(MAX_LINE_LENGTH + 2)];
    let Some(line_end) = searched.windows(2).position(|pair| pair == b"\r\n") else {
        if searched.len() >= MAX_LINE_LENGTH + 2 {
            return Err(ProtocolError(format!(
                "line longer than {MAX_LINE_LENGTH} bytes"
            )));
        }
        return Ok(None);
    };
    let Some((&kind, content)) = rest[..line_end].split_first() else {
        return Err(ProtocolError("empty line".into()));
    };
    Ok(Some(Line {
        kind,
        content,
        end: start + line_end + 2,
    }))
}

/// A bulk string's or an array's length: `None` for the null value (`-1`).
fn length(line: &[u8], max: i64) -> Result<Option<usize>, ProtocolError> {
    match number(line)? {
        -1 => Ok(None),
        length if (0..=max).contains(&length) => Ok(usize::try_from(length).ok()),
        length => Err(ProtocolError(format!("length {length} outside 0..={max}"))),
    }
}

fn number(digits: &[u8]) -> Result<i64, ProtocolError> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| ProtocolError(format!("bad number {:?}", String::from_utf8_lossy(digits))))
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
        assert_eq!(parse(b"*-1\r\n").unwrap(), Some((Frame::Array(None), 5)));
        assert!(parse(b"?what\r\n").is_err());
        assert!(parse(b"$2\r\nabcd\r\n").is_err());
        assert!(parse(b"\r\n").is_err());
        assert!(parse(b":12x\r\n").is_err());
        assert!(parse(b"$-2\r\n").is_err());
        assert!(parse(b"*-5\r\n").is_err());
    }

    #[test]
    fn every_truncation_of_a_valid_stream_waits() {
        let wire: &[u8] = b"*2\r\n*3\r\n$9\r\nsubscribe\r\n$-1\r\n:7\r\n*0\r\n";
        assert!(parse(wire).unwrap().is_some());
        for cut in 0..wire.len() {
            assert_eq!(parse(&wire[..cut]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn lengths_that_would_overflow_are_refused() {
        for header in [
            "$9223372036854775807\r\n",
            "$18446744073709551615\r\n",
            "$-9223372036854775808\r\n",
            "*9223372036854775807\r\n",
            "*99999999999999999999999\r\n",
            ":99999999999999999999999\r\n",
        ] {
            assert!(parse(header.as_bytes()).is_err(), "{header:?}");
        }
    }

    #[test]
    fn oversized_frames_are_refused_without_waiting_for_them() {
        let too_long = format!("${}\r\n", MAX_FRAME_LENGTH + 1);
        assert!(parse(too_long.as_bytes()).is_err());
        let too_many = format!("*{}\r\n", MAX_ARRAY_LENGTH + 1);
        assert!(parse(too_many.as_bytes()).is_err());

        // A line that never ends.
        let endless = vec![b'+'; MAX_LINE_LENGTH + 2];
        assert!(parse(&endless).is_err());
        assert_eq!(parse(&endless[..MAX_LINE_LENGTH]), Ok(None));

        // Items that are each fine but add up past the frame limit.
        let mut frame = format!("*{MAX_ARRAY_LENGTH}\r\n").into_bytes();
        let item = format!("${}\r\n{}\r\n", 64 * 1024, "x".repeat(64 * 1024));
        while frame.len() < MAX_FRAME_LENGTH {
            frame.extend_from_slice(item.as_bytes());
        }
        assert!(parse(&frame).is_err());
    }

    #[test]
    fn deep_nesting_is_refused_without_recursing() {
        let nested = b"*1\r\n".repeat(100_000);
        assert!(parse(&nested).is_err());
        let mut just_deep_enough = b"*1\r\n".repeat(MAX_DEPTH);
        just_deep_enough.extend_from_slice(b":1\r\n");
        assert!(parse(&just_deep_enough).unwrap().is_some());
        let mut one_too_deep = b"*1\r\n".repeat(MAX_DEPTH + 1);
        one_too_deep.extend_from_slice(b":1\r\n");
        assert!(parse(&one_too_deep).is_err());
    }

    #[test]
    fn garbage_never_panics() {
        // A fixed-seed xorshift: reproducible bytes, biased toward RESP's own characters so
        // the parser gets past the first byte often.
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let alphabet = b"*$:+-\r\n0123456789-1x";
        for _ in 0..20_000 {
            let length = (next() % 64) as usize;
            let bytes: Vec<u8> = (0..length)
                .map(|_| match next() % 4 {
                    0 => next() as u8,
                    _ => alphabet[(next() % alphabet.len() as u64) as usize],
                })
                .collect();
            if let Ok(Some((_, used))) = parse(&bytes) {
                assert!(used <= bytes.len());
            }
        }
    }
}
