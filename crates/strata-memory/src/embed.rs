//! Embedders: text to vectors for the vector half of hybrid search.
//!
//! [`HashEmbedder`] is the built-in default: deterministic, offline, no model. It hashes word
//! unigrams, word bigrams and character trigrams into a fixed number of signed buckets and
//! scales the result to unit length, so texts that share words and word pieces point the same
//! way. It is no substitute for a trained model on paraphrases, but it makes the default store
//! work with nothing to download. `OpenAiEmbedder` (feature `http`) calls any server that
//! speaks the OpenAI `POST /v1/embeddings` protocol. Stores record the dimension of the
//! embedder they were created with and refuse a different one (ADR-0012).

use std::fmt;
use std::sync::Arc;

use strata_registry::{ConfigError, EmbedderConfig};

use crate::error::{MemoryError, Result};
use crate::long_term::normalise;
use crate::text::words;

/// Turns texts into vectors of a fixed dimension.
pub trait Embedder: Send + Sync + fmt::Debug {
    /// A stable name for the model (stores remember it).
    fn name(&self) -> &str;

    /// The length of every vector it returns.
    fn dims(&self) -> usize;

    /// One vector per text, in order.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>>;
}

/// The largest embedding dimension a store accepts.
pub const MAX_DIMS: usize = 65_536;

/// Check an embedder's declared dimension: 1 to [`MAX_DIMS`]. Every store calls this when it
/// opens, and [`embed_checked`] on every call, so an embedder that reports 0 dimensions is
/// refused before anything is stored (ADR-0019).
pub fn check_dims(embedder: &dyn Embedder) -> Result<()> {
    let d = embedder.dims();
    if d == 0 || d > MAX_DIMS {
        return Err(MemoryError::Embedder {
            embedder: embedder.name().to_owned(),
            detail: format!(
                "reports {d} dimensions; an embedder must produce vectors of 1 to {MAX_DIMS} numbers"
            ),
        });
    }
    Ok(())
}

/// Embed `texts` and check the answer: one vector per text, each of `embedder.dims()` finite
/// numbers; the vectors are scaled to unit length so cosine similarity is a dot product
/// (ADR-0019: this is the boundary every vector crosses into a store).
pub fn embed_checked(embedder: &dyn Embedder, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
    check_dims(embedder)?;
    if texts.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = embedder.embed(texts)?;
    if out.len() != texts.len() {
        return Err(MemoryError::Embedder {
            embedder: embedder.name().to_owned(),
            detail: format!(
                "returned {} vectors for {} texts; check the embedding server",
                out.len(),
                texts.len()
            ),
        });
    }
    for v in &mut out {
        if v.len() != embedder.dims() {
            return Err(MemoryError::DimensionMismatch {
                context: format!("embedder `{}`", embedder.name()),
                expected: embedder.dims(),
                found: v.len(),
            });
        }
        if v.iter().any(|x| !x.is_finite()) {
            return Err(MemoryError::Embedder {
                embedder: embedder.name().to_owned(),
                detail: "returned a vector with NaN or infinite values".to_owned(),
            });
        }
        normalise(v);
        if v.iter().any(|x| !x.is_finite()) {
            return Err(MemoryError::Embedder {
                embedder: embedder.name().to_owned(),
                detail: "returned a vector that cannot be scaled to unit length".to_owned(),
            });
        }
    }
    Ok(out)
}

/// The embedder `strata.toml`'s `[memory.embedder]` names (ADR-0046), its API key read from
/// the environment variable the table names.
///
/// Errors: [`ConfigError::Value`] at `memory.embedder.api_key_env` when that variable is not
/// set, is empty or is not UTF-8, and at `memory.embedder.kind` for `openai` in a build without
/// the `http` feature. Nothing is sent to the server here; the first vectors are.
pub fn embedder_from_config(
    config: &EmbedderConfig,
) -> std::result::Result<Arc<dyn Embedder>, ConfigError> {
    embedder_from_config_with(config, &|name| std::env::var(name))
}

