//! Receipts built and signed off the request path (ADR-0021).
//!
//! A receipt costs a statement, a SHA-256 of what is sent and an ed25519 signature: several
//! times a warm assembly. A runtime that cannot add that to each turn's latency sends the
//! request first and then hands the assembly to a [`ReceiptSigner`], whose worker thread builds
//! and signs the receipt exactly as [`Assembler::assemble_with_receipt`] would (same statement,
//! same bytes) and passes it, in submission order, to a sink (a receipt log, a queue).
//!
//! Nothing is dropped: the queue is bounded and [`ReceiptSigner::submit`] waits while it is
//! full, so a runtime that produces receipts faster than one core signs them is slowed to that
//! rate rather than losing any. [`ReceiptSigner::flush`] waits until every receipt submitted so
//! far has reached the sink; [`ReceiptSigner::finish`] flushes and stops the worker, and reports
//! the first failure of the sink. What is lost on a crash is the queue: at most its capacity of
//! receipts whose requests were already sent. A runtime that must never send a request without
//! a durable receipt uses [`Assembler::assemble_with_receipt`] and appends before sending.
//!
//! An exact repeat of the last assembly handed over (the assembler's kept result itself, as a
//! repeated request gets it, with the same definition and the same bytes sent) is delivered as
//! a copy of the last receipt: its statement would be the same bytes, so nothing is built or
//! signed again ([`ReceiptSigner::repeats`] counts them).
//!
//! Memory goes back to the thread that allocated it: the worker only reads what it is handed
//! and keeps it, once signed, for [`ReceiptSigner::reclaim`], which the runtime calls after
//! sending (while the model answers) to free it on its own thread. Memory freed on another
//! thread does not return to the runtime thread's allocator caches, so its next turn would
//! allocate on the allocator's slow path. The signer holds at most `capacity` signed
//! assemblies for that; when they are not reclaimed, the worker frees the ones past that.
//!
//! Handing over is a lock and a queue push: an idle worker looks at the queue every
//! millisecond for a quarter of a second before it blocks, so a submission during a
//! conversation does not pay for waking a thread; a receipt waits at most that millisecond.
//!
//! [`Assembler::assemble_with_receipt`]: crate::assemble::Assembler::assemble_with_receipt

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use strata_agentdef::{KeyId, KeyPair, VerifiedAgent};
use strata_core::ContentHash;

use crate::assemble::AssembledContext;
use crate::receipt::{Sent, SignedReceipt};

/// Receives each signed receipt, on the signer's worker thread, in submission order. An error
/// is kept and returned by [`ReceiptSigner::finish`]; later receipts are still delivered.
pub trait ReceiptSink: Send + 'static {
    /// Take one signed receipt.
    fn receive(&mut self, receipt: SignedReceipt) -> Result<(), String>;
}

impl<F> ReceiptSink for F
where
    F: FnMut(SignedReceipt) -> Result<(), String> + Send + 'static,
{
    fn receive(&mut self, receipt: SignedReceipt) -> Result<(), String> {
        self(receipt)
    }
}

