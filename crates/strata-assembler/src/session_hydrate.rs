//! The hydration path's own tool retrieval (ADR-0046): the tools whose name and description
//! are nearest in meaning to the user's message, under the runtime's embedder.

use strata_core::AnnouncedTool;

use super::{Runtime, SessionError};

impl Runtime {
    /// The hydration path's own retrieval (ADR-0046): the runtime's `hydrated_tools` tools of
    /// `tools` whose name and description are most similar to `query` under the runtime's
    /// embedder (the cosine of their vectors). Tools whose similarity is not above zero are
    /// left out; equal similarities are ordered by the number of words (over three letters)
    /// the tool shares with the query, then by name, so the choice is deterministic. An
    /// embedder that fails fails the turn: there is no fallback to another ranking.
    pub(super) fn retrieve_tools(
        &self,
        tools: &[AnnouncedTool],
        query: &str,
    ) -> Result<Vec<AnnouncedTool>, SessionError> {
        if query.trim().is_empty() || tools.is_empty() {
            return Ok(Vec::new());
        }
        let asked = strata_memory::embed_checked(&*self.embedder, &[query])?.remove(0);
        let texts: Vec<String> = tools.iter().map(tool_text).collect();
        let vectors = self.tool_vectors(&texts)?;
        let asked_words = long_words(query);
        let mut scored: Vec<(f32, usize, &AnnouncedTool)> = tools
            .iter()
            .zip(&vectors)
            .zip(&texts)
            .map(|((t, v), text)| {
                let cosine: f32 = v.iter().zip(&asked).map(|(a, b)| a * b).sum();
                let shared = long_words(text).intersection(&asked_words).count();
                (cosine, shared, t)
            })
            .filter(|(cosine, _, _)| *cosine > 0.0)
            .collect();
        scored.sort_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then_with(|| b.1.cmp(&a.1))
                .then_with(|| a.2.name.cmp(&b.2.name))
        });
        Ok(scored
            .into_iter()
            .take(self.hydrated)
            .map(|(_, _, t)| t.clone())
            .collect())
    }

    /// The vectors of `texts`, embedding only those not seen before (the kept vectors are
    /// dropped when they pass 4,096 texts).
    fn tool_vectors(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, SessionError> {
        let kept = |texts: &[String]| {
            let map = self
                .tool_vectors
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            texts
                .iter()
                .map(|t| map.get(t).cloned())
                .collect::<Vec<_>>()
        };
        let found = kept(texts);
        let missing: Vec<&str> = texts
            .iter()
            .zip(&found)
            .filter(|(_, v)| v.is_none())
            .map(|(t, _)| t.as_str())
            .collect();
        let fresh = strata_memory::embed_checked(&*self.embedder, &missing)?;
        let mut map = self
            .tool_vectors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() + fresh.len() > 4_096 {
            map.clear();
        }
        let mut fresh = fresh.into_iter();
        let mut out = Vec::with_capacity(texts.len());
        for (text, v) in texts.iter().zip(found) {
            let v = match v.or_else(|| fresh.next()) {
                Some(v) => v,
                None => {
                    return Err(SessionError::Invalid(
                        "the embedder answered too few vectors".into(),
                    ))
                }
            };
            map.entry(text.clone()).or_insert_with(|| v.clone());
            out.push(v);
        }
        Ok(out)
    }
}

/// What the hydration path embeds of a tool: its name and its announced description.
fn tool_text(t: &AnnouncedTool) -> String {
    format!("{}: {}", t.name, t.description.as_str())
}

/// The distinct lower-cased words of `text` longer than three letters.
fn long_words(text: &str) -> std::collections::BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 3)
        .map(str::to_lowercase)
        .collect()
}
