export * from "./level";
