//! Fuzz target: the wire format. Verifies I3 (ADR-0009): for any bytes, escaping is reversed
//! exactly, a fenced section parses back to exactly its text in every encoding, the escaped
//! text holds no raw boundary characters, and parsing arbitrary text never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_core::format::{self, Encoding, Parsed, SectionHeader};
use strata_core::Layer;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let escaped = format::escape(&text);
    assert!(!escaped.contains('<') && !escaped.contains('>'));
    assert_eq!(format::unescape(&escaped).expect("escape output must unescape"), text);
    for enc in [Encoding::Escaped, Encoding::Datamark, Encoding::Base64] {
        let mut out = String::new();
        let h = SectionHeader { key: Some("k"), source: Some(&text), ..SectionHeader::new(Layer::WorkingMemory, "fuzz.1") };
        format::write_untrusted(&mut out, &h, &text, enc);
        let parsed = format::parse(&out).expect("our own output must parse");
        assert_eq!(parsed.len(), 1, "one section in, one section out");
        match &parsed[0] {
            Parsed::Section { layer, text: t, source, .. } => {
                assert_eq!(*layer, Layer::WorkingMemory);
                assert_eq!(t.as_str(), &*text);
                assert_eq!(source.as_deref(), Some(&*text));
            }
            Parsed::Omitted { .. } => panic!("a section came back as a marker"),
        }
    }
    let _ = format::parse(&text);
});
