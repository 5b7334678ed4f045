/**
 * MiniWoB++-style tasks written for envtrain: MiniWoB's task names, goals phrased as MiniWoB's utterances, and its
 * reward semantics (the page ends the episode with raw reward +1 on success or -1 on a wrong final move; BrowserGym
 * scores it `1.0 if raw > 0 else 0.0`). The seed picks the instance (labels, targets, order). Each task also has a
 * scripted solver that reads only the observation (goal and accessibility tree), as a model would.
 */
import type * as Prng from "./prng.js"

/** One generated instance: the goal, the page body, and the page's own checking script. */
export interface TaskInstance {
  readonly goal: string
  readonly body: string
  readonly script: string
}

/** What a solver sees. */
export interface SolverView {
  readonly goal: string
  readonly axtree: string
}

export interface Task {
  readonly name: string
  readonly make: (prng: Prng.Prng) => TaskInstance
  /** The next action string for the view, or undefined when the solver has nothing more to do. */
  readonly solve: (view: SolverView) => string | undefined
  /** A deliberately wrong first action (for tests); undefined where no single action fails the task. */
  readonly wrong?: (view: SolverView) => string | undefined
}

const WORDS = [
  "apple",
  "river",
  "stone",
  "cloud",
  "maple",
  "tiger",
  "ocean",
  "piano",
  "lemon",
  "eagle",
  "candle",
  "forest",
  "silver",
  "rocket",
  "garden",
  "violet",
  "castle",
  "harbor",
  "meadow",
  "planet",
  "copper",
  "falcon",
  "willow",
  "summit"
]

const NAMES = ["alice", "bruno", "chen", "dara", "emil", "fatima", "gus", "hana", "ivan", "jade", "kofi", "lena"]

const pick = (prng: Prng.Prng, n: number, from: ReadonlyArray<string> = WORDS): Array<string> =>
  prng.shuffle([...from]).slice(0, n)

const cap = (w: string) => w[0].toUpperCase() + w.slice(1)

// -------------------------------------------------------------------------------------------------------------
// Reading the accessibility tree (as a solver or a model would)
// -------------------------------------------------------------------------------------------------------------

interface Node {
  readonly bid: string
  readonly role: string
  readonly name: string
  readonly line: string
}

const nodes = (axtree: string): Array<Node> => {
  const out: Array<Node> = []
  for (const line of axtree.split("\n")) {
    const m = /^\s*\[(\w+)\] (\S+) '((?:[^'\\]|\\.)*)'/.exec(line)
    if (m) out.push({ bid: m[1], role: m[2], name: m[3].replace(/\\(.)/g, "$1"), line })
  }
  return out
}

const find = (view: SolverView, role: string, name?: string) =>
  nodes(view.axtree).find((n) => n.role === role && (name === undefined || n.name === name))

const quoted = (goal: string): Array<string> => [...goal.matchAll(/"([^"]*)"/g)].map((m) => m[1])

const click = (n: Node | undefined) => (n === undefined ? undefined : `click('${n.bid}')`)

/** The first of `roles` whose node has a bid, other than those named `except`. */
const other = (view: SolverView, role: string, except: ReadonlyArray<string>) =>
  nodes(view.axtree).find((n) => n.role === role && !except.includes(n.name))

const submitButton = `<button id="subbtn" class="secondary-action">Submit</button>`

// -------------------------------------------------------------------------------------------------------------
// The tasks
// -------------------------------------------------------------------------------------------------------------

const clickTest: Task = {
  name: "click-test",
  make: () => ({
    goal: "Click the button.",
    body: `<button id="subbtn">Click Me!</button>`,
    script: `document.getElementById("subbtn").addEventListener("click", () => WOB.end(1))`
  }),
  solve: (v) => click(find(v, "button", "Click Me!")),
  wrong: (v) => click(find(v, "paragraph") ?? find(v, "generic"))
}

const clickTest2: Task = {
  name: "click-test-2",
  make: (prng) => {
    const order = prng.shuffle(["ONE", "TWO"])
    return {
      goal: "Click button ONE.",
      body: order.map((l) => `<button class="choice">${l}</button>`).join(" "),
      script: `document.querySelectorAll("button.choice").forEach((b) =>
        b.addEventListener("click", () => WOB.end(b.textContent === "ONE" ? 1 : -1)))`
    }
  },
  solve: (v) => click(find(v, "button", "ONE")),
  wrong: (v) => click(find(v, "button", "TWO"))
}

