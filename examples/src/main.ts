// The README's main job (`npm start`). Until the flagship training demo lands (issue 9), it is the smoke run:
// open the GPU and print the adapter, check a kernel against its CPU twin, and play one environment episode.
import { Doctor, Main } from "@envtrain/harness"

Main.run(Doctor.run())
