export * from "./agent-id";
export * from "./canonicalize";
export * from "./classify";
export * from "./parse-key";
export * from "./validate-key";
