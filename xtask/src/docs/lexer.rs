//! A small Rust lexer: just enough to tell comments from code, strings and characters.
//!
//! The citation scanner must never read a citation out of a string literal (test inputs are
//! full of them) and must know where items, blocks and attributes begin and end. This lexer
//! turns source text into identifiers, punctuation, literals and comments, each with the line
//! it starts on. It does not validate anything: malformed input still lexes to something, so a
//! half-written file never stops the documentation from being generated.

/// What a comment is attached to by the language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommentStyle {
    /// `//` or `/* */`: an ordinary comment.
    Plain,
    /// `///` or `/** */`: documents the item that follows.
    OuterDoc,
    /// `//!` or `/*! */`: documents the enclosing item or module.
    InnerDoc,
}

/// One lexical token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenKind {
    /// An identifier or keyword (raw identifiers lose their `r#`).
    Ident(String),
    /// A lifetime or loop label such as `'a`.
    Lifetime,
    /// A string, character or number literal; the text does not matter here.
    Literal,
    /// A single punctuation character.
    Punct(char),
    /// A comment with its text (markers included).
    Comment(CommentStyle, String),
}

/// A token and the 1-based line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// What the token is.
    pub kind: TokenKind,
    /// Line of the token's first character.
    pub line: usize,
}

impl Token {
    /// The identifier's text, if this is an identifier.
    pub fn ident(&self) -> Option<&str> {
        match &self.kind {
            TokenKind::Ident(s) => Some(s),
            _ => None,
        }
    }

    /// Whether this is the punctuation character `c`.
    pub fn is_punct(&self, c: char) -> bool {
        self.kind == TokenKind::Punct(c)
    }

    /// Whether this is a comment.
    pub fn is_comment(&self) -> bool {
        matches!(self.kind, TokenKind::Comment(..))
    }
}

/// Splits Rust source text into tokens.
pub fn lex(src: &str) -> Vec<Token> {
    Lexer {
        chars: src.chars().collect(),
        pos: 0,
        line: 1,
        out: Vec::new(),
    }
    .run()
}

