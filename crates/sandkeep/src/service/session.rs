//! Per-connection state of SPEC.md §2/§6: the default sandbox and the
//! destruction set. It only records; destroying is [`super::Service`]'s job.

use std::collections::BTreeSet;
use std::sync::Mutex;

use crate::provider::SandboxId;

#[derive(Debug, Default)]
struct State {
    default: Option<SandboxId>,
    destruction: BTreeSet<SandboxId>,
    /// Sandboxes a task was started in from this session: no session end
    /// destroys them (reported when the session ends).
    retained: BTreeSet<SandboxId>,
    /// The destruction set was taken: the session is over.
    ended: bool,
}

/// One MCP session, or none at all.
///
/// A stateful session (stdio process, legacy HTTP session) has a default
/// sandbox and a destruction set. A stateless one (2026-07-28 HTTP request)
/// has neither: what it creates lives until its deadline or `kill_sandbox`,
/// and calls without `sandbox_id` fail with "no default sandbox".
#[derive(Debug)]
pub struct Session {
    state: Option<Mutex<State>>,
}

impl Default for Session {
    fn default() -> Self {
        Self::new()
    }
}

impl Session {
    pub fn new() -> Self {
        Self {
            state: Some(Mutex::new(State::default())),
        }
    }

    pub fn stateless() -> Self {
        Self { state: None }
    }

    pub fn is_stateless(&self) -> bool {
        self.state.is_none()
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> Option<R> {
        self.state
            .as_ref()
            .map(|m| f(&mut m.lock().unwrap_or_else(|p| p.into_inner())))
    }

    pub fn default_sandbox(&self) -> Option<SandboxId> {
        self.with(|s| s.default.clone()).flatten()
    }

    /// The sandboxes this session will destroy when it ends.
    pub fn destruction_set(&self) -> Vec<SandboxId> {
        self.with(|s| s.destruction.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// A sandbox this session created: it becomes the default and joins the
    /// destruction set. `false` when the session has already ended (the
    /// create was still running): nobody would destroy the sandbox for it.
    pub(super) fn adopt(&self, id: SandboxId) -> bool {
        self.with(|s| {
            if s.ended {
                return false;
            }
            s.destruction.insert(id.clone());
            s.default = Some(id);
            true
        })
        .unwrap_or(true)
    }

    /// A task was started in the sandbox: it leaves the destruction set (it
    /// stays the default).
    pub(super) fn release(&self, id: &SandboxId) {
        self.with(|s| {
            s.destruction.remove(id);
            s.retained.insert(id.clone());
        });
    }

    /// The sandboxes this session retained by starting a task in them.
    pub fn retained(&self) -> Vec<SandboxId> {
        self.with(|s| s.retained.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The sandbox is gone: it leaves every set, and the default if it was.
    pub(super) fn forget(&self, id: &SandboxId) {
        self.with(|s| {
            s.destruction.remove(id);
            s.retained.remove(id);
            if s.default.as_ref() == Some(id) {
                s.default = None;
            }
        });
    }

    /// Ends the session: what it must destroy. Later adoptions are refused.
    pub(super) fn take_destruction_set(&self) -> Vec<SandboxId> {
        self.with(|s| {
            s.ended = true;
            std::mem::take(&mut s.destruction).into_iter().collect()
        })
        .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> SandboxId {
        SandboxId::parse(s).unwrap()
    }

    #[test]
    fn adopt_release_forget() {
        let s = Session::new();
        s.adopt(id("a"));
        s.adopt(id("b"));
        assert_eq!(s.default_sandbox(), Some(id("b")));
        s.release(&id("b"));
        assert_eq!(s.destruction_set(), vec![id("a")]);
        assert_eq!(s.default_sandbox(), Some(id("b")));
        s.forget(&id("b"));
        assert_eq!(s.default_sandbox(), None);
        assert_eq!(s.take_destruction_set(), vec![id("a")]);
        assert!(s.take_destruction_set().is_empty());
        assert!(!s.adopt(id("c")), "adopted after the end");
        assert!(s.destruction_set().is_empty());
    }

    #[test]
    fn stateless_session_remembers_nothing() {
        let s = Session::stateless();
        assert!(s.adopt(id("a")), "lives to its deadline by design");
        assert_eq!(s.default_sandbox(), None);
        assert!(s.destruction_set().is_empty());
        assert!(s.is_stateless());
    }
}
