import { defineConfig } from "vite";

// The UI is served by the gateway at /ui/ from dist/: no dev server, no CDN, no inline script (the
// gateway's Content-Security-Policy forbids it), so the module-preload polyfill is left out.
export default defineConfig({
  root: "src",
  base: "/ui/",
  publicDir: false,
  oxc: { jsx: { runtime: "automatic", importSource: "preact" } },
  build: {
    outDir: "../dist",
    emptyOutDir: true,
    target: "es2022",
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    reportCompressedSize: true,
  },
});
