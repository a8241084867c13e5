//! The loader: verify, then read (ADR-0010). The only producer of [`VerifiedAgent`].
//!
//! Order of checks: strict envelope parse with size limits; signatures over DSSE's
//! pre-authentication encoding with `verify_strict`, counting distinct trusted, unrevoked,
//! currently valid keys against the trust store's threshold, then the payload type (both in
//! [`envelope::verify`], which receipts share); only then the payload is parsed
//! (from the exact verified bytes) and referenced files are checked against their digests;
//! validity window; rollback guard. Any failure is a rejection (fail closed).

use std::path::Path;

use sha2::{Digest as _, Sha256};

use crate::definition::parse_payload;
use crate::envelope::{
    self, Envelope, KeyWindows, Policy, Threshold, MAX_ENVELOPE_BYTES, PAYLOAD_TYPE,
};
use crate::error::AgentDefError;
use crate::rollback::RollbackGuard;
use crate::time::format_rfc3339;
use crate::trust::TrustStore;
use crate::verified::VerifiedAgent;

/// The time policy: which instant validity windows (of the definition and of the signing keys)
/// are checked at, or whether the definition's window is checked at all (ADR-0017).
///
/// Anything but [`Expiry::Enforce`] weakens security, hence the loud names; there is no boolean
/// or bare-timestamp form of these switches, every load under them is logged at `warn`, and the
/// [`VerifiedAgent`] remembers the policy it was loaded under, so that later checks
/// ([`VerifiedAgent::check_current`]) apply the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Expiry {
    /// Check the definition's and the keys' windows against the system clock (the default).
    #[default]
    Enforce,
    /// Check every validity window at this instant (Unix seconds) instead of the clock: an
    /// expired definition signed by an expired key is accepted if both were valid then. For
    /// audits of old definitions and for tests with fixed fixtures; never in a runtime that
    /// serves users.
    TimeTravelDangerously(i64),
    /// Accept expired and not-yet-valid definitions (the keys' windows are still checked
    /// against the clock). For forensics on old definitions only; never in a runtime that serves
    /// users.
    IgnoreDangerously,
}

impl Expiry {
    /// The instant validity is checked at under this policy, given the clock's `now`.
    pub fn instant(self, now: i64) -> i64 {
        match self {
            Expiry::TimeTravelDangerously(at) => at,
            Expiry::Enforce | Expiry::IgnoreDangerously => now,
        }
    }

    /// Log the policy at `warn` when it is not [`Expiry::Enforce`]; `what` names the operation.
    /// The events have their own target, `strata_agentdef::time_policy`, so that a filter
    /// quietening the loader's routine messages does not hide them.
    pub fn warn_if_weakened(self, what: &str) {
        if let Some(text) = self.weakened(what) {
            tracing::warn!(target: "strata_agentdef::time_policy", "{text}");
        }
    }

    /// Log the policy at `info` when it is not [`Expiry::Enforce`]: for an audit of the past,
    /// which asked for it (see [`Loader::for_audit`]).
    fn note_if_weakened(self, what: &str) {
        if let Some(text) = self.weakened(what) {
            tracing::info!(target: "strata_agentdef::time_policy", "{text}");
        }
    }

    /// What a weakened policy lets through, in a sentence; `None` under [`Expiry::Enforce`].
    fn weakened(self, what: &str) -> Option<String> {
        match self {
            Expiry::Enforce => None,
            Expiry::TimeTravelDangerously(at) => Some(format!(
                "{what}: time travel (--time-travel-dangerously): validity is checked at {} \
                 instead of now ({}), so an expired definition or key may be accepted",
                format_rfc3339(at),
                format_rfc3339(now_unix())
            )),
            Expiry::IgnoreDangerously => Some(format!(
                "{what}: definition expiry ignored (--ignore-expiry-dangerously): expired and \
                 not-yet-valid definitions are accepted"
            )),
        }
    }
}

/// The system clock in Unix seconds.
pub fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Loads signed agent definitions against a trust store and a rollback guard.
#[derive(Debug)]
pub struct Loader<'a> {
    trust: &'a TrustStore,
    guard: &'a RollbackGuard,
    expiry: Expiry,
    audit: bool,
}

