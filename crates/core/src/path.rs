//! The path a request is decided on, in one spelling.
//!
//! A client can spell one path many ways (`//login`, `/./login`, `/x/../login`, `/%6cogin`), and
//! the application behind the proxy serves them all as `/login`. Were each spelling its own
//! descriptor value, each would get a fresh bucket, or match no rule at all. So ext_authz's
//! `path` source, and the HTTP check's, take [`normalized`]: the spelling RFC 3986's syntax-based
//! normalisation gives, plus the merging of repeated slashes most servers do (nginx's
//! `merge_slashes`, Envoy's `merge_slashes`).
//!
//! What it does not do, on purpose: decode `%2F` (an escaped `/` is data inside a segment, never
//! a separator: decoding it would let `/a%2F..%2Fb` climb a level that the application does not
//! climb), fold case (paths are case-sensitive), drop a trailing `/` (`/login/` is another
//! resource to RFC 3986, and to many routers), or strip `;parameters`. An application that
//! treats any of those as the same path needs rules written for each spelling (`/login*`).

use std::borrow::Cow;

/// `target`'s path (a request target as a proxy forwards it: a path with its query and perhaps
/// a fragment, or the absolute form `http://host/path`) in one spelling:
///
/// 1. the scheme and authority of an absolute form, the query (`?…`) and the fragment (`#…`)
///    are cut off, and a path that does not start with `/` gets one;
/// 2. percent-escapes of unreserved characters (`A-Z a-z 0-9 - . _ ~`) are decoded, every other
///    escape is kept with upper-case hex digits (`%2f` → `%2F`), a `%` that starts no escape
///    becomes `%25`, and a byte not allowed in a path (a space, a non-ASCII character's UTF-8
///    bytes) is escaped;
/// 3. empty segments are dropped (`//` → `/`) and the dot segments `.` and `..` resolved, never
///    above `/` (RFC 3986 §5.2.4); a trailing `/` stays.
///
/// The result always starts with `/`, holds no `//`, no `.` or `..` segment and no `?` or `#`,
/// and is its own normal form (normalising it again changes nothing). Borrowed when `target`'s
/// path already is one.
pub fn normalized(target: &str) -> Cow<'_, str> {
    let path = path_of(target);
    if is_normal(path) {
        return Cow::Borrowed(path);
    }
    Cow::Owned(resolve_dots(&canonical_escapes(path)))
}

/// The path part of a request target: after an absolute form's authority, before `?` or `#`.
fn path_of(target: &str) -> &str {
    let rest = match scheme_end(target) {
        // `scheme://authority/path`: the authority ends at the first `/`, `?` or `#`.
        Some(after) => {
            let rest = &target[after..];
            &rest[rest.find(['/', '?', '#']).unwrap_or(rest.len())..]
        }
        None => target,
    };
    &rest[..rest.find(['?', '#']).unwrap_or(rest.len())]
}

/// Where the authority starts, if `target` opens with `scheme://` (RFC 3986 §3.1).
fn scheme_end(target: &str) -> Option<usize> {
    let colon = target.find("://")?;
    let scheme = &target[..colon];
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(colon + 3)
}

/// Whether `path` is already its own normal form: starts with `/`, only bytes a path may hold
/// unescaped, escapes only of reserved bytes in upper case, and no empty or dot segment.
fn is_normal(path: &str) -> bool {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => match escaped(bytes, i) {
                Some(b) if !is_unreserved(b) && is_upper_hex(&bytes[i + 1..i + 3]) => i += 3,
                _ => return false,
            },
            b if is_path_byte(b) => i += 1,
            _ => return false,
        }
    }
    // Segments after the leading `/`: none empty but the last (a trailing `/`, or the root's),
    // none a dot segment.
    let mut segments = path[1..].split('/').peekable();
    while let Some(segment) = segments.next() {
        let last = segments.peek().is_none();
        if matches!(segment, "." | "..") || (segment.is_empty() && !last) {
            return false;
        }
    }
    true
}

/// Step 2 of [`normalized`]: every byte of `path` as it is written in the normal form.
fn canonical_escapes(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(bytes.len() + 1);
    if bytes.first() != Some(&b'/') {
        out.push('/');
    }
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => match escaped(bytes, i) {
                Some(b) if is_unreserved(b) => {
                    out.push(char::from(b));
                    i += 3;
                }
                Some(b) => {
                    push_escape(&mut out, b);
                    i += 3;
                }
                None => {
                    out.push_str("%25");
                    i += 1;
                }
            },
            b if is_path_byte(b) => {
                out.push(char::from(b));
                i += 1;
            }
            b => {
                push_escape(&mut out, b);
                i += 1;
            }
        }
    }
    out
}

/// Step 3 of [`normalized`]: empty segments dropped, dot segments resolved, on a path that
/// starts with `/` and whose dots are all literal (escapes already decoded).
fn resolve_dots(path: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    let mut trailing_slash = false;
    for segment in path[1..].split('/') {
        // A segment that names no resource of its own ends the path with a `/` if it is last.
        trailing_slash = true;
        match segment {
            "" | "." => {}
            ".." => {
                kept.pop();
            }
            s => {
                kept.push(s);
                trailing_slash = false;
            }
        }
    }
    let mut out = String::with_capacity(path.len());
    for s in &kept {
        out.push('/');
        out.push_str(s);
    }
    if trailing_slash || kept.is_empty() {
        out.push('/');
    }
    out
}

/// The byte `%XX` at `bytes[i]` stands for, if it is a well-formed escape.
fn escaped(bytes: &[u8], i: usize) -> Option<u8> {
    let hex = bytes.get(i + 1..i + 3)?;
    // (from_str_radix alone would take a sign: `%+1`.)
    if !hex.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

fn push_escape(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(char::from(HEX[usize::from(b >> 4)]));
    out.push(char::from(HEX[usize::from(b & 0xf)]));
}

fn is_upper_hex(hex: &[u8]) -> bool {
    hex.iter()
        .all(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(c))
}

/// RFC 3986's unreserved characters: an escape of one is the character itself.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// A byte a path holds unescaped: `pchar` (unreserved, sub-delims, `:`, `@`) or the separator
/// `/`. (`%` is an escape's start, handled on its own.)
fn is_path_byte(b: u8) -> bool {
    is_unreserved(b)
        || matches!(
            b,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
                | b'/'
        )
}

#[cfg(test)]
mod tests;
