//! Prompt modes and assembly paths: which standard sections take part in which assembly.
//!
//! The seed systems name about thirty kinds of prompt content. In strata each kind is either
//! identity (layers 1-2, only from the signed definition, never produced here), or a section
//! that a contributor of one runtime layer produces. [`StandardSection`] lists them all with
//! the owner, and the table below says, for each, which prompt modes and assembly paths it
//! takes part in, its phase, priority and stability (ADR-0011):
//!
//! - `full`: everything.
//! - `compact`: leaves out the heavy sections: runtime context, environment, runtime
//!   capabilities, protocol tokens, heartbeat, operational guidelines, citation standards,
//!   generation models, skill instructions, special actions, guidelines, thinking guidance,
//!   skill mode and custom instructions.
//! - `minimal`: only identity, tools, response format and language.
//! - `scheduled` (cron jobs): only identity, safety, time and custom instructions.
//! - in every mode and on every path: the active goal, which is never compressed or removed.
//!
//! Paths: `basic` carries configuration and the tool list only; `hydration`, `soul` and
//! `context` carry everything their mode allows; `cached` carries only stable sections (the
//! provider-cacheable prefix, ADR-0013).
//!
//! Priorities follow the order of the seed pipeline (where a smaller number came first and
//! mattered more): ours are `2000 - seed priority`, so within a layer a larger number is more
//! important and is trimmed last (ADR-0008).

use strata_core::{AssemblyPath, ModeSet, PathSet, Phase, PromptMode, RuntimeLayer, Stability};

use crate::contributor::ContributorMeta;

/// Who produces a kind of prompt content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    /// Layers 1-2: written in the signed agent definition, never by a contributor.
    Identity,
    /// A contributor of a runtime layer.
    Runtime(RuntimeLayer),
}

/// The kinds of prompt content the seed systems describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum StandardSection {
    /// Identity and personality (signed).
    Soul,
    /// A sub-agent's role header and protocol blocks (signed).
    AgentRole,
    /// The base assistant role (signed).
    Role,
    /// Safety and security rules (signed).
    Safety,
    /// Response structure (signed).
    ResponseFormat,
    /// The definition's response language (signed).
    Language,
    /// General and operational guidelines (signed).
    Guidelines,
    /// Citation formatting (signed).
    CitationStandards,
    /// Workspace profile overlay, business and project context (layer 3).
    WorkspaceProfile,
    /// OS, date and working directory (layer 3).
    Environment,
    /// Interpreters and tools found on the machine (layer 3).
    RuntimeCapabilities,
    /// Model, host, OS and architecture (layer 3).
    RuntimeInfo,
    /// Current time, time zone and day of week (layer 3).
    TemporalContext,
    /// The catalog of announced tools, including tools found by semantic retrieval (layer 3).
    ToolCatalog,
    /// Tool-usage guidance generated from usage hints (layer 3).
    ToolGuidance,
    /// Protocol tokens of the runtime's wire protocol (layer 3).
    ProtocolTokens,
    /// Session keep-alive instructions (layer 3).
    Heartbeat,
    /// Operational rules the platform adds at run time (layer 3).
    OperationalGuidelines,
    /// Available image, video and audio generation models (layer 3).
    GenerationModels,
    /// Special action syntax (layer 3).
    SpecialActions,
    /// Workspace bootstrap files: SOUL.md, AGENTS.md, TOOLS.md, COMMANDS.md, IDENTITY.md,
    /// PREFERENCES.md
    /// (layer 3, never identity).
    BootstrapFiles,
    /// Operator or user custom instructions (layer 3).
    CustomInstructions,
    /// The structure of the workspace folder (layer 3).
    WorkspaceHints,
    /// Built-in tool guides and skill instructions (layer 4).
    SkillInstructions,
    /// Strict skill workflow enforcement (layer 4).
    SkillMode,
    /// Thinking level and reasoning guidance (layer 4).
    ThinkingGuidance,
    /// The current goal, checkpoints, locked decisions and artifacts (layer 4, sticky).
    Goal,
    /// The operational-mode template for the tier, rendered (layer 4).
    OperationalTemplate,
    /// Sender, channel and session metadata of the inbound message (layer 4).
    InboundContext,
    /// Voice-output instructions (layer 4).
    VoiceMode,
    /// The response language the caller asked for (layer 4).
    ResponseLanguage,
    /// Recent conversation and summaries (layer 5).
    ConversationHistory,
    /// Files read or written in this session, and the recent footprint (layer 5).
    SessionContext,
    /// Retrieved memories, MEMORY.md index, wikilink neighbours, episodes (layer 6).
    Memory,
}

