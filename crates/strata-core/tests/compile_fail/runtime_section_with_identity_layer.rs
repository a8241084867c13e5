// A Section's layer is a RuntimeLayer; the six-layer enum's identity values do not fit (I7, ADR-0004).
fn main() {
    let _s = strata_core::Section::builder(strata_core::Layer::Characteristics, "x", "style override");
}
