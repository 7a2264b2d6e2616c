//! The names and values a route may carry into a config, each validated once at the
//! boundary (hostnames, paths, tokens, header and query names and values, cookie names).

use super::*;

pub(super) fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

pub(super) fn is_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_label)
}

string_newtype!(
    /// A host name as the Ingress API and Gateway API accept it: an RFC 1123 subdomain in
    /// lowercase, or `*.` followed by one (a wildcard, which matches exactly one more
    /// label: `*.example.com` matches `a.example.com`, not `example.com` nor
    /// `a.b.example.com`). IPv4 addresses are refused (the Ingress API refuses them too).
    Hostname,
    "host",
    |s| {
        let rest = s.strip_prefix("*.").unwrap_or(s);
        is_subdomain(rest)
            && s.len() <= 253
            && rest.parse::<std::net::Ipv4Addr>().is_err()
    },
    "must be a lowercase RFC 1123 host name (letters, digits, '-', '.'), optionally starting with '*.'"
);

impl Hostname {
    pub fn is_wildcard(&self) -> bool {
        self.0.starts_with("*.")
    }

    /// For a wildcard, the part after `*` (`.example.com`).
    pub fn wildcard_suffix(&self) -> Option<&str> {
        self.0.strip_prefix('*')
    }

    /// Does this host match the (already lowercased, port-less) request host, a wildcard
    /// matching any number of labels (the Gateway API's suffix match)?
    pub fn matches_any_depth(&self, request_host: &str) -> bool {
        match self.wildcard_suffix() {
            Some(suffix) => request_host
                .strip_suffix(suffix)
                .is_some_and(|labels| !labels.is_empty()),
            None => self.0 == request_host,
        }
    }

    /// Does this host match the (already lowercased, port-less) request host?
    pub fn matches(&self, request_host: &str) -> bool {
        match self.wildcard_suffix() {
            Some(suffix) => request_host
                .strip_suffix(suffix)
                .is_some_and(|label| !label.is_empty() && !label.contains('.')),
            None => self.0 == request_host,
        }
    }
}

/// Characters of a path segment we accept: RFC 3986 `pchar` without `%` (percent-encoding:
/// HAProxy matches the raw path, nginx the decoded one, so an encoded path would route
/// differently on the two), without the sub-delims that mean something in a proxy config
/// (`'`, `(`, `)`, `;`, `$`), and `/`.
pub(super) fn is_path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!*+,=:@&/".contains(&b)
}

string_newtype!(
    /// A URL path to match or redirect to: starts with `/`, at most 1024 bytes, only
    /// unreserved characters, `/` and `!*+,=:@&`; no empty, `.` or `..` segment (the
    /// Ingress API refuses `//`, `/./` and `/../` too). Percent-encoding, quotes,
    /// spaces, `;`, `#`, `?`, braces and `$` are refused.
    HttpPath,
    "path",
    |s| {
        if !(s.starts_with('/') && s.len() <= 1024 && s.bytes().all(is_path_byte)) {
            return false;
        }
        let segs: Vec<&str> = s[1..].split('/').collect();
        // A trailing '/' gives one empty last segment, which is fine.
        !segs.iter().enumerate().any(|(i, seg)| {
            (seg.is_empty() && i + 1 < segs.len()) || *seg == "." || *seg == ".."
        })
    },
    "must start with '/' and hold only letters, digits, '/' and -._~!*+,=:@& (no empty, '.' or '..' segments, no percent-encoding)"
);

impl HttpPath {
    /// The root path `/`.
    pub fn root() -> HttpPath {
        HttpPath("/".into())
    }

    /// The path without a trailing `/` (`/` stays `/`): the canonical form of a Prefix.
    pub fn trim_trailing_slash(&self) -> HttpPath {
        let t = self.0.trim_end_matches('/');
        if t.is_empty() {
            HttpPath::root()
        } else {
            HttpPath(t.to_string())
        }
    }
}

/// The RFC 7230 `token` characters we accept: letters, digits and `-_.!*+^~`. The other
/// token characters (`#`, `'`, `$`, `%`, `&`, `|`, `` ` ``) mean something in
/// haproxy.cfg or nginx.conf and are refused.
pub(super) fn is_token(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.!*+^~".contains(&b))
}

