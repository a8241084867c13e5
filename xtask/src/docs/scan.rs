//! Finds decision and invariant citations in Rust sources and classifies them.
//!
//! A citation is an `ADR-NNNN` or an invariant id (`I` followed by 1 to 7) inside a comment.
//! Each one is attributed to the item it belongs to: the item that follows a `///` doc
//! comment (or a plain `//` comment placed just before an item), the enclosing item for a
//! comment inside a body, and the enclosing module for `//!`. It counts as a test when that
//! item is a `#[test]` function, sits in `#[cfg(test)]` code or a `proptest!` block, or the
//! file is a test file (under `tests/` or in the fuzz crate); as a measurement in `benches/`;
//! otherwise as implementing code. This is the collection half of ADR-0005.

use super::lexer::{lex, CommentStyle, Token, TokenKind};

/// What a citation names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// A decision record, by number.
    Adr(u32),
    /// An invariant, 1 to 7.
    Invariant(u8),
}

/// How the citing code relates to what it cites.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Code that implements the decision or enforces the invariant.
    Implements,
    /// A test (unit, property, integration, compile-fail or fuzz) that verifies it.
    Verifies,
    /// A benchmark that measures it.
    Measures,
}

/// One citation found in a source file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Citation {
    /// What is cited.
    pub target: Target,
    /// Path of the file, relative to the workspace root, with `/` separators.
    pub path: String,
    /// 1-based line of the citation.
    pub line: usize,
    /// The item the citation belongs to, for display (`fn tokenizer::count`).
    pub item: String,
    /// Implementation, test or benchmark.
    pub role: Role,
}

/// Text that looks like a decision citation but is not one: the id has too few or too many
/// digits, or letters run into it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Malformed {
    /// Path of the file, relative to the workspace root.
    pub path: String,
    /// 1-based line.
    pub line: usize,
    /// The text as written.
    pub text: String,
}

/// Where a file sits, which decides how its citations are classified and displayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileContext {
    /// Path relative to the workspace root, `/`-separated.
    pub path: String,
    /// Module path of the file inside its crate (`["format"]` for `src/format.rs`).
    pub module: Vec<String>,
    /// How to name the file itself when it is the owner (`crate root`, `test smoke`).
    pub root_label: String,
    /// The role of every citation in a test or bench file, or `Implements` for library code.
    pub role: Role,
}

impl FileContext {
    /// Derives the context of a file from its path relative to the crate directory
    /// (`src/format.rs`, `tests/smoke.rs`, `fuzz_targets/parse.rs`) and whether the crate is
    /// the fuzz crate.
    pub fn new(path: &str, in_crate: &str, fuzz_crate: bool) -> FileContext {
        let parts: Vec<&str> = in_crate.split('/').collect();
        let stem = |s: &str| s.strip_suffix(".rs").unwrap_or(s).to_string();
        let top = parts.first().copied().unwrap_or("");
        let role = if fuzz_crate || parts.contains(&"tests") {
            Role::Verifies
        } else if top == "benches" {
            Role::Measures
        } else {
            Role::Implements
        };
        // Module path below the crate root of the file's target.
        let mut module: Vec<String> = Vec::new();
        let root_label;
        match (top, parts.len()) {
            ("src", 2) if parts[1] == "lib.rs" || parts[1] == "main.rs" => {
                root_label = "crate root".to_string();
            }
            ("src", 3) if parts[1] == "bin" => {
                root_label = format!("bin {}", stem(parts[2]));
            }
            ("src", _) => {
                module = module_path(&parts[1..]);
                root_label = format!("mod {}", module.join("::"));
            }
            (kind @ ("tests" | "examples" | "benches" | "fuzz_targets"), 2) => {
                let kind = match kind {
                    "tests" => "test",
                    "examples" => "example",
                    "benches" => "bench",
                    _ => "fuzz target",
                };
                root_label = format!("{kind} {}", stem(parts[1]));
            }
            (_, _) => {
                module = module_path(&parts[1.min(parts.len())..]);
                root_label = if module.is_empty() {
                    path.to_string()
                } else {
                    format!("mod {}", module.join("::"))
                };
            }
        }
        FileContext {
            path: path.to_string(),
            module,
            root_label,
            role,
        }
    }
}

