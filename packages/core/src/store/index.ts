export * from "./interfaces";
export * from "./run-record";
export * from "./session-entry";
export * from "./transcript-entry";
