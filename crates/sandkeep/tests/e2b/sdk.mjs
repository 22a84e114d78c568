// The official E2B JavaScript SDK against `sandkeep serve --e2b`: run by
// crates/sandkeep/tests/e2b/sdk.rs with E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY set, NODE_PATH pointing at the pinned `e2b` install. Prints
// `ok NAME` per check; the first failure exits non-zero.
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'

const require = createRequire(process.env.E2B_JS_MODULES + '/')
const { Sandbox, CommandExitError, NotFoundError } = require('e2b')

const runId = Math.random().toString(36).slice(2)
const sbx = await Sandbox.create('base', {
  timeoutMs: 120_000,
  envs: { GREETING: 'hi' },
  metadata: { run: runId },
})
try {
  const r = await sbx.commands.run('echo $GREETING; echo err >&2')
  assert.equal(r.stdout, 'hi\n')
  assert.equal(r.stderr, 'err\n')
  await assert.rejects(sbx.commands.run('exit 3'), (e) => e instanceof CommandExitError && e.exitCode === 3)
  console.log('ok js_run')

  const h = await sbx.commands.run('read line; echo got:$line', { background: true, stdin: true })
  await sbx.commands.sendStdin(h.pid, 'hello\n')
  const done = await h.wait()
  assert.equal(done.stdout, 'got:hello\n')
  const sleeper = await sbx.commands.run('sleep 30', { background: true, timeoutMs: 0 })
  assert.equal(await sbx.commands.kill(sleeper.pid), true)
  console.log('ok js_background')

  await sbx.files.write('d/a.txt', 'hello')
  assert.equal(await sbx.files.read('d/a.txt'), 'hello')
  assert.equal(await sbx.files.exists('d/a.txt'), true)
  assert.deepEqual((await sbx.files.list('d')).map((e) => e.name), ['a.txt'])
  assert.equal(await sbx.files.makeDir('d/sub'), true)
  await sbx.files.rename('d/a.txt', 'd/b.txt')
  assert.equal((await sbx.files.getInfo('d/b.txt')).size, 5)
  await sbx.files.remove('d')
  assert.equal(await sbx.files.exists('d'), false)
  console.log('ok js_files')

  const page = await Sandbox.list({ query: { metadata: { run: runId } } }).nextItems()
  assert.deepEqual(page.map((s) => s.sandboxId), [sbx.sandboxId])
  await sbx.setTimeout(60_000)
  console.log('ok js_list')
} finally {
  await sbx.kill()
}
assert.equal(await Sandbox.kill(sbx.sandboxId), false)
await assert.rejects(Sandbox.connect(sbx.sandboxId), (e) => e instanceof NotFoundError)
console.log('ok js_kill')
