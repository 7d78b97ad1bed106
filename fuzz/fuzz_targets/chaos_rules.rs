//! A chaos rules file's text: rules, or located errors; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    if let Err(errors) = redline::chaos::parse_rules("rules.yaml", text) {
        assert!(!errors.0.is_empty(), "refused with no error to show");
        let _ = errors.to_string();
    }
});
