//! Property tests of the assembler's invariants with arbitrary, adversarial layers 3-6.
//! The number of cases follows `PROPTEST_CASES` (the thorough run uses 10,000).
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

#[path = "support/adversarial.rs"]
mod adversarial;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use proptest::prelude::*;
use strata_assembler::{agent::*, assemble::*};
use strata_core::ContentHash;

/// A kept section as parsed: its head, its tail and the bytes elided between them, if cut so.
type Kept = (String, String, Option<u64>);

fn agent() -> &'static VerifiedAgent {
    static A: OnceLock<VerifiedAgent> = OnceLock::new();
    A.get_or_init(support::agent)
}

fn content() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        proptest::sample::select(adversarial::PIECES).prop_map(str::to_owned),
        ".{0,40}",
        proptest::collection::vec(any::<u8>(), 0..40)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        Just("You are Tester, an agent used to check the assembler.".to_owned()),
        // Whitespace runs longer than the tokenizer's segment limit (counted in segments).
        (
            200usize..700,
            proptest::sample::select(&[" ", "\n", "\t", " \n"][..])
        )
            .prop_map(|(n, w)| w.repeat(n)),
    ];
    proptest::collection::vec(piece, 0..5).prop_map(|v| v.concat())
}

const IDS: &[&str] = &[
    "a",
    "b",
    "c",
    "d",
    "core.identity",
    "core.tools",
    "characteristics.style",
    "strata.tools",
    "m.1",
    "m.2",
];
const KEYS: &[&str] = &["identity", "language", "style", "tools", "k1", "k2", "k3"];

fn section() -> impl Strategy<Value = Section> {
    (
        0usize..4,
        proptest::sample::select(IDS),
        proptest::option::of(proptest::sample::select(KEYS)),
        0u32..1000,
        0usize..6,
        any::<bool>(),
        proptest::bool::weighted(0.1),
        (0u16..300, any::<u8>(), any::<u8>()),
        proptest::option::of((
            0u64..20,
            0usize..4,
            proptest::option::of(proptest::sample::select(&["c1", "c2", "c3"][..])),
        )),
        content(),
    )
        .prop_map(
            |(l, id, key, prio, phase, stable, sticky, (w, modes, paths), turn, text)| {
                let layer = RuntimeLayer::ALL[l];
                let text = if sticky {
                    text.chars().take(40).collect()
                } else {
                    text
                };
                let mut b = Section::builder(layer, id, text)
                    .unwrap()
                    .priority(prio)
                    .phase(Phase::ALL[phase])
                    .stability(if stable {
                        Stability::Stable
                    } else {
                        Stability::Dynamic
                    })
                    .sticky(sticky)
                    .weight(Weight(w))
                    .modes(ModeSet::of(
                        &PromptMode::ALL
                            .iter()
                            .copied()
                            .enumerate()
                            .filter(|(i, _)| modes & (1 << i) != 0 || modes > 200)
                            .map(|(_, m)| m)
                            .collect::<Vec<_>>(),
                    ))
                    .paths(PathSet::of(
                        &AssemblyPath::ALL
                            .iter()
                            .copied()
                            .enumerate()
                            .filter(|(i, _)| paths & (1 << i) != 0 || paths > 100)
                            .map(|(_, p)| p)
                            .collect::<Vec<_>>(),
                    ));
                if let Some(k) = key {
                    b = b.key(k).unwrap();
                }
                b = b.keep([Keep::Head, Keep::Tail, Keep::Both][(prio % 3) as usize]);
                if let Some((seq, role, call)) = turn {
                    let role = [
                        Role::User,
                        Role::Assistant,
                        Role::ToolCall,
                        Role::ToolResult,
                    ][role];
                    b = b.turn(Turn {
                        seq,
                        role,
                        call_id: call.map(Into::into),
                        name: None,
                        is_error: false,
                        reasoning: Vec::new(),
                    });
                }
                b.build()
            },
        )
}

fn request() -> impl Strategy<Value = AssemblyRequest> {
    (
        proptest::collection::vec(section(), 0..14),
        0usize..4,
        0usize..5,
        (
            0u32..1500,
            0u32..64,
            proptest::option::of(20u32..400),
            proptest::option::of(50u32..400),
            proptest::option::of(2_000usize..20_000),
        ),
        0usize..3,
    )
        .prop_map(
            |(sections, mode, path, (extra, reserve, cap, layer_cap, chars), enc)| {
                let identity_tokens = 140;
                let budget = Budget {
                    total_tokens: identity_tokens + 80 + extra + reserve,
                    response_reserve: reserve,
                    layers: strata_core::LayerBudgets {
                        long_term_memory: layer_cap,
                        ..Default::default()
                    },
                    section_cap: cap,
                    max_total_chars: chars,
                };
                let encoding = [Encoding::Escaped, Encoding::Datamark, Encoding::Base64][enc];
                AssemblyRequest {
                    sections,
                    mode: PromptMode::ALL[mode],
                    path: AssemblyPath::ALL[path],
                    budget: Some(BudgetSpec::Explicit(budget)),
                    render: RenderOptions::default()
                        .with_encoding(RuntimeLayer::LongTermMemory, encoding),
                    ..Default::default()
                }
            },
        )
}

