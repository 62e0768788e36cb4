export * from "./events";
export * from "./frames";
export * from "./json-depth";
export * from "./json-schema";
export * from "./methods";
