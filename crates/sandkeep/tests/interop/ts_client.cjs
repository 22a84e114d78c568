// Interop check: the official MCP TypeScript SDK drives sandkeep.
//
// Run by tests/mcp/interop_ts.rs as
//     node ts_client.cjs SANDKEEP_BIN SANDKEEP_HOME HTTP_URL TOKEN
// with SANDKEEP_NODE_MODULES naming the directory whose node_modules holds
// the pinned @modelcontextprotocol/sdk and ajv (scripts/test installs them).
// It walks the acceptance path of SPEC.md section 9 over stdio with the
// first server SIGKILLed in the middle, then the same over Streamable
// HTTP; every schema must compile in Ajv's strict mode without a warning,
// and every structured result must validate against its output schema.
// It also checks progress (a 25 s run_command with a 10 s request timeout
// that progress resets) and cancellation (an aborted run_command leaves no
// process). Any failed check throws: non-zero exit, reason on stderr.
// With --bench N it instead prints the median tools/list and get_task
// round trips over stdio, in milliseconds, as JSON.

'use strict';

const path = require('node:path');
const { createRequire } = require('node:module');

const modules = process.env.SANDKEEP_NODE_MODULES;
if (!modules) throw new Error('SANDKEEP_NODE_MODULES is not set (scripts/test sets it)');
const need = createRequire(path.join(modules, 'package.json'));
const { Client } = need('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = need('@modelcontextprotocol/sdk/client/stdio.js');
const { StreamableHTTPClientTransport } = need('@modelcontextprotocol/sdk/client/streamableHttp.js');
const Ajv2020 = need('ajv/dist/2020').default;

const TOOLS = ['cancel_task', 'create_sandbox', 'get_task', 'kill_sandbox', 'list_files',
  'list_sandboxes', 'read_file', 'run_command', 'start_task', 'write_file'];

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Ajv in strict mode, its warnings collected: a schema that only warns
// still fails the check.
const warnings = [];
const ajv = new Ajv2020({
  strict: true,
  allErrors: true,
  logger: { log: () => {}, warn: (m) => warnings.push(String(m)), error: (m) => warnings.push(String(m)) },
});
const validators = new Map();

function compileAll(tools, where) {
  const names = tools.map((t) => t.name);
  for (const name of TOOLS) check(names.includes(name), `${where}: ${name} is listed`);
  for (const t of tools) {
    check(t.inputSchema.additionalProperties === false, `${where} ${t.name}: closed inputSchema`);
    check(t.outputSchema && t.outputSchema.type === 'object', `${where} ${t.name}: outputSchema`);
    check(!/\n/.test(t.description), `${where} ${t.name}: description without line breaks`);
    for (const [kind, schema] of [['input', t.inputSchema], ['output', t.outputSchema]]) {
      const before = warnings.length;
      let validate;
      try {
        validate = ajv.compile(schema);
      } catch (e) {
        throw new Error(`${where} ${t.name} ${kind}Schema does not compile in Ajv strict mode: ${e.message}`);
      }
      check(warnings.length === before,
        `${where} ${t.name} ${kind}Schema: Ajv strict warnings ${JSON.stringify(warnings.slice(before))}`);
      check(!JSON.stringify(schema).includes('"format"'), `${where} ${t.name} ${kind}Schema: no format`);
      if (kind === 'output') validators.set(t.name, validate);
    }
  }
}

async function call(client, tool, args, options) {
  const r = await client.callTool({ name: tool, arguments: args }, undefined, options);
  const text = (r.content || []).map((c) => c.text || '').join(' ');
  return { r, text };
}

async function ok(client, tool, args, options) {
  const { r, text } = await call(client, tool, args, options);
  check(!r.isError, `${tool} ${JSON.stringify(args)} failed: ${text}`);
  check(r.structuredContent && typeof r.structuredContent === 'object', `${tool}: structuredContent`);
  const validate = validators.get(tool);
  check(validate(r.structuredContent),
    `${tool}: result does not match its outputSchema: ${JSON.stringify(validate.errors)}`);
  return { value: r.structuredContent, text };
}

async function err(client, tool, args) {
  const { r, text } = await call(client, tool, args);
  check(r.isError, `${tool} ${JSON.stringify(args)} should be a tool error`);
  return text;
}

function stdio(binary, home) {
  return new StdioClientTransport({
    command: binary,
    args: ['serve'],
    // The SDK passes only an allow-list of variables by default: the state
    // directory must be named explicitly.
    env: { SANDKEEP_HOME: home, PATH: process.env.PATH },
    stderr: 'ignore',
  });
}

async function connect(transport) {
  const client = new Client({ name: 'sandkeep-ts-interop', version: '1.0.0' });
  await client.connect(transport);
  return client;
}

async function pollDone(client, sandbox_id, task_id, seconds) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const { value } = await ok(client, 'get_task', { sandbox_id, task_id });
    if (value.state !== 'running') return value;
    check(Date.now() < deadline, `still running after ${seconds} s: ${JSON.stringify(value)}`);
    await sleep(100);
  }
}

