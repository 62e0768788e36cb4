export * from "./labels-config";
export * from "./level";
export * from "./taint";
