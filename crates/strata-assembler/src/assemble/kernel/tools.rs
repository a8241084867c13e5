//! The tools of a request, part of the frame stage: layer 1's allowlist narrowed by the
//! caller's policy and by what is announced (I4, ADR-0007), pinned schemas checked, announced
//! schemas stripped of their free text (ADR-0032), and for the plain-text format the catalog
//! section that lists them.

use std::collections::{BTreeMap, BTreeSet};

use strata_agentdef::VerifiedAgent;
use strata_core::{
    identity::AllowedTool, AnnouncedTool, Phase, RuntimeLayer, Section, SourceKind, Stability,
    ToolName, ToolPolicy, ToolSchema,
};

use super::{TOOL_CATALOG_ID, TOOL_CATALOG_KEY};
use crate::assemble::schema;
use crate::provider::{RequestTool, ToolDescriptions};
use crate::report::{RefusalCause, RefusedTool, SchemaTextRemoved, ToolsReport};
use crate::request::AssemblyRequest;

/// Narrow the tool set: layer 1's allowlist, intersected with the caller's policy, intersected
/// with what is announced (I4, ADR-0007). A tool whose signed entry pins a schema is refused when
/// the announcement carries another schema or another description ("definition changed");
/// otherwise it takes the announced schema, stripped of its free text unless the policy is
/// [`ToolDescriptions::AnnouncedDangerously`], and refused when a name in it is not an
/// identifier (ADR-0032). Descriptions follow [`ToolDescriptions`]: by default the signed one
/// replaces the announced one (ADR-0015). For the plain-text format the effective tools are also
/// listed in a fenced layer-3 catalog section.
pub(in crate::assemble) fn narrow_tools(
    agent: &VerifiedAgent,
    req: &AssemblyRequest,
) -> (ToolsReport, Option<Section>, Vec<RequestTool>) {
    let identity = agent.identity();
    let mut report = ToolsReport::default();
    if let ToolPolicy::Only(set) = &req.tool_policy {
        for name in set.iter().filter(|n| !identity.allows(n)) {
            report.refused.push(refusal(
                name,
                RefusalCause::NotAllowlisted,
                "not in layer 1's allowlist; delegated context cannot widen it".into(),
            ));
        }
    }
    let mut effective: BTreeMap<ToolName, RequestTool> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for t in &req.tools {
        if !seen.insert(t.name.clone()) {
            report.refused.push(refusal(
                &t.name,
                RefusalCause::Duplicate,
                "announced more than once; the first announcement is used".into(),
            ));
            continue;
        }
        let signed = identity.tools().iter().find(|a| a.name == t.name);
        match admit(req, t, signed, &mut report.schema_text_removed) {
            Ok(tool) => {
                effective.insert(t.name.clone(), tool);
            }
            Err((cause, why)) => report.refused.push(refusal(&t.name, cause, why)),
        }
    }
    report
        .refused
        .sort_by(|a, b| (&a.name, &a.reason).cmp(&(&b.name, &b.reason)));
    report
        .schema_text_removed
        .sort_by(|a, b| a.tool.cmp(&b.tool));
    report.effective = effective.keys().cloned().collect();
    let tools: Vec<RequestTool> = effective.into_values().collect();
    let catalog = catalog_section(&tools);
    (report, catalog, tools)
}

/// The refusal of the tool `name`.
fn refusal(name: &ToolName, cause: RefusalCause, reason: String) -> RefusedTool {
    RefusedTool {
        name: name.to_string(),
        reason,
        cause,
    }
}

