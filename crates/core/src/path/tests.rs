use proptest::prelude::*;

use super::normalized;

#[test]
fn spellings_of_one_path_are_one_path() {
    for spelling in [
        "/login",
        "//login",
        "///login",
        "/./login",
        "/x/../login",
        "/x/y/../../login",
        "/../login",
        "/../../login",
        "/%6cogin",
        "/%6Cogin",
        "/%6C%6F%67%69%6E",
        "/%2e/login",
        "/x/%2E%2E/login",
        "/login?next=/admin",
        "/login#top",
        "/login?a#b",
        "login",
        "http://api.example.com/login",
        "HTTPS://api.example.com:8443//login?x=1",
    ] {
        assert_eq!(normalized(spelling), "/login", "{spelling}");
    }
}

#[test]
fn what_stays_as_written() {
    for (target, path) in [
        // A trailing slash is another resource; so is another case.
        ("/login/", "/login/"),
        ("/login//", "/login/"),
        ("/login/.", "/login/"),
        ("/a/b/..", "/a/"),
        ("/LOGIN", "/LOGIN"),
        // An escaped slash is data in its segment, never a separator (nor climbed by `..`).
        ("/a/..%2flogin", "/a/..%2Flogin"),
        ("/a%2F..%2F..%2Fadmin", "/a%2F..%2F..%2Fadmin"),
        ("/files/a%2Fb", "/files/a%2Fb"),
        // Reserved characters keep their escapes (upper-cased), and their meaning.
        ("/a%3bb", "/a%3Bb"),
        ("/a;b=c", "/a;b=c"),
        ("/100%25", "/100%25"),
        // A `%` that starts no escape is escaped, so no later pass reads it otherwise.
        ("/50%", "/50%25"),
        ("/%zz", "/%25zz"),
        ("/%%341", "/%2541"),
        // Bytes a path may not hold as they are.
        ("/a b", "/a%20b"),
        ("/lögin", "/l%C3%B6gin"),
        ("/a\\b", "/a%5Cb"),
        // The root, and what amounts to it.
        ("", "/"),
        ("/", "/"),
        ("?x=1", "/"),
        ("/..", "/"),
        ("http://host", "/"),
        ("http://host?x", "/"),
        ("*", "/*"),
        // Not a scheme: a path segment with a colon.
        ("/a://b", "/a:/b"),
        ("1http://x/y", "/1http:/x/y"),
    ] {
        assert_eq!(normalized(target), path, "{target:?}");
    }
}

#[test]
fn a_normal_path_is_borrowed() {
    for path in ["/", "/login", "/a/b/", "/a%2Fb", "/~user/x.y_z-1"] {
        assert!(
            matches!(normalized(path), std::borrow::Cow::Borrowed(p) if p == path),
            "{path}"
        );
    }
    assert!(matches!(
        normalized("/login?x=1"),
        std::borrow::Cow::Borrowed("/login")
    ));
}

/// A segment of a path in its normal form: unreserved characters, sub-delims, and escapes of
/// reserved or non-ASCII bytes (`%2F` among them).
fn segment() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[a-zA-Z0-9._~-]{1,4}".boxed(),
        "[!$&'()*+,;=:@]".boxed(),
        prop::sample::select(vec!["%2F", "%3F", "%23", "%25", "%C3%B6", "%20"])
            .prop_map(str::to_string)
            .boxed(),
    ];
    prop::collection::vec(piece, 1..4)
        .prop_map(|p| p.concat())
        .prop_filter("not a dot segment", |s| s != "." && s != "..")
}

/// A path in its normal form.
fn normal_path() -> impl Strategy<Value = String> {
    (prop::collection::vec(segment(), 0..5), any::<bool>()).prop_map(|(segments, slash)| {
        let mut out: String = segments.iter().map(|s| format!("/{s}")).collect();
        if out.is_empty() || slash {
            out.push('/');
        }
        out
    })
}

