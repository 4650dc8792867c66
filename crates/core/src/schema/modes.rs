//! The choices a rule (or the whole file) makes about sharing, paying and failing: [`Mode`],
//! [`ChargeMode`], [`Fallback`], and which caller overrides apply ([`LimitOverrides`]).

use serde::Deserialize;

/// Which caller-supplied limits (Envoy's per-descriptor `limit`) sluice honours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitOverrides {
    /// On descriptors that match a configured rule (the override replaces its limit). Default:
    /// a caller cannot create limits, and so keys, for descriptors the config does not know.
    #[default]
    RulesOnly,
    /// On any descriptor (envoyproxy/ratelimit's behaviour).
    Any,
    /// Never.
    Ignore,
}

/// How a limit is shared across sluice instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// One global limit; instances lease tokens in batches and decide locally (default).
    #[default]
    Strict,
    /// One global limit; every decision asks the global store.
    Exact,
    /// A limit per instance; never touches the global store.
    Local,
}

impl Mode {
    /// The config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Strict => "strict",
            Mode::Exact => "exact",
            Mode::Local => "local",
        }
    }
}

/// When a rule's hits are paid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChargeMode {
    /// A request pays before it passes, and is denied if it cannot (default).
    #[default]
    Prepaid,
    /// Usage reported after the fact is charged in full, into debt up to `max_debt`; checks are
    /// denied while the bucket is empty or in debt.
    PostPaid,
}

/// What a rule does while the global store cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    /// Enforce this instance's share of the limit locally (default).
    #[default]
    LocalShare,
    /// Allow every request.
    Allow,
    /// Deny every request.
    Deny,
}

impl Fallback {
    /// The config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Fallback::LocalShare => "local_share",
            Fallback::Allow => "allow",
            Fallback::Deny => "deny",
        }
    }
}