const clickButton: Task = {
  name: "click-button",
  make: (prng) => {
    const labels = pick(prng, 5).map(cap)
    const target = prng.choice(labels)
    return {
      goal: `Click on the "${target}" button.`,
      body: labels.map((l) => `<button class="choice">${l}</button>`).join(" "),
      script: `document.querySelectorAll("button.choice").forEach((b) =>
        b.addEventListener("click", () => WOB.end(b.textContent === ${JSON.stringify(target)} ? 1 : -1)))`
    }
  },
  solve: (v) => click(find(v, "button", quoted(v.goal)[0])),
  wrong: (v) => click(other(v, "button", quoted(v.goal)))
}

const clickLink: Task = {
  name: "click-link",
  make: (prng) => {
    const words = pick(prng, 6)
    const target = prng.choice(words)
    const text = words.map((w) => `<a href="#" class="alink">${w}</a>`).join(", ")
    return {
      goal: `Click on the link "${target}".`,
      body: `<p>Some text: ${text}.</p>`,
      script: `document.querySelectorAll("a.alink").forEach((a) =>
        a.addEventListener("click", (e) => { e.preventDefault(); WOB.end(a.textContent === ${
        JSON.stringify(target)
      } ? 1 : -1) }))`
    }
  },
  solve: (v) => click(find(v, "link", quoted(v.goal)[0])),
  wrong: (v) => click(other(v, "link", quoted(v.goal)))
}

const enterText: Task = {
  name: "enter-text",
  make: (prng) => {
    const target = prng.choice(NAMES.map(cap))
    return {
      goal: `Enter "${target}" into the text field and press Submit.`,
      body: `<input type="text" id="tt" aria-label="text field"> ${submitButton}`,
      script: `document.getElementById("subbtn").addEventListener("click", () =>
        WOB.end(document.getElementById("tt").value === ${JSON.stringify(target)} ? 1 : -1))`
    }
  },
  solve: (v) => {
    const box = find(v, "textbox")
    const target = quoted(v.goal)[0]
    if (box === undefined) return undefined
    return box.line.includes(`value='${target}'`)
      ? click(find(v, "button", "Submit"))
      : `fill('${box.bid}', '${target}')`
  },
  wrong: (v) => click(find(v, "button", "Submit"))
}

const focusText: Task = {
  name: "focus-text",
  make: () => ({
    goal: "Focus into the textbox.",
    body: `<input type="text" id="tt" aria-label="textbox">`,
    script: `document.getElementById("tt").addEventListener("focus", () => WOB.end(1))`
  }),
  solve: (v) => click(find(v, "textbox"))
}

const clickCheckboxes: Task = {
  name: "click-checkboxes",
  make: (prng) => {
    const labels = pick(prng, 5)
    const count = 1 + prng.int(3)
    const targets = labels.slice(0, count)
    const shown = prng.shuffle([...labels])
    const boxes = shown.map((l, i) => `<label><input type="checkbox" id="ch${i}" data-label="${l}">${l}</label><br>`)
      .join("")
    const goal = targets.length === 1
      ? `Select ${targets[0]} and click Submit.`
      : `Select ${targets.slice(0, -1).join(", ")} and ${targets[targets.length - 1]} and click Submit.`
    return {
      goal,
      body: `<div id="boxes">${boxes}</div>${submitButton}`,
      script: `const want = ${JSON.stringify([...targets].sort())};
        document.getElementById("subbtn").addEventListener("click", () => {
          const got = [...document.querySelectorAll("input[type=checkbox]")].filter((c) => c.checked)
            .map((c) => c.dataset.label).sort();
          WOB.end(JSON.stringify(got) === JSON.stringify(want) ? 1 : -1) })`
    }
  },
  solve: (v) => {
    const wanted = v.goal.replace(/^Select /, "").replace(/ and click Submit\.$/, "").split(/, | and /)
    const todo = nodes(v.axtree).find((n) =>
      n.role === "checkbox" && wanted.includes(n.name) !== n.line.includes("checked=true")
    )
    return todo !== undefined ? click(todo) : click(find(v, "button", "Submit"))
  },
  wrong: (v) => click(find(v, "button", "Submit"))
}

