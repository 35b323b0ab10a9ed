/**
 * Typed plugin settings: what an operator configures per plugin instance
 * (`spec.settings` of a Plugin object, or `NAME.settings.json` beside a
 * plugin file). The same protocol as the Rust SDK's `rekon_sdk::settings`:
 *
 * - a plugin declares a {@link SettingsType} with
 *   `Registration.withSettings(type)`: a JSON Schema (what `rekon plugin
 *   inspect` prints) and a `parse` function turning the raw JSON
 *   (`undefined` when none was given) into typed settings, throwing to
 *   refuse them;
 * - at every load the SDK parses what the host gives and refuses the load
 *   with `invalid settings: <reason>` (the host reports `InvalidSettings`
 *   and keeps the serving version); settings given to a plugin that
 *   declares none are refused;
 * - `ctx.settings(type)` reads them in `reconcile`/`map`, and
 *   {@link settings} in `register`.
 */
import { ReconcileError } from "./errors.js";

/**
 * The start of a `register` error refusing the settings. The same literal
 * as the host's `rekon_rules::settings::REFUSAL_PREFIX` (documented in
 * `wit/host.wit`; a test checks the text there).
 */
export const SETTINGS_REFUSAL_PREFIX = "invalid settings: ";

/** A settings type: its JSON Schema and how raw JSON becomes it. */
export interface SettingsType<S> {
  /** JSON Schema (draft 2020-12) of the settings. */
  readonly schema: Record<string, unknown>;
  /** The settings from raw JSON (`undefined`: none given, use defaults). Throw to refuse. */
  parse(raw: unknown): S;
}

/** Parses settings text with `type`; throws the reason. */
export function parseSettings<S>(type: SettingsType<S>, text: string | undefined): S {
  return type.parse(text === undefined ? undefined : JSON.parse(text));
}

/**
 * Where a call's settings come from, and where their schema goes: the
 * host, or the test kit's world (every context `Backend` is one).
 */
export interface SettingsHost {
  /** The settings of this load (JSON text), if any were given. */
  settings(): string | undefined;
  /** Hands the settings' JSON Schema to the host (during `register`). */
  declareSettingsSchema(schema: string): void;
}

let current: SettingsHost | undefined;

/** Runs `f` with `backend` as the current call's (for {@link settings}). */
export function withBackend<R>(backend: SettingsHost, f: () => R): R {
  const previous = current;
  current = backend;
  try {
    return f();
  } finally {
    current = previous;
  }
}

/** The settings of the current call as `type` (use it in `register`). Throws a terminal `ReconcileError`. */
export function settings<S>(type: SettingsType<S>): S {
  try {
    return parseSettings(type, current?.settings());
  } catch (e) {
    throw ReconcileError.terminal(`${SETTINGS_REFUSAL_PREFIX}${e instanceof Error ? e.message : String(e)}`);
  }
}

/**
 * What `register` checks, as the host's SDKs all do: settings given to a
 * plugin that declares none are refused; declared ones must parse; the
 * schema is handed to the host. Throws an `Error` with the refusal.
 */
export function checkSettingsAtRegister(
  reg: { readonly settingsType?: SettingsType<unknown> },
  backend: SettingsHost,
): void {
  const given = backend.settings();
  const type = reg.settingsType;
  if (type === undefined) {
    if (given !== undefined) {
      throw new Error(`${SETTINGS_REFUSAL_PREFIX}this plugin takes no settings (it declares no settings type)`);
    }
    return;
  }
  try {
    parseSettings(type, given);
  } catch (e) {
    throw new Error(`${SETTINGS_REFUSAL_PREFIX}${e instanceof Error ? e.message : String(e)}`);
  }
  backend.declareSettingsSchema(JSON.stringify(type.schema));
}
