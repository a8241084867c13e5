//! Test contributors shared by the integration tests.
#![allow(dead_code, reason = "each test file uses a different part")]
#![allow(clippy::unwrap_used, reason = "test helpers fail the test on purpose")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use strata_core::{ContentHash, RuntimeLayer, Section, SourceKind, Stability};
use strata_registry::{
    CachePolicy, ContributionContext, Contributor, ContributorError, ContributorMeta,
};

/// What a test contributor does when asked.
#[derive(Clone)]
pub enum Behaviour {
    /// Return sections with these ids and the current text.
    Sections(Vec<&'static str>),
    /// Fail with a source error.
    Fail,
    /// Panic.
    Panic,
    /// Sleep, then return one section.
    Sleep(Duration),
    /// Block until the gate opens, then return one section.
    Gate(Arc<Gate>),
    /// Wait (up to 5 s) until `n` contributors sharing the rendezvous are all running.
    Rendezvous(Arc<Gate>, usize),
    /// Return one section of another layer and one of its own.
    WrongLayer(RuntimeLayer),
    /// Return one section whose source is not the contributor's MCP server.
    ForgeSource,
}

/// A configurable contributor that counts its calls.
pub struct TestContributor {
    pub id: String,
    pub layer: RuntimeLayer,
    pub meta: ContributorMeta,
    pub behaviour: Behaviour,
    pub text: Mutex<String>,
    pub calls: AtomicUsize,
    pub policy: Option<CachePolicy>,
}

impl TestContributor {
    pub fn new(id: &str, layer: RuntimeLayer, behaviour: Behaviour) -> TestContributor {
        TestContributor {
            id: id.to_owned(),
            layer,
            meta: ContributorMeta::default(),
            behaviour,
            text: Mutex::new(format!("text of {id}")),
            calls: AtomicUsize::new(0),
            policy: None,
        }
    }

    pub fn with_meta(mut self, f: impl FnOnce(&mut ContributorMeta)) -> Self {
        f(&mut self.meta);
        self
    }

    pub fn stable(self) -> Self {
        self.with_meta(|m| m.stability = Stability::Stable)
    }

    pub fn with_policy(mut self, p: CachePolicy) -> Self {
        self.policy = Some(p);
        self
    }

    pub fn set_text(&self, t: &str) {
        *self.text.lock().unwrap() = t.to_owned();
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn section(&self, layer: RuntimeLayer, id: &str) -> Section {
        let text = self.text.lock().unwrap().clone();
        self.meta
            .section(&self.id, layer, id, text)
            .unwrap()
            .build()
    }
}

impl Contributor for TestContributor {
    fn id(&self) -> &str {
        &self.id
    }
    fn layer(&self) -> RuntimeLayer {
        self.layer
    }
    fn meta(&self) -> ContributorMeta {
        self.meta.clone()
    }
    fn cache_policy(&self) -> CachePolicy {
        self.policy.unwrap_or(match self.meta.stability {
            Stability::Stable => CachePolicy::UntilInvalidated,
            Stability::Dynamic => CachePolicy::Never,
        })
    }
    fn contribute(&self, _ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match &self.behaviour {
            Behaviour::Sections(ids) => {
                Ok(ids.iter().map(|i| self.section(self.layer, i)).collect())
            }
            Behaviour::Fail => Err(ContributorError::Source("disk on fire".into())),
            Behaviour::Panic => panic!("contributor {} panics on purpose", self.id),
            Behaviour::Sleep(d) => {
                std::thread::sleep(*d);
                Ok(vec![self.section(self.layer, "slept")])
            }
            Behaviour::Gate(g) => {
                g.wait_open();
                Ok(vec![self.section(self.layer, "gated")])
            }
            Behaviour::Rendezvous(g, n) => {
                if g.arrive_and_wait(*n) {
                    Ok(vec![self.section(self.layer, "met")])
                } else {
                    Err(ContributorError::Source("the others never arrived".into()))
                }
            }
            Behaviour::WrongLayer(other) => Ok(vec![
                self.section(*other, "elsewhere"),
                self.section(self.layer, "home"),
            ]),
            Behaviour::ForgeSource => Ok(vec![Section::builder(self.layer, "forged", "x")
                .unwrap()
                .source(SourceKind::Static, "built-in")
                .build()]),
        }
    }
}

/// A gate that test contributors block on, and a counter of arrivals.
#[derive(Default)]
pub struct Gate {
    state: Mutex<(bool, usize)>,
    cv: Condvar,
}

impl Gate {
    pub fn open(&self) {
        self.state.lock().unwrap().0 = true;
        self.cv.notify_all();
    }
    pub fn wait_open(&self) {
        let g = self.state.lock().unwrap();
        let _g = self.cv.wait_while(g, |s| !s.0).unwrap();
    }
    /// Count this arrival and wait until `n` have arrived; false after 5 s.
    pub fn arrive_and_wait(&self, n: usize) -> bool {
        let mut g = self.state.lock().unwrap();
        g.1 += 1;
        self.cv.notify_all();
        let (g, _) = self
            .cv
            .wait_timeout_while(g, Duration::from_secs(5), |s| s.1 < n)
            .unwrap();
        g.1 >= n
    }
}

pub fn ctx() -> ContributionContext {
    ContributionContext::new(
        "agent",
        ContentHash::of("definition-1"),
        "session-1",
        1_763_700_000_000,
    )
}

pub fn arc(c: TestContributor) -> Arc<TestContributor> {
    Arc::new(c)
}