fn assembler() -> &'static Assembler {
    static A: OnceLock<Assembler> = OnceLock::new();
    A.get_or_init(Assembler::o200k)
}

proptest! {
    /// Verifies I1 (ADR-0006) and I3 (ADR-0009): for any layers 3-6 the output starts with the
    /// rendered layers 1-2 exactly once, and parsing the output gives back exactly the identity
    /// sections followed by the runtime sections that were kept, with their layers and text.
    #[test]
    fn identity_first_intact_and_no_forged_boundaries(req in request()) {
        let agent = agent();
        let Ok(ctx) = assembler().assemble(agent, &req) else { return Ok(()) };
        prop_assert!(ctx.text().starts_with(agent.identity_text()));
        prop_assert_eq!(ctx.text().matches(agent.identity_text()).count(), 1);
        let parsed = parse(ctx.text()).unwrap();
        let signed: Vec<_> = parsed.iter().take_while(|p| matches!(p, Parsed::Section { trust: strata_core::format::Trust::Signed, .. })).collect();
        prop_assert_eq!(signed.len(), agent.identity().sections().len());
        for (p, s) in signed.iter().zip(agent.identity().sections()) {
            let Parsed::Section { id, text, .. } = p else { unreachable!() };
            prop_assert_eq!(id.as_str(), s.id().as_str());
            prop_assert_eq!(text.as_str(), s.content().as_str());
        }
        // After identity: only untrusted sections and markers, all of layers 3-6.
        let mut kept: BTreeMap<(u8, String), Vec<Kept>> = BTreeMap::new();
        for p in &parsed[signed.len()..] {
            match p {
                Parsed::Section { layer, id, text, trust, elided, .. } => {
                    prop_assert_eq!(*trust, strata_core::format::Trust::Untrusted);
                    prop_assert!(layer.number() >= 3);
                    let at = elided.map_or(text.len(), |e| e.at);
                    let bytes = elided.map(|e| e.bytes);
                    kept.entry((layer.number(), id.clone())).or_default().push((text[..at].to_owned(), text[at..].to_owned(), bytes));
                }
                Parsed::Omitted { layer, .. } => prop_assert!(layer.number() >= 3),
            }
        }
        // Each parsed runtime section is exactly one input section, or if cut its kept head and
        // tail with exactly the elided bytes between them (ADR-0037).
        let inputs: BTreeMap<(u8, String), Vec<String>> = req.sections.iter().fold(BTreeMap::new(), |mut m, s| {
            m.entry((s.layer().number(), s.id().to_string())).or_insert_with(Vec::new).push(s.content().to_string());
            m
        });
        for ((layer, id), texts) in &kept {
            if id == TOOL_CATALOG_ID { continue; }
            let Some(cands) = inputs.get(&(*layer, id.clone())) else {
                return Err(TestCaseError::fail(format!("section {id} in layer {layer} was never an input")));
            };
            for (head, tail, elided) in texts {
                prop_assert!(
                    cands.iter().any(|c| c.starts_with(head.as_str())
                        && c.ends_with(tail.as_str())
                        && elided.is_none_or(|e| head.len() + tail.len() + e as usize == c.len())),
                    "{} text not from input", id
                );
            }
        }
        // Exact budget: the report's total is the count of the text by tiktoken-rs, an
        // independent implementation of o200k_base (ADR-0020), and within budget.
        prop_assert_eq!(ctx.report().used_tokens, tiktoken_rs::o200k_base_singleton().encode_ordinary(ctx.text()).len() as u64);
        prop_assert!(ctx.report().used_tokens <= ctx.report().prompt_budget);
        if let Some(mc) = ctx.report().max_total_chars {
            prop_assert!(ctx.text().chars().count() as u64 <= mc);
        }
    }

    /// Verifies I2 (ADR-0008): sticky sections that take part are never dropped or cut, but for
    /// the newest user turn, which may be cut to its head and tail (ADR-0030); if they cannot fit, the
    /// assembly fails with a typed error.
    #[test]
    fn sticky_and_identity_never_trimmed(req in request()) {
        match assembler().assemble(agent(), &req) {
            Ok(ctx) => {
                let newest = newest_user_turns(&req.sections, ctx.report());
                for r in ctx.report().sections.iter().filter(|r| r.sticky) {
                    let cut_ok = is_newest(&newest, r)
                        && matches!(r.status, SectionStatus::Cut { head_bytes, tail_bytes, .. } if head_bytes > 0 && tail_bytes > 0);
                    prop_assert!(
                        cut_ok || matches!(r.status, SectionStatus::Kept | SectionStatus::Filtered { .. } | SectionStatus::Overridden { .. }),
                        "sticky {} was {:?}", r.id, r.status
                    );
                }
                // The newest user turn is always sent (of equal ones, one is).
                if !newest.is_empty() {
                    prop_assert!(
                        ctx.report().sections.iter().any(|r| is_newest(&newest, r)
                            && matches!(r.status, SectionStatus::Kept | SectionStatus::Cut { .. })),
                        "no newest user turn of {:?} was sent", newest
                    );
                }
            }
            Err(e) => prop_assert!(matches!(
                e,
                AssembleError::StickyExceedsBudget { .. } | AssembleError::IdentityExceedsBudget { .. }
                    | AssembleError::CharsExceeded { .. } | AssembleError::MessageTooLarge { .. }
            ), "{e}"),
        }
    }

    /// Verifies I4 (ADR-0007): no runtime section shares a key or id with identity, keys are
    /// unique in the output, and each surviving key belongs to the highest layer that claimed it.
    #[test]
    fn higher_layer_wins(req in request()) {
        let agent = agent();
        let Ok(ctx) = assembler().assemble(agent, &req) else { return Ok(()) };
        let identity_keys: BTreeSet<String> = agent.identity().sections().iter().filter_map(|s| s.key().map(|k| k.to_string())).collect();
        let identity_ids: BTreeSet<String> = agent.identity().sections().iter().map(|s| s.id().to_string()).collect();
        // Reference model of the rule: in order of authority (layer, then score, id, hash), a
        // section wins its key unless identity or an earlier winner holds its id or key.
        // The tool catalog's id and key are reserved for the assembler (ADR-0007).
        let reserved = |s: &Section| s.id().as_str() == TOOL_CATALOG_ID || s.key().is_some_and(|k| k.as_str() == TOOL_CATALOG_KEY);
        let mut live: Vec<&Section> = req.sections.iter().filter(|s| !reserved(s) && s.modes().contains(req.mode) && s.paths().contains(req.path)).collect();
        live.sort_by(|a, b| (a.layer(), std::cmp::Reverse(a.score()), a.id(), a.content_hash()).cmp(&(b.layer(), std::cmp::Reverse(b.score()), b.id(), b.content_hash())));
        let (mut ids, mut keys): (BTreeSet<String>, BTreeSet<String>) = (identity_ids.clone(), identity_keys.clone());
        let mut model: BTreeMap<String, Layer> = BTreeMap::new();
        for s in live {
            if ids.contains(s.id().as_str()) || s.key().is_some_and(|k| keys.contains(k.as_str())) { continue; }
            ids.insert(s.id().to_string());
            if let Some(k) = s.key() { keys.insert(k.to_string()); model.insert(k.to_string(), s.layer().into()); }
        }
        let mut out_keys = BTreeSet::new();
        for p in parse(ctx.text()).unwrap().into_iter().skip(agent.identity().sections().len()) {
            let Parsed::Section { layer, id, key, .. } = p else { continue };
            prop_assert!(!identity_ids.contains(&id), "runtime section reused identity id {}", id);
            if let Some(k) = key {
                prop_assert!(!identity_keys.contains(&k), "key {} overrides identity", k);
                prop_assert!(out_keys.insert(k.clone()), "key {} twice", k);
                prop_assert_eq!(model.get(&k).copied(), Some(layer), "key {}", k);
            }
        }
    }

    /// Verifies I6 (ADR-0013): the same inputs give the same bytes, whatever their order and
    /// whether the cache is warm.
    #[test]
    fn deterministic(req in request(), seed in any::<u64>()) {
        let a = assembler().assemble(agent(), &req);
        let mut shuffled = req.clone();
        let n = shuffled.sections.len();
        if n > 1 {
            for i in 0..n {
                shuffled.sections.swap(i, (seed as usize).wrapping_add(i * 7) % n);
            }
        }
        let fresh = Assembler::o200k();
        let b = fresh.assemble(agent(), &shuffled);
        match (a, b) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a.text(), b.text()),
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => return Err(TestCaseError::fail(format!("{:?} vs {:?}", a.is_ok(), b.is_ok()))),
        }
    }

    /// Verifies I6 (ADR-0013): with room for everything, changing only dynamic content leaves
    /// the stable prefix byte-identical.
    #[test]
    fn stable_prefix_survives_dynamic_changes(req in request(), extra in content()) {
        let mut roomy = req.clone();
        roomy.budget = Some(BudgetSpec::Explicit(Budget::with_total(200_000)));
        let Ok(a) = assembler().assemble(agent(), &roomy) else { return Ok(()) };
        let mut changed = roomy.clone();
        changed.sections = roomy.sections.iter().map(|s| {
            if s.stability() == Stability::Dynamic { s.with_content(format!("{}{}", s.content(), extra)) } else { s.clone() }
        }).collect();
        let b = assembler().assemble(agent(), &changed).unwrap();
        prop_assert_eq!(a.stable_prefix(), b.stable_prefix());
        prop_assert!(a.stable_prefix().starts_with(agent().identity_text()));
    }
}

