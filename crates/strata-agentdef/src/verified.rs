//! `VerifiedAgent`: layers 1-2 as they exist in memory, only after verification (ADR-0004).
//!
//! API boundary: nothing outside this crate can construct a `VerifiedAgent`. Its only
//! constructor is `pub(crate)` and is called by [`crate::Loader`] after the envelope's
//! signatures, payload type, validity window, referenced-file digests and rollback guard have
//! all been checked. It has no `&mut` accessor, no setter and no interior mutability (I5, I7).

use std::fmt;
use std::sync::Arc;

use strata_core::format::{write_trusted, SectionHeader};
use strata_core::{Budget, ContentHash, IdentityLayers, OperationalMode, PromptMode};

use crate::definition::{ModeTemplates, Parsed};
use crate::error::AgentDefError;
use crate::keys::KeyId;
use crate::loader::{check_window, now_unix, Expiry};
use crate::time::format_rfc3339;
use crate::trust::TrustStore;

/// What the loader knew about time when it sealed an agent: the policy, and the validity
/// windows of the keys that signed it (ADR-0017).
#[derive(Debug, Clone)]
pub(crate) struct Validity {
    pub(crate) expiry: Expiry,
    pub(crate) signer_windows: Vec<(KeyId, Option<i64>, Option<i64>)>,
    pub(crate) threshold: usize,
    pub(crate) trust_digest: String,
}

struct Inner {
    agent_id: Arc<str>,
    name: String,
    version: u64,
    not_before: Option<i64>,
    not_after: Option<i64>,
    identity: IdentityLayers,
    templates: ModeTemplates,
    budget: Budget,
    default_mode: OperationalMode,
    default_prompt_mode: PromptMode,
    signers: Vec<KeyId>,
    identity_text: Arc<str>,
    digest: ContentHash,
    payload_sha256: String,
    validity: Validity,
}

/// A verified agent definition: the sealed layers 1-2 and what the definition says about them.
/// Cloning shares the same immutable data.
#[derive(Clone)]
pub struct VerifiedAgent {
    inner: Arc<Inner>,
}

impl fmt::Debug for VerifiedAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifiedAgent")
            .field("agent_id", &self.inner.agent_id)
            .field("version", &self.inner.version)
            .field("digest", &self.inner.digest)
            .field("signers", &self.inner.signers)
            .finish_non_exhaustive()
    }
}

/// The canonical rendering of layers 1-2: every identity section in order, in the wire format.
/// The identity digest is BLAKE3 over exactly these bytes (ADR-0010, I1).
pub fn render_identity(identity: &IdentityLayers) -> String {
    let mut out = String::new();
    for s in identity.sections() {
        let header = SectionHeader {
            layer: s.layer().into(),
            id: s.id().as_str(),
            key: s.key().map(|k| k.as_str()),
            ..SectionHeader::new(s.layer().into(), s.id().as_str())
        };
        write_trusted(&mut out, &header, s.content().as_str());
    }
    out
}

impl VerifiedAgent {
    /// Seal verified content. Only the loader calls this, after every check has passed.
    pub(crate) fn seal(
        parsed: Parsed,
        signers: Vec<KeyId>,
        payload_sha256: String,
        validity: Validity,
    ) -> VerifiedAgent {
        let identity_text: Arc<str> = Arc::from(render_identity(&parsed.identity));
        let digest = ContentHash::of(&identity_text);
        let d = parsed.def;
        VerifiedAgent {
            inner: Arc::new(Inner {
                agent_id: Arc::from(d.id.as_str()),
                name: d.name,
                version: d.version,
                not_before: parsed.not_before,
                not_after: parsed.not_after,
                identity: parsed.identity,
                templates: parsed.templates,
                budget: d.budget,
                default_mode: d.default_mode,
                default_prompt_mode: d.default_prompt_mode,
                signers,
                identity_text,
                digest,
                payload_sha256,
                validity,
            }),
        }
    }

    /// The time policy this agent was loaded under.
    pub fn loaded_under(&self) -> Expiry {
        self.inner.validity.expiry
    }

    /// `sha256:<hex>` of the trust store it was verified against (ADR-0017).
    pub fn trust_digest(&self) -> &str {
        &self.inner.validity.trust_digest
    }

