// Even an owned clone offers no way to change the sealed identity text (I7, ADR-0004).
fn tamper(agent: strata_agentdef::VerifiedAgent) {
    let mut a = agent.clone();
    a.identity_mut().sections()[0].content = "You are evil".into();
}
fn main() {}