const chooseList: Task = {
  name: "choose-list",
  make: (prng) => {
    const options = pick(prng, 6).map(cap)
    const target = prng.choice(options)
    return {
      goal: `Select ${target} from the list and click Submit.`,
      body: `<select id="opts" aria-label="options">${
        options.map((o) => `<option>${o}</option>`).join("")
      }</select> ${submitButton}`,
      script: `document.getElementById("subbtn").addEventListener("click", () =>
        WOB.end(document.getElementById("opts").value === ${JSON.stringify(target)} ? 1 : -1))`
    }
  },
  solve: (v) => {
    const target = /^Select (\S+) from the list/.exec(v.goal)?.[1] ?? ""
    const list = find(v, "combobox")
    if (list === undefined) return undefined
    return list.line.includes(`value='${target}'`)
      ? click(find(v, "button", "Submit"))
      : `select_option('${list.bid}', '${target}')`
  },
  wrong: (v) => {
    const target = /^Select (\S+) from the list/.exec(v.goal)?.[1] ?? ""
    const list = find(v, "combobox")
    // The first option is selected at load: the wrong move is submitting it unless it is the target.
    return list !== undefined && list.line.includes(`value='${target}'`)
      ? `select_option('${list.bid}', '${other(v, "option", [target])?.name ?? ""}')`
      : click(find(v, "button", "Submit"))
  }
}

const loginUser: Task = {
  name: "login-user",
  make: (prng) => {
    const user = prng.choice(NAMES)
    const password = prng.choice(WORDS) + String(prng.int(100))
    return {
      goal: `Enter the username "${user}" and the password "${password}" into the text fields and press login.`,
      body: `<div id="form"><p><label for="username">Username</label><input type="text" id="username"></p>
        <p><label for="password">Password</label><input type="password" id="password"></p>
        <button id="subbtn" class="secondary-action">Login</button></div>`,
      script: `document.getElementById("subbtn").addEventListener("click", () =>
        WOB.end(document.getElementById("username").value === ${JSON.stringify(user)} &&
          document.getElementById("password").value === ${JSON.stringify(password)} ? 1 : -1))`
    }
  },
  solve: (v) => {
    const [user, password] = quoted(v.goal)
    const u = find(v, "textbox", "Username")
    const p = find(v, "textbox", "Password")
    if (u === undefined || p === undefined) return undefined
    if (!u.line.includes(`value='${user}'`)) return `fill('${u.bid}', '${user}')`
    if (!p.line.includes(`value='${"•".repeat(password.length)}'`) && !p.line.includes(`value='${password}'`)) {
      return `fill('${p.bid}', '${password}')`
    }
    return click(find(v, "button", "Login"))
  },
  wrong: (v) => click(find(v, "button", "Login"))
}