impl ReceiptSink for crate::receipt::ReceiptLog {
    fn receive(&mut self, receipt: SignedReceipt) -> Result<(), String> {
        self.append(receipt.to_json().as_bytes())
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

#[cfg(feature = "postgres")]
impl ReceiptSink for crate::receipt::PgReceiptLog {
    fn receive(&mut self, receipt: SignedReceipt) -> Result<(), String> {
        self.append(receipt.to_json().as_bytes())
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

/// What the worker needs to build one receipt, all owned.
struct Job {
    agent: VerifiedAgent,
    context: AssembledContext,
    sent: Vec<u8>,
}

/// Why a deferred receipt failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignerError {
    /// The sink refused a receipt.
    #[error("receipt {index} could not be kept: {why}")]
    Sink {
        /// Its position in submission order, from 0.
        index: u64,
        /// The sink's message.
        why: String,
    },
    /// The body given does not fit the assembly's format.
    #[error("{0}")]
    Body(&'static str),
    /// The worker is gone (it panicked); receipts submitted after that were not signed.
    #[error("the receipt worker stopped; {pending} receipts were not signed")]
    Stopped {
        /// Receipts submitted but not delivered.
        pending: u64,
    },
}

/// How often an idle worker looks at the queue before it blocks, and for how many looks: a
/// submission while it looks costs no wake-up call on the request path (ADR-0021).
const POLL: Duration = Duration::from_millis(1);
const POLLS_BEFORE_BLOCKING: u32 = 250;

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Jobs whose receipts are delivered, kept for [`ReceiptSigner::reclaim`].
    spent: Vec<Job>,
    submitted: u64,
    done: u64,
    /// Receipts delivered as copies of the previous one (exact repeats).
    repeats: u64,
    first_error: Option<SignerError>,
    /// No more submissions: the worker ends when the queue is empty.
    closed: bool,
    /// The worker waits on `work` without a timeout and must be woken.
    blocked: bool,
    /// The worker has ended (normally or by a panic).
    ended: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when work arrives for a blocked worker, or the signer closes.
    work: Condvar,
    /// Signalled when a receipt is delivered (room in the queue, progress for `flush`).
    progress: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Builds and signs receipts on a worker thread (ADR-0021). See the module documentation.
pub struct ReceiptSigner {
    shared: Arc<Shared>,
    /// The list `reclaim` swaps with the worker's, empty between calls: neither list is ever
    /// grown by the worker or freed by it.
    spare: Mutex<Vec<Job>>,
    capacity: usize,
    worker: Option<JoinHandle<()>>,
    finished: bool,
}

impl std::fmt::Debug for ReceiptSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = self.shared.lock();
        f.debug_struct("ReceiptSigner")
            .field("submitted", &q.submitted)
            .field("done", &q.done)
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

/// Marks the worker ended however it leaves (a panicking sink included), so that nobody waits
/// for it forever.
struct EndGuard<'a>(&'a Shared);

impl Drop for EndGuard<'_> {
    fn drop(&mut self) {
        self.0.lock().ended = true;
        self.0.progress.notify_all();
    }
}

fn next_job(shared: &Shared) -> Option<Job> {
    let mut q = shared.lock();
    let mut polls = 0;
    loop {
        if let Some(job) = q.jobs.pop_front() {
            drop(q);
            // Room in the queue: a submitter waiting for it need not wait for the signature.
            shared.progress.notify_all();
            return Some(job);
        }
        if q.closed {
            return None;
        }
        if polls < POLLS_BEFORE_BLOCKING {
            polls += 1;
            q = shared
                .work
                .wait_timeout(q, POLL)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        } else {
            q.blocked = true;
            q = shared.work.wait(q).unwrap_or_else(PoisonError::into_inner);
            q.blocked = false;
        }
    }
}

/// The last receipt the worker signed and what it was signed from. An exact repeat of that
/// assembly (the same result, a definition with the same record, the same bytes sent) has the
/// same statement, so it gets a copy of the same receipt without building or signing anything:
/// the statement is a function of exactly these and the key (ADR-0021). Everything here is the
/// worker's own: it holds no reference to what it was handed.
struct Last {
    /// The result's serial number, distinct for every assembly of the process.
    serial: u64,
    agent: AgentKey,
    /// A copy of the body sent (empty for the plain-text format, whose text is the result's
    /// own), in a buffer reused from receipt to receipt.
    sent: Vec<u8>,
    receipt: SignedReceipt,
}

impl Last {
    fn repeats(&self, job: &Job) -> bool {
        self.serial == job.context.inner.serial
            && self.agent.matches(&job.agent)
            && self.sent == job.sent
    }
}

/// What a receipt records of a definition (its agent record), owned by the worker.
struct AgentKey {
    id: String,
    version: u64,
    payload_sha256: String,
    identity_digest: ContentHash,
    signers: Vec<KeyId>,
}

impl AgentKey {
    fn of(a: &VerifiedAgent) -> AgentKey {
        AgentKey {
            id: a.agent_id().to_owned(),
            version: a.version(),
            payload_sha256: a.payload_sha256().to_owned(),
            identity_digest: a.identity_digest(),
            signers: a.signers().to_vec(),
        }
    }

    fn matches(&self, a: &VerifiedAgent) -> bool {
        self.payload_sha256 == a.payload_sha256()
            && self.identity_digest == a.identity_digest()
            && self.id == a.agent_id()
            && self.version == a.version()
            && self.signers == a.signers()
    }
}

fn work(shared: &Shared, key: &KeyPair, sink: &mut dyn ReceiptSink, keep: usize) {
    let _end = EndGuard(shared);
    let mut index = 0u64;
    let mut last: Option<Last> = None;
    while let Some(job) = next_job(shared) {
        let repeat = last.as_ref().is_some_and(|l| l.repeats(&job));
        let copy = if repeat {
            last.as_ref().map(|l| l.receipt.clone())
        } else {
            None
        };
        let receipt = match copy {
            Some(r) => r,
            None => {
                let sent = match &job.context.inner.conversation {
                    Some(_) => Sent::Body(&job.sent),
                    None => Sent::Text(job.context.text()),
                };
                let r = SignedReceipt::of_assembly(&job.agent, &job.context, sent, key);
                match &mut last {
                    Some(l) => {
                        l.serial = job.context.inner.serial;
                        if !l.agent.matches(&job.agent) {
                            l.agent = AgentKey::of(&job.agent);
                        }
                        l.sent.clear();
                        l.sent.extend_from_slice(&job.sent);
                        l.receipt = r.clone();
                    }
                    None => {
                        last = Some(Last {
                            serial: job.context.inner.serial,
                            agent: AgentKey::of(&job.agent),
                            sent: job.sent.clone(),
                            receipt: r.clone(),
                        })
                    }
                }
                r
            }
        };
        let outcome = sink
            .receive(receipt)
            .map_err(|why| SignerError::Sink { index, why });
        let mut q = shared.lock();
        q.repeats += u64::from(repeat);
        let unclaimed = if q.spent.len() < keep {
            q.spent.push(job);
            None
        } else {
            Some(job)
        };
        if let Err(e) = outcome {
            tracing::error!(error = %e, "deferred receipt failed");
            q.first_error.get_or_insert(e);
        }
        q.done += 1;
        drop(q);
        shared.progress.notify_all();
        drop(unclaimed);
        index += 1;
    }
}

impl ReceiptSigner {
    /// Start a worker that signs with `key` and delivers to `sink`, with room for `capacity`
    /// receipts waiting (at least 1).
    pub fn start(
        key: impl Into<Arc<KeyPair>>,
        sink: impl ReceiptSink,
        capacity: usize,
    ) -> ReceiptSigner {
        let key: Arc<KeyPair> = key.into();
        let capacity = capacity.max(1);
        let shared = Arc::new(Shared::default());
        shared.lock().spent = Vec::with_capacity(capacity);
        let s = shared.clone();
        let worker = std::thread::Builder::new()
            .name("strata-receipts".into())
            .spawn(move || {
                let mut sink = sink;
                work(&s, &key, &mut sink, capacity);
            });
        let worker = match worker {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::error!(error = %e, "the receipt worker could not start");
                shared.lock().ended = true;
                None
            }
        };
        ReceiptSigner {
            shared,
            spare: Mutex::new(Vec::with_capacity(capacity)),
            capacity,
            worker,
            finished: false,
        }
    }

    /// Hand over one assembly that the runtime has sent or is sending: for a provider-native
    /// assembly, `body` is the request body exactly as sent ([`crate::receipt::body_bytes`]);
    /// for the plain-text format it is `None` and the context's text is what the receipt names.
    /// Returns at once unless `capacity` receipts are already waiting; then it waits for room.
    pub fn submit(
        &self,
        agent: &VerifiedAgent,
        context: AssembledContext,
        body: Option<Vec<u8>>,
    ) -> Result<(), SignerError> {
        let sent = match (&context.inner.conversation, body) {
            (Some(_), Some(b)) => b,
            (None, None) => Vec::new(),
            (Some(_), None) => {
                return Err(SignerError::Body(
                    "a provider-native assembly needs the request body that was sent",
                ))
            }
            (None, Some(_)) => {
                return Err(SignerError::Body(
                    "a plain-text assembly sends its text; pass no body",
                ))
            }
        };
        let job = Job {
            agent: agent.clone(),
            context,
            sent,
        };
        let mut q = self.shared.lock();
        while q.jobs.len() >= self.capacity && !q.ended {
            q = self
                .shared
                .progress
                .wait(q)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if q.ended || q.closed {
            return Err(SignerError::Stopped {
                pending: q.submitted - q.done,
            });
        }
        q.jobs.push_back(job);
        q.submitted += 1;
        let wake = q.blocked;
        drop(q);
        if wake {
            self.shared.work.notify_one();
        }
        Ok(())
    }

    /// Wait until every receipt submitted before this call has reached the sink (or the worker
    /// stopped); receipts other threads submit meanwhile are not waited for.
    pub fn flush(&self) -> Result<(), SignerError> {
        let mut q = self.shared.lock();
        let target = q.submitted;
        while q.done < target {
            if q.ended {
                return Err(SignerError::Stopped {
                    pending: q.submitted - q.done,
                });
            }
            q = self
                .shared
                .progress
                .wait(q)
                .unwrap_or_else(PoisonError::into_inner);
        }
        Ok(())
    }

    /// Free, on the calling thread, the assemblies whose receipts have been delivered. Call it
    /// from the thread that assembles, after sending (while the model answers): freeing there
    /// keeps that thread's allocator caches for its next turn. Returns how many were freed.
    ///
    /// Until then the signer holds up to `capacity` signed assemblies (context and body) on top
    /// of the `capacity` waiting to be signed; past that the worker frees them itself.
    pub fn reclaim(&self) -> usize {
        let mut spare = self.spare.lock().unwrap_or_else(PoisonError::into_inner);
        {
            let mut q = self.shared.lock();
            if q.spent.is_empty() {
                return 0;
            }
            std::mem::swap(&mut q.spent, &mut *spare);
        }
        let n = spare.len();
        // The jobs are freed here; the list keeps its room for the next swap.
        spare.clear();
        n
    }

    /// Receipts submitted and receipts delivered (or failed) so far.
    pub fn progress(&self) -> (u64, u64) {
        let q = self.shared.lock();
        (q.submitted, q.done)
    }

    /// How many delivered receipts were copies of the one before: exact repeats of an assembly
    /// (the same shared result, as a repeated request gets from the assembler's kept result,
    /// with the same definition and the same bytes sent), which need no new signature.
    pub fn repeats(&self) -> u64 {
        self.shared.lock().repeats
    }

    /// Deliver everything submitted, stop the worker, and return the first failure, if any.
    pub fn finish(mut self) -> Result<(), SignerError> {
        self.close()
    }

    fn close(&mut self) -> Result<(), SignerError> {
        if std::mem::replace(&mut self.finished, true) {
            return Ok(());
        }
        self.shared.lock().closed = true;
        self.shared.work.notify_all();
        let panicked = self.worker.take().is_some_and(|w| w.join().is_err());
        let q = self.shared.lock();
        if let Some(e) = &q.first_error {
            return Err(e.clone());
        }
        if panicked || q.done < q.submitted {
            return Err(SignerError::Stopped {
                pending: q.submitted - q.done,
            });
        }
        Ok(())
    }
}

impl Drop for ReceiptSigner {
    /// Dropping delivers everything submitted first; failures are logged.
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::error!(error = %e, "receipt signer closed with a failure");
        }
    }
}