/// `a/b.rs` -> `[a, b]`, `a/mod.rs` -> `[a]`.
fn module_path(parts: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = parts.iter().map(|p| p.to_string()).collect();
    if let Some(last) = out.pop() {
        let last = last.strip_suffix(".rs").unwrap_or(&last).to_string();
        if last != "mod" && last != "lib" && last != "main" {
            out.push(last);
        }
    }
    out
}

/// A `mod name;` declaration whose file lives elsewhere, and whether it is test-only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModDecl {
    /// Module path of the declared module inside the crate.
    pub module: Vec<String>,
    /// Declared under `#[cfg(test)]` or inside test-only code.
    pub test: bool,
}

/// Everything found in one file.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FileScan {
    /// Citations, in source order.
    pub citations: Vec<Citation>,
    /// Things that look like citations but are malformed.
    pub malformed: Vec<Malformed>,
    /// Out-of-line module declarations (`mod tests;`).
    pub mod_decls: Vec<ModDecl>,
}

/// Scans one file's source text.
pub fn scan_source(ctx: &FileContext, src: &str) -> FileScan {
    let tokens = lex(src);
    let walk = Walker::new(ctx, &tokens).run();
    let mut scan = FileScan {
        mod_decls: walk.mod_decls,
        ..FileScan::default()
    };
    for (index, owner) in walk.owners {
        let token = &tokens[index];
        let TokenKind::Comment(_, text) = &token.kind else {
            continue;
        };
        let role = if ctx.role != Role::Implements {
            ctx.role
        } else if owner.test {
            Role::Verifies
        } else {
            Role::Implements
        };
        for found in find_citations(text) {
            let line = token.line + text[..found.offset].matches('\n').count();
            match found.target {
                Some(target) => scan.citations.push(Citation {
                    target,
                    path: ctx.path.clone(),
                    line,
                    item: owner.display.clone(),
                    role,
                }),
                None => scan.malformed.push(Malformed {
                    path: ctx.path.clone(),
                    line,
                    text: found.text,
                }),
            }
        }
    }
    scan
}

/// A citation-like match inside one comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Byte offset in the comment text.
    pub offset: usize,
    /// The target, or `None` when the text is malformed.
    pub target: Option<Target>,
    /// The matched text.
    pub text: String,
}

/// Finds `ADR-NNNN` and invariant ids in a comment's text.
pub fn find_citations(text: &str) -> Vec<Found> {
    let bytes = text.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let boundary_before = i == 0 || !word(bytes[i - 1]);
        if boundary_before && bytes[i..].starts_with(b"ADR-") {
            let start = i + 4;
            let mut end = start;
            while end < bytes.len() && bytes[end].is_ascii_digit() {
                end += 1;
            }
            let digits = end - start;
            let boundary_after = end == bytes.len() || !word(bytes[end]);
            if digits > 0 && boundary_after {
                let target = if digits == 4 {
                    text[start..end].parse().ok().map(Target::Adr)
                } else {
                    None
                };
                out.push(Found {
                    offset: i,
                    target,
                    text: text[i..end].to_string(),
                });
            } else if digits > 0 {
                // Letters run into the digits: a mistyped citation.
                let mut stop = end;
                while stop < bytes.len() && word(bytes[stop]) {
                    stop += 1;
                }
                out.push(Found {
                    offset: i,
                    target: None,
                    text: text[i..stop].to_string(),
                });
                end = stop;
            }
            i = end.max(i + 1);
            continue;
        }
        if boundary_before
            && bytes[i] == b'I'
            && i + 1 < bytes.len()
            && (b'1'..=b'9').contains(&bytes[i + 1])
            && (i + 2 == bytes.len() || !word(bytes[i + 2]))
        {
            out.push(Found {
                offset: i,
                target: Some(Target::Invariant(bytes[i + 1] - b'0')),
                text: text[i..i + 2].to_string(),
            });
            i += 2;
            continue;
        }
        i += 1;
    }
    out
}

/// The item a comment is attributed to.
#[derive(Debug, Clone)]
struct Owner {
    display: String,
    test: bool,
}

/// One open bracket: what it belongs to and the module path of items declared inside.
#[derive(Debug, Clone)]
struct Frame {
    close: char,
    owner: Owner,
    path: Vec<String>,
}

