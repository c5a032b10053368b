// Serves the Proxy Worker locally through Miniflare with a local D1, for tests and development.
//
//   D1_PROXY_TOKEN=secret node scripts/local-server.mjs [--persist DIR] [--port N]
//       [--host 127.0.0.1] [--max-body-bytes N] [--exit-on-stdin-close]
//
// Prints one JSON line {"url": "http://127.0.0.1:PORT/"} once it accepts requests, then runs
// until SIGTERM/SIGINT (or stdin closing, with --exit-on-stdin-close, so a test runner that
// dies cannot leave it behind). Without --persist the database lives in memory.
// The token comes from the environment, never argv, so it does not show in `ps`.

import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Miniflare } from "miniflare";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const { values: options } = parseArgs({
  options: {
    persist: { type: "string" },
    port: { type: "string", default: "0" },
    host: { type: "string", default: "127.0.0.1" },
    "max-body-bytes": { type: "string" },
    "exit-on-stdin-close": { type: "boolean", default: false },
  },
});

const token = process.env.D1_PROXY_TOKEN;
if (!token) {
  console.error("local-server: set D1_PROXY_TOKEN in the environment");
  process.exit(2);
}

// One source of truth for the compatibility date: wrangler.toml.
const toml = readFileSync(join(root, "wrangler.toml"), "utf8");
const compatibilityDate = /^compatibility_date\s*=\s*"([^"]+)"/m.exec(toml)?.[1];
const defaultMaxBody = /^MAX_BODY_BYTES\s*=\s*"(\d+)"/m.exec(toml)?.[1];

const mf = new Miniflare({
  modules: true,
  scriptPath: join(root, "src", "index.js"),
  compatibilityDate,
  d1Databases: { DB: "feedcollector-local" },
  d1Persist: options.persist ?? false,
  bindings: {
    D1_PROXY_TOKEN: token,
    MAX_BODY_BYTES: options["max-body-bytes"] ?? defaultMaxBody ?? "",
  },
  host: options.host,
  port: Number(options.port),
  cf: false,
});

let stopping = false;
async function stop(code) {
  if (stopping) return;
  stopping = true;
  try {
    await mf.dispose();
  } finally {
    process.exit(code);
  }
}

process.on("SIGTERM", () => stop(0));
process.on("SIGINT", () => stop(0));
if (options["exit-on-stdin-close"]) {
  process.stdin.on("end", () => stop(0));
  process.stdin.on("error", () => stop(0));
  process.stdin.resume();
}

try {
  const url = await mf.ready;
  process.stdout.write(`${JSON.stringify({ url: url.href })}\n`);
} catch (problem) {
  if (!stopping) {
    console.error(`local-server: Miniflare failed to start: ${problem?.stack ?? problem}`);
    await stop(1);
  }
}
