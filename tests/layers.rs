//! The source's dependencies go one way (STYLE.md, habit 12): no file of
//! `src/` imports a file that imports it back, directly or around a loop,
//! and no file imports one of a layer above its own ([`LAYERS`]); and no
//! file but those of `src/redis/ffi/` holds `unsafe` or names the server
//! API's raw bindings.
//!
//! A file's imports are read from its source: its `use` lines and every path
//! it writes from `crate::`, `super::` or `self::` (comments and string
//! literals left out), each resolved to the file of the deepest module it
//! names (`crate::parse::syntax::Word` is `src/parse/syntax.rs`; a name a
//! folder's `mod.rs` re-exports is that `mod.rs`). A crate-level macro
//! (`crate::registry!`) is the file that defines it. Test code
//! (`#[cfg(test)]` modules and files) is left out: a test may reach across
//! layers to hold one to another (the decoders to the parser). No server is
//! needed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, top first: each a list of files (a name ending in `/` is
/// every file under that folder). A file may import files of its own layer
/// (without a loop) and of the layers below it, never of a layer above.
/// Data goes down: commands -> respond -> waiters -> engine -> keys,
/// states, requests (what was asked) and replies -> the server API
/// (`redis/ffi/`), and below the Redis layer the plain Rust: replays,
/// grammar, algorithms, words.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "the module's start-up; the key types shown to compile-fail tests",
        &["lib.rs", "redis/mod.rs", "typed_keys.rs"],
    ),
    ("the command table", &["redis/commands/mod.rs"]),
    (
        "entry points: one file per command family (shim, parse, respond)",
        &["redis/commands/"],
    ),
    (
        "from a client's command to its reply",
        &["redis/respond.rs"],
    ),
    ("clients waiting (BLOCK)", &["redis/waiters/"]),
    (
        "the engine: apply, plan, settle, store, acquire",
        &["redis/engine/"],
    ),
    (
        "keys, stored types, requests (what was asked), replication, memory, answers",
        &[
            "redis/key.rs",
            "redis/request.rs",
            "redis/types.rs",
            "redis/replicate.rs",
            "redis/memory.rs",
            "redis/outcome.rs",
        ],
    ),
    (
        "counters, the denied-keys sketch, settings",
        &["redis/stats.rs", "redis/sketch.rs", "redis/config.rs"],
    ),
    ("the server's API, behind safe functions", &["redis/ffi/"]),
    (
        "the documentation of commands, as data",
        &["redis/command_info.rs"],
    ),
    ("redis-cell's arguments and replies", &["redis_cell.rs"]),
    ("replays", &["replay.rs"]),
    (
        "the waiting room of BLOCK: queues, deadlines, serving (plain Rust)",
        &["wait/"],
    ),
    ("named policies: the store (plain Rust)", &["policies.rs"]),
    ("grammar: options, RL.ALL, RL.TOP, policies", &["parse/"]),
    ("the algorithms", &["algorithms/"]),
    ("words: values, syntax", &["words/"]),
    (
        "encoding of states; errors; cluster slots; small tools",
        &[
            "cluster.rs",
            "encoding.rs",
            "error.rs",
            "log_throttle.rs",
            "top.rs",
        ],
    ),
];