/// An item whose header has been read but whose body has not started yet.
#[derive(Debug, Clone)]
struct Header {
    owner: Owner,
    path: Vec<String>,
    depth: usize,
    kind: &'static str,
}

#[derive(Default)]
struct WalkResult {
    owners: Vec<(usize, Owner)>,
    mod_decls: Vec<ModDecl>,
}

struct Walker<'a> {
    tokens: &'a [Token],
    frames: Vec<Frame>,
    pending: Vec<usize>,
    attrs: Vec<String>,
    header: Option<Header>,
    at_item_start: bool,
    test_group_next: bool,
    /// Line of the last significant token, and the owner it left in effect, so that a comment
    /// trailing code on the same line belongs to that code.
    prev_line: usize,
    last_owner: Owner,
    out: WalkResult,
}

const QUALIFIERS: &[&str] = &["pub", "unsafe", "async", "extern", "default", "auto"];

impl<'a> Walker<'a> {
    fn new(ctx: &FileContext, tokens: &'a [Token]) -> Walker<'a> {
        let root = Frame {
            close: '\0',
            owner: Owner {
                display: ctx.root_label.clone(),
                test: ctx.role == Role::Verifies,
            },
            path: ctx.module.clone(),
        };
        Walker {
            tokens,
            last_owner: root.owner.clone(),
            prev_line: 0,
            frames: vec![root],
            pending: Vec::new(),
            attrs: Vec::new(),
            header: None,
            at_item_start: true,
            test_group_next: false,
            out: WalkResult::default(),
        }
    }

    /// Index of the next token at or after `i` that is not a comment.
    fn next_sig(&self, i: usize) -> Option<usize> {
        (i..self.tokens.len()).find(|&j| !self.tokens[j].is_comment())
    }

    fn ident_at(&self, i: Option<usize>) -> Option<&'a str> {
        i.and_then(|j| self.tokens.get(j)).and_then(|t| t.ident())
    }

    fn current(&self) -> &Frame {
        self.frames.last().expect("the root frame is never popped")
    }

    fn mark(&mut self, line: usize, owner: Owner) {
        self.prev_line = line;
        self.last_owner = owner;
    }

    fn resolve_pending(&mut self, owner: &Owner) {
        for index in self.pending.drain(..) {
            self.out.owners.push((index, owner.clone()));
        }
    }

    fn run(mut self) -> WalkResult {
        let mut i = 0;
        while i < self.tokens.len() {
            i = self.step(i);
        }
        let owner = self.current().owner.clone();
        self.resolve_pending(&owner);
        self.out.owners.sort_by_key(|(index, _)| *index);
        self.out
    }

    /// Handles the token at `i` and returns the index of the next one to look at.
    fn step(&mut self, i: usize) -> usize {
        let token = &self.tokens[i];
        match &token.kind {
            TokenKind::Comment(CommentStyle::InnerDoc, _) => {
                let owner = self.current().owner.clone();
                self.out.owners.push((i, owner));
                return i + 1;
            }
            TokenKind::Comment(CommentStyle::Plain, _) if token.line == self.prev_line => {
                self.out.owners.push((i, self.last_owner.clone()));
                return i + 1;
            }
            TokenKind::Comment(..) => {
                self.pending.push(i);
                return i + 1;
            }
            _ => {}
        }
        if token.is_punct('#') {
            if let Some(next) = self.attribute(i) {
                return next;
            }
        }
        if let Some(c) = closing(token) {
            let owner = self.current().owner.clone();
            self.resolve_pending(&owner);
            self.attrs.clear();
            let mut last = owner;
            if self.frames.len() > 1 && self.current().close == c {
                if let Some(frame) = self.frames.pop() {
                    last = frame.owner;
                }
            }
            self.mark(token.line, last);
            if self
                .header
                .as_ref()
                .is_some_and(|h| h.depth > self.frames.len())
            {
                self.header = None;
            }
            self.at_item_start = c == '}';
            return i + 1;
        }
        if let Some(header) = self.header.clone() {
            if header.depth == self.frames.len() {
                self.resolve_pending(&header.owner);
                self.mark(token.line, header.owner.clone());
                if token.is_punct('{') {
                    // A unit-like `const`/`static` body is an expression, not a scope of
                    // items, but attributing its comments to the item is still right.
                    self.frames.push(Frame {
                        close: '}',
                        owner: header.owner.clone(),
                        path: header.path.clone(),
                    });
                    self.header = None;
                    self.at_item_start = true;
                } else if token.is_punct(';') {
                    self.header = None;
                    self.at_item_start = true;
                    if header.kind == "mod" {
                        self.out.mod_decls.push(ModDecl {
                            module: header.path.clone(),
                            test: header.owner.test,
                        });
                    }
                } else if let Some(close) = opening(token) {
                    self.frames.push(Frame {
                        close,
                        owner: header.owner.clone(),
                        path: header.path.clone(),
                    });
                }
                return i + 1;
            }
        }
        if self.at_item_start {
            if let Some(next) = self.item_start(i) {
                let owner = match &self.header {
                    Some(h) => h.owner.clone(),
                    None => self.current().owner.clone(),
                };
                self.mark(token.line, owner);
                return next;
            }
        }
        // Any other token: it settles the comments waiting before it.
        let owner = self.current().owner.clone();
        self.resolve_pending(&owner);
        self.mark(token.line, owner);
        self.attrs.clear();
        if let Some(close) = opening(token) {
            let mut owner = self.current().owner.clone();
            owner.test |= std::mem::take(&mut self.test_group_next);
            let path = self.current().path.clone();
            self.frames.push(Frame { close, owner, path });
            self.at_item_start = close == '}';
            return i + 1;
        }
        if token.ident() == Some("proptest") {
            let bang = self.next_sig(i + 1);
            if bang.is_some_and(|j| self.tokens[j].is_punct('!')) {
                self.test_group_next = true;
            }
        }
        self.at_item_start = token.is_punct(';');
        i + 1
    }

