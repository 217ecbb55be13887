//! The canonical digest of a tool call's arguments, for the repeated-call budget.
//!
//! Two calls are "the same" when they name the same tool and their arguments say the same
//! thing: key order and whitespace do not matter, nor do numbers written differently
//! (`1.0` and `1`). The digest is computed after `protect`, so a secret that was redacted in
//! both calls compares equal (`[REDACTED:rule]` in each) and the digest never depends on it.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// SHA-256 of a tool name and canonical arguments.
pub type CallDigest = [u8; 32];

/// SHA-256 of the tool name and the canonical form of its arguments. Arguments that are not
/// JSON are digested as text with runs of whitespace collapsed.
pub fn call_digest(tool: &str, arguments: &str) -> CallDigest {
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

/// Feeds a canonical encoding of `v`: objects with sorted keys, numbers by value, every item
/// length-prefixed so that no two different values encode alike.
fn canonical(v: &Value, h: &mut Sha256) {
    match v {
        Value::Null => h.update(b"n"),
        Value::Bool(b) => h.update(if *b { b"T" } else { b"F" }),
        Value::Number(n) => {
            h.update(b"#");
            // Integers exactly; other numbers by their f64 value, so 1.0 == 1 == 1e0.
            let text = match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => i.to_string(),
                (None, Some(u), _) => u.to_string(),
                (None, None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => {
                    format!("{}", f as i64)
                }
                (None, None, Some(f)) => format!("{f:e}"),
                _ => n.to_string(),
            };
            string(&text, h);
        }
        Value::String(s) => {
            h.update(b"s");
            string(s, h);
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
                string(k, h);
                if let Some(v) = map.get(k) {
                    canonical(v, h);
                }
            }
        }
    }
}

fn string(s: &str, h: &mut Sha256) {
    h.update((s.len() as u64).to_le_bytes());
    h.update(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
    }
}
