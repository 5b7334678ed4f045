/**
 * The in-page script that marks every element with a BrowserGym element id (`bid` attribute, kept across steps) and
 * writes the observation texts: the accessibility tree as BrowserGym flattens it (`[bid] role 'name', props`, one
 * tab of indent per level, `StaticText` lines for text) and the pruned HTML (visible elements with a bid and the
 * attributes an agent needs), and the episode's done flag and raw reward (envtrain's `window.WOB`, or the real
 * MiniWoB++ pages' `WOB_DONE_GLOBAL` / `WOB_RAW_REWARD_GLOBAL`). Roles and names follow the HTML-AAM mappings for
 * the elements tasks use; it is a DOM walk, not Chromium's own accessibility tree.
 *
 * Kept as a string: a function passed to `page.evaluate` would be serialised after the TypeScript transform, which
 * may add helpers that do not exist in the page.
 */

export interface Snapshot {
  readonly title: string
  readonly url: string
  readonly axtree: string
  readonly html: string
  readonly done: boolean
  readonly raw: number
  readonly hasWob: boolean
}

export const SNAPSHOT_SCRIPT = String.raw`(() => {
  const doc = document;
  let next = Number(doc.documentElement.getAttribute("data-bid-next") || "1");
  for (const el of doc.body ? [doc.body, ...doc.body.querySelectorAll("*")] : []) {
    if (!el.hasAttribute("bid")) el.setAttribute("bid", String(next++));
  }
  doc.documentElement.setAttribute("data-bid-next", String(next));
  const SKIP = new Set(["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE", "META", "LINK", "HEAD"]);
  const visible = (el) => {
    if (el.hidden) return false;
    const s = getComputedStyle(el);
    return s.display !== "none" && s.visibility !== "hidden";
  };
  const text = (s) => (s || "").replace(/\s+/g, " ").trim();
  const labelOf = (el) => {
    if (el.id) { const l = doc.querySelector('label[for="' + CSS.escape(el.id) + '"]'); if (l) return text(l.textContent); }
    const l = el.closest("label"); if (l) return text(l.textContent);
    return "";
  };
  const inputRole = (el) => {
    const t = (el.getAttribute("type") || "text").toLowerCase();
    if (t === "checkbox") return "checkbox";
    if (t === "radio") return "radio";
    if (t === "submit" || t === "button" || t === "reset") return "button";
    if (t === "hidden") return null;
    return "textbox";
  };
  const roleOf = (el) => {
    const r = el.getAttribute("role"); if (r) return r;
    switch (el.tagName) {
      case "BUTTON": return "button";
      case "A": return el.hasAttribute("href") ? "link" : "generic";
      case "INPUT": return inputRole(el);
      case "TEXTAREA": return "textbox";
      case "SELECT": return "combobox";
      case "OPTION": return "option";
      case "H1": case "H2": case "H3": case "H4": case "H5": case "H6": return "heading";
      case "P": return "paragraph";
      case "UL": case "OL": return "list";
      case "LI": return "listitem";
      case "LABEL": return "LabelText";
      case "IMG": return "img";
      case "FORM": return "form";
      case "TABLE": return "table";
      case "TR": return "row";
      case "TD": return "cell";
      case "TH": return "columnheader";
      default: return "generic";
    }
  };
  const ownText = (el) => text([...el.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent).join(" "));
  const nameOf = (el, role) => {
    const aria = el.getAttribute("aria-label"); if (aria) return text(aria);
    if (el.tagName === "INPUT" || el.tagName === "TEXTAREA" || el.tagName === "SELECT") {
      return labelOf(el) || text(el.getAttribute("placeholder")) || (el.type === "submit" ? text(el.value) : "");
    }
    if (role === "treeitem") return ownText(el) || text(el.textContent);
    if (["button", "link", "option", "heading", "tab", "LabelText", "checkbox", "radio", "cell", "columnheader"]
      .includes(role)) return text(el.textContent);
    return "";
  };
  const q = (s) => "'" + String(s).replace(/\\/g, "\\\\").replace(/'/g, "\\'") + "'";
  const lines = ["RootWebArea " + q(doc.title) + ", focused"];
  const NAMED = new Set(["button", "link", "option", "heading", "tab", "LabelText", "checkbox", "radio", "cell",
    "columnheader", "treeitem"]);
  const walk = (el, depth) => {
    if (SKIP.has(el.tagName) || !visible(el)) return;
    const role = roleOf(el);
    if (role === null) return;
    const name = nameOf(el, role);
    const props = [];
    if (doc.activeElement === el && el !== doc.body) props.push("focused");
    if (role === "textbox") {
      const v = el.value || "";
      if (v) props.push("value=" + q(el.type === "password" ? "\u2022".repeat(v.length) : v));
    }
    if (role === "combobox") props.push("value=" + q(el.value));
    if (role === "checkbox" || role === "radio") props.push("checked=" + (el.checked ? "true" : "false"));
    if (role === "option" && el.selected) props.push("selected=true");
    if (el.hasAttribute("aria-expanded")) props.push("expanded=" + el.getAttribute("aria-expanded"));
    if (el.disabled) props.push("disabled=true");
    const generic = role === "generic" || role === "LabelText";
    let d = depth;
    if (!generic || name) {
      lines.push("\t".repeat(depth) + "[" + el.getAttribute("bid") + "] " + role + " " + q(name) +
        (props.length ? ", " + props.join(", ") : ""));
      d = depth + 1;
    }
    // Text the role's name already carries is not repeated as StaticText.
    const named = NAMED.has(role) || (el.tagName === "LABEL");
    for (const child of el.childNodes) {
      if (child.nodeType === 3) {
        const t = text(child.textContent);
        if (t && !named) lines.push("\t".repeat(d) + "StaticText " + q(t));
      } else if (child.nodeType === 1) {
        if (role === "combobox" && child.tagName === "OPTION") {
          lines.push("\t".repeat(d) + "[" + child.getAttribute("bid") + "] option " + q(text(child.textContent)) +
            (child.selected ? ", selected=true" : ""));
        } else walk(child, d);
      }
    }
  };
  if (doc.body) walk(doc.body, 1);
  const KEEP = ["type", "value", "placeholder", "href", "role", "name", "title", "for", "aria-label",
    "aria-expanded", "checked", "selected", "disabled"];
  const html = (el) => {
    if (SKIP.has(el.tagName) || !visible(el)) return "";
    const tag = el.tagName.toLowerCase();
    let attrs = ' bid="' + el.getAttribute("bid") + '"';
    for (const a of KEEP) {
      if (a === "value" && (el.tagName === "INPUT" || el.tagName === "TEXTAREA" || el.tagName === "SELECT")) {
        if (el.value && el.type !== "password") attrs += ' value="' + el.value.replace(/"/g, "&quot;") + '"';
      } else if (a === "checked" && el.tagName === "INPUT") {
        if (el.checked) attrs += " checked";
      } else if (el.hasAttribute(a)) attrs += " " + a + '="' + el.getAttribute(a).replace(/"/g, "&quot;") + '"';
    }
    let inner = "";
    for (const child of el.childNodes) {
      if (child.nodeType === 3) inner += text(child.textContent) ? " " + text(child.textContent) + " " : "";
      else if (child.nodeType === 1) inner += html(child);
    }
    inner = inner.replace(/\s+/g, " ").trim();
    if (tag === "div" && !el.attributes.length && !inner) return "";
    return "<" + tag + attrs + ">" + inner + "</" + tag + ">";
  };
  // envtrain's pages keep the episode in window.WOB; the real MiniWoB++ pages in core.js's globals.
  const wob = window.WOB || (typeof WOB_DONE_GLOBAL === "undefined" ? undefined
    : { done: WOB_DONE_GLOBAL, raw: WOB_RAW_REWARD_GLOBAL });
  return {
    title: doc.title, url: location.href, axtree: lines.join("\n"),
    html: doc.body ? "<body>" + html(doc.body) + "</body>" : "",
    done: !!(wob && wob.done), raw: wob ? Number(wob.raw) : 0, hasWob: !!wob
  };
})()`
