//! Boundary conventions enforced by a test rather than by review: every
//! exported function is `pacer_`-prefixed, `#[no_mangle]`, wrapped in the
//! panic boundary, and checks each pointer it takes; every `unsafe` block
//! carries a `// SAFETY:` comment. An export may instead hand its body to
//! one of the `SHAPES`, helpers held to the same rules: each starts with the
//! panic boundary and checks every pointer it takes, so a pointer passed to
//! one is checked.

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

/// Helpers that are an entry point's whole body for several entry points
/// of one shape (pacer.rs, shm.rs, settings.rs).
const SHAPES: [&str; 3] = ["answer", "on_shared", "write_notice_text"];

struct Export {
    file: String,
    name: String,
    pointer_params: Vec<String>,
    body: String,
    no_mangle: bool,
}

/// The index of the parenthesis closing the one `text` starts with.
fn closing(text: &str) -> usize {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 1 => return i,
            ')' => depth -= 1,
            _ => {}
        }
    }
    panic!("unbalanced parameter list: {text}")
}

/// `list` split at its top-level commas.
fn top_level(list: &str) -> Vec<&str> {
    let (mut depth, mut from, mut parts) = (0, 0, Vec::new());
    for (i, c) in list.char_indices() {
        match c {
            '(' | '<' => depth += 1,
            ')' | '>' if !list[..i].ends_with('-') => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[from..]);
    parts
}

/// The exported functions of ffi/src.
fn exports() -> Vec<Export> {
    functions("extern \"C\" fn ")
}

/// The functions of ffi/src whose definitions start `<marker><name>`.
fn functions(marker: &str) -> Vec<Export> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = fs::read_to_string(&path).unwrap();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut rest = text.as_str();
        while let Some(at) = rest.find(marker) {
            let before = &rest[..at];
            let no_mangle = before
                .trim_end()
                .rsplit('\n')
                .take(3)
                .any(|l| l.contains("#[no_mangle]"));
            let after = &rest[at + marker.len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let open = after.find('(').unwrap();
            let close = open + closing(&after[open..]);
            let pointer_params = top_level(&after[open + 1..close])
                .into_iter()
                .filter_map(|p| p.split_once(':'))
                .filter(|(_, ty)| ty.trim_start().starts_with('*'))
                .map(|(name, _)| name.trim().to_string())
                .collect();
            let body_start = close + after[close..].find('{').unwrap();
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

/// The body's first statement, past comments and an `unsafe {` around it.
fn first_statement(body: &str) -> &str {
    let mut rest = body.trim_start();
    loop {
        if rest.starts_with("//") {
            rest = rest[rest.find('\n').unwrap_or(rest.len())..].trim_start();
        } else if let Some(inner) = rest.strip_prefix("unsafe {") {
            rest = inner.trim_start();
        } else {
            return rest;
        }
    }
}

/// The arguments `body` passes to its first call of `shape` (up to its
/// closure, the shapes' last argument).
fn shape_arguments<'a>(body: &'a str, shape: &str) -> Vec<&'a str> {
    let Some(at) = body.find(&format!("{shape}(")) else {
        return Vec::new();
    };
    let args = &body[at + shape.len() + 1..];
    let end = args.find('|').unwrap_or(args.len());
    args[..end].split(',').map(str::trim).collect()
}

/// Starts with the panic boundary (or hands its body to one of the
/// `SHAPES`) and checks each pointer parameter before use.
fn assert_guarded_and_checked(e: &Export) {
    let where_ = format!("{}::{}", e.file, e.name);
    let first = first_statement(&e.body);
    let shape = SHAPES
        .iter()
        .find(|shape| first.starts_with(&format!("{shape}(")));
    assert!(
        e.body.trim_start().starts_with("guard(")
            || e.body.trim_start().starts_with("guard_value(")
            || shape.is_some(),
        "{where_}: body does not start with the panic boundary"
    );
    for param in &e.pointer_params {
        let checked = CHECKERS.iter().any(|c| {
            if c.starts_with('.') {
                e.body.contains(&format!("{param}{c}"))
            } else {
                e.body.contains(&format!("{c}{param})")) || e.body.contains(&format!("{c}{param},"))
            }
        }) || shape
            .is_some_and(|shape| shape_arguments(&e.body, shape).contains(&param.as_str()));
        assert!(
            checked,
            "{where_}: pointer parameter `{param}` is never checked"
        );
    }
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
        assert_guarded_and_checked(e);
    }
}

#[test]
fn every_shape_is_guarded_and_null_checked() {
    for shape in SHAPES {
        let mut found = functions(&format!("unsafe fn {shape}"));
        assert_eq!(found.len(), 1, "the shape {shape} is defined once");
        let mut helper = found.remove(0);
        helper.name = shape.to_string();
        assert!(
            helper.body.trim_start().starts_with("guard("),
            "{shape}: body does not start with the panic boundary"
        );
        assert!(!helper.pointer_params.is_empty(), "{shape}: no pointers");
        assert_guarded_and_checked(&helper);
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
