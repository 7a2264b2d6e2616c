//! Strict PEM (RFC 7468) for the fields of a TLS Secret: the blocks of a text, each
//! `-----BEGIN <label>-----`, base64 lines, `-----END <label>-----`, and the canonical form
//! that is handed to the nodes.
//!
//! Explanatory text between blocks (RFC 7468 section 2) is allowed and dropped: what the
//! nodes get is re-encoded from the decoded blocks ([`encode`]), so no byte of it reaches
//! OpenSSL's own PEM reader. Anything that could be read as a block in another way is
//! refused rather than guessed at: a `-----BEGIN`/`-----END` anywhere but a block's own
//! lines, a block without its end, PEM headers (`Proc-Type:`, legacy encrypted keys), a
//! body that is not strict base64 or that is empty. Errors never quote the text.

use base64::Engine;

/// One decoded block.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Block {
    /// `CERTIFICATE`, `PRIVATE KEY`, ... (upper-case letters, digits and spaces only).
    pub label: String,
    pub der: Vec<u8>,
}

/// Never the bytes (a block may be a key).
impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Block({}, {} bytes)", self.label, self.der.len())
    }
}

/// The longest label read (`ENCRYPTED PRIVATE KEY` is 21).
const MAX_LABEL: usize = 40;

/// The blocks of `text`, in order; at most `max` of them.
pub(super) fn blocks(text: &str, max: usize) -> Result<Vec<Block>, String> {
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.trim_end_matches(['\r', ' ', '\t']);
        let n = i + 1;
        match &mut open {
            None => {
                if let Some(label) = line
                    .strip_prefix("-----BEGIN ")
                    .and_then(|r| r.strip_suffix("-----"))
                {
                    if !label_ok(label) {
                        return Err(format!("line {n}: not a PEM label"));
                    }
                    if out.len() == max {
                        return Err(format!("more than {max} PEM blocks"));
                    }
                    open = Some((label.to_string(), String::new()));
                } else if line.contains("-----BEGIN") || line.contains("-----END") {
                    return Err(format!("line {n}: a PEM boundary out of place"));
                }
            }
            Some((label, body)) => {
                if let Some(end) = line
                    .strip_prefix("-----END ")
                    .and_then(|r| r.strip_suffix("-----"))
                {
                    if end != label.as_str() {
                        return Err(format!("line {n}: the END does not match its BEGIN"));
                    }
                    let der = base64::engine::general_purpose::STANDARD
                        .decode(body.as_bytes())
                        .map_err(|_| format!("line {n}: a PEM block that is not base64"))?;
                    if der.is_empty() {
                        return Err(format!("line {n}: an empty PEM block"));
                    }
                    out.push(Block {
                        label: std::mem::take(label),
                        der,
                    });
                    open = None;
                } else if line.contains("-----") {
                    return Err(format!("line {n}: a PEM boundary out of place"));
                } else if line.contains(':') {
                    return Err(format!(
                        "line {n}: PEM headers (a legacy encrypted key) are not read"
                    ));
                } else {
                    let line = line.trim_start_matches([' ', '\t']);
                    if !line
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b))
                    {
                        return Err(format!("line {n}: a PEM block that is not base64"));
                    }
                    body.push_str(line);
                }
            }
        }
    }
    if open.is_some() {
        return Err("a PEM block without its END line".into());
    }
    Ok(out)
}

fn label_ok(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= MAX_LABEL
        && label
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b' ')
}

/// The canonical PEM of one block: 64 base64 characters a line, `\n` line ends.
pub(super) fn encode(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut s = String::with_capacity(b64.len() + b64.len() / 64 + 2 * label.len() + 40);
    s.push_str("-----BEGIN ");
    s.push_str(label);
    s.push_str("-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        // base64 output is ASCII.
        s.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        s.push('\n');
    }
    s.push_str("-----END ");
    s.push_str(label);
    s.push_str("-----\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(label: &str, der: &[u8]) -> Block {
        Block {
            label: label.into(),
            der: der.to_vec(),
        }
    }

    #[test]
    fn blocks_are_read_with_text_around_them_and_any_line_ends_and_widths() {
        let der: Vec<u8> = (0..=255).collect();
        let canonical = encode("CERTIFICATE", &der);
        assert!(canonical.lines().all(|l| l.len() <= 64), "{canonical}");
        let one_line = format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            base64::engine::general_purpose::STANDARD.encode(&der)
        );
        let crlf = canonical.replace('\n', "\r\n");
        let text = format!("subject=CN = x\n{canonical}\nissuer=CN = y\n{one_line}{crlf}");
        assert_eq!(blocks(&text, 8).unwrap(), vec![b("CERTIFICATE", &der); 3]);
        assert_eq!(blocks(&canonical, 1).unwrap()[0].der, der);
        assert!(blocks("no blocks at all", 8).unwrap().is_empty());
    }

    /// Every way a text could be read as blocks differently by another reader is refused,
    /// and no message quotes the text.
    #[test]
    fn ambiguous_or_malformed_pem_is_refused_without_quoting_it() {
        let body = "QUJDRA==";
        let cases: Vec<(String, &str)> = vec![
            (format!("-----BEGIN CERTIFICATE-----\n{body}\n"), "without its END"),
            (
                format!("-----BEGIN CERTIFICATE-----\n{body}\n-----END PRIVATE KEY-----\n"),
                "does not match",
            ),
            (
                format!("  -----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n"),
                "out of place",
            ),
            (
                format!("-----BEGIN CERTIFICATE-----\n{body}\n-----BEGIN CERTIFICATE-----\n"),
                "out of place",
            ),
            (
                format!("-----BEGIN CERTIFICATE-----\n{body}!\n-----END CERTIFICATE-----\n"),
                "not base64",
            ),
            (
                "-----BEGIN CERTIFICATE-----\nQUJDRA\n-----END CERTIFICATE-----\n".to_string(),
                "not base64",
            ),
            (
                "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n".into(),
                "empty",
            ),
            (
                format!("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n{body}\n-----END RSA PRIVATE KEY-----\n"),
                "headers",
            ),
            (
                format!("-----BEGIN certificate-----\n{body}\n-----END certificate-----\n"),
                "not a PEM label",
            ),
            (
                format!("-----BEGIN {}-----\n{body}\n-----END {0}-----\n", "A".repeat(41)),
                "not a PEM label",
            ),
            (
                format!("-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n")
                    .repeat(3),
                "more than 2 PEM blocks",
            ),
        ];
        for (i, (text, want)) in cases.iter().enumerate() {
            let e = blocks(text, 2).expect_err(&format!("case {i} accepted"));
            assert!(e.contains(want), "case {i}: {e}");
            assert!(
                !e.contains(body) && !e.contains("QUJD"),
                "case {i} quotes: {e}"
            );
        }
    }
}