string_newtype!(
    /// An HTTP header name (RFC 7230 token, narrowed, see [`is_token`]), at most 256 bytes.
    HeaderName,
    "header name",
    |s| is_token(s, 256),
    "must be an HTTP token of letters, digits and -_.!*+^~"
);

string_newtype!(
    /// A header name to match on or to set: lowercase letters, digits and `-`, at most
    /// 256 bytes (header names are case-insensitive; this is their canonical form).
    /// Narrower than an RFC 7230 token on purpose: nginx reaches a header through the
    /// variable `$http_<name with - as _>` and by default ignores header names with `_`
    /// or other punctuation, so only these names match alike on HAProxy and nginx.
    FieldName,
    "header name",
    |s| !s.is_empty()
        && s.len() <= 256
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
    "must be lowercase letters, digits and '-'"
);

string_newtype!(
    /// A query parameter name to match on: letters, digits and `_`, at most 256 bytes
    /// (nginx reaches it as the variable `$arg_<name>`, which allows nothing else).
    QueryName,
    "query parameter name",
    |s| !s.is_empty()
        && s.len() <= 256
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
    "must be letters, digits and '_'"
);

/// Bytes of a header or query value that a config may carry between double quotes:
/// printable ASCII without the characters that quote, escape, expand or comment in
/// haproxy.cfg or nginx.conf (`"`, `'`, `\`, `$`, `%`, `#`, `{`, `}`, `;`, `` ` ``).
pub(super) fn is_value_byte(b: u8) -> bool {
    (0x20..0x7f).contains(&b) && !b"\"'\\$%#{};`".contains(&b)
}

string_newtype!(
    /// A header or query parameter value to match on or to set: 1 to 4096 printable
    /// ASCII characters, spaces inside only, none of `"'\$%#{};` and backtick (see
    /// [`is_value_byte`]). Refused, never escaped, like every value that reaches a config.
    FieldValue,
    "header value",
    |s| !s.is_empty()
        && s.len() <= 4096
        && !s.starts_with(' ')
        && !s.ends_with(' ')
        && s.bytes().all(is_value_byte),
    "must be printable ASCII without quotes, backslash, '$', '%', '#', braces, ';' or backtick, and without leading or trailing spaces"
);

string_newtype!(
    /// A cookie name for cookie stickiness (RFC 6265 token, narrowed), at most 64 bytes.
    CookieName,
    "cookie name",
    |s| is_token(s, 64),
    "must be a cookie token of letters, digits and -_.!*+^~"
);

string_newtype!(
    /// A Secret name (RFC 1123 subdomain, lowercase).
    SecretName,
    "secret name",
    is_subdomain,
    "must be a lowercase RFC 1123 subdomain"
);

/// The longest token (one word, with its quotes) nginx loads wherever it stands in the
/// file: its reader's buffer is 4,096 bytes, and a token of 4,096 is refused ("too long
/// parameter", the whole config with it) at most positions. Checked with nginx 1.22 at
/// every offset: 4,095 always loads, 4,096 mostly not.
pub const NGINX_MAX_TOKEN: usize = 4095;

impl FieldValue {
    /// The length of the nginx token that matches this value exactly (render_http's
    /// `nx_exact_after_one`: `"~^1<value>$"`, every character but letters and digits
    /// escaped with `\`).
    pub fn nginx_match_token_len(&self) -> usize {
        let escaped: usize = self
            .0
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() { 1 } else { 2 })
            .sum();
        "\"~^1$\"".len() + escaped
    }

    /// The length of the longest nginx token that sets header `name` to this value:
    /// `"<value>"`, or for a request header added to the request's own value
    /// `"$http_<name>,<value>"`.
    pub fn nginx_edit_token_len(&self, name: &FieldName, added_to_request: bool) -> usize {
        let quoted = self.0.len() + 2;
        if added_to_request {
            quoted + "$http_,".len() + name.as_str().len()
        } else {
            quoted
        }
    }
}
