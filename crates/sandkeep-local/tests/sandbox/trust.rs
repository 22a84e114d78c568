//! A state directory is trusted only when it is this user's and private
//! (SPEC.md §7): one that another user owns or can write is refused before
//! anything is read from it, and a planted sandbox record is never acted
//! on — above all, the process it names is never signalled.

use crate::support;

use std::os::unix::fs::{PermissionsExt, chown};
use std::path::Path;
use std::process::{Child, Command};

use sandkeep_local::{LocalConfig, LocalProvider};
use sandkeep_proto::record::ProcessIdentity;
use sandkeep_provider::{Provider, Release, SandboxId};
use serde_json::json;
use support::local::{EXE, provider, state_dir};

/// The uid of `nobody`: an owner that is not this (root) test.
const OTHER_UID: u32 = 65534;

fn refusal(home: &Path) -> String {
    match LocalProvider::new(LocalConfig::new(home, EXE)) {
        Ok(_) => panic!("{} was accepted", home.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_state_directory_owned_by_another_user_is_refused() {
    let home = state_dir();
    chown(home.path(), Some(OTHER_UID), None).unwrap();
    let e = refusal(home.path());
    assert!(
        e.contains(&home.path().display().to_string())
            && e.contains(&format!("owned by uid {OTHER_UID}"))
            && e.contains("SANDKEEP_HOME"),
        "{e}"
    );
}

#[test]
fn a_state_directory_others_can_write_is_refused() {
    let home = state_dir();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = refusal(home.path());
    assert!(e.contains("writable by group or others (mode 777)"), "{e}");
    // Its sandboxes directory too, once the top is fixed.
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    provider(home.path());
    let sandboxes = home.path().join("sb");
    std::fs::set_permissions(&sandboxes, std::fs::Permissions::from_mode(0o770)).unwrap();
    let e = refusal(home.path());
    assert!(e.contains(&sandboxes.display().to_string()), "{e}");
}

/// A `sleep` the planted records name as their keeper and init.
struct Bait(Child);

impl Bait {
    fn new() -> Self {
        Self(Command::new("sleep").arg("300").spawn().unwrap())
    }

    fn identity(&self) -> ProcessIdentity {
        ProcessIdentity::of(self.0.id()).unwrap()
    }

    fn assert_untouched(&mut self) {
        assert!(
            self.0.try_wait().unwrap().is_none(),
            "the process a planted record named was signalled"
        );
    }
}

impl Drop for Bait {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Writes `sandboxes/ID/meta.json` naming `bait` as a live keeper.
fn plant(home: &Path, id: &str, bait: &Bait) -> std::path::PathBuf {
    let dir = home.join("sb").join(id);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let who = bait.identity();
    let meta = json!({
        "info": {"sandbox_id": id, "template": "base", "created_at": 0,
                 "expires_at": 9_999_999_999u64, "timeout": 300, "retained": false,
                 "isolation": "userns-idmap"},
        "keeper": {"pid": who.pid, "start_time": who.start_time},
        "init": {"pid": who.pid, "start_time": who.start_time},
    });
    let file = dir.join("meta.json");
    std::fs::write(&file, meta.to_string()).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    dir
}

async fn assert_never_acted_on(p: &LocalProvider, id: &str, bait: &mut Bait) {
    let id = SandboxId::parse(id).unwrap();
    let listed = p.list().await.unwrap();
    assert!(listed.iter().all(|s| s.sandbox_id != id), "{listed:?}");
    let kill = p.kill(&id).await;
    assert!(kill.is_err(), "kill of a planted record: {kill:?}");
    let end = p.kill_unless_retained(&id).await;
    assert!(!matches!(end, Ok(Release::Destroyed)), "{end:?}");
    bait.assert_untouched();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_owned_by_another_user_is_never_signalled() {
    let home = state_dir();
    let p = provider(home.path());
    let mut bait = Bait::new();
    let dir = plant(home.path(), "sb-planted", &bait);
    chown(dir.join("meta.json"), Some(OTHER_UID), None).unwrap();
    assert_never_acted_on(&p, "sb-planted", &mut bait).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_in_a_directory_others_can_write_is_never_signalled() {
    let home = state_dir();
    let p = provider(home.path());
    let mut bait = Bait::new();
    let dir = plant(home.path(), "sb-open", &bait);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_never_acted_on(&p, "sb-open", &mut bait).await;
}

/// The control: the same record, this user's and private, is believed —
/// so the two tests above fail if the trust check goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_record_of_this_user_is_believed() {
    let home = state_dir();
    let p = provider(home.path());
    let bait = Bait::new();
    plant(home.path(), "sb-mine", &bait);
    let listed = p.list().await.unwrap();
    assert!(
        listed.iter().any(|s| s.sandbox_id.as_str() == "sb-mine"),
        "{listed:?}"
    );
}

/// Root's uid blocks are unique across every state directory on the host:
/// two servers with different `SANDKEEP_HOME`s never map the same host
/// uids, so one sandbox's root can never own another's files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_state_directories_never_share_a_uid_block() {
    use support::local::{create, sh, text};
    let (a_home, b_home) = (state_dir(), state_dir());
    let (a, b) = (provider(a_home.path()), provider(b_home.path()));
    let (sa, sb) = (create(&a, 60).await, create(&b, 60).await);
    assert_eq!(sa.isolation, "userns-idmap", "this test needs root");
    let block = |out: sandkeep_provider::ExecOutput| {
        let map = text(&out.stdout);
        let fields: Vec<String> = map.split_whitespace().map(str::to_owned).collect();
        assert_eq!(fields.len(), 3, "{map:?}");
        assert_eq!(fields[0], "0", "{map:?}");
        fields[1].clone()
    };
    let first = block(sh(&a, &sa.sandbox_id, "cat /proc/self/uid_map").await);
    let second = block(sh(&b, &sb.sandbox_id, "cat /proc/self/uid_map").await);
    assert_ne!(first, second, "both sandboxes map host uid {first}");
    assert!(a.kill(&sa.sandbox_id).await.unwrap());
    assert!(b.kill(&sb.sandbox_id).await.unwrap());
}

/// A state directory named with a trailing `/` is still the path it names:
/// a symbolic link stays a symbolic link (the slash made the old check
/// follow it).
#[test]
fn a_trailing_slash_does_not_hide_a_symlinked_state_directory() {
    let base = state_dir();
    let real = base.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = base.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let e = refusal(Path::new(&format!("{}/", link.display())));
    assert!(
        e.contains(&link.display().to_string()) && e.contains("is a symbolic link"),
        "{e}"
    );
}

/// A parent another user can change (group- or other-writable without the
/// sticky bit, or owned by a user who is neither root nor this one) could
/// be swapped for another state directory under a running server: refused,
/// naming the parent.
#[test]
fn a_parent_others_can_change_is_refused() {
    let base = state_dir();
    let shared = base.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o770)).unwrap();
    let e = refusal(&shared.join("state"));
    assert!(
        e.contains(&format!(
            "{} (a parent of the state directory",
            shared.display()
        )) && e.contains("writable by group or others (mode 770)")
            && e.contains("SANDKEEP_HOME"),
        "{e}"
    );
    assert!(
        !shared.join("state").exists(),
        "nothing is created under a refused parent"
    );

    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
    chown(&shared, Some(OTHER_UID), None).unwrap();
    let e = refusal(&shared.join("state"));
    assert!(
        e.contains(&format!(
            "owned by uid {OTHER_UID}, neither root nor this user"
        )),
        "{e}"
    );
}

/// A sticky directory everyone can write (as /tmp) is a fine parent: no
/// one can rename or remove what another user made there.
#[test]
fn a_sticky_shared_parent_is_accepted() {
    let base = state_dir();
    let tmp = base.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let p = provider(&tmp.join("state"));
    assert_eq!(p.state_dir(), tmp.join("state"));
}

/// A symbolic link among the parents is followed once, to the real
/// directory, which the provider then uses: changing the link afterwards
/// (to another state directory) does not redirect it. A link that another
/// user owns in a shared sticky directory is not followed at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlinked_parent_is_resolved_once_and_checked() {
    let base = state_dir();
    let (first, second) = (base.path().join("first"), base.path().join("second"));
    for dir in [&first, &second] {
        std::fs::create_dir(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let link = base.path().join("current");
    std::os::unix::fs::symlink(&first, &link).unwrap();
    let p = provider(&link.join("state"));
    assert_eq!(p.state_dir(), first.join("state"));

    // Another state directory with a live sandbox record in it.
    provider(&second.join("state"));
    let mut bait = Bait::new();
    plant(&second.join("state"), "sb-elsewhere", &bait);
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&second, &link).unwrap();
    let listed = p.list().await.unwrap();
    assert!(
        listed.is_empty(),
        "the provider followed the new link: {listed:?}"
    );
    bait.assert_untouched();

    let tmp = base.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let planted = tmp.join("planted");
    std::os::unix::fs::symlink(&first, &planted).unwrap();
    std::os::unix::fs::lchown(&planted, Some(OTHER_UID), None).unwrap();
    let e = refusal(&planted.join("state"));
    assert!(
        e.contains(&planted.display().to_string())
            && e.contains(&format!("symbolic link owned by uid {OTHER_UID}")),
        "{e}"
    );
}