struct Lexer {
    chars: Vec<char>,
    pos: usize,
    line: usize,
    out: Vec<Token>,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.chars.get(self.pos).copied()?;
        self.pos += 1;
        if c == '\n' {
            self.line += 1;
        }
        Some(c)
    }

    fn push(&mut self, kind: TokenKind, line: usize) {
        self.out.push(Token { kind, line });
    }

    fn run(mut self) -> Vec<Token> {
        while let Some(c) = self.peek(0) {
            let line = self.line;
            if c.is_whitespace() {
                self.bump();
            } else if c == '/' && self.peek(1) == Some('/') {
                self.line_comment(line);
            } else if c == '/' && self.peek(1) == Some('*') {
                self.block_comment(line);
            } else if c == '"' {
                self.bump();
                self.quoted('"');
                self.push(TokenKind::Literal, line);
            } else if c == '\'' {
                self.quote_or_lifetime(line);
            } else if c.is_ascii_digit() {
                self.number();
                self.push(TokenKind::Literal, line);
            } else if is_ident_start(c) {
                self.ident_or_prefixed_literal(line);
            } else {
                self.bump();
                self.push(TokenKind::Punct(c), line);
            }
        }
        self.out
    }

    fn line_comment(&mut self, line: usize) {
        let start = self.pos;
        while let Some(c) = self.peek(0) {
            if c == '\n' {
                break;
            }
            self.bump();
        }
        let text: String = self.chars[start..self.pos].iter().collect();
        let style = if text.starts_with("//!") {
            CommentStyle::InnerDoc
        } else if text.starts_with("///") && !text.starts_with("////") {
            CommentStyle::OuterDoc
        } else {
            CommentStyle::Plain
        };
        self.push(TokenKind::Comment(style, text), line);
    }

    fn block_comment(&mut self, line: usize) {
        let start = self.pos;
        self.bump();
        self.bump();
        let mut depth = 1usize;
        while depth > 0 {
            match (self.peek(0), self.peek(1)) {
                (None, _) => break,
                (Some('/'), Some('*')) => {
                    self.bump();
                    self.bump();
                    depth += 1;
                }
                (Some('*'), Some('/')) => {
                    self.bump();
                    self.bump();
                    depth -= 1;
                }
                _ => {
                    self.bump();
                }
            }
        }
        let text: String = self.chars[start..self.pos].iter().collect();
        let style = if text.starts_with("/*!") {
            CommentStyle::InnerDoc
        } else if text.starts_with("/**") && !text.starts_with("/***") && text != "/**/" {
            CommentStyle::OuterDoc
        } else {
            CommentStyle::Plain
        };
        self.push(TokenKind::Comment(style, text), line);
    }

    /// Consumes the rest of a quoted literal whose opening quote is already consumed.
    fn quoted(&mut self, close: char) {
        while let Some(c) = self.bump() {
            if c == '\\' {
                self.bump();
            } else if c == close {
                break;
            }
        }
    }

    /// Consumes a raw string starting at `"` or `#` (the `r` prefix is already consumed).
    fn raw_string(&mut self) {
        let mut hashes = 0usize;
        while self.peek(0) == Some('#') {
            self.bump();
            hashes += 1;
        }
        if self.peek(0) != Some('"') {
            return;
        }
        self.bump();
        while let Some(c) = self.bump() {
            if c == '"' && (0..hashes).all(|i| self.peek(i) == Some('#')) {
                for _ in 0..hashes {
                    self.bump();
                }
                break;
            }
        }
    }

    fn quote_or_lifetime(&mut self, line: usize) {
        // `'\n'`, `'x'` and `'字'` are characters; `'a` and `'outer:` are lifetimes or labels.
        if self.peek(1) == Some('\\') || (self.peek(1).is_some() && self.peek(2) == Some('\'')) {
            self.bump();
            self.quoted('\'');
            self.push(TokenKind::Literal, line);
        } else {
            self.bump();
            while self.peek(0).is_some_and(is_ident_continue) {
                self.bump();
            }
            self.push(TokenKind::Lifetime, line);
        }
    }

    fn number(&mut self) {
        while let Some(c) = self.peek(0) {
            let fraction = c == '.' && self.peek(1).is_some_and(|d| d.is_ascii_digit());
            if c.is_ascii_alphanumeric() || c == '_' || fraction {
                self.bump();
            } else {
                break;
            }
        }
    }

    fn ident_or_prefixed_literal(&mut self, line: usize) {
        let start = self.pos;
        while self.peek(0).is_some_and(is_ident_continue) {
            self.bump();
        }
        let word: String = self.chars[start..self.pos].iter().collect();
        let next = self.peek(0);
        match (word.as_str(), next) {
            ("b" | "c", Some('"')) => {
                self.bump();
                self.quoted('"');
                self.push(TokenKind::Literal, line);
            }
            ("b", Some('\'')) => {
                self.bump();
                self.quoted('\'');
                self.push(TokenKind::Literal, line);
            }
            ("r" | "br" | "cr", Some('"')) => {
                self.raw_string();
                self.push(TokenKind::Literal, line);
            }
            ("r" | "br" | "cr", Some('#')) => {
                let mut n = 0;
                while self.peek(n) == Some('#') {
                    n += 1;
                }
                if self.peek(n) == Some('"') {
                    self.raw_string();
                    self.push(TokenKind::Literal, line);
                } else if word == "r" && n == 1 && self.peek(1).is_some_and(is_ident_start) {
                    // A raw identifier such as `r#type`.
                    self.bump();
                    let s = self.pos;
                    while self.peek(0).is_some_and(is_ident_continue) {
                        self.bump();
                    }
                    let name: String = self.chars[s..self.pos].iter().collect();
                    self.push(TokenKind::Ident(name), line);
                } else {
                    self.push(TokenKind::Ident(word), line);
                }
            }
            _ => self.push(TokenKind::Ident(word), line),
        }
    }
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn is_ident_continue(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comments(src: &str) -> Vec<(CommentStyle, String, usize)> {
        lex(src)
            .into_iter()
            .filter_map(|t| match t.kind {
                TokenKind::Comment(style, text) => Some((style, text, t.line)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn comment_styles_and_lines() {
        let src = "//! inner\n/// outer\n//// plain\n// plain\nfn f() {}\n/** block doc */\n/*! inner block */\n/* plain /* nested */ still */\n";
        let got = comments(src);
        let styles: Vec<_> = got.iter().map(|c| (c.0, c.2)).collect();
        assert_eq!(
            styles,
            vec![
                (CommentStyle::InnerDoc, 1),
                (CommentStyle::OuterDoc, 2),
                (CommentStyle::Plain, 3),
                (CommentStyle::Plain, 4),
                (CommentStyle::OuterDoc, 6),
                (CommentStyle::InnerDoc, 7),
                (CommentStyle::Plain, 8),
            ]
        );
        assert_eq!(got[6].1, "/* plain /* nested */ still */");
    }

    #[test]
    fn strings_hide_comment_markers() {
        let src = r####"let a = "// not a comment"; let b = r#"/* nor "this" */"#;
let c = b"//"; let d = '/'; let e = '\''; let f = br##"x"# // "##; // real
let g: &'static str = "\"// escaped\"";"####;
        let got = comments(src);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].1, "// real");
        assert_eq!(got[0].2, 2);
    }

    #[test]
    fn lifetimes_chars_and_raw_identifiers() {
        let kinds: Vec<TokenKind> = lex("fn r#type<'a>(x: &'a u8) -> char { 'x' }")
            .into_iter()
            .map(|t| t.kind)
            .collect();
        assert_eq!(kinds[1], TokenKind::Ident("type".into()));
        assert_eq!(kinds[3], TokenKind::Lifetime);
        assert!(kinds.contains(&TokenKind::Literal));
        assert_eq!(
            kinds.iter().filter(|k| **k == TokenKind::Lifetime).count(),
            2
        );
    }

    #[test]
    fn multiline_strings_keep_line_numbers() {
        let src = "let s = \"a\nb\nc\";\n// here\n";
        assert_eq!(comments(src)[0].2, 4);
    }
}
