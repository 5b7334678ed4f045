/**
 * The cluster's node layers over sockets with SQL storage: @effect/platform-node's `NodeClusterSocket.layer`, composed
 * here the same way except for the runner health check. Upstream's ping waits 10 s per try and tries 6 times, so a
 * hung runner (SIGSTOP, a wedged host: its socket still accepts) is declared dead after about a minute; here the
 * wait and the tries are settings (`pingTimeout`, `pingRetries`).
 */
import * as RunnerHealth from "@effect/cluster/RunnerHealth"
import * as Runners from "@effect/cluster/Runners"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import * as SocketRunner from "@effect/cluster/SocketRunner"
import * as SqlMessageStorage from "@effect/cluster/SqlMessageStorage"
import * as SqlRunnerStorage from "@effect/cluster/SqlRunnerStorage"
import { layerClientProtocol, layerSocketServer } from "@effect/platform-node/NodeClusterSocket"
import * as RpcSerialization from "@effect/rpc/RpcSerialization"
import { type Duration, Effect, Layer, Schedule } from "effect"

export interface HealthOptions {
  readonly pingTimeout: Duration.DurationInput
  readonly pingRetries: number
}

const health = (options: HealthOptions) =>
  Layer.effect(
    RunnerHealth.RunnerHealth,
    Effect.map(Runners.Runners, (runners) =>
      RunnerHealth.RunnerHealth.of({
        isAlive: (address) =>
          runners.ping(address).pipe(
            Effect.timeout(options.pingTimeout),
            Effect.retry({ times: options.pingRetries, schedule: Schedule.spaced(200) }),
            Effect.isSuccess
          )
      }))
  ).pipe(Layer.provide(Runners.layerRpc), Layer.provide(layerClientProtocol))

const storage = <A, E, R>(layer: Layer.Layer<A, E, R>, config: Partial<ShardingConfig.ShardingConfig["Type"]>) =>
  layer.pipe(
    Layer.provideMerge(Layer.orDie(SqlMessageStorage.layer)),
    Layer.provide(Layer.orDie(SqlRunnerStorage.layer)),
    Layer.provide(ShardingConfig.layer(config)),
    Layer.provide(RpcSerialization.layerMsgPack)
  )

/** A runner: serves its shards' entities on `config.runnerAddress`. */
export const runner = (config: Partial<ShardingConfig.ShardingConfig["Type"]>, options: HealthOptions) =>
  storage(
    Layer.provide(SocketRunner.layer, [layerSocketServer, layerClientProtocol]).pipe(Layer.provide(health(options))),
    config
  )

/** A client-only node (the trainer): sends messages, serves none. */
export const client = (config: Partial<ShardingConfig.ShardingConfig["Type"]>) =>
  storage(Layer.provide(SocketRunner.layerClientOnly, layerClientProtocol), config)
