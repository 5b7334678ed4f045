// The server's session table: capacity is checked and a slot reserved synchronously (JS runs one callback at a
// time, so check-and-reserve is atomic, like OpenEnv's lock), the instance is attached once its factory finishes.
import { randomUUID } from "node:crypto"
import type { OpenEnvInstance } from "../OpenEnv.js"

export interface Session {
  readonly id: string
  readonly kind: "ws" | "ws-mcp" | "http-mcp"
  instance: OpenEnvInstance | null
  lastActivity: number
  /** A request is being processed: never reaped mid-request. */
  busy: boolean
  /** An HTTP-MCP session with a `/ws?session_id=` socket attached: never reaped, its close waits for the detach. */
  attached: boolean
  /** `openenv/session/close` came while attached: the session ends when the socket detaches. */
  closePending: boolean
  /** Destroys the session (frees the slot at once) and closes its socket, if any. */
  readonly kill: (reason: string) => void
}

export class SessionTable {
  private readonly sessions = new Map<string, Session>()
  constructor(readonly max: number) {}

  get size(): number {
    return this.sessions.size
  }

  /** Reserves a slot, or returns the counts for the CAPACITY_REACHED error. */
  reserve(
    kind: Session["kind"],
    kill: (reason: string) => void
  ): Session | { readonly active: number; readonly max: number } {
    if (this.sessions.size >= this.max) return { active: this.sessions.size, max: this.max }
    const session: Session = {
      id: randomUUID(),
      kind,
      instance: null,
      lastActivity: Date.now(),
      busy: false,
      attached: false,
      closePending: false,
      kill
    }
    this.sessions.set(session.id, session)
    return session
  }

  get(id: string): Session | undefined {
    return this.sessions.get(id)
  }

  release(id: string): boolean {
    return this.sessions.delete(id)
  }

  touch(id: string): void {
    const s = this.sessions.get(id)
    if (s !== undefined) s.lastActivity = Date.now()
  }

  /** Sessions idle for longer than `timeoutMs`, not in a request and without an attached socket. */
  stale(timeoutMs: number, now: number): Array<Session> {
    const out: Array<Session> = []
    for (const s of this.sessions.values()) {
      if (!s.busy && !s.attached && s.instance !== null && now - s.lastActivity > timeoutMs) out.push(s)
    }
    return out
  }

  all(): Array<Session> {
    return [...this.sessions.values()]
  }
}
