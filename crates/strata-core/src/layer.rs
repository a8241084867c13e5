//! The six authority layers (ADR-0006).
//!
//! The order of the layers is structure, not data: it is the declaration order of the enums
//! below (`Ord` is derived), and there is no API that changes it. Identity layers (1-2) and
//! runtime layers (3-6) are distinct types; [`RuntimeLayer`] has no way to name layer 1 or 2.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;

/// The two identity layers, which come only from a verified, signed agent definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdentityLayer {
    /// Layer 1: who the agent is, its role, safety rules, hard constraints, tools, format.
    Core,
    /// Layer 2: personality, style, guidelines, citation rules, operational-mode templates.
    Characteristics,
}

/// The four runtime layers, populated per request and always treated as untrusted content.
///
/// This type deliberately has no variant for layer 1 or 2 (ADR-0004, invariant I7).
///
/// It is written by name (`working_memory`); it is read from a name or a number 3-6, with the
/// errors of [`RuntimeLayer::from_str`] (which say where layers 1-2 come from).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeLayer {
    /// Layer 3: business/workspace context from the platform's shared store (read-only to agents).
    Shared,
    /// Layer 4: the task payload from the delegating caller (goal, instructions, skills).
    Delegated,
    /// Layer 5: the session log (recent conversation, tool results, session files).
    WorkingMemory,
    /// Layer 6: retrieved long-term memories.
    LongTermMemory,
}

/// Any of the six layers, in authority order: a smaller layer outranks a larger one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// Layer 1, see [`IdentityLayer::Core`].
    Core,
    /// Layer 2, see [`IdentityLayer::Characteristics`].
    Characteristics,
    /// Layer 3, see [`RuntimeLayer::Shared`].
    Shared,
    /// Layer 4, see [`RuntimeLayer::Delegated`].
    Delegated,
    /// Layer 5, see [`RuntimeLayer::WorkingMemory`].
    WorkingMemory,
    /// Layer 6, see [`RuntimeLayer::LongTermMemory`].
    LongTermMemory,
}

impl Layer {
    /// All six layers in authority order.
    pub const ALL: [Layer; 6] = [
        Layer::Core,
        Layer::Characteristics,
        Layer::Shared,
        Layer::Delegated,
        Layer::WorkingMemory,
        Layer::LongTermMemory,
    ];

    /// The layer's number, 1 to 6.
    pub const fn number(self) -> u8 {
        match self {
            Layer::Core => 1,
            Layer::Characteristics => 2,
            Layer::Shared => 3,
            Layer::Delegated => 4,
            Layer::WorkingMemory => 5,
            Layer::LongTermMemory => 6,
        }
    }

    /// The layer with this number, if it is 1 to 6.
    pub const fn from_number(n: u8) -> Option<Layer> {
        match n {
            1 => Some(Layer::Core),
            2 => Some(Layer::Characteristics),
            3 => Some(Layer::Shared),
            4 => Some(Layer::Delegated),
            5 => Some(Layer::WorkingMemory),
            6 => Some(Layer::LongTermMemory),
            _ => None,
        }
    }

    /// True for layers 1 and 2.
    pub const fn is_identity(self) -> bool {
        matches!(self, Layer::Core | Layer::Characteristics)
    }

    /// A short stable name (`core`, `characteristics`, `shared`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Layer::Core => "core",
            Layer::Characteristics => "characteristics",
            Layer::Shared => "shared",
            Layer::Delegated => "delegated",
            Layer::WorkingMemory => "working_memory",
            Layer::LongTermMemory => "long_term_memory",
        }
    }

    /// The runtime layer, or `None` for layers 1-2.
    pub const fn as_runtime(self) -> Option<RuntimeLayer> {
        match self {
            Layer::Shared => Some(RuntimeLayer::Shared),
            Layer::Delegated => Some(RuntimeLayer::Delegated),
            Layer::WorkingMemory => Some(RuntimeLayer::WorkingMemory),
            Layer::LongTermMemory => Some(RuntimeLayer::LongTermMemory),
            Layer::Core | Layer::Characteristics => None,
        }
    }
}

impl RuntimeLayer {
    /// The four runtime layers in authority order.
    pub const ALL: [RuntimeLayer; 4] = [
        RuntimeLayer::Shared,
        RuntimeLayer::Delegated,
        RuntimeLayer::WorkingMemory,
        RuntimeLayer::LongTermMemory,
    ];

    /// The layer's number, 3 to 6.
    pub const fn number(self) -> u8 {
        Layer::from_runtime(self).number()
    }

    /// A short stable name.
    pub const fn name(self) -> &'static str {
        Layer::from_runtime(self).name()
    }

    /// Index 0-3 (for per-layer arrays).
    pub const fn index(self) -> usize {
        self.number() as usize - 3
    }
}

impl IdentityLayer {
    /// The layer's number, 1 or 2.
    pub const fn number(self) -> u8 {
        match self {
            IdentityLayer::Core => 1,
            IdentityLayer::Characteristics => 2,
        }
    }
}

