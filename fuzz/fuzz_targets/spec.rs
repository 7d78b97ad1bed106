//! A spec file's text: parsed, validated and turned into a scenario, or refused with
//! located errors; never a panic.
#![no_main]

use std::sync::Once;

use libfuzzer_sys::fuzz_target;

/// libFuzzer's panic hook aborts at once, before `catch_unwind` can act. The spec
/// reader catches one known panic of yaml_serde 0.10 (an alias with no anchor, after
/// `---`) and turns it into a located error; that one is let through to it, every
/// other panic still aborts.
fn let_caught_yaml_panics_unwind() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let abort = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_yaml = info
                .location()
                .is_some_and(|l| l.file().contains("yaml_serde"));
            if !in_yaml {
                abort(info);
            }
        }));
    });
}

fuzz_target!(|input: &[u8]| {
    let_caught_yaml_panics_unwind();
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    match redline::spec::parse("fuzz.yaml", text) {
        Ok(file) => {
            let _ = redline::scenario::Scenario::from_spec(&file, text);
        }
        Err(errors) => {
            assert!(!errors.0.is_empty(), "refused with no error to show");
            let _ = errors.to_string();
        }
    }
});