#[test]
fn no_file_of_src_imports_a_file_that_imports_it_back() {
    let graph = Graph::read();
    let loops = graph.loops();
    assert!(
        loops.is_empty(),
        "files that import each other, around these loops:\n{}",
        loops
            .iter()
            .map(|l| format!("  {}", l.join(" -> ")))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn no_file_of_src_imports_a_file_of_a_layer_above_its_own() {
    let graph = Graph::read();
    let mut wrong = Vec::new();
    for (file, imports) in &graph.edges {
        let Some(from) = layer_of(file) else {
            wrong.push(format!("  {file} is in no layer: add it to LAYERS"));
            continue;
        };
        for import in imports {
            match layer_of(import) {
                Some(to) if to >= from => {}
                Some(to) => wrong.push(format!(
                    "  {file} ({}) imports {import} ({})",
                    LAYERS[from].0, LAYERS[to].0
                )),
                None => {} // told once, as a file
            }
        }
    }
    assert!(wrong.is_empty(), "arrows back up:\n{}", wrong.join("\n"));
}

/// Every call into the server's API sits behind the safe functions of
/// `src/redis/ffi/`: no other file holds `unsafe` (test code included).
#[test]
fn no_file_outside_redis_ffi_holds_unsafe() {
    let holding = outside_ffi_where(|code| inline_words(code).any(|w| w == "unsafe"));
    assert!(
        holding.is_empty(),
        "unsafe outside src/redis/ffi: {holding:?}"
    );
}

/// The server API's raw bindings are named only in `src/redis/ffi/`: no
/// other file writes a `REDISMODULE_*` constant or a path through the
/// crate's `raw` module (`raw::X`, `redis_module::raw`); each sits behind a
/// named function or constant of `ffi/` (comments left out).
#[test]
fn no_file_outside_redis_ffi_names_a_raw_api_constant() {
    let naming = outside_ffi_where(names_raw_bindings);
    assert!(
        naming.is_empty(),
        "raw API bindings named outside src/redis/ffi: {naming:?}"
    );
}

/// The files of `src/` but those of `src/redis/ffi/` whose code (comments
/// and string literals left out) is `wrong`, relative to `src/`.
fn outside_ffi_where(wrong: impl Fn(&str) -> bool) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect(&src, &mut files);
    files
        .iter()
        .filter(|f| !f.starts_with(src.join("redis").join("ffi")))
        .filter(|f| wrong(&code_only(&std::fs::read_to_string(f).unwrap())))
        .map(|f| f.strip_prefix(&src).unwrap().display().to_string())
        .collect()
}

/// Whether `code` names a `REDISMODULE_*` constant, or the `raw` module
/// as a path segment (`raw::X`, `redis_module::raw`).
fn names_raw_bindings(code: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let raw_module = code.match_indices("raw").any(|(at, _)| {
        let (before, after) = (&code[..at], &code[at + 3..]);
        !before.ends_with(ident)
            && !after.starts_with(ident)
            && (before.ends_with("::") || after.starts_with("::"))
    });
    raw_module || inline_words(code).any(|w| w.starts_with("REDISMODULE_"))
}

/// The identifiers and keywords of some code.
fn inline_words(code: &str) -> impl Iterator<Item = &str> {
    code.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

/// `cargo test --test layers -- --ignored --nocapture`: every layer, its
/// files and what each imports (for the architecture notes).
#[test]
#[ignore]
fn print_the_layers() {
    let graph = Graph::read();
    for (i, (name, _)) in LAYERS.iter().enumerate() {
        println!("{}. {name}", i + 1);
        for (file, imports) in &graph.edges {
            if layer_of(file) == Some(i) {
                let list: Vec<&str> = imports.iter().map(String::as_str).collect();
                println!("   {file} -> {}", list.join(", "));
            }
        }
    }
}

/// The layer of a file (its path under `src/`).
fn layer_of(file: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, files)| {
        files.iter().any(|f| match f.strip_suffix('/') {
            Some(folder) => file.starts_with(&format!("{folder}/")),
            None => file == *f,
        })
    })
}

/// Which files of `src/` each file imports (paths relative to `src/`).
struct Graph {
    edges: BTreeMap<String, BTreeSet<String>>,
}

impl Graph {
    fn read() -> Graph {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        collect(&src, &mut files);
        let test_only = test_only_files(&files);
        files.retain(|f| !test_only.contains(f));
        let sources: Vec<(String, String)> = files
            .iter()
            .map(|path| {
                let rel = path
                    .strip_prefix(&src)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                (rel, std::fs::read_to_string(path).unwrap())
            })
            .collect();
        // Module path -> file.
        let mut modules: BTreeMap<Vec<String>, String> = BTreeMap::new();
        for (rel, _) in &sources {
            modules.insert(module_of(rel), rel.clone());
        }
        // `#[macro_export]` macros live at the crate's root.
        let mut macros: BTreeMap<String, String> = BTreeMap::new();
        for (rel, text) in &sources {
            for line in text.lines() {
                if let Some(name) = line.trim().strip_prefix("macro_rules! ") {
                    let name = name.trim_end_matches(['{', ' ']);
                    macros.insert(name.to_string(), rel.clone());
                }
            }
        }
        let mut edges = BTreeMap::new();
        for (rel, text) in &sources {
            let resolver = Resolver {
                modules: &modules,
                macros: &macros,
            };
            let imports = resolver.imports(rel, &code_only(text));
            let imports = imports.into_iter().filter(|f| f != rel).collect();
            edges.insert(rel.clone(), imports);
        }
        Graph { edges }
    }