/// The sections the compact mode leaves out (the seeds' fourteen heavy ones).
const COMPACT_EXCLUDES: &[StandardSection] = &[
    StandardSection::TemporalContext,
    StandardSection::RuntimeInfo,
    StandardSection::Environment,
    StandardSection::RuntimeCapabilities,
    StandardSection::ProtocolTokens,
    StandardSection::Heartbeat,
    StandardSection::OperationalGuidelines,
    StandardSection::CitationStandards,
    StandardSection::GenerationModels,
    StandardSection::SkillInstructions,
    StandardSection::SpecialActions,
    StandardSection::Guidelines,
    StandardSection::ThinkingGuidance,
    StandardSection::SkillMode,
    StandardSection::CustomInstructions,
];

/// What the minimal mode keeps: identity, tools, response format and language.
const MINIMAL_KEEPS: &[StandardSection] = &[
    StandardSection::Soul,
    StandardSection::AgentRole,
    StandardSection::Role,
    StandardSection::ToolCatalog,
    StandardSection::ToolGuidance,
    StandardSection::ResponseFormat,
    StandardSection::Language,
    StandardSection::ResponseLanguage,
];

/// What the scheduled mode keeps: identity, safety, time and custom instructions.
const SCHEDULED_KEEPS: &[StandardSection] = &[
    StandardSection::Soul,
    StandardSection::AgentRole,
    StandardSection::Role,
    StandardSection::Safety,
    StandardSection::TemporalContext,
    StandardSection::CustomInstructions,
];

/// What the basic path carries: configuration and the tool list.
const BASIC_KEEPS: &[StandardSection] = &[
    StandardSection::Soul,
    StandardSection::Role,
    StandardSection::Safety,
    StandardSection::ResponseFormat,
    StandardSection::Language,
    StandardSection::ToolCatalog,
    StandardSection::ToolGuidance,
    StandardSection::CustomInstructions,
    StandardSection::ResponseLanguage,
];

