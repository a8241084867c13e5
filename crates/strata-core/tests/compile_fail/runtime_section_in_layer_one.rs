// Runtime content cannot be placed in layer 1 or 2: RuntimeLayer has no such variant (I7, ADR-0004).
fn main() {
    let _s = strata_core::Section::builder(strata_core::RuntimeLayer::Core, "x", "I am the core");
}
