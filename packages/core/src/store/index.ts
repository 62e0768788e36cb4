export * from "./interfaces";
export * from "./run-record";
export * from "./session-entry";
export * from "./transcript-entry";
export * from "./memory-store";
export * from "./store-rules";