/// [`embedder_from_config`] with the environment given as a function (for tests and for
/// runtimes that keep secrets elsewhere).
pub fn embedder_from_config_with(
    config: &EmbedderConfig,
    env: &dyn Fn(&str) -> std::result::Result<String, std::env::VarError>,
) -> std::result::Result<Arc<dyn Embedder>, ConfigError> {
    match config {
        EmbedderConfig::Hashing { dims } => Ok(Arc::new(HashEmbedder::new(
            dims.unwrap_or(DEFAULT_HASH_DIMS),
        ))),
        EmbedderConfig::OpenAi { api_key_env, .. } => {
            let key = match api_key_env {
                Some(name) => Some(api_key(name, env)?),
                None => None,
            };
            openai_from_config(config, key)
        }
    }
}

/// The key in the environment variable `name`: set, not empty, UTF-8.
fn api_key(
    name: &str,
    env: &dyn Fn(&str) -> std::result::Result<String, std::env::VarError>,
) -> std::result::Result<String, ConfigError> {
    let why = match env(name) {
        Ok(key) if !key.trim().is_empty() => return Ok(key),
        Ok(_) => "is set but empty",
        Err(std::env::VarError::NotPresent) => "is not set",
        Err(std::env::VarError::NotUnicode(_)) => "is not valid UTF-8",
    };
    Err(ConfigError::Value {
        key: "memory.embedder.api_key_env",
        location: None,
        reason: format!(
            "the environment variable `{name}`, which should hold the embedding server's API key, {why}; export the key in `{name}` before starting, or remove api_key_env for a server that takes no key"
        ),
    })
}

#[cfg(feature = "http")]
fn openai_from_config(
    config: &EmbedderConfig,
    key: Option<String>,
) -> std::result::Result<Arc<dyn Embedder>, ConfigError> {
    let EmbedderConfig::OpenAi {
        url,
        model,
        dimensions,
        request_dimensions,
        ..
    } = config
    else {
        return Err(ConfigError::Value {
            key: "memory.embedder.kind",
            location: None,
            reason: "expected `openai`".into(),
        });
    };
    let mut e =
        OpenAiEmbedder::new(url, model, *dimensions).request_dimensions(*request_dimensions);
    if let Some(key) = key {
        e = e.with_api_key(key);
    }
    Ok(Arc::new(e))
}

#[cfg(not(feature = "http"))]
fn openai_from_config(
    _config: &EmbedderConfig,
    _key: Option<String>,
) -> std::result::Result<Arc<dyn Embedder>, ConfigError> {
    Err(ConfigError::Value {
        key: "memory.embedder.kind",
        location: None,
        reason: "`openai` needs a build with the `http` feature of strata-memory; use kind = \"hashing\" or rebuild with it".into(),
    })
}

/// Check the embedder a store recorded when it was created (`stored`, `stored_dims`) against
/// the one it is opened with: another name or dimension is
/// [`MemoryError::EmbedderMismatch`] (ADR-0046). Every store calls this when it opens,
/// before it writes anything.
pub(crate) fn check_recorded(
    location: &str,
    stored: &str,
    stored_dims: usize,
    embedder: &dyn Embedder,
) -> Result<()> {
    if stored == embedder.name() && stored_dims == embedder.dims() {
        return Ok(());
    }
    Err(MemoryError::EmbedderMismatch {
        location: location.to_owned(),
        stored: stored.to_owned(),
        stored_dims,
        given: embedder.name().to_owned(),
        given_dims: embedder.dims(),
    })
}

/// The default dimension of [`HashEmbedder`].
pub const DEFAULT_HASH_DIMS: usize = 256;

/// A deterministic, offline embedder: signed feature hashing of word unigrams (weight 1.0),
/// word bigrams (0.5) and character trigrams of each word with boundary marks (0.25),
/// scaled to unit length.
#[derive(Debug, Clone)]
pub struct HashEmbedder {
    dims: usize,
    name: String,
}

impl Default for HashEmbedder {
    fn default() -> Self {
        HashEmbedder::new(DEFAULT_HASH_DIMS)
    }
}

impl HashEmbedder {
    /// An embedder with `dims` buckets (at least 1).
    pub fn new(dims: usize) -> HashEmbedder {
        let dims = dims.max(1);
        HashEmbedder {
            dims,
            name: format!("strata-hash-v1/{dims}"),
        }
    }

    fn add(&self, v: &mut [f32], kind: u8, feature: &str, weight: f32) {
        let h = mix(fnv1a(kind, feature.as_bytes()));
        let idx = (h % self.dims as u64) as usize;
        let sign = if h >> 63 == 0 { 1.0 } else { -1.0 };
        v[idx] += sign * weight;
    }

    fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0.0f32; self.dims];
        let ws = words(text);
        for w in &ws {
            self.add(&mut v, b'w', w, 1.0);
            let chars: Vec<char> = std::iter::once('^')
                .chain(w.chars())
                .chain(std::iter::once('$'))
                .collect();
            for t in chars.windows(3) {
                let tri: String = t.iter().collect();
                self.add(&mut v, b'c', &tri, 0.25);
            }
        }
        for pair in ws.windows(2) {
            self.add(&mut v, b'b', &format!("{} {}", pair[0], pair[1]), 0.5);
        }
        normalise(&mut v);
        v
    }
}

impl Embedder for HashEmbedder {
    fn name(&self) -> &str {
        &self.name
    }

    fn dims(&self) -> usize {
        self.dims
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }
}

#[cfg(feature = "http")]
pub use http::OpenAiEmbedder;

#[cfg(feature = "http")]
mod http {
    use std::fmt;
    use std::time::Duration;

    use serde::{Deserialize, Serialize};

    use super::Embedder;
    use crate::error::{MemoryError, Result};

    /// A client for servers that speak the OpenAI embeddings protocol
    /// (`POST /v1/embeddings` with `model` and `input`, answering `data[].embedding`):
    /// OpenAI itself, and local servers such as llama.cpp, vLLM, Ollama or text-embeddings-
    /// inference. Blocking; texts are sent in batches.
    #[derive(Clone)]
    pub struct OpenAiEmbedder {
        endpoint: String,
        model: String,
        api_key: Option<String>,
        dims: usize,
        name: String,
        batch: usize,
        request_dimensions: bool,
        agent: ureq::Agent,
    }

    impl fmt::Debug for OpenAiEmbedder {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            // Never print the key.
            f.debug_struct("OpenAiEmbedder")
                .field("endpoint", &self.endpoint)
                .field("model", &self.model)
                .field("dims", &self.dims)
                .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
                .finish_non_exhaustive()
        }
    }

    #[derive(Serialize)]
    struct Request<'a> {
        model: &'a str,
        input: &'a [&'a str],
        encoding_format: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        dimensions: Option<usize>,
    }

    #[derive(Deserialize)]
    struct Response {
        data: Vec<Item>,
    }

    #[derive(Deserialize)]
    struct Item {
        index: usize,
        embedding: Vec<f32>,
    }

    fn agent(timeout: Duration) -> ureq::Agent {
        ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .into()
    }

    impl OpenAiEmbedder {
        /// A client for `model` returning vectors of `dims` numbers, at `base_url`
        /// (`https://api.openai.com`, `http://127.0.0.1:8080`, or either ending in `/v1`).
        /// Timeout 30 s, batches of 64 texts, no API key.
        pub fn new(base_url: &str, model: &str, dims: usize) -> OpenAiEmbedder {
            let base = base_url.trim_end_matches('/');
            let endpoint = if base.ends_with("/v1") {
                format!("{base}/embeddings")
            } else {
                format!("{base}/v1/embeddings")
            };
            OpenAiEmbedder {
                name: format!("openai-compatible:{model}/{dims}"),
                endpoint,
                model: model.to_owned(),
                api_key: None,
                dims,
                batch: 64,
                request_dimensions: false,
                agent: agent(Duration::from_secs(30)),
            }
        }

        /// Send `Authorization: Bearer <key>`.
        #[must_use]
        pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
            self.api_key = Some(key.into());
            self
        }

        /// The longest a request may take.
        #[must_use]
        pub fn with_timeout(mut self, timeout: Duration) -> Self {
            self.agent = agent(timeout);
            self
        }

        /// How many texts to send per request (at least 1).
        #[must_use]
        pub fn with_batch_size(mut self, n: usize) -> Self {
            self.batch = n.max(1);
            self
        }

        /// Ask the server for `dims` dimensions (the `dimensions` field, which models with
        /// shortened embeddings accept; others reject it).
        #[must_use]
        pub fn request_dimensions(mut self, yes: bool) -> Self {
            self.request_dimensions = yes;
            self
        }

        /// The full URL requests go to.
        pub fn endpoint(&self) -> &str {
            &self.endpoint
        }

        fn fail(&self, detail: String) -> MemoryError {
            MemoryError::Embedder {
                embedder: self.name.clone(),
                detail,
            }
        }

        fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
            let body = serde_json::to_string(&Request {
                model: &self.model,
                input: texts,
                encoding_format: "float",
                dimensions: self.request_dimensions.then_some(self.dims),
            })
            .map_err(|e| self.fail(format!("could not encode the request: {e}")))?;
            let mut req = self
                .agent
                .post(&self.endpoint)
                .header("Content-Type", "application/json");
            if let Some(key) = &self.api_key {
                req = req.header("Authorization", &format!("Bearer {key}"));
            }
            let mut resp = req.send(&body).map_err(|e| {
                self.fail(format!(
                    "could not reach {}: {e}; check the URL and that the server is running",
                    self.endpoint
                ))
            })?;
            let status = resp.status();
            let text = resp
                .body_mut()
                .with_config()
                .limit(256 * 1024 * 1024)
                .read_to_string()
                .map_err(|e| self.fail(format!("could not read the response: {e}")))?;
            if !status.is_success() {
                let snippet: String = text.chars().take(300).collect();
                return Err(self.fail(format!(
                    "{} answered HTTP {}: {snippet}; check the model name and the API key",
                    self.endpoint,
                    status.as_u16()
                )));
            }
            let parsed: Response = serde_json::from_str(&text).map_err(|e| {
                self.fail(format!(
                    "the response is not an embeddings response ({e}); is {} an OpenAI-compatible endpoint?",
                    self.endpoint
                ))
            })?;
            let mut out: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
            for item in parsed.data {
                let slot = out.get_mut(item.index).ok_or_else(|| {
                    self.fail(format!(
                        "the response has index {} for {} inputs",
                        item.index,
                        texts.len()
                    ))
                })?;
                if item.embedding.len() != self.dims {
                    return Err(MemoryError::DimensionMismatch {
                        context: format!("embedder `{}` (configured dimension)", self.name),
                        expected: self.dims,
                        found: item.embedding.len(),
                    });
                }
                *slot = Some(item.embedding);
            }
            out.into_iter()
                .enumerate()
                .map(|(i, v)| {
                    v.ok_or_else(|| self.fail(format!("the response has no vector for input {i}")))
                })
                .collect()
        }
    }

    impl Embedder for OpenAiEmbedder {
        fn name(&self) -> &str {
            &self.name
        }

        fn dims(&self) -> usize {
            self.dims
        }

        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
            let mut out = Vec::with_capacity(texts.len());
            for chunk in texts.chunks(self.batch) {
                out.extend(self.embed_batch(chunk)?);
            }
            Ok(out)
        }
    }
}

