//! The canonical digest of a tool call's arguments, for the repeated-call budget.
//!
//! Two calls are "the same" when they name the same tool and their arguments say the same
//! thing: key order and whitespace do not matter, nor do numbers written differently
//! (`1.0` and `1`). The digest is computed after `protect`, so a secret that was redacted in
//! both calls compares equal (`[REDACTED:rule]` in each) and the digest never depends on it.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use sha2::{Digest, Sha256};

/// SHA-256 of a tool name and canonical arguments.
pub type CallDigest = [u8; 32];

/// SHA-256 of the tool name and the canonical form of its arguments. Arguments that are not
/// JSON are digested as text with runs of whitespace collapsed.
///
/// The canonical bytes are gathered first and hashed once: the arguments are read into a
/// tree that borrows their strings (no `serde_json::Value`, whose every string and map node
/// is an allocation), and one `update` replaces one per item.
pub fn call_digest(tool: &str, arguments: &str) -> CallDigest {
    let mut bytes = Vec::with_capacity(tool.len() + arguments.len() + 64);
    bytes.extend_from_slice(tool.as_bytes());
    bytes.push(0);
    match serde_json::from_str::<Canonical>(arguments) {
        Ok(v) => {
            bytes.push(b'j');
            v.encode(&mut bytes);
        }
        Err(_) => {
            bytes.push(b't');
            for (i, word) in arguments.split_whitespace().enumerate() {
                if i > 0 {
                    bytes.push(b' ');
                }
                bytes.extend_from_slice(word.as_bytes());
            }
        }
    }
    Sha256::digest(&bytes).into()
}

/// A JSON value as the digest reads it: strings borrowed from the arguments where they hold
/// no escape, numbers as the parser gave them.
enum Canonical<'a> {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    String(Cow<'a, str>),
    Array(Vec<Canonical<'a>>),
    /// Members as written; sorted, and a repeated key's last value kept, when encoded.
    Object(Vec<(Cow<'a, str>, Canonical<'a>)>),
}

impl Canonical<'_> {
    /// Appends the canonical encoding: objects with sorted keys, numbers by value, every
    /// item length-prefixed so that no two different values encode alike. Byte for byte
    /// what the digest has always hashed, so digests held across a restart still compare.
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Canonical::Null => out.push(b'n'),
            Canonical::Bool(b) => out.push(if *b { b'T' } else { b'F' }),
            Canonical::Int(i) => number(&i.to_string(), out),
            Canonical::UInt(u) => number(&u.to_string(), out),
            // Integers exactly; other numbers by their f64 value, so 1.0 == 1 == 1e0.
            Canonical::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => {
                number(&(*f as i64).to_string(), out)
            }
            Canonical::Float(f) => number(&format!("{f:e}"), out),
            Canonical::String(s) => {
                out.push(b's');
                string(s, out);
            }
            Canonical::Array(items) => {
                out.push(b'[');
                out.extend_from_slice(&(items.len() as u64).to_le_bytes());
                for item in items {
                    item.encode(out);
                }
            }
            Canonical::Object(members) => {
                // Reversed before a stable sort, a repeated key's last member leads its run,
                // and `dedup_by` keeps it: the value a JSON map keeps.
                let mut kept: Vec<&(Cow<str>, Canonical)> = members.iter().rev().collect();
                kept.sort_by(|a, b| a.0.cmp(&b.0));
                kept.dedup_by(|a, b| a.0 == b.0);
                out.push(b'{');
                out.extend_from_slice(&(kept.len() as u64).to_le_bytes());
                for (k, v) in kept {
                    string(k, out);
                    v.encode(out);
                }
            }
        }
    }
}

fn number(text: &str, out: &mut Vec<u8>) {
    out.push(b'#');
    string(text, out);
}

fn string(s: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

impl<'de> Deserialize<'de> for Canonical<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CanonicalVisitor)
    }
}