// The order a small preview shows: verdict and offsets before the output.
function checkPreviewOrder(value, text, first, last) {
  const keys = Object.keys(value);
  for (const f of first) for (const l of last) {
    check(keys.indexOf(f) < keys.indexOf(l), `structuredContent: ${f} before ${l} in ${keys}`);
    check(text.indexOf(`"${f}"`) < text.indexOf(`"${l}"`), `text block: ${f} before ${l}`);
  }
}

async function stdioPath(binary, home) {
  // Phase 1: create, start, then the server dies (SIGKILL) mid-task.
  const firstTransport = stdio(binary, home);
  const first = await connect(firstTransport);
  const tools = (await first.listTools()).tools;
  compileAll(tools, 'stdio');
  const m = await err(first, 'get_task', { sandbox_id: 'x', task_id: '0'.repeat(32), limit: 0 });
  check(m.includes('`limit`') && m.includes('1 to 65536') && !/\bu64\b/.test(m), m);
  const sb = (await ok(first, 'create_sandbox', { timeout: 600 })).value;
  const bash = (await ok(first, 'run_command', { command: '[[ 1 == 1 ]] && echo bash' })).value;
  check(bash.stdout === 'bash\n' && bash.exit_code === 0, `bash -c: ${JSON.stringify(bash)}`);
  const { value: task } = await ok(first, 'start_task',
    { command: 'printf BEFORE; sleep 10; printf AFTER', timeout: 120 });
  check(task.state === 'running', JSON.stringify(task));
  process.kill(firstTransport.pid, 'SIGKILL');
  await first.close().catch(() => {});

  // Phase 2: a new server reads the task by its handle.
  const second = await connect(stdio(binary, home));
  compileAll((await second.listTools()).tools, 'stdio again');
  const done = await pollDone(second, sb.sandbox_id, task.task_id, 30);
  check(done.state === 'succeeded' && done.exit_code === 0, JSON.stringify(done));
  let out = '';
  let offset = 0;
  for (;;) {
    const { value: page, text } = await ok(second, 'get_task',
      { sandbox_id: sb.sandbox_id, task_id: task.task_id, stdout_offset: offset, limit: 4 });
    checkPreviewOrder(page, text, ['state', 'exit_code', 'stdout_next_offset', 'stdout_truncated'], ['stdout', 'stderr']);
    out += page.stdout;
    if (page.stdout_next_offset === offset) break;
    offset = page.stdout_next_offset;
  }
  check(out === 'BEFOREAFTER', `stdout by offsets: ${JSON.stringify(out)}`);
  const { value: other } = await ok(second, 'start_task', { sandbox_id: sb.sandbox_id, command: 'sleep 300' });
  const t = Date.now();
  const { value: cancelled } = await ok(second, 'cancel_task',
    { sandbox_id: sb.sandbox_id, task_id: other.task_id });
  check(cancelled.state === 'cancelled', JSON.stringify(cancelled));
  check(Date.now() - t < 4000, 'cancel_task took too long');

  // Progress: a 25 s command outlives a 10 s request timeout only because
  // the server's progress notifications reset it.
  const progress = [];
  const { value: long, text } = await ok(second, 'run_command',
    { sandbox_id: sb.sandbox_id, command: 'sleep 25; echo done', timeout: 60 },
    { timeout: 10000, resetTimeoutOnProgress: true, onprogress: (p) => progress.push(p) });
  check(long.exit_code === 0 && long.stdout === 'done\n', JSON.stringify(long));
  check(progress.length >= 3, `progress notifications during 25 s: ${progress.length}`);
  checkPreviewOrder(long, text, ['exit_code', 'timed_out', 'stdout_truncated'], ['stdout', 'stderr']);

  // Cancellation: the aborted command's process is gone within a second.
  const abort = new AbortController();
  const aborted = call(second, 'run_command',
    { sandbox_id: sb.sandbox_id, command: 'sleep 1001', timeout: 120 }, { signal: abort.signal });
  await sleep(2000);
  abort.abort();
  await aborted.then(() => { throw new Error('an aborted call resolved'); }, () => {});
  await sleep(1000);
  const { value: left } = await ok(second, 'run_command', {
    sandbox_id: sb.sandbox_id,
    command: 'for p in /proc/[0-9]*; do [ "$(tr "\\0" " " < $p/cmdline 2>/dev/null)" = "sleep 1001 " ] && echo $p; done; true',
  });
  check(left.stdout === '', `a cancelled run_command left processes: ${left.stdout}`);

  const { value: killed } = await ok(second, 'kill_sandbox', { sandbox_id: sb.sandbox_id });
  check(killed.killed === true, JSON.stringify(killed));
  const version = second.transport && second.transport.protocolVersion;
  await second.close();
  return version || 'initialize';
}

