// IdentityLayers hands out shared references only (I7, ADR-0004).
fn tamper(id: &strata_core::IdentityLayers) {
    let v: &mut Vec<strata_core::IdentitySection> = id.sections_mut();
    v.clear();
}
fn main() {}
