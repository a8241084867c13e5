//! Signing receipts with the runtime key, and assembling with a receipt (ADR-0021).

use std::sync::OnceLock;

use strata_agentdef::envelope::Envelope;
use strata_agentdef::{KeyPair, VerifiedAgent};

#[cfg(doc)]
use super::build::statement;
use super::build::statement_bytes;
use super::statement::{Sent, Statement};
use super::{body_bytes, ReceiptError, PAYLOAD_TYPE};
use crate::assemble::Assembler;
use crate::output::AssembledContext;
use crate::provider::{RequestError, RequestParams};
use crate::request::AssemblyRequest;

/// A signed receipt: the DSSE envelope over a statement's canonical bytes, and the statement.
///
/// A receipt signed from an assembly ([`SignedReceipt::of_assembly`]) is written straight to
/// its bytes; the [`Statement`] is parsed from them only when [`SignedReceipt::statement`] is
/// first called, so a runtime that only stores or forwards receipts never builds it.
#[derive(Debug, Clone)]
pub struct SignedReceipt {
    envelope: Envelope,
    statement: OnceLock<Statement>,
}

impl SignedReceipt {
    /// Sign `statement` with the runtime key (ADR-0021). The statement must name this key's id.
    pub fn sign(statement: Statement, key: &KeyPair) -> Result<SignedReceipt, ReceiptError> {
        let id = key.key_id().to_string();
        if statement.predicate.runtime_key_id != id {
            return Err(ReceiptError::KeyMismatch {
                recorded: statement.predicate.runtime_key_id.clone(),
                signer: id,
            });
        }
        let mut envelope = Envelope::with_type(PAYLOAD_TYPE, statement.canonical_bytes());
        envelope.sign(key);
        Ok(SignedReceipt {
            envelope,
            statement: OnceLock::from(statement),
        })
    }

    /// Build and sign the receipt of one assembly with the runtime key (ADR-0021): the same
    /// bytes as signing [`statement`]`(agent, ctx, sent, key id)`, written straight from the
    /// report ([`statement_bytes`]). `sent` must be what the runtime sends for `ctx`.
    pub fn of_assembly(
        agent: &VerifiedAgent,
        ctx: &AssembledContext,
        sent: Sent<'_>,
        key: &KeyPair,
    ) -> SignedReceipt {
        let bytes = statement_bytes(agent, ctx, sent, key.key_id().as_str());
        let mut envelope = Envelope::with_type(PAYLOAD_TYPE, bytes);
        envelope.sign(key);
        SignedReceipt {
            envelope,
            statement: OnceLock::new(),
        }
    }

    /// The statement, parsed from the signed bytes the first time it is asked for.
    pub fn statement(&self) -> &Statement {
        self.statement.get_or_init(|| {
            // The payload is private and was written from these very types by this module;
            // a property test reads back the statement of random assemblies.
            serde_json::from_slice(&self.envelope.payload)
                .expect("a receipt's own statement bytes parse as a statement")
        })
    }

    /// The DSSE envelope (payload type [`PAYLOAD_TYPE`]); its payload is the statement's
    /// canonical bytes.
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    /// The receipt file's text: the DSSE envelope as JSON.
    pub fn to_json(&self) -> String {
        self.envelope.to_json()
    }
}

/// An assembly with what the runtime sends and its signed receipt.
#[derive(Debug, Clone)]
pub struct Receipted {
    /// The assembly.
    pub context: AssembledContext,
    /// The exact bytes to send: the request body ([`body_bytes`]) or the plain text.
    pub sent: Vec<u8>,
    /// The receipt naming `sent`.
    pub receipt: SignedReceipt,
}

/// Why an assembly with a receipt failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiptedError {
    /// The assembly failed.
    #[error(transparent)]
    Assemble(#[from] crate::assemble::AssembleError),
    /// The request body could not be written.
    #[error(transparent)]
    Request(#[from] RequestError),
}

impl Assembler {
    /// Assemble, write what the runtime sends, and sign a receipt naming it with the runtime
    /// key (ADR-0021). `params` gives the model and other body parameters of a provider-native
    /// request and is ignored for the plain-text format.
    pub fn assemble_with_receipt(
        &self,
        agent: &VerifiedAgent,
        req: &AssemblyRequest,
        params: &RequestParams,
        runtime_key: &KeyPair,
    ) -> Result<Receipted, ReceiptedError> {
        let context = self.assemble(agent, req)?;
        let sent = match &context.inner.conversation {
            Some(c) => body_bytes(&context.request_body(c.provider, params)?),
            None => context.inner.text.as_bytes().to_vec(),
        };
        let s = match &context.inner.conversation {
            Some(_) => Sent::Body(&sent),
            None => Sent::Text(&context.inner.text),
        };
        let receipt = SignedReceipt::of_assembly(agent, &context, s, runtime_key);
        tracing::debug!(
            agent = agent.agent_id(),
            statement_bytes = receipt.envelope().payload.len(),
            "assembly receipt signed"
        );
        Ok(Receipted {
            context,
            sent,
            receipt,
        })
    }
}
