//! The assembled context and the request body placed for a provider (ADR-0013, ADR-0015).
//!
//! API boundary: nothing here returns a system-role message or block built from the plain-text
//! assembly, whose text holds layers 3-6; the only provider format is
//! [`AssembledContext::request_body`], whose system channel is the signed text alone (I8,
//! ADR-0032).

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use strata_core::{ContentHash, ToolName};

use crate::provider::{Conversation, Provider, RequestError, RequestParams};
use crate::report::Report;

/// The result of one assembly. Read-only: it can only be produced by the assembler, so what a
/// runtime sends is what the assembler checked (I1, I8).
///
/// A shared handle: cloning it (to keep it, to hand it to a [`crate::receipt::ReceiptSigner`], or when
/// the assembler answers a repeated request from its last assembly) copies a pointer, not the
/// text or the report, whatever the number of sections (ADR-0037).
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub struct AssembledContext {
    pub(crate) inner: Arc<Contents>,
}

/// What an [`AssembledContext`] holds.
#[derive(Debug, Serialize)]
pub(crate) struct Contents {
    /// Distinct for every assembly made in this process ([`next_serial`]): a receipt signer
    /// recognises the same result again by it without holding a reference (ADR-0021).
    #[serde(skip)]
    pub(crate) serial: u64,
    pub(crate) text: String,
    pub(crate) identity_digest: ContentHash,
    pub(crate) tools: Vec<ToolName>,
    pub(crate) report: Report,
    pub(crate) conversation: Option<Conversation>,
}

/// A number no other assembly of this process has had.
pub(crate) fn next_serial() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl AssembledContext {
    /// Wrap what an assembly produced.
    pub(crate) fn new(contents: Contents) -> AssembledContext {
        AssembledContext {
            inner: Arc::new(contents),
        }
    }

    /// Whether `self` and `other` are the same assembly (one result shared), not two equal ones.
    pub fn ptr_eq(&self, other: &AssembledContext) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The plain text: rendered layers 1-2, byte for byte, then fenced layers 3-6. For a
    /// provider request, the system channel alone (the signed text). The plain text is not a
    /// system prompt: it holds runtime content, which a provider request places in
    /// user-position messages (ADR-0032).
    pub fn text(&self) -> &str {
        &self.inner.text
    }

    /// BLAKE3 of the rendered layers 1-2.
    pub fn identity_digest(&self) -> ContentHash {
        self.inner.identity_digest
    }

    /// Tools the model may be offered.
    pub fn tools(&self) -> &[ToolName] {
        &self.inner.tools
    }

    /// What was kept, cut and dropped, and why.
    pub fn report(&self) -> &Report {
        &self.inner.report
    }

    /// The conversation placed into a provider's channels, when the request named a provider.
    pub fn conversation(&self) -> Option<&Conversation> {
        self.inner.conversation.as_ref()
    }

    /// Bytes of the stable prefix (layers 1-2 and the stable sections that lead the rest).
    pub fn stable_prefix(&self) -> &str {
        self.inner
            .text
            .get(..self.inner.report.stable_prefix.byte)
            .unwrap_or(&self.inner.text)
    }

    /// The complete request body for `provider` (which must be the provider the assembly was
    /// placed for), with the caller's model, output limit and other parameters (ADR-0015).
    pub fn request_body(
        &self,
        provider: Provider,
        params: &RequestParams,
    ) -> Result<Value, RequestError> {
        match &self.inner.conversation {
            Some(c) => c.body(provider, params),
            None => Err(RequestError::WrongProvider {
                placed: "the plain-text format".into(),
                asked: provider.name().into(),
            }),
        }
    }
}
