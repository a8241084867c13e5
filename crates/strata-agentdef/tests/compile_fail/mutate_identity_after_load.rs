// Layers 1-2 cannot be mutated after load: no &mut access, no setter (I7, ADR-0004).
fn tamper(agent: &strata_agentdef::VerifiedAgent) {
    let sections = agent.identity().sections();
    sections[0] = sections[1].clone();
}
fn main() {}
