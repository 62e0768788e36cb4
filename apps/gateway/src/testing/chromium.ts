import type { Config } from "@switchboard/core";
import { type Browser, chromium } from "playwright-core";

/** Debian's Chromium unless `SWITCHBOARD_CHROMIUM` names another (playwright cannot download one here). */
export const CHROMIUM = process.env.SWITCHBOARD_CHROMIUM ?? "/usr/bin/chromium";

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