impl Layer {
    const fn from_runtime(l: RuntimeLayer) -> Layer {
        match l {
            RuntimeLayer::Shared => Layer::Shared,
            RuntimeLayer::Delegated => Layer::Delegated,
            RuntimeLayer::WorkingMemory => Layer::WorkingMemory,
            RuntimeLayer::LongTermMemory => Layer::LongTermMemory,
        }
    }
}

impl From<RuntimeLayer> for Layer {
    fn from(l: RuntimeLayer) -> Layer {
        Layer::from_runtime(l)
    }
}

impl From<IdentityLayer> for Layer {
    fn from(l: IdentityLayer) -> Layer {
        match l {
            IdentityLayer::Core => Layer::Core,
            IdentityLayer::Characteristics => Layer::Characteristics,
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.number(), self.name())
    }
}

impl fmt::Display for RuntimeLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Layer::from(*self).fmt(f)
    }
}

impl<'de> Deserialize<'de> for RuntimeLayer {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = RuntimeLayer;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a runtime layer: 3-6, or shared, delegated, working_memory, long_term_memory",
                )
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RuntimeLayer, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RuntimeLayer, E> {
                v.to_string().parse().map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<RuntimeLayer, E> {
                v.to_string().parse().map_err(E::custom)
            }
        }
        d.deserialize_any(Visit)
    }
}

impl FromStr for RuntimeLayer {
    type Err = CoreError;

    /// Accepts a runtime layer's number (3-6) or name; refuses layers 1-2 with an error that
    /// says where identity comes from.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase().replace('-', "_");
        let layer = match t.as_str() {
            "1" | "core" | "2" | "characteristics" => {
                return Err(CoreError::IdentityLayerNotRuntime {
                    given: s.to_owned(),
                })
            }
            "3" | "shared" => RuntimeLayer::Shared,
            "4" | "delegated" => RuntimeLayer::Delegated,
            "5" | "working_memory" | "working" => RuntimeLayer::WorkingMemory,
            "6" | "long_term_memory" | "long_term" => RuntimeLayer::LongTermMemory,
            _ => {
                return Err(CoreError::UnknownLayer {
                    given: s.to_owned(),
                })
            }
        };
        Ok(layer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_structural() {
        // ADR-0006: a smaller layer number outranks a larger one.
        for w in Layer::ALL.windows(2) {
            assert!(w[0] < w[1]);
            assert_eq!(w[0].number() + 1, w[1].number());
        }
        for w in RuntimeLayer::ALL.windows(2) {
            assert!(w[0] < w[1]);
        }
        assert!(Layer::from(IdentityLayer::Characteristics) < Layer::from(RuntimeLayer::Shared));
    }

    #[test]
    fn parsing_refuses_identity_layers() {
        assert_eq!(
            "5".parse::<RuntimeLayer>().unwrap(),
            RuntimeLayer::WorkingMemory
        );
        assert_eq!(
            "long-term".parse::<RuntimeLayer>().unwrap(),
            RuntimeLayer::LongTermMemory
        );
        for s in ["1", "2", "core", "Characteristics"] {
            let e = s.parse::<RuntimeLayer>().unwrap_err();
            assert!(
                matches!(e, CoreError::IdentityLayerNotRuntime { .. }),
                "{s}: {e}"
            );
        }
        assert!(matches!(
            "7".parse::<RuntimeLayer>(),
            Err(CoreError::UnknownLayer { .. })
        ));
    }

    #[test]
    fn runtime_layers_are_read_by_name_or_number_with_errors_that_help() {
        for (json, want) in [
            ("\"working_memory\"", RuntimeLayer::WorkingMemory),
            ("5", RuntimeLayer::WorkingMemory),
            ("\"6\"", RuntimeLayer::LongTermMemory),
            ("3", RuntimeLayer::Shared),
        ] {
            let got: RuntimeLayer = serde_json::from_str(json).unwrap();
            assert_eq!(got, want, "{json}");
            // Written back by name.
            assert_eq!(
                serde_json::to_string(&got).unwrap(),
                format!("\"{}\"", want.name())
            );
        }
        let e = serde_json::from_str::<RuntimeLayer>("1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("signed"), "{e}");
        let e = serde_json::from_str::<RuntimeLayer>("9")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("expected value"), "{e}");
        assert!(e.contains('9'), "{e}");
        let e = serde_json::from_str::<RuntimeLayer>("true")
            .unwrap_err()
            .to_string();
        assert!(e.contains("3-6"), "{e}");
    }

    #[test]
    fn numbers_round_trip() {
        for l in Layer::ALL {
            assert_eq!(Layer::from_number(l.number()), Some(l));
            assert_eq!(l.as_runtime().is_none(), l.is_identity());
        }
        assert_eq!(Layer::from_number(0), None);
        assert_eq!(RuntimeLayer::LongTermMemory.index(), 3);
    }
}