/// A string that borrows where the parser can lend it.
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_str(CanonicalVisitor)
            .and_then(|v| match v {
                Canonical::String(s) => Ok(Text(s)),
                _ => Err(de::Error::custom("expected a string")),
            })
    }
}

struct CanonicalVisitor;

impl<'de> Visitor<'de> for CanonicalVisitor {
    type Value = Canonical<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Canonical::Null)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Self::Value, E> {
        Ok(Canonical::Bool(b))
    }

    fn visit_i64<E>(self, i: i64) -> Result<Self::Value, E> {
        Ok(Canonical::Int(i))
    }

    fn visit_u64<E>(self, u: u64) -> Result<Self::Value, E> {
        Ok(Canonical::UInt(u))
    }

    fn visit_f64<E>(self, f: f64) -> Result<Self::Value, E> {
        Ok(Canonical::Float(f))
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
        Ok(Canonical::String(Cow::Borrowed(s)))
    }

    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Canonical::String(Cow::Owned(s.to_owned())))
    }

    fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
        Ok(Canonical::String(Cow::Owned(s)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Canonical::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
        while let Some((Text(k), v)) = map.next_entry::<Text, Canonical>()? {
            members.push((k, v));
        }
        Ok(Canonical::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    /// The digest as it was first written, over a `serde_json::Value` and one hash update
    /// per item: what [`call_digest`] must still give, byte for byte.
    fn call_digest_by_value(tool: &str, arguments: &str) -> CallDigest {
        fn canonical(v: &Value, h: &mut Sha256) {
            match v {
                Value::Null => h.update(b"n"),
                Value::Bool(b) => h.update(if *b { b"T" } else { b"F" }),
                Value::Number(n) => {
                    h.update(b"#");
                    let text = match (n.as_i64(), n.as_u64(), n.as_f64()) {
                        (Some(i), _, _) => i.to_string(),
                        (None, Some(u), _) => u.to_string(),
                        (None, None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => {
                            format!("{}", f as i64)
                        }
                        (None, None, Some(f)) => format!("{f:e}"),
                        _ => n.to_string(),
                    };
                    text_of(&text, h);
                }
                Value::String(s) => {
                    h.update(b"s");
                    text_of(s, h);
                }
                Value::Array(items) => {
                    h.update(b"[");
                    h.update((items.len() as u64).to_le_bytes());
                    for item in items {
                        canonical(item, h);
                    }
                }
                Value::Object(map) => {
                    h.update(b"{");
                    h.update((map.len() as u64).to_le_bytes());
                    let mut keys: Vec<&String> = map.keys().collect();
                    keys.sort();
                    for k in keys {
                        text_of(k, h);
                        if let Some(v) = map.get(k) {
                            canonical(v, h);
                        }
                    }
                }
            }
        }
        fn text_of(s: &str, h: &mut Sha256) {
            h.update((s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        }
        let mut h = Sha256::new();
        h.update(tool.as_bytes());
        h.update([0]);
        match serde_json::from_str::<Value>(arguments) {
            Ok(v) => {
                h.update(b"j");
                canonical(&v, &mut h);
            }
            Err(_) => {
                h.update(b"t");
                for (i, word) in arguments.split_whitespace().enumerate() {
                    if i > 0 {
                        h.update(b" ");
                    }
                    h.update(word.as_bytes());
                }
            }
        }
        h.finalize().into()
    }

    #[test]
    fn the_digest_is_the_one_held_before_byte_for_byte() {
        let cases = [
            r#"{"q":"late","page":1,"filters":{"a":[1,2.5,-3,1e300,18446744073709551615]}}"#,
            r#"{"k":"v","k":"w","a":"\u00e9\n","b":null,"c":true,"d":false}"#,
            r#"[1.0, -0.0, 9.0e15, 8999999999999999.0, 1.5e-7, -9223372036854775808]"#,
            r#""just a string""#,
            r#"{"x": 1} trailing"#,
            "not json at all",
            "",
            r#"{"deep":[[[[{"a":{"b":[]}}]]]]}"#,
        ];
        for arguments in cases {
            assert_eq!(
                call_digest("tool", arguments),
                call_digest_by_value("tool", arguments),
                "{arguments}"
            );
        }
    }

    #[test]
    fn order_whitespace_and_number_spelling_do_not_matter() {
        let a = call_digest(
            "search_orders",
            r#"{"q":"late","page":1,"filters":{"a":[1,2]}}"#,
        );
        let b = call_digest(
            "search_orders",
            "{ \"filters\" : { \"a\" : [ 1 , 2.0 ] } ,\n \"page\" : 1.0, \"q\": \"late\" }",
        );
        assert_eq!(a, b);
        assert_ne!(
            a,
            call_digest(
                "get_customer",
                r#"{"q":"late","page":1,"filters":{"a":[1,2]}}"#
            )
        );
        assert_ne!(
            a,
            call_digest(
                "search_orders",
                r#"{"q":"late","page":2,"filters":{"a":[1,2]}}"#
            )
        );
        // Array order is meaningful.
        assert_ne!(
            a,
            call_digest(
                "search_orders",
                r#"{"q":"late","page":1,"filters":{"a":[2,1]}}"#
            )
        );
        // A string is not a number, and null is not missing.
        assert_ne!(
            call_digest("t", r#"{"n":"1"}"#),
            call_digest("t", r#"{"n":1}"#)
        );
        assert_ne!(call_digest("t", r#"{"n":null}"#), call_digest("t", r#"{}"#));
    }

    #[test]
    fn redacted_secrets_compare_equal() {
        // Two calls that carried different tokens, each redacted by protect.
        let a = call_digest(
            "deploy",
            r#"{"env":"prod","token":"[REDACTED:github_token]"}"#,
        );
        let b = call_digest(
            "deploy",
            r#"{"token":"[REDACTED:github_token]","env":"prod"}"#,
        );
        assert_eq!(a, b);
    }

    #[test]
    fn text_arguments_collapse_whitespace() {
        assert_eq!(
            call_digest("shell", "ls  -la\n /tmp"),
            call_digest("shell", "ls -la /tmp")
        );
        assert_ne!(
            call_digest("shell", "ls -la /tmp"),
            call_digest("shell", "ls -la /var")
        );
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|i| Value::from(i64::from(i))),
            "[a-z0-9 ]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z]{1,5}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// The same value with object keys in reverse order and extra whitespace.
    fn reshuffled(v: &Value) -> String {
        match v {
            Value::Object(m) => {
                let parts: Vec<String> = m
                    .iter()
                    .rev()
                    .map(|(k, v)| format!("\n  {} :\t{}", Value::String(k.clone()), reshuffled(v)))
                    .collect();
                format!("{{ {} }}", parts.join(" ,"))
            }
            Value::Array(items) => {
                let parts: Vec<String> = items.iter().map(reshuffled).collect();
                format!("[ {} ]", parts.join(" , "))
            }
            other => other.to_string(),
        }
    }

    proptest! {
        #[test]
        fn key_order_and_whitespace_never_change_the_digest(v in json_value()) {
            let compact = v.to_string();
            prop_assert_eq!(call_digest("tool", &compact), call_digest("tool", &reshuffled(&v)));
        }

        /// Any arguments, JSON or not, escapes and repeated keys included, digest as the
        /// value-tree reading did.
        #[test]
        fn any_arguments_digest_as_before(
            v in json_value(),
            text in r#"[{}\[\]":,a-c0-9.eE\\u -]{0,40}"#,
            repeat in any::<bool>(),
        ) {
            let mut compact = reshuffled(&v);
            if repeat {
                // Repeated keys, one escaped (an empty object becomes invalid JSON: text).
                compact = compact.replacen('{', r#"{"k":1,"k":"\u0041","#, 1);
            }
            prop_assert_eq!(call_digest("t", &compact), call_digest_by_value("t", &compact));
            prop_assert_eq!(call_digest("t", &text), call_digest_by_value("t", &text));
        }
    }
}
