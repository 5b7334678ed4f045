// One capture session: the turns an agent's calls produced, linked into conversations by exact token prefix.
// A turn's parent is the earlier turn whose prompt + completion is the longest exact prefix of its prompt (an
// auxiliary turn is never a parent); a turn with none is a root (a new conversation: the agent's first call, a
// subagent, a rewritten history). Siblings (one parent, or roots with the identical prompt) of which one continued
// and the others did not are retries: the ones that led nowhere are discarded. Shape alone decides; the agent is
// never asked.
import type { TrainingTrace } from "../../TrainingTrace.js"
import type { Captured, ChatBody } from "./dialect.js"
import type { FailureKind } from "./upstream.js"

/** A conversation's role: the agent's own, an auxiliary call (title generation: loss mask 0), or discarded (led nowhere). */
export type Role = "agent" | "auxiliary" | "discarded"

export interface Turn {
  readonly index: number
  readonly nodeId: string
  readonly dialect: string
  readonly captured: Captured
  readonly request: ChatBody
  /** The auxiliary rule it matched. */
  readonly auxiliary: string | undefined
  readonly parent: string | undefined
}

/** A transport failure recorded in a capture session. */
export interface Failure {
  readonly kind: FailureKind
  readonly message: string
  readonly at: string
}

/** One conversation of a capture session: its root turn, its role and its length. */
export interface Conversation {
  readonly root_id: string
  readonly role: Role
  readonly n_turns: number
}

/** What `GET /admin/sessions/ID` reports about a capture session. */
export interface SessionStatus {
  readonly session_id: string
  readonly label: string | null
  readonly open: boolean
  readonly n_turns: number
  readonly conversations: ReadonlyArray<Conversation>
  /** The first transport failure (the rollout cannot be scored), else null. */
  readonly transport_failure: string | null
  readonly failures: ReadonlyArray<Failure>
}

const startsWith = (ids: ReadonlyArray<number>, prefix: ReadonlyArray<number>, offset = 0) => {
  for (let i = 0; i < prefix.length; i++) if (ids[offset + i] !== prefix[i]) return false
  return true
}

export class Session {
  open = true
  readonly turns: Array<Turn> = []
  readonly failures: Array<Failure> = []
  private readonly byId = new Map<string, Turn>()

  constructor(readonly id: string, readonly label: string | undefined) {}

  private parentOf(prompt: ReadonlyArray<number>): string | undefined {
    let best: Turn | undefined
    let bestEnd = 0
    for (const t of this.turns) {
      if (t.auxiliary !== undefined) continue
      const p = t.captured.promptIds
      const c = t.captured.completionIds
      const end = p.length + c.length
      if (end <= bestEnd || end > prompt.length || p.length >= prompt.length) continue
      if (startsWith(prompt, p) && startsWith(prompt, c, p.length)) {
        best = t
        bestEnd = end
      }
    }
    return best?.nodeId
  }

  add(dialect: string, request: ChatBody, captured: Captured, auxiliary: string | undefined): Turn {
    const index = this.turns.length
    const turn: Turn = {
      index,
      nodeId: String(index),
      dialect,
      captured,
      request,
      auxiliary,
      parent: auxiliary === undefined ? this.parentOf(captured.promptIds) : undefined
    }
    this.turns.push(turn)
    this.byId.set(turn.nodeId, turn)
    return turn
  }

  fail(kind: FailureKind, message: string) {
    this.failures.push({ kind, message, at: new Date().toISOString() })
  }

  rootOf(turn: Turn): string {
    let t = turn
    while (t.parent !== undefined) t = this.byId.get(t.parent)!
    return t.nodeId
  }

  /** Node ids of the turns that led nowhere while a sibling continued. */
  discarded(): Set<string> {
    const children = new Map<string, number>()
    for (const t of this.turns) if (t.parent !== undefined) children.set(t.parent, (children.get(t.parent) ?? 0) + 1)
    const groups = new Map<string, Array<Turn>>()
    for (const t of this.turns) {
      if (t.auxiliary !== undefined) continue
      const key = t.parent !== undefined ? `child:${t.parent}` : `root:${t.captured.promptIds.join(",")}`
      const group = groups.get(key)
      if (group === undefined) groups.set(key, [t])
      else group.push(t)
    }
    const out = new Set<string>()
    for (const group of groups.values()) {
      if (group.length < 2 || !group.some((t) => children.has(t.nodeId))) continue
      for (const t of group) if (!children.has(t.nodeId)) out.add(t.nodeId)
    }
    return out
  }

  roleOf(turn: Turn, discarded: Set<string>): Role {
    return turn.auxiliary !== undefined ? "auxiliary" : discarded.has(turn.nodeId) ? "discarded" : "agent"
  }

  status(): SessionStatus {
    const discarded = this.discarded()
    const byRoot = new Map<string, Array<Turn>>()
    for (const t of this.turns) {
      const root = this.rootOf(t)
      const list = byRoot.get(root)
      if (list === undefined) byRoot.set(root, [t])
      else list.push(t)
    }
    const transport = this.failures.find((f) => f.kind === "transport" || f.kind === "contract")
    return {
      session_id: this.id,
      label: this.label ?? null,
      open: this.open,
      n_turns: this.turns.length,
      conversations: [...byRoot].map(([root, turns]) => {
        const roles = turns.map((t) => this.roleOf(t, discarded))
        const role: Role = roles[0] === "auxiliary"
          ? "auxiliary"
          : roles.every((r) => r === "discarded")
          ? "discarded"
          : "agent"
        return { root_id: root, role, n_turns: turns.length }
      }),
      transport_failure: transport === undefined ? null : transport.message,
      failures: [...this.failures]
    }
  }

  /**
   * Every turn, in arrival order: agent turns train their completion (mask 1), auxiliary and discarded turns keep
   * their tokens as context only (mask 0); `metadata` says which and where each sits in its conversation.
   */
  trace(): TrainingTrace {
    const discarded = this.discarded()
    return {
      schema_version: 1,
      turns: this.turns.map((t) => {
        const c = t.captured
        const role = this.roleOf(t, discarded)
        const choice = Array.isArray(c.raw.choices) ? c.raw.choices[0] as Record<string, unknown> : {}
        return {
          node_id: t.nodeId,
          prompt_token_ids: [...c.promptIds],
          completion_token_ids: [...c.completionIds],
          per_token_logps: [...c.logprobs],
          loss_mask: [
            ...c.promptIds.map(() => 0),
            ...c.completionIds.map(() => (role === "agent" ? 1 : 0))
          ],
          request: {
            messages: t.request.messages ?? [],
            ...(Array.isArray(t.request.tools) ? { tools: t.request.tools } : {})
          },
          response: {
            id: c.raw.id ?? null,
            model: c.model,
            choices: [{ index: 0, message: choice.message ?? null, finish_reason: c.finishReason }]
          },
          metadata: {
            role,
            parent_id: t.parent ?? null,
            root_id: this.rootOf(t),
            dialect: t.dialect,
            finish_reason: c.finishReason,
            ...(t.auxiliary === undefined ? {} : { auxiliary_rule: t.auxiliary }),
            ...(typeof c.raw.policy_version === "number" ? { policy_version: c.raw.policy_version } : {})
          }
        }
      })
    }
  }
}
