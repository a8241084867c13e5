//! Prompt modes, assembly paths and operational modes, and compact sets of them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::CoreError;

macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident, default $def:ident, $what:literal, [$($(#[$vm:meta])* $v:ident = $s:literal),+ $(,)?]) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name { $($(#[$vm])* $v),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$v),+];

            /// The stable lower-case name.
            pub const fn name(self) -> &'static str {
                match self { $($name::$v => $s),+ }
            }

            #[allow(dead_code, reason = "only the enums that have a set type use their bit")]
            const fn bit(self) -> u8 {
                1u8 << (self as u8)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                $name::$def
            }
        }

        impl FromStr for $name {
            type Err = CoreError;
            fn from_str(s: &str) -> Result<Self, CoreError> {
                match s.trim().to_ascii_lowercase().as_str() {
                    $($s => Ok($name::$v),)+
                    _ => Err(CoreError::UnknownName {
                        what: $what,
                        given: s.to_owned(),
                        expected: concat!($($s, " "),+),
                    }),
                }
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

named_enum!(
    /// How much of the prompt takes part in an assembly (the seeds' thinking modes).
    PromptMode, default Full, "prompt mode", [
    /// Every section takes part (the default).
    Full = "full",
    /// Heavy sections (environment, capabilities, guidelines, skills...) are left out.
    Compact = "compact",
    /// Only identity, tools, response format and language.
    Minimal = "minimal",
    /// For scheduled jobs: identity, safety, time and custom instructions.
    Scheduled = "scheduled",
]);

named_enum!(
    /// The assembly path: which kind of call the prompt is built for.
    AssemblyPath, default Soul, "assembly path", [
    /// Configuration and the tool list only.
    Basic = "basic",
    /// Tools come from semantic retrieval.
    Hydration = "hydration",
    /// Identity and personality enriched (the default).
    Soul = "soul",
    /// Context-aware, uses resolved context.
    Context = "context",
    /// The pre-cached stable prefix.
    Cached = "cached",
]);

named_enum!(
    /// The operational mode, which selects a template per tier from the signed definition.
    OperationalMode, default Assistant, "operational mode", [
    /// General-purpose assistance (the default).
    Assistant = "assistant",
    /// Code-focused work.
    Developer = "developer",
    /// Planning and architecture.
    Planning = "planning",
    /// Error analysis and troubleshooting.
    Debugger = "debugger",
    /// Operator-customised behaviour.
    User = "user",
]);

macro_rules! bit_set {
    ($(#[$m:meta])* $set:ident, $item:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $set(u8);

        impl $set {
            /// No member.
            pub const EMPTY: $set = $set(0);

            /// Every member.
            pub const fn all() -> $set {
                let mut bits = 0u8;
                let mut i = 0;
                while i < $item::ALL.len() {
                    bits |= $item::ALL[i].bit();
                    i += 1;
                }
                $set(bits)
            }

            /// A set of the given members.
            pub fn of(items: &[$item]) -> $set {
                items.iter().fold($set::EMPTY, |s, i| s.with(*i))
            }

            /// This set plus `item`.
            pub const fn with(self, item: $item) -> $set {
                $set(self.0 | item.bit())
            }

            /// This set less `item`.
            pub const fn without(self, item: $item) -> $set {
                $set(self.0 & !item.bit())
            }

            /// Membership.
            pub const fn contains(self, item: $item) -> bool {
                self.0 & item.bit() != 0
            }

            /// True when no member.
            pub const fn is_empty(self) -> bool {
                self.0 == 0
            }

            /// Members in declaration order.
            pub fn iter(self) -> impl Iterator<Item = $item> {
                $item::ALL.iter().copied().filter(move |i| self.contains(*i))
            }
        }

        impl Default for $set {
            fn default() -> Self {
                $set::all()
            }
        }

        impl fmt::Debug for $set {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_set().entries(self.iter()).finish()
            }
        }

        impl Serialize for $set {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(self.iter())
            }
        }

        impl<'de> Deserialize<'de> for $set {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let items = Vec::<$item>::deserialize(d)?;
                Ok($set::of(&items))
            }
        }
    };
}

bit_set!(
    /// The prompt modes a section takes part in (default: all).
    ModeSet, PromptMode
);
bit_set!(
    /// The assembly paths a section takes part in (default: all).
    PathSet, AssemblyPath
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets() {
        let s = ModeSet::of(&[PromptMode::Full, PromptMode::Compact]);
        assert!(s.contains(PromptMode::Full));
        assert!(!s.contains(PromptMode::Minimal));
        assert_eq!(
            s.without(PromptMode::Full).iter().collect::<Vec<_>>(),
            [PromptMode::Compact]
        );
        assert_eq!(PathSet::all().iter().count(), 5);
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, r#"["full","compact"]"#);
        assert_eq!(serde_json::from_str::<ModeSet>(&json).unwrap(), s);
    }

    #[test]
    fn names_parse() {
        assert_eq!(
            "Compact".parse::<PromptMode>().unwrap(),
            PromptMode::Compact
        );
        assert_eq!(
            "debugger".parse::<OperationalMode>().unwrap(),
            OperationalMode::Debugger
        );
        let e = "fast".parse::<AssemblyPath>().unwrap_err().to_string();
        assert!(e.contains("basic hydration soul context cached"), "{e}");
    }
}