/// Sections with unique ids and priorities, so that the keep order is known without the
/// assembler: turns of layer 5 (tool calls and results sharing a call id form one unit),
/// sections of other layers, a few small sticky ones, and every kind of cut.
fn fill_request() -> impl Strategy<Value = (Vec<Section>, u32)> {
    let one = (
        0usize..4,
        0usize..4,
        proptest::option::of(proptest::sample::select(&["c1", "c2", "c3"][..])),
        0usize..3,
        proptest::bool::weighted(0.08),
        (1usize..40, 0usize..3),
    );
    (proptest::collection::vec(one, 1..16), 150u32..900).prop_map(|(specs, extra)| {
        let sections = specs
            .into_iter()
            .enumerate()
            .map(|(i, (l, role, call, keep, sticky, (words, style)))| {
                let layer = RuntimeLayer::ALL[l];
                let words = if sticky { 3 } else { words * [1, 4, 25][style] };
                let text: String = (0..words)
                    .map(|w| ["alpha ", "beta ", "gamma\n", "delta ", "42 ", "ε "][(w * 7 + i) % 6])
                    .collect();
                let mut b = Section::builder(layer, format!("s{i}"), text)
                    .unwrap()
                    .priority((i as u32 * 7919) % 1000 + 1)
                    .sticky(sticky)
                    .keep([Keep::Head, Keep::Tail, Keep::Both][keep]);
                if layer == RuntimeLayer::WorkingMemory {
                    let role = [
                        Role::User,
                        Role::Assistant,
                        Role::ToolCall,
                        Role::ToolResult,
                    ][role];
                    let call = call.filter(|_| matches!(role, Role::ToolCall | Role::ToolResult));
                    b = b.turn(Turn {
                        seq: i as u64,
                        role,
                        call_id: call.map(Into::into),
                        name: None,
                        is_error: false,
                        reasoning: Vec::new(),
                    });
                }
                b.build()
            })
            .collect();
        (sections, 140 + extra)
    })
}

