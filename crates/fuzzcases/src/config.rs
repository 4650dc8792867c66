//! Any text given as a config: an error with a location, or a config; never a panic, a hang or an
//! overflow (YAML alias bombs, huge numbers and durations, deep nesting, odd Unicode).

/// One input: any bytes as a config file.
pub fn one(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match sluice_core::parse_config(text) {
        Ok(config) => {
            // Whatever loads is usable: every rule can be matched against its own path.
            for rule in config.rules.rules() {
                let _ = config.rules.match_descriptor(&rule.domain, &[]);
            }
        }
        Err(e) => assert!(!e.message.is_empty()),
    }
}
