// Sections are immutable once built: fields are private and there is no setter (I7, ADR-0004).
fn main() {
    let s = strata_core::Section::builder(strata_core::RuntimeLayer::Shared, "x", "a").unwrap().build();
    s.layer = strata_core::RuntimeLayer::Delegated;
}
