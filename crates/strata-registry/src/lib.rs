//! `strata-registry`: contributors of runtime sections, the section cache, modes, assembly
//! paths, tiers, operational-mode templates and the goal manager (ADR-0011).
#![forbid(unsafe_code)]

pub mod contributor;

pub use contributor::{ContributionContext, Contributor, ContributorError, ContributorMeta};