    /// Reads `#[...]` or `#![...]` at `i`; returns the index after it, or `None` if `#` does
    /// not start an attribute.
    fn attribute(&mut self, i: usize) -> Option<usize> {
        let mut j = self.next_sig(i + 1)?;
        let inner = self.tokens[j].is_punct('!');
        if inner {
            j = self.next_sig(j + 1)?;
        }
        if !self.tokens[j].is_punct('[') {
            return None;
        }
        let mut depth = 0usize;
        let mut text = String::new();
        let mut end = j;
        for (k, t) in self.tokens.iter().enumerate().skip(j) {
            end = k;
            match &t.kind {
                TokenKind::Punct('[') => {
                    depth += 1;
                    if depth > 1 {
                        text.push('[');
                    }
                }
                TokenKind::Punct(']') => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                    text.push(']');
                }
                TokenKind::Punct(c) => text.push(*c),
                TokenKind::Ident(s) => {
                    if text.ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                        text.push(' ');
                    }
                    text.push_str(s);
                }
                TokenKind::Literal | TokenKind::Lifetime => text.push('_'),
                TokenKind::Comment(..) => {}
            }
        }
        if inner {
            if is_test_attr(&text) {
                self.frames
                    .last_mut()
                    .expect("the root frame is never popped")
                    .owner
                    .test = true;
            }
        } else {
            self.attrs.push(text);
        }
        Some(end + 1)
    }

    /// If an item (or a qualifier such as `pub`) starts at `i`, opens its header and returns
    /// the index of the next token to read.
    fn item_start(&mut self, i: usize) -> Option<usize> {
        let word = self.tokens[i].ident()?;
        let next = self.next_sig(i + 1);
        let next_word = self.ident_at(next);
        if QUALIFIERS.contains(&word) {
            // `pub(crate)`, `extern "C"`: skip the qualifier's argument too.
            let mut after = i + 1;
            if let Some(j) = next {
                let t = &self.tokens[j];
                if word == "pub" && t.is_punct('(') {
                    after = (j..self.tokens.len())
                        .find(|&k| self.tokens[k].is_punct(')'))
                        .map_or(j + 1, |k| k + 1);
                } else if word == "extern" && t.kind == TokenKind::Literal {
                    after = j + 1;
                } else if word == "extern" && next_word == Some("crate") {
                    return None;
                }
            }
            return Some(after);
        }
        if word == "const" && matches!(next_word, Some("fn" | "unsafe" | "async" | "extern")) {
            return Some(i + 1);
        }
        let kind: &'static str = match word {
            "fn" => "fn",
            "struct" => "struct",
            "enum" => "enum",
            "union" => "union",
            "trait" => "trait",
            "mod" => "mod",
            "const" => "const",
            "static" => "static",
            "type" => "type",
            "impl" => "impl",
            "macro_rules" => "macro",
            _ => return None,
        };
        let (segment, display) = match kind {
            "impl" => self.impl_name(i)?,
            "macro" => {
                let bang = next?;
                if !self.tokens[bang].is_punct('!') {
                    return None;
                }
                let name_at = self.next_sig(bang + 1)?;
                let name = self.tokens[name_at].ident()?.to_string();
                (name.clone(), format!("macro {name}!"))
            }
            _ => {
                let mut name_at = next?;
                if kind == "static" && next_word == Some("mut") {
                    name_at = self.next_sig(name_at + 1)?;
                }
                let name = match &self.tokens[name_at].kind {
                    TokenKind::Ident(s) => s.clone(),
                    _ => return None,
                };
                let parent = self.current().path.clone();
                let mut full = parent.clone();
                full.push(name.clone());
                (name, format!("{kind} {}", full.join("::")))
            }
        };
        let test = self.current().owner.test || self.attrs.iter().any(|a| is_test_attr(a));
        let owner = Owner { display, test };
        self.resolve_pending(&owner);
        self.attrs.clear();
        let mut path = self.current().path.clone();
        path.push(segment);
        self.header = Some(Header {
            owner,
            path,
            depth: self.frames.len(),
            kind,
        });
        // The name and everything up to the body are read by the header state, so that
        // comments among them are attributed too.
        Some(i + 1)
    }

    /// Names an `impl` block: the path segment of its self type and its display text.
    fn impl_name(&self, i: usize) -> Option<(String, String)> {
        let mut k = self.next_sig(i + 1)?;
        // Skip the impl's own generic parameters: `impl<'a, T: Clone>`.
        if self.tokens[k].is_punct('<') {
            let mut depth = 0i32;
            loop {
                let t = &self.tokens[k];
                if t.is_punct('<') {
                    depth += 1;
                } else if t.is_punct('>') && !self.tokens[k - 1].is_punct('-') {
                    depth -= 1;
                }
                k = self.next_sig(k + 1)?;
                if depth == 0 {
                    break;
                }
            }
        }
        // The rest of the header, up to the body or the `where` clause.
        let mut parts: Vec<&Token> = Vec::new();
        let mut angle = 0i32;
        let mut next = Some(k);
        while let Some(k) = next {
            let t = &self.tokens[k];
            let stop = t.is_punct('{') || t.is_punct(';') || t.ident() == Some("where");
            if angle == 0 && stop {
                break;
            }
            if t.is_punct('<') {
                angle += 1;
            } else if t.is_punct('>') && !parts.last().is_some_and(|p| p.is_punct('-')) {
                angle -= 1;
            }
            parts.push(t);
            next = self.next_sig(k + 1);
        }
        // Split `Trait for Type` at a top-level `for`.
        let mut depth = 0i32;
        let mut split = None;
        for (n, t) in parts.iter().enumerate() {
            if t.is_punct('<') {
                depth += 1;
            } else if t.is_punct('>') {
                depth -= 1;
            } else if depth == 0 && t.ident() == Some("for") {
                split = Some(n);
            }
        }
        let (trait_part, self_part) = match split {
            Some(n) => (Some(&parts[..n]), &parts[n + 1..]),
            None => (None, &parts[..]),
        };
        let mut depth = 0i32;
        let mut segment = None;
        for t in self_part {
            if t.is_punct('<') {
                depth += 1;
            } else if t.is_punct('>') {
                depth -= 1;
            } else if depth == 0 {
                if let Some(w) = t.ident() {
                    if !matches!(w, "mut" | "dyn" | "const") {
                        segment = Some(w.to_string());
                    }
                }
            }
        }
        let segment = segment?;
        let self_text = join_tokens(self_part);
        let mut display = match trait_part {
            Some(tr) => format!("impl {} for {}", join_tokens(tr), self_text),
            None => format!("impl {self_text}"),
        };
        let parent = &self.current().path;
        if !parent.is_empty() {
            display.push_str(&format!(" in {}", parent.join("::")));
        }
        Some((segment, display))
    }
}

