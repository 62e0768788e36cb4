/** Test helpers: storage-fault injection for the file store (process-wide; never in production). */
export { type FaultHook, type FaultOp, setFaultHook } from "./fs-io";
