/**
 * The API side of test-fanout, in TypeScript: the port of the Rust seed's
 * `src/admission.rs`, deciding exactly what it decides (the same webhooks,
 * verdicts, messages and defaults; tests/e2e/tests/admission.rs checks the
 * two builds declare the same webhooks and CRD, and runs the same kubectl
 * cases against both).
 *
 * | webhook | kind | when | what |
 * |---|---|---|---|
 * | `test` | validating | create | `spec.image` is an image reference; each of `spec.clusters` is a cluster the plugin fans out to |
 * | `defaults` | mutating | create, update | `spec.image` without a tag or digest gets `:latest` (again on an update: a manifest applied again as written keeps the immutable spec as stored) |
 *
 * The CRD (crd.json, the Rust seed's) says in CEL what needs no webhook: an
 * image is given, no cluster twice, the spec is immutable.
 */
import { type Admission, AdmissionError, type AdmissionRequest, AdmissionRule, type Context, Mutation, Verdict } from "@rekon/sdk";
import { FANOUT_SETTINGS, type FanoutSettings, type Test, TestKind, fanoutClusters } from "./plugin.js";

export const VALIDATE_RULE = "test";
export const DEFAULT_RULE = "defaults";
export const DEFAULT_TAG = "latest";

// --- image references ---------------------------------------------------------
//
// A line-for-line port of the parser the Rust seed uses (oci-spec 0.10,
// `distribution::Reference`, itself the distribution project's grammar):
// the port must accept, refuse and default exactly what the seed does,
// with the same messages, so an npm parser of the Go grammar (whose checks
// and messages differ from oci-spec's) would not do. `\w` is the Rust regex
// crate's Unicode `\w`; `[[:xdigit:]]` is spelled out.
const W = String.raw`[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]`;
const REFERENCE = new RegExp(
  String.raw`^((?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))+)?(?::[0-9]+)?/)?[a-z0-9]+(?:(?:(?:[._]|__|[-]*)[a-z0-9]+)+)?(?:(?:/[a-z0-9]+(?:(?:(?:[._]|__|[-]*)[a-z0-9]+)+)?)+)?)(?::(` +
    W +
    String.raw`[` +
    W.slice(1, -1) +
    String.raw`.-]{0,127}))?(?:@([A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9A-Fa-f]{32,}))?$`,
  "u",
);
const NAME_TOTAL_LENGTH_MAX = 255;
const DIGEST_LENGTHS: Record<string, number> = { sha256: 64, sha384: 96, sha512: 128 };

/** An image reference as oci-spec parses it: the tag defaulted when neither tag nor digest is given. */
export interface Reference {
  registry: string;
  repository: string;
  tag?: string;
  digest?: string;
}

/** Why a string is not an image reference (oci-spec's `ParseError`, its message). */
export class ParseError extends Error {
  override name = "ParseError";
}

/** Parses `s` as oci-spec's `Reference::try_from` does; throws a {@link ParseError} with its message. */
export function parseReference(s: string): Reference {
  if (s === "") throw new ParseError("repository name must have at least one component");
  const m = REFERENCE.exec(s);
  if (m === null) throw new ParseError("invalid reference format");
  const name = m[1] as string;
  let tag = m[2];
  const digest = m[3];
  if (tag === undefined && digest === undefined) tag = DEFAULT_TAG;
  const [registry, repository] = splitDomain(name);
  // The grammar admits only ASCII in a name: its length is Rust's `len()` (bytes).
  if (repository.length > NAME_TOTAL_LENGTH_MAX) {
    throw new ParseError(`repository name must not be more than ${NAME_TOTAL_LENGTH_MAX} characters`);
  }
  if (digest !== undefined) {
    const colon = digest.indexOf(":");
    if (colon < 0) throw new ParseError("invalid checksum digest format");
    const want = DIGEST_LENGTHS[digest.slice(0, colon)];
    if (want === undefined) throw new ParseError("unsupported digest algorithm");
    if (digest.length - colon - 1 !== want) throw new ParseError("invalid checksum digest length");
  }
  const out: Reference = { registry, repository };
  if (tag !== undefined) out.tag = tag;
  if (digest !== undefined) out.digest = digest;
  return out;
}

function splitDomain(name: string): [string, string] {
  const slash = name.indexOf("/");
  let domain = "docker.io";
  let remainder = name;
  if (slash >= 0) {
    const left = name.slice(0, slash);
    if (left.includes(".") || left.includes(":") || left === "localhost") {
      domain = left;
      remainder = name.slice(slash + 1);
    }
  }
  if (domain === "index.docker.io") domain = "docker.io";
  if (domain === "docker.io" && !remainder.includes("/")) remainder = `library/${remainder}`;
  return [domain, remainder];
}

// --- the checks -------------------------------------------------------------