fn opening(token: &Token) -> Option<char> {
    match token.kind {
        TokenKind::Punct('{') => Some('}'),
        TokenKind::Punct('(') => Some(')'),
        TokenKind::Punct('[') => Some(']'),
        _ => None,
    }
}

fn closing(token: &Token) -> Option<char> {
    match token.kind {
        TokenKind::Punct(c @ ('}' | ')' | ']')) => Some(c),
        _ => None,
    }
}

/// Joins tokens into readable Rust-like text (`fmt::Debug`, `Vec<u8>`).
fn join_tokens(tokens: &[&Token]) -> String {
    let mut out = String::new();
    let mut prev_word = false;
    for t in tokens {
        let (text, is_word) = match &t.kind {
            TokenKind::Ident(s) => (s.clone(), true),
            TokenKind::Lifetime => ("'_".to_string(), true),
            TokenKind::Literal => ("_".to_string(), true),
            TokenKind::Punct(',') => (", ".to_string(), false),
            TokenKind::Punct('=') => (" = ".to_string(), false),
            TokenKind::Punct(c) => (c.to_string(), false),
            TokenKind::Comment(..) => continue,
        };
        if is_word && prev_word {
            out.push(' ');
        }
        out.push_str(&text);
        prev_word = is_word;
    }
    out.replace("- >", "->")
}