    /// The last instant (Unix seconds) at which the agent is valid: the earlier of the
    /// definition's `not_after` and the moment fewer than the threshold of its signing keys
    /// remain within their windows. `None` when nothing ever ends it.
    pub fn valid_until(&self) -> Option<i64> {
        let v = &self.inner.validity;
        // Key ends, latest first (no end sorts first): the threshold-th is when too few remain.
        let mut ends: Vec<Option<i64>> = v.signer_windows.iter().map(|w| w.2).collect();
        ends.sort_by(|a, b| match (a, b) {
            (None, None) => std::cmp::Ordering::Equal,
            (None, Some(_)) => std::cmp::Ordering::Less,
            (Some(_), None) => std::cmp::Ordering::Greater,
            (Some(x), Some(y)) => y.cmp(x),
        });
        let keys_end = ends.get(v.threshold.saturating_sub(1)).copied().flatten();
        match (self.inner.not_after, keys_end) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Check, strictly and whatever policy it was loaded under, that the agent is valid at
    /// `unix_secs`: the definition's window contains it and at least the threshold of the keys
    /// that signed it are within their windows. Errors are the loader's (`expired`,
    /// `not_yet_valid`, `key_not_valid`).
    pub fn check_valid_at(&self, unix_secs: i64) -> Result<(), AgentDefError> {
        check_window(
            &self.inner.agent_id,
            self.inner.not_before,
            self.inner.not_after,
            unix_secs,
        )?;
        self.check_keys_at(unix_secs)
    }

    fn check_keys_at(&self, t: i64) -> Result<(), AgentDefError> {
        let v = &self.inner.validity;
        let within = |nb: &Option<i64>, na: &Option<i64>| {
            nb.is_none_or(|nb| t >= nb) && na.is_none_or(|na| t <= na)
        };
        let valid = v
            .signer_windows
            .iter()
            .filter(|(_, nb, na)| within(nb, na))
            .count();
        if valid >= v.threshold {
            return Ok(());
        }
        let (keyid, window) = v
            .signer_windows
            .iter()
            .find(|(_, nb, na)| !within(nb, na))
            .map(|(id, nb, na)| {
                (
                    id.to_string(),
                    format!(
                        "{} to {}",
                        nb.map_or("any time".into(), format_rfc3339),
                        na.map_or("no end".into(), format_rfc3339)
                    ),
                )
            })
            .unwrap_or_default();
        Err(AgentDefError::KeyNotValid { keyid, window })
    }

    /// Check the agent's signers against `trust` as it is now (ADR-0034): at least `trust`'s
    /// threshold of the keys that signed the agent must still be trusted, not revoked and within
    /// their windows at `unix_secs`. A running service calls this whenever its trust store
    /// changes, so that revoking a key stops the agents it signed. Errors: `revoked_key` when a
    /// signer was revoked and too few remain, else `threshold_not_met`.
    pub fn check_signers(&self, trust: &TrustStore, unix_secs: i64) -> Result<(), AgentDefError> {
        let mut valid = 0;
        let mut revoked = None;
        for id in &self.inner.signers {
            if let Some(reason) = trust.revoked(id.as_str()) {
                revoked.get_or_insert((id.to_string(), reason.to_owned()));
                continue;
            }
            if trust
                .key(id.as_str())
                .is_some_and(|k| k.valid_at(unix_secs))
            {
                valid += 1;
            }
        }
        let threshold = trust.threshold().max(1);
        if valid >= threshold {
            return Ok(());
        }
        Err(match revoked {
            Some((keyid, reason)) => AgentDefError::RevokedKey { keyid, reason },
            None => AgentDefError::ThresholdNotMet { valid, threshold },
        })
    }

    /// Check the agent against the clock under the policy it was loaded with, as every use of
    /// an agent must (ADR-0017): [`Expiry::Enforce`] checks now; the dangerous policies are
    /// logged at `warn` on every call, [`Expiry::TimeTravelDangerously`] checks at its instant
    /// and [`Expiry::IgnoreDangerously`] skips the definition's window but not the keys'.
    pub fn check_current(&self) -> Result<(), AgentDefError> {
        let policy = self.inner.validity.expiry;
        policy.warn_if_weakened("using an agent");
        let at = policy.instant(now_unix());
        match policy {
            Expiry::IgnoreDangerously => self.check_keys_at(at),
            _ => self.check_valid_at(at),
        }
    }

    /// The agent id.
    pub fn agent_id(&self) -> &str {
        &self.inner.agent_id
    }
    /// The agent id, shared.
    pub fn agent_id_arc(&self) -> Arc<str> {
        self.inner.agent_id.clone()
    }
    /// Display name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }
    /// Version.
    pub fn version(&self) -> u64 {
        self.inner.version
    }
    /// Validity window, Unix seconds.
    pub fn validity(&self) -> (Option<i64>, Option<i64>) {
        (self.inner.not_before, self.inner.not_after)
    }
    /// Layers 1-2 and the tool allowlist.
    pub fn identity(&self) -> &IdentityLayers {
        &self.inner.identity
    }
    /// The rendered layers 1-2: every assembled context starts with exactly these bytes (I1).
    pub fn identity_text(&self) -> &str {
        &self.inner.identity_text
    }
    /// BLAKE3 of [`VerifiedAgent::identity_text`].
    pub fn identity_digest(&self) -> ContentHash {
        self.inner.digest
    }
    /// Operational-mode templates.
    pub fn templates(&self) -> &ModeTemplates {
        &self.inner.templates
    }
    /// Default budget.
    pub fn budget(&self) -> &Budget {
        &self.inner.budget
    }
    /// Default operational mode.
    pub fn default_mode(&self) -> OperationalMode {
        self.inner.default_mode
    }
    /// Default prompt mode.
    pub fn default_prompt_mode(&self) -> PromptMode {
        self.inner.default_prompt_mode
    }
    /// The trusted keys whose signatures verified (distinct, sorted).
    pub fn signers(&self) -> &[KeyId] {
        &self.inner.signers
    }
    /// SHA-256 (hex) of the signed payload.
    pub fn payload_sha256(&self) -> &str {
        &self.inner.payload_sha256
    }
}
