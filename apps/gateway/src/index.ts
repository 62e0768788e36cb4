export { Gateway, type GatewayOptions, keyPatternMatches, startGateway } from "./gateway";
export { VERSION } from "./version";
