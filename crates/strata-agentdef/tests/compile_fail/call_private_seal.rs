// The sealing constructor is private to strata-agentdef (I7, ADR-0004).
fn main() {
    let _forged = strata_agentdef::VerifiedAgent::seal(todo!(), Vec::new(), String::new());
}
