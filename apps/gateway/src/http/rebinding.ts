import { BlockList, isIP } from "node:net";

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet("127.0.0.0", 8, "ipv4");
LOOPBACK.addAddress("::1", "ipv6");

/**
 * A loopback address of this host: IPv4 127/8 or IPv6 ::1, in any spelling (`::ffff:127.0.0.1`,
 * `::ffff:7f00:1` — how the URL parser writes the former —, `0:0:0:0:0:0:0:1`).
 */
export function isLoopbackAddress(address: string | undefined): boolean {
  if (!address) return false;
  const family = isIP(address);
  return family !== 0 && LOOPBACK.check(address, family === 4 ? "ipv4" : "ipv6");
}

function isLoopbackName(hostname: string): boolean {
  // `localhost.` is the same name as `localhost` (a fully qualified name's root dot).
  const name = hostname.replace(/\.$/, "");
  return name === "localhost" || isLoopbackAddress(name.replace(/^\[|\]$/g, ""));
}

/**
 * DNS-rebinding and cross-site protection for a gateway reached on loopback: a web page whose name was
 * re-pointed at 127.0.0.1 still sends its own name as `Host` (and its origin as `Origin`), and a page
 * of another site sends its origin, so both must be loopback names. Port-agnostic: the port is not
 * what an attacker controls. Undefined: allowed. Checked on `/mcp` and on WebSocket upgrades.
 */
export function rebindingProblem(host: string | undefined, origin: string | undefined): string | undefined {
  if (!host) return "Host header: required";
  let hostname: string;
  try {
    hostname = new URL(`http://${host}`).hostname;
  } catch {
    return `Host header: not a host name (${host})`;
  }
  if (!isLoopbackName(hostname)) return `Host header: ${hostname} is not a loopback name`;
  if (origin === undefined) return undefined;
  let originHost: string;
  try {
    originHost = new URL(origin).hostname;
  } catch {
    return `Origin header: not an origin (${origin})`;
  }
  if (!isLoopbackName(originHost)) return `Origin header: ${origin} is not a loopback origin`;
  return undefined;
}
