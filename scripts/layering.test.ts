import { execFileSync } from "node:child_process";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

// The layering rules live in biome.json (lint, run by CI) and packages/core/tsconfig.json (typecheck).
// These tests run the real configuration on deliberately bad files, so a rule that silently stops
// matching (a renamed folder, a biome upgrade) fails here rather than letting a bad import through.

const repo = fileURLToPath(new URL("..", import.meta.url));
const biomeBin = createRequire(import.meta.url).resolve("@biomejs/biome/bin/biome");

let dir: string;

function write(relativePath: string, text: string): void {
  const path = join(dir, relativePath);
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, text);
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "switchboard-layering-"));
});

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

interface Diagnostic {
  category: string;
  location: { path: string };
}

/** Layering diagnostics of `biome lint` over the fixture tree, as `path → rules`. */
function layeringViolations(): Record<string, string[]> {
  copyFileSync(join(repo, "biome.json"), join(dir, "biome.json"));
  let output: string;
  try {
    output = execFileSync(
      process.execPath,
      [biomeBin, "lint", "--reporter=json", "--max-diagnostics=none", "."],
      {
        cwd: dir,
        encoding: "utf8",
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
  } catch (error) {
    // biome exits non-zero when a rule reports an error; the report is still on stdout.
    output = (error as { stdout: string }).stdout;
  }
  const report = JSON.parse(output) as { diagnostics: Diagnostic[] };
  const found: Record<string, string[]> = {};
  for (const diagnostic of report.diagnostics) {
    const rule = diagnostic.category.replace(/^lint\/\w+\//, "");
    if (rule !== "noNodejsModules" && rule !== "noRestrictedImports") continue;
    const path = diagnostic.location.path.replaceAll("\\", "/");
    found[path] = [...(found[path] ?? []), rule];
  }
  return found;
}

describe("import rules (biome.json)", () => {
  it("refuse Node modules in core and apps in packages, and allow them elsewhere", () => {
    write(
      "packages/core/src/node-fs.ts",
      'import { readFile } from "node:fs";\nexport const f = readFile;\n',
    );
    write("packages/core/src/bare-path.ts", 'import { join } from "path";\nexport const j = join;\n');
    write("packages/core/src/dynamic.ts", 'export const load = () => import("node:child_process");\n');
    write("packages/core/src/pure.ts", 'import { x } from "./x";\nexport const y = x;\n');
    write(
      "packages/core/src/pure.test.ts",
      'import { createHmac } from "node:crypto";\nexport const h = createHmac;\n',
    );
    write(
      "packages/tools/src/app-by-name.ts",
      'import { run } from "@switchboard/agent";\nexport const r = run;\n',
    );
    write(
      "packages/tools/src/app-subpath.ts",
      'import { g } from "@switchboard/gateway/dist/x.js";\nexport const h = g;\n',
    );
    write(
      "packages/store-fs/src/app-by-path.ts",
      'import { g } from "../../../apps/gateway/src/gateway";\nexport const h = g;\n',
    );
    write("packages/client-sdk/src/re-export.ts", 'export { run } from "@switchboard/agent";\n');
    write(
      "packages/store-fs/src/node-ok.ts",
      'import { readFile } from "node:fs/promises";\nexport const f = readFile;\n',
    );
    write(
      "apps/gateway/src/app-ok.ts",
      'import { readFile } from "node:fs";\nimport { run } from "@switchboard/agent";\nexport const f = [readFile, run];\n',
    );

    expect(layeringViolations()).toEqual({
      "packages/core/src/node-fs.ts": ["noNodejsModules"],
      "packages/core/src/bare-path.ts": ["noNodejsModules"],
      "packages/core/src/dynamic.ts": ["noNodejsModules"],
      "packages/tools/src/app-by-name.ts": ["noRestrictedImports"],
      "packages/tools/src/app-subpath.ts": ["noRestrictedImports"],
      "packages/store-fs/src/app-by-path.ts": ["noRestrictedImports"],
      "packages/client-sdk/src/re-export.ts": ["noRestrictedImports"],
    });
  });
});

describe("package manifests", () => {
  it("no package under packages/ depends on an app", () => {
    const manifest = (path: string) =>
      JSON.parse(readFileSync(join(repo, path), "utf8")) as {
        name: string;
        dependencies?: Record<string, string>;
        devDependencies?: Record<string, string>;
        peerDependencies?: Record<string, string>;
      };
    const apps = new Set(
      readdirSync(join(repo, "apps")).map((name) => manifest(`apps/${name}/package.json`).name),
    );
    const offending = readdirSync(join(repo, "packages")).flatMap((name) => {
      const { dependencies, devDependencies, peerDependencies } = manifest(`packages/${name}/package.json`);
      return Object.keys({ ...dependencies, ...devDependencies, ...peerDependencies })
        .filter((dependency) => apps.has(dependency))
        .map((dependency) => `packages/${name} -> ${dependency}`);
    });
    expect(apps.size).toBeGreaterThan(0);
    expect(offending).toEqual([]);
  });
});

describe("core's compiler options (packages/core/tsconfig.json)", () => {
  function typeErrors(source: string): string[] {
    const file = join(dir, "core-fixture.ts");
    writeFileSync(file, source);
    const configPath = join(repo, "packages/core/tsconfig.json");
    const { config } = ts.readConfigFile(configPath, ts.sys.readFile);
    const parsed = ts.parseJsonConfigFileContent(config, ts.sys, dirname(configPath));
    const program = ts.createProgram({
      rootNames: [file, join(repo, "packages/core/src/runtime-globals.d.ts")],
      options: { ...parsed.options, noEmit: true },
    });
    return ts
      .getPreEmitDiagnostics(program)
      .map((diagnostic) => ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n"));
  }

  it("know neither Node nor the DOM", () => {
    const errors = typeErrors(
      'export const home = process.env.HOME;\nexport const bytes = Buffer.from("x");\nexport const title = document.title;\n',
    );
    expect(errors).toEqual([
      expect.stringContaining("Cannot find name 'process'"),
      expect.stringContaining("Cannot find name 'Buffer'"),
      expect.stringContaining("Cannot find name 'document'"),
    ]);
  });

  it("pull in no Node declarations through a dependency of core's sources", () => {
    const configPath = join(repo, "packages/core/tsconfig.json");
    const { config } = ts.readConfigFile(configPath, ts.sys.readFile);
    const parsed = ts.parseJsonConfigFileContent(config, ts.sys, dirname(configPath));
    const program = ts.createProgram({ rootNames: parsed.fileNames, options: parsed.options });
    const files = program.getSourceFiles().map((file) => file.fileName);
    expect(files.some((file) => file.endsWith("packages/core/src/index.ts"))).toBe(true);
    expect(files.filter((file) => file.includes("/@types/node/"))).toEqual([]);
  });

  it("know the web-platform globals core uses", () => {
    const errors = typeErrors(
      'export const id = crypto.randomUUID();\nexport const now = performance.now();\nexport const size = new TextEncoder().encode("x").length;\nexport const copy = structuredClone({ a: 1 });\n',
    );
    expect(errors).toEqual([]);
  });
});

describe("type-checked sources", () => {
  const workspaces = ["packages", "apps"].flatMap((parent) =>
    readdirSync(join(repo, parent)).map((name) => `${parent}/${name}`),
  );

  function tsFiles(folder: string): string[] {
    if (!existsSync(folder)) return [];
    return readdirSync(folder, { recursive: true, encoding: "utf8" })
      .filter((name) => name.endsWith(".ts"))
      .map((name) => join(folder, name));
  }

  /** Files the package's `typecheck` script compiles: tsconfig.json, plus tsconfig.test.json if it runs it. */
  function checkedFiles(workspace: string): Set<string> {
    const script =
      (
        JSON.parse(readFileSync(join(workspace, "package.json"), "utf8")) as {
          scripts: Record<string, string>;
        }
      ).scripts.typecheck ?? "";
    const configs = ["tsconfig.json"];
    if (script.includes("tsconfig.test.json")) configs.push("tsconfig.test.json");
    const files = new Set<string>();
    for (const name of configs) {
      const { config } = ts.readConfigFile(join(workspace, name), ts.sys.readFile);
      for (const file of ts.parseJsonConfigFileContent(config, ts.sys, workspace).fileNames) files.add(file);
    }
    return files;
  }

  it.each(workspaces)("%s: typecheck compiles every source and test file", (name) => {
    const workspace = join(repo, name);
    const checked = checkedFiles(workspace);
    const missed = [...tsFiles(join(workspace, "src")), ...tsFiles(join(workspace, "test"))].filter(
      (file) => !checked.has(file),
    );
    expect(missed).toEqual([]);
  });
});
