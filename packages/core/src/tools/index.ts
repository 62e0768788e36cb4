export * from "./backend-port";
export * from "./tool-schemas";
