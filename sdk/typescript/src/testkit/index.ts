/** The native test kit: {@link World} and recorded-case replay. Node only. */
export * from "./world.js";
export * from "./cases.js";
export * from "./wire.js";
export * from "./selector.js";
export * from "./inspect.js";