impl StandardSection {
    /// Every kind, in declaration order.
    pub const ALL: &'static [StandardSection] = &[
        StandardSection::Soul,
        StandardSection::AgentRole,
        StandardSection::Role,
        StandardSection::Safety,
        StandardSection::ResponseFormat,
        StandardSection::Language,
        StandardSection::Guidelines,
        StandardSection::CitationStandards,
        StandardSection::WorkspaceProfile,
        StandardSection::Environment,
        StandardSection::RuntimeCapabilities,
        StandardSection::RuntimeInfo,
        StandardSection::TemporalContext,
        StandardSection::ToolCatalog,
        StandardSection::ToolGuidance,
        StandardSection::ProtocolTokens,
        StandardSection::Heartbeat,
        StandardSection::OperationalGuidelines,
        StandardSection::GenerationModels,
        StandardSection::SpecialActions,
        StandardSection::BootstrapFiles,
        StandardSection::CustomInstructions,
        StandardSection::WorkspaceHints,
        StandardSection::SkillInstructions,
        StandardSection::SkillMode,
        StandardSection::ThinkingGuidance,
        StandardSection::Goal,
        StandardSection::OperationalTemplate,
        StandardSection::InboundContext,
        StandardSection::VoiceMode,
        StandardSection::ResponseLanguage,
        StandardSection::ConversationHistory,
        StandardSection::SessionContext,
        StandardSection::Memory,
    ];

    /// Its name in snake case, as configuration writes it (`operational_guidelines`).
    pub fn name(self) -> String {
        let mut out = String::new();
        for (i, c) in format!("{self:?}").chars().enumerate() {
            if c.is_ascii_uppercase() {
                if i > 0 {
                    out.push('_');
                }
                out.push(c.to_ascii_lowercase());
            } else {
                out.push(c);
            }
        }
        out
    }

    /// Who produces it.
    pub const fn owner(self) -> Owner {
        use StandardSection as S;
        match self {
            S::Soul
            | S::AgentRole
            | S::Role
            | S::Safety
            | S::ResponseFormat
            | S::Language
            | S::Guidelines
            | S::CitationStandards => Owner::Identity,
            S::WorkspaceProfile
            | S::Environment
            | S::RuntimeCapabilities
            | S::RuntimeInfo
            | S::TemporalContext
            | S::ToolCatalog
            | S::ToolGuidance
            | S::ProtocolTokens
            | S::Heartbeat
            | S::OperationalGuidelines
            | S::GenerationModels
            | S::SpecialActions
            | S::BootstrapFiles
            | S::CustomInstructions
            | S::WorkspaceHints => Owner::Runtime(RuntimeLayer::Shared),
            S::SkillInstructions
            | S::SkillMode
            | S::ThinkingGuidance
            | S::Goal
            | S::OperationalTemplate
            | S::InboundContext
            | S::VoiceMode
            | S::ResponseLanguage => Owner::Runtime(RuntimeLayer::Delegated),
            S::ConversationHistory | S::SessionContext => {
                Owner::Runtime(RuntimeLayer::WorkingMemory)
            }
            S::Memory => Owner::Runtime(RuntimeLayer::LongTermMemory),
        }
    }

    /// Its runtime layer, or `None` for identity content.
    pub const fn layer(self) -> Option<RuntimeLayer> {
        match self.owner() {
            Owner::Identity => None,
            Owner::Runtime(l) => Some(l),
        }
    }

    /// Whether it is stable (cached and in the stable prefix) or dynamic, as in the seeds.
    pub const fn stability(self) -> Stability {
        use StandardSection as S;
        match self {
            S::TemporalContext
            | S::InboundContext
            | S::VoiceMode
            | S::BootstrapFiles
            | S::WorkspaceHints
            | S::Memory
            | S::SessionContext
            | S::ConversationHistory => Stability::Dynamic,
            _ => Stability::Stable,
        }
    }

    /// The position in the seed pipeline (a smaller number came first).
    const fn seed_priority(self) -> u32 {
        use StandardSection as S;
        match self {
            S::Soul => 50,
            S::AgentRole => 55,
            S::WorkspaceProfile => 75,
            S::Role => 100,
            S::Environment => 300,
            S::RuntimeCapabilities => 400,
            S::ToolCatalog => 500,
            S::ToolGuidance => 550,
            S::Safety => 600,
            S::Goal => 650,
            S::ProtocolTokens => 700,
            S::Heartbeat => 710,
            S::OperationalTemplate => 750,
            S::OperationalGuidelines => 800,
            S::CitationStandards => 900,
            S::GenerationModels => 1000,
            S::SkillInstructions => 1050,
            S::SpecialActions => 1100,
            S::ResponseFormat => 1200,
            S::Guidelines => 1300,
            S::ThinkingGuidance => 1350,
            S::SkillMode => 1400,
            S::CustomInstructions => 1500,
            S::Language | S::ResponseLanguage => 1600,
            S::InboundContext => 1700,
            S::VoiceMode => 1710,
            S::TemporalContext | S::RuntimeInfo => 1720,
            S::BootstrapFiles => 1730,
            S::WorkspaceHints => 1735,
            S::Memory => 1740,
            S::SessionContext | S::ConversationHistory => 1750,
        }
    }

    /// Priority within its layer: `2000 - seed priority` (larger is more important).
    pub const fn priority(self) -> u32 {
        2000 - self.seed_priority()
    }

    /// Its phase in the canonical phase order.
    pub const fn phase(self) -> Phase {
        use StandardSection as S;
        match self {
            S::ToolCatalog | S::ToolGuidance => Phase::Tools,
            S::SkillInstructions | S::SkillMode | S::ThinkingGuidance | S::Goal => Phase::Task,
            S::OperationalTemplate => Phase::Task,
            S::InboundContext => Phase::User,
            S::ConversationHistory => Phase::History,
            S::SessionContext
            | S::Memory
            | S::BootstrapFiles
            | S::WorkspaceProfile
            | S::WorkspaceHints => Phase::Memory,
            _ => Phase::Constraint,
        }
    }

    /// Whether it takes part in `mode`.
    pub fn in_mode(self, mode: PromptMode) -> bool {
        // The active goal is never compressed or removed (the Prompts System's rule).
        if self == StandardSection::Goal {
            return true;
        }
        match mode {
            PromptMode::Full => true,
            PromptMode::Compact => !COMPACT_EXCLUDES.contains(&self),
            PromptMode::Minimal => MINIMAL_KEEPS.contains(&self),
            PromptMode::Scheduled => SCHEDULED_KEEPS.contains(&self),
        }
    }

    /// Whether it takes part in `path`.
    pub fn on_path(self, path: AssemblyPath) -> bool {
        if self == StandardSection::Goal {
            return true;
        }
        match path {
            AssemblyPath::Basic => BASIC_KEEPS.contains(&self),
            AssemblyPath::Cached => self.stability() == Stability::Stable,
            AssemblyPath::Hydration | AssemblyPath::Soul | AssemblyPath::Context => true,
        }
    }

    /// The modes it takes part in.
    pub fn modes(self) -> ModeSet {
        PromptMode::ALL
            .iter()
            .filter(|m| self.in_mode(**m))
            .fold(ModeSet::EMPTY, |s, m| s.with(*m))
    }

    /// The paths it takes part in.
    pub fn paths(self) -> PathSet {
        AssemblyPath::ALL
            .iter()
            .filter(|p| self.on_path(**p))
            .fold(PathSet::EMPTY, |s, p| s.with(*p))
    }

    /// A contributor meta filled from this table (priority, phase, stability, modes, paths);
    /// everything else is the default. Built-in contributors start from it.
    pub fn meta(self) -> ContributorMeta {
        ContributorMeta {
            priority: self.priority(),
            phase: self.phase(),
            stability: self.stability(),
            modes: self.modes(),
            paths: self.paths(),
            ..ContributorMeta::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Verifies ADR-0011: compact leaves out exactly the fourteen heavy kinds of the seeds
    /// (runtime context covers both time and runtime info here).
    #[test]
    fn compact_leaves_out_the_heavy_sections() {
        let out: Vec<_> = StandardSection::ALL
            .iter()
            .filter(|s| !s.in_mode(PromptMode::Compact))
            .collect();
        assert_eq!(out.len(), 15);
        for s in [
            StandardSection::Environment,
            StandardSection::CustomInstructions,
            StandardSection::SkillInstructions,
            StandardSection::ThinkingGuidance,
        ] {
            assert!(!s.in_mode(PromptMode::Compact), "{s:?}");
        }
        for s in [
            StandardSection::ToolCatalog,
            StandardSection::Memory,
            StandardSection::Goal,
            StandardSection::BootstrapFiles,
        ] {
            assert!(s.in_mode(PromptMode::Compact), "{s:?}");
        }
    }

    #[test]
    fn minimal_and_scheduled_keep_what_the_seeds_say() {
        let runtime_in = |mode| {
            StandardSection::ALL
                .iter()
                .filter(|s| s.layer().is_some() && s.in_mode(mode))
                .copied()
                .collect::<Vec<_>>()
        };
        assert_eq!(
            runtime_in(PromptMode::Minimal),
            [
                StandardSection::ToolCatalog,
                StandardSection::ToolGuidance,
                StandardSection::Goal,
                StandardSection::ResponseLanguage
            ]
        );
        assert_eq!(
            runtime_in(PromptMode::Scheduled),
            [
                StandardSection::TemporalContext,
                StandardSection::CustomInstructions,
                StandardSection::Goal
            ]
        );
        // Full mode has everything.
        assert!(StandardSection::ALL
            .iter()
            .all(|s| s.in_mode(PromptMode::Full)));
    }

    #[test]
    fn paths() {
        assert!(StandardSection::ToolCatalog.on_path(AssemblyPath::Basic));
        assert!(!StandardSection::Memory.on_path(AssemblyPath::Basic));
        assert!(!StandardSection::TemporalContext.on_path(AssemblyPath::Cached));
        assert!(StandardSection::Environment.on_path(AssemblyPath::Cached));
        // Goals are never compressed or removed: every mode, every path.
        assert!(PromptMode::ALL
            .iter()
            .all(|m| StandardSection::Goal.in_mode(*m)));
        assert!(AssemblyPath::ALL
            .iter()
            .all(|p| StandardSection::Goal.on_path(*p)));
        for s in StandardSection::ALL {
            assert!(s.on_path(AssemblyPath::Soul));
            let m = s.meta();
            assert_eq!(
                m.modes.contains(PromptMode::Compact),
                s.in_mode(PromptMode::Compact)
            );
            assert_eq!(
                m.paths.contains(AssemblyPath::Basic),
                s.on_path(AssemblyPath::Basic)
            );
        }
    }

    #[test]
    fn priorities_follow_the_seed_order() {
        assert!(StandardSection::ToolCatalog.priority() > StandardSection::Memory.priority());
        assert_eq!(StandardSection::Environment.priority(), 1700);
        let identity = StandardSection::ALL
            .iter()
            .filter(|s| s.owner() == Owner::Identity)
            .count();
        assert_eq!(identity, 8);
    }
}
