/**
 * A bounded hand-off of items from many producer fibers to one consumer (the rollout's workers to its stream).
 *
 * Effect's `Queue` would do, but its linked list keeps removed nodes pointing at their values and successors: once
 * one node had reached V8's old generation, the young collector kept every later item alive through it, so every
 * group's records were promoted and the old generation churned (measured: a tenth of everything a rollout
 * allocated). Here items live in a plain array and waiting callbacks are dropped as soon as they run.
 */
import { Cause, Effect, Exit, Option } from "effect"

export interface Handoff<A, E> {
  /** Waits while `capacity` items are waiting for the consumer (back-pressure); interruptible. */
  readonly offer: (item: A) => Effect.Effect<void>
  /** The next item in offer order; after `end`, the remaining items, then `None` (success) or the failure. */
  readonly take: Effect.Effect<A, Option.Option<E>>
  /** No more items: the producers finished with this exit. */
  readonly end: (exit: Exit.Exit<unknown, E>) => void
}

export const make = <A, E>(capacity: number): Handoff<A, E> => {
  const ready: Array<A> = []
  // Producers waiting for room: each moves its item along and resumes its fiber.
  const writers: Array<() => void> = []
  let reader: ((effect: Effect.Effect<A, Option.Option<E>>) => void) | undefined
  let ended: Exit.Exit<unknown, E> | undefined
  const finished = (exit: Exit.Exit<unknown, E>): Effect.Effect<never, Option.Option<E>> =>
    Exit.isSuccess(exit) ? Effect.fail(Option.none()) : Effect.failCause(Cause.map(exit.cause, Option.some))
  const offer = (item: A) =>
    Effect.async<void>((resume) => {
      const put = () => {
        const waiting = reader
        if (waiting !== undefined) {
          reader = undefined
          waiting(Effect.succeed(item))
        } else ready.push(item)
        resume(Effect.void)
      }
      if (reader !== undefined || ready.length < capacity) return put()
      writers.push(put)
      return Effect.sync(() => {
        const i = writers.indexOf(put)
        if (i >= 0) writers.splice(i, 1)
      })
    })
  const take = Effect.async<A, Option.Option<E>>((resume) => {
    if (ready.length > 0) {
      const item = ready.shift()!
      writers.shift()?.()
      return resume(Effect.succeed(item))
    }
    if (ended !== undefined) return resume(finished(ended))
    reader = resume
    return Effect.sync(() => {
      if (reader === resume) reader = undefined
    })
  })
  const end = (exit: Exit.Exit<unknown, E>) => {
    ended = exit
    const waiting = reader
    if (waiting !== undefined) {
      reader = undefined
      waiting(finished(exit))
    }
  }
  return { offer, take, end }
}