/// Whether an attribute's text (tokens joined, e.g. `cfg(test)`) marks test-only code.
pub fn is_test_attr(text: &str) -> bool {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    compact == "test"
        || compact.ends_with("::test")
        || matches!(
            compact.as_str(),
            "proptest" | "rstest" | "quickcheck" | "test_case"
        )
        || compact.starts_with("test_case(")
        || compact.starts_with("cfg(test)")
        || compact.starts_with("cfg(all(test")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib_ctx() -> FileContext {
        FileContext::new("crates/demo/src/budget.rs", "src/budget.rs", false)
    }

    fn cites(ctx: &FileContext, src: &str) -> Vec<(Target, usize, String, Role)> {
        scan_source(ctx, src)
            .citations
            .into_iter()
            .map(|c| (c.target, c.line, c.item, c.role))
            .collect()
    }

    /// Verifies ADR-0005: each citation is attributed to the right item with the right role.
    #[test]
    fn classifies_items_tests_and_modules() {
        let src = r#"//! Budgets (ADR-0008).

/// Enforces the limit (ADR-0008, I2).
#[derive(Debug)]
pub(crate) struct Limit {
    /// Never below zero (ADR-0007).
    tokens: u32,
}

const NAME: &str = "ADR-0099 is only a string";

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // ADR-0009: fenced.
        let s = "// ADR-0098 in a string";
        write!(f, "{s}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn helper() {} // ADR-0010 in a helper

    /// Verifies I2 (ADR-0008).
    #[test]
    fn never_trimmed() {
        let x = 1; // ADR-0006
    }

    proptest! {
        /// Verifies I3.
        fn roundtrip(x in any::<u8>()) {}
    }
}
"#;
        let got = cites(&lib_ctx(), src);
        let want = vec![
            (
                Target::Adr(8),
                1,
                "mod budget".to_string(),
                Role::Implements,
            ),
            (
                Target::Adr(8),
                3,
                "struct budget::Limit".into(),
                Role::Implements,
            ),
            (
                Target::Invariant(2),
                3,
                "struct budget::Limit".into(),
                Role::Implements,
            ),
            (
                Target::Adr(7),
                6,
                "struct budget::Limit".into(),
                Role::Implements,
            ),
            (
                Target::Adr(9),
                14,
                "fn budget::Limit::fmt".into(),
                Role::Implements,
            ),
            (
                Target::Adr(10),
                24,
                "fn budget::tests::helper".into(),
                Role::Verifies,
            ),
            (
                Target::Invariant(2),
                26,
                "fn budget::tests::never_trimmed".into(),
                Role::Verifies,
            ),
            (
                Target::Adr(8),
                26,
                "fn budget::tests::never_trimmed".into(),
                Role::Verifies,
            ),
            (
                Target::Adr(6),
                29,
                "fn budget::tests::never_trimmed".into(),
                Role::Verifies,
            ),
            (
                Target::Invariant(3),
                33,
                "fn budget::tests::roundtrip".into(),
                Role::Verifies,
            ),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn impl_names_and_nested_modules() {
        let src = "mod exact {\n    impl<'a, T: Clone> Tokenizer for Wrapper<'a, T> {\n        // ADR-0003\n        fn count(&self) -> usize { 0 }\n    }\n    impl Plain {\n        /// ADR-0003\n        pub const fn new() -> Plain { Plain }\n    }\n}\n";
        let got = cites(&lib_ctx(), src);
        assert_eq!(got[0].2, "fn budget::exact::Wrapper::count");
        assert_eq!(got[1].2, "fn budget::exact::Plain::new");
        let src = "impl<T> From<T> for Box<dyn Error> {\n// ADR-0003\n}\n";
        assert_eq!(
            cites(&lib_ctx(), src)[0].2,
            "impl From<T> for Box<dyn Error> in budget"
        );
    }

    #[test]
    fn doc_comment_on_an_item_after_a_body_is_not_swallowed() {
        let src = "fn a() {\n    let f = |x: u8| x;\n}\n/// ADR-0001\nfn b() {}\n/// ADR-0002\nstatic mut C: [u8; 2] = [0; 2];\n/// ADR-0004\ntype D = fn(u8) -> u8;\n";
        let got = cites(&lib_ctx(), src);
        assert_eq!(got[0].2, "fn budget::b");
        assert_eq!(got[1].2, "static budget::C");
        assert_eq!(got[2].2, "type budget::D");
    }

    #[test]
    fn file_roles_follow_the_directory() {
        let t = FileContext::new("crates/x/tests/smoke.rs", "tests/smoke.rs", false);
        assert_eq!(t.role, Role::Verifies);
        assert_eq!(t.root_label, "test smoke");
        let ui = FileContext::new("crates/x/tests/ui/seal.rs", "tests/ui/seal.rs", false);
        assert_eq!(ui.role, Role::Verifies);
        let f = FileContext::new("fuzz/fuzz_targets/parse.rs", "fuzz_targets/parse.rs", true);
        assert_eq!(f.role, Role::Verifies);
        assert_eq!(f.root_label, "fuzz target parse");
        let b = FileContext::new("crates/x/benches/cold.rs", "benches/cold.rs", false);
        assert_eq!(b.role, Role::Measures);
        let m = FileContext::new("crates/x/src/a/mod.rs", "src/a/mod.rs", false);
        assert_eq!(m.module, vec!["a".to_string()]);
        assert_eq!(m.role, Role::Implements);
        let src = "// ADR-0003\nfn main() {}\n";
        assert_eq!(cites(&t, src)[0].3, Role::Verifies);
        assert_eq!(cites(&b, src)[0].3, Role::Measures);
    }

    #[test]
    fn inner_cfg_test_and_out_of_line_modules() {
        let src = "#![cfg(test)]\n// ADR-0003\nfn x() {}\n";
        assert_eq!(cites(&lib_ctx(), src)[0].3, Role::Verifies);
        let scan = scan_source(&lib_ctx(), "#[cfg(test)]\nmod tests;\npub mod inner;\n");
        assert_eq!(
            scan.mod_decls,
            vec![
                ModDecl {
                    module: vec!["budget".into(), "tests".into()],
                    test: true
                },
                ModDecl {
                    module: vec!["budget".into(), "inner".into()],
                    test: false
                },
            ]
        );
    }

    #[test]
    fn finds_and_rejects_citation_shapes() {
        let found = find_citations(
            "see ADR-0012, ADR-12 and ADR-00123; I3/I9 but not I0, AI3, I33 or ADR-NNNN; ADR-0003b",
        );
        let got: Vec<(Option<Target>, &str)> =
            found.iter().map(|f| (f.target, f.text.as_str())).collect();
        assert_eq!(
            got,
            vec![
                (Some(Target::Adr(12)), "ADR-0012"),
                (None, "ADR-12"),
                (None, "ADR-00123"),
                (Some(Target::Invariant(3)), "I3"),
                (Some(Target::Invariant(9)), "I9"),
                (None, "ADR-0003b"),
            ]
        );
    }

    #[test]
    fn lines_inside_block_comments() {
        let src = "/*\n * first\n * ADR-0011\n */\nfn f() {}\n";
        let got = cites(&lib_ctx(), src);
        assert_eq!(got[0].1, 3);
        assert_eq!(got[0].2, "fn budget::f");
    }
}
