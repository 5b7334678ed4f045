#!/usr/bin/env node
// The envtrain command. Sources are TypeScript; tsx compiles them on the fly.
import { register } from "tsx/esm/api"

register()
await import("../src/bin.ts")
