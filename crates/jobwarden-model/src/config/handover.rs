//! The config handed from the daemon to a monitor on its stdin: a header
//! line that says how long the text is, then the text. A monitor started by
//! a daemon that died mid-handover can tell a cut-off config from a
//! complete one (and an empty config, meaning built-in defaults, from
//! nothing at all). A spare monitor reads exactly one frame and then waits
//! on the same stdin for its job's id.

use std::io::{BufRead, Read};

/// First line of the frame.
const HANDOVER_MAGIC: &str = "jobwarden-config-v1";

/// Frame `text` for a monitor's stdin.
pub fn encode_handover(text: &str) -> Vec<u8> {
    format!("{HANDOVER_MAGIC} {}\n{text}", text.len()).into_bytes()
}

/// Unframe a monitor's stdin; an incomplete or foreign frame is an error.
pub fn decode_handover(bytes: &[u8]) -> Result<&str, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "config handover is not UTF-8".to_owned())?;
    let (header, body) = text
        .split_once('\n')
        .ok_or("config handover has no header (was the monitor started by hand?)")?;
    let len = header
        .strip_prefix(HANDOVER_MAGIC)
        .and_then(|n| n.trim().parse::<usize>().ok())
        .ok_or_else(|| format!("config handover header {header:?} is not jobwarden's"))?;
    if body.len() != len {
        return Err(format!(
            "config handover cut short: {} of {len} bytes",
            body.len()
        ));
    }
    Ok(body)
}

/// Longest header line read: the magic, a space and a length.
const HEADER_MAX: u64 = 64;

/// Read exactly one frame from `input`, leaving whatever follows it unread;
/// its text. Errors as [`decode_handover`]'s.
pub fn read_handover(input: &mut impl BufRead) -> Result<String, String> {
    let mut header = Vec::new();
    input
        .by_ref()
        .take(HEADER_MAX)
        .read_until(b'\n', &mut header)
        .map_err(|e| format!("reading the config handover: {e}"))?;
    let len = std::str::from_utf8(&header)
        .ok()
        .and_then(|h| h.strip_prefix(HANDOVER_MAGIC))
        .and_then(|n| n.trim().parse::<u64>().ok());
    let mut frame = header;
    if let Some(len) = len {
        input
            .by_ref()
            .take(len)
            .read_to_end(&mut frame)
            .map_err(|e| format!("reading the config handover: {e}"))?;
    }
    decode_handover(&frame).map(str::to_owned)
}
