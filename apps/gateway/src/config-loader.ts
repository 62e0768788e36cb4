// The config file format is shared by the gateway and the agent worker; the loader lives with the
// agent (which the gateway depends on) so both read files the same way.
export { type LoadConfigOptions, type LoadedConfig, loadConfig, resolveDataDir } from "@switchboard/agent";