/** A string as Rust's `{:?}` prints it (the seed's messages quote values so). */
function quoted(s: string): string {
  let out = '"';
  for (const ch of s) {
    const code = ch.codePointAt(0) as number;
    if (ch === '"' || ch === "\\") out += `\\${ch}`;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (ch === "\0") out += "\\0";
    else if (code < 0x20 || code === 0x7f) out += `\\u{${code.toString(16)}}`;
    else out += ch;
  }
  return `${out}"`;
}

type FieldError = [path: string, message: string];

/** The field error of `spec.image`, if it is not an image reference. */
export function imageError(image: string): FieldError | undefined {
  if (image === "") return ["spec.image", "Required value"];
  try {
    parseReference(image);
    return undefined;
  } catch (e) {
    // Anything else is a bug: it traps, as a panic would in Rust.
    if (!(e instanceof ParseError)) throw e;
    return ["spec.image", `Invalid value: ${quoted(image)}: ${e.message}`];
  }
}

/** `image` with `:latest` when it is a reference without tag or digest; else undefined. */
export function defaultedImage(image: string): string | undefined {
  let reference: Reference;
  try {
    reference = parseReference(image);
  } catch (e) {
    if (!(e instanceof ParseError)) throw e;
    return undefined;
  }
  const tagged = reference.tag !== undefined && image.endsWith(`:${reference.tag}`);
  return reference.digest === undefined && !tagged ? `${image}:${DEFAULT_TAG}` : undefined;
}

/** The clusters a Test may name: the engaged ones the plugin fans out to, sorted. */
export function knownClusters(ctx: Context, s: FanoutSettings): string[] {
  const fanout = fanoutClusters(s);
  return ctx
    .clusters()
    .map((c) => c.name)
    .filter((name) => fanout.tag !== "named" || fanout.val.includes(name))
    .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

/** A field error per name of `named` not in `known`. */
export function clusterErrors(named: string[], known: string[]): FieldError[] {
  const supported = known.map(quoted).join(", ");
  return named.flatMap((name, i): FieldError[] =>
    known.includes(name) ? [] : [[`spec.clusters[${i}]`, `Unsupported value: ${quoted(name)}: supported values: ${supported}`]],
  );
}

/** Allowed without errors; else denied as the API server denies an invalid object. */
export function invalid(name: string, errors: FieldError[]): Verdict {
  if (errors.length === 0) return Verdict.allow();
  const each = errors.map(([p, m]) => `${p}: ${m}`);
  const listed = each.length === 1 ? each[0] : `[${each.join(", ")}]`;
  return errors.reduce(
    (v, [path, message]) => v.withField(path, message),
    Verdict.deny(`Test.job.lailin.xyz ${quoted(name)} is invalid: ${listed}`).withCode(422),
  );
}

/**
 * The request's Test. One the CRD's schema would refuse (no string image,
 * clusters not strings) is a bad request (400), as the Rust seed's typed
 * decoding refuses it (with serde's wording there).
 */
function decode(req: AdmissionRequest): Test | undefined {
  const test = req.object as Test | undefined;
  if (test === undefined) return undefined;
  const spec = test.spec as Partial<Test["spec"]> | undefined;
  if (typeof spec?.image !== "string") throw new AdmissionError("spec.image: a string is required");
  if (spec.clusters != null && (!Array.isArray(spec.clusters) || spec.clusters.some((c) => typeof c !== "string"))) {
    throw new AdmissionError("spec.clusters: a list of strings is required");
  }
  return test;
}

export const testFanoutAdmission: Admission = {
  rules: () => [
    AdmissionRule.validate(VALIDATE_RULE, TestKind).withOperations("create"),
    AdmissionRule.mutate(DEFAULT_RULE, TestKind).withOperations("create", "update"),
  ],

  validate(ctx: Context, req: AdmissionRequest): Verdict {
    const test = decode(req);
    if (test === undefined) return Verdict.allow();
    const errors: FieldError[] = [];
    const image = imageError(test.spec.image);
    if (image !== undefined) errors.push(image);
    const named = test.spec.clusters;
    if (named != null) errors.push(...clusterErrors(named, knownClusters(ctx, ctx.settings(FANOUT_SETTINGS))));
    return invalid(req.name, errors);
  },

  mutate(_ctx: Context, req: AdmissionRequest): Mutation {
    const test = decode(req);
    let image = test === undefined ? undefined : defaultedImage(test.spec.image);
    // An update keeps the image as stored (see the Rust seed's `mutate`).
    if (req.operation === "update" && image !== (req.oldObject as Test | undefined)?.spec?.image) image = undefined;
    if (test === undefined || image === undefined) return Mutation.unchanged();
    return Mutation.object({ ...test, spec: { ...test.spec, image } });
  },
};