/// 64-bit FNV-1a over a kind byte and the feature bytes.
fn fnv1a(kind: u8, bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in std::iter::once(&kind).chain(bytes) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A finaliser (from SplitMix64) so all bits of the hash depend on all input bits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::long_term::dot;

    #[test]
    fn hash_embedder_is_deterministic_unit_and_similarity_aware() {
        let e = HashEmbedder::default();
        let v = embed_checked(
            &e,
            &[
                "the deploy pipeline failed on staging",
                "staging deploy pipeline failure",
                "grandmother's apple pie recipe",
                "",
            ],
        )
        .unwrap();
        assert_eq!(v.len(), 4);
        assert_eq!(v[0].len(), 256);
        let norm: f32 = v[0].iter().map(|x| x * x).sum();
        assert!((norm - 1.0).abs() < 1e-5);
        assert!(v[3].iter().all(|x| *x == 0.0));
        let related = dot(&v[0], &v[1]);
        let unrelated = dot(&v[0], &v[2]);
        assert!(related > 0.4, "{related}");
        assert!(related > unrelated + 0.3, "{related} vs {unrelated}");
        assert_eq!(
            embed_checked(&e, &["the deploy pipeline failed on staging"]).unwrap()[0],
            v[0]
        );
    }

    #[derive(Debug)]
    struct Wrong;
    impl Embedder for Wrong {
        fn name(&self) -> &str {
            "wrong"
        }
        fn dims(&self) -> usize {
            4
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
            Ok(texts.iter().map(|_| vec![1.0; 3]).collect())
        }
    }

    #[test]
    fn wrong_dimension_is_an_error() {
        let e = embed_checked(&Wrong, &["x"]).unwrap_err();
        assert!(
            matches!(
                e,
                MemoryError::DimensionMismatch {
                    expected: 4,
                    found: 3,
                    ..
                }
            ),
            "{e}"
        );
    }
}
