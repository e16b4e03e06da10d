//! Pauses as the CLI and the web page ask for them: the markers themselves
//! are the model's (`jobwarden_model::control`); what is checked before
//! one is written is here, once.

use jobwarden_model::config::Config;
use jobwarden_model::control::Scope;

/// Why a pause of `scope` would pause nothing: a profile the config does
/// not define (a typo would otherwise pause nothing, silently), said with
/// the profiles it does define. `None` when the pause may be written.
/// Resuming takes any name, to lift a marker left from an old config.
pub fn pauses_nothing(config: &Config, scope: &Scope) -> Option<String> {
    let Scope::Profile(p) = scope else {
        return None;
    };
    if config.profiles.contains_key(p) {
        return None;
    }
    Some(format!(
        "profile {p:?}: no such profile in {}; the profiles are: {}",
        config.source,
        config
            .profiles
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    ))
}