/// The working-memory user turns with the highest sequence number among the sections that
/// took part (neither filtered nor overridden), as (id, content hash): the newest user turn,
/// worked out here from the sections and the report (ADR-0030). More than one only on a tie.
/// Ids may repeat, so a report entry is matched by id and content hash.
fn newest_user_turns(sections: &[Section], report: &Report) -> BTreeSet<(String, ContentHash)> {
    let took_part = |s: &Section| {
        report.sections.iter().any(|r| {
            is_entry_of(r, s)
                && !matches!(
                    r.status,
                    SectionStatus::Filtered { .. } | SectionStatus::Overridden { .. }
                )
        })
    };
    let users: Vec<(u64, &Section)> = sections
        .iter()
        .filter(|s| s.layer() == RuntimeLayer::WorkingMemory && took_part(s))
        .filter_map(|s| {
            s.turn()
                .filter(|t| t.role == Role::User)
                .map(|t| (t.seq, s))
        })
        .collect();
    let top = users.iter().map(|u| u.0).max();
    users
        .into_iter()
        .filter(|u| Some(u.0) == top)
        .map(|u| (u.1.id().to_string(), u.1.content_hash()))
        .collect()
}

/// Whether report entry `r` describes section `s`.
fn is_entry_of(r: &SectionReport, s: &Section) -> bool {
    r.id == s.id().as_str() && r.provenance.content_hash == s.content_hash()
}

/// Whether report entry `r` describes one of `newest`.
fn is_newest(newest: &BTreeSet<(String, ContentHash)>, r: &SectionReport) -> bool {
    newest.contains(&(r.id.to_string(), r.provenance.content_hash))
}

fn reference(text: &str) -> u64 {
    tiktoken_rs::o200k_base_singleton()
        .encode_ordinary(text)
        .len() as u64
}

/// The fenced element of an uncut section, written with the format's own writer (ADR-0009).
fn element(s: &Section) -> String {
    use strata_core::format::{self, Authority, SectionHeader};
    let turn = s.turn();
    let role = turn.map(|t| t.role);
    let source = s.provenance().source.label();
    let h = SectionHeader {
        source: Some(&source),
        authority: Authority::of_runtime(s.layer(), role),
        role,
        call: turn.and_then(|t| t.call_id.as_deref()),
        ..SectionHeader::new(s.layer().into(), s.id().as_str())
    };
    let mut out = String::new();
    format::write_untrusted(&mut out, &h, s.content().as_str(), Encoding::Escaped);
    out
}

