//! The layout's one rule, checked in every crate of the workspace (the root and
//! `crates/*`): its `lib.rs` declares the top-level modules from the foundation up, and
//! a module may name (through `crate::…`, or `super::…` from a top-level file) only
//! modules declared before it. A new import against the data path fails here with the
//! file and the module it reached for. Between crates, Cargo itself refuses a circle.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The top-level module names of a `lib.rs`, in order: its `pub mod`s, and the
/// modules it takes from a crate beneath it (`pub use redline_base::seed;`,
/// `pub use redline_sim as sim;`) where it names them.
fn declared_order(lib: &str) -> Vec<String> {
    lib.lines()
        .filter_map(|l| {
            let module = l.strip_prefix("pub mod ");
            let taken = l.strip_prefix("pub use redline_").map(|rest| {
                let name = rest.rsplit([':', ' ']).next().unwrap_or(rest);
                name.trim_end_matches(';')
            });
            module.or(taken)
        })
        .map(|rest| rest.trim_end_matches(';').trim().to_owned())
        .collect()
}

/// The `src` folder of each crate of the workspace: the root's, then `crates/*`.
fn crate_sources() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources = vec![root.join("src")];
    let mut members: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|entry| entry.unwrap().path().join("src"))
        .collect();
    members.sort();
    sources.extend(members);
    sources
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file under `src/` belongs to (`src/a/b.rs` → `a`).
fn owner(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative.components().next().unwrap().as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_owned()
}

/// Every top-level module named after `crate::` in `code`, brace groups included
/// (`crate::{a::X, b}` names `a` and `b`); for a file at the crate's top, after
/// `super::` too (outside its tests, where `super::` is the file's own module).
fn referenced_modules(code: &str, top_level: bool) -> BTreeSet<String> {
    let mut names = names_after(code, "crate::");
    if top_level {
        let before_tests = code.split("#[cfg(test)]").next().unwrap_or(code);
        names.extend(names_after(before_tests, "super::"));
    }
    names.retain(|name| !name.is_empty());
    names
}

