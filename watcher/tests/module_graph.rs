//! The watcher's modules, drawn from their `crate::` paths, form no cycle, and the leaf
//! `kube` module imports no other watcher module; nor do the modules of the other crates
//! of the workspace (a directory module such as common's `plan/` counts as one module).
//!
//! Run with `--nocapture` to see the graph (one `module -> imports` line per module).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The `.rs` files under `dir`, each under the top-level module it belongs to (`plan/x.rs`
/// and `plan.rs` both belong to `plan`), their texts joined.
fn sources(dir: &Path, module: Option<&str>, files: &mut BTreeMap<String, String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for p in entries {
        let stem = p.file_stem().expect("stem").to_string_lossy().to_string();
        let owner = module.map_or(stem.clone(), str::to_string);
        if p.is_dir() {
            // `src/bin/*` are crate roots of their own, not modules.
            if module.is_none() && stem == "bin" {
                continue;
            }
            sources(&p, Some(&owner), files);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).expect("read");
            let all = files.entry(owner).or_default();
            all.push_str(&without_comments(&text));
            all.push('\n');
        }
    }
}

/// Module name (file stem) -> the modules its source names through `crate::`.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = BTreeMap::new();
    sources(src, None, &mut files);
    let modules: BTreeSet<String> = files
        .keys()
        .filter(|m| *m != "lib" && *m != "main")
        .cloned()
        .collect();
    let mut g = BTreeMap::new();
    for (name, text) in &files {
        if !modules.contains(name) {
            continue;
        }
        let mut uses = BTreeSet::new();
        for first in crate_paths(text) {
            if modules.contains(&first) && first != *name {
                uses.insert(first);
            }
        }
        g.insert(name.clone(), uses);
    }
    g
}

/// The text without `//` comments: a doc link to a module is not an import.
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|l| l.split_once("//").map_or(l, |(code, _)| code))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segment of every `crate::...` path, including each member of a
/// `crate::{a, b::c}` group.
fn crate_paths(text: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        // `k8slb_crate::x` or `foocrate::` are not ours.
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut member = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 1 => {
                        out.push(ident(&member));
                        member.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    out.push(ident(&member));
                    break;
                }
                if depth == 1 {
                    member.push(c);
                }
            }
        } else {
            out.push(ident(rest));
        }
    }
    out
}

/// A cycle, if there is one (as a path `a -> b -> ... -> a`).
fn find_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(pos) = stack.iter().position(|s| s == n) {
            let mut c = stack[pos..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        stack.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, g, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for n in g.keys() {
        if let Some(c) = visit(n, g, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_watcher_modules_import_each_other_without_a_cycle() {
    let g = graph(&src());
    for (m, uses) in &g {
        let uses: Vec<&str> = uses.iter().map(String::as_str).collect();
        println!("{m} -> {}", uses.join(", "));
    }
    assert!(g.len() > 5, "too few modules found: {g:?}");
    if let Some(c) = find_cycle(&g) {
        panic!("import cycle among watcher modules: {}", c.join(" -> "));
    }
}

#[test]
fn the_other_crates_modules_import_each_other_without_a_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for krate in ["common", "actor", "fakeapi", "tests"] {
        let g = graph(&root.join(krate).join("src"));
        assert!(g.len() > 2, "{krate}: too few modules found: {g:?}");
        if let Some(c) = find_cycle(&g) {
            panic!("import cycle among {krate}'s modules: {}", c.join(" -> "));
        }
    }
}

#[test]
fn the_kube_module_is_a_leaf() {
    let g = graph(&src());
    let uses = g.get("kube").expect("watcher/src/kube.rs exists");
    assert!(uses.is_empty(), "kube imports {uses:?}");
}

#[test]
fn the_cycle_finder_finds_a_cycle_in_crate_paths_and_groups() {
    // The detector itself: a graph with a cycle through a `use crate::{..}` group.
    let mut g = BTreeMap::new();
    let a = "use crate::{b::X, c};\nfn f() { crate::d::g(); }";
    let b = "use crate::a::Y;";
    g.insert(
        "a".to_string(),
        crate_paths(a).into_iter().collect::<BTreeSet<_>>(),
    );
    g.insert(
        "b".to_string(),
        crate_paths(b).into_iter().collect::<BTreeSet<_>>(),
    );
    assert_eq!(
        g["a"],
        ["b", "c", "d"].iter().map(|s| s.to_string()).collect()
    );
    let c = find_cycle(&g).expect("a -> b -> a");
    assert_eq!(c, ["a", "b", "a"]);
    assert!(crate_paths("k8slb_crate::x; my_crate::y").is_empty());
}