proptest! {
    /// Verifies ADR-0037 with reference counts (tiktoken-rs): filling the budget never keeps a
    /// less important unit in place of a more important one. Every unit dropped for the budget
    /// could not have fit even if all less important kept units were removed (allowing for the
    /// reserved omission markers); a section is reported as filled exactly when a more
    /// important unit was dropped before it; the idle budget is what the output leaves unused;
    /// and the budget is never exceeded, identity first and intact.
    #[test]
    fn filling_never_displaces_a_more_important_unit((sections, total) in fill_request()) {
        let agent = agent();
        let req = AssemblyRequest {
            sections: sections.clone(),
            budget: Some(BudgetSpec::Explicit(Budget::with_total(total))),
            ..Default::default()
        };
        let Ok(ctx) = assembler().assemble(agent, &req) else { return Ok(()) };
        let r = ctx.report();
        let used = reference(ctx.text());
        prop_assert_eq!(r.used_tokens, used);
        prop_assert!(used <= r.prompt_budget);
        prop_assert!(ctx.text().starts_with(agent.identity_text()));
        prop_assert_eq!(ctx.text().matches(agent.identity_text()).count(), 1);

        // Units and the keep order, worked out here from the sections alone.
        let status: BTreeMap<&str, &SectionReport> = r.sections.iter().map(|s| (s.id.as_str(), s)).collect();
        let mut units: Vec<Vec<&Section>> = Vec::new();
        let mut of_call: BTreeMap<String, usize> = BTreeMap::new();
        for s in &sections {
            match s.turn().and_then(|t| t.call_id.as_deref()) {
                Some(c) if s.layer() == RuntimeLayer::WorkingMemory => {
                    let u = *of_call.entry(c.to_owned()).or_insert_with(|| { units.push(Vec::new()); units.len() - 1 });
                    units[u].push(s);
                }
                _ => units.push(vec![s]),
            }
        }
        let rank = |u: &Vec<&Section>| {
            let seq = u.iter().filter_map(|s| s.turn().map(|t| t.seq)).min();
            let score = u.iter().map(|s| s.score()).max().unwrap_or(0);
            (u[0].layer(), std::cmp::Reverse(seq.is_some()), std::cmp::Reverse(seq.unwrap_or(0)), std::cmp::Reverse(score))
        };
        // The newest user turn is sticky whatever its section says (ADR-0030).
        let newest = newest_user_turns(&sections, r);
        let sticky = |u: &Vec<&Section>| u.iter().any(|s| s.sticky() || newest.contains(&(s.id().to_string(), s.content_hash())));
        let dropped = |u: &Vec<&Section>| u.iter().any(|s| matches!(status[s.id().as_str()].status, SectionStatus::Dropped { .. }));
        let kept_tokens = |u: &Vec<&Section>| -> u64 {
            u.iter().map(|s| match status[s.id().as_str()].status {
                SectionStatus::Kept => reference(&element(s)),
                _ => status[s.id().as_str()].tokens,
            }).sum()
        };
        // Upper bound of the omission markers that may have been reserved meanwhile.
        let mut reserve = 0;
        for l in RuntimeLayer::ALL {
            let in_layer: Vec<&Section> = sections.iter().filter(|s| s.layer() == l).collect();
            if in_layer.is_empty() { continue; }
            let n = 10 * in_layer.len().max(10);
            let b = 10 * in_layer.iter().map(|s| s.content().as_str().len()).sum::<usize>().max(10);
            let mut m = String::new();
            strata_core::format::write_omitted(&mut m, l.into(), &format!("{n} sections"), "budget", b as u64);
            reserve += reference(&m);
        }
        for d in units.iter().filter(|u| !sticky(u)) {
            let budget_drop = d.iter().any(|s| matches!(&status[s.id().as_str()].status, SectionStatus::Dropped { reason } if reason == "budget"));
            let more_important_dropped = units.iter().any(|u| !sticky(u) && rank(u) < rank(d) && dropped(u));
            for s in d {
                let rep = status[s.id().as_str()];
                if matches!(rep.status, SectionStatus::Kept | SectionStatus::Cut { .. }) {
                    prop_assert_eq!(rep.filled, more_important_dropped, "filled flag of {}", s.id());
                }
            }
            if !budget_drop { continue; }
            let need: u64 = d.iter().map(|s| reference(&element(s))).sum();
            let lower: u64 = units.iter()
                .filter(|u| !sticky(u) && rank(u) > rank(d) && !dropped(u))
                .map(kept_tokens)
                .sum();
            prop_assert!(
                need + reserve + used > r.prompt_budget + lower,
                "unit {} ({} tokens) dropped while {} tokens of less important units were kept (used {}, budget {})",
                d[0].id(), need, lower, used, r.prompt_budget
            );
        }
        let any_dropped = r.sections.iter().any(|s| matches!(s.status, SectionStatus::Dropped { .. }));
        prop_assert_eq!(r.idle_tokens, if any_dropped { r.prompt_budget - used } else { 0 });
    }
}

