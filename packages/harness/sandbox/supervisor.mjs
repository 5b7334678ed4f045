// Runs inside a bubblewrap sandbox as its first process (see packages/harness/src/Sandbox.ts). Plain JavaScript on
// node's built-ins only: the sandbox has node but not the project's dependencies.
//  - forwards 127.0.0.1:<port> (the sandbox's only network, loopback) to the Unix socket bound in from the host,
//    behind which is the capture proxy or the policy server: the one endpoint the sandbox can reach;
//  - reads one JSON request per line on stdin, {id, command, timeoutMs, env}, runs `bash -c command` in the
//    workdir under the sandbox's rlimits in its own process group, and writes {id, exitCode, signal, stdout,
//    stderr, timedOut} as one line on stdout. At its timeout a command's whole process group is SIGKILLed.
import { spawn } from "node:child_process"
import * as net from "node:net"
import * as readline from "node:readline"
import { clearTimeout, setTimeout } from "node:timers"

const [port, socketPath, workdir, memoryKb, cpuSeconds, maxOutput] = process.argv.slice(2)
const limit = Number(maxOutput)

const write = (message) => process.stdout.write(JSON.stringify(message) + "\n")

const forwarder = net.createServer((client) => {
  const upstream = net.connect(socketPath)
  client.pipe(upstream).pipe(client)
  const close = () => {
    client.destroy()
    upstream.destroy()
  }
  client.on("error", close)
  upstream.on("error", close)
})

// ulimit in the shell, not on node: node itself needs more address space than the commands are allowed.
const limits = `ulimit -v ${memoryKb} && ulimit -t ${cpuSeconds} && exec nice -n 10 /bin/bash -c "$0"`

const run = (request) => {
  const child = spawn("/bin/bash", ["-c", limits, request.command], {
    cwd: workdir,
    env: { ...process.env, ...(request.env ?? {}) },
    detached: true,
    stdio: ["ignore", "pipe", "pipe"]
  })
  const out = { stdout: "", stderr: "" }
  const collect = (key) => (chunk) => {
    if (out[key].length < limit) out[key] += chunk.toString("utf8").slice(0, limit - out[key].length)
  }
  child.stdout.on("data", collect("stdout"))
  child.stderr.on("data", collect("stderr"))
  let timedOut = false
  const kill = () => {
    try {
      process.kill(-child.pid, "SIGKILL")
    } catch {
      // already gone
    }
  }
  const timer = setTimeout(() => {
    timedOut = true
    kill()
  }, request.timeoutMs)
  child.on("error", (e) => {
    clearTimeout(timer)
    write({ id: request.id, exitCode: null, signal: null, stdout: "", stderr: String(e), timedOut: false })
  })
  // On exit, not close: a command that leaves `sleep 1000 &` behind holds its pipes open, yet it is finished.
  // A moment's grace lets the output already written arrive.
  child.on("exit", (exitCode, signal) => {
    clearTimeout(timer)
    setTimeout(() => {
      child.stdout.destroy()
      child.stderr.destroy()
      write({ id: request.id, exitCode, signal, stdout: out.stdout, stderr: out.stderr, timedOut })
    }, 20)
  })
}

forwarder.listen(Number(port), "127.0.0.1", () => {
  write({ ready: true })
  readline.createInterface({ input: process.stdin }).on("line", (line) => {
    if (line.trim() !== "") run(JSON.parse(line))
  })
})
// The host closing stdin means the sandbox is being closed: end here; bwrap and the kernel take the rest.
process.stdin.on("end", () => process.exit(0))
