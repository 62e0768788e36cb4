export {
  type LoadConfigOptions,
  type LoadedConfig,
  loadConfig,
  loadConfigFile,
  resolveDataDir,
} from "./load-config";