/// One change between two calls of a long-lived assembler.
#[derive(Debug, Clone)]
enum Change {
    /// New text for the section at this position (modulo the length).
    Edit(usize, String),
    /// The section at this position left out.
    Remove(usize),
    /// A new section.
    Add(Box<Section>),
    /// The sections in another order.
    Shuffle(u64),
    /// Another prompt budget.
    Budget(u32),
    /// The section at this position under another id (from the ids above, so it may take an
    /// id another section or the identity holds), everything else kept: the same number of
    /// sections, so the next call may start from what the last one learnt of their ids.
    Rename(usize, usize),
    /// The section at this position with another key, or none.
    Rekey(usize, Option<usize>),
    /// Nothing changed: the same request again.
    Same,
}

/// `s` with another id, key and stickiness, everything else kept, in new allocations for the
/// id, the text and the provenance name.
fn rebuilt(s: &Section, id: &str, key: Option<&str>, sticky: bool) -> Section {
    let mut b = Section::builder(s.layer(), id, s.content().as_str().to_owned())
        .unwrap()
        .priority(s.priority())
        .phase(s.phase())
        .stability(s.stability())
        .weight(s.weight())
        .modes(s.modes())
        .paths(s.paths())
        .keep(s.keep())
        .sticky(sticky)
        .source(s.provenance().source.clone(), &*s.provenance().name);
    if let Some(k) = key {
        b = b.key(k).unwrap();
    }
    if let Some(t) = s.turn() {
        b = b.turn(t.clone());
    }
    b.build()
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => (any::<usize>(), content()).prop_map(|(i, t)| Change::Edit(i, t)),
        1 => any::<usize>().prop_map(Change::Remove),
        1 => section().prop_map(|s| Change::Add(Box::new(s))),
        1 => any::<u64>().prop_map(Change::Shuffle),
        1 => (0u32..1500).prop_map(Change::Budget),
        1 => (any::<usize>(), 0..IDS.len()).prop_map(|(i, id)| Change::Rename(i, id)),
        1 => (any::<usize>(), proptest::option::of(0..KEYS.len()))
            .prop_map(|(i, k)| Change::Rekey(i, k)),
        2 => Just(Change::Same),
    ]
}

/// A change to a request that a kept whole assembly must notice, or must see through.
#[derive(Debug, Clone)]
enum Repeat {
    /// One of the section changes above.
    Sections(Change),
    /// Another prompt mode (no section changes).
    Mode(usize),
    /// Another assembly path.
    Path(usize),
    /// Another encoding for layer 6.
    Encoding(usize),
    /// The section at this position rebuilt with the same id and text in new allocations,
    /// its stickiness flipped or not: equal or unequal without any shared text.
    Rebuild(usize, bool),
    /// A provider request, or the plain text.
    Provider(Option<Provider>),
    /// Another time of the call, which changes nothing in the output.
    Clock(i64),
}

fn repeat() -> impl Strategy<Value = Repeat> {
    prop_oneof![
        4 => change().prop_map(Repeat::Sections),
        1 => (0usize..4).prop_map(Repeat::Mode),
        1 => (0usize..5).prop_map(Repeat::Path),
        1 => (0usize..3).prop_map(Repeat::Encoding),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(i, f)| Repeat::Rebuild(i, f)),
        1 => proptest::option::of(proptest::sample::select(&[
            Provider::OpenAiChat,
            Provider::Anthropic,
        ][..]))
        .prop_map(Repeat::Provider),
        1 => (1_700_000_000_000i64..1_800_000_000_000).prop_map(Repeat::Clock),
    ]
}

fn apply_repeat(req: &mut AssemblyRequest, change: &Repeat) {
    let n = req.sections.len();
    match change {
        Repeat::Sections(c) => apply(req, c),
        Repeat::Mode(m) => req.mode = PromptMode::ALL[*m],
        Repeat::Path(p) => req.path = AssemblyPath::ALL[*p],
        Repeat::Encoding(e) => {
            req.render = RenderOptions::default().with_encoding(
                RuntimeLayer::LongTermMemory,
                [Encoding::Escaped, Encoding::Datamark, Encoding::Base64][*e],
            );
        }
        Repeat::Rebuild(i, flip) if n > 0 => {
            let s = &req.sections[i % n];
            let key = s.key().map(|k| k.as_str());
            req.sections[i % n] = rebuilt(s, s.id().as_str(), key, s.sticky() != *flip);
        }
        Repeat::Provider(p) => req.provider = *p,
        Repeat::Clock(t) => req.now_ms = Some(*t),
        _ => {}
    }
}

