//! A small YAML writer for the manifests `edgemu deploy` writes: block
//! maps and lists, strings double-quoted (JSON escapes, valid YAML), and a
//! string with line breaks as a literal block (`|`), so the embedded
//! `cluster.toml` stays readable. Keys keep the order they were inserted in
//! (serde_json's `preserve_order`) or sort (without it); either is valid.

use serde_json::Value;

/// `docs` as one YAML stream (`---` between documents).
pub fn stream(docs: &[Value]) -> String {
    let mut out = String::new();
    for d in docs {
        out.push_str("---\n");
        write_value(d, 0, &mut out);
    }
    out
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => Value::String(s.clone()).to_string(),
        _ => unreachable!("containers are not scalars"),
    }
}

fn key(k: &str) -> String {
    let plain = !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        && !k.starts_with(['-', '.']);
    if plain {
        k.to_string()
    } else {
        Value::String(k.to_string()).to_string()
    }
}

fn block(s: &str, indent: usize, out: &mut String) {
    // `|+` keeps the text's trailing line breaks exactly.
    out.push_str(if s.ends_with('\n') { "|+\n" } else { "|-\n" });
    for line in s.lines() {
        if !line.is_empty() {
            out.push_str(&" ".repeat(indent));
            out.push_str(line);
        }
        out.push('\n');
    }
}

/// Writes `v` as the value of a key or list item at `indent`; the caller
/// has written `key:` or `- ` (without the space after the colon).
fn write_inline(v: &Value, indent: usize, out: &mut String) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            write_value(v, indent, out);
        }
        Value::Array(a) if !a.is_empty() => {
            out.push('\n');
            write_value(v, indent, out);
        }
        Value::Object(_) => out.push_str(" {}\n"),
        Value::Array(_) => out.push_str(" []\n"),
        Value::String(s) if s.contains('\n') && !s.contains('\r') && !s.contains('\t') => {
            out.push(' ');
            block(s, indent, out);
        }
        other => {
            out.push(' ');
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
}

fn write_value(v: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                out.push_str(&pad);
                out.push_str(&key(k));
                out.push(':');
                write_inline(x, indent + 2, out);
            }
        }
        Value::Array(a) => {
            for x in a {
                out.push_str(&pad);
                out.push('-');
                match x {
                    Value::Object(m) if !m.is_empty() => {
                        // The first key on the dash's line, the rest under it.
                        let mut first = true;
                        for (k, y) in m {
                            if first {
                                out.push(' ');
                                first = false;
                            } else {
                                out.push_str(&" ".repeat(indent + 2));
                            }
                            out.push_str(&key(k));
                            out.push(':');
                            write_inline(y, indent + 4, out);
                        }
                    }
                    other => write_inline(other, indent + 2, out),
                }
            }
        }
        other => {
            out.push_str(&pad);
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn maps_lists_and_blocks() {
        let v = json!({
            "kind": "Pod",
            "metadata": {"name": "a-b", "labels": {"app.kubernetes.io/name": "edgemu"}},
            "spec": {"containers": [{"name": "c", "command": ["edgemu", "node"], "ports": []}]},
            "data": {"cluster.toml": "[run]\nname = \"x\"\n"}
        });
        let y = stream(&[v]);
        assert!(y.starts_with("---\n"), "{y}");
        assert!(y.contains("kind: \"Pod\"\n"), "{y}");
        assert!(
            y.contains("  labels:\n    app.kubernetes.io/name: \"edgemu\"\n"),
            "{y}"
        );
        assert!(
            y.contains("  containers:\n    - command:\n        - \"edgemu\"\n        - \"node\"\n      name: \"c\"\n      ports: []\n"),
            "{y}"
        );
        assert!(
            y.contains("  cluster.toml: |+\n    [run]\n    name = \"x\"\n"),
            "{y}"
        );
    }
}