/// Every name that follows `prefix` in `code` (not inside a longer path), brace groups
/// included (`prefix{a::X, b}` names `a` and `b`).
fn names_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map_or(group.len(), |(i, _)| i);
            let inner = &group[..end];
            let mut level = 0;
            let mut item_start = true;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => level += 1,
                    '}' => level -= 1,
                    ',' if level == 0 => item_start = true,
                    c if item_start && level == 0 && (c.is_ascii_alphabetic() || c == '_') => {
                        found.insert(identifier(&inner[i..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(identifier(rest));
        }
    }
    found
}

fn identifier(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The file without its comment lines: doc links may point anywhere.
fn code_of(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn no_module_imports_from_a_module_above_it() {
    let sources = crate_sources();
    assert!(
        sources.len() >= 3,
        "the root, the simulator and their base: {sources:?}"
    );
    let mut wrong = Vec::new();
    for src in &sources {
        wrong.extend(imports_against_the_layers(src));
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

/// The imports of one crate that name a module declared after their own.
fn imports_against_the_layers(src: &Path) -> Vec<String> {
    let order = declared_order(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    assert!(
        order.len() > 5,
        "{}: declares its modules: {order:?}",
        src.display()
    );
    let rank = |m: &str| order.iter().position(|o| o == m);
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut wrong = Vec::new();
    for file in files.into_iter().filter(|f| !is_test_module(f)) {
        let module = owner(src, &file);
        if module == "lib" || module == "main" {
            continue;
        }
        let Some(own) = rank(&module) else {
            wrong.push(format!(
                "{}: module `{module}` is not declared in lib.rs",
                file.display()
            ));
            continue;
        };
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
        let top_level = file.parent() == Some(src);
        for used in referenced_modules(&code, top_level) {
            match rank(&used) {
                Some(r) if r > own => wrong.push(format!(
                    "{}: `{module}` uses `crate::{used}`, declared after it in lib.rs",
                    file.display()
                )),
                None if used != module => wrong.push(format!(
                    "{}: `crate::{used}` is not a module",
                    file.display()
                )),
                _ => {}
            }
        }
    }
    wrong
}

#[test]
fn the_checker_sees_paths_and_brace_groups() {
    let code = "use crate::a::X;\nuse crate::{b::Y, c::{D, E}, f};\nlet x = crate::g::h();";
    let found: Vec<String> = referenced_modules(code, false).into_iter().collect();
    assert_eq!(found, ["a", "b", "c", "f", "g"]);
    let top = "use super::state::S;\n#[cfg(test)]\nmod tests {\n    use super::*;\n    use super::helper;\n}";
    let found: Vec<String> = referenced_modules(top, true).into_iter().collect();
    assert_eq!(
        found,
        ["state"],
        "a top-level file's super is the crate; its tests' is the file"
    );
    assert!(referenced_modules(top, false).is_empty());
}

/// With `autotests = false` a new file under `tests/` would compile into nothing and
/// its tests would never run: each must be a module of `tests/main.rs` or a test
/// target of its own in Cargo.toml.
#[test]
fn every_test_file_is_a_module_of_the_one_test_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tests = root.join("tests");
    let main = std::fs::read_to_string(tests.join("main.rs")).unwrap();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let declared: BTreeSet<&str> = main
        .lines()
        .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&tests).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let is_module =
            path.extension().is_some_and(|e| e == "rs") || path.join("mod.rs").is_file();
        let own_target = manifest.contains(&format!("path = \"tests/{name}.rs\""));
        if is_module && name != "main" && !declared.contains(name) && !own_target {
            missing.push(name.to_owned());
        }
    }
    assert!(
        missing.is_empty(),
        "add `mod …;` to tests/main.rs for {missing:?}"
    );
    assert!(
        declared.contains("layers") && declared.contains("common"),
        "{declared:?}"
    );
}

/// The sibling modules a file names: `super::x` (for a file directly in the folder)
/// and `crate::<folder>::x`, where `x` is one of `siblings`.
fn sibling_references(
    code: &str,
    prefixes: &[String],
    siblings: &BTreeSet<String>,
) -> BTreeSet<String> {
    prefixes
        .iter()
        .flat_map(|prefix| names_after(code, prefix))
        .filter(|name| siblings.contains(name))
        .collect()
}

/// A module's tests in a file of their own (`x/tests.rs`, declared `#[cfg(test)] mod
/// tests;`): like a file's inline tests, they may use what they like, as they are not
/// what the module stands on.
fn is_test_module(file: &Path) -> bool {
    file.file_name().is_some_and(|name| name == "tests.rs")
}

/// The modules of a folder (`x.rs` and `x/`), each with its files; test modules left
/// out.
fn sibling_modules(dir: &Path) -> Vec<(String, Vec<PathBuf>)> {
    let mut modules = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if is_test_module(&path) {
            continue;
        }
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            let mut files = Vec::new();
            rust_files(&path, &mut files);
            files.retain(|file| !is_test_module(file));
            modules.push((name, files));
        } else if path.extension().is_some_and(|e| e == "rs") && name != "mod" && name != "lib" {
            modules.push((name, vec![path]));
        }
    }
    modules
}

/// A cycle in `edges`, as the modules on it, if there is one.
fn find_cycle(edges: &std::collections::BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &std::collections::BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            return Some(path[at..].to_vec());
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

/// Within a folder, the modules that are files or folders beside each other do not
/// name each other in a circle: one of them is below the other, and can be read (and
/// moved) without it. A parent (`mod.rs`) and its children are not siblings.
#[test]
fn no_circle_between_sibling_files() {
    let mut circles = Vec::new();
    for src in crate_sources() {
        circles.extend(circles_in(&src));
    }
    assert!(
        circles.is_empty(),
        "files in a circle:\n{}",
        circles.join("\n")
    );
}

/// The circles between sibling files in the folders of one crate's `src`.
fn circles_in(src: &Path) -> Vec<String> {
    let mut dirs = vec![src.to_owned()];
    let mut circles = Vec::new();
    while let Some(dir) = dirs.pop() {
        let modules = sibling_modules(&dir);
        let siblings: BTreeSet<String> = modules.iter().map(|(n, _)| n.clone()).collect();
        let path = dir.strip_prefix(src).unwrap();
        let crate_path: String = path
            .components()
            .map(|c| format!("{}::", c.as_os_str().to_string_lossy()))
            .collect();
        let mut edges = std::collections::BTreeMap::new();
        for (name, files) in &modules {
            let mut named = BTreeSet::new();
            for file in files {
                let text = std::fs::read_to_string(file).unwrap();
                // A file's tests may use what they like: they are not what it stands on.
                let code = code_of(text.split("#[cfg(test)]").next().unwrap());
                let mut prefixes = vec![format!("crate::{crate_path}")];
                // From a file directly in the folder, `super::` is the folder (the
                // crate, at its top).
                if file.parent() == Some(dir.as_path()) {
                    prefixes.push("super::".to_owned());
                }
                named.extend(sibling_references(&code, &prefixes, &siblings));
            }
            named.remove(name);
            edges.insert(name.clone(), named);
            if files.len() > 1 {
                dirs.push(dir.join(name));
            }
        }
        if let Some(cycle) = find_cycle(&edges) {
            circles.push(format!("{}: {}", dir.display(), cycle.join(" → ")));
        }
    }
    circles
}

#[test]
fn the_circle_finder_finds_circles_and_only_those() {
    let edges = |pairs: &[(&str, &str)]| {
        let mut map = std::collections::BTreeMap::<String, BTreeSet<String>>::new();
        for (a, b) in pairs {
            map.entry((*a).into()).or_default().insert((*b).into());
            map.entry((*b).into()).or_default();
        }
        map
    };
    assert_eq!(
        find_cycle(&edges(&[("a", "b"), ("b", "c"), ("a", "c")])),
        None
    );
    assert_eq!(
        find_cycle(&edges(&[("a", "b"), ("b", "c"), ("c", "a")])),
        Some(vec!["a".into(), "b".into(), "c".into()])
    );
    let siblings: BTreeSet<String> = ["w", "x", "y"].map(String::from).into();
    let found = sibling_references(
        "use super::x::A; use crate::sim::{z, y::B}; use other::super::w;",
        &["super::".into(), "crate::sim::".into()],
        &siblings,
    );
    assert_eq!(found, ["x", "y"].map(String::from).into());
}
