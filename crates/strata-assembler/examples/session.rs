//! A three-turn, tool-using session on the embedded SQLite store: a question, a tool call and
//! its result, a follow-up. Each turn prints the Anthropic request body the runtime would send.
//! Run it with `cargo run -p strata-assembler --example session`.
#![allow(
    clippy::print_stdout,
    reason = "an example program prints what it does"
)]

use std::path::Path;

use serde_json::json;
use strata_assembler::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The demo agent, signed with the public demo key, and the trust store trusting only it.
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../strata-cli/demo");
    let trust = TrustStore::read(&demo.join("trust.toml"))?;
    let agent = Loader::new(&trust, &RollbackGuard::in_memory())
        .load_file(&demo.join("agent.signed.json"))?;
    let dir = tempfile::tempdir()?;

    let runtime = Runtime::builder(agent)
        .sqlite(dir.path().join("memory.db"))
        .provider(Provider::Anthropic, "claude-sonnet-4-5")
        .max_tokens(1024)
        .tools(vec![AnnouncedTool::new(ToolName::new("file_read")?, "")])
        .build()?;
    let session = runtime.session("example");
    let turn = TurnOptions::default();

    let first = session.prepare("What does notes.txt say about deploys?", &turn)?;
    println!("turn 1:\n{}", serde_json::to_string_pretty(&first.body)?);
    let call = json!({ "path": "notes.txt" });
    session.record_reply(&Reply::tool_call(
        "call_1",
        ToolName::new("file_read")?,
        call,
    ))?;
    session.record_tool_result("call_1", "Deploys freeze on Fridays at noon.")?;

    let second = session.continue_turn(&turn)?;
    println!("turn 2:\n{}", serde_json::to_string_pretty(&second.body)?);
    session.record_reply(&Reply::text(
        "The notes say deploys freeze on Fridays at noon.",
    ))?;

    let third = session.prepare("Thanks. Is Thursday afternoon fine?", &turn)?;
    println!("turn 3:\n{}", serde_json::to_string_pretty(&third.body)?);
    let r = third.report().request.as_ref().ok_or("no request report")?;
    println!(
        "{} messages, {} tokens ({})",
        r.messages, r.total_tokens, r.count
    );
    Ok(())
}
