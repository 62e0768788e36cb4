export {
  type LoadConfigOptions,
  type LoadedConfig,
  loadConfig,
  resolveDataDir,
} from "@switchboard/config-loader";
export { Gateway, type GatewayOptions, keyPatternMatches, startGateway } from "./gateway";
export { type AppLoggerOptions, createAppLogger, type LogLevel } from "./logger";
export { VERSION } from "./version";