    /// Every loop of files that import each other (one per strongly
    /// connected group of two or more files, shown as a cycle through it).
    fn loops(&self) -> Vec<Vec<String>> {
        let names: Vec<&String> = self.edges.keys().collect();
        let index: BTreeMap<&String, usize> =
            names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let succ: Vec<Vec<usize>> = names
            .iter()
            .map(|n| {
                self.edges[*n]
                    .iter()
                    .filter_map(|m| index.get(m).copied())
                    .collect()
            })
            .collect();
        let reach = |from: usize| {
            let mut seen = vec![false; names.len()];
            let mut stack = vec![from];
            while let Some(n) = stack.pop() {
                for &m in &succ[n] {
                    if !seen[m] {
                        seen[m] = true;
                        stack.push(m);
                    }
                }
            }
            seen
        };
        let reaches: Vec<Vec<bool>> = (0..names.len()).map(reach).collect();
        let mut done = vec![false; names.len()];
        let mut loops = Vec::new();
        for a in 0..names.len() {
            if done[a] || !reaches[a][a] {
                continue;
            }
            let group: Vec<usize> = (0..names.len())
                .filter(|&b| reaches[a][b] && reaches[b][a])
                .collect();
            for &b in &group {
                done[b] = true;
            }
            if group.len() < 2 {
                continue;
            }
            // A shortest path back to `a`, for the message.
            let mut prev = vec![usize::MAX; names.len()];
            let mut queue = std::collections::VecDeque::from([a]);
            'search: while let Some(n) = queue.pop_front() {
                for &m in &succ[n] {
                    if prev[m] == usize::MAX && group.contains(&m) {
                        prev[m] = n;
                        if m == a {
                            break 'search;
                        }
                        queue.push_back(m);
                    }
                }
            }
            let mut path = vec![names[a].clone()];
            let mut n = prev[a];
            while n != a && n != usize::MAX {
                path.push(names[n].clone());
                n = prev[n];
            }
            path.push(names[a].clone());
            path.reverse();
            let others: Vec<&str> = group
                .iter()
                .map(|&b| names[b].as_str())
                .filter(|n| !path.iter().any(|p| p == n))
                .collect();
            if !others.is_empty() {
                path.push(format!("(also in the loop: {})", others.join(", ")));
            }
            loops.push(path);
        }
        loops
    }
}

