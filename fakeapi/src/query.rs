//! The query string as kube-apiserver reads it: percent-decoded `key=value` pairs, and
//! its boolean parameters. A leaf: the server and the authorizer both read it.

use std::collections::HashMap;

pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(crate) fn parse_query(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

/// A query flag as the real server reads a boolean parameter: present and neither `0` nor
/// `false` (any case) is true, the empty string included (`Convert_Slice_string_To_bool`).
pub(crate) fn query_bool(params: &HashMap<String, String>, name: &str) -> bool {
    params
        .get(name)
        .is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_decoding() {
        let q = parse_query("labelSelector=app%3Dweb%2Ctier+in+%28a%2Cb%29&watch=1&&limit=5");
        assert_eq!(q["labelSelector"], "app=web,tier in (a,b)");
        assert_eq!(q["watch"], "1");
        assert_eq!(q["limit"], "5");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
