import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { Config } from "@switchboard/core";
import { type Browser, chromium } from "playwright-core";
import { defaultUiDir } from "../ui/ui-routes";

/** Debian's Chromium unless `SWITCHBOARD_CHROMIUM` names another (playwright cannot download one here). */
export const CHROMIUM = process.env.SWITCHBOARD_CHROMIUM ?? "/usr/bin/chromium";

const REPO = resolve(fileURLToPath(new URL(".", import.meta.url)), "../../../..");

/** The example config the UI tests serve (the README's). */
export const EXAMPLE_CONFIG = join(REPO, "examples/switchboard.config.json5");

/**
 * Why `suite` (a browser test file) cannot run — no browser, or the UI not built — or undefined. With
 * `SWITCHBOARD_REQUIRE_BROWSER=1` (CI) that is an error instead of a skip.
 */
export function browserTestsUnavailable(suite: string): string | undefined {
  const dir = defaultUiDir();
  const missing = !existsSync(CHROMIUM)
    ? `no browser at ${CHROMIUM} (apt-get install -y chromium)`
    : !dir || !existsSync(join(dir, "index.html"))
      ? "the web UI is not built (pnpm build)"
      : undefined;
  if (missing && process.env.SWITCHBOARD_REQUIRE_BROWSER === "1")
    throw new Error(`SWITCHBOARD_REQUIRE_BROWSER=1 but ${missing}`);
  if (missing)
    console.warn(`[${suite}] skipped: ${missing}. Set SWITCHBOARD_REQUIRE_BROWSER=1 to fail instead.`);
  return missing;
}

/** Headless Chromium with the flags this machine needs (no sandbox, no GPU, no network of its own). */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--no-first-run",
    ],
  });
}

/**
 * The example config the UI tests run, quiet, plus a `client` token that may act for the webchat
 * conversations only (`webchat-viewer`).
 */
export function withWebchatViewer(config: Config, clientToken: string): Config {
  return {
    ...config,
    auth: {
      ...config.auth,
      tokens: [
        ...config.auth.tokens,
        {
          name: "webchat-viewer",
          token: clientToken,
          role: "client" as const,
          sessions: ["agent:main:webchat:*"],
        },
      ],
    },
    logging: { ...config.logging, level: "silent" as const },
  };
}
