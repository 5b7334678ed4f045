// How many sessions this process holds at once on one server (by WebSocket URL). A server's session limit is per
// server, shared by every client of the process, so the gate is module state keyed by URL. Its limit is set by a
// knob (`maxSessions`, `Client.limitSessions`) or learned from the server's CAPACITY_REACHED frame (OpenEnv exposes
// its limit nowhere else). Clients past the limit wait here, first come first served, instead of polling the server.
import { Effect } from "effect"

export interface Gate {
  readonly url: string
  /** Sessions this process may hold; undefined until set or learned (no local limit). */
  limit: number | undefined
  /** Set by a knob: a CAPACITY_REACHED frame does not override it. */
  fixed: boolean
  /** Clients holding a permit (a session, or the right to open one). */
  active: number
  readonly queue: Array<() => boolean>
  /**
   * When a session of this process at this URL last opened or a permit was released (Date.now() ms): a waiter's
   * bound counts from here, so a queue that keeps moving waits on.
   */
  movedAt: number
}

const gates = new Map<string, Gate>()

export const gateOf = (url: string): Gate => {
  const found = gates.get(url)
  if (found !== undefined) return found
  const gate: Gate = { url, limit: undefined, fixed: false, active: 0, queue: [], movedAt: 0 }
  gates.set(url, gate)
  return gate
}

const free = (gate: Gate): boolean => gate.limit === undefined || gate.active < gate.limit

/** Wakes waiters in order while there is room (a woken waiter takes its permit synchronously). */
const wake = (gate: Gate): void => {
  while (gate.queue.length > 0 && free(gate)) {
    const next = gate.queue.shift()!
    next()
  }
}

/** Sets the limit from a knob (it wins over what the server reports). */
export const setLimit = (gate: Gate, limit: number): void => {
  gate.limit = Math.max(1, Math.floor(limit))
  gate.fixed = true
  wake(gate)
}

/** Adopts the limit a CAPACITY_REACHED frame reports, unless a knob set one. */
export const learn = (gate: Gate, maxSessions: number): void => {
  if (gate.fixed || maxSessions < 1) return
  gate.limit = maxSessions
}

/**
 * Takes a permit; `onTaken` runs in the same synchronous step as the count, so an interruption right after cannot
 * strand a permit the caller does not know it holds.
 */
export const acquire = (gate: Gate, onTaken: () => void): Effect.Effect<void> =>
  Effect.async<void>((resume) => {
    if (free(gate) && gate.queue.length === 0) {
      gate.active += 1
      onTaken()
      return resume(Effect.void)
    }
    const waiter = () => {
      gate.active += 1
      onTaken()
      resume(Effect.void)
      return true
    }
    gate.queue.push(waiter)
    return Effect.sync(() => {
      const i = gate.queue.indexOf(waiter)
      if (i >= 0) gate.queue.splice(i, 1)
    })
  })

export const release = (gate: Gate): void => {
  gate.active = Math.max(0, gate.active - 1)
  gate.movedAt = Date.now()
  wake(gate)
}

/** A session opened (the server accepted it): the queue moved. */
export const moved = (gate: Gate): void => {
  gate.movedAt = Date.now()
}
