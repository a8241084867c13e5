//! A three-turn, tool-using session on the embedded SQLite store: a question, a tool call and
//! its result, a follow-up. Each turn prints the Anthropic request body the runtime would send.
//! Run it with `cargo run -p strata-assembler --example session`.
#![allow(
    clippy::print_stdout,
    reason = "an example program prints what it does"
)]

use std::path::Path;

use serde_json::json;
use strata_assembler::{agent::*, assemble::*, prelude::*};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The demo agent, signed with the public demo key, and the trust store trusting only it.
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../strata-cli/demo");
    let trust = TrustStore::read(&demo.join("trust.toml"))?;
    let agent = Loader::new(&trust, &RollbackGuard::in_memory())
        .load_file(&demo.join("agent.signed.json"))?;
    let dir = tempfile::tempdir()?;
    let read = ToolName::new("file_read")?;
    let runtime = Runtime::builder(agent)
        .sqlite(dir.path().join("memory.db"))
        .provider(Provider::Anthropic, "claude-sonnet-4-5")
        .max_tokens(1024)
        .tools(vec![AnnouncedTool::new(read.clone(), "")])
        .build()?;
    let (session, opts) = (runtime.session("example"), TurnOptions::default());
    let show = |n: u8, t: PreparedTurn| println!("turn {n}:\n{:#}", t.body);

    show(1, session.prepare("What does notes.txt say?", &opts)?);
    let path = json!({"path": "notes.txt"});
    session.record_reply(&Reply::tool_call("call_1", read, path))?;
    session.record_tool_result("call_1", "Deploys freeze on Fridays at noon.")?;
    show(2, session.continue_turn(&opts)?);
    session.record_reply(&Reply::text("They freeze on Fridays at noon."))?;
    show(3, session.prepare("Is Thursday afternoon fine?", &opts)?);
    Ok(())
}
