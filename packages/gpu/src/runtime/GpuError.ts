/**
 * Typed failures of the WebGPU device. Each message says what happened and, where there is one, the fix.
 *
 * @since 0.0.0
 */
import { Data } from "effect"

/** No WebGPU adapter could be found (no GPU driver, no software Vulkan driver). */
export class GpuUnavailable extends Data.TaggedError("GpuUnavailable")<{
  readonly reason: string
}> {
  override get message() {
    return `No WebGPU adapter is available: ${this.reason}. ` +
      `On Debian 12 install Mesa's software Vulkan driver as root: run \`sudo bash scripts/ensure-vulkan.sh\` in the ` +
      `envtrain checkout (npm start and npm test run it for you when run as root). It adds bookworm-backports from the ` +
      `same mirror as your Debian sources (\`bash scripts/ensure-vulkan.sh --backports-line\` prints that line), then ` +
      `runs apt-get update && apt-get install -y libvulkan1 && apt-get install -y -t bookworm-backports ` +
      `mesa-vulkan-drivers. On a GPU machine, install the vendor's Vulkan driver.`
  }
}

/** The device was lost (driver reset, out of device memory, destroyed while in use). Nothing after it ran. */
export class GpuDeviceLost extends Data.TaggedError("GpuDeviceLost")<{
  readonly reason: string
  readonly detail: string
}> {
  override get message() {
    return `The WebGPU device was lost (${this.reason}): ${this.detail}. ` +
      `Work submitted since the last fence did not run; restart from the last checkpoint.`
  }
}

/**
 * Dawn reported errors that nobody captured. Dawn drops the whole submit that raised them, so the results of
 * every dispatch since the last fence are stale: the step must not be used.
 */
export class GpuUncapturedError extends Data.TaggedError("GpuUncapturedError")<{
  readonly errors: ReadonlyArray<string>
}> {
  override get message() {
    const shown = this.errors.slice(0, 3).join(" | ")
    const more = this.errors.length > 3 ? ` (and ${this.errors.length - 3} more)` : ""
    return `WebGPU reported ${this.errors.length} uncaptured error(s) since the last fence; ` +
      `the work they belong to was dropped: ${shown}${more}`
  }
}

/** An allocation failed. Names the tensor and its size so the user knows what to shrink. */
export class GpuOutOfMemory extends Data.TaggedError("GpuOutOfMemory")<{
  readonly label: string
  readonly bytes: number
  readonly detail: string
}> {
  override get message() {
    return `Out of GPU memory allocating "${this.label}" (${formatBytes(this.bytes)}): ${this.detail}. ` +
      `Reduce the batch size or sequence length, or use a smaller model.`
  }
}

/** A buffer was asked for that the device's limits forbid. */
export class GpuLimitExceeded extends Data.TaggedError("GpuLimitExceeded")<{
  readonly label: string
  readonly limit: string
  readonly requested: number
  readonly allowed: number
}> {
  override get message() {
    return `"${this.label}" needs ${formatBytes(this.requested)} but the device's ${this.limit} is ` +
      `${formatBytes(this.allowed)}. Split the tensor or use a device with larger limits.`
  }
}

/** WGSL failed to compile or the pipeline is invalid. Carries the compiler's messages with line numbers. */
export class GpuShaderError extends Data.TaggedError("GpuShaderError")<{
  readonly label: string
  readonly messages: ReadonlyArray<string>
}> {
  override get message() {
    return `Compute pipeline "${this.label}" is invalid:\n  ${this.messages.join("\n  ")}`
  }
}

/** Every failure the device can report. */
export type GpuError =
  | GpuUnavailable
  | GpuDeviceLost
  | GpuUncapturedError
  | GpuOutOfMemory
  | GpuLimitExceeded
  | GpuShaderError

/** @internal */
export const formatBytes = (n: number): string =>
  n >= 1 << 30
    ? `${(n / (1 << 30)).toFixed(2)} GiB`
    : n >= 1 << 20
    ? `${(n / (1 << 20)).toFixed(1)} MiB`
    : n >= 1 << 10
    ? `${(n / (1 << 10)).toFixed(1)} KiB`
    : `${n} B`
