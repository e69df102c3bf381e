//! Boundary conventions enforced by a test rather than by review: every
//! exported function is `pacer_`-prefixed, `#[no_mangle]`, wrapped in the
//! panic boundary, and checks each pointer it takes; every `unsafe` block
//! carries a `// SAFETY:` comment.

use std::fs;

/// Calls that check a pointer argument before use (see boundary.rs).
const CHECKERS: [&str; 10] = [
    "arg(",
    "checked(",
    "TicketCell::new(",
    "setting_text(",
    "arg_mut(",
    "out(",
    "opt_str(",
    "buffer(",
    "slot(",
    ".is_null()",
];

struct Export {
    file: String,
    name: String,
    pointer_params: Vec<String>,
    body: String,
    no_mangle: bool,
}

fn exports() -> Vec<Export> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = fs::read_to_string(&path).unwrap();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("extern \"C\" fn ") {
            let before = &rest[..at];
            let no_mangle = before
                .trim_end()
                .rsplit('\n')
                .take(3)
                .any(|l| l.contains("#[no_mangle]"));
            let after = &rest[at + "extern \"C\" fn ".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let open = after.find('(').unwrap();
            let close = after.find(')').unwrap();
            let params = &after[open + 1..close];
            let pointer_params = params
                .split(',')
                .filter(|p| p.contains("*const") || p.contains("*mut"))
                .map(|p| p.split(':').next().unwrap().trim().to_string())
                .collect();
            let body_start = after.find('{').unwrap();
            let mut depth = 0;
            let mut end = body_start;
            for (i, c) in after[body_start..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = body_start + i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let body = after[body_start + 1..end].to_string();
            found.push(Export {
                file: file.clone(),
                name,
                pointer_params,
                body,
                no_mangle,
            });
            rest = &after[end..];
        }
    }
    found
}

#[test]
fn every_export_is_prefixed_guarded_and_null_checked() {
    let exports = exports();
    assert!(exports.len() >= 19, "found only {} exports", exports.len());
    for e in &exports {
        let where_ = format!("{}::{}", e.file, e.name);
        assert!(
            e.name.starts_with("pacer_"),
            "{where_}: not pacer_-prefixed"
        );
        assert!(e.no_mangle, "{where_}: missing #[no_mangle]");
        let first = e.body.trim_start();
        assert!(
            first.starts_with("guard(") || first.starts_with("guard_value("),
            "{where_}: body does not start with the panic boundary"
        );
        for param in &e.pointer_params {
            let checked = CHECKERS.iter().any(|c| {
                if c.starts_with('.') {
                    e.body.contains(&format!("{param}{c}"))
                } else {
                    e.body.contains(&format!("{c}{param})"))
                        || e.body.contains(&format!("{c}{param},"))
                }
            });
            assert!(
                checked,
                "{where_}: pointer parameter `{param}` is never checked"
            );
        }
    }
}

#[test]
fn every_unsafe_block_has_a_safety_comment() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if !line.contains("unsafe {") {
                continue;
            }
            let commented = lines[..i]
                .iter()
                .rev()
                .take_while(|l| {
                    l.trim_start().starts_with("//")
                        || l.contains("unsafe {")
                        || l.trim().is_empty()
                })
                .any(|l| l.contains("// SAFETY:"));
            assert!(
                commented,
                "{}:{}: unsafe block without a // SAFETY: comment",
                path.display(),
                i + 1
            );
        }
    }
}
