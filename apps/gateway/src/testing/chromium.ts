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
