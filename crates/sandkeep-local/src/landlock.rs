//! Landlock, the confinement of the weaker fallback level (no
//! namespaces): the ruleset the process-only init puts itself under, and
//! that the doctor tries to tell whether the kernel enforces it. It only
//! restricts the calling process; it decides nothing about when to.

/// Restricts writes to `sandbox` and a few device files; true when the
/// kernel enforces it.
pub fn landlock_writes(sandbox: &std::path::Path) -> Result<bool, landlock::RulesetError> {
    use landlock::{
        ABI, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
        path_beneath_rules,
    };
    let abi = ABI::V6;
    let writable = [
        sandbox,
        std::path::Path::new("/dev/null"),
        std::path::Path::new("/dev/zero"),
        std::path::Path::new("/dev/full"),
        std::path::Path::new("/dev/tty"),
    ];
    let status = Ruleset::default()
        .handle_access(AccessFs::from_write(abi))?
        .scope(Scope::Signal)?
        .scope(Scope::AbstractUnixSocket)?
        .create()?
        .add_rules(path_beneath_rules(writable, AccessFs::from_write(abi)))?
        .restrict_self()?;
    Ok(status.ruleset != RulesetStatus::NotEnforced)
}
