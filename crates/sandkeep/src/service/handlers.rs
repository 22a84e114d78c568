//! The typed handlers, one per tool of docs/tools.md. Each validates first (so
//! a rejected call runs nothing), then asks the provider or the in-sandbox
//! helper, then shapes the result.

use std::time::Duration;

use sandkeep_proto::limits::{MAX_TASK_DIRS, RUN_OUTPUT_MAX_BYTES, START_REQUEST_MAX_BYTES};
use sandkeep_proto::wire::{
    self, CancelReply, ErrorKind, StartRequest, StatusRequest, TaskStatus, TaskSummary,
};
use sandkeep_proto::{TaskId, TaskState};

use super::helper::{self, HelperError};
use super::*;
use crate::provider::{
    CreateSpec, ExecRequest, FileKind, ProviderError, SandboxInfo, SandboxState,
};

/// read_file refuses files larger than this (docs/tools.md).
pub const READ_FILE_MAX_BYTES: u64 = 1_048_576;

const DO_NOT_RESUBMIT: &str = "The task may or may not be running. Do NOT call start_task again for this command: \
     query this handle with get_task (\"no such task\" means it never started), \
     or kill_sandbox to make sure nothing of it runs.";

impl Service {
    fn resolve(&self, session: &Session, sandbox_id: Option<&str>) -> Result<SandboxId, ToolError> {
        match sandbox_id {
            Some(s) => validate::sandbox_id(s),
            None => session.default_sandbox().ok_or(ToolError::NoDefaultSandbox),
        }
    }