const clickTab: Task = {
  name: "click-tab",
  make: (prng) => {
    const n = 2 + prng.int(3)
    const target = 1 + prng.int(n)
    const tabs = Array.from(
      { length: n },
      (_, i) => `<a href="#" role="tab" class="tab" data-n="${i + 1}">Tab #${i + 1}</a>`
    )
      .join(" ")
    const panels = Array.from(
      { length: n },
      (_, i) =>
        `<div class="panel" data-n="${i + 1}" ${i === 0 ? "" : "hidden"}><p>${pick(prng, 4).join(" ")}</p></div>`
    ).join("")
    return {
      goal: `Click on Tab #${target}.`,
      body: `<div role="tablist">${tabs}</div>${panels}`,
      script: `document.querySelectorAll("a.tab").forEach((a) => a.addEventListener("click", (e) => {
          e.preventDefault();
          document.querySelectorAll(".panel").forEach((p) => { p.hidden = p.dataset.n !== a.dataset.n });
          WOB.end(a.dataset.n === "${target}" ? 1 : -1) }))`
    }
  },
  solve: (v) => click(find(v, "tab", /Tab #\d+/.exec(v.goal)?.[0])),
  wrong: (v) => click(other(v, "tab", [/Tab #\d+/.exec(v.goal)?.[0] ?? ""]))
}

const navigateTree: Task = {
  name: "navigate-tree",
  make: (prng) => {
    const names = pick(prng, 7, NAMES.map(cap))
    // Two folders, each holding files; one file at the root.
    const [f1, f2, a, b, c, d, root] = names
    const target = prng.choice([a, b, c, d, root])
    const file = (n: string) => `<li role="treeitem" class="file">${n}</li>`
    const folder = (n: string, files: ReadonlyArray<string>) =>
      `<li role="treeitem" class="folder" aria-expanded="false">${n}<ul role="group" hidden>${
        files.map(file).join("")
      }</ul></li>`
    return {
      goal: `Navigate through the file tree. Find and click on the folder or file named "${target}".`,
      body: `<ul role="tree" id="tree">${folder(f1, [a, b])}${folder(f2, [c, d])}${file(root)}</ul>`,
      script: `document.getElementById("tree").addEventListener("click", (e) => {
          const li = e.target.closest("li"); if (!li) return;
          const name = li.firstChild.textContent;
          if (name === ${JSON.stringify(target)}) return WOB.end(1);
          if (li.classList.contains("folder")) {
            const ul = li.querySelector("ul"); ul.hidden = !ul.hidden;
            li.setAttribute("aria-expanded", String(!ul.hidden));
          } else WOB.end(-1) })`
    }
  },
  solve: (v) => {
    const target = quoted(v.goal)[0]
    const hit = find(v, "treeitem", target)
    if (hit !== undefined) return click(hit)
    const closed = nodes(v.axtree).find((n) => n.role === "treeitem" && n.line.includes("expanded=false"))
    return click(closed)
  },
  wrong: (v) => {
    const target = quoted(v.goal)[0]
    return click(
      nodes(v.axtree).find((n) => n.role === "treeitem" && n.name !== target && !n.line.includes("expanded="))
    )
  }
}

const clickDialog: Task = {
  name: "click-dialog",
  make: (prng) => ({
    goal: `Close the dialog box by clicking the "x".`,
    body: `<div role="dialog" aria-label="${cap(prng.choice(WORDS))}" id="dialog">
        <div class="titlebar"><button id="close" title="Close">x</button></div>
        <p>${pick(prng, 6).join(" ")}</p><button id="ok">OK</button></div>`,
    script: `document.getElementById("close").addEventListener("click", () => {
        document.getElementById("dialog").hidden = true; WOB.end(1) });
      document.getElementById("ok").addEventListener("click", () => WOB.end(-1))`
  }),
  solve: (v) => click(find(v, "button", "x")),
  wrong: (v) => click(find(v, "button", "OK"))
}

const clickOption: Task = {
  name: "click-option",
  make: (prng) => {
    const labels = pick(prng, 4)
    const target = prng.choice(labels)
    return {
      goal: `Select ${target} and click Submit.`,
      body: labels.map((l) => `<label><input type="radio" name="opt" data-label="${l}">${l}</label><br>`).join("") +
        submitButton,
      script: `document.getElementById("subbtn").addEventListener("click", () => {
          const c = document.querySelector("input[type=radio]:checked");
          WOB.end(c !== null && c.dataset.label === ${JSON.stringify(target)} ? 1 : -1) })`
    }
  },
  solve: (v) => {
    const target = /^Select (\S+) and click Submit/.exec(v.goal)?.[1] ?? ""
    const radio = find(v, "radio", target)
    if (radio === undefined) return undefined
    return radio.line.includes("checked=true") ? click(find(v, "button", "Submit")) : click(radio)
  },
  wrong: (v) => click(find(v, "button", "Submit"))
}

const enterPassword: Task = {
  name: "enter-password",
  make: (prng) => {
    const password = prng.choice(WORDS)
    return {
      goal: `Enter the password "${password}" into both text fields and press submit.`,
      body: `<p><label for="password">Password</label><input type="password" id="password"></p>
        <p><label for="verify">Verify password</label><input type="password" id="verify"></p>${submitButton}`,
      script: `document.getElementById("subbtn").addEventListener("click", () =>
        WOB.end(document.getElementById("password").value === ${JSON.stringify(password)} &&
          document.getElementById("verify").value === ${JSON.stringify(password)} ? 1 : -1))`
    }
  },
  solve: (v) => {
    const [password] = quoted(v.goal)
    const boxes = nodes(v.axtree).filter((n) => n.role === "textbox")
    const empty = boxes.find((b) => !b.line.includes("value='"))
    return empty !== undefined ? `fill('${empty.bid}', '${password}')` : click(find(v, "button", "Submit"))
  },
  wrong: (v) => click(find(v, "button", "Submit"))
}

/** Every task, by name. */
export const tasks: ReadonlyMap<string, Task> = new Map(
  [
    clickTest,
    clickTest2,
    clickButton,
    clickLink,
    enterText,
    focusText,
    clickCheckboxes,
    chooseList,
    loginUser,
    clickTab,
    navigateTree,
    clickDialog,
    clickOption,
    enterPassword
  ].map((t) => [t.name, t])
)

/** The in-page episode record: MiniWoB's `core` reduced to what BrowserGym reads (done, raw reward). */
const CORE = `window.WOB = { done: false, raw: 0, end(r) { if (!this.done) { this.done = true; this.raw = r } } };`

/** The full page of an instance. */
export const page = (name: string, instance: TaskInstance): string =>
  `<!doctype html><html><head><meta charset="utf-8"><title>${name}</title><style>
body { font: 13px sans-serif; margin: 0 } #wrap { width: 160px; min-height: 210px; padding: 4px; border: 1px solid #ccc }
#query { background: #ff0; padding: 3px; margin-bottom: 4px } button { margin: 2px } [hidden] { display: none }
</style></head><body><div id="wrap"><div id="query">${instance.goal}</div><div id="area">${instance.body}</div></div>
<script>${CORE}${instance.script}</script></body></html>`