fn apply(req: &mut AssemblyRequest, change: &Change) {
    let n = req.sections.len();
    match change {
        Change::Edit(i, text) if n > 0 => {
            let s = &req.sections[i % n];
            req.sections[i % n] = s.with_content(format!("{}{text}", s.content()));
        }
        Change::Remove(i) if n > 0 => {
            req.sections.remove(i % n);
        }
        Change::Add(s) => req.sections.push((**s).clone()),
        Change::Shuffle(seed) if n > 1 => {
            for i in 0..n {
                req.sections
                    .swap(i, (*seed as usize).wrapping_add(i * 7) % n);
            }
        }
        Change::Rename(i, id) if n > 0 => {
            let s = &req.sections[i % n];
            req.sections[i % n] = rebuilt(s, IDS[*id], s.key().map(|k| k.as_str()), s.sticky());
        }
        Change::Rekey(i, key) if n > 0 => {
            let s = &req.sections[i % n];
            req.sections[i % n] = rebuilt(s, s.id().as_str(), key.map(|k| KEYS[k]), s.sticky());
        }
        Change::Budget(extra) => {
            if let Some(BudgetSpec::Explicit(b)) = &mut req.budget {
                b.total_tokens = 140 + 80 + extra + b.response_reserve;
            }
        }
        _ => {}
    }
}

/// The same answer, or the same error, from the engine (`a`) and the plain kernel (`b`):
/// text, conversation, provider request body and report.
fn same_answer(
    what: &str,
    req: &AssemblyRequest,
    a: Result<AssembledContext, AssembleError>,
    b: Result<AssembledContext, AssembleError>,
) -> Result<(), TestCaseError> {
    match (a, b) {
        (Ok(a), Ok(b)) => {
            prop_assert_eq!(a.text(), b.text(), "{}: text", what);
            prop_assert_eq!(a.conversation(), b.conversation(), "{}: conversation", what);
            prop_assert_eq!(a.report(), b.report(), "{}: report", what);
            if let Some(p) = req.provider {
                let params = RequestParams {
                    model: "m".into(),
                    max_tokens: Some(256),
                    ..Default::default()
                };
                prop_assert_eq!(
                    a.request_body(p, &params).ok(),
                    b.request_body(p, &params).ok(),
                    "{}: request body",
                    what
                );
            }
        }
        (Err(a), Err(b)) => prop_assert_eq!(a, b, "{}: error", what),
        (a, b) => {
            return Err(TestCaseError::fail(format!(
                "{what}: engine {:?}, kernel {:?}",
                a.map(|c| c.text().len()),
                b.map(|c| c.text().len())
            )))
        }
    }
    Ok(())
}

proptest! {
    /// Verifies ADR-0037: the memoisation engine changes nothing but speed. One assembler is
    /// taken through a random request and a random sequence of changes to it (sections added,
    /// removed, edited, reordered, renamed, rekeyed or rebuilt from new allocations; the budget
    /// moved; mode, path, encoding, provider or clock changed), each request made one to three
    /// times in a row, with a roomy or a tiny cache and a small or large first walk window; at
    /// every call its answer equals the plain kernel's for the same request: the same bytes,
    /// conversation, provider request body and report, or the same error.
    #[test]
    fn engine_equals_kernel(
        first in request(),
        steps in proptest::collection::vec((repeat(), 1usize..4), 1..8),
        tiny_cache in proptest::bool::weighted(0.25),
        walk_window in proptest::sample::select(&[1usize, 8, 64][..]),
    ) {
        let engine = if tiny_cache {
            Assembler::o200k().with_cache_limit(4_096)
        } else {
            Assembler::o200k()
        }
        .with_walk_window(walk_window);
        let mut req = first;
        req.provider_options.pairs = PairPolicy::DropUnpaired;
        for (step, (change, times)) in steps.iter().enumerate() {
            apply_repeat(&mut req, change);
            for run in 0..*times {
                let what = format!("step {step} run {run}: {change:?}");
                let kernel = engine.assemble_plain(agent(), &req);
                same_answer(&what, &req, engine.assemble(agent(), &req), kernel)?;
            }
        }
    }

    /// Verifies ADR-0037: the caches (elements, probes over the room, cut results, lower
    /// bounds) and the orders kept from the last call never change an assembly. One assembler
    /// taken through a random sequence of requests (text edited, sections added, removed and
    /// reordered, the budget moved, the same request again), with a roomy or a tiny cache
    /// limit, gives at every step exactly the bytes, the provider conversation and the report
    /// of the plain kernel (ADR-0037), or the same error.
    #[test]
    fn warm_assembly_equals_cold(
        first in request(),
        changes in proptest::collection::vec(change(), 1..6),
        tiny_cache in proptest::bool::weighted(0.25),
        provider in proptest::option::of(proptest::sample::select(&[
            Provider::OpenAiChat,
            Provider::Anthropic,
        ][..])),
    ) {
        let warm = if tiny_cache {
            Assembler::o200k().with_cache_limit(4_096)
        } else {
            Assembler::o200k()
        };
        let mut req = first;
        req.provider = provider;
        req.provider_options.pairs = PairPolicy::DropUnpaired;
        for (step, change) in std::iter::once(&Change::Same).chain(&changes).enumerate() {
            apply(&mut req, change);
            let a = warm.assemble(agent(), &req);
            let b = warm.assemble_plain(agent(), &req);
            same_answer(&format!("step {step}: {change:?}"), &req, a, b)?;
        }
    }

    /// Verifies ADR-0037: the whole assembly kept from an earlier call is given back
    /// only for exactly the same request. One assembler is taken through random requests, each
    /// made one or more times in a row (so results are kept and served), changed between runs
    /// in their sections or in a setting alone (mode, path, encoding, provider, budget), with
    /// sections rebuilt from new allocations equal or not, and with the time of the call moved
    /// (in some cases each request is first made twenty times, so that it is kept and the
    /// checked answers are served from the kept entry); every answer equals a fresh
    /// assembler's, which is the plain kernel's (ADR-0037): bytes, conversation and report.
    #[test]
    fn kept_whole_assembly_equals_a_fresh_one(
        first in request(),
        steps in proptest::collection::vec((repeat(), 1usize..4), 1..7),
        tiny_cache in proptest::bool::weighted(0.2),
        run_long in proptest::bool::weighted(0.3),
    ) {
        let warm = if tiny_cache {
            Assembler::o200k().with_cache_limit(4_096)
        } else {
            Assembler::o200k()
        };
        let mut req = first;
        req.provider_options.pairs = PairPolicy::DropUnpaired;
        for (step, (change, times)) in steps.iter().enumerate() {
            apply_repeat(&mut req, change);
            if run_long {
                // Long enough for the kept entry to be stored and served.
                for _ in 0..20 {
                    warm.assemble(agent(), &req).ok();
                }
            }
            let fresh = Assembler::o200k().assemble(agent(), &req);
            for run in 0..*times {
                let got = warm.assemble(agent(), &req);
                match (&got, &fresh) {
                    (Ok(a), Ok(b)) => {
                        prop_assert_eq!(a.text(), b.text(), "step {} run {}: {:?}", step, run, change);
                        prop_assert_eq!(a.conversation(), b.conversation(), "step {} run {}", step, run);
                        prop_assert_eq!(a.report(), b.report(), "step {} run {}: {:?}", step, run, change);
                    }
                    (Err(a), Err(b)) => prop_assert_eq!(a, b),
                    (a, b) => {
                        return Err(TestCaseError::fail(format!(
                            "step {step} run {run}: warm {:?}, fresh {:?}",
                            a.as_ref().map(|c| c.text().len()),
                            b.as_ref().map(|c| c.text().len())
                        )))
                    }
                }
            }
        }
    }
}