async function httpPath(url, token) {
  const headers = { Authorization: `Bearer ${token}` };
  const client = await connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  compileAll((await client.listTools()).tools, 'http');
  const { value: sb } = await ok(client, 'create_sandbox', { timeout: 120 });
  const { value: task } = await ok(client, 'start_task',
    { sandbox_id: sb.sandbox_id, command: 'printf BEFORE; sleep 2; printf AFTER', timeout: 60 });
  await client.close();
  // A new connection reads the task by its handle.
  const again = await connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  compileAll((await again.listTools()).tools, 'http again');
  const done = await pollDone(again, sb.sandbox_id, task.task_id, 30);
  check(done.state === 'succeeded' && done.stdout === 'BEFOREAFTER', JSON.stringify(done));
  const { value: run } = await ok(again, 'run_command', { sandbox_id: sb.sandbox_id, command: 'echo hi' });
  check(run.stdout === 'hi\n' && run.exit_code === 0, JSON.stringify(run));
  const { value: killed } = await ok(again, 'kill_sandbox', { sandbox_id: sb.sandbox_id });
  check(killed.killed === true, JSON.stringify(killed));
  await again.close();
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

async function bench(binary, home, samples) {
  const transport = stdio(binary, home);
  const client = await connect(transport);
  const list = [];
  for (let i = 0; i < samples; i++) {
    const t = process.hrtime.bigint();
    await client.listTools();
    list.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  const tools = (await client.listTools()).tools;
  compileAll(tools, 'bench');
  const { value: sb } = await ok(client, 'create_sandbox', { timeout: 600 });
  const { value: task } = await ok(client, 'start_task', { command: 'sleep 600' });
  const get = [];
  for (let i = 0; i < samples; i++) {
    const t = process.hrtime.bigint();
    await client.callTool({ name: 'get_task', arguments: { sandbox_id: sb.sandbox_id, task_id: task.task_id } });
    get.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  await ok(client, 'kill_sandbox', { sandbox_id: sb.sandbox_id });
  await client.close();
  console.log(JSON.stringify({ tools_list_ms: median(list), get_task_ms: median(get), samples }));
}

async function main() {
  const args = process.argv.slice(2);
  if (args[0] === '--bench') {
    await bench(args[2], args[3], Number(args[1]));
    return;
  }
  const [binary, home, url, token] = args;
  const version = await stdioPath(binary, home);
  await httpPath(url, token);
  console.log(`interop ok: TypeScript SDK over stdio (${version}) and Streamable HTTP`);
}

main().then(() => process.exit(0), (e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
