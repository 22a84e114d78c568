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

  // watchDir: the WatchDir stream, recursive, with entries.
  await sbx.files.makeDir('w')
  const events = []
  let wake = () => {}
  const watch = await sbx.files.watchDir(
    'w',
    (e) => {
      events.push([e.type, e.name, e.entry?.path])
      wake()
    },
    { recursive: true, includeEntry: true, timeoutMs: 0 }
  )
  const seen = async (n) => {
    const deadline = Date.now() + 10_000
    while (events.length < n) {
      assert.ok(Date.now() < deadline, `${n} watch events within 10 s, got ${JSON.stringify(events)}`)
      await new Promise((resolve) => {
        wake = resolve
        setTimeout(resolve, 100)
      })
    }
    return events.splice(0, n)
  }
  await sbx.files.makeDir('w/sub')
  await sbx.files.write('w/sub/f', 'x')
  assert.deepEqual(await seen(4), [
    ['create', 'sub', '/home/user/w/sub'],
    ['create', 'sub/f', '/home/user/w/sub/f'],
    ['chmod', 'sub/f', '/home/user/w/sub/f'],
    ['write', 'sub/f', '/home/user/w/sub/f'],
  ])
  await sbx.files.remove('w/sub')
  assert.deepEqual(await seen(2), [
    ['remove', 'sub/f', undefined],
    ['remove', 'sub', undefined],
  ])
  await watch.stop()
  console.log('ok js_watch')

  // sandbox.pty: a shell on a terminal, typed on and resized.
  let screen = ''
  const decoder = new TextDecoder()
  const term = await sbx.pty.create({
    cols: 80,
    rows: 24,
    onData: (data) => {
      screen += decoder.decode(data)
    },
    timeoutMs: 0,
  })
  await sbx.pty.resize(term.pid, { cols: 123, rows: 45 })
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size; echo $((6*7)); exit 4\n'))
  await assert.rejects(term.wait(), (e) => e instanceof CommandExitError && e.exitCode === 4)
  assert.match(screen, /\r45 123\r\n42\r\n/)
  console.log('ok js_pty')

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