/// The tool `t` as offered, or why it is refused (the cause, and the reason in words): it must
/// be in layer 1's allowlist (`signed`) and permitted by the delegated policy, and match what
/// the signed entry pins.
fn admit(
    req: &AssemblyRequest,
    t: &AnnouncedTool,
    signed: Option<&AllowedTool>,
    removed: &mut Vec<SchemaTextRemoved>,
) -> Result<RequestTool, (RefusalCause, String)> {
    use RefusalCause::{DefinitionChanged, NotAllowlisted, Restricted, SchemaNotIdentifier};
    let by = t
        .server
        .as_deref()
        .map_or_else(|| "the runtime".to_owned(), |s| format!("MCP server `{s}`"));
    let Some(signed) = signed else {
        return Err((
            NotAllowlisted,
            format!("announced by {by} but not in layer 1's allowlist"),
        ));
    };
    if !req.tool_policy.permits(&t.name) {
        return Err((Restricted, "restricted by the delegated tool policy".into()));
    }
    if let Some(pinned) = signed.server.as_deref() {
        if t.server.as_deref() != Some(pinned) {
            return Err((DefinitionChanged, format!(
                "definition changed: {by} announced a tool the signed definition pins to MCP server `{pinned}`"
            )));
        }
    }
    let policy = req.provider_options.tool_descriptions;
    let (parameters, schema_source) = match (&signed.parameters, &t.parameters) {
        (Some(pinned), Some(announced)) if pinned != announced => {
            return Err((DefinitionChanged, format!(
                "definition changed: {by} announced a schema ({}) that differs from the signed one ({})",
                announced.digest(),
                pinned.digest()
            )));
        }
        (Some(pinned), _) => {
            let announced = t.description.as_str();
            if !announced.is_empty() && announced != signed.description {
                return Err((DefinitionChanged, format!("definition changed: {by} announced a description that differs from the signed one")));
            }
            (pinned.clone(), "signed")
        }
        // The announced schema is data: offered as announced only under the loud policy;
        // otherwise its structure without its free text, and what was removed is reported
        // (ADR-0032).
        (None, Some(announced)) => match policy {
            ToolDescriptions::AnnouncedDangerously => (announced.clone(), "announced"),
            ToolDescriptions::Signed | ToolDescriptions::Withheld => {
                let structure = structure_of(t, announced, &by, removed)
                    .map_err(|why| (SchemaNotIdentifier, why))?;
                (structure, "announced")
            }
        },
        (None, None) => (empty_schema(), "none"),
    };
    let description = match policy {
        ToolDescriptions::Signed => signed.description.clone(),
        ToolDescriptions::Withheld => String::new(),
        ToolDescriptions::AnnouncedDangerously => t.description.as_str().to_owned(),
    };
    Ok(RequestTool {
        name: t.name.clone(),
        description,
        parameters,
        schema_source: schema_source.to_owned(),
    })
}

/// The structure of the schema `announced` by `by` for tool `t`, its free text removed and
/// listed in `removed`; refused when a name in it is not an identifier (ADR-0032).
fn structure_of(
    t: &AnnouncedTool,
    announced: &ToolSchema,
    by: &str,
    removed: &mut Vec<SchemaTextRemoved>,
) -> Result<ToolSchema, String> {
    let stripped = schema::strip(&announced.to_value()).map_err(|bad| {
        format!(
            "{by} announced a schema with a name at `{}` that is not an identifier ({}); rename it, or pin the schema in the signed definition",
            bad.path,
            schema::IDENTIFIER_PATTERN
        )
    })?;
    let Ok(parameters) = ToolSchema::from_value(&stripped.schema) else {
        // Not reached: stripping keeps the announced object an object.
        return Err(format!("{by} announced a schema that is not an object"));
    };
    if !stripped.removed.is_empty() {
        removed.push(SchemaTextRemoved {
            tool: t.name.clone(),
            paths: stripped.removed,
        });
    }
    Ok(parameters)
}

/// The fenced layer-3 section listing `tools` for the plain-text format, if there are any.
fn catalog_section(tools: &[RequestTool]) -> Option<Section> {
    if tools.is_empty() {
        return None;
    }
    let body: Vec<String> = tools
        .iter()
        .map(|t| {
            if t.description.is_empty() {
                format!("- {}", t.name)
            } else {
                format!("- {}: {}", t.name, t.description)
            }
        })
        .collect();
    Section::builder(
        RuntimeLayer::Shared,
        TOOL_CATALOG_ID,
        format!("Tools available now:\n{}", body.join("\n")),
    )
    .and_then(|b| b.key(TOOL_CATALOG_KEY))
    .map(|b| {
        // The highest priority: among layer-3 catalogs claiming the key, this one wins (I4).
        // Sticky: derived from the signed allowlist, it is protected like the signed text.
        b.phase(Phase::Tools)
            .stability(Stability::Stable)
            .sticky(true)
            .priority(u32::MAX)
            .source(SourceKind::Static, "assembler")
            .build()
    })
    .ok()
}

/// `{"type":"object","properties":{}}`: the schema of a tool whose arguments nobody described.
fn empty_schema() -> ToolSchema {
    let v = serde_json::json!({ "type": "object", "properties": {} });
    ToolSchema::from_value(&v).expect("an object literal is a tool schema")
}