/// The files declared `#[cfg(test)] mod name;`: test code only.
fn test_only_files(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let dir = if file.ends_with("mod.rs") || file.ends_with("lib.rs") {
            file.parent().unwrap().to_path_buf()
        } else {
            file.with_extension("")
        };
        let mut after_cfg_test = false;
        for line in text.lines().map(str::trim) {
            if after_cfg_test {
                let name = line
                    .split_whitespace()
                    .skip_while(|w| *w != "mod")
                    .nth(1)
                    .and_then(|n| n.strip_suffix(';'));
                if let Some(name) = name {
                    out.push(dir.join(format!("{name}.rs")));
                    out.push(dir.join(name).join("mod.rs"));
                }
            }
            after_cfg_test = line == "#[cfg(test)]";
        }
    }
    out
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file: `parse/all.rs` is `[parse, all]`,
/// `parse/mod.rs` `[parse]`, `lib.rs` `[]`.
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The source with comments and the insides of string and character
/// literals blanked out (line breaks kept).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !chars
                .get(i.wrapping_sub(1))
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            out.push('"');
            loop {
                match chars.get(j) {
                    None => break,
                    Some('"') if (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) => {
                        j += 1 + hashes;
                        break;
                    }
                    Some(&ch) => out.push(blank(ch)),
                }
                j += 1;
            }
            out.push('"');
            i = j;
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if let Some(&ch) = chars.get(i) {
                    out.push(blank(ch));
                }
                i += 1;
            }
            out.push('"');
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\''), or a lifetime.
            let literal_end = if next == Some('\\') {
                (i + 2..chars.len().min(i + 12)).find(|&k| chars[k] == '\'')
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match literal_end {
                Some(end) => {
                    out.push_str("' '");
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

struct Resolver<'a> {
    modules: &'a BTreeMap<Vec<String>, String>,
    macros: &'a BTreeMap<String, String>,
}

impl Resolver<'_> {
    /// The files `code` (of the file `rel`) imports.
    fn imports(&self, rel: &str, code: &str) -> BTreeSet<String> {
        let file_module = module_of(rel);
        let mut out = BTreeSet::new();
        // Inline modules (`mod tests {`), by rustfmt's indentation, and
        // whether each is test code.
        let mut inline: Vec<(usize, String, bool)> = Vec::new();
        let mut after_cfg_test = false;
        let lines: Vec<&str> = code.lines().collect();
        let mut statement = String::new();
        let mut in_use = false;
        for line in &lines {
            let indent = line.len() - line.trim_start().len();
            let trimmed = line.trim();
            if let Some((at, _, _)) = inline.last() {
                if *at == indent && trimmed == "}" {
                    inline.pop();
                    continue;
                }
            }
            let test_code = std::mem::replace(&mut after_cfg_test, trimmed == "#[cfg(test)]");
            let mut module = file_module.clone();
            module.extend(inline.iter().map(|(_, m, _)| m.clone()));
            let words: Vec<&str> = trimmed.split_whitespace().collect();
            let mod_at = words.iter().position(|w| *w == "mod");
            if let Some(at) = mod_at {
                if words.get(at + 2) == Some(&"{")
                    && words[..at].iter().all(|w| w.starts_with("pub"))
                {
                    inline.push((indent, words[at + 1].to_string(), test_code));
                    continue;
                }
            }
            if test_code || inline.iter().any(|(_, _, test)| *test) {
                continue;
            }
            let starts_use = words
                .iter()
                .position(|w| *w == "use")
                .is_some_and(|at| words[..at].iter().all(|w| w.starts_with("pub")));
            if starts_use && !in_use {
                in_use = true;
                statement.clear();
            }
            if in_use {
                statement.push_str(trimmed);
                statement.push(' ');
                if trimmed.ends_with(';') {
                    in_use = false;
                    let tree = statement
                        .split_once("use ")
                        .map(|(_, t)| t.trim().trim_end_matches(';'))
                        .unwrap_or("");
                    for path in expand(tree) {
                        if let Some(file) = self.resolve(&module, &path, false) {
                            out.insert(file);
                        }
                    }
                }
                continue;
            }
            for (path, is_macro) in inline_paths(line) {
                if let Some(file) = self.resolve(&module, &path, is_macro) {
                    out.insert(file);
                }
            }
        }
        out
    }

    /// The file of the deepest module `path` names, seen from `module`.
    fn resolve(&self, module: &[String], path: &[String], is_macro: bool) -> Option<String> {
        let mut at: Vec<String>;
        let mut rest = path;
        match path.first().map(String::as_str) {
            Some("crate" | "$crate") => {
                at = Vec::new();
                rest = &path[1..];
            }
            Some("self") => {
                at = module.to_vec();
                rest = &path[1..];
            }
            Some("super") => {
                at = module.to_vec();
                while rest.first().map(String::as_str) == Some("super") {
                    at.pop();
                    rest = &rest[1..];
                }
            }
            Some(first) => {
                let mut child = module.to_vec();
                child.push(first.to_string());
                if !self.modules.contains_key(&child) {
                    return None; // another crate, or a name in scope
                }
                at = module.to_vec();
            }
            None => return None,
        }
        for segment in rest {
            let mut next = at.clone();
            next.push(segment.clone());
            if self.modules.contains_key(&next) {
                at = next;
            } else {
                break;
            }
        }
        if at.is_empty() {
            // The crate's root: only its exported macros are used from it.
            let name = path.last()?;
            return if is_macro {
                self.macros.get(name).cloned()
            } else {
                None
            };
        }
        // An inline module is part of its file.
        while !self.modules.contains_key(&at) {
            at.pop();
        }
        self.modules.get(&at).cloned()
    }
}

/// The paths of a `use` tree (`a::{b, c::{d, e}}`), each as its segments.
fn expand(tree: &str) -> Vec<Vec<String>> {
    fn go(tree: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let tree = tree.trim();
        if tree.is_empty() {
            return;
        }
        // Split top-level commas.
        let mut depth = 0;
        let mut parts = Vec::new();
        let mut start = 0;
        for (i, c) in tree.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&tree[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&tree[start..]);
        if parts.len() > 1 {
            for part in parts {
                go(part, prefix, out);
            }
            return;
        }
        let tree = tree.split(" as ").next().unwrap_or(tree).trim();
        match tree.find("::{") {
            Some(at) if tree.ends_with('}') => {
                let mut p = prefix.to_vec();
                p.extend(tree[..at].split("::").map(|s| s.trim().to_string()));
                go(&tree[at + 3..tree.len() - 1], &p, out);
            }
            _ => {
                let inner = tree.trim_start_matches('{').trim_end_matches('}');
                if inner.len() != tree.len() {
                    return go(inner, prefix, out);
                }
                let mut p = prefix.to_vec();
                for segment in tree.split("::").map(str::trim) {
                    if segment != "self" || p.is_empty() {
                        p.push(segment.to_string());
                    }
                }
                if p.last().is_some_and(|s| s == "*") {
                    p.pop();
                }
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    go(tree, &[], &mut out);
    out
}

/// The paths written in a line of code (`a::b::c`, from `crate::`,
/// `$crate::`, `super::`, `self::` or any other first name: the resolver
/// keeps those that name a module of this crate), and whether each names a
/// macro (`crate::registry!`).
fn inline_paths(line: &str) -> Vec<(Vec<String>, bool)> {
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
    while i < bytes.len() {
        let starts =
            ident(bytes[i]) && (i == 0 || !ident(bytes[i - 1])) && !line[..i].ends_with("::");
        if !starts {
            i += 1;
            continue;
        }
        let mut segments = Vec::new();
        let mut j = i;
        loop {
            let start = j;
            while j < bytes.len() && ident(bytes[j]) {
                j += 1;
            }
            if start == j {
                break;
            }
            segments.push(line[start..j].to_string());
            if line[j..].starts_with("::") {
                j += 2;
            } else {
                break;
            }
        }
        let is_macro = bytes.get(j) == Some(&b'!');
        if segments.len() > 1 {
            out.push((segments, is_macro));
        }
        i = j.max(i + 1);
    }
    out
}
