// A verified identity cannot be built outside the verifying loader (I7, ADR-0004).
fn main() {
    let _forged = strata_agentdef::VerifiedAgent { inner: todo!() };
}
