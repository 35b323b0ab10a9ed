/**
 * Converting a plugin's CRDs between versions: the conversion webhook the
 * host serves (`/convert/<plugin>`) from the same component as the
 * reconcile side.
 *
 * A {@link Convert} declares in `conversions()` which of its CRDs it
 * converts (every version of each: the API server converts between any
 * two) and turns one object into the desired apiVersion in `convert`.
 * Export it beside the plugin: `export const conversion =
 * exportConversion(widgetsConversion)` (`@rekon/sdk/component`); a
 * component without that export converts nothing. Calls read the host's
 * caches through the {@link Context} and never write.
 *
 * The converted object must keep the kind, name, namespace and uid and
 * carry the desired apiVersion (the host checks, as the API server does);
 * keep the original's `metadata` as it is. A {@link ConversionError} (or a
 * `ReadError` / `ReconcileError`) fails the API server's request with its
 * message. Anything else thrown fails it too: the test kit throws it on
 * (a bug to fix), and in a component QuickJS returns it as the error
 * result with its message (StarlingMonkey traps).
 *
 * The declaration is checked once, by the host at load
 * (`rekon_rules::conversion`).
 */
import type { Context } from "./context.js";
import { ReadError, ReconcileError } from "./errors.js";
import type { KubeObject } from "./resources.js";
import type { ResourceType } from "./types.js";

/** One CRD the plugin converts, between all its versions. */
export interface Conversion {
  group: string;
  kind: string;
  plural: string;
  /** Exactly the CRD's versions (at least two). */
  versions: string[];
}

/** The CRD of `kind` (the resource type of any of its versions), converted between `versions`. */
export function conversionOf(kind: ResourceType, ...versions: string[]): Conversion {
  return { group: kind.group, kind: kind.kind, plural: kind.plural, versions: [...versions] };
}

/** The version of an apiVersion (`v1alpha1` of `example.dev/v1alpha1`). */
export function versionOf(apiVersion: string): string {
  const slash = apiVersion.lastIndexOf("/");
  return slash < 0 ? apiVersion : apiVersion.slice(slash + 1);
}

/** One object to convert. */
export interface ConversionRequest<T extends KubeObject = KubeObject> {
  /** The object, at its version. */
  object: T;
  /** The apiVersion it is converted to (`group/version`). */
  desiredApiVersion: string;
}

/** A request converting `object` to `desiredApiVersion` (for tests). */
export function conversionRequest<T extends KubeObject>(desiredApiVersion: string, object: T): ConversionRequest<T> {
  return { object, desiredApiVersion };
}

/** Thrown from `convert`: the API server's request fails with `message`. */
export class ConversionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConversionError";
  }
}

/** The conversion side of a plugin. */
export interface Convert {
  /** The CRDs the plugin converts; called once per load. */
  conversions(): Conversion[];
  /** `req.object` at `req.desiredApiVersion`. */
  convert(ctx: Context, req: ConversionRequest): KubeObject;
}

/** The outcome of one `convert` as the host takes it. */
export type Converted = { ok: KubeObject } | { error: string };

/** `convert` as the host calls it: a refusal for what is thrown on purpose, a trap for the rest (see the module). */
export function runConvert(conversion: Convert, ctx: Context, req: ConversionRequest): Converted {
  try {
    return { ok: conversion.convert(ctx, req) };
  } catch (e) {
    if (e instanceof ConversionError || e instanceof ReadError || e instanceof ReconcileError) return { error: e.message };
    throw e;
  }
}