/// A user's tokenizer: o200k_base's counts and searches behind the plain trait alone, so an
/// assembler finds no resumable walks in it and takes none of their shortcuts (ADR-0040).
#[derive(Debug)]
struct Plain(strata_core::TiktokenTokenizer);

impl strata_core::Tokenizer for Plain {
    fn name(&self) -> &str {
        "plain o200k_base"
    }
    fn count(&self, text: &str) -> usize {
        self.0.count(text)
    }
    fn count_up_to(&self, text: &str, limit: usize) -> Option<usize> {
        self.0.count_up_to(text, limit)
    }
    fn prefix(&self, text: &str, max_tokens: usize) -> strata_core::Prefix {
        self.0.prefix(text, max_tokens)
    }
    fn suffix(&self, text: &str, max_tokens: usize) -> strata_core::Prefix {
        self.0.suffix(text, max_tokens)
    }
}

proptest! {
    /// Verifies ADR-0040: a tokenizer without resumable walks (a user's, here o200k_base behind
    /// the plain trait) is counted and cut with its plain methods, and every promise holds: at
    /// each call of a random sequence of requests the engine equals the kernel, the assembly is
    /// within its budget, and for a plain-text request its count is tiktoken-rs's count of the
    /// text.
    #[test]
    fn a_tokenizer_without_resumable_walks_keeps_every_promise(
        first in request(),
        steps in proptest::collection::vec((repeat(), 1usize..3), 1..4),
    ) {
        let tok: std::sync::Arc<dyn strata_core::Tokenizer> =
            std::sync::Arc::new(Plain(strata_core::TiktokenTokenizer::o200k()));
        prop_assert!(tok.resumable().is_none());
        let engine = Assembler::new(tok).with_walk_window(8);
        let mut req = first;
        req.provider_options.pairs = PairPolicy::DropUnpaired;
        for (step, (change, times)) in steps.iter().enumerate() {
            apply_repeat(&mut req, change);
            for run in 0..*times {
                let what = format!("step {step} run {run}: {change:?}");
                let kernel = engine.assemble_plain(agent(), &req);
                let got = engine.assemble(agent(), &req);
                if let Ok(ctx) = &got {
                    let r = ctx.report();
                    prop_assert!(r.used_tokens <= r.prompt_budget, "{}", what);
                    if req.provider.is_none() {
                        prop_assert_eq!(r.used_tokens, reference(ctx.text()), "{}", what);
                    }
                }
                same_answer(&what, &req, got, kernel)?;
            }
        }
    }
}
