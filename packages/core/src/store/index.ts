export * from "./interfaces";
export * from "./memory-store";
export * from "./run-record";
export * from "./session-entry";
export * from "./store-rules";
export * from "./transcript-entry";