    /// Renewal doubles as the existence check, so a vanished sandbox is
    /// reported before any work is attempted. A paused sandbox is resumed
    /// instead (SPEC §17: the tools that renew use the sandbox), which
    /// gives it a deadline as a renewal would.
    async fn renew(&self, session: &Session, id: &SandboxId) -> Result<SandboxInfo, ToolError> {
        match self.provider.renew(id).await {
            Ok(info) if info.state == SandboxState::Paused => self.wake(id).await,
            Ok(info) => Ok(info),
            Err(e @ ProviderError::NoSuchSandbox(_)) => {
                session.forget(id);
                Err(e.into())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Resumes sandbox `id` if it is paused (another caller may just have
    /// resumed it: fine too); its record either way.
    async fn wake(&self, id: &SandboxId) -> Result<SandboxInfo, ToolError> {
        match self.provider.resume(id, None).await {
            Ok(info) => Ok(info),
            Err(ProviderError::AlreadyInState { .. }) => Ok(self.provider.info(id).await?),
            Err(e) => Err(e.into()),
        }
    }

    /// The sandbox a tool call works in, renewed (and so known to exist)
    /// before the work starts.
    async fn resolve_and_renew(
        &self,
        session: &Session,
        sandbox_id: Option<&str>,
    ) -> Result<SandboxId, ToolError> {
        let id = self.resolve(session, sandbox_id)?;
        self.renew(session, &id).await?;
        Ok(id)
    }

    pub async fn create_sandbox(
        &self,
        session: &Session,
        args: CreateSandboxArgs,
    ) -> Result<CreateSandboxResult, ToolError> {
        let timeout = validate::sandbox_timeout(args.timeout)?;
        let template = args.template.unwrap_or_else(|| "base".to_owned());
        validate::template(&template)?;
        let envs = args.envs.unwrap_or_default();
        validate::envs(&envs)?;
        let network = validate::network(args.network.as_deref())?;
        let allow_hosts = validate::allow_hosts(args.allow_hosts)?;
        let limits = validate::limits(
            &self.ceilings,
            args.memory_mib,
            args.cpus,
            args.pids,
            args.disk_mib,
        )?;
        let shares = self.chosen_shares(args.shares)?;
        let on_timeout = validate::on_timeout(args.on_timeout.as_deref())?;
        let info = self
            .provider
            .create(CreateSpec {
                template,
                timeout,
                envs,
                network,
                allow_hosts,
                limits,
                shares,
                on_timeout,
            })
            .await?;
        self.adopt_created(session, info).await
    }

    /// A new sandbox made this session's, shaped as create_sandbox's
    /// result (create_sandbox, fork_sandbox).
    pub(super) async fn adopt_created(
        &self,
        session: &Session,
        info: SandboxInfo,
    ) -> Result<CreateSandboxResult, ToolError> {
        if !session.adopt(info.sandbox_id.clone()) {
            // Its session ended while it was being created: destroyed
            // like the session's other sandboxes, not left to its deadline.
            self.provider.kill(&info.sandbox_id).await?;
            return Err(ToolError::SessionEnded(info.sandbox_id.to_string()));
        }
        Ok(CreateSandboxResult {
            shares: super::shares::share_results(&info),
            sandbox_id: info.sandbox_id.to_string(),
            next: session
                .is_stateless()
                .then(|| format!("{}.", super::catalog::PASS_SANDBOX_ID)),
            template: info.template,
            created_at: info.created_at,
            expires_at: info.expires_at,
            isolation: info.isolation,
            network: info.network.map(|n| n.to_string()),
            allow_hosts: info.allow_hosts,
            limits: LimitsResult::from(info.limits),
            ports: info.ports.into_iter().map(PortEntry::from).collect(),
        })
    }

    pub async fn kill_sandbox(
        &self,
        session: &Session,
        args: KillSandboxArgs,
    ) -> Result<KillSandboxResult, ToolError> {
        let id = validate::sandbox_id(&args.sandbox_id)?;
        let killed = self.provider.kill(&id).await?;
        session.forget(&id);
        self.helpers.forget(&id);
        Ok(KillSandboxResult {
            sandbox_id: id.to_string(),
            killed,
        })
    }

    pub async fn list_sandboxes(
        &self,
        _args: ListSandboxesArgs,
    ) -> Result<ListSandboxesResult, ToolError> {
        let sandboxes = self
            .provider
            .list()
            .await?
            .into_iter()
            .map(|i: SandboxInfo| SandboxEntry {
                shares: super::shares::share_results(&i),
                sandbox_id: i.sandbox_id.to_string(),
                template: i.template,
                created_at: i.created_at,
                expires_at: i.expires_at,
                retained: i.retained,
                isolation: i.isolation,
                network: i.network.map(|n| n.to_string()),
                allow_hosts: i.allow_hosts,
                limits: LimitsResult::from(i.limits),
                ports: i.ports.into_iter().map(PortEntry::from).collect(),
                state: i.state.to_string(),
                on_timeout: i.on_timeout.to_string(),
            })
            .collect();
        Ok(ListSandboxesResult { sandboxes })
    }

    pub async fn pause_sandbox(
        &self,
        args: PauseSandboxArgs,
    ) -> Result<PauseSandboxResult, ToolError> {
        let id = validate::sandbox_id(&args.sandbox_id)?;
        self.readers.retire(&id);
        let info = self.provider.pause(&id).await?;
        Ok(PauseSandboxResult {
            sandbox_id: id.to_string(),
            state: info.state.to_string(),
        })
    }

    pub async fn resume_sandbox(
        &self,
        args: ResumeSandboxArgs,
    ) -> Result<ResumeSandboxResult, ToolError> {
        let id = validate::sandbox_id(&args.sandbox_id)?;
        let timeout = match args.timeout {
            Some(t) => Some(validate::sandbox_timeout(Some(t))?),
            None => None,
        };
        let info = self.provider.resume(&id, timeout).await?;
        Ok(ResumeSandboxResult {
            sandbox_id: id.to_string(),
            state: info.state.to_string(),
            expires_at: info.expires_at,
        })
    }

    pub async fn run_command(
        &self,
        session: &Session,
        args: RunCommandArgs,
    ) -> Result<RunCommandResult, ToolError> {
        validate::command_and_cwd(&args.command, args.cwd.as_deref())?;
        let timeout = validate::run_timeout(args.timeout)?;
        let id = self.resolve(session, args.sandbox_id.as_deref())?;
        let renewed = self.renew(session, &id).await?;
        let out = self
            .provider
            .exec(
                &id,
                ExecRequest {
                    command: args.command,
                    cwd: args.cwd.or_else(|| Self::default_cwd(&renewed)),
                    timeout: Duration::from_secs(timeout),
                    stdin: None,
                    output_limit: RUN_OUTPUT_MAX_BYTES,
                },
            )
            .await?;
        // The deadline counts from the end of the last use. A command that
        // ended within the second of the renewal above would be given the
        // deadline it already has: no second renewal then.
        if renewed.expires_at != crate::provider::unix_now() + renewed.timeout {
            self.renew(session, &id).await?;
        }
        Ok(RunCommandResult {
            sandbox_id: id.to_string(),
            exit_code: out.exit_code,
            stdout: self
                .masker
                .mask(String::from_utf8_lossy(&out.stdout).into_owned()),
            stderr: self
                .masker
                .mask(String::from_utf8_lossy(&out.stderr).into_owned()),
            stdout_truncated: out.stdout_truncated,
            stderr_truncated: out.stderr_truncated,
            timed_out: out.timed_out,
        })
    }

    pub async fn read_file(
        &self,
        session: &Session,
        args: ReadFileArgs,
    ) -> Result<ReadFileResult, ToolError> {
        validate::path("path", &args.path)?;
        let id = self
            .resolve_and_renew(session, args.sandbox_id.as_deref())
            .await?;
        let bytes = self
            .provider
            .read_file(&id, &args.path, READ_FILE_MAX_BYTES)
            .await?;
        Ok(ReadFileResult {
            path: args.path,
            size: bytes.len() as u64,
            content: String::from_utf8_lossy(&bytes).into_owned(),
        })
    }

    pub async fn write_file(
        &self,
        session: &Session,
        args: WriteFileArgs,
    ) -> Result<WriteFileResult, ToolError> {
        validate::path("path", &args.path)?;
        let id = self
            .resolve_and_renew(session, args.sandbox_id.as_deref())
            .await?;
        let bytes_written = self
            .provider
            .write_file(&id, &args.path, args.content.as_bytes())
            .await?;
        Ok(WriteFileResult {
            path: args.path,
            bytes_written,
        })
    }

    pub async fn list_files(
        &self,
        session: &Session,
        args: ListFilesArgs,
    ) -> Result<ListFilesResult, ToolError> {
        validate::path("path", &args.path)?;
        let id = self
            .resolve_and_renew(session, args.sandbox_id.as_deref())
            .await?;
        let entries = self
            .provider
            .list_files(&id, &args.path)
            .await?
            .into_iter()
            .map(|e| DirEntry {
                name: e.name,
                entry_type: match e.kind {
                    FileKind::File => EntryType::File,
                    FileKind::Dir => EntryType::Dir,
                    FileKind::Symlink => EntryType::Symlink,
                    FileKind::Other => EntryType::Other,
                },
                size: e.size,
                modified_at: e.modified_at,
            })
            .collect();
        Ok(ListFilesResult {
            path: args.path,
            entries,
        })
    }

    pub async fn start_task(
        &self,
        session: &Session,
        args: StartTaskArgs,
    ) -> Result<StartTaskResult, ToolError> {
        self.submit_task(session, args, None).await
    }

    /// start_task, and start_interactive_task with its `input`: the one
    /// protocol of submitting a task to the helper.
    pub(super) async fn submit_task(
        &self,
        session: &Session,
        args: StartTaskArgs,
        input: Option<wire::InputMode>,
    ) -> Result<StartTaskResult, ToolError> {
        validate::command_and_cwd(&args.command, args.cwd.as_deref())?;
        let timeout = validate::task_timeout(args.timeout)?;
        let id = self.resolve(session, args.sandbox_id.as_deref())?;
        let mut request = StartRequest {
            task_id: new_task_id()?,
            command: args.command,
            cwd: args.cwd,
            timeout,
            input,
        };
        // Checked before anything is asked of the provider, and again
        // with the sandbox's default working directory (its first share).
        let too_large = |r: &StartRequest| {
            let encoded = wire::encoded_request_len(r);
            (encoded > START_REQUEST_MAX_BYTES).then(|| start_request_too_large(encoded))
        };
        if let Some(e) = too_large(&request) {
            return Err(e);
        }
        let info = self.provider.info(&id).await?;
        // A task started on a paused sandbox would never run: resumed
        // first (SPEC §17).
        let info = match info.state {
            SandboxState::Paused => self.wake(&id).await?,
            SandboxState::Running => info,
        };
        if request.cwd.is_none() {
            request.cwd = Self::default_cwd(&info);
            if let Some(e) = too_large(&request) {
                return Err(e);
            }
        }
        // Retain before submitting: once the helper may have the task, no
        // session end may destroy its sandbox.
        self.provider.retain(&id).await?;
        session.release(&id);
        let task_id = request.task_id.clone();
        match helper::call::<_, TaskSummary>(
            self.provider.as_ref(),
            &self.helpers,
            &id,
            wire::verb::START,
            &request,
        )
        .await
        {
            Ok(s) => Ok(StartTaskResult {
                sandbox_id: id.to_string(),
                task_id: s.task_id.to_string(),
                state: s.state,
                exit_code: s.exit_code,
                started_at: s.started_at,
                finished_at: s.finished_at,
                error: None,
            }),
            Err(
                HelperError::Provider(ProviderError::Unconfirmed { message, .. })
                | HelperError::Unreadable(message),
            ) => Ok(StartTaskResult {
                sandbox_id: id.to_string(),
                task_id: task_id.to_string(),
                state: TaskState::Unknown,
                exit_code: None,
                started_at: None,
                finished_at: None,
                error: Some(format!(
                    "the submission could not be confirmed: {message}. {DO_NOT_RESUBMIT}"
                )),
            }),
            Err(e) => Err(helper_error(e, &id, &task_id)),
        }
    }

    pub async fn get_task(&self, args: GetTaskArgs) -> Result<TaskResult, ToolError> {
        let (id, request) = status_request(&args)?;
        let status = self.read_status(&id, &request).await?;
        Ok(self.task_result(&id, status))
    }

    /// The task's `status`, through the sandbox's resident reader.
    async fn read_status(
        &self,
        id: &SandboxId,
        request: &StatusRequest,
    ) -> Result<TaskStatus, ToolError> {
        self.readers
            .read(
                self.provider.as_ref(),
                &self.helpers,
                id,
                wire::verb::STATUS,
                request,
            )
            .await
            .map_err(|e| helper_error(e, id, &request.task_id))
    }

    pub async fn cancel_task(&self, args: CancelTaskArgs) -> Result<TaskResult, ToolError> {
        let (id, request) = status_request(&args)?;
        // Only a running task has a supervisor to ask. Any other state is
        // what the `cancel` verb would answer after its own look (the saved
        // result, confirmed when terminal; `unknown`, unconfirmed), so the
        // reader's look answers it without a helper process.
        let status = self.read_status(&id, &request).await?;
        let reply = if status.summary.state == TaskState::Running {
            helper::call(
                self.provider.as_ref(),
                &self.helpers,
                &id,
                wire::verb::CANCEL,
                &request,
            )
            .await
            .map_err(|e| helper_error(e, &id, &request.task_id))?
        } else {
            CancelReply {
                confirmed: status.summary.state.is_terminal(),
                status,
            }
        };
        let result = self.task_result(&id, reply.status);
        if reply.confirmed {
            Ok(result)
        } else {
            Err(ToolError::CancelNotConfirmed(Box::new(result)))
        }
    }

    pub(super) fn task_result(&self, id: &SandboxId, s: TaskStatus) -> TaskResult {
        TaskResult {
            sandbox_id: id.to_string(),
            task_id: s.summary.task_id.to_string(),
            state: s.summary.state,
            exit_code: s.summary.exit_code,
            started_at: s.summary.started_at,
            finished_at: s.summary.finished_at,
            stdout: self.masker.mask(s.stdout),
            stderr: self.masker.mask(s.stderr),
            stdout_next_offset: s.stdout_next_offset,
            stderr_next_offset: s.stderr_next_offset,
            stdout_bytes: s.stdout_bytes,
            stderr_bytes: s.stderr_bytes,
            stdout_truncated: s.stdout_truncated,
            stderr_truncated: s.stderr_truncated,
            error: s.error,
        }
    }
}

fn status_request(args: &TaskQueryArgs) -> Result<(SandboxId, StatusRequest), ToolError> {
    let id = validate::sandbox_id(&args.sandbox_id)?;
    let request = StatusRequest {
        task_id: validate::task_id(&args.task_id)?,
        stdout_offset: validate::offset("stdout_offset", args.stdout_offset)?,
        stderr_offset: validate::offset("stderr_offset", args.stderr_offset)?,
        limit: validate::limit(args.limit)?,
    };
    Ok((id, request))
}

/// 128 bits from the OS CSPRNG.
fn new_task_id() -> Result<TaskId, ToolError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        ToolError::Provider(ProviderError::Unavailable(format!(
            "the OS random number generator failed ({e}); nothing was run, retry start_task"
        )))
    })?;
    Ok(TaskId::from_bytes(bytes))
}

/// A start request of `encoded` bytes, over what travels to the helper.
pub(super) fn start_request_too_large(encoded: usize) -> ToolError {
    ToolError::InvalidArgument(format!(
        "invalid parameter `command`: the start request, JSON-encoded and shell-quoted, is {encoded} bytes, \
         over the {START_REQUEST_MAX_BYTES}-byte limit (quotes, backslashes and control characters count \
         several times); shorten the command, or write the script with write_file and start it by path; \
         nothing was run"
    ))
}

pub(super) fn helper_error(e: HelperError, id: &SandboxId, task_id: &TaskId) -> ToolError {
    match e {
        HelperError::Provider(p) => p.into(),
        HelperError::Unreadable(detail) => ToolError::BadHelperReply {
            sandbox_id: id.to_string(),
            detail,
        },
        HelperError::Refused { kind, message } => {
            let advice = match kind {
                ErrorKind::NoSuchTask => format!(
                    "no such task {task_id} in sandbox {id}: check both parts of the handle start_task returned; \
                     a task is gone when its sandbox was destroyed or expired"
                ),
                ErrorKind::TaskExists => format!(
                    "task {task_id} already exists in sandbox {id}, so it was not run again: query it with get_task"
                ),
                ErrorKind::TooManyTasks => format!(
                    "sandbox {id} already holds the maximum of {MAX_TASK_DIRS} tasks: use another sandbox (create_sandbox)"
                ),
                ErrorKind::NoSuchCwd => {
                    "the working directory does not exist: create it first (run_command mkdir -p DIR) or omit cwd; \
                     nothing was run"
                        .to_owned()
                }
                ErrorKind::BadRequest => "the task helper refused the request".to_owned(),
                ErrorKind::TaskRunning => format!(
                    "task {task_id} in sandbox {id} is still running, so nothing was deleted: \
                     cancel it first (cancel_task), then delete it"
                ),
                ErrorKind::UnsafeTaskDir => format!(
                    "the private task directory in sandbox {id} is unsafe, so no task can run there: \
                     use another sandbox (create_sandbox)"
                ),
                ErrorKind::Internal => format!("the task helper in sandbox {id} failed; retry, or use another sandbox"),
                // The helper's message says which (SPEC.md §15); it is the advice.
                ErrorKind::NotInteractive
                | ErrorKind::TaskEnded
                | ErrorKind::StdinClosed
                | ErrorKind::InputBacklogFull => return ToolError::Helper { kind, message },
            };
            // The helper's own words add nothing to a missing task but
            // its id, which the advice already names.
            let message = if kind == ErrorKind::NoSuchTask {
                advice
            } else {
                format!("{advice} ({message})")
            };
            ToolError::Helper { kind, message }
        }
    }
}