/// One way to spell `path` that a server takes for the same path.
fn respelt(path: &str, seed: &[u8]) -> String {
    let mut seed = seed.iter().copied().cycle();
    let mut next = move || seed.next().unwrap_or(0);
    let mut out = String::new();
    if next() % 4 == 0 {
        out.push_str("http://host.example");
    }
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'/' {
            out.push('/');
            match next() % 6 {
                0 => out.push('/'),
                1 => out.push_str("./"),
                2 => out.push_str("dir/../"),
                3 => out.push_str("%2e/"),
                4 => out.push_str("x/%2E%2E/"),
                _ => {}
            }
            i += 1;
        } else if b == b'%' {
            // An escape of a reserved byte, in either case.
            let escape = &path[i..i + 3];
            out.push_str(&if next() % 2 == 0 {
                escape.to_ascii_lowercase()
            } else {
                escape.to_string()
            });
            i += 3;
        } else {
            match next() % 3 {
                0 if b.is_ascii_alphanumeric() || b"-._~".contains(&b) => {
                    out.push_str(&format!("%{b:02x}"));
                }
                1 if b.is_ascii_alphanumeric() || b"-._~".contains(&b) => {
                    out.push_str(&format!("%{b:02X}"));
                }
                _ => out.push(char::from(b)),
            }
            i += 1;
        }
    }
    match next() % 4 {
        0 => out.push_str("?q=1/../x"),
        1 => out.push_str("#frag/.."),
        _ => {}
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Normalising twice changes nothing, whatever the input.
    #[test]
    fn normalising_is_idempotent(target in any::<String>()) {
        let once = normalized(&target).into_owned();
        prop_assert_eq!(normalized(&once), once.as_str());
    }

    /// The same, on inputs made of the characters that matter.
    #[test]
    fn normalising_is_idempotent_on_paths(target in "[/.%2eEfF0-9a-zA-Z?#:;]{0,24}") {
        let once = normalized(&target).into_owned();
        prop_assert_eq!(normalized(&once), once.as_str());
    }

    /// The result is a path inside `/`: it starts with `/` and has no empty or dot segment
    /// (nothing a later resolution could climb with), no query, no fragment, and only escapes
    /// of bytes that need one, in upper case.
    #[test]
    fn the_result_is_a_path_inside_the_root(target in any::<String>()) {
        let path = normalized(&target);
        prop_assert!(path.starts_with('/'), "{}", path);
        prop_assert!(!path.contains(['?', '#']), "{}", path);
        let segments: Vec<&str> = path[1..].split('/').collect();
        for (n, s) in segments.iter().enumerate() {
            prop_assert!(*s != "." && *s != "..", "{}", path);
            prop_assert!(!s.is_empty() || n == segments.len() - 1, "{}", path);
        }
        let bytes = path.as_bytes();
        for (i, b) in bytes.iter().enumerate() {
            if *b == b'%' {
                let hex = &path[i + 1..i + 3];
                prop_assert_eq!(hex.to_ascii_uppercase(), hex);
                let byte = u8::from_str_radix(hex, 16).expect("an escape");
                prop_assert!(!(byte.is_ascii_alphanumeric() || b"-._~".contains(&byte)), "{}", path);
            }
        }
    }

    /// Spellings of one path (dot segments, repeated slashes, escaped unreserved characters,
    /// escapes in lower case, a query, a fragment, an absolute form) are that one path.
    #[test]
    fn equal_spellings_map_to_one_path(path in normal_path(), seed in prop::collection::vec(any::<u8>(), 1..32)) {
        prop_assert_eq!(normalized(&path), path.as_str());
        let spelling = respelt(&path, &seed);
        prop_assert_eq!(normalized(&spelling), path.as_str(), "{}", spelling);
    }

    /// `..` never climbs out of `/`, however many there are.
    #[test]
    fn dot_dot_never_climbs_above_the_root(ups in 1usize..8, path in normal_path()) {
        let climbing = format!("{}{}", "/..".repeat(ups), path);
        prop_assert_eq!(normalized(&climbing), path.as_str());
    }
}
