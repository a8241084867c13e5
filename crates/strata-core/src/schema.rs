//! JSON Schema of the core types that appear in strata's file formats, for the types whose
//! serde form is written by hand (names, sets, validated strings). Behind the `schema` feature;
//! the format reference in `docs/reference/formats.md` is generated from these schemas
//! (ADR-0026).

use std::borrow::Cow;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};

use crate::mode::{AssemblyPath, ModeSet, OperationalMode, PathSet, PromptMode};
use crate::{Content, RuntimeLayer, ToolName, ToolSchema};

macro_rules! named {
    ($t:ty, $what:literal) => {
        impl JsonSchema for $t {
            fn schema_name() -> Cow<'static, str> {
                stringify!($t).into()
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                let names: Vec<&str> = <$t>::ALL.iter().map(|m| m.name()).collect();
                json_schema!({ "type": "string", "enum": names, "description": $what })
            }
        }
    };
}

named!(PromptMode, "A prompt mode.");
named!(AssemblyPath, "An assembly path.");
named!(OperationalMode, "An operational mode.");

macro_rules! set {
    ($t:ty, $item:ty, $what:literal) => {
        impl JsonSchema for $t {
            fn schema_name() -> Cow<'static, str> {
                stringify!($t).into()
            }
            fn json_schema(g: &mut SchemaGenerator) -> Schema {
                let item = g.subschema_for::<$item>();
                json_schema!({ "type": "array", "items": item, "uniqueItems": true, "description": $what })
            }
        }
    };
}

set!(ModeSet, PromptMode, "Prompt modes (default: all).");
set!(PathSet, AssemblyPath, "Assembly paths (default: all).");

impl JsonSchema for Content {
    fn schema_name() -> Cow<'static, str> {
        "Text".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string" })
    }
}

impl JsonSchema for ToolName {
    fn schema_name() -> Cow<'static, str> {
        "ToolName".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "A tool name: 1-64 characters of letters, digits, _ and -."
        })
    }
}

impl JsonSchema for ToolSchema {
    fn schema_name() -> Cow<'static, str> {
        "ToolSchema".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "object",
            "description": "The JSON Schema of a tool's arguments (an object schema)."
        })
    }
}

impl JsonSchema for RuntimeLayer {
    fn schema_name() -> Cow<'static, str> {
        "RuntimeLayer".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let names: Vec<&str> = RuntimeLayer::ALL.iter().map(|l| l.name()).collect();
        json_schema!({
            "description": "A runtime layer, by name or number: 3 shared, 4 delegated, 5 working_memory, 6 long_term_memory. Layers 1-2 come only from the signed definition.",
            "oneOf": [
                { "type": "string", "enum": names },
                { "type": "integer", "minimum": 3, "maximum": 6 }
            ]
        })
    }
}
