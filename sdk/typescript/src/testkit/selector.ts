/**
 * Kubernetes label selectors (`a=b,c in (d),!e`) for the test kit's
 * world. The host's own parser is `rules/src/selector.rs`; the test kit's
 * `selector.test.ts` runs the same cases as its unit tests.
 */
type Requirement =
  | { op: "eq"; key: string; values: string[] }
  | { op: "ne"; key: string; values: string[] }
  | { op: "exists"; key: string }
  | { op: "absent"; key: string };

/** Splits on commas outside parentheses. */
function terms(text: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = "";
  for (const ch of text) {
    if (ch === "(") depth++;
    if (ch === ")") depth--;
    if (ch === "," && depth === 0) {
      out.push(cur);
      cur = "";
    } else cur += ch;
  }
  out.push(cur);
  return out.map((t) => t.trim()).filter((t) => t !== "");
}

/** Parses a selector; throws with a message naming the selector when it does not parse. */
export function parseSelector(text: string): Requirement[] {
  const bad = (why: string) => new Error(`label selector ${JSON.stringify(text)}: ${why}`);
  return terms(text).map((t): Requirement => {
    let m = /^([^\s=!(),]+)\s+(in|notin)\s+\(([^)]*)\)$/.exec(t);
    if (m) {
      const values = m[3].split(",").map((v) => v.trim());
      return { op: m[2] === "in" ? "eq" : "ne", key: m[1], values };
    }
    m = /^([^\s=!(),]+)\s*(==|=|!=)\s*([^\s=!(),]*)$/.exec(t);
    if (m) return { op: m[2] === "!=" ? "ne" : "eq", key: m[1], values: [m[3]] };
    m = /^!\s*([^\s=!(),]+)$/.exec(t);
    if (m) return { op: "absent", key: m[1] };
    if (/^[^\s=!(),]+$/.test(t)) return { op: "exists", key: t };
    throw bad(`cannot parse ${JSON.stringify(t)}`);
  });
}

/** Whether `labels` match `selector` (already parsed). */
export function matches(selector: Requirement[], labels: Record<string, string>): boolean {
  return selector.every((r) => {
    const has = Object.hasOwn(labels, r.key);
    switch (r.op) {
      case "eq":
        return has && r.values.includes(labels[r.key]);
      case "ne":
        return !has || !r.values.includes(labels[r.key]);
      case "exists":
        return has;
      case "absent":
        return !has;
    }
  });
}
