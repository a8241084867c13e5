//! Token budgets and context tiers.

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::layer::RuntimeLayer;

/// Soft per-layer budgets for layers 3-6, in tokens; `None` means no per-layer limit.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerBudgets {
    /// Layer 3.
    #[serde(default)]
    pub shared: Option<u32>,
    /// Layer 4.
    #[serde(default)]
    pub delegated: Option<u32>,
    /// Layer 5.
    #[serde(default)]
    pub working_memory: Option<u32>,
    /// Layer 6.
    #[serde(default)]
    pub long_term_memory: Option<u32>,
}

impl LayerBudgets {
    /// The budget of one layer.
    pub fn get(&self, layer: RuntimeLayer) -> Option<u32> {
        match layer {
            RuntimeLayer::Shared => self.shared,
            RuntimeLayer::Delegated => self.delegated,
            RuntimeLayer::WorkingMemory => self.working_memory,
            RuntimeLayer::LongTermMemory => self.long_term_memory,
        }
    }
}

/// The token budget of one assembly (ADR-0008).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Total tokens for prompt plus response reserve (default 16,384).
    #[serde(default = "Budget::default_total")]
    pub total_tokens: u32,
    /// Tokens kept free for the model's response.
    #[serde(default)]
    pub response_reserve: u32,
    /// Soft per-layer budgets.
    #[serde(default)]
    pub layers: LayerBudgets,
    /// Cap on any one runtime section; longer sections are cut with a marker.
    #[serde(default)]
    pub section_cap: Option<u32>,
    /// Cap on the rendered output in characters (Unicode scalar values).
    #[serde(default)]
    pub max_total_chars: Option<usize>,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            total_tokens: Self::default_total(),
            response_reserve: 0,
            layers: LayerBudgets::default(),
            section_cap: None,
            max_total_chars: None,
        }
    }
}

impl Budget {
    /// The seeds' default total: 16,384 tokens.
    pub const DEFAULT_TOTAL: u32 = 16_384;

    fn default_total() -> u32 {
        Self::DEFAULT_TOTAL
    }

    /// A budget of `total` tokens with no reserve and no per-layer limits.
    pub fn with_total(total: u32) -> Budget {
        Budget {
            total_tokens: total,
            ..Budget::default()
        }
    }

    /// Tokens available to the prompt: total less the response reserve.
    pub fn prompt_tokens(&self) -> u32 {
        self.total_tokens.saturating_sub(self.response_reserve)
    }

    /// Check that the parts add up.
    pub fn validate(&self) -> Result<(), CoreError> {
        if self.total_tokens == 0 {
            return Err(CoreError::InvalidBudget {
                reason: "total_tokens is 0; give the model's prompt budget in tokens".into(),
            });
        }
        if self.response_reserve >= self.total_tokens {
            return Err(CoreError::InvalidBudget {
                reason: format!(
                    "response_reserve ({}) must be smaller than total_tokens ({})",
                    self.response_reserve, self.total_tokens
                ),
            });
        }
        if self.section_cap == Some(0) {
            return Err(CoreError::InvalidBudget {
                reason: "section_cap is 0; remove it or give a positive number of tokens".into(),
            });
        }
        Ok(())
    }
}

/// A context tier, chosen from the model's context window (from the seeds' tier table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Tier {
    /// 2-4K windows; 200-token system prompt budget.
    T1,
    /// 8K; 500 tokens.
    T2,
    /// 16K; 1,000 tokens.
    T3,
    /// 32K; 1,500 tokens.
    T4,
    /// 64K-128K and more; 1,500 tokens.
    T5,
}

impl Tier {
    /// All tiers.
    pub const ALL: [Tier; 5] = [Tier::T1, Tier::T2, Tier::T3, Tier::T4, Tier::T5];

    /// The tier for a model context window in tokens: below 8K is tier 1, below 16K tier 2,
    /// below 32K tier 3, below 64K tier 4, otherwise tier 5.
    pub fn for_context_window(tokens: u32) -> Tier {
        match tokens {
            0..=8_191 => Tier::T1,
            8_192..=16_383 => Tier::T2,
            16_384..=32_767 => Tier::T3,
            32_768..=65_535 => Tier::T4,
            _ => Tier::T5,
        }
    }

    /// The tier's system-prompt budget for its templates, in tokens.
    pub const fn prompt_budget(self) -> u32 {
        match self {
            Tier::T1 => 200,
            Tier::T2 => 500,
            Tier::T3 => 1_000,
            Tier::T4 | Tier::T5 => 1_500,
        }
    }

    /// The tier's number, 1-5.
    pub const fn number(self) -> u8 {
        self as u8 + 1
    }

    /// The tier with this number.
    pub fn from_number(n: u8) -> Option<Tier> {
        Tier::ALL.get(usize::from(n).checked_sub(1)?).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_follow_the_table() {
        assert_eq!(Tier::for_context_window(2_048), Tier::T1);
        assert_eq!(Tier::for_context_window(4_096), Tier::T1);
        assert_eq!(Tier::for_context_window(8_192), Tier::T2);
        assert_eq!(Tier::for_context_window(16_384), Tier::T3);
        assert_eq!(Tier::for_context_window(32_768), Tier::T4);
        assert_eq!(Tier::for_context_window(65_536), Tier::T5);
        assert_eq!(Tier::for_context_window(131_072), Tier::T5);
        assert_eq!(Tier::T1.prompt_budget(), 200);
        assert_eq!(Tier::T3.prompt_budget(), 1_000);
        assert_eq!(Tier::from_number(5), Some(Tier::T5));
        assert_eq!(Tier::from_number(0), None);
    }

    #[test]
    fn budget_validation() {
        assert_eq!(Budget::default().total_tokens, 16_384);
        assert!(Budget::default().validate().is_ok());
        let b = Budget {
            response_reserve: 20_000,
            ..Budget::default()
        };
        assert!(b
            .validate()
            .unwrap_err()
            .to_string()
            .contains("response_reserve"));
        assert!(Budget::with_total(0).validate().is_err());
    }
}