impl<'a> Loader<'a> {
    /// A loader that enforces expiry at the current time.
    pub fn new(trust: &'a TrustStore, guard: &'a RollbackGuard) -> Loader<'a> {
        Loader {
            trust,
            guard,
            expiry: Expiry::Enforce,
            audit: false,
        }
    }

    /// Set the time policy.
    pub fn expiry(mut self, expiry: Expiry) -> Loader<'a> {
        self.expiry = expiry;
        self
    }

    /// Load for an audit of the past, such as comparing a definition with what an assembly
    /// receipt records: the agent is given to no model, and the weakened time policy such an
    /// audit needs (the definition may have expired since) is logged at `info` instead of
    /// `warn`. The agent keeps its policy, so any later use of it warns as usual.
    pub fn for_audit(mut self) -> Loader<'a> {
        self.audit = true;
        self
    }

    /// Load a signed definition file. Referenced files come from the signed payload, which
    /// embeds them (ADR-0035); nothing next to the file is read.
    pub fn load_file(&self, path: &Path) -> Result<VerifiedAgent, AgentDefError> {
        let bytes = crate::read_limited(path, MAX_ENVELOPE_BYTES as u64, "envelope")?;
        self.load_bytes(&bytes, None)
    }

    /// Load a signed definition from bytes. `_base` is ignored: referenced files come from the
    /// signed payload only, never from disk (ADR-0035); a payload that references a file it does
    /// not embed is refused.
    pub fn load_bytes(
        &self,
        bytes: &[u8],
        _base: Option<&Path>,
    ) -> Result<VerifiedAgent, AgentDefError> {
        let result = self.load_inner(bytes, None);
        match &result {
            Ok(a) => {
                tracing::info!(agent = a.agent_id(), version = a.version(), digest = %a.identity_digest(), "agent definition verified")
            }
            Err(e) => tracing::warn!(cause = e.cause(), error = %e, "agent definition refused"),
        }
        result
    }

    fn load_inner(
        &self,
        bytes: &[u8],
        base: Option<&Path>,
    ) -> Result<VerifiedAgent, AgentDefError> {
        let env = Envelope::parse(bytes)?;
        if self.audit {
            self.expiry
                .note_if_weakened("loading an agent definition for an audit");
        } else {
            self.expiry.warn_if_weakened("loading an agent definition");
        }
        let now = self.expiry.instant(now_unix());
        let verified = envelope::verify(
            &env,
            self.trust,
            &Policy {
                payload_type: PAYLOAD_TYPE,
                threshold: Threshold::TrustStore,
                key_windows: KeyWindows::At(now),
            },
        )?;
        // Verify, then read: the payload is parsed only now, from the exact verified bytes.
        let parsed = parse_payload(verified.payload(), base)?;
        let signers = verified.into_signers();
        if self.expiry != Expiry::IgnoreDangerously {
            check_window(&parsed.def.id, parsed.not_before, parsed.not_after, now)?;
        }
        let sha: String = Sha256::digest(&env.payload)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.guard
            .check_and_record(&parsed.def.id, parsed.def.version, &sha)?;
        let signer_windows = signers
            .iter()
            .filter_map(|id| self.trust.key(id.as_str()))
            .map(|k| (k.id.clone(), k.not_before, k.not_after))
            .collect();
        Ok(VerifiedAgent::seal(
            parsed,
            signers,
            sha,
            crate::verified::Validity {
                expiry: self.expiry,
                signer_windows,
                threshold: self.trust.threshold(),
                trust_digest: self.trust.digest(),
            },
        ))
    }
}

/// Refuse `now` outside the definition's window.
pub(crate) fn check_window(
    agent: &str,
    not_before: Option<i64>,
    not_after: Option<i64>,
    now: i64,
) -> Result<(), AgentDefError> {
    if let Some(nb) = not_before.filter(|nb| now < *nb) {
        return Err(AgentDefError::NotYetValid {
            agent: agent.to_owned(),
            not_before: format_rfc3339(nb),
        });
    }
    if let Some(na) = not_after.filter(|na| now > *na) {
        return Err(AgentDefError::Expired {
            agent: agent.to_owned(),
            not_after: format_rfc3339(na),
        });
    }
    Ok(())
}
